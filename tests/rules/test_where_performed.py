"""Where's performed choice (rules/where/performed.py, runtime/performed_choice.py): arms
that choose which existing object an attribute holds run when the graph runs, with the
condition the graph computed. The paper's Figure 3 (LongRoPE) and transformers' own
LongRoPE update: one graph over calls that mix short and long positions, the same
values bit for bit, and the same objects in the attributes after every call."""

from __future__ import annotations

import pathlib
import textwrap

import pytest
import torch

from graphmend.core.legality import condition_id
from graphmend.runtime.store import reset, store
from helpers import (
    CountingAotEager,
    assert_equivalent,
    breaks,
    finding_reasons,
    original_and_mended,
)

ROTARY = textwrap.dedent(
    """
    import torch

    def compute_longrope(config, device, seq_len=None, **rope_kwargs):
        if len(rope_kwargs) > 0:
            raise ValueError(f"Unexpected arguments {rope_kwargs}")
        factors = config["long_factor"] if seq_len and seq_len > config["original"] else config["short_factor"]
        ext = torch.tensor(factors, dtype=torch.float32, device=device)
        inv_freq = 1.0 / (ext * 10000 ** (torch.arange(0, 8, 2, dtype=torch.int64, device=device).float() / 8))
        return inv_freq, 1.0

    def longrope_frequency_update(self, position_ids, device):
        seq_len = torch.max(position_ids) + 1
        if hasattr(self.config_object, "original_max_position_embeddings"):
            original_max_position_embeddings = self.config_object.original_max_position_embeddings
        else:
            original_max_position_embeddings = 16
        if seq_len > original_max_position_embeddings:
            if not hasattr(self, "long_inv_freq"):
                self.long_inv_freq, _ = self.rope_init_fn(
                    self.config, device, seq_len=original_max_position_embeddings + 1
                )
            self.register_buffer("inv_freq", self.long_inv_freq, persistent=False)
        else:
            self.original_inv_freq = self.original_inv_freq.to(device)
            self.register_buffer("inv_freq", self.original_inv_freq, persistent=False)

    class Rotary(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = {"long_factor": [1.0, 2.0, 3.0, 4.0], "short_factor": [1.0, 1.0, 1.0, 1.0], "original": 16}
            self.config_object = type("Config", (), {"original_max_position_embeddings": 16})()
            self.rope_init_fn = compute_longrope
            inv_freq, _ = self.rope_init_fn(self.config, None)
            self.register_buffer("inv_freq", inv_freq, persistent=False)
            self.original_inv_freq = self.inv_freq

        def forward(self, x, position_ids):
            longrope_frequency_update(self, position_ids, device=x.device)
            freqs = position_ids[..., None].float() * self.inv_freq
            return x * torch.cos(freqs).sum(-1, keepdim=True)
    """
)

# Short and long positions, in an order that makes the memoized tensor on the 2nd call.
FIRST_POSITIONS = [0, 20, 0, 3, 30, 2, 20, 0, 25, 1]


def _state(model) -> tuple:
    """What the branch leaves for the program to see, by identity."""
    long_made = hasattr(model, "long_inv_freq")
    return (
        model.inv_freq is model.original_inv_freq,
        long_made,
        long_made and model.inv_freq is model.long_inv_freq,
    )


def run_over_calls(original_model, mended_model, backend: str, fullgraph: bool = True, length: int = 6):
    """Call both models on the same positions, the mended one compiled; after each call,
    compare values bit for bit and the attributes by identity. Returns the graphs compiled."""
    torch._dynamo.reset()
    counting = CountingAotEager() if backend == "aot_eager" else None
    if counting is None:
        from graphmend.counting import CountingBackend

        counting = CountingBackend()
    compiled = torch.compile(mended_model, backend=counting, fullgraph=fullgraph, dynamic=False)
    x = torch.randn(1, length, 1)
    made = None
    for first in FIRST_POSITIONS:
        positions = torch.arange(first, first + length)[None]
        expected = original_model(x, positions)
        actual = compiled(x, positions)
        assert torch.equal(expected, actual), first
        assert _state(mended_model) == _state(original_model), first
        assert torch.equal(mended_model.inv_freq, original_model.inv_freq)
        if hasattr(mended_model, "long_inv_freq"):
            made = mended_model.long_inv_freq if made is None else made
            assert mended_model.long_inv_freq is made  # memoized once, kept
    return counting.graphs


