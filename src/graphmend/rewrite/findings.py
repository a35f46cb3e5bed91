"""What the analysis reports about one break candidate, and what the rules did with it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from graphmend.core.legality import condition_id, declined

# Break categories, as in the GraphMend paper's Table 2.
DATA_DEPENDENT_CONTROL_FLOW = "DC"
LOGGER_CALL = "LC"
VALIDATION_GUARD = "VG"
TENSOR_ITEM = "TI"
DYNAMIC_SHAPE_OPERATOR = "DS"
DATA_DEPENDENT_OPERATOR = "DO"

CATEGORY_TITLES = {
    DATA_DEPENDENT_CONTROL_FLOW: "data-dependent control flow",
    LOGGER_CALL: "print/logging/warnings call",
    VALIDATION_GUARD: "data-dependent validation guard",
    TENSOR_ITEM: "tensor.item() call",
    DYNAMIC_SHAPE_OPERATOR: "dynamic-shape operator",
    DATA_DEPENDENT_OPERATOR: "data-dependent operator",
}


@dataclass
class Finding:
    """One graph-break candidate at a source location.

    ``rule`` names the rule that fixed it (``fixed`` is then true) or that declined;
    ``reason`` is the legality condition that failed, in words a user can act on, and
    ``condition`` its id in the registry (``graphmend.core.legality``), where it has one.
    """

    line: int
    col: int
    category: str
    message: str
    function: str
    rule: str | None = None
    fixed: bool = False
    reason: str | None = None
    path: str = "<string>"
    # ``# graphmend: ignore`` (or ``ignore[CODE,...]`` naming this category) on the
    # statement's lines: not rewritten, and ``check`` does not report it.
    suppressed: bool = False
    # Set when the site is a break only once graphmend keeps an earlier value in the
    # graph (a branch on positions Capture keeps, a check on an ``.item()`` Trap keeps):
    # what that value is, in words. In the original program the break is at that value
    # (reported there); this site is rewritten with it and is no candidate of its own.
    follows: str | None = None
    condition: str | None = None
    # Set on a fix that holds only under a backend that runs the graph's ops in order
    # (eager, aot_eager): what the run does under the others, in words. Under inductor,
    # the default, a graph keeps no output beside a lowered guard
    # (``whole_trace_conditions.outputs_share_no_graph_with_a_lowered_guard``), so ``check`` must not
    # say "fixed" alone for a statement the run may keep as a break.
    caveat: str | None = None
    # Set on a fix whose exactness a condition decides while tracing, where the source
    # cannot (the values a call formats, not provably plain Python values): what must
    # hold then, in words, with the condition's id. Failing it, the run keeps the break.
    while_tracing: str | None = None

    def __post_init__(self) -> None:
        if self.condition is None and not self.fixed:
            self.condition = condition_id(self.reason)

    def as_dict(self) -> dict:
        return asdict(self)

    def outcome(self) -> str:
        """What graphmend does about it."""
        if self.fixed:
            conditions = ", ".join(text for text in (self.while_tracing, self.caveat) if text)
            return f"fixed by {self.rule}" + (f" {conditions}" if conditions else "")
        if self.rule:
            return declined(self.rule, self.reason)
        return f"not fixable: {self.reason}" if self.reason else "not fixable"

    def describe(self) -> str:
        condition = f", a break only once {self.follows}" if self.follows else ""
        return f"{self.message}{condition} ({self.outcome()})"
