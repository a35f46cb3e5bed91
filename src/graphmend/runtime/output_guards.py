"""The guards a trace takes on what decided an output's place in the graph.

A program may swap ``sys.stderr``, add a handler, point one at another stream, patch a
logger's method or replace ``warnings.showwarning`` between calls; a graph that decided
on what was there before must not run then. Each function here runs while traced and,
through ``comptime``, installs the guards on what the decision read
(``graphmend.torch_adapter.guards``): by type and mark where a program makes a new
object of the same kind for each call, so that the graph is reused as the original's
graphs were.

The guards are held while the call is decided (``hold_guards_until_decided``) and
installed only when it goes into the graph (``install_held_guards``): a call that keeps
its break runs as the original's does whatever later calls find, and a guard taken for
it alone made the frame compile again where the original's did not (a log call with no
handler, guarded on the type of ``sys.stderr``, which the program swaps between calls:
fuzz seed 740118, one more break).
"""

from __future__ import annotations

import logging
import sys
import types
import warnings

from graphmend.runtime.output_decisions import (
    OUTPUT_ONLY_MARK,
    REPRODUCED_LOGGER_METHODS,
    loggers_reached,
)
from graphmend.runtime.output_effects import STANDARD_STREAMS
from graphmend.runtime.trace_decisions import current_translator, decide_in_trace
from graphmend.torch_adapter.tracing import comptime, disable_wrapper_code, translator_of

_NOT_A_STANDARD_STREAM = "elsewhere"
_HELD_ATTRIBUTE = "_graphmend_output_guards_held"


def _install(*guarded) -> None:
    """Install ``guarded`` ((source, kind) pairs), or hold them while an output call is
    decided. The holder is TorchDynamo's output graph of the trace: a trace started
    again (a break, a refused claim) starts with nothing held."""
    from graphmend.torch_adapter import guards

    held = getattr(getattr(current_translator(), "output", None), _HELD_ATTRIBUTE, None)
    if held is None:
        guards.install_guards(*guarded)
    else:
        held.extend(guarded)


def hold_guards_until_decided() -> None:
    """While traced: hold the guards the output call's decision takes."""
    comptime(_start_holding)


def install_held_guards() -> None:
    """While traced: the call went into the graph; install the guards held for it."""
    comptime(_install_held)


def drop_held_guards() -> None:
    """While traced: the call keeps its break; the guards held for it are not needed."""
    comptime(_drop_held)


def _start_holding(context) -> None:
    setattr(translator_of(context).output, _HELD_ATTRIBUTE, [])


def _take_held(context) -> list:
    """The guards held in the trace, no longer held."""
    output = translator_of(context).output
    held = getattr(output, _HELD_ATTRIBUTE, None) or []
    if hasattr(output, _HELD_ATTRIBUTE):
        delattr(output, _HELD_ATTRIBUTE)
    return held


def _install_held(context) -> None:
    from graphmend.torch_adapter import guards

    held = _take_held(context)
    if held:
        guards.install_guards(*held)


def _drop_held(context) -> None:
    _take_held(context)


def print_receiver(target):
    """For ``print(file=target)``: the name of the standard stream ``target`` is read as
    at the call, ``_NOT_A_STANDARD_STREAM`` (the print keeps its call), or else its
    identity (``identity_guarded_on``).

    ``print(..., file=sys.stderr)`` writes to whatever ``sys.stderr`` is when it runs. A
    program may swap it before every call (``contextlib.redirect_stderr`` around each
    call): guarded on the stream's identity, the function compiled again on every call,
    where the original compiled once. Named, the trace is guarded on ``sys`` itself and on
    the stream's type (what the decision read), and the effect finds the stream when it
    is performed. A stream that is not a standard one is not guarded on at all: its
    print keeps its call, which is right for any stream a later call passes."""
    receiver = None
    comptime(_decide_print_receiver)
    if receiver is not None:
        return receiver
    return identity_guarded_on(target)


def _decide_print_receiver(context) -> None:
    decide_in_trace(context, "receiver", ("target",), _print_receiver_read, read=lambda variable: variable)


