"""What the analysis reports about one break candidate, and what the rules did with it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

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
    ``reason`` is the legality condition that failed, in words a user can act on.
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

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        if self.fixed:
            outcome = f"fixed by {self.rule}"
        elif self.rule:
            outcome = f"{self.rule} declined: {self.reason}"
        else:
            outcome = f"not fixable: {self.reason}" if self.reason else "not fixable"
        return f"{self.message} ({outcome})"
