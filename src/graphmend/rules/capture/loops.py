"""[Capture] a loop over the experts a batch routes to runs over every expert.

    hit = (expert_mask.sum(dim=(-1, -2)) > 0).nonzero(as_tuple=True)[0].tolist()
    for expert_idx in hit:
        expert_layer = self.experts[expert_idx]
        idx, top_x = torch.where(expert_mask[expert_idx])
        current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
        current = expert_layer(current_state) * routing_weights[top_x, idx, None]
        final_hidden_states.index_add_(0, top_x, current.to(hidden_states.dtype))
becomes, on the compiled path (when the checks made while tracing hold),
    for expert_idx in range(self.num_experts):
        <the same body>
and the ``torch.where`` inside is then captured (``positions.py``).

``hit`` lists, in increasing order, the classes of ``expert_mask = one_hot(...,
num_classes=E).permute(k, ...)`` (``k`` its class axis) that some token chose: a subset
of ``range(E)`` in the same order, so the loop visits the same experts in the same
order and, in between, experts no token chose. For those the body does nothing: their
positions are empty, everything computed from them is empty, and ``index_add_`` at no
position leaves its tensor as it was. The sum each position receives is built in the
same order from the same numbers, so the result is bit for bit the original's.

Legality conditions (each a function, returning the reason it fails):
- ``hits_are_classes_in_order``: the loop iterates a name bound, just before the loop,
  to ``(M.sum(dim=<every axis but the first>) > 0).nonzero(as_tuple=True)[0].tolist()``
  with ``M`` bound once to ``one_hot(S, num_classes=E).permute(<class axis first>, ...)``
  and ``E`` a value that is not a tensor's.
- ``hits_read_only_by_the_loop``: nothing else reads the list, the loop has no ``else``.
- ``body_does_nothing_for_an_unchosen_expert``: the body binds an expert
  ``C[e]``, the positions ``torch.where(M[e])``, values computed only from those
  positions (indexing by them, ``reshape(-1, ...)``, ``to``, arithmetic, the expert's
  call), and ends in ``acc.index_add_(0, positions, value)``; nothing else.
- ``loop_names_stay_in_the_loop``: no name the loop binds (its variable included) is
  read after it: those names would hold the last expert's values, not the last chosen.
- ``destination_is_bound_at_the_loop``: the ``index_add_``'s tensor is bound wherever
  the loop is reached (the check made while tracing reads it before the loop).
Checked while tracing (``graphmend.runtime.dynamic_shapes.experts_run_empty_exactly``;
each refusal names its condition): ``E`` is an int no larger than the experts'
container, a ``ModuleList`` or ``Sequential`` as torch defines it
(``experts_are_a_module_list``); no global module hook (``no_module_hooks``); no
gradient is recorded for the experts' parameters (``no_expert_gradients``: an expert
that ran on no token would get a zero gradient where the original's has none); each
expert's whole call is known to do nothing on no rows (``expert_calls_are_known``,
``graphmend.runtime.expert_calls``): an allow-listed ``torch.nn`` or transformers
layer with its library's ``forward``, or a ``forward`` built from its own child
modules' calls and arithmetic, with no instance attribute replacing a method, no hook,
no method of the expert's own (a counter, a profiler's list) reached; the
``index_add_``'s tensor is one the graph made and nothing read yet
(``destination_is_unseen``: its write of no rows bumps the version counter, which a
tensor autograd saved, or the caller, would see); and the body's ``torch.where`` may be
captured in this trace (``body_keeps_its_captures``: refused, it would break the graph
inside the loop over every expert, where TorchDynamo gives up on the whole frame; the
original loop breaks before it, at ``.tolist()``).
"""

from __future__ import annotations

import ast
import copy

from graphmend.analysis.safety import ExpressionSafety
from graphmend.core.legality import failed
from graphmend.rewrite.findings import DYNAMIC_SHAPE_OPERATOR
from graphmend.rewrite.templates import RUNTIME_NAME, compiled_or_original, expression, place
from graphmend.rules.base import FunctionContext, rewrite_statements
from graphmend.rules.capture.positions import RULE

_SHAPE_METHODS = frozenset({"to", "float", "half", "bfloat16", "double", "type_as", "contiguous"})
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div)


def _is_name(node, name: str | None = None) -> bool:
    return isinstance(node, ast.Name) and (name is None or node.id == name)


def _one_assignment(statement) -> tuple[str, ast.expr] | None:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and _is_name(statement.targets[0]):
        return statement.targets[0].id, statement.value
    return None


