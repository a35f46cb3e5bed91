"""A statement-level control-flow graph for one function.

Each simple statement is a node; a compound statement contributes a node for its
header (the ``if``/``while`` test, the ``for`` target assignment, the ``with``
items, an ``except`` clause) and its body's nodes. Nested functions and classes are
single nodes that bind their name: their bodies are separate scopes.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass(eq=False)
class CfgNode:
    statement: ast.AST | None
    # "entry", "exit", "statement", "test", "for", "with", "handler", and "swallowed": where
    # a ``with`` goes on when its context manager swallows an exception from its body
    kind: str
    successors: list[CfgNode] = field(default_factory=list)
    predecessors: list[CfgNode] = field(default_factory=list)

    def __repr__(self) -> str:
        line = getattr(self.statement, "lineno", "?")
        return f"<CfgNode {self.kind} line {line}>"


class ControlFlowGraph:
    def __init__(self, function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
        self.function = function
        self.entry = CfgNode(function, "entry")
        self.exit = CfgNode(None, "exit")
        self.nodes: list[CfgNode] = [self.entry, self.exit]
        self.node_of: dict[ast.AST, CfgNode] = {}
        self._loops: list[tuple[CfgNode, list[CfgNode]]] = []
        self._handlers: list[list[CfgNode]] = []
        exits = self._block(function.body, [self.entry])
        for node in exits:
            self._edge(node, self.exit)

    def _new(self, statement: ast.AST, kind: str) -> CfgNode:
        node = CfgNode(statement, kind)
        self.nodes.append(node)
        self.node_of[statement] = node
        return node

    @staticmethod
    def _edge(source: CfgNode, target: CfgNode) -> None:
        if target not in source.successors:
            source.successors.append(target)
            target.predecessors.append(source)

    def _link(self, predecessors: list[CfgNode], node: CfgNode) -> None:
        for predecessor in predecessors:
            self._edge(predecessor, node)
        # Any statement inside a try body may raise into its handlers, or past them (an
        # exception they do not take) into those of an enclosing try; inside a ``with``
        # body, into the context manager's exit, which may swallow it.
        for handlers in self._handlers:
            for handler in handlers:
                self._edge(node, handler)

    def _block(self, statements: list[ast.stmt], predecessors: list[CfgNode]) -> list[CfgNode]:
        current = predecessors
        for statement in statements:
            current = self._statement(statement, current)
        return current

    def _statement(self, statement: ast.stmt, predecessors: list[CfgNode]) -> list[CfgNode]:
        if isinstance(statement, ast.If):
            test = self._new(statement, "test")
            self._link(predecessors, test)
            body_exits = self._block(statement.body, [test])
            else_exits = self._block(statement.orelse, [test]) if statement.orelse else [test]
            return body_exits + else_exits
        if isinstance(statement, (ast.While, ast.For, ast.AsyncFor)):
            header = self._new(statement, "test" if isinstance(statement, ast.While) else "for")
            self._link(predecessors, header)
            breaks: list[CfgNode] = []
            self._loops.append((header, breaks))
            body_exits = self._block(statement.body, [header])
            self._loops.pop()
            for node in body_exits:
                self._edge(node, header)
            else_exits = self._block(statement.orelse, [header]) if statement.orelse else [header]
            return else_exits + breaks
        if isinstance(statement, (ast.With, ast.AsyncWith)):
            header = self._new(statement, "with")
            self._link(predecessors, header)
            # The context manager's exit may swallow an exception raised by any statement
            # of the body: execution goes on after the ``with`` with the bindings made
            # before it (``contextlib.suppress``, an ``__exit__`` that returns True).
            swallowed = CfgNode(statement, "swallowed")
            self.nodes.append(swallowed)
            self._edge(header, swallowed)
            self._handlers.append([swallowed])
            exits = self._block(statement.body, [header])
            self._handlers.pop()
            return exits + [swallowed]
        if isinstance(statement, ast.Try) or type(statement).__name__ == "TryStar":
            return self._try(statement, predecessors)
        if isinstance(statement, ast.Match):
            header = self._new(statement, "test")
            self._link(predecessors, header)
            exits: list[CfgNode] = [header]
            for case in statement.cases:
                exits += self._block(case.body, [header])
            return exits
        node = self._new(statement, "statement")
        self._link(predecessors, node)
        if isinstance(statement, (ast.Return, ast.Raise)):
            self._edge(node, self.exit)
            return []
        if isinstance(statement, ast.Break) and self._loops:
            self._loops[-1][1].append(node)
            return []
        if isinstance(statement, ast.Continue) and self._loops:
            self._edge(node, self._loops[-1][0])
            return []
        return [node]

    def _try(self, statement, predecessors: list[CfgNode]) -> list[CfgNode]:
        first_inside = len(self.nodes)
        handlers = [self._new(handler, "handler") for handler in statement.handlers]
        self._handlers.append(handlers)
        body_exits = self._block(statement.body, predecessors)
        self._handlers.pop()
        for handler in handlers:
            for predecessor in predecessors:
                self._edge(predecessor, handler)
        exits = self._block(statement.orelse, body_exits) if statement.orelse else body_exits
        for handler_statement, handler in zip(statement.handlers, handlers):
            exits = exits + self._block(handler_statement.body, [handler])
        if statement.finalbody:
            # The finally block also runs after any statement of the try leaves it
            # abruptly (a return, a raise, an exception no handler takes, a break or
            # continue), and then execution goes on where that jump was going.
            inside = self.nodes[first_inside:]
            exits = self._block(statement.finalbody, exits + [n for n in inside if n not in exits])
            for node in exits:
                self._edge(node, self.exit)
                if self._loops:
                    header, breaks = self._loops[-1]
                    self._edge(node, header)
                    breaks.extend(n for n in [node] if n not in breaks)
        return exits
