"""[Capture] a loop over the experts a batch chose, run over every expert: the
mixture-of-experts routing of Mixtral and Qwen2-MoE (transformers 4.52.4) in small.
Must-rewrite with graph and break counts, one must-not case per legality condition
(source and trace time), differential runs where some expert gets no token."""

from __future__ import annotations

import contextlib
import functools
import io
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn

from graphmend.counting import count_breaks
from graphmend.runtime import claims, reset
from graphmend.runtime.store import store
from helpers import assert_equivalent, finding_reasons, observe, original_and_mended


class Expert(nn.Module):
    """Mixtral's expert in small; a class of this file, whose source tracing reads."""

    def __init__(self, width):
        super().__init__()
        self.w1 = nn.Linear(width, 2 * width, bias=False)
        self.w2 = nn.Linear(2 * width, width, bias=False)
        self.w3 = nn.Linear(width, 2 * width, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states):
        current = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        current = self.w2(current)
        return current


class Talkative(Expert):
    def forward(self, hidden_states):
        print("expert ran")
        return self.w2(self.act_fn(self.w1(hidden_states)))


# Which experts ran, in order: a load counter, as a router's statistics keep one.
LOAD: list[int] = []


class Counting(Expert):
    """Its ``forward`` only binds names from calls ``self.name(x)``, but one of them is a
    method of its own that counts: the call must not be taken for a child module's."""

    def count(self, hidden_states):
        LOAD.append(self.number)
        self.calls += 1
        return hidden_states

    def forward(self, hidden_states):
        current = self.count(hidden_states)
        current = self.act_fn(self.w1(current)) * self.w3(current)
        return self.w2(current)


EXPERTS = f"""
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F

Expert = sys.modules[{__name__!r}].Expert
Talkative = sys.modules[{__name__!r}].Talkative
Counting = sys.modules[{__name__!r}].Counting
Wrapped = sys.modules[{__name__!r}].Wrapped


class Block(nn.Module):
    def __init__(self, width=8, experts=4, top_k=2, expert_class=Expert):
        super().__init__()
        self.hidden_dim = width
        self.num_experts = experts
        self.top_k = top_k
        self.gate = nn.Linear(width, experts, bias=False)
        self.experts = nn.ModuleList([expert_class(width) for _ in range(experts)])

    def route(self, hidden_states):
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros_like(hidden_states)
        return hidden_states, routing_weights, final_hidden_states, selected_experts
"""

MIXTRAL_LOOP = """
        expert_hitted = (expert_mask.sum(dim=(-1, -2)) > 0).nonzero(as_tuple=True)[0].tolist()
        for expert_idx in expert_hitted:
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
"""


