"""[Capture] a loop over the experts a batch chose, run over every expert: the
mixture-of-experts routing of Mixtral and Qwen2-MoE (transformers 4.52.4) in small.
Must-rewrite with graph and break counts, one must-not case per legality condition
(source and trace time), differential runs where some expert gets no token."""

from __future__ import annotations

import contextlib
import io
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn

from graphmend.counting import count_breaks
from graphmend.runtime import claims
from helpers import assert_equivalent, finding_reasons, original_and_mended

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


EXPERTS = f"""
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F

Expert = sys.modules[{__name__!r}].Expert
Talkative = sys.modules[{__name__!r}].Talkative


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
    claims.forget_refusals()
    claims.trace_time_declines.clear()
    yield
    claims.forget_refusals()


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
    assert list(claims.trace_time_declines.values()) == []


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
    assert any("does more than call its layers" in r for r in claims.trace_time_declines.values())


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
    assert any("gradients are recorded" in r for r in claims.trace_time_declines.values())


def test_must_not_rewrite_while_tracing_an_expert_with_a_hook():
    original, mended, _ = original_and_mended(program())
    model, mended_model = original.build(), mended.build()
    calls = []
    for m in (model, mended_model):
        m.experts[3].register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        assert_equivalent(model, mended_model, ONE_TOKEN, backends=("eager",))
    assert any("forward hook" in r for r in claims.trace_time_declines.values())


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
    assert any("refused by the test" in r and "chosen experts" in r for r in claims.trace_time_declines.values())
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
    assert any("inference" in r and "chosen experts" in r for r in claims.trace_time_declines.values())
    assert_equivalent(under_inference_mode(model), under_inference_mode(mended_model), ONE_TOKEN, backends=("eager", "aot_eager"))