def _print_receiver_read(translator, variable) -> str | None:
    """``"stdout"`` or ``"stderr"`` where TorchDynamo read ``variable`` as that attribute
    of the ``sys`` module (its source names where it was read, and evaluates as its guards
    do to the module itself), with the trace guarded on it; ``_NOT_A_STANDARD_STREAM``
    where its value is neither standard stream now; else None."""
    from graphmend.torch_adapter import guards

    value = getattr(variable, "value", _NO_VALUE)
    if value is _NO_VALUE:
        return None
    if value is not sys.stdout and value is not sys.stderr:
        return _NOT_A_STANDARD_STREAM
    source = getattr(variable, "source", None)
    if not guards.is_attribute_source(source) or source.member not in STANDARD_STREAMS:
        return None
    root = translator.output.root_tx
    try:
        holder = eval(source.base.name, {"G": root.f_globals, "L": root.f_locals, "__builtins__": {}})  # noqa: S307
    except Exception:  # noqa: BLE001 - a source TorchDynamo names otherwise: keep the identity
        return None
    if holder is not sys or value is not getattr(sys, source.member):
        return None
    _install((source.base, guards.IDENTITY), (source, guards.TYPE))
    return source.member


def identity_guarded_on(target) -> int:
    """``id(target)``, the trace guarded on the object.

    TorchDynamo before torch 2.13 cannot trace ``id`` of a logger ("id() with unsupported
    args" for ``LoggingLoggerVariable``): a break of its own before the logging call's,
    one more than the original had (t5 under torch 2.11: 3 breaks, mended 4). There the
    identity is read from TorchDynamo's variable while traced, with the identity guard
    its own ``id`` installs."""
    identity = None
    comptime(_decide_identity)
    if identity is None:
        identity = id(target)
    return identity


def _decide_identity(context) -> None:
    decide_in_trace(context, "identity", ("target",), _identity_read_while_traced, read=lambda variable: variable)


def _identity_read_while_traced(translator, variable) -> int | None:
    """The identity of the object ``variable`` stands for, guarded on; None where
    TorchDynamo traces ``id`` of any object itself, or the object has no source to guard."""
    from graphmend.torch_adapter import guards

    if hasattr(variable, "get_id"):
        return None
    value = getattr(variable, "value", _NO_VALUE)
    source = getattr(variable, "source", None)
    if value is _NO_VALUE or source is None:
        return None
    _install((source, guards.IDENTITY))
    return id(value)


_NO_VALUE = object()


def log_chain_guarded(logger, method_name: str) -> bool:
    """While traced: whether the trace is now guarded on what decides a record's place in
    the graph (``output_decisions._why_not_exact_log``): the record factory, that the logger's methods
    the call runs are not replaced on the logger itself, and along the loggers a
    record reaches, their filters, handlers and ``propagate``, each handler's filters and
    the type of its stream (without handlers, the last-resort handler and the type of
    ``sys.stderr``). A program may add a handler between calls, or point one at a stream
    whose ``write`` is Python code, or patch a method of the logger for a call; a graph
    that read what it writes first, or made a record in the patch's place, must not run
    then. Not traced, or a logger TorchDynamo found nowhere it can guard, False."""
    guarded = False
    comptime(_decide_log_chain_guarded)
    return guarded


def _decide_log_chain_guarded(context) -> None:
    decide_in_trace(
        context, "guarded", ("logger", "method_name"), _guard_on_the_log_chain, read=lambda variable: variable
    )