def program(loop: str = MIXTRAL_LOOP, expert_class: str = "Expert", after: str = "") -> str:
    forward = f"""
class Routed(Block):
    def forward(self, hidden_states):
        batch, length, hidden_dim = hidden_states.shape
        hidden_states, routing_weights, final_hidden_states, selected_experts = self.route(hidden_states)
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
{textwrap.indent(textwrap.dedent(loop), " " * 8)}{textwrap.indent(textwrap.dedent(after), " " * 8)}
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


@pytest.fixture(autouse=True)
def fresh_claims():
    reset()
    store.trace_time_declines.clear()
    yield
    reset()


def test_must_rewrite_a_mixtral_routing_loop():
    original, mended, result = original_and_mended(program())
    assert result.changed and not finding_reasons(result, "Capture"), result.findings
    model, mended_model = original.build(), mended.build()
    assert unchosen_experts(model, ONE_TOKEN) == 2
    # Breaks at `.nonzero()`, at `.tolist()`, and at the first expert's `torch.where`,
    # where TorchDynamo gives up on the loop's frame.
    assert counts(model, ONE_TOKEN) == (2, 3)
    assert counts(mended_model, ONE_TOKEN) == (1, 0)
    assert counts(mended_model, SEVERAL) == (1, 0)
    assert list(store.trace_time_declines.values()) == []


@pytest.mark.parametrize("batch", ["one token", "several"])
def test_differential(batch):
    original, mended, _ = original_and_mended(program())
    inputs = ONE_TOKEN if batch == "one token" else SEVERAL
    with torch.no_grad():
        assert_equivalent(original.build(), mended.build(), inputs, backends=("eager", "aot_eager"))


def test_one_graph_over_ten_calls_with_bit_identical_outputs():
    original, mended, _ = original_and_mended(program())
    model, mended_model = original.build(), mended.build()
    from graphmend.counting import CountingBackend

    backend = CountingBackend()
    torch._dynamo.reset()
    compiled = torch.compile(mended_model, backend=backend, dynamic=False)
    with torch.no_grad():
        for _ in range(10):
            assert torch.equal(compiled(ONE_TOKEN), model(ONE_TOKEN))
    assert backend.graphs == 1


# --------------------------------------------------------------------------------------
# Must not rewrite: one case per legality condition.

MUST_NOT_REWRITE = {
    "hits_are_classes_in_order": (
        MIXTRAL_LOOP.replace("sum(dim=(-1, -2))", "sum(dim=(-1, -3))"),
        "",
        "`expert_mask` is not a one-hot mask `one_hot(..., num_classes=E).permute(...)` with its class axis first",
    ),
    "hits_read_only_by_the_loop": (
        MIXTRAL_LOOP,
        "final_hidden_states = final_hidden_states * len(expert_hitted)\n",
        "`expert_hitted` is bound or read elsewhere",
    ),
    "body_does_nothing_for_an_unchosen_expert": (
        MIXTRAL_LOOP.replace(
            "current_state = hidden_states[None, top_x]", "current_state = hidden_states[None, top_x] + hidden_states[0]"
        ).replace("+ hidden_states[0].reshape(-1, hidden_dim)", ".reshape(-1, hidden_dim) + hidden_states[0]"),
        "",
        "is not computed from the expert's positions alone",
    ),
    "loop_names_stay_in_the_loop": (
        MIXTRAL_LOOP,
        "final_hidden_states = final_hidden_states + expert_idx\n",
        "`expert_idx` is bound or read outside the loop",
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_must_not_rewrite(name):
    loop, after, expected = MUST_NOT_REWRITE[name]
    original, mended, result = original_and_mended(program(loop, after=after))
    reasons = finding_reasons(result, "Capture")
    assert reasons and expected in reasons[0], result.findings
    with torch.no_grad():
        assert_equivalent(original.build(), mended.build(), ONE_TOKEN, backends=("eager",))


def test_must_not_rewrite_while_tracing_an_expert_with_effects():
    """An expert whose forward prints would print for an expert no token chose."""
    original, mended, result = original_and_mended(program(expert_class="Talkative"))
    assert result.changed
    model, mended_model = original.build(), mended.build()
    with torch.no_grad():
        assert_equivalent(model, mended_model, ONE_TOKEN, backends=("eager", "aot_eager"))
    assert counts(mended_model, ONE_TOKEN)[1] >= 1
    assert any("does more than call its layers" in r for r in store.trace_time_declines.values())


def test_must_not_rewrite_while_tracing_when_gradients_are_recorded():
    """An expert that ran on no token would get a zero gradient, the original's none."""
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
    assert any("gradients are recorded" in r for r in store.trace_time_declines.values())


def test_must_not_rewrite_while_tracing_an_expert_with_a_hook():
    original, mended, _ = original_and_mended(program())
    model, mended_model = original.build(), mended.build()
    calls = []
    for m in (model, mended_model):
        m.experts[3].register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        assert_equivalent(model, mended_model, ONE_TOKEN, backends=("eager",))
    assert any("expert_calls_are_known" in r and "has a hook" in r for r in store.trace_time_declines.values())


def _body_where_site(mended_model) -> tuple[str, int]:
    code = type(mended_model).forward.__code__
    source_lines = program().splitlines()
    line = next(i for i, text in enumerate(source_lines, 1) if "torch.where(expert_mask[expert_idx])" in text)
    return code.co_filename, line


def test_must_not_rewrite_while_tracing_when_the_body_capture_was_refused():
    """``body_keeps_its_captures``: with the positions' capture refused, the loop over
    every expert would break inside the loop, where TorchDynamo gives up on the whole
    frame (long fuzz run seed 223137: code before the loop ran eagerly where the
    original compiled traced it). The original loop runs, with the original's breaks."""
    original, mended, _ = original_and_mended(program())
    model, mended_model = original.build(), mended.build()
    claims.refuse_for_good(_body_where_site(mended_model), "refused by the test")
    assert counts(mended_model, ONE_TOKEN) == counts(model, ONE_TOKEN) == (2, 3)
    assert any("refused by the test" in r and "chosen experts" in r for r in store.trace_time_declines.values())
    with torch.no_grad():
        assert_equivalent(model, mended_model, ONE_TOKEN, backends=("eager", "aot_eager"))


