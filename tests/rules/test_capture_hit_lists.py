"""[Capture] ``torch.where`` inside a loop over the experts a batch hit, taken to Python
as a list (``(counts > 0).nonzero().squeeze(-1).tolist()``), which the loop pass does not
rewrite: the positions are captured in each iteration. The original broke inside the
loop, and TorchDynamo ran that frame eagerly for good; the mended frame would compile
the loop unrolled, guarded on the list, again for each list (G318). Counts over calls
with 1 to 4 experts hit, exact; the rewrite kept where the loop's length is fixed or
the original compiled the frame anyway; outputs the original's, bit for bit."""

from __future__ import annotations

import contextlib
import io
import warnings

import pytest
import torch

from graphmend.core.legality import condition_id
from graphmend.counting import CountingBackend, recording_graph_breaks
from graphmend.runtime import reset
from graphmend.runtime.store import store
from helpers import assert_equivalent, original_and_mended

BLOCK = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width=3, experts=4):
        super().__init__()
        self.num_experts = experts
        self.experts = nn.ModuleList([nn.Linear(width, width) for _ in range(experts)])

    def forward(self, hidden_states, choice):
        final_hidden_states = torch.zeros_like(hidden_states)
        expert_mask = F.one_hot(choice, num_classes=self.num_experts).permute(1, 0)
{loop}
        return final_hidden_states


def build():
    torch.manual_seed(0)
    return Block().eval()
"""

BODY = """
            (top_x,) = torch.where(expert_mask[expert_idx])
            final_hidden_states.index_add_(0, top_x, self.experts[expert_idx](hidden_states[top_x]))"""

HITS = "(expert_mask.sum(dim=-1) > 0).nonzero().squeeze(-1).tolist()"

# The loop over the experts hit: the list bound to a name first, iterated at once, or
# the rows of a 2-D list (a list of lists); with the original's graphs and breaks over
# the four calls, which the mended frame keeps.
ROWS = "(expert_mask.sum(dim=-1, keepdim=True) > 0).nonzero().tolist()"
LISTED = {
    "bound to a name": (f"        expert_hit = {HITS}\n        for expert_idx in expert_hit:{BODY}", (5, 6)),
    "iterated at once": (f"        for expert_idx in {HITS}:{BODY}", (5, 6)),
    "rows of a 2-D list": (f"        for expert_idx, _ in {ROWS}:{BODY}", (1, 6)),
}

# Where the rewrite pays: a loop whose length the program fixes (the original ran the
# frame eagerly; the mended one compiles once, whatever the experts hit), and a capture
# outside the loop over the list (the original compiled the frame too, again for each list).
FIXED_LENGTH = f"        for expert_idx in range(self.num_experts):{BODY}"
CAPTURE_BEFORE_THE_LOOP = f"""        expert_hit = {HITS}
        (top_x,) = torch.where(expert_mask[expert_hit[0]])
        final_hidden_states.index_add_(0, top_x, hidden_states[top_x])
        for expert_idx in expert_hit:
            final_hidden_states = final_hidden_states * (expert_idx + 1)"""

TOKENS = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
# The expert of each of the four tokens: 1, 2, 3 and 4 experts hit, in turn.
CHOICES = [torch.tensor(choice) for choice in ([2, 2, 2, 2], [0, 3, 0, 3], [1, 0, 2, 1], [3, 1, 0, 2])]


@pytest.fixture(autouse=True)
def fresh_claims():
    reset()
    store.trace_time_declines.clear()
    yield
    reset()


def _pair(loop: str):
    original, mended, result = original_and_mended(BLOCK.format(loop=loop))
    assert result.changed and any(f.rule == "Capture" and f.fixed for f in result.findings), result.findings
    return original.build(), mended.build()


def _graphs_and_breaks_over_the_choices(model) -> tuple[int, int]:
    """Graphs and breaks of ``model`` compiled once and called with each choice in turn."""
    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        with recording_graph_breaks() as records:
            for choice in CHOICES:
                compiled(TOKENS, choice)
    return backend.graphs, len(records.breaks)


def _declined() -> set[str | None]:
    return {condition_id(reason) for reason in store.trace_time_declines.values()}


@pytest.mark.parametrize("name", sorted(LISTED))
def test_a_capture_in_a_loop_over_a_list_of_the_experts_hit_keeps_its_break(name):
    """Mended, the frame compiled the loop unrolled and guarded on the list, once for each
    list (a list bound to a name: 9 graphs and 5 breaks), where the original ran that
    frame eagerly (5 graphs and 6 breaks; G318)."""
    loop, counts = LISTED[name]
    model, mended_model = _pair(loop)
    assert _graphs_and_breaks_over_the_choices(model) == counts
    assert _graphs_and_breaks_over_the_choices(mended_model) == counts
    assert "G318" in _declined(), store.trace_time_declines


def test_a_capture_in_a_loop_of_a_fixed_length_joins():
    """G318's must-not row: ``range(self.num_experts)`` guards on no list, and the frame
    the original ran eagerly compiles once, whatever the experts hit."""
    model, mended_model = _pair(FIXED_LENGTH)
    assert _graphs_and_breaks_over_the_choices(model) == (0, 1)
    assert _graphs_and_breaks_over_the_choices(mended_model) == (1, 0)
    assert "G318" not in _declined(), store.trace_time_declines


def test_a_capture_before_a_loop_over_the_list_joins():
    """G318's must-not row: the capture is not in the loop, so the original compiled the
    frame as well, again for each list; joined, each list's frame is one graph."""
    model, mended_model = _pair(CAPTURE_BEFORE_THE_LOOP)
    assert _graphs_and_breaks_over_the_choices(model) == (13, 9)
    assert _graphs_and_breaks_over_the_choices(mended_model) == (9, 5)
    assert "G318" not in _declined(), store.trace_time_declines


@pytest.mark.parametrize("loop", [*sorted(LISTED), "fixed length", "capture before the loop"])
def test_differential(loop):
    source = {"fixed length": FIXED_LENGTH, "capture before the loop": CAPTURE_BEFORE_THE_LOOP}.get(loop) or LISTED[loop][0]
    model, mended_model = _pair(source)
    with torch.no_grad():
        for choice in CHOICES:
            assert_equivalent(model, mended_model, TOKENS, choice, backends=("eager", "aot_eager"))
        # One compiled frame over every choice, as the counts are taken: the original's values.
        torch._dynamo.reset()
        compiled = torch.compile(mended_model, backend="eager", dynamic=False)
        for choice in CHOICES:
            assert torch.equal(compiled(TOKENS, choice), model(TOKENS, choice))