def test_figure_3_longrope_rewritten_keeping_which_buffer_is_inv_freq():
    original, mended, result = original_and_mended(ROTARY)
    # Each arm registers an existing buffer as ``inv_freq``: ``torch.where`` would register
    # a new tensor (``inv_freq is original_inv_freq`` turns False), so the choice is
    # performed when the graph runs.
    assert finding_reasons(result, "Where") == []
    assert any(f.rule == "Where" and f.fixed for f in result.findings)
    x = torch.randn(1, 6, 1)
    for positions in (torch.arange(6)[None], torch.arange(20, 26)[None]):
        original_model, mended_model = original.Rotary(), mended.Rotary()
        assert breaks(original_model, x, positions) >= 1
        assert breaks(mended_model, x, positions) == 0
        original_model, mended_model = original.Rotary(), mended.Rotary()
        assert_equivalent(original_model, mended_model, x, positions, backends=("eager", "aot_eager"))
        assert torch.equal(original_model.inv_freq, mended_model.inv_freq)
        assert (mended_model.inv_freq is mended_model.original_inv_freq) == (
            original_model.inv_freq is original_model.original_inv_freq
        )
        assert hasattr(mended_model, "long_inv_freq") == hasattr(original_model, "long_inv_freq")


def test_figure_3_longrope_is_rewritten_as_a_performed_choice():
    _, _, result = original_and_mended(ROTARY)
    assert finding_reasons(result, "Where") == []
    assert any(f.rule == "Where" and f.fixed for f in result.findings)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_figure_3_one_graph_over_calls_mixing_short_and_long_positions(backend):
    original, mended, _ = original_and_mended(ROTARY)
    x, positions = torch.randn(1, 6, 1), torch.arange(20, 26)[None]
    assert breaks(original.Rotary(), x, positions) >= 1
    assert breaks(mended.Rotary(), x, positions) == 0
    assert run_over_calls(original.Rotary(), mended.Rotary(), backend) == 1


def test_figure_3_eager_path_and_printed_output_unchanged():
    original, mended, _ = original_and_mended(ROTARY)
    x = torch.randn(1, 6, 1)
    for first in (0, 20):
        positions = torch.arange(first, first + 6)[None]
        assert_equivalent(original.Rotary(), mended.Rotary(), x, positions, backends=("eager", "aot_eager"))


def test_figure_3_generator_unchanged():
    original, mended, _ = original_and_mended(ROTARY)
    torch.manual_seed(3)
    run_over_calls(original.Rotary(), mended.Rotary(), "eager")
    after_mended = torch.randn(4)
    torch.manual_seed(3)
    model = original.Rotary()
    x = torch.randn(1, 6, 1)
    for first in FIRST_POSITIONS:
        model(x, torch.arange(first, first + 6)[None])
    assert torch.equal(after_mended, torch.randn(4))


# transformers 4.52.4's own LongRoPE update (modeling_rope_utils.py), mended from its
# source, on transformers' own Phi3RotaryEmbedding; the whole model is in test_examples.


def _transformers_rope_source() -> str:
    rope_utils = pytest.importorskip("transformers.modeling_rope_utils")
    text = pathlib.Path(rope_utils.__file__).read_text()
    return text.replace("from .utils import", "from transformers.utils import").replace(
        "from .configuration_utils import", "from transformers.configuration_utils import"
    )


