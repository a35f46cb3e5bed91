"""[Where] facts about references and in-place updates in one function.

Where's freshness predicates (rules/where/branches.py) decide whether ``torch.where``'s new tensor
may stand in for the object an arm selects. They read these facts: every read of a
name and whether it keeps a reference to the value it reads, which CFG nodes follow
the branch, and whether a statement may update a tensor in place. Nothing here
edits code.
"""

from __future__ import annotations

import ast

from graphmend.analysis.purity import PURE_METHODS, is_known_pure
from graphmend.analysis.safety import (
    POINTWISE_TORCH,
    SAFE_METHODS,
    updates_in_place,
    writes_through_keyword,
)
from graphmend.analysis.scopes import parent_map
from graphmend.rewrite.templates import RUNTIME_NAME
from graphmend.rules.base import FunctionContext, statement_lists

# Tensor methods that always return a new tensor (``float``, ``contiguous``, ``to``
# and ``detach`` may return their receiver or a view of it).
FRESH_METHODS = frozenset(
    {"exp", "sigmoid", "tanh", "sin", "cos", "square", "sign", "any", "all", "sum",
     "isinf", "isnan", "isfinite", "abs", "relu", "neg", "clone", "mean"}
)


def reaches_avoiding(start, target, blocked) -> bool:
    """Is there a CFG path from ``start`` to ``target`` that does not pass ``blocked``?"""
    seen = {id(start)}
    frontier = [start]
    while frontier:
        node = frontier.pop()
        for successor in node.successors:
            if successor is target:
                return True
            if successor is blocked or id(successor) in seen:
                continue
            seen.add(id(successor))
            frontier.append(successor)
    return False


def reachable_from(start) -> set[int]:
    """Ids of the CFG nodes some path from ``start`` reaches (``start`` itself only
    through a loop)."""
    seen: set[int] = set()
    frontier = list(start.successors)
    while frontier:
        node = frontier.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        frontier.extend(node.successors)
    return seen


def own_parts(statement: ast.AST) -> list[ast.AST]:
    """The code a CFG node runs itself: a compound statement's header, else the statement."""
    if isinstance(statement, (ast.If, ast.While)):
        return [statement.test]
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return [statement.iter, statement.target]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in statement.items]
    if isinstance(statement, ast.ExceptHandler):
        return [statement.type] if statement.type is not None else []
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return list(statement.decorator_list)
    if isinstance(statement, ast.Match):
        return [statement.subject]
    if isinstance(statement, (ast.Try, ast.Module)) or type(statement).__name__ == "TryStar":
        return []
    return [statement]


