"""Where compiled regions start, and which of the module's code they can reach.

Entry points are functions and ``nn.Module`` classes compiled in any spelling:

* ``torch.compile`` as a call (``torch.compile(fn)``, ``torch.compile(model=m)``), as a
  decorator (``@torch.compile``, ``@torch.compile(...)``), as a decorator factory
  called later (``torch.compile(backend=b)(fn)``), through aliases (``import torch as
  T``, ``from torch import compile``, ``c = torch.compile``, ``functools.partial``);
* ``nn.Module.compile``: ``model.compile()``, ``M().compile()``,
  ``torch.nn.Module.compile(model)``;
* ``torch._dynamo.optimize(...)`` (and ``optimize_assert``) applied to a function or
  used as a decorator, directly or through a name bound to it;
* helpers: a function that compiles one of its parameters (``def compile_model(m):
  return torch.compile(m)``) makes what its callers pass there an entry point, in this
  module or, given ``known_helpers``, in another one.

A compiled target that cannot be resolved (``torch.compile(make_model())``) puts every
function of the module in scope: rewriting is exact on the eager path, so
over-approximating costs only rewrite time. A target imported from another module
(``torch.compile(M())`` after ``from model import M``) is recorded by its qualified
name in ``EntryPoints.imported``, so a caller that sees several files
(``graphmend check``) can follow it there.

``model_classes`` names the classes that look like ``nn.Module`` code (a ``forward``
method, or an ``nn.Module`` base): code compiled from somewhere out of sight is
usually there; ``method_decorators`` names the functions that wrap such methods.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from graphmend.analysis.bindings import ModuleBindings
from graphmend.analysis.compile_state import never_compiled

# Called with the target as the first argument (or ``model=``).
COMPILE_NAMES = frozenset({"torch.compile", "torch.nn.Module.compile"})
# Called with options, they return a function that compiles its argument.
COMPILER_FACTORY_NAMES = frozenset(
    {"torch._dynamo.optimize", "torch._dynamo.optimize_assert", "torch._dynamo.eval_frame.optimize"}
)
PARTIAL_NAMES = frozenset({"functools.partial"})
MODULE_BASE_NAMES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass
class EntryPoints:
    functions: set[str] = field(default_factory=set)
    classes: set[str] = field(default_factory=set)
    everything: bool = False
    lines: list[int] = field(default_factory=list)
    # Qualified names of other modules' functions and classes this module compiles.
    imported: set[str] = field(default_factory=set)
    # Module-level functions that compile a parameter: name -> its position.
    helpers: dict[str, int] = field(default_factory=dict)

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


def _constructed_import(value: ast.expr | None, bindings: ModuleBindings) -> str | None:
    """``M()`` / ``M().to(d)`` with ``M`` imported from another module: its qualified name."""
    if not isinstance(value, ast.Call):
        return None
    if isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.Call):
        return _constructed_import(value.func.value, bindings)
    qualified = bindings.qualified_name(value.func)
    if qualified and not qualified.startswith(("torch.", "builtins.")):
        return qualified
    return None


class _Finder:
    def __init__(self, tree: ast.Module, bindings: ModuleBindings, known_helpers: Mapping[str, int]):
        self.tree = tree
        self.bindings = bindings
        self.known_helpers = dict(known_helpers)
        self.functions = {n.name for n in ast.walk(tree) if isinstance(n, _FUNCTION_NODES)}
        self.classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        self.instance_classes: dict[str, str] = {}
        self.instance_imports: dict[str, str] = {}
        self.compiler_names: set[str] = set()
        # (class, attribute) pairs of ``self.attribute`` targets already followed.
        self._attributes_seen: set[tuple[str, str]] = set()
        self.found = EntryPoints()
        assignments = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        ]
        for node in assignments:
            name = node.targets[0].id
            constructed = _constructed_class(node.value, self.classes)
            if constructed:
                self.instance_classes[name] = constructed
            elif _constructed_import(node.value, bindings):
                self.instance_imports[name] = _constructed_import(node.value, bindings)
        # Names bound to a compiler (``c = torch.compile``, ``opt = torch._dynamo.optimize(b)``),
        # to a fixed point so that an alias of an alias counts too.
        changed = True
        while changed:
            changed = False
            for node in assignments:
                name = node.targets[0].id
                if name not in self.compiler_names and self.is_compiler(node.value):
                    self.compiler_names.add(name)
                    changed = True

    # -- what compiles ---------------------------------------------------------------

    def is_compile_function(self, expression: ast.expr) -> bool:
        """``torch.compile`` itself, under any name."""
        if self.bindings.qualified_name(expression) in COMPILE_NAMES:
            return True
        return isinstance(expression, ast.Name) and expression.id in self.compiler_names

    def is_compiler(self, expression: ast.expr) -> bool:
        """An expression whose value, called on a function or module, compiles it."""
        if self.is_compile_function(expression):
            return True
        if not isinstance(expression, ast.Call):
            return False
        callee = self.bindings.qualified_name(expression.func)
        if callee in COMPILER_FACTORY_NAMES:
            return True
        if self.is_compile_function(expression.func) and not expression.args and not _keyword(expression, "model"):
            return True  # ``torch.compile(backend=...)``: a decorator factory
        if callee in PARTIAL_NAMES and expression.args and self.is_compile_function(expression.args[0]):
            return len(expression.args) == 1 and not _keyword(expression, "model")
        return False

    def helper_position(self, callee: ast.expr) -> int | None:
        if isinstance(callee, ast.Name) and callee.id in self.found.helpers:
            return self.found.helpers[callee.id]
        qualified = self.bindings.qualified_name(callee)
        if qualified is not None:
            return self.known_helpers.get(qualified)
        return None

    def compiled_target(self, call: ast.Call) -> tuple[bool, ast.expr | None]:
        """Whether ``call`` compiles something, and the expression it compiles."""
        if self.is_compile_function(call.func):
            if call.args:
                return True, call.args[0]
            model = _keyword(call, "model")
            return (model is not None), model
        if self.is_compiler(call.func):
            return True, (call.args[0] if call.args else None)
        position = self.helper_position(call.func)
        if position is not None:
            return True, (call.args[position] if len(call.args) > position else None)
        return False, None

    # -- the walk -------------------------------------------------------------------

    def find_helpers(self) -> None:
        """Module-level functions that compile one of their own parameters."""
        definitions = [n for n in self.tree.body if isinstance(n, _FUNCTION_NODES)]
        changed = True
        while changed:
            changed = False
            for definition in definitions:
                if definition.name in self.found.helpers:
                    continue
                parameters = [a.arg for a in definition.args.posonlyargs + definition.args.args]
                for node in ast.walk(definition):
                    if not isinstance(node, ast.Call):
                        continue
                    compiles, target = self.compiled_target(node)
                    if compiles and isinstance(target, ast.Name) and target.id in parameters:
                        self.found.helpers[definition.name] = parameters.index(target.id)
                        changed = True
                        break

    def add_target(self, target: ast.expr, enclosing: ast.AST | None) -> None:
        found = self.found
        if isinstance(enclosing, _FUNCTION_NODES) and isinstance(target, ast.Name):
            arguments = enclosing.args
            parameters = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
            if enclosing.name in found.helpers and target.id in {a.arg for a in parameters}:
                return  # a helper's own parameter: its callers say what is compiled
        if isinstance(target, ast.Name) and target.id in self.functions:
            found.functions.add(target.id)
        elif isinstance(target, ast.Name) and target.id in self.instance_classes:
            found.classes.add(self.instance_classes[target.id])
        elif isinstance(target, ast.Name) and target.id in self.classes:
            found.classes.add(target.id)
        elif _constructed_class(target, self.classes):
            found.classes.add(_constructed_class(target, self.classes))
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and (
            target.value.id in self.instance_classes
        ):
            found.classes.add(self.instance_classes[target.value.id])
        elif isinstance(target, ast.Name) and target.id in self.instance_imports:
            found.imported.add(self.instance_imports[target.id])
        elif _constructed_import(target, self.bindings):
            found.imported.add(_constructed_import(target, self.bindings))
        elif self.bindings.qualified_name(target) and not self.bindings.qualified_name(target).startswith(
            ("torch.", "builtins.")
        ):
            found.imported.add(self.bindings.qualified_name(target))
        elif not self.add_attribute_of_self(target, enclosing):
            found.everything = True

    def add_attribute_of_self(self, target: ast.expr, enclosing: ast.AST | None) -> bool:
        """``torch.compile(self.model)`` in a method: what the class assigns to
        ``self.model`` is compiled (a trainer class that builds and compiles its model).
        An assignment whose value reads ``self.model`` itself (``torch.compile(self.model)``,
        ``DDP(self.model)``, ``self.model.to(d)``) wraps the same object and adds nothing.
        False when the attribute's values cannot all be resolved."""
        if not (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and isinstance(enclosing, _FUNCTION_NODES)
        ):
            return False
        owner = _enclosing_class_node(self.tree, enclosing)
        if owner is None:
            return False
        key = (owner.name, target.attr)
        if key in self._attributes_seen:
            return True  # resolved (or being resolved) already
        self._attributes_seen.add(key)
        values = []
        for node in ast.walk(owner):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            assigns_it = any(_is_self_attribute(t, target.attr) for t in targets)
            if assigns_it and not any(_is_self_attribute(part, target.attr) for part in ast.walk(value)):
                values.append(value)
        if not values:
            return False
        for value in values:
            self.add_target(value, enclosing)
        return True

    def walk(self) -> EntryPoints:
        self.find_helpers()
        stack: list[tuple[ast.AST, ast.AST | None]] = [(self.tree, None)]
        while stack:
            node, enclosing = stack.pop()
            if isinstance(node, _FUNCTION_NODES):
                for decorator in node.decorator_list:
                    if self.is_compiler(decorator) or self.helper_position(decorator) == 0:
                        self.found.functions.add(node.name)
                        self.found.lines.append(decorator.lineno)
                enclosing = node
            elif isinstance(node, ast.Call):
                self.visit_call(node, enclosing)
            stack.extend((child, enclosing) for child in ast.iter_child_nodes(node))
        return self.found

    def visit_call(self, node: ast.Call, enclosing: ast.AST | None) -> None:
        found = self.found
        compiles, target = self.compiled_target(node)
        if compiles:
            found.lines.append(node.lineno)
            if target is not None:
                self.add_target(target, enclosing)
            return
        if not (isinstance(node.func, ast.Attribute) and node.func.attr == "compile"):
            return
        if self.bindings.qualified_name(node.func) is not None:
            return  # ``re.compile`` and the like
        # ``nn.Module.compile`` on an instance.
        receiver = node.func.value
        constructed = _constructed_class(receiver, self.classes)
        if isinstance(receiver, ast.Name) and receiver.id in self.instance_classes:
            found.classes.add(self.instance_classes[receiver.id])
        elif constructed:
            found.classes.add(constructed)
        elif isinstance(receiver, ast.Name) and receiver.id in self.instance_imports:
            found.imported.add(self.instance_imports[receiver.id])
        elif _constructed_import(receiver, self.bindings):
            found.imported.add(_constructed_import(receiver, self.bindings))
        elif isinstance(receiver, ast.Name) and receiver.id == "self" and isinstance(enclosing, _FUNCTION_NODES):
            owner = _enclosing_class(self.tree, enclosing)
            if owner is not None:
                found.classes.add(owner)
            else:
                found.everything = True
        elif isinstance(receiver, ast.Name) and receiver.id not in ("re", "regex"):
            found.everything = True
        else:
            return
        found.lines.append(node.lineno)


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _enclosing_class(tree: ast.Module, function: ast.AST) -> str | None:
    owner = _enclosing_class_node(tree, function)
    return owner.name if owner is not None else None


