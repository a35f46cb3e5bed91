"""[Capture] a loop over the rows of ``nonzero()``, the experts a batch hit, run over
every expert: the mixture-of-experts routing of transformers 5 (experts stacked in
tensors, or a module list) in small. Must-rewrite with graph and break counts, one
must-not case per legality condition (source and trace time), differential runs where
some expert gets no token."""

from __future__ import annotations

import contextlib
import io
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn

from graphmend.counting import count_breaks
from graphmend.runtime import reset
from graphmend.runtime.store import store
from helpers import assert_equivalent, observe, original_and_mended


class Expert(nn.Module):
    """A module-list expert; a class of this file, whose source tracing reads."""

    def __init__(self, width):
        super().__init__()
        self.w1 = nn.Linear(width, 2 * width, bias=False)
        self.w2 = nn.Linear(2 * width, width, bias=False)
        self.w3 = nn.Linear(width, 2 * width, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states):
        current = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        return self.w2(current)


# Which experts ran, in order: a load counter, as a router's statistics keep one.
LOAD: list[int] = []


class Counting(Expert):
    """Its ``forward`` calls a method of its own that counts: not a child module's call."""

    def count(self, hidden_states):
        LOAD.append(self.number)
        return hidden_states

    def forward(self, hidden_states):
        current = self.count(hidden_states)
        return self.w2(self.act_fn(self.w1(current)) * self.w3(current))


EXPERTS = f"""
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F

Expert = sys.modules[{__name__!r}].Expert
Counting = sys.modules[{__name__!r}].Counting


class Block(nn.Module):
    def __init__(self, width=8, experts=4, top_k=2, expert_class=Expert):
        super().__init__()
        self.num_experts = experts
        self.top_k = top_k
        self.gate = nn.Linear(width, experts, bias=False)
        self.experts = nn.ModuleList([expert_class(width) for _ in range(experts)])
        for number, expert in enumerate(self.experts):
            expert.number = number
        self.gate_up_proj = nn.Parameter(torch.randn(experts, 4 * width, width) / width)
        self.down_proj = nn.Parameter(torch.randn(experts, width, 2 * width) / width)
        self.act_fn = nn.SiLU()
        self.scaled = 0

    def scale(self, hidden_states):
        self.scaled += 1
        return hidden_states * 2.0

    def route(self, hidden_states):
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        top_k_weights, top_k_index = torch.topk(routing_weights, self.top_k, dim=-1)
        top_k_weights /= top_k_weights.sum(dim=-1, keepdim=True)
        top_k_weights = top_k_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros_like(hidden_states)
        return hidden_states, top_k_weights, final_hidden_states, top_k_index
"""

# transformers 5's form: the mask and the hits computed without autograd, the mask in two steps.
HITS_IN_NO_GRAD = """
with torch.no_grad():
    expert_mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts)
    expert_mask = expert_mask.permute(2, 1, 0)
    expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
"""

HITS = """
expert_mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
"""

STACKED_LOOP = """
for expert_idx in expert_hit:
    expert_idx = expert_idx[0]
    if expert_idx == self.num_experts:
        continue
    top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
    current_state = hidden_states[token_idx]
    gate, up = nn.functional.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
    current_hidden_states = self.act_fn(gate) * up
    current_hidden_states = nn.functional.linear(current_hidden_states, self.down_proj[expert_idx])
    current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
    final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
"""

LISTED_LOOP = """
for expert_idx in expert_hit:
    expert_idx = expert_idx[0]
    if expert_idx == self.num_experts:
        continue
    expert_layer = self.experts[expert_idx]
    top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
    current_state = hidden_states[token_idx]
    current_hidden_states = expert_layer(current_state) * top_k_weights[token_idx, top_k_pos, None]
    final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
"""

# The row ``[e]`` itself indexes: the module list (``operator.index``) and the mask.
ROW_LOOP = """
for expert_idx in expert_hit:
    expert_layer = self.experts[expert_idx]
    idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
    current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
    current_hidden_states = expert_layer(current_state) * top_k_weights[top_x, idx, None]
    final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
"""


def _indented(text: str) -> str:
    return textwrap.indent(textwrap.dedent(text), " " * 8)


def program(hits: str = HITS_IN_NO_GRAD, loop: str = STACKED_LOOP, expert_class: str = "Expert",
            before: str = "", after: str = "") -> str:
    forward = f"""
class Routed(Block):
    def forward(self, hidden_states):
        batch, length, hidden_dim = hidden_states.shape
        hidden_states, top_k_weights, final_hidden_states, top_k_index = self.route(hidden_states)
{_indented(before)}{_indented(hits)}{_indented(loop)}{_indented(after)}
        return final_hidden_states.reshape(batch, length, hidden_dim)


def build():
    torch.manual_seed(0)
    return Routed(expert_class={expert_class}).eval()
"""
    return EXPERTS + forward


