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

The loop over the rows of a tensor of chosen classes (transformers 5, stacked experts):

    with torch.no_grad():
        expert_mask = F.one_hot(top_k_index, num_classes=self.num_experts)
        expert_mask = expert_mask.permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in expert_hit:
        expert_idx = expert_idx[0]
        if expert_idx == self.num_experts:
            continue
        top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
        gate, up = F.linear(hidden_states[token_idx], self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
        current = F.linear(self.act_fn(gate) * up, self.down_proj[expert_idx]) * top_k_weights[token_idx, top_k_pos, None]
        final_hidden_states.index_add_(0, token_idx, current.to(final_hidden_states.dtype))
becomes, on the compiled path, the block without ``expert_hit`` and
    for expert_idx in range(self.num_experts):
        <the body without `expert_idx = expert_idx[0]`>
``nonzero()`` lists the chosen classes as rows ``[e]`` in increasing order, as the
list above does. ``expert_idx[0]`` is the class as a 0-dim tensor, which selects a
mask's row, a module list's expert and a stacked tensor's slice as the int does; a
loop that does not unpack the row reads it only as a module list's index (where
``operator.index`` makes it the class) and as ``M[row].squeeze(0)`` (``M[e]`` over
every class). The guard never skips (no class reaches ``E``); over every class it
compares two ints, where the original's tests a tensor (a break Where reports, marked
fixed with the loop). The experts may be stacked in tensors ``O.N`` each expert's
slice ``O.N[e]`` of which ``F.linear`` applies (no rows give no rows), and the body
may call a module every expert shares (``self.act_fn``) and split ``F.linear``'s
features with ``.chunk(n, dim=-1)``.

Legality conditions (each a function, returning the reason it fails):
- ``hits_are_classes_in_order``: the loop iterates a name bound, just before the loop
  (or as the last statement of a ``with`` block just before it), to
  ``(M.sum(dim=<every axis but the first>) > 0).nonzero(as_tuple=True)[0].tolist()``,
  or iterates that name or a copy ``H[:]`` of it bound to
  ``torch.greater(M.sum(dim=...), 0).nonzero()`` (``torch.gt``, ``> 0``, ``.gt(0)``),
  with ``M`` bound once to ``one_hot(S, num_classes=E).permute(<class axis first>, ...)``
  (or to the ``one_hot`` and, the statement after, to its ``permute``) and ``E`` a value
  that is not a tensor's.
- ``hit_rows_unpacked_as_classes``: over the rows of ``nonzero()``, the body's first
  statement is ``V = V[0]``, or nothing rebinds the row (``V = int(V[0])`` would copy
  the class to Python).
- ``skip_tests_only_the_class_count``: a leading ``if V == E: continue`` compares with
  the mask's own ``E`` (one testing anything else may skip an expert that ran).
- ``hits_read_only_by_the_loop``: nothing else reads the list, the loop has no ``else``.
- ``body_does_nothing_for_an_unchosen_expert``: the body binds an expert
  ``C[e]`` (or reads stacked experts ``O.N[e]``, only as ``F.linear``'s weight or
  bias), the positions ``torch.where(M[e])``, values computed only from those
  positions (indexing by them, ``reshape(-1, ...)``, ``to``, arithmetic, the expert's
  call, a shared module's call ``O.N(x)``, ``F.linear``, its ``.chunk(n, dim=-1)``,
  torch's elementwise ``F.silu``, ``F.gelu``, ``torch.sigmoid``...), and
  ends in ``acc.index_add_(0, positions, value)``; nothing else. The loop variable is
  read only as those indices: a ``print`` of it, an ``append`` of it, is refused.
- ``loop_names_stay_in_the_loop``: no name the loop binds (its variable included) is
  read after it: those names would hold the last expert's values, not the last chosen.
- ``destination_is_bound_at_the_loop``: the ``index_add_``'s tensor (and ``E``, a
  local) is bound wherever the loop, or the ``with`` block before it, is reached (the
  check made while tracing reads it there).