def _assignments_of(function: ast.AST, name: str) -> list[ast.AST]:
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.append(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            found.append(node)
    return found


def _reads_of(nodes, name: str) -> list[ast.Name]:
    return [n for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]


def _constant_int(node) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value if type(node.operand.value) is int else None
    return None


def _hits_parts(value: ast.expr) -> tuple[ast.expr, list[ast.expr]] | None:
    """``(M.sum(dim=D) > 0).nonzero(as_tuple=True)[0].tolist()`` -> (M, D's items)."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "tolist"
            and not value.args and not value.keywords):
        return None
    first = value.func.value
    if not (isinstance(first, ast.Subscript) and _constant_int(first.slice) == 0):
        return None
    nonzero = first.value
    if not (isinstance(nonzero, ast.Call) and isinstance(nonzero.func, ast.Attribute) and nonzero.func.attr == "nonzero"
            and not nonzero.args and len(nonzero.keywords) == 1 and nonzero.keywords[0].arg == "as_tuple"
            and isinstance(nonzero.keywords[0].value, ast.Constant) and nonzero.keywords[0].value.value is True):
        return None
    compare = nonzero.func.value
    if not (isinstance(compare, ast.Compare) and len(compare.ops) == 1 and isinstance(compare.ops[0], ast.Gt)
            and _constant_int(compare.comparators[0]) == 0):
        return None
    total = compare.left
    if not (isinstance(total, ast.Call) and isinstance(total.func, ast.Attribute) and total.func.attr == "sum"
            and not total.args and len(total.keywords) == 1 and total.keywords[0].arg == "dim"
            and isinstance(total.keywords[0].value, ast.Tuple)):
        return None
    return total.func.value, total.keywords[0].value.elts


def is_list_of_chosen_classes(call: ast.AST) -> bool:
    """``call`` is ``(...).nonzero(as_tuple=True)[0].tolist()`` of the shape looked for."""
    return _hits_parts(call) is not None


def _mask_classes(context: FunctionContext, mask: ast.expr, summed: list[ast.expr]) -> ast.expr | None:
    """E, when ``mask`` names ``one_hot(S, num_classes=E).permute(class axis, ...)`` bound
    once and ``summed`` is every axis but the first."""
    if not _is_name(mask) or len(_assignments_of(context.facts.function, mask.id)) != 1:
        return None
    binding = next(
        (s for s in ast.walk(context.facts.function) if isinstance(s, ast.Assign) and _one_assignment(s)
         and _one_assignment(s)[0] == mask.id),
        None,
    )
    if binding is None:
        return None
    permuted = binding.value
    if not (isinstance(permuted, ast.Call) and isinstance(permuted.func, ast.Attribute) and permuted.func.attr == "permute"
            and permuted.args and not permuted.keywords):
        return None
    axes = [_constant_int(a) for a in permuted.args]
    rank = len(axes)
    if None in axes or sorted(axes) != list(range(rank)) or axes[0] != rank - 1:
        return None
    summed_axes = [_constant_int(a) for a in summed]
    if None in summed_axes or sorted(a % rank for a in summed_axes) != list(range(1, rank)) or len(set(summed_axes)) != rank - 1:
        return None
    one_hot = permuted.func.value
    if not isinstance(one_hot, ast.Call) or context.facts.qualified_name_of(one_hot.func) != "torch.nn.functional.one_hot":
        return None
    classes = next((k.value for k in one_hot.keywords if k.arg == "num_classes"), None)
    if classes is None and len(one_hot.args) == 2:
        classes = one_hot.args[1]
    if classes is None or len(one_hot.args) < 1 or _constant_int(classes) == -1:
        return None
    if not isinstance(classes, (ast.Name, ast.Attribute, ast.Constant)):
        return None
    node = context.facts.node_for(binding)
    if context.data.is_data_dependent(classes, node):
        return None
    return classes


def hits_are_classes_in_order(context: FunctionContext, before: ast.stmt | None, loop: ast.For):
    """Returns (reason, parts): parts are (hits name, mask name, E)."""
    if not _is_name(loop.target) or not _is_name(loop.iter):
        return "the loop does not iterate a list of chosen classes by name", None
    assignment = _one_assignment(before) if before is not None else None
    if assignment is None or assignment[0] != loop.iter.id:
        return "the list the loop iterates is not computed just before it", None
    parts = _hits_parts(assignment[1])
    if parts is None:
        return "the list is not `(M.sum(dim=...) > 0).nonzero(as_tuple=True)[0].tolist()`", None
    mask, summed = parts
    classes = _mask_classes(context, mask, summed)
    if classes is None:
        return (
            f"`{ast.unparse(mask)}` is not a one-hot mask `one_hot(..., num_classes=E).permute(...)` with its "
            "class axis first, summed over every other axis", None
        )
    return None, (loop.iter.id, mask.id, classes)


def hits_read_only_by_the_loop(context: FunctionContext, hits: str, loop: ast.For) -> str | None:
    if loop.orelse:
        return "the loop has an `else`"
    if len(_assignments_of(context.facts.function, hits)) != 1 or len(_reads_of([context.facts.function], hits)) != 1:
        return f"`{hits}` is bound or read elsewhere"
    return None


class _Body:
    """What the body binds, checked statement by statement."""

    def __init__(self, variable: str, mask: str):
        self.variable, self.mask = variable, mask
        self.experts: dict[str, ast.expr] = {}
        self.positions: set[str] = set()
        self.derived: set[str] = set()
        self.updated = False
        self.destination: str | None = None

    def is_derived(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.derived or node.id in self.positions
        if isinstance(node, ast.Subscript):
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            indexed = False
            for part in parts:
                if isinstance(part, ast.Constant) and part.value is None:
                    continue
                if isinstance(part, ast.Slice) and part.lower is None and part.upper is None and part.step is None:
                    continue
                if _is_name(part) and part.id in self.positions:
                    indexed = True
                    continue
                return False
            return indexed and not self.reads_loop_names(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and self.is_derived(node.func.value):
            method, arguments = node.func.attr, node.args
            if node.keywords or any(self.reads_loop_names(a) or _calls(a) for a in arguments):
                return False
            if method in ("reshape", "view"):
                # ``reshape(-1, d)`` of no element is ``(0, d)``; ``reshape(0, -1)`` raises.
                return len(arguments) >= 2 and _constant_int(arguments[0]) == -1 and all(
                    _constant_int(a) is None or _constant_int(a) > 0 for a in arguments[1:]
                )
            return method in _SHAPE_METHODS
        if isinstance(node, ast.Call) and _is_name(node.func) and node.func.id in self.experts:
            return len(node.args) == 1 and not node.keywords and self.is_derived(node.args[0])
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC):
            sides = [node.left, node.right]
            return all(self.is_derived(s) or isinstance(s, ast.Constant) for s in sides) and any(
                self.is_derived(s) for s in sides
            )
        return False

    def reads_loop_names(self, node: ast.AST) -> bool:
        bound = self.derived | self.positions | set(self.experts) | {self.variable}
        return any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(node))

    def accept(self, statement: ast.stmt) -> str | None:
        if self.updated:
            return "the body goes on after its `index_add_`"
        assignment = _one_assignment(statement)
        if assignment is not None:
            name, value = assignment
            if name in self.derived | self.positions | set(self.experts) | {self.variable, self.mask}:
                return f"`{name}` is bound twice in the body"
            if (isinstance(value, ast.Subscript) and _is_name(value.slice, self.variable)
                    and isinstance(value.value, ast.Attribute) and not self.reads_loop_names(value.value)
                    and not _calls(value.value)):
                self.experts[name] = value.value
                return None
            if self.is_derived(value):
                self.derived.add(name)
                return None
            return f"`{ast.unparse(value)}` is not computed from the expert's positions alone"
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Tuple):
            names = statement.targets[0].elts
            value = statement.value
            if (all(_is_name(n) for n in names) and isinstance(value, ast.Call) and len(value.args) == 1
                    and not value.keywords and isinstance(value.func, ast.Attribute) and value.func.attr == "where"
                    and _is_name(value.func.value, "torch") and isinstance(value.args[0], ast.Subscript)
                    and _is_name(value.args[0].value, self.mask) and _is_name(value.args[0].slice, self.variable)):
                bound = {n.id for n in names}
                if bound & (self.derived | self.positions | set(self.experts) | {self.variable, self.mask}):
                    return "a position name is bound twice in the body"
                self.positions |= bound
                return None
            return f"`{ast.unparse(statement)}` is not the expert's positions `torch.where({self.mask}[{self.variable}])`"
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            call = statement.value
            if (isinstance(call.func, ast.Attribute) and call.func.attr == "index_add_" and _is_name(call.func.value)
                    and not self.reads_loop_names(call.func.value) and len(call.args) == 3 and not call.keywords
                    and _constant_int(call.args[0]) == 0 and _is_name(call.args[1]) and call.args[1].id in self.positions
                    and self.is_derived(call.args[2])):
                self.updated = True
                self.destination = call.func.value.id
                return None
        if isinstance(statement, ast.Pass):
            return None
        return f"`{ast.unparse(statement).splitlines()[0]}` may act for an expert no token chose"


def _calls(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) for n in ast.walk(node))


def body_does_nothing_for_an_unchosen_expert(loop: ast.For, mask: str) -> tuple[str | None, _Body | None]:
    body = _Body(loop.target.id, mask)
    for statement in loop.body:
        reason = body.accept(statement)
        if reason:
            return reason, None
    if not body.updated or len(body.experts) != 1:
        return "the body does not end by adding one expert's values at its positions (`index_add_`)", None
    return None, body


def loop_names_stay_in_the_loop(context: FunctionContext, loop: ast.For, body: _Body) -> str | None:
    inside = {id(n) for n in ast.walk(loop)}
    outside = [n for n in ast.walk(context.facts.function) if id(n) not in inside and isinstance(n, ast.Name)]
    for name in sorted(body.derived | body.positions | set(body.experts) | {body.variable}):
        if any(n.id == name for n in outside) or len(_assignments_of(context.facts.function, name)) > len(
            _assignments_of(loop, name)
        ):
            return f"`{name}` is bound or read outside the loop, where it would hold the last expert's value"
    return None


def destination_is_bound_at_the_loop(context: FunctionContext, loop: ast.For, body: _Body) -> str | None:
    """The check made while tracing takes the ``index_add_``'s destination before the
    loop, where the original reads it only in the body: an unbound one would raise
    there, for a batch whose loop runs no iteration."""
    node = context.facts.node_for(loop)
    if node is None:
        return "the analysis cannot place the loop"
    reason = ExpressionSafety(context, node).expression_is_safe(ast.Name(id=body.destination, ctx=ast.Load()))
    return None if reason is None else f"the destination {reason}"


def apply(context: FunctionContext) -> None:
    def rewrite(before: ast.stmt, enclosing: list[ast.stmt]) -> list[ast.stmt] | None:
        assignment = _one_assignment(before)
        if assignment is None or _hits_parts(assignment[1]) is None:
            return None
        index = next(i for i, s in enumerate(enclosing) if s is before)
        statement = enclosing[index + 1] if index + 1 < len(enclosing) else None
        if not isinstance(statement, ast.For) or not _is_name(statement.iter, assignment[0]):
            context.module.report(
                context.facts, before, DYNAMIC_SHAPE_OPERATOR,
                f"chosen classes `{assignment[0]}` (`.nonzero()`, `.tolist()`)", RULE,
                failed("C104", "the list is not iterated by the statement right after it"),
            )
            before._graphmend_loop_reported = True
            return None
        reason, parts = hits_are_classes_in_order(context, before, statement)
        reason = failed("C104", reason)
        body = None
        if reason is None:
            hits, mask, classes = parts
            reason = failed("C105", hits_read_only_by_the_loop(context, hits, statement))
            if reason is None:
                reason, body = body_does_nothing_for_an_unchosen_expert(statement, mask)
                reason = failed("C106", reason)
            if reason is None:
                reason = failed("C107", loop_names_stay_in_the_loop(context, statement, body))
            if reason is None:
                reason = failed("C108", destination_is_bound_at_the_loop(context, statement, body))
        finding = context.module.report(
            context.facts, before, DYNAMIC_SHAPE_OPERATOR,
            f"loop over the chosen classes `{ast.unparse(statement.iter)}` (`.nonzero()`, `.tolist()`)", RULE, reason,
        )
        before._graphmend_loop_reported = True
        if not finding.fixed:
            return None
        context.module.uses_runtime = True
        _hits, _mask, classes = parts
        (container,) = body.experts.values()
        compiled_loop = copy.deepcopy(statement)
        compiled_loop.iter = ast.Call(func=ast.Name(id="range", ctx=ast.Load()), args=[copy.deepcopy(classes)], keywords=[])
        place(compiled_loop.iter, statement.iter)
        exact = expression(
            f"{RUNTIME_NAME}.dynamic_shapes.experts_run_empty_exactly(CONTAINER, CLASSES, BODY_LINES, DESTINATION)",
            CONTAINER=copy.deepcopy(container), CLASSES=copy.deepcopy(classes),
            DESTINATION=ast.Name(id=body.destination, ctx=ast.Load()),
            BODY_LINES=ast.Tuple(elts=[ast.Constant(statement.body[0].lineno), ast.Constant(statement.end_lineno)], ctx=ast.Load()),
        )
        place(exact, before)
        wrapped = compiled_or_original([compiled_loop], [before, statement], f"{RULE}: original loop", also=exact)
        del enclosing[index + 1]  # the loop: ``rewrite_statements`` replaces ``before``
        return [wrapped]

    rewrite_statements(context.facts.function, rewrite)