def counts(function, *args) -> tuple[int, int]:
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        _, count = count_breaks(function, *args)
    return count.graphs, count.breaks


def unchosen_experts(model, batch) -> int:
    with torch.no_grad():
        _, _, _, selected = model.route(batch)
    return model.num_experts - len(selected.unique())


# One token: with 4 experts and 2 chosen per token, two experts get none.
ONE_TOKEN = torch.randn(1, 1, 8, generator=torch.Generator().manual_seed(1))
SEVERAL = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(2))
NO_TOKEN = torch.randn(1, 0, 8, generator=torch.Generator().manual_seed(3))
BATCHES = {"one token": ONE_TOKEN, "several": SEVERAL, "no token": NO_TOKEN}


@pytest.fixture(autouse=True)
def fresh_claims():
    reset()
    store.trace_time_declines.clear()
    yield
    reset()


def capture_findings(result):
    return [f for f in result.findings if f.rule == "Capture"]


# name: (program, the original's (graphs, breaks), the mended's), one token.
MUST_REWRITE = {
    "stacked, hits in no_grad": (program(), (1, 2), (1, 0)),
    "stacked, hits after the mask": (program(HITS), (1, 2), (1, 0)),
    "stacked, a copy of the hits": (program(loop=STACKED_LOOP.replace("in expert_hit:", "in expert_hit[:]:")), (1, 2), (1, 0)),
    "stacked, `> 0` and `as_tuple=False`": (program(HITS.replace(
        "torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()",
        "(expert_mask.sum(dim=(-1, -2)) > 0).nonzero(as_tuple=False)",
    )), (1, 2), (1, 0)),
    "stacked, `F.silu` for the shared activation": (
        program(loop=STACKED_LOOP.replace("self.act_fn(gate)", "F.silu(gate)")), (1, 2), (1, 0)
    ),
    "module list, the class unpacked": (program(loop=LISTED_LOOP), (2, 2), (1, 0)),
    "module list, the row as index": (program(HITS, ROW_LOOP), (2, 2), (1, 0)),
}


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_must_rewrite(name):
    source, original_counts, mended_counts = MUST_REWRITE[name]
    original, mended, result = original_and_mended(source)
    findings = capture_findings(result)
    assert result.changed and findings and all(f.fixed for f in findings), result.findings
    assert any(f.message.startswith("loop over the chosen classes") for f in findings)
    model, mended_model = original.build(), mended.build()
    assert unchosen_experts(model, ONE_TOKEN) == 2
    assert counts(model, ONE_TOKEN) == original_counts
    assert counts(mended_model, ONE_TOKEN) == mended_counts
    assert counts(mended_model, SEVERAL) == mended_counts
    assert list(store.trace_time_declines.values()) == []


def test_the_guard_on_the_class_is_fixed_with_the_loop():
    """Where declines ``if expert_idx == self.num_experts: continue`` (it leaves with
    ``continue``); over every class it compares two ints: fixed by Capture."""
    _original, _mended, result = original_and_mended(program())
    guard = [f for f in result.findings if "expert_idx == self.num_experts" in f.message]
    assert len(guard) == 1 and guard[0].fixed and guard[0].rule == "Capture", result.findings


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_whole_graph_with_bit_identical_outputs(name, backend):
    """``fullgraph=True`` compiles the mended forward (the original's cannot), and its
    output is the original's bit for bit, for a batch where two experts get no token."""
    source = MUST_REWRITE[name][0]
    original, mended, _ = original_and_mended(source)
    model, mended_model = original.build(), mended.build()
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception):  # noqa: B017 - TorchDynamo's own error for a break
            torch.compile(model, backend=backend, fullgraph=True)(ONE_TOKEN)
        torch._dynamo.reset()
        compiled = torch.compile(mended_model, backend=backend, fullgraph=True, dynamic=False)
        for batch in (ONE_TOKEN, SEVERAL):
            expected, got = model(batch), compiled(batch)
            assert got.dtype == expected.dtype == torch.float32
            assert torch.equal(got.view(torch.int32), expected.view(torch.int32))


@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_differential(name, batch):
    original, mended, _ = original_and_mended(MUST_REWRITE[name][0])
    with torch.no_grad():
        assert_equivalent(original.build(), mended.build(), BATCHES[batch], backends=("eager", "aot_eager"))


def test_differential_printed_text():
    """A ``print`` before the loop and after it: the same text, in the same order."""
    source = program(
        before='print("routing", hidden_states.shape[0], "tokens")\n',
        after='print("routed", final_hidden_states.shape)\n',
    )
    original, mended, _ = original_and_mended(source)
    for batch in (ONE_TOKEN, SEVERAL):
        with torch.no_grad():
            assert_equivalent(original.build(), mended.build(), batch, backends=("eager", "aot_eager"))
        reference = observe(original.build(), batch)
        assert reference.stdout.startswith("routing ") and "routed torch.Size" in reference.stdout