def test_must_not_rewrite_while_tracing_inside_inference_mode():
    """``body_keeps_its_captures``: no capture is claimed inside ``inference_mode``
    (``claims.not_inside_inference_mode``), so neither is the loop over every expert."""
    original, mended, _ = original_and_mended(program())
    model, mended_model = original.build(), mended.build()

    def under_inference_mode(module):
        def run(batch):
            with torch.inference_mode():
                return module(batch)
        return run

    # Traced inside the ``with`` (the frame that enters the mode): the loop keeps its
    # chosen experts. ``forward``, compiled alone after the break there, does not see the
    # mode entered in its trace, and its loop runs over every expert: fewer breaks.
    counts(under_inference_mode(mended_model), ONE_TOKEN)
    assert any("inference" in r and "chosen experts" in r for r in store.trace_time_declines.values())
    assert_equivalent(under_inference_mode(model), under_inference_mode(mended_model), ONE_TOKEN, backends=("eager", "aot_eager"))


# --------------------------------------------------------------------------------------
# Must not rewrite while tracing: an expert whose whole call is not known to do nothing
# on no rows (``expert_calls_are_known``, ``experts_are_a_module_list``,
# ``no_module_hooks``). Each would run Python for an expert no token chose: a load
# counter of the original's chosen experts would list every expert.


def _counted(forward):
    @functools.wraps(forward)
    def counted(self, hidden_states):
        LOAD.append(self.number)
        return forward(self, hidden_states)

    return counted


class Wrapped(Expert):
    """Its class's ``forward`` replaced by a wrapper that keeps the wrapped source."""

    forward = _counted(Expert.forward)


class CountingList(nn.ModuleList):
    def __getitem__(self, index):
        if isinstance(index, int):
            LOAD.append(index)
        return super().__getitem__(index)


def _counting_function(number, function):
    def counting(hidden_states):
        LOAD.append(number)
        return function(hidden_states)

    return counting


def _own_method(model):
    pass  # ``Counting.count`` counts


def _forward_replaced_on_a_linear(model):
    for expert in model.experts:
        expert.w1.forward = _counting_function(expert.number, functools.partial(nn.Linear.forward, expert.w1))


def _function_in_place_of_a_child(model):
    for expert in model.experts:
        del expert.act_fn
        expert.act_fn = _counting_function(expert.number, torch.nn.functional.silu)


def _forward_replaced_on_an_activation(model):
    for expert in model.experts:
        expert.act_fn.forward = _counting_function(expert.number, torch.nn.functional.silu)


def _forward_replaced_on_the_expert(model):
    for expert in model.experts:
        expert.forward = _counting_function(expert.number, expert.forward)


def _module_list_that_counts(model):
    model.experts.__class__ = CountingList


def _hook_on_a_layer_the_expert_calls(model):
    for expert in model.experts:
        expert.w2.register_forward_pre_hook(lambda module, inputs, number=expert.number: LOAD.append(number))


# name: (expert class, how the built model is changed, what the refusal says)
UNKNOWN_EXPERT_CALLS = {
    "own_method": ("Counting", _own_method, "expert_calls_are_known: expert 0: `Counting.count` is not a child module"),
    "forward_replaced_on_a_linear": ("Expert", _forward_replaced_on_a_linear, "`w1`: `Linear` instance sets `forward`"),
    "function_in_place_of_a_child": ("Expert", _function_in_place_of_a_child, "`Expert.act_fn` is not a child module"),
    "forward_replaced_on_an_activation": ("Expert", _forward_replaced_on_an_activation, "`SiLU` instance sets `forward`"),
    "forward_replaced_on_the_expert": ("Expert", _forward_replaced_on_the_expert, "`Expert` instance sets `forward`"),
    "class_forward_wrapped": ("Wrapped", _own_method, "`Wrapped.forward` is not a plain function"),
    "module_list_that_counts": ("Expert", _module_list_that_counts, "experts_are_a_module_list"),
    "hook_on_a_layer_the_expert_calls": ("Expert", _hook_on_a_layer_the_expert_calls, "`w2`: `Linear` has a hook"),
}


def _built(module, change):
    model = module.build()
    for number, expert in enumerate(model.experts):
        expert.number, expert.calls = number, 0
    change(model)
    return model


