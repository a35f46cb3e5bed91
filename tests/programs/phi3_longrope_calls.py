"""transformers 4.52.4's Phi-3 with LongRoPE, tiny and seeded: 10 calls whose positions mix
short and long (the rotary update switches buffers), compiled against an eager twin.
Prints the graphs and breaks over the calls, whether every call's logits are bit-identical,
and whether after every call the rotary embedding holds the same objects as the twin's
(``inv_freq is original_inv_freq`` / ``is long_inv_freq``, ``long_inv_freq`` made once).

    python phi3_longrope_calls.py BACKEND [--fullgraph]
"""

import sys

import torch
import torch._dynamo.utils as dynamo_utils
from transformers import Phi3Config, Phi3ForCausalLM

backend_name = sys.argv[1]


def build():
    torch.manual_seed(0)
    config = Phi3Config(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
        original_max_position_embeddings=32,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [2.0, 3.0, 4.0, 5.0]},
        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return Phi3ForCausalLM(config).eval()


class Count:
    def __init__(self, inner):
        self.graphs, self.inner = 0, inner

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        if self.inner == "eager":
            return gm.forward
        from torch._dynamo import lookup_backend
        return lookup_backend(self.inner)(gm, example_inputs)


def state(rotary) -> tuple:
    """Which objects the rotary embedding's attributes are, as the program can tell."""
    long_made = hasattr(rotary, "long_inv_freq")
    return (rotary.inv_freq is rotary.original_inv_freq, long_made, long_made and rotary.inv_freq is rotary.long_inv_freq)


reference, model = build(), build()
backend = Count(backend_name)
torch._dynamo.reset()
dynamo_utils.counters.clear()
compiled = torch.compile(model, backend=backend, fullgraph="--fullgraph" in sys.argv, dynamic=False)
ids = torch.randint(3, 100, (2, 8), generator=torch.Generator().manual_seed(1))
starts = [0, 40, 0, 5, 60, 2, 40, 0, 90, 1]
same = identical = True
made = None
for start in starts:
    positions = torch.arange(start, start + 8)[None].expand(2, -1)
    with torch.no_grad():
        expected = reference(input_ids=ids, position_ids=positions, use_cache=False).logits
        actual = compiled(input_ids=ids, position_ids=positions, use_cache=False).logits
    same &= torch.equal(expected, actual)
    r, m = reference.model.rotary_emb, model.model.rotary_emb
    identical &= state(r) == state(m)
    if hasattr(m, "long_inv_freq"):
        made = m.long_inv_freq if made is None else made
        identical &= m.long_inv_freq is made
breaks = sum(dynamo_utils.counters["graph_break"].values())
print(f"{backend_name}: graphs {backend.graphs}, graph breaks {breaks} over {len(starts)} calls; "
      f"bit-identical {same}; same objects {identical}")