Checked while tracing (``graphmend.runtime.dynamic_shapes.experts_run_empty_exactly``;
each refusal names its condition): ``E`` is an int no larger than the experts'
container, a ``ModuleList`` or ``Sequential`` as torch defines it
(``experts_are_a_module_list``); each stacked tensor ``O.N`` a plain parameter or
buffer of the module ``O``, read with no code of its own, with a row for every class
(``expert_tensors_cover_every_class``); no global module hook (``no_module_hooks``); no
gradient is recorded for the experts' parameters, the stacked tensors or a shared
module's (``no_expert_gradients``: an expert
that ran on no token would get a zero gradient where the original's has none); each
expert's whole call, and each shared module's, is known to do nothing on no rows (``expert_calls_are_known``,
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
# torch's elementwise functions of one tensor: no rows give no rows, with no effect.
_ELEMENTWISE = frozenset(
    {f"torch.nn.functional.{name}" for name in ("silu", "gelu", "relu", "sigmoid", "tanh", "mish", "softplus")}
    | {f"torch.{name}" for name in ("relu", "sigmoid", "tanh", "exp")}
)


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


_GREATER_FUNCTIONS = frozenset({"torch.greater", "torch.gt"})


def _hit_rows_parts(value: ast.expr, qualified=None) -> tuple[ast.expr, list[ast.expr]] | None:
    """``torch.greater(M.sum(dim=D), 0).nonzero()`` -> (M, D's items). Also ``torch.gt``,
    ``(M.sum(dim=D) > 0)``, ``M.sum(dim=D).gt(0)`` and ``.greater(0)``; ``nonzero`` with
    no argument or ``as_tuple=False``: one row ``[class]`` per class some token chose."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "nonzero"
            and not value.args):
        return None
    if value.keywords and not (
        len(value.keywords) == 1 and value.keywords[0].arg == "as_tuple"
        and isinstance(value.keywords[0].value, ast.Constant) and value.keywords[0].value.value is False
    ):
        return None
    test = value.func.value
    total = None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Gt):
        if _constant_int(test.comparators[0]) == 0:
            total = test.left
    elif isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and not test.keywords:
        if len(test.args) == 2 and _constant_int(test.args[1]) == 0:
            name = qualified(test.func) if qualified is not None else (
                f"torch.{test.func.attr}" if _is_name(test.func.value, "torch") else None
            )
            if name in _GREATER_FUNCTIONS:
                total = test.args[0]
        elif len(test.args) == 1 and test.func.attr in ("gt", "greater") and _constant_int(test.args[0]) == 0:
            total = test.func.value
    if not (isinstance(total, ast.Call) and isinstance(total.func, ast.Attribute) and total.func.attr == "sum"
            and not total.args and len(total.keywords) == 1 and total.keywords[0].arg == "dim"
            and isinstance(total.keywords[0].value, ast.Tuple)):
        return None
    return total.func.value, total.keywords[0].value.elts


def _iterated_name(iterated: ast.expr) -> str | None:
    """``H`` for a loop over ``H`` or over ``H[:]`` (a copy of the same rows)."""
    if _is_name(iterated):
        return iterated.id
    if (isinstance(iterated, ast.Subscript) and _is_name(iterated.value) and isinstance(iterated.slice, ast.Slice)
            and iterated.slice.lower is None and iterated.slice.upper is None and iterated.slice.step is None):
        return iterated.value.id
    return None


def is_list_of_chosen_classes(call: ast.AST) -> bool:
    """``call`` is ``(...).nonzero(as_tuple=True)[0].tolist()`` of the shape looked for."""
    return _hits_parts(call) is not None


def _mask_classes(context: FunctionContext, mask: ast.expr, summed: list[ast.expr]) -> ast.expr | None:
    """E, when ``mask`` names ``one_hot(S, num_classes=E).permute(class axis, ...)`` bound
    once (or ``M = one_hot(...)`` and, the statement after, ``M = M.permute(...)``, and
    nothing else) and ``summed`` is every axis but the first."""
    if not _is_name(mask):
        return None
    assignments = _assignments_of(context.facts.function, mask.id)
    bindings = sorted(
        (s for s in ast.walk(context.facts.function) if isinstance(s, ast.Assign) and _one_assignment(s)
         and _one_assignment(s)[0] == mask.id),
        key=lambda s: (s.lineno, s.col_offset),
    )
    if len(bindings) != len(assignments) or len(bindings) not in (1, 2):
        return None
    binding = bindings[0]
    permuted = binding.value
    if len(bindings) == 2:
        second = bindings[1]
        if not (_follows(context.facts.function, binding, second) and isinstance(second.value, ast.Call)
                and isinstance(second.value.func, ast.Attribute) and _is_name(second.value.func.value, mask.id)):
            return None
        permuted = copy.copy(second.value)
        permuted.func = ast.Attribute(value=binding.value, attr=second.value.func.attr, ctx=ast.Load())
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


def _follows(function: ast.AST, first: ast.stmt, second: ast.stmt) -> bool:
    """``second`` is the statement right after ``first``, in the same block."""
    for node in ast.walk(function):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and any(s is first for s in block):
                index = next(i for i, s in enumerate(block) if s is first)
                return index + 1 < len(block) and block[index + 1] is second
    return False


def hits_are_classes_in_order(context: FunctionContext, before: ast.stmt | None, loop: ast.For):
    """Returns (reason, parts): parts are (hits name, mask name, E, whether the loop
    iterates the rows of a tensor of chosen classes rather than a list of them)."""
    iterated = _iterated_name(loop.iter)
    if not _is_name(loop.target) or iterated is None:
        return "the loop does not iterate a list of chosen classes by name", None
    assignment = _one_assignment(before) if before is not None else None
    if assignment is None or assignment[0] != iterated:
        return "the list the loop iterates is not computed just before it", None
    parts = _hits_parts(assignment[1])
    rows = parts is None
    if rows:
        parts = _hit_rows_parts(assignment[1], context.facts.qualified_name_of)
    elif not _is_name(loop.iter):
        return "the loop iterates a part of the list of chosen classes", None
    if parts is None:
        return (
            "the list is not `(M.sum(dim=...) > 0).nonzero(as_tuple=True)[0].tolist()` nor "
            "`torch.greater(M.sum(dim=...), 0).nonzero()`", None
        )
    mask, summed = parts
    classes = _mask_classes(context, mask, summed)
    if classes is None:
        return (
            f"`{ast.unparse(mask)}` is not a one-hot mask `one_hot(..., num_classes=E).permute(...)` with its "
            "class axis first, summed over every other axis", None
        )
    return None, (iterated, mask.id, classes, rows)


def hits_read_only_by_the_loop(context: FunctionContext, hits: str, loop: ast.For) -> str | None:
    if loop.orelse:
        return "the loop has an `else`"
    if len(_assignments_of(context.facts.function, hits)) != 1 or len(_reads_of([context.facts.function], hits)) != 1:
        return f"`{hits}` is bound or read elsewhere"
    return None


class _Body:
    """What the body binds, checked statement by statement."""

    def __init__(self, variable: str, mask: str, qualified=None, rows: bool = False):
        self.variable, self.mask = variable, mask
        self.qualified = qualified or (lambda _node: None)
        # The loop variable is a row ``[class]`` of the tensor of chosen classes, not the
        # class: it selects an expert of a module list as the class does, and the mask's
        # rows ``M[row].squeeze(0)`` as ``M[class]`` does; nothing else reads it.
        self.rows = rows
        self.experts: dict[str, ast.expr] = {}
        # ``O.N`` of each ``O.N[e]`` the body passes to ``F.linear`` (experts stacked in
        # one tensor), and of each module ``O.N`` it calls on rows (one all experts share).
        self.stacked: dict[str, ast.expr] = {}
        self.shared: dict[str, ast.expr] = {}
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
        if isinstance(node, ast.Call) and self.qualified(node.func) == "torch.nn.functional.linear":
            # Experts stacked in one tensor: ``F.linear(rows, O.N[e])`` maps no rows to none.
            return (not node.keywords and len(node.args) in (2, 3) and self.is_derived(node.args[0])
                    and all(self.is_expert_tensor(a) for a in node.args[1:]))
        if isinstance(node, ast.Call) and self.qualified(node.func) in _ELEMENTWISE:
            return len(node.args) == 1 and not node.keywords and self.is_derived(node.args[0])
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
        if (isinstance(node, ast.Call) and _is_attribute_path(node.func) and self.qualified(node.func) is None
                and not self.reads_loop_names(node.func) and len(node.args) == 1 and not node.keywords
                and self.is_derived(node.args[0])):
            # A module every expert shares (an activation ``self.act_fn``): checked while
            # tracing, as an expert is, to do nothing on no rows.
            self.shared.setdefault(ast.unparse(node.func), node.func)
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC):
            sides = [node.left, node.right]
            return all(self.is_derived(s) or isinstance(s, ast.Constant) for s in sides) and any(
                self.is_derived(s) for s in sides
            )
        return False

    def is_expert_tensor(self, node: ast.expr) -> bool:
        """``O.N[e]``: one expert's slice of a tensor stacking every expert's."""
        if (self.rows or not isinstance(node, ast.Subscript) or not _is_name(node.slice, self.variable)
                or not _is_attribute_path(node.value) or self.reads_loop_names(node.value)):
            return False
        self.stacked.setdefault(ast.unparse(node.value), node.value)
        return True

    def is_where_of_the_mask(self, node: ast.expr) -> bool:
        """``M[e]``, or ``M[row].squeeze(0)`` where the loop iterates rows."""
        if self.rows:
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "squeeze"
                    and len(node.args) == 1 and _constant_int(node.args[0]) == 0 and not node.keywords):
                return False
            node = node.func.value
        return isinstance(node, ast.Subscript) and _is_name(node.value, self.mask) and _is_name(node.slice, self.variable)

    def reads_loop_names(self, node: ast.AST) -> bool:
        bound = self.derived | self.positions | set(self.experts) | {self.variable}
        return any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(node))

    def accept(self, statement: ast.stmt) -> str | None:
        if self.updated:
            return "the body goes on after its `index_add_`"
        assignment = _one_assignment(statement)
        if assignment is not None:
            name, value = assignment
            if name in self.derived and self.is_derived(value):
                return None  # a value computed from the positions, rebound to one
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
                    and _is_name(value.func.value, "torch") and self.is_where_of_the_mask(value.args[0])):
                bound = {n.id for n in names}
                if bound & (self.derived | self.positions | set(self.experts) | {self.variable, self.mask}):
                    return "a position name is bound twice in the body"
                self.positions |= bound
                return None
            if (all(_is_name(n) for n in names) and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                    and value.func.attr == "chunk" and self.qualified(value.func.value.func) == "torch.nn.functional.linear"
                    and self.is_derived(value.func.value) and _chunks_the_last_axis(value, len(names))):
                # ``gate, up = F.linear(rows, O.N[e]).chunk(2, dim=-1)``: the features split,
                # no rows give two tensors of no rows.
                bound = {n.id for n in names}
                if len(bound) != len(names) or bound & (
                    self.derived | self.positions | set(self.experts) | {self.variable, self.mask}
                ):
                    return "a name is bound twice in the body"
                self.derived |= bound
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


def _chunks_the_last_axis(call: ast.Call, count: int) -> bool:
    """``x.chunk(count, dim=-1)`` (or ``chunk(count, -1)``) of a call's value."""
    if not isinstance(call.func.value, ast.Call) or not call.args or _constant_int(call.args[0]) != count or count < 1:
        return False
    dims = [k.value for k in call.keywords if k.arg == "dim"] + list(call.args[1:])
    return len(dims) == 1 and len(call.args) + len(call.keywords) == 2 and _constant_int(dims[0]) == -1 and all(
        k.arg == "dim" for k in call.keywords
    )


def _is_attribute_path(node: ast.AST) -> bool:
    """``a.b.c``: attributes of a name, no call or subscript on the way."""
    if not isinstance(node, ast.Attribute):
        return False
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _calls(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) for n in ast.walk(node))


