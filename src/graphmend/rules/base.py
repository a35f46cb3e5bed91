"""What every rule shares: the module context, statement walking, legality checks.

A rule looks at one function at a time, using facts computed from the current
tree (so a rule that runs after another sees its edits), and for each candidate
either plans an edit or records the first legality condition that failed.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from graphmend.analysis.bindings import ModuleBindings
from graphmend.analysis.compile_state import decided_while_compiling, never_compiled
from graphmend.analysis.purity import PurityAnalysis
from graphmend.analysis.scopes import FunctionFacts
from graphmend.analysis.tensor_values import DataDependence
from graphmend.core.legality import failed
from graphmend.rewrite.findings import Finding
from graphmend.rewrite.suppressions import is_suppressed
from graphmend.rewrite.templates import is_guard, is_original

NEVER_COMPILED_REASON = "never runs under torch.compile (a compile-state test rules it out)"

# A legality condition returns None when it holds, or the reason it fails.
LegalityCondition = Callable[..., "str | None"]


@dataclass
class ModuleContext:
    tree: ast.Module
    bindings: ModuleBindings
    purity: PurityAnalysis
    filename: str
    module_name: str | None
    findings: list[Finding] = field(default_factory=list)
    uses_runtime: bool = False
    # line -> category codes suppressed there (None: all), see rewrite/suppressions.py
    suppressions: dict = field(default_factory=dict)
    # Defer's calls as ``graphmend fix`` writes them (see mend_module_source)
    output_calls_in_place: bool = False
    callee_edits: list = field(default_factory=list)
    # what a rule computes once per module (key: the rule's name for it)
    memo: dict = field(default_factory=dict)
    _counter: int = 0

    def fresh_suffix(self) -> int:
        self._counter += 1
        return self._counter

    def report(self, facts: FunctionFacts, node: ast.AST, category: str, message: str,
               rule: str | None, reason: str | None, follows: str | None = None,
               caveat: str | None = None, when: str | None = None) -> Finding:
        if never_compiled(node) or decided_while_compiling(node):
            # Never traced: no candidate, and no rule rewrites it (the caller sees a
            # decline it does not act on; nothing is recorded).
            return Finding(
                line=node.lineno, col=node.col_offset + 1, category=category, message=message,
                function=facts.qualified_name, rule=rule, fixed=False, reason=NEVER_COMPILED_REASON,
                path=self.filename,
            )
        suppressed = is_suppressed(self.suppressions, node, category)
        if suppressed and rule is not None and reason is None:
            reason = failed("G101", "suppressed by a `# graphmend: ignore` comment")
        finding = Finding(
            line=node.lineno,
            col=node.col_offset + 1,
            category=category,
            message=message,
            function=facts.qualified_name,
            rule=rule,
            fixed=reason is None and rule is not None,
            reason=reason,
            path=self.filename,
            suppressed=suppressed,
            follows=follows,
            caveat=caveat if reason is None and rule is not None else None,
            when=when if reason is None and rule is not None else None,
        )
        self.findings.append(finding)
        return finding


@dataclass
class FunctionContext:
    facts: FunctionFacts
    module: ModuleContext

    def __post_init__(self) -> None:
        self.data = DataDependence(self.facts)
        self._data_past_items: DataDependence | None = None

    def depends_only_through_items(self, expression: ast.AST, node) -> bool:
        """Data-dependent only through ``.item()`` / ``.tolist()`` results: Python
        values, whose break is at that call (reported there), not at this use."""
        if self._data_past_items is None:
            self._data_past_items = DataDependence(self.facts, items_are_python=True)
        return not self._data_past_items.is_data_dependent(expression, node)

    def lifted_items_read(self, expression: ast.AST, node) -> list[int]:
        """The lines of the ``.item()`` calls Trap keeps as tensors that ``expression``
        depends on, when it depends on tensor values through nothing else: it is then a
        break only because Trap keeps them in the graph (the original breaks at them)."""
        data = DataDependence(self.facts, items_are_python=True, lifted_items_are_python=True)
        if data.is_data_dependent(expression, node):
            return []
        return sorted(data.lifted_items_met)

    def may_depend_on_tensor_values(self) -> bool:
        """Parameters are static, so no predicate is data-dependent unless the function
        applies a tensor-value operation somewhere: a cheap test before any CFG is built."""
        return any(self.data.is_value_operation(node) for node in self.facts.nodes)


def first_failure(*checks: Callable[[], str | None]) -> str | None:
    for check in checks:
        reason = check()
        if reason:
            return reason
    return None


def statement_lists(node: ast.AST) -> Iterator[list[ast.stmt]]:
    """Every statement list directly inside ``node``'s own scope (not nested defs)."""
    for name in ("body", "orelse", "finalbody"):
        value = getattr(node, name, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            yield value
    for handler in getattr(node, "handlers", []):
        yield handler.body
    for case in getattr(node, "cases", []):
        yield case.body


def rewrite_statements(
    function: ast.AST, rewrite: Callable[[ast.stmt, list[ast.stmt]], list[ast.stmt] | None]
) -> None:
    """Offer each statement of ``function`` (outside kept-original code) to ``rewrite``.

    ``rewrite(statement, enclosing_list)`` returns replacement statements or None.
    Replacements are not offered again, so a rule never rewrites its own output.
    """

    def visit_list(statements: list[ast.stmt]) -> None:
        index = 0
        while index < len(statements):
            statement = statements[index]
            if is_original(statement) or never_compiled(statement):
                index += 1
                continue
            if decided_while_compiling(statement):
                # TorchDynamo answers the test while tracing: only the arm it takes is offered.
                for inner in statement_lists(statement):
                    visit_list(inner)
                index += 1
                continue
            if is_guard(statement):
                # A rule's own ``if is_compiling() and ...``: what it holds may be offered.
                for inner in statement_lists(statement):
                    visit_list(inner)
                index += 1
                continue
            replacement = rewrite(statement, statements)
            if replacement is not None:
                statements[index : index + 1] = replacement
                index += len(replacement)
                continue
            if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for inner in statement_lists(statement):
                    visit_list(inner)
            index += 1

    visit_list(function.body)


def enclosing_statements(function: ast.AST, target: ast.stmt) -> list[ast.stmt]:
    """The chain of compound statements that contain ``target`` inside ``function``."""
    chain: list[ast.stmt] = []

    def search(node: ast.AST, path: list[ast.stmt]) -> bool:
        for statements in statement_lists(node):
            for statement in statements:
                if statement is target:
                    chain.extend(path)
                    return True
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                if search(statement, path + [statement]):
                    return True
        return False

    search(function, [])
    return chain