def _enclosing_class_node(tree: ast.Module, function: ast.AST) -> ast.ClassDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and function in node.body:
            return node
    return None


def _is_self_attribute(node: ast.AST, attribute: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attribute
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def find_entry_points(
    tree: ast.Module,
    bindings: ModuleBindings,
    known_helpers: Mapping[str, int] | None = None,
    compiled_elsewhere: Iterable[str] = (),
) -> EntryPoints:
    """The module's entry points.

    ``known_helpers``: qualified names of compiling helpers defined in other modules
    (``{"utils.compile_model": 0}``). ``compiled_elsewhere``: names of this module's
    top-level functions and classes that other modules compile.
    """
    finder = _Finder(tree, bindings, known_helpers or {})
    found = finder.walk()
    for name in compiled_elsewhere:
        if name in finder.classes:
            found.classes.add(name)
        elif name in finder.functions:
            found.functions.add(name)
    return found


def model_classes(tree: ast.Module, bindings: ModuleBindings) -> set[str]:
    """Classes that look like ``nn.Module`` code: an ``nn.Module`` base (directly or
    through the module's own classes), or a ``forward`` method."""
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    models = {
        name
        for name, node in classes.items()
        if any(isinstance(item, _FUNCTION_NODES) and item.name == "forward" for item in node.body)
        or any(bindings.qualified_name(base) in MODULE_BASE_NAMES for base in node.bases)
    }
    changed = True
    while changed:
        changed = False
        for name, node in classes.items():
            if name not in models and any(isinstance(b, ast.Name) and b.id in models for b in node.bases):
                models.add(name)
                changed = True
    return models


def method_decorators(tree: ast.Module) -> set[str]:
    """Module functions that wrap a method: ``def update(forward): ... def wrapper(self,
    ...): ... forward(self, ...) ... return wrapper`` (transformers' ``dynamic_rope_update``).

    The wrapper runs on every call of the method it decorates, and the methods such a
    decorator is put on out of sight are usually model code, as ``model_classes`` are.
    The wrapper takes ``self`` first, calls the decorated function and is returned."""
    found = set()
    for function in tree.body:
        if not isinstance(function, _FUNCTION_NODES) or not function.args.args:
            continue
        decorated = function.args.args[0].arg
        returned = {
            node.value.id
            for node in ast.walk(function)
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Name)
        }
        for inner in function.body:
            if (
                isinstance(inner, _FUNCTION_NODES)
                and inner.name in returned
                and inner.args.args
                and inner.args.args[0].arg == "self"
                and any(
                    isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == decorated
                    for call in ast.walk(inner)
                )
            ):
                found.add(function.name)
    return found