def body_does_nothing_for_an_unchosen_expert(
    loop: ast.For, mask: str, body: list[ast.stmt] | None = None, qualified=None, rows: bool = False
) -> tuple[str | None, _Body | None]:
    checked = _Body(loop.target.id, mask, qualified, rows)
    for statement in loop.body if body is None else body:
        reason = checked.accept(statement)
        if reason:
            return reason, None
    if not checked.updated or len(checked.experts) > 1 or not (checked.experts or checked.stacked):
        return "the body does not end by adding one expert's values at its positions (`index_add_`)", None
    return None, checked


def _unpacks_the_class(statement: ast.stmt, variable: str) -> bool:
    """``V = V[0]``."""
    assignment = _one_assignment(statement)
    return (assignment is not None and assignment[0] == variable and isinstance(assignment[1], ast.Subscript)
            and _is_name(assignment[1].value, variable) and _constant_int(assignment[1].slice) == 0)


def hit_rows_unpacked_as_classes(loop: ast.For) -> tuple[str | None, bool]:
    """Where the loop iterates the rows ``[class]`` of ``nonzero()``'s tensor: either its
    first statement is ``V = V[0]`` (the class as a 0-dim tensor, which indexes a mask,
    a module list and a stacked tensor as the int does, and which the loop over every
    class binds directly), or nothing rebinds ``V`` and the body reads the row only as
    ``body_does_nothing_for_an_unchosen_expert`` allows a row to be read (``C[V]``,
    ``M[V].squeeze(0)``). Returns (reason, whether it unpacks)."""
    variable = loop.target.id
    if loop.body and _unpacks_the_class(loop.body[0], variable):
        return None, True
    for statement in loop.body:
        if variable in {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}:
            return (f"`{ast.unparse(statement).splitlines()[0]}` rebinds the row `{variable}` other than as its "
                    f"class `{variable} = {variable}[0]` first"), False
    return None, False