def _phi3_rotary(update_module):
    from transformers import Phi3Config
    from transformers.models.phi3 import modeling_phi3

    # ``forward`` is ``torch.no_grad()(dynamic_rope_update(forward))``: take the plain one.
    plain_forward = modeling_phi3.Phi3RotaryEmbedding.forward.__wrapped__.__wrapped__
    rotary_class = type(
        "Phi3Rotary", (modeling_phi3.Phi3RotaryEmbedding,),
        {"forward": torch.no_grad()(update_module.dynamic_rope_update(plain_forward))},
    )
    config = Phi3Config(
        hidden_size=32, num_attention_heads=4, max_position_embeddings=64, original_max_position_embeddings=8,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [2.0, 3.0, 4.0, 5.0]},
    )
    return rotary_class(config)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_transformers_longrope_update_one_graph_bit_identical_same_objects(backend):
    original, mended, result = original_and_mended(_transformers_rope_source())
    fixed = [f for f in result.findings if f.rule == "Where" and f.fixed]
    assert [f.line for f in fixed] == [50], result.findings  # `if seq_len > original_max_position_embeddings:`
    torch._dynamo.reset()
    original_model, mended_model = _phi3_rotary(original), _phi3_rotary(mended)
    torch._dynamo.reset()
    counting = CountingAotEager() if backend == "aot_eager" else None
    if counting is None:
        from graphmend.counting import CountingBackend

        counting = CountingBackend()
    compiled = torch.compile(mended_model, backend=counting, fullgraph=True, dynamic=False)
    x = torch.randn(1, 6, 8)
    made = None
    for first in FIRST_POSITIONS:
        positions = torch.arange(first, first + 6)[None]
        expected, actual = original_model(x, positions), compiled(x, positions)
        assert all(torch.equal(a, b) for a, b in zip(expected, actual)), first
        assert _state(mended_model) == _state(original_model), first
        if hasattr(mended_model, "long_inv_freq"):
            made = mended_model.long_inv_freq if made is None else made
            assert mended_model.long_inv_freq is made
    assert counting.graphs == 1


# Must not: one named case per condition. Each is the Figure 3 rotary with one change.

def _variant(old: str, new: str) -> str:
    assert old in ROTARY
    return ROTARY.replace(old, new)


MUST_NOT_STATIC = {
    "W119_arms_write_different_attributes": _variant(
        'self.register_buffer("inv_freq", self.original_inv_freq, persistent=False)',
        'self.register_buffer("other_freq", self.original_inv_freq, persistent=False)',
    ),
    "W120_arm_prints": _variant(
        "        self.original_inv_freq = self.original_inv_freq.to(device)\n",
        "        self.original_inv_freq = self.original_inv_freq.to(device)\n        print('short')\n",
    ),
    "W121_arm_binds_a_name_read_after": _variant(
        "        self.register_buffer(\"inv_freq\", self.long_inv_freq, persistent=False)\n    else:\n",
        "        _ = 1\n        self.register_buffer(\"inv_freq\", self.long_inv_freq, persistent=False)\n    else:\n"
        "        _ = None\n",
    ).replace(
        "        self.register_buffer(\"inv_freq\", self.original_inv_freq, persistent=False)\n",
        "        self.register_buffer(\"inv_freq\", self.original_inv_freq, persistent=False)\n    return _\n",
    ),
    "W122_arm_reads_a_local_bound_on_one_path": _variant(
        "        original_max_position_embeddings = 16\n",
        "        original_max_position_embeddings = 16\n        last_limit = 16\n",
    ).replace(
        "        self.original_inv_freq = self.original_inv_freq.to(device)\n",
        "        self.original_inv_freq = self.original_inv_freq.to(device)\n        self.limit = last_limit\n",
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_STATIC))
def test_must_not_rewrite_static(name):
    original, mended, result = original_and_mended(MUST_NOT_STATIC[name])
    reasons = finding_reasons(result, "Where")
    expected = name.split("_")[0]
    if expected == "W119":
        # Not this shape: the selection's own reason is reported.
        assert reasons and condition_id(reasons[0]) == "W110", reasons
    else:
        assert reasons and condition_id(reasons[0]) == expected, reasons
    x = torch.randn(1, 6, 1)
    for first in (0, 20):
        positions = torch.arange(first, first + 6)[None]
        assert_equivalent(original.Rotary(), mended.Rotary(), x, positions)


