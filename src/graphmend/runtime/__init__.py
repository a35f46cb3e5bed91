"""What rewritten code calls at run time.

Rewritten modules reach this module through one reserved name, ``__graphmend__``
(see ``graphmend.rewrite.templates.RUNTIME_NAME``), so user code can never collide
with it. Everything a rewritten statement calls while TorchDynamo traces it must be
traceable without a graph break. Output (printing, logging, warning) happens inside
the graph at the point of the call (``deferred``); the user's exception for a failed
lowered guard is raised here when the compiled region raises (``traps``).

What the runtime keeps for the process is in ``store``; ``reset()`` forgets what the
process learned (refusals and their reasons, frames run eagerly), for tests and tools
that compile many programs from one file name (``graphmend.runtime.store``).
"""

from __future__ import annotations

import builtins
import sys
import types

import torch

from graphmend import torch_adapter
from graphmend.rewrite.templates import RUNTIME_NAME
from graphmend.runtime import (
    captured_values,  # noqa: F401 - ``__graphmend__.captured_values`` in rewritten code
    checks,  # noqa: F401 - ``__graphmend__.checks`` in rewritten code
    conversion_failures,  # noqa: F401 - a hook of graphmend.torch_adapter
    drawn_ranges,  # noqa: F401 - ``__graphmend__.drawn_ranges`` in rewritten code
    dynamic_shapes,  # noqa: F401 - ``__graphmend__.dynamic_shapes`` in rewritten code
    fixed_values,  # noqa: F401 - ``__graphmend__.fixed_values`` in rewritten code
    resumable_states,  # noqa: F401 - a hook of graphmend.torch_adapter
    written_back,  # noqa: F401 - ``__graphmend__.written_back`` in rewritten code
)
from graphmend.runtime.attribute_access import is_the_method, reads_plainly, writes_plainly
from graphmend.runtime.compiled_calls import install_boundary, install_compile_wrappers
from graphmend.runtime.deferred import (
    defer_log,
    defer_print,
    defer_warning,
    flush_pending_effects,
    log_in_graph,
    pending_effect_count,
    print_in_graph,
    warn_in_graph,
)

# What ``graphmend fix`` writes in place of an output call's callee. ``print`` here is
# that wrapper: this module itself never prints.
from graphmend.runtime.fixed_calls import log, print, warn  # noqa: A004
from graphmend.runtime.performed_choice import perform_choice
from graphmend.runtime.selection import moves_nothing, operands_combine, select
from graphmend.runtime.store import reset
from graphmend.runtime.traps import (
    TRAP_MARKER,
    TrapFailure,
    all_of,
    any_of,
    assert_guard,
    equal_as_tensor,
    guard_holds,
    raise_original_for_trap_failure,
    trap_message,
)


def _never_compiling() -> bool:
    return False


# TorchDynamo treats this exact function object as a constant ``True`` while
# tracing, so branching on it costs no graph break and keeps the eager path exact (and
# skips its frame when called from a frame it runs eagerly, where it answers False).
# Asked by rewritten code, the question does not keep a frame with no op from being
# skipped (``resumable_states._runtime_questions_mark_nothing``).
is_compiling = torch.compiler.is_compiling if torch_adapter.unsupported_torch() is None else _never_compiling

__all__ = [
    "TRAP_MARKER",
    "TrapFailure",
    "all_of",
    "any_of",
    "assert_guard",
    "defer_log",
    "defer_print",
    "defer_warning",
    "equal_as_tensor",
    "flush_pending_effects",
    "guard_holds",
    "install_boundary",
    "install_compile_wrappers",
    "is_compiling",
    "is_the_method",
    "log",
    "log_in_graph",
    "moves_nothing",
    "operands_combine",
    "pending_effect_count",
    "perform_choice",
    "print",
    "print_in_graph",
    "raise_original_for_trap_failure",
    "reads_plainly",
    "register_pure_functions",
    "reset",
    "select",
    "torch",
    "trap_message",
    "warn",
    "warn_in_graph",
    "writes_plainly",
]


def register_pure_functions(module_name: str, keywords_by_function: dict) -> None:
    """Does nothing. Files an earlier ``graphmend fix`` wrote end with a call to it;
    no rule reads the registrations any more."""


# Mended code imports this module: from here on it needs TorchDynamo patched.
torch_adapter.activate()


class _Runtime(types.ModuleType):
    """This module's class once imported: a module that is also callable.

    Mended code names the runtime ``__graphmend__``. The mended module binds that
    global, but a function rebuilt from a mended code object with other globals
    (``types.FunctionType(code, globals)``, as serialisers and some decorators do)
    has no such global; Python then looks the name up in the builtins, where
    ``_install_in_builtins`` puts this module. TorchDynamo reads a name found in the
    builtins only if it is callable (through its copy of the builtins dict, as for
    ``len``); anything else fails an internal assertion. Calling it is an error, as
    calling any module is."""

    def __call__(self, *args, **kwargs):
        raise TypeError(f"'{type(self).__base__.__name__}' object is not callable")


def _install_in_builtins() -> None:
    module = sys.modules[__name__]
    module.__class__ = _Runtime
    if getattr(builtins, RUNTIME_NAME, module) is module:
        setattr(builtins, RUNTIME_NAME, module)


_install_in_builtins()