def _skips(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1 and isinstance(
        statement.body[0], ast.Continue
    )


def skip_tests_only_the_class_count(statement: ast.stmt, variable: str, classes: ast.expr) -> str | None:
    """A leading ``if V == E: continue`` compares the class with the mask's own number of
    classes ``E``: no chosen class and no class of ``range(E)`` equals it, so it skips
    nothing, in the original or over every expert (where it compares two ints)."""
    test = statement.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.GtE)):
        left, right = test.left, test.comparators[0]
        if _is_name(left, variable) and ast.dump(right) == ast.dump(classes):
            return None
        if isinstance(test.ops[0], ast.Eq) and _is_name(right, variable) and ast.dump(left) == ast.dump(classes):
            return None
    return (f"`if {ast.unparse(test)}: continue` is not a test of the class against the number of classes "
            f"`{ast.unparse(classes)}`, and may skip an expert")


def loop_names_stay_in_the_loop(context: FunctionContext, loop: ast.For, body: _Body) -> str | None:
    inside = {id(n) for n in ast.walk(loop)}
    outside = [n for n in ast.walk(context.facts.function) if id(n) not in inside and isinstance(n, ast.Name)]
    for name in sorted(body.derived | body.positions | set(body.experts) | {body.variable}):
        if any(n.id == name for n in outside) or len(_assignments_of(context.facts.function, name)) > len(
            _assignments_of(loop, name)
        ):
            return f"`{name}` is bound or read outside the loop, where it would hold the last expert's value"
    return None


