"""[Where] a comparison of a uniform draw that its range decides (rules/where/ranges.py,
runtime/drawn_ranges.py): LayerDrop's ``if torch.rand([]) < self.layerdrop: continue``
with ``layerdrop = 0.0``. Must-rewrite with exact graph and break counts (the decoder,
encoder and wav2vec2 forms of transformers' loops), outputs, gradients and the random
generator's state bit for bit under ``eager`` and ``aot_eager`` (layers with dropout, so
the order of draws matters); one named must-not case per legality condition; and a
differential run of small programs, eagerly and compiled."""

from __future__ import annotations

import textwrap

import pytest
import torch

from graphmend.runtime import reset
from graphmend.runtime.store import store
from helpers import assert_equivalent, graphs_and_breaks, original_and_mended

LAYERS = """
import torch
from torch import nn


class Stack(nn.Module):
    def __init__(self, layerdrop=0.0):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.dropout = nn.Dropout(0.3)
        self.layerdrop = layerdrop

    def layer(self, layer, x):
        return self.dropout(torch.tanh(layer(x)))
"""

# transformers' decoder loop (bart, mbart, marian, pegasus, whisper, ...).
DECODER = LAYERS + """
    def forward(self, x):
        for idx, decoder_layer in enumerate(self.layers):
            if self.training:
                dropout_probability = torch.rand([])
                if dropout_probability < self.layerdrop:
                    continue
            x = self.layer(decoder_layer, x)
        return x
"""

# transformers' encoder loop.
ENCODER = LAYERS + """
    def forward(self, x):
        for encoder_layer in self.layers:
            to_drop = False
            if self.training:
                dropout_probability = torch.rand([])
                if dropout_probability < self.layerdrop:
                    to_drop = True
            if to_drop:
                x = x * 1.0
            else:
                x = self.layer(encoder_layer, x)
        return x
"""

# wav2vec2's loop.
WAV2VEC2 = LAYERS + """
    def forward(self, x):
        for layer in self.layers:
            dropout_probability = torch.rand([])
            skip_the_layer = True if self.training and (dropout_probability < self.layerdrop) else False
            if not skip_the_layer:
                x = self.layer(layer, x)
        return x
"""

FORMS = {"decoder": DECODER, "encoder": ENCODER, "wav2vec2": WAV2VEC2}


def _model(module, layerdrop=0.0):
    torch.manual_seed(0)
    model = module.Stack(layerdrop)
    model.train()
    return model


def _counts(model, x, fullgraph=False):
    from graphmend.counting import count_breaks

    reset()
    _, count = count_breaks(model, x, fullgraph=fullgraph)
    return count.graphs, count.breaks


def _run(model, x, backend):
    """Output, gradients and the generator's state after one step (None: eagerly)."""
    torch._dynamo.reset()
    reset()
    model.zero_grad()
    torch.manual_seed(1)
    target = model if backend is None else torch.compile(model, backend=backend, dynamic=False)
    out = target(x)
    out.pow(2).sum().backward()
    return out.detach(), [p.grad for p in model.parameters()], torch.get_rng_state()


def _assert_same_run(first, second):
    assert torch.equal(first[0], second[0])
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(first[1], second[1]))
    assert torch.equal(first[2], second[2])


@pytest.mark.parametrize("form", FORMS)
def test_layerdrop_zero_compiles_whole(form):
    original, mended, result = original_and_mended(FORMS[form])
    assert [(f.category, f.fixed, f.condition) for f in result.findings] == [("DC", True, None)]
    x = torch.randn(2, 4)
    # A break in the loop: the frame runs eagerly; its calls of ``self.layer`` compile.
    assert _counts(_model(original), x) == (2, 1)
    assert _counts(_model(mended), x) == (1, 0)
    assert _counts(_model(mended), x, fullgraph=True) == (1, 0)


def _counts_with_backward(model, x, backend):
    """Graphs and breaks of a forward and backward compiled with ``backend``, from
    TorchDynamo's counters and records (the backend is not a counting one)."""
    from torch._dynamo.utils import counters

    from graphmend.counting import recording_graph_breaks

    torch._dynamo.reset()
    reset()
    counters.clear()
    with recording_graph_breaks() as records:
        torch.compile(model, backend=backend, dynamic=False)(x).pow(2).sum().backward()
    graphs = counters["stats"]["unique_graphs"]
    return graphs, max(graphs - 1, sum(counters["graph_break"].values()), len(records.breaks))