def _observed(model, batch, backend=None):
    """The output, the load counter and the experts' own counts, from one call."""
    LOAD.clear()
    run = model
    if backend is not None:
        torch._dynamo.reset()
        run = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
        output = run(batch)
    return output, list(LOAD), [getattr(expert, "calls", None) for expert in model.experts._modules.values()]


@pytest.mark.parametrize("name", sorted(UNKNOWN_EXPERT_CALLS))
def test_must_not_rewrite_while_tracing_an_expert_whose_call_is_not_known(name):
    expert_class, change, expected = UNKNOWN_EXPERT_CALLS[name]
    original, mended, result = original_and_mended(program(expert_class=expert_class))
    assert result.changed and not finding_reasons(result, "Capture")
    reference_model = _built(original, change)
    assert unchosen_experts(reference_model, ONE_TOKEN) == 2
    output, load, calls = _observed(reference_model, ONE_TOKEN)
    assert sorted(set(load)) == [1, 3]  # the two experts the token chose, not 0 or 2
    for backend in (None, "eager", "aot_eager"):
        reset()
        store.trace_time_declines.clear()
        mended_output, mended_load, mended_calls = _observed(_built(mended, change), ONE_TOKEN, backend)
        assert torch.equal(mended_output, output), backend
        assert mended_load == load and mended_calls == calls, backend
        if backend is not None:
            assert any(expected in r and "chosen experts" in r for r in store.trace_time_declines.values()), (
                store.trace_time_declines
            )
    mended_counts = counts(_built(mended, change), ONE_TOKEN)
    assert mended_counts == counts(_built(original, change), ONE_TOKEN), name
    LOAD.clear()


def test_must_not_rewrite_while_tracing_with_a_global_backward_hook():
    """``no_module_hooks``: a hook registered for every module (here a backward one)."""
    original, mended, _ = original_and_mended(program())
    handle = torch.nn.modules.module.register_module_full_backward_hook(lambda *_: None)
    try:
        model, mended_model = original.build(), mended.build()
        assert counts(mended_model, ONE_TOKEN) == counts(model, ONE_TOKEN)
        with torch.no_grad():
            # Compiled, torch warns of the hook: compared with the original compiled.
            for backend in ("eager", "aot_eager"):
                observe(mended_model, ONE_TOKEN, compiled=True, backend=backend).assert_same_as(
                    observe(model, ONE_TOKEN, compiled=True, backend=backend)
                )
    finally:
        handle.remove()
    assert any("no_module_hooks" in r for r in store.trace_time_declines.values())


def test_expert_calls_of_the_suite_are_known():
    """Mixtral's and Qwen2-MoE's experts (transformers 4.52.4): their whole call is known."""
    from graphmend.runtime.expert_calls import why_call_not_known

    transformers = pytest.importorskip("transformers")
    from transformers.models.mixtral.modeling_mixtral import MixtralBlockSparseTop2MLP
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeMLP

    mixtral = transformers.MixtralConfig(hidden_size=8, intermediate_size=16)
    qwen = transformers.Qwen2MoeConfig(hidden_size=8, intermediate_size=16)
    assert why_call_not_known(MixtralBlockSparseTop2MLP(mixtral)) is None
    assert why_call_not_known(Qwen2MoeMLP(qwen, intermediate_size=16)) is None
    for activation in ("gelu", "gelu_python", "gelu_new", "mish", "gelu_10", "relu2", "silu"):
        assert why_call_not_known(transformers.activations.ACT2FN[activation]) is None, activation


# --------------------------------------------------------------------------------------
# The ``index_add_`` of no rows (``destination_is_unseen``): an expert no token chose
# adds nothing, but the write bumps its tensor's version counter. Into a tensor from
# outside the graph that autograd saved, a later ``backward()`` would fail where the
# original, which wrote nothing, works.

DESTINATION_FROM_THE_CALLER = EXPERTS + f"""
class Routed(Block):
    def forward(self, hidden_states, final_hidden_states):
        batch, length, hidden_dim = hidden_states.shape
        hidden_states, routing_weights, _unused, selected_experts = self.route(hidden_states)
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
{textwrap.indent(textwrap.dedent(MIXTRAL_LOOP), " " * 8)}
        return final_hidden_states * 2


def build():
    torch.manual_seed(0)
    return Routed().eval().requires_grad_(False)
"""

NO_TOKEN = torch.randn(1, 0, 8, generator=torch.Generator().manual_seed(3))


