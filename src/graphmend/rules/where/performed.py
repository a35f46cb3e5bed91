"""[Where] a branch whose arms choose which existing object an attribute holds: the
graph computes the condition, and the arms run, unchanged, when the graph runs.

    if seq_len > limit:
        if not hasattr(self, "long"):
            self.long = make_long(limit)
        self.register_buffer("table", self.long, persistent=False)
    else:
        self.register_buffer("table", self.short, persistent=False)
becomes (on the compiled path; the eager path keeps the original ``if``)
    _gm_taken_1 = __graphmend__.guard_holds(seq_len > limit, True)
    def _gm_arms_1(_gm_taken, self, limit):
        if _gm_taken:
            <the true arm>
        else:
            <the false arm>
    __graphmend__.perform_choice(_gm_taken_1, _gm_arms_1, self, "table", (self, limit))

A selection (``branches.py``) would make ``self.table`` a new tensor; here the object the
original chose is written, by the original code, at the branch's place in the graph
(runtime/performed_choice.py says how, and what it checks while tracing and over the
whole trace). The memoized attribute is made when and as the original made it.

Static conditions, each returning None when it holds or the reason it fails:
- ``arms_end_writing_one_attribute`` (W119): both arms end by writing, to one attribute
  of one receiver, another of its attributes' objects (``R.register_buffer("a", R.b,
  ...)`` or ``R.a = R.b``): the attribute whose value the graph reads afterwards. (A
  new value, ``R.a = 1``, is no choice between existing objects: a selection's case.)
- ``arms_write_only_the_receiver`` (W120): every other statement of the arms writes
  attributes of that receiver, calls one of its methods, or is a memoized initialization
  ``if not hasattr(R, "b"): ...`` of such statements: the rest of the trace sees only the
  named attribute's new value, so nothing else may be written where the code after the
  branch could read it (locals, other objects).
- ``arms_bind_no_name_read_after`` (W121): a name an arm binds (``self.b, _ = ...``) is
  read nowhere after the branch: it is bound inside the arms' function, not the caller.
- ``arms_read_bound_locals`` (W122): each local the arms read is bound on every path to
  the branch: it is passed to the arms' function, which the original only reads on the
  taken path.
"""

from __future__ import annotations

import ast
import copy

from graphmend.core.legality import failed
from graphmend.rewrite.templates import RUNTIME_NAME, statements
from graphmend.rules.where.memoized import attribute_missing_test

_RECEIVER_WRITES = ("register_buffer",)


