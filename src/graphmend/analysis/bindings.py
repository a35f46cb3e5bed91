"""What module-level names refer to: imports, their aliases, rebinding, loggers.

A rule may treat ``torch.equal`` or ``logger.warning`` as what they appear to be
only when the name provably refers to it: bound once, by an import or a known
factory, and never rebound anywhere in the module (``global`` writes included).
"""

from __future__ import annotations

import ast
import builtins
from collections import Counter

LOGGER_FACTORIES = frozenset(
    {
        "logging.getLogger",
        "transformers.utils.logging.get_logger",
        "transformers.logging.get_logger",
    }
)


def _resolve_relative(module_name: str | None, is_package: bool, level: int, target: str | None):
    if level == 0:
        return target
    if not module_name:
        return None
    parts = module_name.split(".")
    if not is_package:
        parts = parts[:-1]
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    if not base:
        return None
    return ".".join(base + ([target] if target else []))


class ModuleBindings:
    def __init__(self, tree: ast.Module, module_name: str | None = None, is_package: bool = False):
        self.tree = tree
        self.module_name = module_name
        self.imports: dict[str, str] = {}
        self.binding_counts: Counter[str] = Counter()
        self.module_values: dict[str, ast.expr] = {}
        self.star_imported = False
        for statement in tree.body:
            self._bind_module_statement(statement, is_package)
        self._count_nested_rebindings()
        self.loggers = {
            name
            for name, value in self.module_values.items()
            if self.binding_counts[name] == 1
            and isinstance(value, ast.Call)
            and self.qualified_name(value.func) in LOGGER_FACTORIES
        }

    def _bind_module_statement(self, statement: ast.stmt, is_package: bool) -> None:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                local = alias.asname or alias.name.split(".")[0]
                target = alias.name if alias.asname else local
                # ``import torch`` then ``import torch.nn`` bind ``torch`` to one module.
                if self.imports.get(local) == target and self.binding_counts[local]:
                    continue
                self._bind(local)
                self.imports[local] = target
        elif isinstance(statement, ast.ImportFrom):
            source = _resolve_relative(self.module_name, is_package, statement.level, statement.module)
            for alias in statement.names:
                if alias.name == "*":
                    self.star_imported = True
                    continue
                local = alias.asname or alias.name
                self._bind(local)
                if source:
                    self.imports[local] = f"{source}.{alias.name}"
        elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        self._bind(node.id)
                        if (
                            isinstance(statement, ast.Assign)
                            and len(statement.targets) == 1
                            and target is node
                        ):
                            self.module_values[node.id] = statement.value
            if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
                self._bind(statement.target.id)
        elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self._bind(statement.name)
        elif isinstance(statement, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            # Conditional imports and definitions: a name bound in two places is ambiguous.
            for child in ast.iter_child_nodes(statement):
                if isinstance(child, ast.stmt):
                    self._bind_module_statement(child, is_package)
                elif isinstance(child, ast.ExceptHandler):
                    for inner in child.body:
                        self._bind_module_statement(inner, is_package)
            if isinstance(statement, ast.For):
                for node in ast.walk(statement.target):
                    if isinstance(node, ast.Name):
                        self._bind(node.id)
        for node in ast.walk(statement):
            if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
                self._bind(node.target.id)

    def _bind(self, name: str) -> None:
        self.binding_counts[name] += 1

    def _count_nested_rebindings(self) -> None:
        """``global x`` followed by a write inside a function rebinds the module's ``x``."""
        if not any(isinstance(node, ast.Global) for node in ast.walk(self.tree)):
            return
        for function in ast.walk(self.tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            declared = set()
            for node in ast.walk(function):
                if isinstance(node, ast.Global):
                    declared.update(node.names)
            if not declared:
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                    if node.id in declared:
                        self._bind(node.id)
                        self._bind(node.id)

    def bound_once(self, name: str) -> bool:
        return self.binding_counts[name] == 1

    def is_unbound_builtin(self, name: str) -> bool:
        """``name`` is the builtin: the module never binds it and has no star import."""
        return (
            hasattr(builtins, name)
            and self.binding_counts[name] == 0
            and not self.star_imported
        )

    def qualified_name(self, expression: ast.expr) -> str | None:
        """``T.nn.functional.relu`` -> ``torch.nn.functional.relu`` when provable, else None."""
        parts: list[str] = []
        node = expression
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        name = node.id
        if name in self.imports and self.bound_once(name):
            head = self.imports[name]
        elif self.is_unbound_builtin(name):
            head = f"builtins.{name}"
        else:
            return None
        return ".".join([head] + list(reversed(parts)))
