"""The calls ``graphmend fix`` writes into a file in place of an output call.

    print(...)                  ->  __graphmend__.print(...)
    warnings.warn(...)          ->  __graphmend__.warn(...)
    logger.warning_once(...)    ->  __graphmend__.log(logger).warning_once(...)

Only the callee changes, so the line keeps its formatting and nothing about the file
(its path, the line) is written into it. Not compiling, each is the original call:
``print`` and ``warnings.warn`` are called with the warning attributed to the
caller's line (``stacklevel`` one higher), and ``log(logger)`` returns the logger
itself, so its method is called from the user's own line. While TorchDynamo traces,
the output goes into the graph as the rewriting of ``graphmend run`` puts it there
(``graphmend.runtime.deferred``), with the caller's module, line and function read
from the trace; what the graph cannot hold exactly is handed back and the original
callee is called here, attributed to the caller as above.
"""

from __future__ import annotations

import builtins
import functools
import logging
import re
import warnings

import torch

from graphmend.runtime import deferred, trace_decisions
from graphmend.torch_adapter.tracing import comptime

_RESUMED = re.compile(r"^torch_dynamo_resume_in_(.+)_at_\d+$")
is_compiling = torch.compiler.is_compiling


def _caller_site(translator):
    """(module, line, function, file) of the first traced frame outside this package."""
    translator = trace_decisions.user_translator(translator)
    if translator is None:
        return None
    code = translator.f_code
    resumed = _RESUMED.match(code.co_name)
    function = resumed.group(1) if resumed else code.co_name
    return (translator.f_globals.get("__name__"), translator.lineno, function, code.co_filename)


def _caller_location():
    """While tracing, the caller's (module, line, function, file), a constant of the
    trace; otherwise None."""
    site = None
    comptime(_decide_site)
    return site


def _decide_site(context) -> None:
    trace_decisions.decide_in_trace(context, "site", (), _caller_site)


def print(*args, **kwargs):  # noqa: A001 - the builtin's name, on purpose
    if is_compiling() and deferred.print_in_graph(args, kwargs) is deferred._IN_GRAPH:
        return
    builtins.print(*args, **kwargs)


def warn(*args, **kwargs):
    if is_compiling():
        site = _caller_location()
        if site is not None:
            module, line, _, file = site
            if deferred.warn_in_graph((module, line, file), args, kwargs) is deferred._IN_GRAPH:
                return
    args = list(args)
    if len(args) > 2:
        args[2] += 1
    else:
        kwargs = {**kwargs, "stacklevel": kwargs.get("stacklevel", 1) + 1}
    warnings.warn(*args, **kwargs)


def log(logger):
    """``logger`` itself when not compiling; while tracing, an object whose output
    methods put the record into the graph."""
    if not is_compiling():
        return logger
    return _LoggerInGraph(logger)


def _log(logger, method: str, *args, **kwargs) -> None:
    site = _caller_location()
    if site is not None:
        module, line, function, file = site
        level = "log" if method == "log" else deferred.LOGGER_METHOD_LEVELS.get(method)
        if deferred.log_in_graph(logger, method, level, (module, line, function, file), args, kwargs) is (
            deferred._IN_GRAPH
        ):
            return
    if getattr(type(logger), method, None) is getattr(logging.Logger, method, None) and "stacklevel" not in kwargs:
        # Logger's own method names the first frame outside logging: this one is the
        # first, the caller's the second (a ``functools.partial`` adds no frame). A
        # method of its own (transformers' ``warning_once``, a subclass's override)
        # names its own frame, as it did.
        kwargs = {**kwargs, "stacklevel": 2}
    getattr(logger, method)(*args, **kwargs)


class _LoggerInGraph:
    """While tracing, ``log(logger).warning`` is ``functools.partial(_log, logger,
    "warning")``: TorchDynamo can rebuild a partial where the call keeps its break, and
    not an object made in the trace whose method is running."""

    def __init__(self, logger):
        self.logger = logger


def _method_in_graph(name: str) -> property:
    return property(lambda self: functools.partial(_log, self.logger, name))


for _name in (*deferred.LOGGER_METHOD_LEVELS, "log", "warning_once", "info_once"):
    setattr(_LoggerInGraph, _name, _method_in_graph(_name))