def _guard_on_the_log_chain(translator, variable, method_variable) -> bool:
    from graphmend.torch_adapter import guards as dynamo
    from graphmend.torch_adapter.guards import attribute_source, module_source

    logger = getattr(variable, "value", None)
    source = getattr(variable, "source", None)
    if source is None or not isinstance(logger, logging.Logger):
        return False
    guards = [(attribute_source(module_source("logging"), "_logRecordFactory"), dynamo.IDENTITY)]
    # A method replaced on the logger now makes the call keep its break, right whatever
    # later calls find; one not replaced now is guarded on staying so.
    for name in dict.fromkeys((*REPRODUCED_LOGGER_METHODS, method_variable.as_python_constant())):
        if name not in vars(logger):
            guards.append((source, dynamo.absent_from_instance_dict(name)))
    handled = False
    for depth, current in enumerate(loggers_reached(logger)):
        if depth:
            source = attribute_source(source, "parent")
            guards.append((source, dynamo.IDENTITY))
        handlers = attribute_source(source, "handlers")
        guards += [(attribute_source(source, "filters"), dynamo.LENGTH),
                   (handlers, dynamo.LENGTH)]
        for index, handler in enumerate(current.handlers):
            handled = True
            each = dynamo.list_item_source(handlers, index)
            guards += [*_decided_by_type(each, handler, dynamo),
                       (attribute_source(each, "filters"), dynamo.LENGTH)]
            if "stream" in vars(handler):
                guards += _decided_by_type(attribute_source(each, "stream"), handler.stream, dynamo)
        guards.append((attribute_source(source, "propagate"), dynamo.CONSTANT))
    if not handled:
        guards += [(attribute_source(module_source("logging"), "lastResort"), dynamo.IDENTITY),
                   (attribute_source(module_source("sys"), "stderr"), dynamo.TYPE)]
    for guarded in guards:
        _install(guarded)
    return True


def _decided_by_type(source, thing, dynamo) -> list:
    """Guards that keep true what ``output_decisions._only_writes`` decided on a handler or its stream:
    its type and whether the object itself carries the output-only mark. A program (or
    pytest's log capture) that adds a new handler of the same kind for each call reuses
    the graph; guarding on the handler's identity recompiled every call, where the
    original, breaking at the call, compiled once."""
    if OUTPUT_ONLY_MARK in getattr(thing, "__dict__", {}):
        return [(source, dynamo.IDENTITY)]
    guards = [(source, dynamo.TYPE)]
    if hasattr(thing, "__dict__"):
        guards.append((source, dynamo.absent_from_instance_dict(OUTPUT_ONLY_MARK)))
    return guards


def warning_display_guarded() -> bool:
    """While traced: whether the trace is now guarded on what decides the warning's
    place in the graph (``output_decisions._why_not_exact_warning``), which a program may replace between
    calls: ``warnings.showwarning`` (its identity: a Python function's type says nothing
    of what it does), the type of ``sys.stderr``, and the module of the function that
    shows warnings by default (``warnings._showwarnmsg_impl``); not traced, False.

    The latter is guarded on by its module alone: ``catch_warnings(record=True)`` makes
    it a new list's ``append`` each time, and TorchDynamo drops a graph guarded on an
    object once the object is freed (a graph compiled on every call, where the original
    compiled once). Its module is all the decision reads of it."""
    guarded = False
    comptime(_decide_warning_display_guarded)
    return guarded


def _decide_warning_display_guarded(context) -> None:
    decide_in_trace(context, "guarded", (), _guard_on_the_warning_display)


def _is_a_disable_wrapper(function) -> bool:
    code = disable_wrapper_code()
    return (
        code is not None
        and isinstance(function, types.FunctionType)
        and function.__code__ is code
        and getattr(function, "_torchdynamo_disable", False) is True
    )


def _guard_on_the_warning_display(translator) -> bool:
    from graphmend.torch_adapter import guards as dynamo
    from graphmend.torch_adapter.guards import attribute_source

    module = dynamo.module_source("warnings")
    shown = attribute_source(module, "showwarning")
    if _is_a_disable_wrapper(warnings.showwarning):
        # Every function with this code is a ``torch._dynamo.disable`` wrapper, of which
        # the decision reads no more (``output_decisions._opaque_to_tracing``): guarded on the code, a
        # recorder made anew for each call (a test's ``catch_warnings`` that sets its own
        # ``showwarning``) keeps the graph, where a guard on the function dropped it once
        # the function was freed, and the frame compiled again on every call, recording
        # its breaks each time (the original compiled once).
        _install((attribute_source(shown, "__code__"), dynamo.IDENTITY))
        _install((attribute_source(shown, "_torchdynamo_disable"), dynamo.CONSTANT))
    else:
        _install((shown, dynamo.IDENTITY))
    _install((attribute_source(dynamo.module_source("sys"), "stderr"), dynamo.TYPE))
    display = attribute_source(attribute_source(module, "_showwarnmsg_impl"), "__module__")
    _install((display, dynamo.CONSTANT))
    return True
