"""Whether calling an expert module on no rows does nothing a program could see
(Capture's loop over every expert, ``rules/capture/loops.py``).

The loop over every expert calls an expert no token chose, on no rows, where the
original did not call it at all. That is exact only when the whole call is known: the
call path of ``torch.nn.Module`` as torch ships it, a ``forward`` that only computes,
every module it reaches known the same way, no hook anywhere on the way, and no tensor
whose ``__torch_function__`` runs Python. A counter bumped by a method the ``forward``
calls, a ``forward`` replaced on the instance (``lin.forward = ...``), a plain function
stored where a child module was expected: each would run for every expert, and a load
count ``[1, 0, 0]`` would read ``[1, 1, 1]``.

Known means one of two things, checked on the module objects themselves (not only on
their classes: an attribute set on the instance shadows the class's):
- an allow-listed class (``torch.nn.Linear``, elementwise activations of ``torch.nn``
  and of ``transformers.activations``) with the ``forward`` its library defines, and no
  instance state beyond plain numbers, strings and flags (and, for the two
  transformers classes that keep one, the activation function they chose);
- any other class whose ``forward(self, x)`` binds local names from its input, from
  arithmetic and from calls ``self.name(...)`` of its own child modules, each of them
  known in turn.
Anything else declines: proving arbitrary Python free of effects is not attempted.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import textwrap

import torch

from graphmend.runtime.store import store
from graphmend.torch_adapter import ops

_Module = torch.nn.Module
_TORCH_DIRECTORY = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep

# What every module call goes through, as torch defines it: ``__call__`` (which is
# ``_wrapped_call_impl``), ``_call_impl``, and ``__getattr__`` for child modules.
_CALL_PATH = ("__call__", "_wrapped_call_impl", "_call_impl", "__getattr__")
_MODULE_CALL_PATH = {name: _Module.__dict__[name] for name in _CALL_PATH}
# An attribute here on an instance changes its call (``module.compile()`` sets the last).
_INSTANCE_OVERRIDES = frozenset(_CALL_PATH) | {"forward", "_slow_forward", "_compiled_call_impl"}
_MODULE_STATE = frozenset(_Module().__dict__)
_PLAIN_VALUES = (bool, int, float, str, type(None))

_TORCH_ACTIVATIONS = frozenset(
    {
        torch.nn.ReLU, torch.nn.ReLU6, torch.nn.GELU, torch.nn.SiLU, torch.nn.Tanh, torch.nn.Sigmoid,
        torch.nn.Mish, torch.nn.Hardswish, torch.nn.Hardsigmoid, torch.nn.LeakyReLU, torch.nn.ELU,
        torch.nn.SELU, torch.nn.CELU, torch.nn.Softplus, torch.nn.Tanhshrink, torch.nn.Identity,
    }
)
_TORCH_KNOWN = _TORCH_ACTIVATIONS | {torch.nn.Linear}
# Their ``forward`` as imported with graphmend; a class-level replacement made later
# is not torch's (one made earlier fails the origin check of ``_defined_in``).
_TORCH_FORWARDS = {kind: inspect.getattr_static(kind, "forward") for kind in _TORCH_KNOWN}

# transformers' activation classes (``ACT2FN``), each an elementwise function of its input.
_TRANSFORMERS_ACTIVATIONS_MODULE = "transformers.activations"
_TRANSFORMERS_ACTIVATIONS = frozenset(
    {
        "PytorchGELUTanh", "NewGELUActivation", "GELUActivation", "FastGELUActivation", "QuickGELUActivation",
        "ClippedGELUActivation", "AccurateGELUActivation", "MishActivation", "LinearActivation",
        "LaplaceActivation", "ReLUSquaredActivation",
    }
)

_ABSENT = object()


def global_hooks() -> str | None:
    """A hook registered for every module (``torch.nn.modules.module.register_module_*``)."""
    module = torch.nn.modules.module
    for name in (
        "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
        "_global_backward_pre_hooks", "_global_forward_hooks_always_called",
    ):
        if getattr(module, name, None):
            return f"a global module hook is registered (`{name}`)"
    return None


def why_call_not_known(module: object) -> str | None:
    """Why calling ``module`` on no rows may do something a program could see (a hook,
    code that is not known to be free of effects), or None when it is known not to."""
    return _why_not_known(module, set())


def _why_not_known(module: object, seen: set[int]) -> str | None:
    if not isinstance(module, _Module):
        return f"`{type(module).__name__}` is not a module"
    if id(module) in seen:
        return None
    seen.add(id(module))
    kind = type(module)
    name = kind.__name__
    for hooks in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
        if getattr(module, hooks, None):
            return f"`{name}` has a hook (`{hooks}`)"
    for attribute, function in _MODULE_CALL_PATH.items():
        if inspect.getattr_static(kind, attribute, None) is not function:
            return f"`{name}` changes how a module is called (`{attribute}`)"
    if inspect.getattr_static(kind, "__getattribute__", None) is not object.__getattribute__:
        return f"`{name}` changes attribute lookup (`__getattribute__`)"
    shadowing = sorted(_INSTANCE_OVERRIDES & set(vars(module)))
    if shadowing:
        return f"`{name}` instance sets `{shadowing[0]}`, which replaces its class's"
    for tensor_name, tensor in [*module._parameters.items(), *module._buffers.items()]:
        if tensor is not None and type(tensor) not in (torch.Tensor, torch.nn.Parameter):
            return f"`{name}.{tensor_name}` is a `{type(tensor).__name__}`, whose operations may run Python"
    if kind in _TORCH_KNOWN or _is_transformers_activation(kind):
        return _why_not_known_library_module(module)
    reason, called = _analyse_forward(kind)
    if reason is not None:
        return reason
    for child_name in sorted(called):
        if child_name in vars(module) or inspect.getattr_static(kind, child_name, _ABSENT) is not _ABSENT:
            return f"`{name}.{child_name}` is not a child module (set on the instance or the class)"
        child = module._modules.get(child_name)
        if child is None:
            return f"`{name}.forward` calls `self.{child_name}`, which is not a child module"
        reason = _why_not_known(child, seen)
        if reason is not None:
            return f"`{child_name}`: {reason}"
    return None


def _is_transformers_activation(kind: type) -> bool:
    return kind.__module__ == _TRANSFORMERS_ACTIVATIONS_MODULE and kind.__name__ in _TRANSFORMERS_ACTIVATIONS and (
        getattr(sys.modules.get(_TRANSFORMERS_ACTIVATIONS_MODULE), kind.__name__, None) is kind
    )


def _defined_in(function: object, module_name: str, qualified_name: str, directory: str | None = None) -> bool:
    """``function`` is the plain function ``module_name`` defines as ``qualified_name``
    (in a file under ``directory``, or the module's own file), not a wrapper."""
    if not inspect.isfunction(function) or hasattr(function, "__wrapped__"):
        return False
    if function.__module__ != module_name or function.__qualname__ != qualified_name:
        return False
    filename = os.path.abspath(function.__code__.co_filename)
    if directory is not None:
        return filename.startswith(directory)
    defining = sys.modules.get(module_name)
    return defining is not None and filename == os.path.abspath(getattr(defining, "__file__", "") or "")


def _why_not_known_library_module(module: _Module) -> str | None:
    kind = type(module)
    name = kind.__name__
    forward = inspect.getattr_static(kind, "forward", None)
    if kind in _TORCH_KNOWN:
        expected = _TORCH_FORWARDS[kind]
        known = forward is expected and _defined_in(
            forward, expected.__module__, expected.__qualname__, _TORCH_DIRECTORY
        )
    else:
        known = _defined_in(forward, _TRANSFORMERS_ACTIVATIONS_MODULE, f"{name}.forward")
    if not known:
        return f"`{name}.forward` is not the one its library defines"
    if module._modules:
        return f"`{name}` has child modules"
    for attribute, value in vars(module).items():
        if attribute in _MODULE_STATE or isinstance(value, _PLAIN_VALUES):
            continue
        if attribute == "act" and _is_chosen_activation(module, value):
            continue
        return f"`{name}` instance holds `{attribute}`, a `{type(value).__name__}`"
    return None


def _is_chosen_activation(module: _Module, value: object) -> bool:
    """``GELUActivation``'s and ``MishActivation``'s ``act``: the function their
    ``__init__`` picks (torch's, or the class's own ``_gelu_python``)."""
    name = type(module).__name__
    if name == "GELUActivation":
        if value is ops.aten_gelu():
            return True
        own = inspect.getattr_static(type(module), "_gelu_python", None)
        return (
            inspect.ismethod(value) and value.__self__ is module and value.__func__ is own
            and _defined_in(own, _TRANSFORMERS_ACTIVATIONS_MODULE, "GELUActivation._gelu_python")
        )
    if name == "MishActivation":
        return _defined_in(value, "torch.nn.functional", "mish", _TORCH_DIRECTORY)
    return False


def _analyse_forward(kind: type) -> tuple[str | None, frozenset[str]]:
    """(why not, the names of ``self.name(...)`` it calls) for ``kind.forward``."""
    forward = inspect.getattr_static(kind, "forward", None)
    key = (kind, forward)
    if key not in store.forward_analyses:
        store.forward_analyses[key] = _analyse_forward_source(kind, forward)
    return store.forward_analyses[key]


def _analyse_forward_source(kind: type, forward: object) -> tuple[str | None, frozenset[str]]:
    """A ``forward(self, x)`` whose statements bind names and return, built from its
    input, calls ``self.name(...)`` (of child modules, checked by the caller) and
    arithmetic."""
    name = kind.__name__
    none: frozenset[str] = frozenset()
    if forward is None or forward is _Module.__dict__["forward"]:
        return f"`{name}` has no forward", none
    if not inspect.isfunction(forward) or hasattr(forward, "__wrapped__"):
        return f"`{name}.forward` is not a plain function (a wrapper, a static or class method)", none
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(forward)))
    except (OSError, TypeError, SyntaxError):
        return f"the source of `{name}.forward` is not available", none
    function = tree.body[0] if tree.body else None
    if not isinstance(function, ast.FunctionDef) or function.decorator_list:
        return f"`{name}.forward` is decorated", none
    arguments = function.args
    if (len(arguments.args) != 2 or arguments.vararg or arguments.kwarg or arguments.kwonlyargs
            or arguments.defaults or arguments.posonlyargs):
        return f"`{name}.forward` takes other than one input", none
    self_name = arguments.args[0].arg
    bound = {arguments.args[1].arg}
    called: set[str] = set()

    def computes(node) -> bool:
        if isinstance(node, ast.Name):
            return node.id in bound
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            return computes(node.left) and computes(node.right)
        if isinstance(node, ast.Call):
            callee = node.func
            if (isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name)
                    and callee.value.id == self_name and len(node.args) == 1 and not node.keywords
                    and computes(node.args[0])):
                called.add(callee.attr)
                return True
        return False

    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    for statement in body:
        if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id != self_name
                and computes(statement.value)):
            bound.add(statement.targets[0].id)
        elif isinstance(statement, ast.Return) and statement.value is not None and computes(statement.value):
            return None, frozenset(called)
        else:
            return f"`{name}.forward` does more than call its layers on its input", none
    return f"`{name}.forward` returns nothing", none
