"""The boundary of a compiled region: where the exception of a failed lowered guard
leaves it with the user's frames.

Every spelling of ``torch.compile`` (decorator with or without arguments, a call on a
function or a module, ``nn.Module.compile``) goes through ``torch.compile``, so a hook
on what it returns sees each compiled call end. The hook is one of TorchDynamo's own
enter/exit hooks of the compile context, run in the ``finally`` of the function
``torch.compile`` returned: what ``torch.compile`` returns is torch's own object, and no
frame of graphmend's is on the path of a call or of an exception out of it (a Python
wrapper added its frames to every traceback). Deferred output needs no boundary: it
happens inside the graph at the point of its call (``graphmend.runtime.deferred``), so
code compiled any other way prints exactly too.
"""

from __future__ import annotations

import sys

from graphmend.runtime import restored_frames
from graphmend.runtime.store import store
from graphmend.runtime.traps import raise_original_for_trap_failure


def _leave_compiled_call() -> None:
    """Run by torch when a compiled call ends (its compile wrapper's ``finally``)."""
    error = sys.exc_info()[1]
    if error is None:
        return
    entry = error.__traceback__
    # An exception being handled around the call is not one raised through it: the
    # one raised through it has the compile wrapper's frame, which calls this, first.
    if entry is None or entry.tb_frame is not sys._getframe(1):
        return
    if isinstance(error, RuntimeError):
        # A failed assertion of a graph compiled before guards failed inside the graph.
        raise_original_for_trap_failure(error)
    restored_frames.keep_only_user_frames(error)


def _enter_compiled_call():
    return _leave_compiled_call


def _context_of(compiled):
    """The TorchDynamo context whose hooks run around each call of ``compiled``, and
    the code of the function that runs them; (None, None) when there is none."""
    import torch

    if isinstance(compiled, torch.nn.Module):
        context = getattr(compiled, "dynamo_ctx", None)
        # A lazy module's ``forward`` checks it first, then calls ``_forward``.
        forward = getattr(compiled, "_forward", None) or getattr(compiled, "forward", None)
        return context, getattr(forward, "__code__", None)
    code = getattr(compiled, "__code__", None)
    closure = getattr(compiled, "__closure__", None)
    if code is None or not closure or "self" not in code.co_freevars:
        return None, None
    try:
        context = closure[code.co_freevars.index("self")].cell_contents
    except ValueError:  # an empty cell
        return None, None
    return context, code


def install_boundary(compiled):
    """Make the calls of what ``torch.compile`` returned end at the boundary. Returns
    ``compiled`` itself."""
    context, code = _context_of(compiled)
    hooks = getattr(context, "enter_exit_hooks", None)
    if isinstance(hooks, list) and code is not None:
        if _enter_compiled_call not in hooks:
            # Last: a hook that raises skips the hooks after it.
            hooks.append(_enter_compiled_call)
        store.compile_boundary_codes[id(code)] = code
    return compiled


def has_boundary(compiled) -> bool:
    context, _ = _context_of(compiled)
    return _enter_compiled_call in (getattr(context, "enter_exit_hooks", None) or ())


def is_boundary(frame) -> bool:
    """Whether ``frame`` runs a compiled call whose end is the boundary."""
    if store.compile_boundary_codes.get(id(frame.f_code)) is not frame.f_code:
        return False
    try:
        context = frame.f_locals.get("self")
    except Exception:  # noqa: BLE001 - a frame whose locals cannot be read is no boundary
        return False
    return _enter_compiled_call in (getattr(context, "enter_exit_hooks", None) or ())


def original_compile():
    """torch's own ``torch.compile`` while graphmend's boundary replaces it (else None)."""
    from graphmend import torch_adapter

    return torch_adapter.replaced("compile_boundary")


def _compile_with_boundary(original_compile, model=None, **options):
    """``torch.compile`` (``original_compile``), with the boundary installed on what it returns."""
    if model is None:
        decorator = original_compile(**options)

        def decorate(fn):
            return install_boundary(decorator(fn))

        return decorate
    return install_boundary(original_compile(model, **options))


def install_compile_wrappers() -> None:
    """Make ``torch.compile`` mark the boundary of every compiled region (with the
    other patches: ``graphmend.torch_adapter``). Idempotent."""
    from graphmend import torch_adapter

    torch_adapter.activate()
