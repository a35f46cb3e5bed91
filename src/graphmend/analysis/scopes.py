"""Per-function facts: CFG, reaching definitions, local names, enclosing class."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

from graphmend.analysis.bindings import ModuleBindings
from graphmend.analysis.cfg import CfgNode, ControlFlowGraph
from graphmend.analysis.reaching import ReachingDefinitions

FunctionNode = (ast.FunctionDef, ast.AsyncFunctionDef)


def parent_map(tree: ast.AST) -> dict[int, ast.AST]:
    """id(node) -> the node that holds it, for every node below ``tree``. Made fresh at
    each use: rewrites change the tree in place, so a kept map would go stale."""
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    return parents


@dataclass(eq=False)
class FunctionFacts:
    function: ast.FunctionDef | ast.AsyncFunctionDef
    module: ModuleBindings
    enclosing_class: ast.ClassDef | None
    enclosing_functions: list = field(default_factory=list)
    qualified_name: str = ""

    # Facts are computed on first use: most functions have no candidate at all, and a
    # rule's cheap syntactic pre-check decides that before any graph is built.

    @cached_property
    def graph(self) -> ControlFlowGraph:
        return ControlFlowGraph(self.function)

    @cached_property
    def reaching(self) -> ReachingDefinitions:
        return ReachingDefinitions(self.graph)

    @cached_property
    def nodes(self) -> list[ast.AST]:
        """Every node of the function's own body (nested definitions included)."""
        return list(ast.walk(self.function))

    @cached_property
    def local_names(self) -> set[str]:
        return bound_names(self.function)

    @cached_property
    def declared_global(self) -> set[str]:
        names: set[str] = set()
        for node in self.nodes:
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                names.update(node.names)
        return names

    @cached_property
    def outer_names(self) -> set[str]:
        names: set[str] = set()
        for outer in self.enclosing_functions:
            names |= bound_names(outer)
        return names

    @property
    def name(self) -> str:
        return self.function.name

    def node_for(self, statement: ast.AST) -> CfgNode | None:
        return self.graph.node_of.get(statement)

    def is_local(self, name: str) -> bool:
        return name in self.local_names or name in self.outer_names or name in self.declared_global

    def qualified_name_of(self, expression: ast.expr) -> str | None:
        """The module-level meaning of ``expression``, unless a local name shadows its head."""
        head = expression
        while isinstance(head, ast.Attribute):
            head = head.value
        if isinstance(head, ast.Name) and self.is_local(head.id):
            return None
        return self.module.qualified_name(expression)

    @property
    def self_name(self) -> str | None:
        """The first parameter of a method (or of a function taking ``self``)."""
        arguments = self.function.args.posonlyargs + self.function.args.args
        if not arguments:
            return None
        first = arguments[0].arg
        if self.enclosing_class is not None or first == "self":
            return first
        return None


def bound_names(function: ast.AST) -> set[str]:
    """Names a function binds in its own scope: parameters, assignments, imports, defs."""
    from graphmend.analysis.reaching import parameter_names

    names = set(parameter_names(function))
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            stack.extend(node.decorator_list)
            continue  # a nested scope binds its own names
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.Lambda):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return names


def iter_functions(tree: ast.Module, module: ModuleBindings):
    """Every function in the module (nested ones too), with its enclosing class."""

    def visit(node: ast.AST, enclosing_class, enclosing_functions, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, FunctionNode):
                qualified = f"{prefix}{child.name}"
                yield child, enclosing_class, list(enclosing_functions), qualified
                yield from visit(child, None, enclosing_functions + [child], qualified + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, child, enclosing_functions, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.stmt, ast.ExceptHandler, ast.match_case)):
                yield from visit(child, enclosing_class, enclosing_functions, prefix)

    for function, enclosing_class, enclosing_functions, qualified in visit(tree, None, [], ""):
        yield FunctionFacts(function, module, enclosing_class, enclosing_functions, qualified)