MUST_NOT_WHILE_TRACING = {
    # The arms read a tensor: its value is in the graph, not a constant of the trace.
    "W211_arm_reads_a_tensor": _variant(
        "        self.original_inv_freq = self.original_inv_freq.to(device)\n",
        "        self.original_inv_freq = self.original_inv_freq.to(device)\n        self.last = seq_len\n",
    ),
    # The chosen attribute requires grad: the operator's copy would have none.
    "W212_attribute_requires_grad": _variant(
        "        self.register_buffer(\"inv_freq\", inv_freq, persistent=False)\n",
        "        self.register_buffer(\"inv_freq\", inv_freq.requires_grad_(), persistent=False)\n",
    ),
    # The receiver holds a parameter and grad mode is on: the operator runs without
    # autograd when the graph runs under it.
    "W213_receiver_holds_a_parameter": _variant(
        "        self.original_inv_freq = self.inv_freq\n",
        "        self.original_inv_freq = self.inv_freq\n        self.scale = torch.nn.Parameter(torch.ones(1))\n",
    ),
    # The trace writes an attribute the arms read, before the branch: TorchDynamo makes
    # the write after the graph, and the arms run inside it.
    "W214_trace_wrote_what_the_arms_read": _variant(
        "        longrope_frequency_update(self, position_ids, device=x.device)\n",
        "        self.original_inv_freq = self.original_inv_freq + 0\n"
        "        longrope_frequency_update(self, position_ids, device=x.device)\n",
    ),
    # The receiver already holds the long table, of another length: the operator's copy
    # has the short table's layout, so the arm choosing the long one could not go on.
    "W215_an_existing_choice_has_another_shape": _variant(
        "        self.original_inv_freq = self.inv_freq\n",
        "        self.original_inv_freq = self.inv_freq\n        self.long_inv_freq = torch.ones(6)\n",
    ),
    # The function returns the attribute itself: the program would get the graph's copy.
    "W301_stand_in_returned": _variant(
        "        return x * torch.cos(freqs).sum(-1, keepdim=True)\n",
        "        return x * torch.cos(freqs).sum(-1, keepdim=True), self.inv_freq\n",
    ),
    # The trace reads the memoized attribute, which the arms make only when the graph runs.
    "W302_trace_reads_the_memoized_attribute": _variant(
        "        freqs = position_ids[..., None].float() * self.inv_freq\n",
        "        freqs = position_ids[..., None].float() * self.inv_freq * float(hasattr(self, 'long_inv_freq'))\n",
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_WHILE_TRACING))
def test_must_not_perform_while_tracing(name):
    reset()
    original, mended, result = original_and_mended(MUST_NOT_WHILE_TRACING[name])
    assert finding_reasons(result, "Where") == []  # statically fine: refused while tracing
    x = torch.randn(1, 6, 1)
    for first in (20, 0):
        positions = torch.arange(first, first + 6)[None]
        original_model, mended_model = original.Rotary(), mended.Rotary()
        with torch.set_grad_enabled(name.startswith("W213")):
            assert breaks(mended_model, x, positions) == breaks(original_model, x, positions)
        assert name.split("_")[0] in {reason.condition for reason in store.trace_time_declines.values()}
        original_model, mended_model = original.Rotary(), mended.Rotary()
        with torch.set_grad_enabled(name.startswith("W213")):
            assert_equivalent(original_model, mended_model, x, positions, backends=("eager",))
    reset()


PLAIN_OWNER = textwrap.dedent(
    """
    import torch

    class Table:
        def __init__(self):
            self.short = torch.arange(4.0)
            self.table = self.short

        def update(self, x):
            if x.max() > 10:
                if not hasattr(self, "long"):
                    self.long = self.short * 3
                self.table = self.long
            else:
                self.table = self.short

        def __call__(self, x):
            self.update(x)
            return x * self.table
    """
)


def test_an_attribute_assigned_on_a_plain_object_is_chosen_by_identity_too():
    from graphmend.counting import CountingBackend

    original, mended, result = original_and_mended(PLAIN_OWNER)
    assert finding_reasons(result, "Where") == []
    original_table, mended_table = original.Table(), mended.Table()
    torch._dynamo.reset()
    counting = CountingBackend()
    compiled = torch.compile(mended_table, backend=counting, fullgraph=True)
    made = None
    for value in (1, 20, 1, 30, 2, 11):
        x = torch.full((4,), float(value))
        assert torch.equal(original_table(x), compiled(x))
        assert (mended_table.table is mended_table.short) == (original_table.table is original_table.short)
        assert hasattr(mended_table, "long") == hasattr(original_table, "long")
        if hasattr(mended_table, "long"):
            made = mended_table.long if made is None else made
            assert mended_table.long is made and (mended_table.table is made) == (value > 10)
    assert counting.graphs == 1


