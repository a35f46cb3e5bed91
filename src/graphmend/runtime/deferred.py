"""Deferred console, log and warning output: recorded in the graph, replayed after it.

While TorchDynamo traces, appending to ``PENDING_EFFECTS`` is a side effect it
replays after each graph runs, so every compiled call leaves its effects here in
program order, with argument values as they were at the call. ``flush_pending_effects``
replays them once, oldest first, when the outermost compiled call returns or raises,
or just before a rewritten effect runs eagerly (so eager output never overtakes
output that happened before it).
"""

from __future__ import annotations

import logging
import sys
import warnings

import torch

PENDING_EFFECTS: list[tuple] = []

_PRINT = 0
_LOG_RECORD = 1
_LOG_METHOD = 2
_WARNING = 3


def capture(value):
    """Snapshot an argument so later mutation cannot change what is replayed."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if type(value) is list:
        return [capture(item) for item in value]
    if type(value) is tuple:
        return tuple(capture(item) for item in value)
    if type(value) is dict:
        return {key: capture(item) for key, item in value.items()}
    if type(value) is set:
        return set(value)
    return value


def defer_print(args: tuple, kwargs: dict) -> None:
    PENDING_EFFECTS.append(
        (_PRINT, tuple(capture(arg) for arg in args), {k: capture(v) for k, v in kwargs.items()})
    )


def defer_log(
    logger,
    method_name: str,
    level,
    location: tuple,
    args: tuple,
    kwargs: dict,
) -> None:
    """Record a logger call.

    ``level`` is the numeric level for the standard methods (the record is rebuilt
    at ``location`` so it names the original file, line and function), or ``None``
    for methods such as transformers' ``warning_once``, which are replayed by calling
    the method itself so that their own once-only bookkeeping and caller location
    stay what they were.
    """
    captured_args = tuple(capture(arg) for arg in args)
    captured_kwargs = {k: capture(v) for k, v in kwargs.items()}
    if level is None:
        PENDING_EFFECTS.append((_LOG_METHOD, logger, method_name, captured_args, captured_kwargs))
    else:
        PENDING_EFFECTS.append(
            (_LOG_RECORD, logger, level, location, captured_args, captured_kwargs)
        )


def defer_warning(location: tuple, args: tuple, kwargs: dict) -> None:
    PENDING_EFFECTS.append(
        (
            _WARNING,
            location,
            tuple(capture(arg) for arg in args),
            {k: capture(v) for k, v in kwargs.items()},
        )
    )


def pending_effect_count() -> int:
    return len(PENDING_EFFECTS)


def flush_pending_effects() -> None:
    """Replay every pending effect once, in the order it was recorded."""
    while PENDING_EFFECTS:
        effect = PENDING_EFFECTS.pop(0)
        _replay(effect)


def _replay(effect: tuple) -> None:
    kind = effect[0]
    if kind == _PRINT:
        _, args, kwargs = effect
        print(*args, **kwargs)
    elif kind == _LOG_RECORD:
        _, logger, level, location, args, kwargs = effect
        _emit_log_record(logger, level, location, args, kwargs)
    elif kind == _LOG_METHOD:
        _, logger, method_name, args, kwargs = effect
        getattr(logger, method_name)(*args, **kwargs)
    elif kind == _WARNING:
        _, location, args, kwargs = effect
        _emit_warning(location, args, kwargs)


def _source_file(module_name: str, fallback: str) -> str:
    """The file a module's code was compiled from, as ``co_filename`` would name it."""
    module = sys.modules.get(module_name)
    return getattr(module, "__file__", None) or fallback


def _emit_log_record(logger: logging.Logger, level, location: tuple, args: tuple, kwargs: dict):
    """Do what ``Logger._log`` does, with the caller location fixed at the original call."""
    if level == "log":
        level, *args = args
        args = tuple(args)
    if not isinstance(level, int):
        if logging.raiseExceptions:
            raise TypeError("level must be an integer")
        return
    if not logger.isEnabledFor(level):
        return
    msg, *msg_args = args
    module_name, lineno, function_name, fallback_file = location
    pathname = _source_file(module_name, fallback_file)
    record = logger.makeRecord(
        logger.name,
        level,
        pathname,
        lineno,
        msg,
        tuple(msg_args),
        None,
        function_name,
        kwargs.get("extra"),
        None,
    )
    logger.handle(record)


def _emit_warning(location: tuple, args: tuple, kwargs: dict) -> None:
    """Do what ``warnings.warn`` does for a call at ``location`` with stacklevel 1."""
    module_name, lineno, fallback_file = location
    filename = _source_file(module_name, fallback_file)
    message, *rest = args
    category = rest[0] if rest else kwargs.get("category")
    source = kwargs.get("source")
    if isinstance(message, Warning):
        category = message.__class__
    if category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise TypeError(
            f"category must be a Warning subclass, not '{type(category).__name__}'"
        )
    module = sys.modules.get(module_name)
    module_globals = vars(module) if module is not None else {"__name__": module_name}
    registry = module_globals.setdefault("__warningregistry__", {})
    # No module_globals, as warnings.warn itself does: with them, warn_explicit reads
    # the module's whole source through its loader on every call, shown or not.
    warnings.warn_explicit(message, category, filename, lineno, module_name, registry, None, source)
