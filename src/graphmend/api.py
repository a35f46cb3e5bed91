"""The in-memory API: mend a function, a class, or an ``nn.Module`` instance.

The object's whole module is analysed (imports, loggers, purity of its
functions), every function in it is offered to the rules, and only the code
objects of the requested functions are replaced. Rewritten functions keep their
globals, defaults, closure-free signature and original line numbers.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import types
import warnings

import torch

import graphmend.runtime as runtime
from graphmend.rewrite.pipeline import ALL_RULES, mend_module_source
from graphmend.rewrite.templates import RUNTIME_NAME


class MendWarning(UserWarning):
    """A function could not be mended and is used as it was."""


@functools.lru_cache(maxsize=64)
def _mended_module_tree(filename: str, module_name: str, source: str, rules: tuple[str, ...]):
    result = mend_module_source(source, filename=filename, module_name=module_name, rules=rules, scope="all")
    return result


def _find_definition(tree: ast.AST, name: str, first_line: int):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if start == first_line or node.lineno == first_line:
                return node
    return None


def _mend_function(function: types.FunctionType, rules: tuple[str, ...]) -> types.FunctionType:
    if getattr(function, "__graphmend_mended__", False):
        return function
    code = function.__code__
    if code.co_freevars:
        raise ValueError("closures are not mended (their free variables live in another scope)")
    module = sys.modules.get(function.__module__)
    filename = inspect.getsourcefile(function)
    if module is None or filename is None:
        raise ValueError("its source file is not available")
    source = "".join(inspect.findsource(function)[0])
    result = _mended_module_tree(filename, function.__module__, source, rules)
    if not result.changed:
        return function
    definition = _find_definition(result.tree, function.__name__, code.co_firstlineno)
    if definition is None:
        raise ValueError("its definition was not found in its source file")
    standalone = ast.Module(body=[_without_decorators(definition)], type_ignores=[])
    module_code = compile(standalone, filename, "exec")
    function_code = next(c for c in module_code.co_consts if isinstance(c, types.CodeType))
    if function_code.co_code == code.co_code and function_code.co_consts == code.co_consts:
        return function
    function.__globals__.setdefault(RUNTIME_NAME, runtime)
    mended = types.FunctionType(
        function_code, function.__globals__, function.__name__, function.__defaults__, None
    )
    mended.__kwdefaults__ = function.__kwdefaults__
    mended.__dict__.update(function.__dict__)
    mended.__qualname__ = function.__qualname__
    mended.__doc__ = function.__doc__
    mended.__annotations__ = function.__annotations__
    mended.__module__ = function.__module__
    mended.__graphmend_mended__ = True
    mended.__wrapped_original__ = function
    return mended


def _without_decorators(definition):
    copy_ = ast.FunctionDef(**{f: getattr(definition, f) for f in definition._fields})
    copy_.decorator_list = []
    ast.copy_location(copy_, definition)
    return copy_


def _mend_class(cls: type, rules: tuple[str, ...]) -> type:
    for name, value in list(vars(cls).items()):
        target = value
        wrapper = None
        if isinstance(value, (staticmethod, classmethod)):
            wrapper, target = type(value), value.__func__
        if not isinstance(target, types.FunctionType):
            continue
        try:
            mended = _mend_function(target, rules)
        except (OSError, TypeError, ValueError, SyntaxError) as error:
            warnings.warn(f"graphmend: {cls.__qualname__}.{name} left as it was: {error}", MendWarning, 3)
            continue
        if mended is not target:
            setattr(cls, name, wrapper(mended) if wrapper else mended)
    return cls


def mend(obj, *, rules=ALL_RULES):
    """Mend a function (returns the mended function), a class (mended in place), or an
    ``nn.Module`` instance (the classes of it and its submodules, in place)."""
    rules = tuple(rules)
    if isinstance(obj, torch.nn.Module):
        seen: set[type] = set()
        for submodule in obj.modules():
            for cls in type(submodule).__mro__:
                if cls in seen or cls.__module__.startswith(("torch.", "graphmend.")) or cls is object:
                    continue
                seen.add(cls)
                _mend_class(cls, rules)
        return obj
    if isinstance(obj, type):
        return _mend_class(obj, rules)
    if isinstance(obj, types.MethodType):
        return types.MethodType(_mend_function(obj.__func__, rules), obj.__self__)
    if isinstance(obj, types.FunctionType):
        return _mend_function(obj, rules)
    raise TypeError(f"graphmend.mend takes a function, a class or an nn.Module, not {type(obj).__name__}")
