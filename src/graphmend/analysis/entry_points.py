"""Where compiled regions start, and which of the module's code they can reach.

Entry points are functions and ``nn.Module`` classes compiled with ``torch.compile``
in any spelling: ``@torch.compile``, ``@torch.compile(...)``, ``torch.compile(fn)``,
``torch.compile(model)`` and ``model.compile()``, through aliases such as
``import torch as T`` or ``from torch import compile``. A compiled target that
cannot be resolved (``torch.compile(make_model())``) puts every function of the
module in scope: rewriting is exact on the eager path, so over-approximating
costs only rewrite time.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from graphmend.analysis.bindings import ModuleBindings

COMPILE_NAMES = frozenset({"torch.compile"})


@dataclass
class EntryPoints:
    functions: set[str] = field(default_factory=set)
    classes: set[str] = field(default_factory=set)
    everything: bool = False
    lines: list[int] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.everything or bool(self.functions or self.classes)


def _constructed_class(value: ast.expr | None, classes: set[str]) -> str | None:
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in classes:
        return value.func.id
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        # ``MyModel().eval()``, ``MyModel().to(device)`` keep the class.
        return _constructed_class(value.func.value, classes)
    return None


def find_entry_points(tree: ast.Module, bindings: ModuleBindings) -> EntryPoints:
    functions = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    instance_classes: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            constructed = _constructed_class(node.value, classes)
            if constructed:
                instance_classes[node.targets[0].id] = constructed
    found = EntryPoints()

    def add_target(target: ast.expr) -> None:
        if isinstance(target, ast.Name) and target.id in functions:
            found.functions.add(target.id)
        elif isinstance(target, ast.Name) and target.id in instance_classes:
            found.classes.add(instance_classes[target.id])
        elif isinstance(target, ast.Name) and target.id in classes:
            found.classes.add(target.id)
        elif _constructed_class(target, classes):
            found.classes.add(_constructed_class(target, classes))
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and (
            target.value.id in instance_classes
        ):
            found.classes.add(instance_classes[target.value.id])
        else:
            found.everything = True

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                callee = decorator.func if isinstance(decorator, ast.Call) else decorator
                if bindings.qualified_name(callee) in COMPILE_NAMES:
                    found.functions.add(node.name)
                    found.lines.append(decorator.lineno)
        if not isinstance(node, ast.Call):
            continue
        if bindings.qualified_name(node.func) in COMPILE_NAMES:
            found.lines.append(node.lineno)
            if node.args:
                add_target(node.args[0])
            elif not any(k.arg == "model" for k in node.keywords):
                continue  # ``torch.compile(backend=...)`` used as a decorator factory
            else:
                add_target(next(k.value for k in node.keywords if k.arg == "model"))
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "compile" and (
            bindings.qualified_name(node.func) is None
        ):
            receiver = node.func.value
            if isinstance(receiver, ast.Name) and receiver.id in instance_classes:
                found.classes.add(instance_classes[receiver.id])
                found.lines.append(node.lineno)
            elif isinstance(receiver, ast.Name) and receiver.id not in ("re", "regex"):
                found.everything = True
                found.lines.append(node.lineno)
    return found


def reachable_functions(tree: ast.Module, entry: EntryPoints) -> set[ast.AST]:
    """Function nodes the entry points can reach through the module's own names."""
    all_functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if entry.everything:
        return set(all_functions)
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    module_functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    reached: set[ast.AST] = set()
    pending: list[ast.AST] = [module_functions[name] for name in entry.functions if name in module_functions]
    pending += [n for n in all_functions if n.name in entry.functions and n not in pending]
    for class_name in entry.classes:
        pending.append(classes[class_name])
    seen_classes: set[str] = set()
    while pending:
        node = pending.pop()
        if isinstance(node, ast.ClassDef):
            if node.name in seen_classes:
                continue
            seen_classes.add(node.name)
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in classes:
                    pending.append(classes[base.id])
            pending += [n for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            continue
        if node in reached:
            continue
        reached.add(node)
        for inner in ast.walk(node):
            if inner is not node and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                pending.append(inner)
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
                if inner.id in module_functions:
                    pending.append(module_functions[inner.id])
                if inner.id in classes:
                    pending.append(classes[inner.id])
    return reached