class References:
    """Reads of names and in-place updates in ``context``'s function."""

    def __init__(self, context: FunctionContext):
        self.context = context
        self._parents: dict[int, ast.AST] = {}

    def reads_of(self, name: str) -> list[tuple[ast.Name, object, ast.AST | None]]:
        """Every read of ``name`` in the function: (the Name, its CFG node or None, its parent)."""
        facts = self.context.facts
        parents = parent_map(facts.function)
        self._parents = parents
        reads = []

        def collect(part: ast.AST, cfg_node) -> None:
            for node in ast.walk(part):
                if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                    nested = any(
                        isinstance(n, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp))
                        for n in ast.walk(part)
                    )
                    reads.append((node, None if nested else cfg_node, parents.get(id(node))))

        def visit(statement: ast.stmt) -> None:
            cfg_node = facts.node_for(statement)
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                collect(statement, None)  # a closure keeps a reference
                return
            if isinstance(statement, (ast.If, ast.While)):
                own = [statement.test]
            elif isinstance(statement, (ast.For, ast.AsyncFor)):
                own = [statement.iter]
            elif isinstance(statement, (ast.With, ast.AsyncWith)):
                own = [item.context_expr for item in statement.items]
            elif isinstance(statement, ast.Match):
                own = [statement.subject]
            elif isinstance(statement, ast.Try) or type(statement).__name__ == "TryStar":
                own = [h.type for h in statement.handlers if h.type is not None]
            else:
                own = [statement]
            for part in own:
                collect(part, cfg_node)
            if own != [statement]:
                for inner in statement_lists(statement):
                    for child in inner:
                        visit(child)

        for statement in facts.function.body:
            visit(statement)
        return reads

    def keeps_no_reference(self, read: ast.Name, parent: ast.AST | None, may_update: bool = False) -> bool:
        """A read whose value is consumed where it stands: nothing keeps it (nor, unless
        ``may_update``, updates it in place)."""
        facts = self.context.facts
        if isinstance(parent, (ast.Tuple, ast.List)):
            # ``operands_combine((x, "number"), ...)``: a check made while tracing;
            # ``print([h, x])``: the builtin print writes the list's text and drops it.
            outer = self._parents.get(id(parent))
            if isinstance(outer, ast.Call) and ast.unparse(outer.func) == f"{RUNTIME_NAME}.operands_combine":
                return True
            return isinstance(outer, ast.Call) and parent in outer.args and self.is_builtin_print(outer)
        if isinstance(parent, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in parent.ops):
            return False  # ``z is x`` observes identity
        if isinstance(parent, (ast.BinOp, ast.UnaryOp, ast.Compare)):
            return True
        if isinstance(parent, ast.Attribute) and parent.attr in ("shape", "dtype", "device", "ndim"):
            return True
        if may_update and isinstance(parent, ast.Attribute) and parent.attr.endswith("_") and not parent.attr.endswith("__"):
            # ``h.neg_()`` as a statement: updates the object, keeps no reference to it.
            call = self._parents.get(id(parent))
            statement = self._parents.get(id(call)) if call is not None else None
            return isinstance(call, ast.Call) and call.func is parent and isinstance(statement, ast.Expr)
        if isinstance(parent, ast.Attribute) and parent.attr in FRESH_METHODS:
            return True  # ``h.sum()``: a method returning a new tensor (non-call reads are not in the set)
        if isinstance(parent, ast.Call) and read in parent.args:
            qualified = facts.qualified_name_of(parent.func)
            if qualified in POINTWISE_TORCH:
                return True
            # Where's own selection: its value is bound to a name checked the same way.
            if ast.unparse(parent.func) == f"{RUNTIME_NAME}.select":
                return True
            # The builtin ``print`` writes the text of its arguments and keeps nothing.
            if self.is_builtin_print(parent):
                return True
        return False

    def is_builtin_print(self, call: ast.Call) -> bool:
        facts = self.context.facts
        return facts.qualified_name_of(call.func) == "builtins.print" or (
            isinstance(call.func, ast.Name) and call.func.id == "print" and not facts.is_local("print")
            and self.context.module.bindings.is_unbound_builtin("print")
        )

    def created_since(self, name: str, use, since, is_new) -> bool:
        """Does ``name`` at CFG node ``use`` hold an object created after the last run of
        CFG node ``since``? True when every definition reaching ``use`` binds a new
        object (``is_new(value)``) and every path from ``since`` to ``use`` passes one
        of them."""
        definitions = self.context.facts.reaching.reaching(use, name)
        if not definitions:
            return False
        for definition in definitions:
            statement = definition.node.statement
            if not (assigns_name_alone(statement, name) and is_new(statement.value)):
                return False
        blocked = {id(d.node) for d in definitions}
        seen: set[int] = set()
        frontier = list(since.successors)
        while frontier:
            node = frontier.pop()
            if node is use:
                return False
            if id(node) in seen or id(node) in blocked:
                continue
            seen.add(id(node))
            frontier.extend(node.successors)
        return True

    def may_update_in_place(self, statement: ast.AST, since=None, is_new=None) -> str | None:
        """Why running ``statement``'s own code (a compound statement's header) may update
        a tensor in place; None when it cannot. With ``since`` (a CFG node) and ``is_new``,
        an update through a name that holds an object created after ``since`` does not
        count (``h = x * 2`` after the branch, then ``h.mul_(2)``)."""
        facts = self.context.facts
        parts = own_parts(statement)
        purity = self.context.module.purity
        use = facts.node_for(statement)

        def new_since(target: ast.expr) -> bool:
            return (
                since is not None and use is not None and isinstance(target, ast.Name)
                and self.created_since(target.id, use, since, is_new)
            )

        for part in parts:
            for node in ast.walk(part):
                if isinstance(node, ast.AugAssign):
                    if new_since(node.target):
                        continue
                    return f"`{ast.unparse(node)}` may update a tensor in place"
                if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                    return f"`{ast.unparse(node)}` is written in place"
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and node.attr in ("data", "grad")
                ):
                    return f"`{ast.unparse(node)}` is written in place"
                if not isinstance(node, ast.Call):
                    continue
                callee = node.func
                if (
                    updates_in_place(node)
                    and not writes_through_keyword(node)
                    and isinstance(callee, ast.Attribute)
                    and new_since(callee.value)
                    and all(not isinstance(a, ast.Name) or new_since(a) for a in node.args)
                ):
                    continue  # ``h.mul_(2)``: ``h`` is new since the branch
                reason = writes_through_keyword(node) or updates_in_place(node)
                if reason:
                    return reason
                qualified = facts.qualified_name_of(callee)
                if qualified in ("builtins.print", "warnings.warn") or is_known_pure(qualified):
                    continue
                if ast.unparse(callee).startswith(f"{RUNTIME_NAME}."):
                    continue
                if isinstance(callee, ast.Attribute) and (
                    callee.attr in PURE_METHODS or callee.attr in SAFE_METHODS or callee.attr in FRESH_METHODS
                ):
                    continue
                if (
                    isinstance(callee, ast.Name)
                    and callee.id in purity.functions
                    and not facts.is_local(callee.id)
                    and purity.function_impurity(purity.functions[callee.id]) is None
                ):
                    continue
                return f"`{ast.unparse(callee)}` is not known to leave tensors unchanged"
        return None


def assigns_name_alone(statement: ast.AST, name: str) -> bool:
    """``name = value``: one target, that name."""
    return (
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
        and statement.targets[0].id == name
    )
