"""Generated code as short templates with named holes.

A hole is a bare name in the template (``CONDITION``) replaced by an expression,
or an expression statement holding only that name (``BODY``) replaced by a list of
statements. Every generated statement gets the location of the statement it stands
for, so tracebacks and Dynamo's break reports still point at the user's line.
"""

from __future__ import annotations

import ast
import copy

RUNTIME_NAME = "__graphmend__"
# What ``graphmend fix`` writes into a file: a line a reader understands.
RUNTIME_IMPORT = f"import graphmend.runtime as {RUNTIME_NAME}"
# What a module mended in memory (the import hook, ``mend_source``) runs instead: the
# import binds nothing, so the module's namespace (``globals()``, ``dir``, ``vars``) is
# the original's. Importing the runtime puts it in the builtins
# (``graphmend.runtime._install_in_builtins``), where mended code finds ``__graphmend__``.
RUNTIME_LOAD = "__import__('graphmend.runtime')"
# Marks the original code kept for the eager path; no rule touches it.
ORIGINAL_MARK = "_graphmend_original"
# Marks the ``if is_compiling()`` statement a rule generated, with the reason.
GUARD_MARK = "_graphmend_guard"


class _Filler(ast.NodeTransformer):
    def __init__(self, holes: dict):
        self.holes = holes

    def visit_Name(self, node: ast.Name):
        if node.id in self.holes and not isinstance(self.holes[node.id], list):
            return copy.deepcopy(self.holes[node.id])
        return node

    def visit_Expr(self, node: ast.Expr):
        if isinstance(node.value, ast.Name) and isinstance(self.holes.get(node.value.id), list):
            return list(self.holes[node.value.id])
        self.generic_visit(node)
        return node


def statements(template: str, **holes) -> list[ast.stmt]:
    tree = ast.parse(template)
    filled = _Filler(holes).visit(tree)
    return filled.body


def expression(template: str, **holes) -> ast.expr:
    tree = ast.parse(template, mode="eval")
    return _Filler(holes).visit(tree).body


def reaches_runtime(code) -> bool:
    """Whether a code object's own bytecode names the runtime: graphmend rewrote it."""
    return RUNTIME_NAME in getattr(code, "co_names", ())


def runtime(attribute: str) -> ast.expr:
    return ast.Attribute(value=ast.Name(id=RUNTIME_NAME, ctx=ast.Load()), attr=attribute, ctx=ast.Load())


def place(nodes, like: ast.AST):
    """Give generated nodes the source location of ``like``."""
    for node in nodes if isinstance(nodes, list) else [nodes]:
        for child in ast.walk(node):
            if "lineno" in child._attributes and not hasattr(child, "_graphmend_keep_location"):
                # One line per generated node: TorchDynamo's resume functions rebuild
                # line tables from instruction positions, and a span reaching past the
                # statement's first line shifts the lines reported after it.
                child.lineno = like.lineno
                child.col_offset = like.col_offset
                child.end_lineno = like.lineno
                child.end_col_offset = like.col_offset
    return nodes


def compiled_or_original(
    compiled: list[ast.stmt],
    original: list[ast.stmt],
    reason: str,
    also: ast.expr | None = None,
    compiled_last: bool = False,
) -> ast.If:
    """``if is_compiling(): <compiled> else: <original>``: the eager path stays exact.

    ``also`` adds a condition that must hold (decided while tracing) for the compiled form.
    ``compiled_last`` writes ``if not is_compiling(): <original> else: <compiled>`` for a
    compiled form that may still break: its code then falls through to the statement
    after it, with no jump between. TorchDynamo's liveness analysis takes every local
    read after a jump as live, even one assigned first, so a jump after the break would
    make the graph before it return values nothing reads (and, under inductor, draw
    other random numbers).
    """
    if compiled_last:
        test = f"not ({RUNTIME_NAME}.is_compiling() and ALSO)" if also is not None else f"not {RUNTIME_NAME}.is_compiling()"
        template = f"if {test}:\n    ORIGINAL\nelse:\n    COMPILED"
    else:
        test = f"{RUNTIME_NAME}.is_compiling()" + (" and ALSO" if also is not None else "")
        template = f"if {test}:\n    COMPILED\nelse:\n    ORIGINAL"
    guard = statements(template, COMPILED=compiled, ORIGINAL=original, ALSO=also)[0]
    setattr(guard, GUARD_MARK, reason)
    for statement in original:
        for node in ast.walk(statement):
            setattr(node, ORIGINAL_MARK, reason)
    anchor = original[0]
    for node in ast.walk(guard.test):
        place(node, anchor)
    guard.lineno, guard.col_offset = anchor.lineno, anchor.col_offset
    guard.end_lineno = getattr(original[-1], "end_lineno", anchor.lineno)
    guard.end_col_offset = getattr(original[-1], "end_col_offset", anchor.col_offset)
    return guard


def is_original(node: ast.AST) -> bool:
    return hasattr(node, ORIGINAL_MARK)


def is_guard(node: ast.AST) -> bool:
    return hasattr(node, GUARD_MARK)
