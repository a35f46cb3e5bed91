"""The operator that performs output inside a graph, and the effects it performs.

``graphmend::emit_effect`` is registered as an ordered effect (``operators.define``), so
neither TorchDynamo, AOTAutograd nor inductor drops it or moves it past another effect.
The graph passes it the key of an effect registered while tracing (``register_effect``,
kept on ``graphmend.runtime.store``) and the effect's operands; when the graph runs, it
puts the operands back in their places and does what the original call did
(``perform``), in the thread that runs the graph.
"""

from __future__ import annotations

import logging
import sys
import warnings

import torch

from graphmend.runtime import operators
from graphmend.runtime.output_operands import (
    INT,
    ITEM,
    LIST,
    SIZE,
    TENSOR,
    TEXT,
    item_text,
)
from graphmend.runtime.store import store

PRINT = "print"
LOG_RECORD = "log"
LOG_METHOD = "log method"
WARNING = "warn"
STANDARD_STREAMS = ("stdout", "stderr")


def register_effect(kind: str, target, detail: tuple, template: tuple, slots: tuple, kwargs: dict) -> int:
    """Keep an effect found while tracing (``target``: the receiver, or the name of a
    standard stream); the key the graph passes to ``graphmend::emit_effect`` for it."""
    with store.output_effects_lock:
        key = next(store.output_effect_keys)
        store.output_effects[key] = (kind, target, detail, template, slots, dict(kwargs))
    return key


def _emit_effect(key: int, tensors: list[torch.Tensor], integers: list[int]) -> None:
    """Perform the registered effect ``key`` with its operands in their places."""
    kind, target, detail, template, slots, kwargs = store.output_effects[key]
    args = list(template)
    tensor_values, integer_values = iter(tensors), iter(integers)
    for position, slot_kind, extent in slots:
        if slot_kind == TENSOR:
            args[position] = next(tensor_values)
        elif slot_kind == INT:
            args[position] = next(integer_values)
        elif slot_kind == SIZE:
            args[position] = torch.Size([next(integer_values) for _ in range(extent)])
        elif slot_kind == ITEM:
            args[position] = next(tensor_values).item()
        elif slot_kind == TEXT:
            reads = iter(extent)
            args[position] = "".join(
                piece if piece is not None else item_text(next(tensor_values).item(), *next(reads)[1:])
                for piece in template[position]
            )
        else:
            items = [
                next(tensor_values) if element[0] == TENSOR
                else next(integer_values) if element[0] == INT
                else element[1]
                for element in extent
            ]
            args[position] = items if slot_kind == LIST else tuple(items)
    perform(kind, target, detail, tuple(args), kwargs)


def _emit_effect_while_tracing(key: int, tensors: list[torch.Tensor], integers: list[int]) -> None:
    return None


# Ordered: kept although it returns nothing, and never moved past another effect.
emit_effect = operators.define(
    "emit_effect(int key, Tensor[] tensors, SymInt[] integers) -> ()",
    _emit_effect, _emit_effect_while_tracing, ordered=True,
)


def perform(kind: str, target, detail: tuple, args: tuple, kwargs: dict) -> None:
    """Do what the original call did."""
    if kind == PRINT:
        if isinstance(target, str):
            target = getattr(sys, target)
        if target is not None:
            kwargs = {**kwargs, "file": target}
        print(*args, **kwargs)
    elif kind == LOG_RECORD:
        level, location = detail
        _emit_log_record(target, level, location, args, kwargs)
    elif kind == LOG_METHOD:
        (method_name,) = detail
        getattr(target, method_name)(*args, **kwargs)
    elif kind == WARNING:
        _emit_warning(detail, args, kwargs)


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
    message, *rest = args if args else (kwargs.get("message"),)
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