def destination_is_bound_at_the_loop(
    context: FunctionContext, loop: ast.stmt, body: _Body, classes: ast.expr | None = None
) -> str | None:
    """The check made while tracing takes the ``index_add_``'s destination (and the
    number of classes) before the loop, or before the ``with`` block the list is
    computed in (``loop``), where the original reads it only in the body: an unbound
    one would raise there, for a batch whose loop runs no iteration."""
    node = context.facts.node_for(loop)
    if node is None:
        return "the analysis cannot place the loop"
    safety = ExpressionSafety(context, node)
    reason = safety.expression_is_safe(ast.Name(id=body.destination, ctx=ast.Load()))
    if reason is not None:
        return f"the destination {reason}"
    if _is_name(classes):
        reason = safety.expression_is_safe(ast.Name(id=classes.id, ctx=ast.Load()))
        if reason is not None:
            return f"the number of classes {reason}"
    return None


def _hits_statement(statement: ast.stmt) -> ast.stmt:
    """The statement that computes the chosen classes: ``statement``, or the last of a
    ``with`` block's (``with torch.no_grad(): ...; hits = ...``)."""
    if isinstance(statement, ast.With) and statement.body:
        return statement.body[-1]
    return statement


def _chosen_classes(value: ast.expr, qualified) -> bool:
    return _hits_parts(value) is not None or _hit_rows_parts(value, qualified) is not None


