"""[Capture] a branch on whether positions are empty stays in the graph.

    if len(idx) > 0:
        local = hidden[idx, 1:].contiguous()
        local = self.conv(local)
        merged[idx] = self.fuse(merged[idx], local)
becomes, on the compiled path (when the checks made while tracing hold),
    def _gm_rows_1(idx):
        idx = __graphmend__.dynamic_shapes.positions_known_nonempty(idx)
        local = hidden[idx, 1:].contiguous()
        local = self.conv(local)
        return idx, self.fuse(merged[idx], local)
    _gm_at_1, _gm_values_1 = __graphmend__.dynamic_shapes.merge_rows(idx, merged, _gm_rows_1)
    merged[_gm_at_1] = _gm_values_1

Gather rows at some positions, compute, write the result back at them: CLAP's fusion of
long inputs. Once the positions are captured (``positions.py``) their count is a size
tracing does not know, and ``if len(idx) > 0`` must know it: the graph breaks there.
``merge_rows`` is ``torch.cond`` on that count: with positions it runs the body, on
positions whose size tracing knows to be at least 1 in that branch alone (a batch norm
in the body asks whether its input is empty); without, it gives the positions and the
destination's rows at them, none, and the write after it changes nothing. The body runs
exactly when the original's did, on the same values, and the same rows are written with
the same numbers, so the result is bit for bit the original's.

In the original program the positions' producer breaks the graph first (reported
there), and the branch then tests a size Python knows: ``check`` lists the branch as a
follow-on ("a break only once the positions are kept in the graph"), not a candidate.

Legality conditions (each a function, returning the reason it fails):
- ``tests_whether_positions_are_empty``: the test is ``len(P) > 0`` (``!= 0``,
  ``>= 1``, or ``len(P)`` alone; ``P.numel()``, ``P.shape[0]`` and ``P.size(0)``
  alike) with ``P`` a name, and the branch has no ``else``.
- ``ends_by_writing_rows_at_the_positions``: the body's last statement is
  ``D[P] = V`` with ``D`` a name other than ``P`` (a branch that does not is no
  candidate: a list's length, a count).
- ``body_only_binds_names``: every other statement binds names (``a = ...``, ``a, b =
  ...``) from expressions that neither yield, await, bind with ``:=`` nor read the
  enclosing frame (``super()``, ``locals()``...); nothing else (an output, a ``raise``,
  a loop) could run in a ``torch.cond`` branch.
- ``body_reads_its_names_after_binding_them``: the body binds neither ``P`` nor ``D``,
  nor a global or nonlocal name, and reads no name it binds before binding it (the body
  becomes a function, where such a read finds no value).
- ``body_names_stay_in_the_body``: no read after the branch sees a name the body binds
  (on the compiled path the body's names live in its function).
- ``body_reads_only_bound_names``: every name of the enclosing function the body reads
  is bound wherever the branch is reached (the body's function takes them as defaults,
  evaluated where it is defined: no cell of the frame, which TorchDynamo would return
  from the graph and AOTAutograd would then give a gradient).
- ``destination_is_bound_at_the_branch``: ``D`` is bound wherever the branch is
  reached, a global one too (the compiled form reads it before the test).
Checked while tracing (``graphmend.runtime.dynamic_shapes.may_merge_rows``): ``P`` is a
1-D integer tensor of a size tracing does not know (a captured one; a known size
does not break), ``D`` a tensor the graph made that nothing read yet, not a view and
sharing its storage with no other value (``destination_is_unseen``: the merged form
writes ``D[P] = V`` without positions too, where the original writes nothing; a write
of no rows changes no value but bumps the version counter, and a tensor autograd saved
before, or the caller's, would then fail ``backward()``), and the claim on the break
holds. Where ``torch.cond``
cannot capture the body (an effect in it, a module that updates its state, a forward
hook), the frame is traced again with the branch as written
(``graphmend.runtime.conversion_failures``).
"""

