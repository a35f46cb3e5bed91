"""The boundary of a compiled region: where deferred effects are flushed and traps mapped.

Every spelling of ``torch.compile`` (decorator with or without arguments, a call on a
function or a module, ``nn.Module.compile``) goes through ``torch.compile``, so
wrapping what it returns is enough to see each compiled call end. Nested compiled
calls are inlined by TorchDynamo; when they run eagerly instead, only the outermost
call flushes, so effects are replayed once and in order.
"""

from __future__ import annotations

import functools
import threading

import torch

from graphmend.runtime.deferred import flush_pending_effects
from graphmend.runtime.traps import raise_original_for_trap_failure

_WRAPPED_MARK = "__graphmend_wrapped__"
_state = threading.local()
_original_compile = None


def run_compiled(compiled, *args, **kwargs):
    """Call a compiled callable; flush deferred effects and restore trapped exceptions."""
    if torch.compiler.is_compiling():
        return compiled(*args, **kwargs)
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        result = compiled(*args, **kwargs)
    except RuntimeError as error:
        _state.depth = depth
        if depth == 0:
            flush_pending_effects()
        raise_original_for_trap_failure(error)
        raise
    except BaseException:
        _state.depth = depth
        if depth == 0:
            flush_pending_effects()
        raise
    _state.depth = depth
    if depth == 0:
        flush_pending_effects()
    return result


def wrap_compiled(compiled):
    """Route calls of what ``torch.compile`` returned through ``run_compiled``."""
    if getattr(compiled, _WRAPPED_MARK, False):
        return compiled
    if isinstance(compiled, torch.nn.Module):
        # An OptimizedModule calls ``self.forward``; wrapping it there keeps the
        # module object (its attributes, state_dict, isinstance checks) unchanged.
        inner_forward = compiled.forward

        @functools.wraps(inner_forward)
        def forward(*args, **kwargs):
            return run_compiled(inner_forward, *args, **kwargs)

        setattr(forward, _WRAPPED_MARK, True)
        object.__setattr__(compiled, "forward", forward)
        object.__setattr__(compiled, _WRAPPED_MARK, True)
        return compiled
    if not callable(compiled):
        return compiled

    @functools.wraps(compiled)
    def call_compiled(*args, **kwargs):
        return run_compiled(compiled, *args, **kwargs)

    setattr(call_compiled, _WRAPPED_MARK, True)
    return call_compiled


def _compile_with_boundary(model=None, **options):
    if model is None:
        decorator = _original_compile(**options)

        def decorate(fn):
            return wrap_compiled(decorator(fn))

        return decorate
    return wrap_compiled(_original_compile(model, **options))


def install_compile_wrappers() -> None:
    """Make ``torch.compile`` mark the boundary of every compiled region. Idempotent."""
    global _original_compile
    if getattr(torch.compile, _WRAPPED_MARK, False):
        return
    _original_compile = torch.compile
    functools.update_wrapper(_compile_with_boundary, _original_compile)
    setattr(_compile_with_boundary, _WRAPPED_MARK, True)
    torch.compile = _compile_with_boundary