def written_attribute(statement: ast.stmt) -> tuple[str, str] | None:
    """(receiver, attribute) when ``statement`` writes another attribute's object to an
    attribute of one receiver: ``R.register_buffer("a", R.b, ...)`` or ``R.a = R.b``."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        if (
            isinstance(call.func, ast.Attribute)
            and call.func.attr in _RECEIVER_WRITES
            and isinstance(call.func.value, ast.Name)
            and len(call.args) >= 2
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
            and not any(isinstance(a, ast.Starred) for a in call.args)
            and _is_receiver_attribute(call.args[1], call.func.value.id)
        ):
            return call.func.value.id, call.args[0].value
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and _is_receiver_attribute(statement.value, target.value.id)
        ):
            return target.value.id, target.attr
    return None


def chosen_attribute(statement: ast.stmt) -> str:
    """The attribute whose object ``statement`` (one ``written_attribute`` recognises)
    writes: ``b`` of ``R.register_buffer("a", R.b)`` or ``R.a = R.b``."""
    value = statement.value.args[1] if isinstance(statement, ast.Expr) else statement.value
    return value.attr


def arms_end_writing_one_attribute(arms: list[list[ast.stmt]]) -> tuple[str | None, tuple[str, str] | None]:
    ends = [written_attribute(arm[-1]) if arm else None for arm in arms]
    if None in ends or ends[0] != ends[1]:
        return failed("W119", "the arms do not both end by writing one attribute of one receiver"), None
    return None, ends[0]


def _is_receiver_attribute(target: ast.expr, receiver: str) -> bool:
    return isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == receiver


def _writes_only(statement: ast.stmt, receiver: str) -> str | None:
    line = statement.lineno
    if isinstance(statement, ast.Pass):
        return None
    if isinstance(statement, ast.Assign):
        for target in statement.targets:
            elements = target.elts if isinstance(target, ast.Tuple) else [target]
            for element in elements:
                if not (isinstance(element, ast.Name) or _is_receiver_attribute(element, receiver)):
                    return f"line {line}: `{ast.unparse(element)}` is not an attribute of `{receiver}`"
        return None
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        if _is_receiver_attribute(statement.value.func, receiver):
            return None
        return f"line {line}: `{ast.unparse(statement.value.func)}` is not a method of `{receiver}`"
    if isinstance(statement, ast.If) and not statement.orelse:
        tested = attribute_missing_test(statement.test)
        if tested is not None and isinstance(tested[0], ast.Name) and tested[0].id == receiver:
            for inner in statement.body:
                reason = _writes_only(inner, receiver)
                if reason:
                    return reason
            return None
    return f"line {line}: a `{type(statement).__name__}` statement may change more than `{receiver}`'s attributes"


def arms_write_only_the_receiver(arms: list[list[ast.stmt]], receiver: str) -> str | None:
    for arm in arms:
        for statement in arm:
            reason = _writes_only(statement, receiver)
            if reason:
                return failed("W120", reason)
    return None


def _bound_and_read(arms: list[list[ast.stmt]]) -> tuple[set[str], list[str]]:
    bound: set[str] = set()
    read: list[str] = []
    for arm in arms:
        for statement in arm:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name):
                    if isinstance(node.ctx, ast.Store):
                        bound.add(node.id)
                    elif node.id not in read:
                        read.append(node.id)
    return bound, read


def _attributes_assigned(arms: list[list[ast.stmt]], receiver: str) -> set[str]:
    return {
        node.attr
        for arm in arms
        for statement in arm
        for node in ast.walk(statement)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_receiver_attribute(node, receiver)
    }


def arms_bind_no_name_read_after(bound: set[str], used_after: set[str]) -> str | None:
    carried = sorted(bound & used_after)
    if carried:
        return failed("W121", f"`{carried[0]}`, which an arm binds, is read after the branch")
    return None


def arms_read_bound_locals(context, node, names: list[str]) -> str | None:
    for name in names:
        if not context.facts.reaching.definitely_assigned(node, name):
            return failed("W122", f"`{name}` may be unbound at the branch, and the arms' function is passed it")
    return None


def plan(context, statement: ast.If, false_arm: list[ast.stmt], number: int, taken_test: ast.expr, used_after: set[str]):
    """The compiled form's statements, or the reason (marked with its id) it is declined."""
    arms = [statement.body, false_arm]
    reason, written = arms_end_writing_one_attribute(arms)
    if reason:
        return reason
    receiver, attribute = written
    reason = arms_write_only_the_receiver(arms, receiver)
    if reason:
        return reason
    bound, read = _bound_and_read(arms)
    reason = arms_bind_no_name_read_after(bound, used_after)
    if reason:
        return reason
    facts = context.facts
    passed = [name for name in read if name not in bound and (facts.is_local(name) or name in facts.outer_names)]
    if receiver not in passed:
        return failed("W120", f"the receiver `{receiver}` is not a local of the function")
    node = facts.node_for(statement)
    reason = arms_read_bound_locals(context, node, passed)
    if reason:
        return reason
    taken = f"_gm_taken_{number}"
    function = f"_gm_arms_{number}"
    parameters = ", ".join(["_gm_taken", *passed])
    planned = statements(f"{taken} = HOLDS", HOLDS=taken_test)
    planned += statements(
        f"def {function}({parameters}):\n    if _gm_taken:\n        TRUE_ARM\n    else:\n        FALSE_ARM",
        TRUE_ARM=copy.deepcopy(statement.body),
        FALSE_ARM=copy.deepcopy(false_arm),
    )
    arguments = "(" + "".join(f"{name}, " for name in passed) + ")"
    also_written = tuple(sorted(_attributes_assigned(arms, receiver) - {attribute}))
    chosen = tuple(sorted({chosen_attribute(arm[-1]) for arm in arms}))
    planned += statements(
        f"{RUNTIME_NAME}.perform_choice({taken}, {function}, {receiver}, {attribute!r}, {arguments}, {also_written!r}, "
        f"{chosen!r})"
    )
    checks = statements(
        f"{RUNTIME_NAME}.reads_plainly({receiver}, {attribute!r}) and {RUNTIME_NAME}.writes_plainly({receiver}, {attribute!r})"
    )[0].value
    return planned, checks
