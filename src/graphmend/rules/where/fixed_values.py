"""[Where] a test or a padding computed from a module's fixed tensors, decided while tracing.

    if length <= max_pad:
    ...
    padded = nn.functional.pad(hidden_states, paddings, mode, value)
becomes
    if (__graphmend__.fixed_values.truth(length <= max_pad) if __graphmend__.is_compiling()
            else length <= max_pad):
    ...
    padded = nn.functional.pad(hidden_states, (__graphmend__.fixed_values.numbers(paddings)
        if __graphmend__.is_compiling() else paddings), mode, value)

Some modules keep numbers they never change as one-element tensors (a convolution's
stride, kernel size and padding, registered as non-persistent buffers), and compute
paddings from them and the input's length. TorchDynamo breaks the graph at a branch on
such a value and at a padding that holds one: it does not read tensor values while
tracing. While traced, ``runtime/fixed_values.py`` computes the value again from the
real tensors and answers with the Python bool or ints the original reads at its break,
guarding the trace on each tensor's value; anything else answers with the value itself,
and the original test or call runs with its break. Eagerly the expression after
``else`` is the original one, evaluated once, as in the original.

A candidate is the test of an ``if`` (or ``elif``) that may read a tensor (an ordering
or equality comparison, or a name, attribute or subscript tested for truth, with no
string, bytes or None constant compared) but applies no tensor-value operation the
analysis sees (``.sum()``, ``.any()``: a branch on data, Where's selection), whose arms
raise nothing (a validation guard is Trap's), and the padding argument of
``torch.nn.functional.pad``, in a function of a class that registers a non-persistent
buffer or sets an attribute to ``torch.tensor(...)``, or one that reads an attribute of
such a name (``fixed_tensor_scopes``). The rewrite needs
no static condition: the test or argument is evaluated once, where the original
evaluates it, and its value reaches the ``if`` or ``pad`` unchanged unless decided.
While tracing: W216 ``value_computed_from_fixed_tensors``, W217
``computed_by_pure_operators``, W218 ``fixed_tensors_not_written``.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from graphmend.core.legality import CONDITIONS
from graphmend.rewrite.edits import CalleeEdit
from graphmend.rewrite.findings import DATA_DEPENDENT_CONTROL_FLOW, DATA_DEPENDENT_OPERATOR
from graphmend.rewrite.templates import RUNTIME_NAME, expression, place
from graphmend.rules.base import FunctionContext, rewrite_statements

RULE = "Where"
WHEN_DECIDED = f"if its value is computed from fixed tensors while tracing [{CONDITIONS['W216'].label}]"
_PADDING = "padding that may hold a module's fixed tensors"
PAD_FUNCTIONS = frozenset({"torch.nn.functional.pad", "torch._C._nn.pad"})
_EQUALITY_AND_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
_TESTED_FORMS = (ast.Name, ast.Attribute, ast.Subscript)


def may_read_a_tensor(test: ast.expr) -> bool:
    """Whether an ``if`` test may be a tensor's truth: an ordering or equality
    comparison with no string, bytes or None constant among its operands, a name,
    attribute or subscript, or ``not``/``and``/``or`` of one."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return may_read_a_tensor(test.operand)
    if isinstance(test, ast.BoolOp):
        return any(may_read_a_tensor(value) for value in test.values)
    if isinstance(test, ast.Compare):
        operands = [test.left, *test.comparators]
        return all(isinstance(op, _EQUALITY_AND_ORDER) for op in test.ops) and not any(
            isinstance(operand, ast.Constant) and (operand.value is None or isinstance(operand.value, (str, bytes)))
            for operand in operands
        )
    return isinstance(test, _TESTED_FORMS)


_TENSOR_MAKERS = frozenset({"tensor", "as_tensor", "scalar_tensor"})


@dataclass(frozen=True)
class FixedTensorScopes:
    """Where a module keeps numbers as tensors: the classes that register or set them
    on ``self``, the attribute names they use, and each function's innermost class."""

    classes: frozenset[int]
    names: frozenset[str]
    owner_class: dict[int, ast.ClassDef]

    def __bool__(self) -> bool:
        return bool(self.classes)

    def covers(self, function: ast.AST) -> bool:
        """Whether ``function`` is offered to this pass: it belongs to a class that
        keeps fixed tensors (a method, a staticmethod or a function nested in one), or
        reads an attribute of one of their names."""
        owner = self.owner_class.get(id(function))
        if owner is not None and id(owner) in self.classes:
            return True
        return any(isinstance(node, ast.Attribute) and node.attr in self.names for node in ast.walk(function))


