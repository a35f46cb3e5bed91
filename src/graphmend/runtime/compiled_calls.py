"""The boundary of a compiled region: where exceptions of failed lowered guards are mapped.

Every spelling of ``torch.compile`` (decorator with or without arguments, a call on a
function or a module, ``nn.Module.compile``) goes through ``torch.compile``, so
wrapping what it returns is enough to see each compiled call end. Deferred output
needs no boundary: it happens inside the graph at the point of its call
(``graphmend.runtime.deferred``), so code compiled any other way prints exactly too.
"""

from __future__ import annotations

import functools

import torch

from graphmend.runtime.traps import raise_original_for_trap_failure

_WRAPPED_MARK = "__graphmend_wrapped__"
_original_compile = None


def run_compiled(compiled, *args, **kwargs):
    """Call a compiled callable; restore the user's exception for a failed lowered guard."""
    if torch.compiler.is_compiling():
        return compiled(*args, **kwargs)
    try:
        return compiled(*args, **kwargs)
    except RuntimeError as error:
        raise_original_for_trap_failure(error)
        raise


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
    if getattr(compiled, "_torchdynamo_wrapper_id", None) == id(compiled):
        # ``functools.wraps`` copied TorchDynamo's own attributes, among them the id
        # that lets ``innermost_fn`` follow ``_torchdynamo_orig_callable`` only from the
        # wrapper that set it. With the id of this wrapper instead, compiling, disabling
        # or running what ``torch.compile`` returned reaches the user's function, as it
        # does without graphmend (compiling it again otherwise failed: "compile_wrapper
        # already has a get_compiler_config attribute").
        call_compiled._torchdynamo_wrapper_id = id(call_compiled)
    return call_compiled


def _compile_with_boundary(model=None, **options):
    if model is None:
        decorator = _original_compile(**options)

        def decorate(fn):
            return wrap_compiled(decorator(fn))

        return decorate
    return wrap_compiled(_original_compile(model, **options))


def install_compile_wrappers() -> None:
    """Make ``torch.compile`` mark the boundary of every compiled region (with the
    other patches: ``graphmend.torch_adapter``). Idempotent."""
    from graphmend import torch_adapter

    torch_adapter.activate()
