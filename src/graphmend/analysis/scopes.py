"""Per-function facts: CFG, reaching definitions, local names, enclosing class."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from graphmend.analysis.bindings import ModuleBindings
from graphmend.analysis.cfg import CfgNode, ControlFlowGraph
from graphmend.analysis.reaching import ReachingDefinitions

FunctionNode = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(eq=False)
class FunctionFacts:
    function: ast.FunctionDef | ast.AsyncFunctionDef
    module: ModuleBindings
    enclosing_class: ast.ClassDef | None
    enclosing_functions: list = field(default_factory=list)
    qualified_name: str = ""

    def __post_init__(self) -> None:
        self.graph = ControlFlowGraph(self.function)
        self.reaching = ReachingDefinitions(self.graph)
        self.local_names = set(self.reaching.local_names)
        self.declared_global: set[str] = set()
        for node in ast.walk(self.function):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                self.declared_global.update(node.names)
        self.outer_names: set[str] = set()
        for outer in self.enclosing_functions:
            self.outer_names |= ReachingDefinitions(ControlFlowGraph(outer)).local_names

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