# --------------------------------------------------------------------------------------
# Must not rewrite: one case per static legality condition, with its id.

MUST_NOT_REWRITE = {
    "C104 hits_are_classes_in_order": (
        program(HITS.replace("sum(dim=(-1, -2))", "sum(dim=(-1, -3))")),
        "is not a one-hot mask",
    ),
    "C105 hits_read_only_by_the_loop": (
        program(after="final_hidden_states = final_hidden_states * len(expert_hit)\n"),
        "`expert_hit` is bound or read elsewhere",
    ),
    "C106 body_does_nothing_for_an_unchosen_expert (print of the class)": (
        program(loop=STACKED_LOOP.replace(
            "    top_k_pos, token_idx", '    print("expert", int(expert_idx))\n    top_k_pos, token_idx'
        )),
        "may act for an expert no token chose",
    ),
    "C106 body_does_nothing_for_an_unchosen_expert (append of the class)": (
        program(before="ran = []\n", loop=LISTED_LOOP.replace(
            "    expert_layer =", "    ran.append(int(expert_idx))\n    expert_layer ="
        ), after="final_hidden_states = final_hidden_states + len(ran)\n"),
        "may act for an expert no token chose",
    ),
    "C107 loop_names_stay_in_the_loop": (
        program(after="final_hidden_states = final_hidden_states + expert_idx\n"),
        "`expert_idx` is bound or read outside the loop",
    ),
    "C108 destination_is_bound_at_the_loop": (
        program(
            before="if batch > 0:\n    accumulated = torch.zeros_like(hidden_states)\n",
            loop=STACKED_LOOP.replace("final_hidden_states.index_add_", "accumulated.index_add_"),
            after="final_hidden_states = accumulated\n",
        ),
        "the destination `accumulated` may be unbound",
    ),
    "C116 hit_rows_unpacked_as_classes": (
        program(loop=STACKED_LOOP.replace("expert_idx = expert_idx[0]", "expert_idx = int(expert_idx[0])")),
        "rebinds the row `expert_idx`",
    ),
    "C117 skip_tests_only_the_class_count": (
        program(loop=STACKED_LOOP.replace("if expert_idx == self.num_experts:", "if expert_idx == 2:")),
        "may skip an expert",
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_must_not_rewrite(name):
    source, expected = MUST_NOT_REWRITE[name]
    original, mended, result = original_and_mended(source)
    loops = [f for f in capture_findings(result) if "chosen classes" in f.message]
    assert len(loops) == 1 and not loops[0].fixed, result.findings
    assert loops[0].condition == name.split()[0] and expected in loops[0].reason, loops[0]
    with torch.no_grad():
        assert_equivalent(original.build(), mended.build(), ONE_TOKEN, backends=("eager",))


# --------------------------------------------------------------------------------------
# Must not rewrite while tracing: the reasons name the condition, and the original loop
# runs (the original's counts, output, printed text and load).

def _declined(expected: str) -> bool:
    return any(expected in r and "chosen experts" in r for r in store.trace_time_declines.values())


def test_must_not_rewrite_while_tracing_an_expert_with_its_own_method():
    """``expert_calls_are_known``: an expert whose forward calls a method of its own (a
    load counter) would count for an expert no token chose."""
    original, mended, result = original_and_mended(program(loop=LISTED_LOOP, expert_class="Counting"))
    assert result.changed and all(f.fixed for f in capture_findings(result))
    model, mended_model = original.build(), mended.build()
    LOAD.clear()
    with torch.no_grad():
        expected = model(ONE_TOKEN)
    load = list(LOAD)
    assert len(set(load)) == 2  # the two experts the token chose
    for backend in ("eager", "aot_eager"):
        LOAD.clear()
        torch._dynamo.reset()
        with torch.no_grad():
            got = torch.compile(mended_model, backend=backend, dynamic=False)(ONE_TOKEN)
        assert torch.equal(got, expected) and load == LOAD, backend
        assert _declined("expert_calls_are_known: expert 0: `Counting.count` is not a child module"), (
            store.trace_time_declines
        )
    assert counts(mended.build(), ONE_TOKEN) == counts(original.build(), ONE_TOKEN)
    LOAD.clear()


@pytest.mark.parametrize("where", ["shared activation", "expert"])
def test_must_not_rewrite_while_tracing_a_hook(where):
    """``expert_calls_are_known``: a hook on the activation every stacked expert shares,
    or on a module-list expert, would run for an expert no token chose."""
    loop = STACKED_LOOP if where == "shared activation" else LISTED_LOOP
    original, mended, _ = original_and_mended(program(loop=loop))
    model, mended_model = original.build(), mended.build()
    calls = []
    for m in (model, mended_model):
        hooked = m.act_fn if where == "shared activation" else m.experts[3]
        hooked.register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        assert_equivalent(model, mended_model, ONE_TOKEN, backends=("eager", "aot_eager"))
        for backend in ("eager", "aot_eager"):
            calls.clear()
            model(ONE_TOKEN)
            expected = len(calls)
            calls.clear()
            torch._dynamo.reset()
            torch.compile(mended_model, backend=backend, dynamic=False)(ONE_TOKEN)
            assert len(calls) == expected >= 1, backend  # the chosen experts' calls alone
    assert _declined("expert_calls_are_known") and _declined("has a hook"), store.trace_time_declines
    assert counts(mended_model, ONE_TOKEN) == counts(model, ONE_TOKEN)


def test_must_not_rewrite_while_tracing_when_gradients_are_recorded():
    """``no_expert_gradients``: a stacked expert's slice that ran on no token would add a
    zero gradient the original never computed."""
    original, mended, _ = original_and_mended(program())
    model, mended_model = original.build(), mended.build()
    torch._dynamo.reset()
    compiled = torch.compile(mended_model, backend="aot_eager")
    compiled(ONE_TOKEN).sum().backward()
    model(ONE_TOKEN).sum().backward()
    for ours, theirs in zip(mended_model.parameters(), model.parameters()):
        assert (ours.grad is None) == (theirs.grad is None)
        if theirs.grad is not None:
            assert torch.equal(ours.grad, theirs.grad)
    assert _declined("no_expert_gradients: gradients are recorded for the stacked experts `gate_up_proj`")


def _plain_tensor_attribute(model):
    weight = model.gate_up_proj.detach().clone()
    del model.gate_up_proj
    model.gate_up_proj = weight  # an instance attribute, not a parameter


def _fewer_rows_than_classes(model):
    model.down_proj = nn.Parameter(model.down_proj.detach()[:2].clone())


@pytest.mark.parametrize("change, expected", [
    (_plain_tensor_attribute, "`Routed.gate_up_proj` is set on the instance or the class"),
    (_fewer_rows_than_classes, "`down_proj` is not a plain tensor with a row for each of the 4 classes"),
])
def test_must_not_rewrite_while_tracing_stacked_tensors_that_do_not_cover_every_class(change, expected):
    """``expert_tensors_cover_every_class``: an expert no token chose reads its slice,
    which must exist and be read with no code of its own."""
    original, mended, _ = original_and_mended(program())
    model, mended_model = original.build(), mended.build()
    change(model)
    change(mended_model)
    if change is _fewer_rows_than_classes:
        assert unchosen_experts(model, NO_TOKEN) == 4  # no token: no expert reads a slice
        batch = NO_TOKEN
    else:
        batch = ONE_TOKEN
    with torch.no_grad():
        assert_equivalent(model, mended_model, batch, backends=("eager", "aot_eager"))
    assert _declined("expert_tensors_cover_every_class") and _declined(expected), store.trace_time_declines
    assert counts(mended_model, batch) == counts(model, batch)


def test_must_not_rewrite_while_tracing_with_a_global_hook():
    """``no_module_hooks``: a forward hook registered for every module."""
    original, mended, _ = original_and_mended(program())
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, *_: seen.append(type(module)))
    try:
        model, mended_model = original.build(), mended.build()
        assert counts(mended_model, ONE_TOKEN) == counts(model, ONE_TOKEN)
        with torch.no_grad():
            for backend in ("eager", "aot_eager"):
                observe(mended_model, ONE_TOKEN, compiled=True, backend=backend).assert_same_as(
                    observe(model, ONE_TOKEN, compiled=True, backend=backend)
                )
    finally:
        handle.remove()
    assert _declined("no_module_hooks")


def test_must_not_rewrite_while_tracing_a_shared_call_that_is_a_method():
    """``expert_calls_are_known``: ``self.scale(gate)`` looks like a shared module's
    call, but is a method that counts: it would count for every expert."""
    loop = STACKED_LOOP.replace("self.act_fn(gate) * up", "self.scale(gate) * up")
    original, mended, result = original_and_mended(program(loop=loop))
    assert result.changed and all(f.fixed for f in capture_findings(result))
    model = original.build()
    with torch.no_grad():
        expected = model(ONE_TOKEN)
    assert model.scaled == 2  # the two experts the token chose
    for backend in ("eager", "aot_eager"):
        mended_model = mended.build()
        torch._dynamo.reset()
        with torch.no_grad():
            got = torch.compile(mended_model, backend=backend, dynamic=False)(ONE_TOKEN)
        assert torch.equal(got, expected) and mended_model.scaled == model.scaled, backend
    assert _declined("expert_calls_are_known: `Routed.scale` is set on the instance or the class"), (
        store.trace_time_declines
    )