@pytest.mark.parametrize("form", FORMS)
def test_layerdrop_zero_compiles_whole_under_autograd(form):
    """Under a backend that runs the graph as written, the layers the original ran
    eagerly (its frame skipped for the break in the loop) draw and differentiate as
    eagerly: the claim stands."""
    original, mended, _ = original_and_mended(FORMS[form])
    x = torch.randn(2, 4)
    assert _counts_with_backward(_model(original), x, "eager") == (2, 1)
    assert _counts_with_backward(_model(mended), x, "eager") == (1, 0)


@pytest.mark.parametrize("form", FORMS)
def test_layerdrop_zero_joins_under_aot_eager_where_the_original_ran_eagerly(form):
    """With autocast off, ``aot_eager`` draws and differentiates the dropouts the original
    ran eagerly as eager does (``test_layerdrop_zero_is_bit_identical``): joined."""
    original, mended, _ = original_and_mended(FORMS[form])
    x = torch.randn(2, 4)
    assert _counts_with_backward(_model(original), x, "aot_eager") == (2, 1)
    assert _counts_with_backward(_model(mended), x, "aot_eager") == (1, 0)


@pytest.mark.parametrize("form", FORMS)
def test_layerdrop_zero_keeps_its_break_under_autocast_where_the_original_ran_eagerly(form):
    """G307: under autocast ``aot_eager`` differentiates a dropout the original ran
    eagerly otherwise than eager does."""
    original, mended, _ = original_and_mended(FORMS[form])
    x = torch.randn(2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _counts_with_backward(_model(original), x, "aot_eager") == (2, 1)
        assert _counts_with_backward(_model(mended), x, "aot_eager") == (2, 1)
    assert any(reason.condition == "G307" for reason in store.trace_time_declines.values())


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("form", FORMS)
def test_layerdrop_zero_is_bit_identical(form, backend):
    """Outputs, gradients and the generator's state, against the original eagerly and
    compiled: the draws stay in the graph, in the original's order with dropout's."""
    original, mended, _ = original_and_mended(FORMS[form])
    x = torch.randn(2, 4)
    reference = _run(_model(original), x, None)
    _assert_same_run(_run(_model(original), x, backend), reference)
    _assert_same_run(_run(_model(mended), x, backend), reference)
    _assert_same_run(_run(_model(mended), x, None), reference)


def test_layerdrop_inside_the_range_keeps_its_break():
    """W210: ``0 < p < 1`` is truly random: the original comparison runs, with its break."""
    original, mended, _ = original_and_mended(DECODER)
    x = torch.randn(2, 4)
    assert _counts(_model(mended, 0.1), x) == _counts(_model(original, 0.1), x) == (2, 1)
    _counts(_model(mended, 0.1), x)
    assert any(reason.condition == "W210" for reason in store.trace_time_declines.values())
    for backend in ("eager", "aot_eager"):
        _assert_same_run(_run(_model(mended, 0.5), x, backend), _run(_model(original, 0.5), x, None))


def test_a_new_layerdrop_value_traces_again():
    """The decision is a constant of the trace, guarded on the value: 0.0 then 0.5."""
    _, mended, _ = original_and_mended(DECODER)
    model = _model(mended)
    compiled = torch.compile(model, backend="eager", dynamic=False)
    x = torch.randn(2, 4)
    torch._dynamo.reset()
    reset()
    compiled(x)
    model.layerdrop = 2.0  # every layer dropped (float32 draws stay below 1)
    assert torch.equal(compiled(x), x)


PROGRAM = """
import torch

def main(x, p):
    r = torch.rand([])
    {body}
    return x
"""

DECIDED = {
    "less": ("if r < p:\n        x = x + 1", [0.0, -0.0, -1.0, float("nan"), 2.0, 0]),
    "greater_reversed": ("if p > r:\n        x = x + 1", [0.0, -3, float("-inf"), 1.5]),
    "at_least": ("if r >= p:\n        x = x + 1", [0.0, -1e-50, -2.0, float("nan"), 1.0]),
    "at_most_not": ("if not r <= p:\n        x = x + 1", [-1.0, 1.0, float("inf")]),
    "and_of_tested": ("if x.shape[0] > 1 and r < p:\n        x = x + 1", [0.0, 3.0]),
    "while_test": ("while r < p:\n        x = x + 1\n        break", [0.0]),
    "conditional_expression": ("x = x + 1 if r < p else x - 1", [0.0, 1.0]),
}


@pytest.mark.parametrize("name", DECIDED)
def test_decided_comparisons_lose_their_break(name):
    body, values = DECIDED[name]
    original, mended, result = original_and_mended(PROGRAM.format(body=body))
    assert [(f.fixed, f.condition) for f in result.findings] == [(True, None)]
    for p in values:
        # One graph before the break, and one after it where the taken arm computes.
        assert graphs_and_breaks(original.main, torch.ones(2), p)[1] == 1
        assert graphs_and_breaks(mended.main, torch.ones(2), p) == (1, 0), p
        torch.manual_seed(0)
        assert_equivalent(original.main, mended.main, torch.ones(2), p, backends=("eager", "aot_eager"))


def _finding(source):
    _, _, result = original_and_mended(source)
    return [(f.category, f.fixed, f.condition) for f in result.findings]


MUST_NOT_STATIC = {
    "W115_another_binding_reaches": ("""
        import torch
        def main(x, p, again):
            r = torch.rand([])
            if again:
                r = torch.rand([]) * 2
            if r < p:
                x = x + 1
            return x
        """, "W115"),
    "W115_draw_written_through_out": ("""
        import torch
        def main(x, p, buffer):
            r = torch.rand([], out=buffer)
            if r < p:
                x = x + 1
            return x
        """, "W115"),
    "W116_draw_mutated_before_the_test": ("""
        import torch
        def main(x, p):
            r = torch.rand([])
            r.mul_(2)
            if r < p:
                x = x + 1
            return x
        """, "W116"),
    "W116_draw_read_after_the_loop": ("""
        import torch
        def main(x, p):
            for _ in range(2):
                r = torch.rand([])
                if r < p:
                    continue
                x = x + 1
            return x, r
        """, "W116"),
    "W117_value_kept": ("""
        import torch
        def main(x, p):
            r = torch.rand([])
            drop = p > 0 and r < p
            if drop:
                x = x + 1
            return x, drop
        """, "W117"),
    "W118_inside_a_comprehension": ("""
        import torch
        def main(x, p):
            r = torch.rand([])
            return [x + 1 for _ in range(2) if r < p]
        """, "W118"),
}


@pytest.mark.parametrize("name", MUST_NOT_STATIC)
def test_must_not_rewrite_static(name):
    source, condition = MUST_NOT_STATIC[name]
    original, mended, result = original_and_mended(source)
    assert [(f.fixed, f.condition) for f in result.findings] == [(False, condition)]
    assert not result.changed


NOT_CANDIDATES = {
    "randn_is_not_decided": """
        import torch
        def main(x, p):
            r = torch.randn([])
            if r < p:
                x = x + 1
            return x
        """,
    "a_stored_mask_breaks_nothing": """
        import torch
        def main(x, p):
            r = torch.rand([])
            mask = r < p
            return x * mask
        """,
    "a_shadowing_torch": """
        import torch
        def main(x, p, torch=torch.distributions):
            r = torch.rand([])
            if r < p:
                x = x + 1
            return x
        """,
}


@pytest.mark.parametrize("name", NOT_CANDIDATES)
def test_not_a_candidate(name):
    _, _, result = original_and_mended(NOT_CANDIDATES[name])
    assert not result.changed
    assert not [f for f in result.findings if f.rule == "Where"]


MUST_NOT_WHILE_TRACING = {
    # bool() of a three-element tensor raises in the original; it still does.
    "W209_more_than_one_element": ("r = torch.rand(3)", 0.0, "W209"),
    "W209_not_floating": ("r = torch.rand([], dtype=torch.complex64)", 0.0, "W209"),
    # A meta tensor has no value: its truth raises in the original.
    "W209_meta": ("r = torch.rand([], device='meta')", 0.0, "W209"),
    "W210_tensor_operand": ("r = torch.rand([])", torch.tensor(0.0), "W210"),
    "W210_half_draw_below_one": ("r = torch.rand([], dtype=torch.float16)", 1.0, "W210"),
    "W208_generator": ("r = torch.rand([], generator=torch.Generator().manual_seed(3))", 0.0, None),
}


def _counts_or_error(function, *args):
    reset()
    try:
        return graphs_and_breaks(function, *args)
    except Exception as error:  # noqa: BLE001 - the exception is the observation
        return type(error), str(error)


@pytest.mark.parametrize("name", MUST_NOT_WHILE_TRACING)
def test_must_not_decide_while_tracing(name):
    draw, p, condition = MUST_NOT_WHILE_TRACING[name]
    source = textwrap.dedent(f"""
        import torch
        def main(x, p):
            {draw}
            if r < p:
                x = x + 1
            return x
        """)
    original, mended, _ = original_and_mended(source)
    x = torch.ones(2)
    expected = _counts_or_error(original.main, x, p)
    assert _counts_or_error(mended.main, x, p) == expected
    if condition is not None:
        assert condition in {reason.condition for reason in store.trace_time_declines.values()}
    torch.manual_seed(0)
    assert_equivalent(original.main, mended.main, x, p, backends=("eager", "aot_eager"))


def test_symbolic_float_operand_is_not_decided():
    """W210: a float TorchDynamo makes symbolic (``dynamic=True``, unspecialized floats)."""
    original, mended, _ = original_and_mended(PROGRAM.format(body="if r < p:\n        x = x + 1"))
    with torch._dynamo.config.patch(specialize_float=False):
        for p in (0.0, 0.5):
            torch.manual_seed(0)
            torch._dynamo.reset()
            expected = torch.compile(original.main, backend="eager", dynamic=True)(torch.ones(2), p)
            torch.manual_seed(0)
            torch._dynamo.reset()
            assert torch.equal(torch.compile(mended.main, backend="eager", dynamic=True)(torch.ones(2), p), expected)


TINY_BART = textwrap.dedent(
    """
    import sys

    import torch
    from torch._dynamo.utils import counters
    from transformers import BartConfig, BartModel

    from graphmend.counting import recording_graph_breaks

    saved, backend = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    config = BartConfig(vocab_size=100, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)
    model = BartModel(config).train()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    ids = torch.randint(3, 100, (2, 8))
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(1)
    with recording_graph_breaks() as records:
        out = compiled(input_ids=ids, decoder_input_ids=ids).last_hidden_state
        out.pow(2).mean().backward()
    graphs = counters["stats"]["unique_graphs"]
    breaks = max(graphs - 1, sum(counters["graph_break"].values()), len(records.breaks))
    torch.save({"out": out.detach(), "rng": torch.get_rng_state(),
                "gradients": {name: p.grad for name, p in model.named_parameters()}}, saved)
    print("COUNTS", graphs, breaks)
    """
)


def _tiny_bart(tmp_path, backend: str, mended: bool):
    import subprocess
    import sys

    from tools.census.runner import CHECKOUT, child_environment

    script = tmp_path / "tiny_bart_train.py"
    script.write_text(TINY_BART)
    saved = tmp_path / f"{backend}-{mended}.pt"
    prefix = ["-m", "graphmend", "run", "--package", "transformers"] if mended else []
    done = subprocess.run([sys.executable, *prefix, str(script), str(saved), backend], check=False, cwd=CHECKOUT,
                          env=child_environment(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("COUNTS "))
    return torch.load(saved), tuple(map(int, line.split()[1:]))


@pytest.mark.slow  # two fresh interpreters that import transformers: about 25 s each
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_tiny_bart_in_train_mode_keeps_its_numbers(tmp_path, backend):
    """transformers 4.52.4's BART from its config (layerdrop 0.0, dropout 0.1), one
    forward and backward in train mode: outputs, gradients and the generator's state
    bit for bit. Under eager the encoder's and decoder's LayerDrop loops (lines 1053 and
    1327 of modeling_bart.py) lose their breaks, and the decoder's `logger.warning_once`
    (line 1246) with them: 8 graphs and 7 breaks become one graph. Under aot_eager the
    claims are refused (G312: one backward graph would sum the gradient contributions
    to the shared embedding and the encoder's output in another order than the
    original's graphs did), and the counts stay the original's."""
    original, original_counts = _tiny_bart(tmp_path, backend, mended=False)
    mended, mended_counts = _tiny_bart(tmp_path, backend, mended=True)
    assert (original_counts, mended_counts) == BART_COUNTS[backend]
    assert torch.equal(mended["out"], original["out"])
    assert torch.equal(mended["rng"], original["rng"])
    assert mended["gradients"].keys() == original["gradients"].keys()
    for name, gradient in original["gradients"].items():
        assert (gradient is None) == (mended["gradients"][name] is None)
        assert gradient is None or torch.equal(mended["gradients"][name], gradient), name


BART_COUNTS = {"eager": ((8, 7), (1, 0)), "aot_eager": ((8, 7), (8, 7))}