def test_a_compiled_choice_does_not_keep_its_receiver_alive():
    import gc
    import weakref

    from graphmend.counting import CountingBackend

    _, mended, _ = original_and_mended(ROTARY)
    model = mended.Rotary()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=CountingBackend(), fullgraph=True)
    compiled(torch.randn(1, 6, 1), torch.arange(20, 26)[None])
    alive = weakref.ref(model)
    del model, compiled
    torch._dynamo.reset()
    gc.collect()
    assert alive() is None


def test_the_compiled_form_runs_the_original_arms_in_a_function_of_the_locals_they_read():
    import ast

    _, _, result = original_and_mended(ROTARY)
    text = ast.unparse(result.tree)
    # The arms read ``self``, ``device`` and the limit; they write two more attributes,
    # which the trace must not read (W302), and choose between two (W215).
    assert "def _gm_arms_1(_gm_taken, self, device, original_max_position_embeddings):" in text
    assert (
        "__graphmend__.perform_choice(_gm_taken_1, _gm_arms_1, self, 'inv_freq', "
        "(self, device, original_max_position_embeddings), ('long_inv_freq', 'original_inv_freq'), "
        "('long_inv_freq', 'original_inv_freq'))"
    ) in text


TRAINED = ROTARY + textwrap.dedent(
    """
    class Trained(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.proj = torch.nn.Linear(1, 1)
            self.rotary = Rotary()

        def forward(self, x, position_ids):
            return self.rotary(self.proj(x), position_ids)
    """
)


def _train_over_calls(module, backend):
    """Three SGD steps with momentum per position set, compiled with ``backend`` (None:
    eagerly): losses, gradients, parameters, momentum, which object ``inv_freq`` is,
    and (graphs, breaks)."""
    from graphmend.counting import break_count_so_far, recording_graph_breaks
    from graphmend.torch_adapter import graph_break_counters

    reset()
    torch._dynamo.reset()
    graph_break_counters().clear()
    model = module.Trained()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    counting = CountingAotEager() if backend == "aot_eager" else None
    if backend == "eager":
        from graphmend.counting import CountingBackend

        counting = CountingBackend()
    step = model if backend is None else torch.compile(model, backend=counting, dynamic=False)
    x = torch.randn(1, 6, 1, generator=torch.Generator().manual_seed(1))
    seen = []
    with recording_graph_breaks() as records:
        for first in (0, 20, 3, 25, 1, 30):
            optimizer.zero_grad()
            loss = step(x, torch.arange(first, first + 6)[None]).pow(2).sum()
            loss.backward()
            optimizer.step()
            seen.append((loss.detach(), [p.grad.clone() for p in model.parameters()], _state(model.rotary)))
    momentum = [optimizer.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    counts = None
    if counting is not None:
        count = break_count_so_far(counting, records)
        counts = (count.graphs, count.breaks)
    return seen, [p.detach().clone() for p in model.parameters()], momentum, counts


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_performed_choice_joins_a_training_graph(backend):
    """With grad on, the branch puts only a copy of a buffer no autograd flows through in
    the graph: it joins the graph that trains ``proj``, and every loss, gradient,
    parameter, momentum and chosen object is the original's, bit for bit."""
    original, mended, _ = original_and_mended(TRAINED)
    expected = _train_over_calls(original, None)
    original_run = _train_over_calls(original, backend)
    mended_run = _train_over_calls(mended, backend)
    assert original_run[3][1] > 0 and mended_run[3] == (1, 0)
    for run in (original_run, mended_run):
        for (loss, grads, state), (other_loss, other_grads, other_state) in zip(run[0], expected[0]):
            assert torch.equal(loss, other_loss) and state == other_state
            assert all(torch.equal(a, b) for a, b in zip(grads, other_grads))
        assert all(torch.equal(a, b) for a, b in zip(run[1], expected[1]))
        assert all(torch.equal(a, b) for a, b in zip(run[2], expected[2]))