def fixed_tensor_scopes(tree: ast.Module) -> FixedTensorScopes:
    """Where the module may keep numbers as tensors on its modules: a class whose own
    code registers a non-persistent buffer (``nn.Buffer(..., persistent=False)``,
    ``self.register_buffer(..., persistent=False)``) or sets an attribute to
    ``torch.tensor(...)``. Only the functions ``FixedTensorScopes.covers`` are offered
    to this pass, so that code far from any fixed tensor (another class of the file,
    a test function nested in a test case) keeps its tests as written."""
    classes: set[int] = set()
    names: set[str] = set()
    owner_class: dict[int, ast.ClassDef] = {}

    def visit(node: ast.AST, owner: ast.ClassDef | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and owner is not None:
                owner_class[id(child)] = owner
            name = _fixed_tensor_kept(child)
            if name is not None and owner is not None:
                classes.add(id(owner))
                if name:
                    names.add(name)
            visit(child, child if isinstance(child, ast.ClassDef) else owner)

    visit(tree, None)
    return FixedTensorScopes(frozenset(classes), frozenset(names), owner_class)


def _fixed_tensor_kept(node: ast.AST) -> str | None:
    """The attribute name ``node`` keeps a fixed tensor under ("" where not told), or
    None where it keeps none."""
    if isinstance(node, ast.Call):
        callee = node.func
        name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", None)
        if name in ("Buffer", "register_buffer") and any(
            keyword.arg == "persistent" and isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            for keyword in node.keywords
        ):
            first = node.args[0] if node.args else None
            registered = first.value if name == "register_buffer" and isinstance(first, ast.Constant) else None
            return registered if isinstance(registered, str) else ""
    if isinstance(node, ast.Assign):
        value = node.value
        targets = [target for target in node.targets if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)]
        if targets and isinstance(value, ast.Call):
            callee = value.func
            if isinstance(callee, ast.Attribute) and (
                callee.attr in _TENSOR_MAKERS or (callee.attr == "Buffer" and _fixed_tensor_kept(value) is not None)
            ):
                return targets[0].attr
    return None


def _raises(statements: list[ast.stmt]) -> bool:
    return any(isinstance(statement, ast.Raise) for statement in statements)


def _mentions_runtime(node: ast.AST) -> bool:
    """Whether graphmend wrote ``node`` or a name it reads (``_gm_...``)."""
    return any(
        isinstance(part, ast.Name) and (part.id == RUNTIME_NAME or part.id.startswith("_gm_")) for part in ast.walk(node)
    )


def _decided_or_original(context: FunctionContext, function: str, original: ast.expr, category: str, what: str):
    """The expression decided while tracing, and the original one otherwise; or None
    where a ``# graphmend: ignore`` comment keeps it. Reported for ``check`` and
    ``explain``; ``graphmend fix`` writes it as two insertions around the original text
    (the copy traced is written as ``ast.unparse`` gives it: the same tree)."""
    finding = context.module.report(context.facts, original, category, what, RULE, None, while_tracing=WHEN_DECIDED)
    if not finding.fixed:
        return None
    decided_text = f"({RUNTIME_NAME}.fixed_values.{function}({ast.unparse(original)}) if {RUNTIME_NAME}.is_compiling() else "
    context.module.callee_edits.extend([
        CalleeEdit(original.lineno, original.col_offset, original.col_offset, before=decided_text),
        CalleeEdit(original.end_lineno, original.end_col_offset, original.end_col_offset, after=")"),
    ])
    decided = expression(
        f"({RUNTIME_NAME}.fixed_values.{function}(VALUE) if {RUNTIME_NAME}.is_compiling() else ORIGINAL)",
        VALUE=copy.deepcopy(original), ORIGINAL=original,
    )
    place(decided, original)
    context.module.uses_runtime = True
    return decided


def _own_calls(statement: ast.stmt) -> list[ast.Call]:
    """The calls a statement makes in its own expressions (not in statements it holds,
    nor in lambdas or comprehensions, whose scopes are their own)."""
    found = []
    pending = [child for child in ast.iter_child_nodes(statement) if not isinstance(child, ast.stmt)]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Call):
            found.append(node)
        pending.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.stmt))
    return found


def apply(context: FunctionContext) -> None:
    facts = context.facts

    def rewrite(statement: ast.stmt, _enclosing) -> None:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return None
        for call in _own_calls(statement):
            if facts.qualified_name_of(call.func) not in PAD_FUNCTIONS or _mentions_runtime(call):
                continue
            if len(call.args) >= 2 and not any(isinstance(argument, ast.Starred) for argument in call.args[:2]):
                decided = _decided_or_original(context, "numbers", call.args[1], DATA_DEPENDENT_OPERATOR, _PADDING)
                if decided is not None:
                    call.args[1] = decided
            else:
                for keyword in call.keywords:
                    if keyword.arg == "pad":
                        decided = _decided_or_original(context, "numbers", keyword.value, DATA_DEPENDENT_OPERATOR, _PADDING)
                        if decided is not None:
                            keyword.value = decided
        if (
            isinstance(statement, ast.If) and may_read_a_tensor(statement.test)
            and not _mentions_runtime(statement.test) and not _raises(statement.body) and not _raises(statement.orelse)
            and not context.data.is_data_dependent(statement.test, facts.node_for(statement))
        ):
            decided = _decided_or_original(
                context, "truth", statement.test, DATA_DEPENDENT_CONTROL_FLOW,
                f"branch on `{ast.unparse(statement.test)}`, which may read a module's fixed tensors",
            )
            if decided is not None:
                statement.test = decided
        return None

    rewrite_statements(facts.function, rewrite)