def _saved_destination_call(model, batch, backend):
    """Autograd saves the destination before the call; the backward after it."""
    run = model
    if backend is not None:
        torch._dynamo.reset()
        run = torch.compile(model, backend=backend, dynamic=False)
    destination = torch.zeros(batch.shape[0] * batch.shape[1], batch.shape[2])
    weight = torch.randn(destination.shape, requires_grad=True, generator=torch.Generator().manual_seed(4))
    saved = destination * weight
    with torch.no_grad():
        output = run(batch, destination)
    try:
        saved.sum().backward()
        error = None
    except RuntimeError as exception:
        error = str(exception).splitlines()[0]
    return output, destination._version, error, weight.grad


@pytest.mark.parametrize("backend", [None, "eager", "aot_eager"])
def test_a_destination_autograd_saved_is_not_written_for_no_token(backend):
    original, mended, result = original_and_mended(DESTINATION_FROM_THE_CALLER)
    assert result.changed and not finding_reasons(result, "Capture")
    output, version, error, gradient = _saved_destination_call(original.build(), NO_TOKEN, None)
    assert error is None and version == 0
    mended_output, mended_version, mended_error, mended_gradient = _saved_destination_call(
        mended.build(), NO_TOKEN, backend
    )
    assert mended_error is None and mended_version == version
    assert torch.equal(mended_output, output) and torch.equal(mended_gradient, gradient)
    if backend is not None:
        assert any(
            "destination_is_unseen" in r and "comes from outside the graph" in r
            for r in store.trace_time_declines.values()
        ), store.trace_time_declines


def test_a_destination_from_the_caller_keeps_the_original_loop_and_its_counts():
    original, mended, _ = original_and_mended(DESTINATION_FROM_THE_CALLER)
    model, mended_model = original.build(), mended.build()
    for batch in (NO_TOKEN, ONE_TOKEN):
        rows = batch.shape[0] * batch.shape[1]
        assert counts(mended_model, batch, torch.zeros(rows, 8)) == counts(model, batch, torch.zeros(rows, 8))

        def made_inside(module, batch=batch, rows=rows):
            return lambda: (module(batch, torch.zeros(rows, 8)),)

        with torch.no_grad():
            assert_equivalent(made_inside(model), made_inside(mended_model), backends=("eager", "aot_eager"))


def test_must_rewrite_a_destination_made_in_the_graph_with_a_batch_of_no_token():
    """A destination the graph made and nothing read: the loop over every expert runs,
    one graph, with the original's values."""
    original, mended, _ = original_and_mended(program())
    model, mended_model = original.build(), mended.build()
    assert counts(mended_model, NO_TOKEN) == (1, 0)
    with torch.no_grad():
        assert_equivalent(model, mended_model, NO_TOKEN, backends=("eager", "aot_eager"))


def test_must_not_rewrite_while_tracing_a_destination_read_before_the_loop():
    """``destination_is_unseen``: a read of the destination before the loop could be
    saved by autograd."""
    loop = "total = final_hidden_states.sum()\n" + textwrap.dedent(MIXTRAL_LOOP)
    original, mended, _ = original_and_mended(program(loop, after="final_hidden_states = final_hidden_states + total\n"))
    model, mended_model = original.build(), mended.build()
    assert counts(mended_model, ONE_TOKEN) == counts(model, ONE_TOKEN)
    assert any(
        "destination_is_unseen" in r and "reads the destination" in r for r in store.trace_time_declines.values()
    ), store.trace_time_declines
    with torch.no_grad():
        assert_equivalent(model, mended_model, ONE_TOKEN, backends=("eager", "aot_eager"))


def test_must_not_rewrite_a_destination_that_may_be_unbound():
    """``destination_is_bound_at_the_loop``: the check made while tracing reads the
    destination before the loop, where the original reads it only in the body."""
    loop = MIXTRAL_LOOP.replace("final_hidden_states.index_add_", "accumulated.index_add_")
    loop = "if batch > 0:\n    accumulated = torch.zeros_like(hidden_states)\n" + textwrap.dedent(loop)
    original, mended, result = original_and_mended(program(loop, after="final_hidden_states = accumulated\n"))
    reasons = finding_reasons(result, "Capture")
    assert reasons and "the destination `accumulated` may be unbound" in reasons[0], result.findings
    with torch.no_grad():
        assert_equivalent(original.build(), mended.build(), ONE_TOKEN, backends=("eager",))