from __future__ import annotations

import ast
import copy

from graphmend.analysis.aliasing import References
from graphmend.analysis.reaching import statement_bindings
from graphmend.analysis.safety import ExpressionSafety
from graphmend.core.legality import failed
from graphmend.rewrite.findings import DYNAMIC_SHAPE_OPERATOR
from graphmend.rewrite.templates import (
    RUNTIME_NAME,
    compiled_or_original,
    expression,
    is_guard,
    place,
    statements,
)
from graphmend.rules.base import FunctionContext, rewrite_statements
from graphmend.rules.capture.positions import RULE

_FRAME_READERS = frozenset({"super", "locals", "vars", "globals", "eval", "exec", "__class__"})


def _positions_size(node: ast.expr, facts) -> str | None:
    """``P`` for ``len(P)``, ``P.numel()``, ``P.shape[0]`` or ``P.size(0)``."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"
            and (facts is None or not facts.is_local("len")) and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.Name)):
        return node.args[0].id
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and not node.keywords):
        if node.func.attr == "numel" and not node.args:
            return node.func.value.id
        if node.func.attr == "size" and len(node.args) == 1 and _is_int(node.args[0], 0):
            return node.func.value.id
    if (isinstance(node, ast.Subscript) and _is_int(node.slice, 0) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape" and isinstance(node.value.value, ast.Name)):
        return node.value.value.id
    return None


def may_test_emptiness(test: ast.expr) -> bool:
    """A cheap look: whether ``test`` has the shape ``tests_whether_positions_are_empty``
    accepts (before any analysis of the function)."""
    left = test.left if isinstance(test, ast.Compare) and len(test.ops) == 1 else test
    return isinstance(left, (ast.Call, ast.Subscript)) and _positions_size(left, None) is not None


def _is_int(node: ast.AST, value: int) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value == value


def tests_whether_positions_are_empty(context: FunctionContext, branch: ast.If) -> tuple[str | None, str | None]:
    """Returns (reason, P)."""
    test = branch.test
    positions = None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        operator, bound = test.ops[0], test.comparators[0]
        if (isinstance(operator, (ast.Gt, ast.NotEq)) and _is_int(bound, 0)) or (
            isinstance(operator, ast.GtE) and _is_int(bound, 1)
        ):
            positions = _positions_size(test.left, context.facts)
    else:
        positions = _positions_size(test, context.facts)
    if positions is None:
        return "the test is not whether a name's positions are empty (`len(P) > 0`)", None
    if branch.orelse:
        return "the branch has an `else`", positions
    return None, positions


def ends_by_writing_rows_at_the_positions(branch: ast.If, positions: str) -> tuple[str | None, ast.Assign | None]:
    last = branch.body[-1]
    if (isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Subscript)
            and isinstance(last.targets[0].value, ast.Name) and isinstance(last.targets[0].slice, ast.Name)
            and last.targets[0].slice.id == positions and last.targets[0].value.id != positions):
        return None, last
    return f"the body does not end by writing rows at the positions (`D[{positions}] = ...`)", None


def _binds_names_only(target: ast.expr) -> bool:
    if isinstance(target, ast.Name):
        return True
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_binds_names_only(e.value if isinstance(e, ast.Starred) else e) for e in target.elts)
    return False


def _reads_frame_or_suspends(node: ast.AST) -> str | None:
    for inner in ast.walk(node):
        if isinstance(inner, (ast.Yield, ast.YieldFrom, ast.Await)):
            return "suspends the function"
        if isinstance(inner, ast.NamedExpr):
            return "binds a name with `:=`"
        if isinstance(inner, ast.Name) and inner.id in _FRAME_READERS:
            return f"reads the enclosing frame (`{inner.id}`)"
    return None


def body_only_binds_names(branch: ast.If, write: ast.Assign) -> str | None:
    for statement in branch.body[:-1]:
        if is_guard(statement):
            return "the body holds another rule's rewrite"
        if not (isinstance(statement, ast.Assign) and all(_binds_names_only(t) for t in statement.targets)):
            return f"`{ast.unparse(statement).splitlines()[0]}` does more than bind names, which a `torch.cond` branch cannot"
    for statement in branch.body:
        why = _reads_frame_or_suspends(statement)
        if why:
            return f"`{ast.unparse(statement).splitlines()[0]}` {why}"
    return None


def _bound_names(statement: ast.stmt) -> list[str]:
    return [name for name, _ in statement_bindings(statement, "statement")]


def body_reads_its_names_after_binding_them(context: FunctionContext, branch: ast.If, positions: str,
                                            destination: str) -> tuple[str | None, set[str]]:
    """Returns (reason, the names the body binds)."""
    bound: set[str] = set()
    for statement in branch.body[:-1]:
        bound.update(_bound_names(statement))
    for name in (positions, destination):
        if name in bound:
            return f"the body binds `{name}`", bound
    declared = context.facts.declared_global
    for name in sorted(bound):
        if name in declared:
            return f"the body binds `{name}`, which is global or nonlocal", bound
    seen: set[str] = set()
    for statement in branch.body:
        value = statement.value if isinstance(statement, ast.Assign) else statement
        for node in ast.walk(value):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in bound and node.id not in seen:
                return f"the body reads `{node.id}` before binding it", bound
        seen.update(_bound_names(statement))
    return None, bound


def body_names_stay_in_the_body(context: FunctionContext, branch: ast.If, bound: set[str]) -> str | None:
    facts = context.facts
    inside = {id(n) for n in ast.walk(branch)}
    in_body = {id(n) for statement in branch.body for n in ast.walk(statement)}
    references = References(context)
    for name in sorted(bound):
        for read, cfg_node, _parent in references.reads_of(name):
            if id(read) in inside:
                continue
            if cfg_node is None:
                return f"`{name}` is read where the analysis cannot place it (line {read.lineno})"
            if any(id(d.node.statement) in in_body for d in facts.reaching.reaching(cfg_node, name)):
                return f"`{name}`, which the body binds, is read after the branch (line {read.lineno})"
        for node in ast.walk(facts.function):
            if id(node) in inside:
                continue
            targets = [node.target] if isinstance(node, ast.AugAssign) else (
                node.targets if isinstance(node, ast.Delete) else []
            )
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                cfg_node = facts.node_for(node)
                if cfg_node is None or any(
                    id(d.node.statement) in in_body for d in facts.reaching.reaching(cfg_node, name)
                ):
                    return f"`{name}`, which the body binds, is updated after the branch (line {node.lineno})"
    return None


def _keeping_locations(nodes: list[ast.AST]) -> list[ast.AST]:
    """Copies of the user's code, which keep their lines when the form is placed."""
    copies = [copy.deepcopy(node) for node in nodes]
    for node in copies:
        for child in ast.walk(node):
            child._graphmend_keep_location = True
    return copies