# Run when an object is built, copied or loaded, not when a compiled model is called:
# a class in scope as a model (or a compiled target) leaves them out unless code in
# scope builds the class by name or names the method.
CONSTRUCTION_METHODS = frozenset({
    "__init__", "__new__", "__init_subclass__", "__post_init__", "__set_name__", "__class_getitem__",
    "__getstate__", "__setstate__", "__reduce__", "__reduce_ex__", "__copy__", "__deepcopy__",
})


def runs_when_built(method: ast.AST) -> bool:
    """A constructor-like method or a classmethod (``from_pretrained``, ``from_config``):
    code that builds or loads a model rather than code its call runs."""
    if method.name in CONSTRUCTION_METHODS:
        return True
    return any(
        isinstance(decorator, ast.Name) and decorator.id == "classmethod" for decorator in method.decorator_list
    )


# What calling a model runs first; its other methods run when this code names them.
CALL_METHODS = frozenset({"forward", "__call__"})


def _call_methods(class_node: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> set[str]:
    """``forward`` / ``__call__`` when the class or one of its bases in this module
    defines one: then calling an instance starts there, and a method nothing reached
    names (``parallelize``, ``resize_position_embeddings``: called by users) is not in
    scope. Empty for other classes, whose methods are all in."""
    seen, pending, found = set(), [class_node], set()
    while pending:
        node = pending.pop()
        if node.name in seen:
            continue
        seen.add(node.name)
        found |= {item.name for item in node.body if isinstance(item, _FUNCTION_NODES) and item.name in CALL_METHODS}
        pending += [classes[base.id] for base in node.bases if isinstance(base, ast.Name) and base.id in classes]
    return found


def reachable_functions(tree: ast.Module, entry: EntryPoints) -> set[ast.AST]:
    """Function nodes the entry points can reach through the module's own names.

    A class in scope brings its methods, except those that run when it is built
    (``runs_when_built``), unless reached code builds the class by name (then its
    constructor runs under compile too: ``C(...)``) or names the method (``self.method``,
    ``cls.from_config``). A class that is called (``forward``, ``__call__``: see
    ``_call_methods``) brings those, and the methods reached code names."""
    all_functions = [n for n in ast.walk(tree) if isinstance(n, _FUNCTION_NODES)]
    if entry.everything:
        return set(all_functions)
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    methods_by_name: dict[str, list[ast.AST]] = {}
    for class_node in classes.values():
        for item in class_node.body:
            if isinstance(item, _FUNCTION_NODES):
                methods_by_name.setdefault(item.name, []).append(item)
    module_functions = {n.name: n for n in tree.body if isinstance(n, _FUNCTION_NODES)}
    reached: set[ast.AST] = set()
    pending: list = [module_functions[name] for name in entry.functions if name in module_functions]
    pending += [n for n in all_functions if n.name in entry.functions and n not in pending]
    for class_name in entry.classes:
        if class_name in classes:
            pending.append((classes[class_name], False))
    seen_classes: set[tuple[str, bool]] = set()
    while pending:
        node = pending.pop()
        if isinstance(node, tuple):
            class_node, built = node
            if (class_node.name, built) in seen_classes:
                continue
            seen_classes.add((class_node.name, built))
            for base in class_node.bases:
                if isinstance(base, ast.Name) and base.id in classes:
                    pending.append((classes[base.id], built))
            calls_first = _call_methods(class_node, classes)
            for item in class_node.body:
                if isinstance(item, _FUNCTION_NODES) and built and runs_when_built(item):
                    pending.append(item)
                elif isinstance(item, _FUNCTION_NODES) and not runs_when_built(item):
                    if not calls_first or item.name in calls_first:
                        pending.append(item)
                elif isinstance(item, _FUNCTION_NODES):
                    # What a constructor builds (``self.block = Block()``) is what the
                    # object's calls use: those classes, but not the constructor.
                    pending += [
                        (classes[name.id], False) for name in ast.walk(item)
                        if isinstance(name, ast.Name) and name.id in classes
                    ]
                elif isinstance(item, ast.ClassDef):
                    pending.append((item, built))
            continue
        if node in reached:
            continue
        reached.add(node)
        called = {id(call.func) for call in ast.walk(node) if isinstance(call, ast.Call)}
        for inner in ast.walk(node):
            if never_compiled(inner):
                continue  # an arm a compile-state test rules out: what it names is not reached
            if inner is not node and isinstance(inner, _FUNCTION_NODES):
                pending.append(inner)
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
                if inner.id in module_functions:
                    pending.append(module_functions[inner.id])
                if inner.id in classes:  # built here only when called (not ``isinstance(m, C)``)
                    pending.append((classes[inner.id], id(inner) in called))
            elif isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Load):
                pending += methods_by_name.get(inner.attr, ())
    return reached


