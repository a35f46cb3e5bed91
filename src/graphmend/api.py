"""The in-memory API: mend a function, a class, or an ``nn.Module`` instance.

The object's whole module is analysed (imports, loggers, purity of its
functions), every function in it is offered to the rules, and only the code
objects of the requested functions are replaced. Rewritten functions keep their
globals, defaults, closure-free signature and original line numbers.

``mend`` never raises because of graphmend itself: a function it cannot mend (no
source on disk, a closure, a wrapper that hides what it wraps) is returned as it
was, with one ``MendWarning`` saying why. A lambda is returned as it is: its body
is one expression, and every rule rewrites statements. A ``functools.wraps``
wrapper gets a copy whose closure calls the mended wrapped function.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import inspect
import sys
import types
import warnings

import torch

import graphmend.runtime  # noqa: F401 - puts the runtime in the builtins, where mended code finds it
from graphmend.dynamo_records import GraphBreakRecord, Recompilation
from graphmend.rewrite.pipeline import ALL_RULES, mend_module_source


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
    if function.__code__.co_name == "<lambda>":
        return function  # an expression body: nothing any rule rewrites
    if isinstance(getattr(function, "__wrapped__", None), types.FunctionType):
        return _mend_wrapper(function, rules)
    return _mend_plain_function(function, rules)


def _mend_wrapper(wrapper: types.FunctionType, rules: tuple[str, ...]) -> types.FunctionType:
    """A ``functools.wraps`` wrapper: mend what it wraps, and give back a copy of the
    wrapper whose closure cell holds the mended function instead of the original.

    The wrapper itself is left as it is (its free variables live in the decorator's
    scope); the original wrapper and wrapped function are not changed.
    """
    wrapped = wrapper.__wrapped__
    mended = _mend_function(wrapped, rules)
    if mended is wrapped:
        return wrapper
    cells = wrapper.__closure__ or ()
    if not any(_cell_holds(cell, wrapped) for cell in cells):
        raise ValueError(
            "it wraps a function it does not call through a closure variable, "
            "so the mended function cannot be put in its place"
        )
    closure = tuple(types.CellType(mended) if _cell_holds(cell, wrapped) else cell for cell in cells)
    copy_ = types.FunctionType(
        wrapper.__code__, wrapper.__globals__, wrapper.__name__, wrapper.__defaults__, closure
    )
    _copy_function_attributes(wrapper, copy_)
    copy_.__wrapped__ = mended
    copy_.__graphmend_mended__ = True
    copy_.__wrapped_original__ = wrapper
    return copy_


def _cell_holds(cell: types.CellType, value: object) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False


def _copy_function_attributes(source: types.FunctionType, target: types.FunctionType) -> None:
    target.__kwdefaults__ = source.__kwdefaults__
    target.__dict__.update(source.__dict__)
    target.__qualname__ = source.__qualname__
    target.__doc__ = source.__doc__
    target.__annotations__ = source.__annotations__
    target.__module__ = source.__module__


def _mend_plain_function(function: types.FunctionType, rules: tuple[str, ...]) -> types.FunctionType:
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
    mended = types.FunctionType(
        function_code, function.__globals__, function.__name__, function.__defaults__, None
    )
    _copy_function_attributes(function, mended)
    mended.__graphmend_mended__ = True
    mended.__wrapped_original__ = function
    return mended


def _mend_or_warn(
    function: types.FunctionType, rules: tuple[str, ...], shown_name: str, stacklevel: int
) -> types.FunctionType:
    """``_mend_function``, or ``function`` itself and one warning when it cannot be mended."""
    try:
        return _mend_function(function, rules)
    except Exception as error:  # noqa: BLE001 - mend must never break the caller's program
        reason = str(error) or type(error).__name__
        if isinstance(error, OSError):
            reason = f"its source is not available ({reason})"
        warnings.warn(f"graphmend: {shown_name} left as it was: {reason}", MendWarning, stacklevel)
        return function


def _without_decorators(definition):
    copy_ = ast.FunctionDef(**{f: getattr(definition, f) for f in definition._fields})
    copy_.decorator_list = []
    ast.copy_location(copy_, definition)
    return copy_


# A MendWarning points at the user's call of ``graphmend.mend``: from _mend_or_warn,
# past mend() and the package-level ``graphmend.mend`` that forwards to it.
_USER_STACKLEVEL = 4


def _mend_class(cls: type, rules: tuple[str, ...], stacklevel: int) -> type:
    for name, value in list(vars(cls).items()):
        target = value
        wrapper = None
        if isinstance(value, (staticmethod, classmethod)):
            wrapper, target = type(value), value.__func__
        if not isinstance(target, types.FunctionType):
            continue
        mended = _mend_or_warn(target, rules, f"{cls.__qualname__}.{name}", stacklevel + 1)
        if mended is not target:
            setattr(cls, name, wrapper(mended) if wrapper else mended)
    return cls


def mend(obj, *, rules=ALL_RULES):
    """Mend a function (returns the mended function), a class (mended in place), or an
    ``nn.Module`` instance (the classes of it and its submodules, in place).

    A function that cannot be mended is returned (or left) as it was, with one
    ``MendWarning`` naming it and the reason. A ``functools.partial`` is mended
    through (an equal partial of the mended function); a builtin is returned as it
    is. Only an unsupported kind of object is an error (``TypeError``). Under a torch
    graphmend does not support, ``obj`` is returned unmended, with one warning."""
    rules = tuple(rules)
    from graphmend import torch_adapter

    if torch_adapter.warn_if_unsupported(stacklevel=3):
        return obj
    torch_adapter.activate()
    if isinstance(obj, torch.nn.Module):
        seen: set[type] = set()
        for submodule in obj.modules():
            for cls in type(submodule).__mro__:
                if cls in seen or cls.__module__.startswith(("torch.", "graphmend.")) or cls is object:
                    continue
                seen.add(cls)
                _mend_class(cls, rules, _USER_STACKLEVEL)
        return obj
    if isinstance(obj, type):
        return _mend_class(obj, rules, _USER_STACKLEVEL + 1)
    if isinstance(obj, types.MethodType):
        function = obj.__func__
        return types.MethodType(_mend_or_warn(function, rules, function.__qualname__, _USER_STACKLEVEL), obj.__self__)
    if isinstance(obj, types.FunctionType):
        return _mend_or_warn(obj, rules, obj.__qualname__, _USER_STACKLEVEL)
    if isinstance(obj, functools.partial):
        # Mended through: an equal partial of the mended function, or the partial
        # itself when what it calls stays as it was.
        try:
            function = mend(obj.func, rules=rules)
        except TypeError:
            return obj  # it calls a kind of object graphmend does not mend
        if function is obj.func:
            return obj
        mended = functools.partial(function, *obj.args, **obj.keywords)
        if getattr(obj, "__dict__", None):
            mended.__dict__.update(obj.__dict__)
        return mended
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodWrapperType,
                        types.WrapperDescriptorType, types.MethodDescriptorType, types.ClassMethodDescriptorType)):
        return obj  # no Python source: nothing any rule rewrites
    raise TypeError(f"graphmend.mend takes a function, a class or an nn.Module, not {type(obj).__name__}")


@dataclasses.dataclass
class ExplainedRun:
    """One compiled call of a function, as TorchDynamo recorded it."""

    result: object  # what the call returned
    graphs: int  # graphs the counting backend was given
    breaks: list[GraphBreakRecord]  # each with its place, Dynamo's reason, hints and reference
    recompilations: list[Recompilation]  # each with Dynamo's guard failures
    frames_skipped: int  # frames Dynamo gave up on and ran eagerly

    @property
    def break_count(self) -> int:
        return max(self.graphs - 1, len(self.breaks), 0)


@dataclasses.dataclass
class ExplainReport:
    """``graphmend.explain(fn)(*args)``: the original and the mended function, each
    compiled fresh and called once on its own copy of the arguments."""

    original: ExplainedRun
    mended: ExplainedRun

    def __str__(self) -> str:
        lines = []
        for name, run in (("original", self.original), ("mended", self.mended)):
            lines.append(f"{name}: {run.graphs} graphs, {run.break_count} breaks")
            for record in run.breaks:
                frame = record.user_frame
                where = f"{frame.file}:{frame.line} in {frame.function}" if frame else "?"
                lines.append(f"  {where}: {record.headline.splitlines()[0]}")
                lines.extend(f"    hint: {hint}" for hint in record.hints)
                if record.reference:
                    lines.append(f"    see: {record.reference}")
            for recompilation in run.recompilations:
                reasons = "; ".join(recompilation.reasons)
                lines.append(f"  recompiled {recompilation.function}: {reasons}")
        return "\n".join(lines)


def explain(function, *, rules=ALL_RULES):
    """``graphmend.explain(fn)(*args, **kwargs)`` -> ``ExplainReport``.

    Compiles ``fn`` as it is, then as ``graphmend.mend`` mends it, one after the other,
    each with a fresh TorchDynamo and a counting backend (``dynamic=False``, graphs run
    as they are), and calls each once. Each call gets its own deep copy of the
    arguments (the arguments themselves when they cannot be copied), so that one call
    cannot change what the other sees. Exceptions from a call propagate.
    """
    if not isinstance(function, (types.FunctionType, types.MethodType)):
        kind = type(function).__name__
        raise TypeError(f"graphmend.explain takes a function or a method, not {kind}")

    def run(*args, **kwargs) -> ExplainReport:
        original = _explained_run(function, args, kwargs)
        mended = _explained_run(mend(function, rules=rules), args, kwargs)
        return ExplainReport(original, mended)

    return run


def _explained_run(function, args: tuple, kwargs: dict) -> ExplainedRun:
    from graphmend.counting import CountingBackend
    from graphmend.dynamo_records import recording
    from graphmend.torch_adapter import graph_break_counters, reset_dynamo

    try:
        args, kwargs = copy.deepcopy((args, kwargs))
    except Exception:  # noqa: BLE001 - an argument that cannot be copied is shared
        pass
    reset_dynamo()
    counters = graph_break_counters()
    counters.clear()
    backend = CountingBackend()
    compiled = torch.compile(function, backend=backend, dynamic=False)
    with recording() as records:
        result = compiled(*args, **kwargs)
    return ExplainedRun(
        result=result,
        graphs=backend.graphs,
        breaks=list(records.breaks),
        recompilations=list(records.recompilations),
        frames_skipped=records.frames_skipped,
    )