def _enclosing_names_read(context: FunctionContext, branch: ast.If, positions: str, bound: set[str]) -> list[str]:
    """The enclosing function's names the body reads (not the positions, not what it binds)."""
    read = {
        node.id for statement in branch.body for node in ast.walk(statement)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    return sorted(name for name in read - bound - {positions} if context.facts.is_local(name))


def body_reads_only_bound_names(context: FunctionContext, branch: ast.If, enclosing: list[str]) -> str | None:
    """The enclosing names the body reads are bound wherever the branch is reached: its
    function takes them as defaults, evaluated where it is defined (an unbound one would
    raise there, on positions the original's body never ran on)."""
    node = context.facts.node_for(branch)
    if node is None:
        return "the analysis cannot place the branch"
    for name in enclosing:
        if not context.facts.reaching.definitely_assigned(node, name):
            return f"the body reads `{name}`, which may be unbound at the branch"
    return None


def _merged_form(
    branch: ast.If, positions: str, write: ast.Assign, number: int, enclosing: list[str]
) -> list[ast.stmt]:
    compute, at, values = f"_gm_rows_{number}", f"_gm_at_{number}", f"_gm_values_{number}"
    destination = write.targets[0].value.id
    (value,) = _keeping_locations([write.value])
    # The body's function gets the enclosing names it reads as defaults, not from cells:
    # a name a nested function reads becomes a cell of the frame, which TorchDynamo
    # returns from the graph (it may be read later); a tensor returned so, that requires
    # grad, gets AOTAutograd's zero gradient, and so do the inputs it was made from, where
    # the original left them None.
    defaults = "".join(f", {name}={name}" for name in enclosing)
    function = statements(
        f"def {compute}({positions}{', *' if enclosing else ''}{defaults}):\n"
        f"    {positions} = {RUNTIME_NAME}.dynamic_shapes.positions_known_nonempty({positions})\n"
        "    BODY\n"
        f"    return {positions}, VALUE",
        BODY=_keeping_locations(branch.body[:-1]), VALUE=value,
    )
    merged = statements(
        f"{at}, {values} = {RUNTIME_NAME}.dynamic_shapes.merge_rows({positions}, {destination}, {compute})\n"
        f"{destination}[{at}] = {values}"
    )
    return place(function + merged, branch)


def destination_is_bound_at_the_branch(context: FunctionContext, branch: ast.If, destination: str) -> str | None:
    """``merge_rows`` takes the destination before the test, where the original reads it
    only in the body: an unbound one would raise on positions the body never ran on."""
    node = context.facts.node_for(branch)
    if node is None:
        return "the analysis cannot place the branch"
    reason = ExpressionSafety(context, node).expression_is_safe(ast.Name(id=destination, ctx=ast.Load()))
    return None if reason is None else f"the destination {reason}"


def apply(context: FunctionContext) -> None:
    def rewrite(branch: ast.stmt, _enclosing) -> list[ast.stmt] | None:
        if not isinstance(branch, ast.If):
            return None
        reason, positions = tests_whether_positions_are_empty(context, branch)
        reason = failed("C109", reason)
        if positions is None:
            return None  # not a candidate: nothing to report
        write_reason, write = ends_by_writing_rows_at_the_positions(branch, positions)
        if write_reason is not None:
            # A branch on a list's length, a count...: not rows merged at positions, and
            # no break of this kind (a candidate only when it writes rows back).
            return None
        destination = None
        if reason is None:
            destination = write.targets[0].value.id
            reason = failed("C111", body_only_binds_names(branch, write))
        bound: set[str] = set()
        if reason is None:
            reason, bound = body_reads_its_names_after_binding_them(context, branch, positions, destination)
            reason = failed("C112", reason)
        if reason is None:
            reason = failed("C113", body_names_stay_in_the_body(context, branch, bound))
        enclosing = _enclosing_names_read(context, branch, positions, bound) if reason is None else []
        if reason is None:
            reason = failed("C114", body_reads_only_bound_names(context, branch, enclosing))
        if reason is None:
            reason = failed("C115", destination_is_bound_at_the_branch(context, branch, destination))
        finding = context.module.report(
            context.facts, branch, DYNAMIC_SHAPE_OPERATOR,
            f"branch on whether positions `{positions}` are empty (a data-dependent size)", RULE, reason,
            follows=f"the positions `{positions}` are kept in the graph",
        )
        if not finding.fixed:
            return None
        context.module.uses_runtime = True
        compiled = _merged_form(branch, positions, write, context.module.fresh_suffix(), enclosing)
        claimed = expression(
            f"{RUNTIME_NAME}.dynamic_shapes.may_merge_rows({positions}, {destination})"
        )
        place(claimed, branch)
        return [compiled_or_original(compiled, [branch], f"{RULE}: original branch", also=claimed)]

    rewrite_statements(context.facts.function, rewrite)