def _body_checks(context: FunctionContext, loop: ast.For, mask: str, classes: ast.expr, rows: bool):
    """C116, C117 and C106 over the loop's body. Returns (reason, the checked body, the
    statements the loop over every class runs)."""
    statements = list(loop.body)
    unpacks = False
    if rows:
        reason, unpacks = hit_rows_unpacked_as_classes(loop)
        if reason is not None:
            return failed("C116", reason), None, None
        if unpacks:
            statements = statements[1:]  # the loop over every class binds the class itself
    checked = list(statements)
    while checked and _skips(checked[0]):
        reason = skip_tests_only_the_class_count(checked[0], loop.target.id, classes)
        if reason is not None:
            return failed("C117", reason), None, None
        checked = checked[1:]
    reason, body = body_does_nothing_for_an_unchosen_expert(
        loop, mask, checked, context.facts.qualified_name_of, rows and not unpacks
    )
    return failed("C106", reason), body, statements


class _SelectByClass(ast.NodeTransformer):
    """``M[row].squeeze(0)`` -> ``M[e]``: the loop over every class binds the class."""

    def __init__(self, body: _Body):
        self.body = body

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if self.body.is_where_of_the_mask(node):
            return node.func.value
        return node


def _owner_and_name(path: ast.Attribute) -> ast.Tuple:
    return ast.Tuple(elts=[copy.deepcopy(path.value), ast.Constant(path.attr)], ctx=ast.Load())


def _mark_skips_fixed(context: FunctionContext, run: list[ast.stmt]) -> None:
    """``if V == E: continue`` tests a tensor in the original loop, a break another rule
    reported (Where declines a branch that leaves with ``continue``); over every class it
    compares two ints, with no break: the loop's rewrite fixes it."""
    for skip in (s for s in run if _skips(s)):
        for finding in context.module.findings:
            if (finding.path == context.module.filename and not finding.fixed and not finding.suppressed
                    and finding.line == skip.lineno and finding.col == skip.col_offset + 1):
                finding.fixed, finding.rule, finding.reason, finding.condition = True, RULE, None, None


