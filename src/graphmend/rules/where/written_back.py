"""[Where] a tensor attribute written back as its own conversion, left out while tracing
where the conversion returns the tensor itself.

    self.pos_encoding = self.pos_encoding.to(device=device, dtype=x.dtype)
becomes
    if __graphmend__.is_compiling() and __graphmend__.written_back.converts_nothing(
            self, 'pos_encoding', device=device, dtype=x.dtype):
        pass
    else:
        self.pos_encoding = self.pos_encoding.to(device=device, dtype=x.dtype)

Where the tensor is on that device in that dtype already, ``to`` returns it and the
write puts back the object the attribute holds; TorchDynamo breaks the graph at the
write all the same. While tracing, ``runtime/written_back.py`` decides whether the
write changes nothing (W219-W221); otherwise, and eagerly, the original statement runs.

A candidate is ``self.NAME = self.NAME.to(ARGUMENTS)`` in a method, whose arguments
are names, constants, or a name's ``.dtype`` or ``.device``: the arguments are
evaluated again by the original statement where the decision keeps it, so they must
read nothing that runs code (``arguments_are_plain_reads``, W123). The statement is
not reported by ``check``: whether it breaks depends on the tensor met while tracing,
and ``explain`` shows what was decided there.
"""

from __future__ import annotations

import ast
import copy

from graphmend.core.legality import failed
from graphmend.rewrite.templates import RUNTIME_NAME, compiled_or_original, expression
from graphmend.rules.base import FunctionContext, rewrite_statements

RULE = "Where"
_PLAIN_ATTRIBUTES = frozenset({"dtype", "device"})


def written_back(statement: ast.stmt, self_name: str | None) -> tuple[str, ast.Call] | None:
    """(the attribute, the ``to`` call) of ``self.NAME = self.NAME.to(...)``, else None."""
    if self_name is None or not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return None
    target, value = statement.targets[0], statement.value
    if not (
        isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == self_name
        and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "to"
    ):
        return None
    read = value.func.value
    if not (
        isinstance(read, ast.Attribute) and read.attr == target.attr
        and isinstance(read.value, ast.Name) and read.value.id == self_name
    ):
        return None
    return target.attr, value


def _plain_read(node: ast.expr) -> bool:
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    return isinstance(node, ast.Attribute) and node.attr in _PLAIN_ATTRIBUTES and isinstance(node.value, ast.Name)


def arguments_are_plain_reads(call: ast.Call) -> str | None:
    """W123: every argument of ``to`` is a name, a constant, or a name's ``.dtype`` or
    ``.device``, with no unpacking: reading them again runs no code."""
    if not all(_plain_read(argument) for argument in call.args) or not all(
        keyword.arg is not None and _plain_read(keyword.value) for keyword in call.keywords
    ):
        return failed(
            "W123", "arguments_are_plain_reads: the conversion's arguments are not names, constants, "
            "`.dtype` or `.device` of a name",
        )
    return None


def apply(context: FunctionContext) -> None:
    facts = context.facts

    def rewrite(statement: ast.stmt, _enclosing) -> list[ast.stmt] | None:
        found = written_back(statement, facts.self_name)
        if found is None:
            return None
        attribute, call = found
        if arguments_are_plain_reads(call) is not None:
            return None
        context.module.uses_runtime = True
        check = expression(
            f"{RUNTIME_NAME}.written_back.converts_nothing(OWNER, {attribute!r})", OWNER=ast.Name(facts.self_name, ctx=ast.Load())
        )
        check.args.extend(copy.deepcopy(call.args))
        check.keywords.extend(copy.deepcopy(call.keywords))
        return [compiled_or_original([ast.Pass()], [statement], f"{RULE}: original write", also=check)]

    rewrite_statements(facts.function, rewrite)
