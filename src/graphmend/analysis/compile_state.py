"""Code that never runs under ``torch.compile``: the arm a compile-state test rules out.

    if not is_torchdynamo_compiling():
        logger.warning_once("...")          # eager only
    if is_tracing() or x is None: ...       # else arm: eager only

TorchDynamo answers a compile-state test while tracing (``torch.compiler.is_compiling()``
and its spellings are True there), so the arm the answer rules out is never traced: it
holds no break, and a rewrite there would only cost time. When the test's value follows
from the compile-state part alone (``not is_compiling() and X`` is False whatever ``X``
is), the branch itself is no break either. Both arms still run as written eagerly: the
rules leave such code as it is, which is always exact.
"""

from __future__ import annotations

import ast

from graphmend.analysis.bindings import ModuleBindings

# Functions that return True while TorchDynamo traces: torch's own, and the helpers
# libraries wrap them in (transformers' ``is_torchdynamo_compiling``; its ``is_tracing``
# is True under TorchDynamo too, and under other tracers). ``torch.jit.is_tracing`` is
# False under TorchDynamo: it is not one.
_TORCH_FUNCTIONS = frozenset({"is_compiling", "is_dynamo_compiling"})
_TORCH_MODULES = frozenset({"torch.compiler", "torch._dynamo", "torch._utils", "torch._dynamo.external_utils"})
_LIBRARY_FUNCTIONS = frozenset({"is_torchdynamo_compiling", "is_tracing"})
TORCH_MODULE = "<torch>"  # in ``compile_state_names``: ``torch`` is the torch module

# Set on every node of an arm that never runs under compile.
NEVER_COMPILED = "_graphmend_never_compiled"
# Set on an ``if`` whose test TorchDynamo decides from the compile state alone.
DECIDED_WHILE_COMPILING = "_graphmend_decided_while_compiling"


def compile_state_names(bindings: ModuleBindings) -> frozenset[str]:
    """Module names bound, once, by importing a compile-state function."""
    names = set()
    for statement in bindings.tree.body:
        if not isinstance(statement, ast.ImportFrom):
            continue
        source = statement.module or ""
        for alias in statement.names:
            local = alias.asname or alias.name
            if statement.level == 0 and source in _TORCH_MODULES and alias.name in _TORCH_FUNCTIONS:
                names.add(local)
            elif alias.name in _LIBRARY_FUNCTIONS and not source.startswith("torch"):
                names.add(local)
    names = {name for name in names if bindings.bound_once(name)}
    if bindings.imports.get("torch") == "torch" and bindings.bound_once("torch"):
        names.add(TORCH_MODULE)
    return frozenset(names)


def is_compile_state_call(node: ast.AST, names: frozenset[str]) -> bool:
    """``is_torchdynamo_compiling()``, ``torch.compiler.is_compiling()``, ... (no
    arguments but ``is_tracing``'s optional tensor)."""
    if not isinstance(node, ast.Call) or node.keywords:
        return False
    callee = node.func
    if len(node.args) > 1 or any(isinstance(a, ast.Starred) for a in node.args):
        return False
    if isinstance(callee, ast.Name):
        return callee.id in names
    return (
        isinstance(callee, ast.Attribute) and callee.attr in _TORCH_FUNCTIONS and TORCH_MODULE in names
        and ast.unparse(callee.value) in _TORCH_MODULES and not node.args
    )


def value_while_compiling(test: ast.expr, names: frozenset[str]) -> bool | None:
    """What ``test`` is while TorchDynamo traces, when the compile state decides it
    before any other part of it runs (``not is_compiling() and X`` is False without
    running ``X``); else None (``X.any() and not is_compiling()`` runs ``X.any()``
    first, which may break, although its body never runs under compile)."""
    if is_compile_state_call(test, names):
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = value_while_compiling(test.operand, names)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        # ``and`` stops at the first False part, ``or`` at the first True one; a part
        # that does not stop it is passed over only if it too is decided.
        stops = isinstance(test.op, ast.Or)
        for part in test.values:
            value = value_while_compiling(part, names)
            if value is None:
                return None
            if value is stops:
                return stops
        return not stops
    return None


def mark_never_compiled(tree: ast.AST, bindings: ModuleBindings) -> None:
    """Mark each ``if`` the compile state decides, and every node of the arm it rules out."""
    names = compile_state_names(bindings)
    if not names:
        return
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        value = value_while_compiling(node.test, names)
        if value is None:
            continue
        setattr(node, DECIDED_WHILE_COMPILING, True)
        for statement in node.orelse if value else node.body:
            for inner in ast.walk(statement):
                setattr(inner, NEVER_COMPILED, True)


def never_compiled(node: ast.AST) -> bool:
    return getattr(node, NEVER_COMPILED, False)


def decided_while_compiling(node: ast.AST) -> bool:
    return getattr(node, DECIDED_WHILE_COMPILING, False)