def apply(context: FunctionContext) -> None:
    qualified = context.facts.qualified_name_of

    def rewrite(before: ast.stmt, enclosing: list[ast.stmt]) -> list[ast.stmt] | None:
        hits_statement = _hits_statement(before)
        assignment = _one_assignment(hits_statement)
        if (assignment is None or getattr(hits_statement, "_graphmend_loop_reported", False)
                or not _chosen_classes(assignment[1], qualified)):
            return None
        index = next(i for i, s in enumerate(enclosing) if s is before)
        statement = enclosing[index + 1] if index + 1 < len(enclosing) else None
        if not isinstance(statement, ast.For) or _iterated_name(statement.iter) != assignment[0]:
            if hits_statement is not before:
                return None  # offered again as the block's own statement
            context.module.report(
                context.facts, before, DYNAMIC_SHAPE_OPERATOR,
                f"chosen classes `{assignment[0]}` (`.nonzero()`)", RULE,
                failed("C104", "the list is not iterated by the statement right after it"),
            )
            before._graphmend_loop_reported = True
            return None
        reason, parts = hits_are_classes_in_order(context, hits_statement, statement)
        reason = failed("C104", reason)
        body = run = None
        if reason is None:
            hits, mask, classes, rows = parts
            reason = failed("C105", hits_read_only_by_the_loop(context, hits, statement))
            if reason is None:
                reason, body, run = _body_checks(context, statement, mask, classes, rows)
            if reason is None:
                reason = failed("C107", loop_names_stay_in_the_loop(context, statement, body))
            if reason is None:
                reason = failed("C108", destination_is_bound_at_the_loop(context, before, body, classes))
        copied = "`.nonzero()`" if parts is not None and parts[3] else "`.nonzero()`, `.tolist()`"
        finding = context.module.report(
            context.facts, hits_statement, DYNAMIC_SHAPE_OPERATOR,
            f"loop over the chosen classes `{ast.unparse(statement.iter)}` ({copied})", RULE, reason,
        )
        hits_statement._graphmend_loop_reported = True
        if not finding.fixed:
            return None
        context.module.uses_runtime = True
        _mark_skips_fixed(context, run)
        _hits, _mask, classes, _rows = parts
        compiled_loop = copy.deepcopy(statement)
        compiled_loop.body = [_SelectByClass(body).visit(copy.deepcopy(s)) for s in run]
        compiled_loop.iter = ast.Call(func=ast.Name(id="range", ctx=ast.Load()), args=[copy.deepcopy(classes)], keywords=[])
        place(compiled_loop.iter, statement.iter)
        container = next(iter(body.experts.values()), None)
        exact = expression(
            f"{RUNTIME_NAME}.dynamic_shapes.experts_run_empty_exactly(CONTAINER, CLASSES, BODY_LINES, DESTINATION"
            + (", tensors=TENSORS" if body.stacked else "") + (", modules=MODULES" if body.shared else "") + ")",
            CONTAINER=copy.deepcopy(container) if container is not None else ast.Constant(None),
            CLASSES=copy.deepcopy(classes),
            DESTINATION=ast.Name(id=body.destination, ctx=ast.Load()),
            BODY_LINES=ast.Tuple(elts=[ast.Constant(statement.body[0].lineno), ast.Constant(statement.end_lineno)], ctx=ast.Load()),
            TENSORS=ast.Tuple(elts=[_owner_and_name(p) for p in body.stacked.values()], ctx=ast.Load()),
            MODULES=ast.Tuple(elts=[_owner_and_name(p) for p in body.shared.values()], ctx=ast.Load()),
        )
        place(exact, before)
        compiled = [compiled_loop]
        if hits_statement is not before:
            # The block runs as written, but for the list, which only the loop read.
            block = copy.deepcopy(before)
            block.body = block.body[:-1] or [place(ast.Pass(), hits_statement)]
            compiled.insert(0, block)
        wrapped = compiled_or_original(compiled, [before, statement], f"{RULE}: original loop", also=exact)
        del enclosing[index + 1]  # the loop: ``rewrite_statements`` replaces ``before``
        return [wrapped]

    rewrite_statements(context.facts.function, rewrite)