class ProjectEntryPoints:
    """Entry points followed across the modules of a project (``graphmend check PATH``).

    Feed it every module that may compile something (``add_module``): the compiling
    helpers each defines, and the other modules' functions and classes each compiles,
    are collected; a second look (``add_calls_to_helpers``) finds the calls to helpers
    defined in another module. ``compiled_in(module_name)`` then names what other
    modules compile in that one. A target re-exported through a package's
    ``__init__`` is followed only when the package itself defines it.
    """

    def __init__(self) -> None:
        self.helpers: dict[str, int] = {}  # qualified name -> compiled parameter's position
        self.targets: set[str] = set()  # qualified names compiled from some module
        self.entry_point_count = 0

    def add_module(self, module_name: str | None, tree: ast.Module, bindings: ModuleBindings) -> None:
        found = find_entry_points(tree, bindings)
        self.entry_point_count += len(found.lines)
        self.targets |= found.imported
        if module_name:
            for name, position in found.helpers.items():
                self.helpers[f"{module_name}.{name}"] = position

    def add_calls_to_helpers(self, tree: ast.Module, bindings: ModuleBindings) -> None:
        """Targets of calls to helpers found in other modules (after every ``add_module``)."""
        if not self.helpers:
            return
        found = find_entry_points(tree, bindings, self.helpers)
        plain = find_entry_points(tree, bindings)
        self.entry_point_count += len(found.lines) - len(plain.lines)
        self.targets |= found.imported

    def compiled_in(self, module_name: str | None) -> set[str]:
        if not module_name:
            return set()
        prefix = module_name + "."
        return {
            target[len(prefix) :]
            for target in self.targets
            if target.startswith(prefix) and "." not in target[len(prefix) :]
        }
