"""Flow-sensitive reaching definitions over a function's control-flow graph.

A branch may see an earlier definition than the last textual one (a loop, an
``if`` without ``else``), so a predicate's dependence on tensor values is decided
from every definition that reaches it, not from the nearest assignment above it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from graphmend.analysis.cfg import CfgNode, ControlFlowGraph

UNDEFINED = "undefined"
PARAMETER = "parameter"
ASSIGNED = "assigned"


@dataclass(frozen=True, eq=False)
class Definition:
    name: str
    node: CfgNode
    kind: str  # UNDEFINED, PARAMETER or ASSIGNED
    value: ast.expr | None = None  # the expression whose value the name receives, when known


def parameter_names(function: ast.AST) -> list[str]:
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return []
    arguments = function.args
    names = [a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
    if arguments.vararg:
        names.append(arguments.vararg.arg)
    if arguments.kwarg:
        names.append(arguments.kwarg.arg)
    return names


def _target_bindings(target: ast.expr, value: ast.expr | None) -> list[tuple[str, ast.expr | None]]:
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, (ast.Tuple, ast.List)):
        bindings = []
        for element in target.elts:
            inner = element.value if isinstance(element, ast.Starred) else element
            # Each unpacked name depends on the whole right-hand side.
            bindings += _target_bindings(inner, value)
        return bindings
    return []


def _walrus_bindings(expression: ast.AST | None) -> list[tuple[str, ast.expr | None]]:
    if expression is None:
        return []
    return [
        (node.target.id, node.value)
        for node in ast.walk(expression)
        if isinstance(node, ast.NamedExpr)
    ]


def statement_bindings(statement: ast.AST, kind: str) -> list[tuple[str, ast.expr | None]]:
    """Names a CFG node binds, each with the expression it binds (None when unknown)."""
    if kind == "test":
        return _walrus_bindings(getattr(statement, "test", None) or getattr(statement, "subject", None))
    if kind == "for":
        return _target_bindings(statement.target, statement.iter) + _walrus_bindings(statement.iter)
    if kind == "with":
        bindings = []
        for item in statement.items:
            bindings += _walrus_bindings(item.context_expr)
            if item.optional_vars is not None:
                bindings += _target_bindings(item.optional_vars, None)
        return bindings
    if kind == "handler":
        return [(statement.name, None)] if statement.name else []
    if isinstance(statement, ast.Assign):
        bindings = _walrus_bindings(statement.value)
        for target in statement.targets:
            bindings += _target_bindings(target, statement.value)
        return bindings
    if isinstance(statement, ast.AnnAssign):
        if statement.value is None:
            return []
        return _target_bindings(statement.target, statement.value)
    if isinstance(statement, ast.AugAssign):
        if isinstance(statement.target, ast.Name):
            combined = ast.BinOp(
                left=ast.Name(id=statement.target.id, ctx=ast.Load()),
                op=statement.op,
                right=statement.value,
            )
            ast.copy_location(combined, statement)
            return [(statement.target.id, combined)]
        return []
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return [
            ((alias.asname or alias.name).split(".")[0], None)
            for alias in statement.names
            if alias.name != "*"
        ]
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [(statement.name, None)]
    if isinstance(statement, ast.Delete):
        return [(t.id, None) for t in statement.targets if isinstance(t, ast.Name)]
    if isinstance(statement, (ast.Expr, ast.Return)):
        return _walrus_bindings(statement.value)
    return []


class ReachingDefinitions:
    """Definitions reaching the start of each CFG node."""

    def __init__(self, graph: ControlFlowGraph):
        self.graph = graph
        self.generated: dict[CfgNode, list[Definition]] = {}
        self.all_definitions: list[Definition] = []
        local_names: set[str] = set()
        for node in graph.nodes:
            if node.kind in ("entry", "exit"):
                continue
            definitions = [
                Definition(name, node, ASSIGNED, value)
                for name, value in statement_bindings(node.statement, node.kind)
            ]
            self.generated[node] = definitions
            local_names.update(d.name for d in definitions)
        parameters = parameter_names(graph.function)
        entry_definitions = [Definition(name, graph.entry, PARAMETER) for name in parameters]
        entry_definitions += [
            Definition(name, graph.entry, UNDEFINED)
            for name in sorted(local_names - set(parameters))
        ]
        self.generated[graph.entry] = entry_definitions
        for definitions in self.generated.values():
            self.all_definitions += definitions
        self.local_names = local_names | set(parameters)
        self.reaching_in: dict[CfgNode, frozenset[Definition]] = {}
        self._solve()

    def _solve(self) -> None:
        out: dict[CfgNode, frozenset[Definition]] = {n: frozenset() for n in self.graph.nodes}
        worklist = list(self.graph.nodes)
        while worklist:
            node = worklist.pop(0)
            incoming: set[Definition] = set()
            for predecessor in node.predecessors:
                incoming |= out[predecessor]
            self.reaching_in[node] = frozenset(incoming)
            generated = self.generated.get(node, [])
            killed = {d.name for d in generated}
            new_out = frozenset([d for d in incoming if d.name not in killed] + generated)
            if new_out != out[node]:
                out[node] = new_out
                for successor in node.successors:
                    if successor not in worklist:
                        worklist.append(successor)
        for node in self.graph.nodes:
            self.reaching_in.setdefault(node, frozenset())

    def reaching(self, node: CfgNode, name: str) -> list[Definition]:
        return [d for d in self.reaching_in[node] if d.name == name]

    def definitely_assigned(self, node: CfgNode, name: str) -> bool:
        """True when every path to ``node`` binds ``name`` (or it is not a local at all)."""
        if name not in self.local_names:
            return True
        definitions = self.reaching(node, name)
        return bool(definitions) and all(d.kind != UNDEFINED for d in definitions)
