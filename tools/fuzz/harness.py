"""Run an original program and its mended versions, and record everything observable.

Observables of one call: the returned value (or the exception: type, args, message),
the state of the argument tensors afterwards, how many times the module's impure
helper ran, and one ordered list of output events: stdout text, log records and
warnings, interleaved as they happened.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import types
import warnings
from dataclasses import dataclass, field

import torch
from torch._dynamo.utils import counters

import graphmend
import graphmend.runtime  # wraps torch.compile: flushes deferred effects, restores traps
from graphmend.counting import CountingBackend, break_count_so_far, recording_graph_breaks
from graphmend.rewrite.pipeline import mend_module_source

from .observe import _Stream

TORCH_DIRECTORY = os.path.dirname(torch.__file__)
RESUME_PREFIX = "torch_dynamo_resume_in_"


@dataclass
class Outcome:
    value: object = None
    error: tuple | None = None
    events: list = field(default_factory=list)
    arguments_after: object = None
    impure_calls: int = 0

    def without(self, *, line_numbers: bool = False, resume_function_names: bool = False) -> Outcome:
        events = []
        for event in self.events:
            if event[0] == "log":
                kind, level, message, path, line, function = event
                if line_numbers:
                    line = None
                if resume_function_names and function.startswith(RESUME_PREFIX):
                    function = "f"
                event = (kind, level, message, path, line, function)
            elif event[0] == "warning" and line_numbers:
                event = event[:4] + (None,)
            events.append(event)
        return Outcome(self.value, self.error, events, self.arguments_after, self.impure_calls)


def tensor_key(value: torch.Tensor):
    """Bit-exact identity of a tensor (NaN equal to the same NaN), with dtype and shape."""
    flat = value.detach().contiguous().reshape(-1)
    if flat.dtype.is_floating_point:
        flat = flat.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()])
    return ("tensor", str(value.dtype), tuple(value.shape), value.requires_grad, tuple(flat.tolist()))


def normalize(value):
    if isinstance(value, torch.Tensor):
        return tensor_key(value)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(normalize(v) for v in value))
    return ("object", repr(value))


def exception_key(error: BaseException, module_name: str):
    kind = type(error)
    owner = "<program>" if kind.__module__ == module_name else kind.__module__
    return (owner, kind.__qualname__, repr(error.args), str(error))


class _LogEvents(logging.Handler):
    # Records what the program logs for the comparison; the program never reads it.
    graphmend_output_only = True

    def __init__(self, events: list):
        super().__init__(logging.DEBUG)
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        self.events.append(
            ("log", record.levelname, record.getMessage(), record.pathname, record.lineno, record.funcName)
        )


@contextlib.contextmanager
def observing(module: types.ModuleType, log_level: int, events: list):
    logger = logging.getLogger(module.__name__)
    handler = _LogEvents(events)
    logger.addHandler(handler)
    logger.setLevel(log_level)
    logger.propagate = False

    @torch._dynamo.disable
    def show_warning(message, category, filename, lineno, file=None, line=None):
        if os.path.abspath(filename).startswith(TORCH_DIRECTORY):
            return  # TorchDynamo's own warnings, not the program's
        events.append(("warning", str(message), category.__qualname__, filename, lineno))

    try:
        with contextlib.redirect_stdout(_Stream(events, "stdout")), warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show_warning
            yield
    finally:
        logger.removeHandler(handler)


def call_observed(function, module: types.ModuleType, log_level: int, arguments) -> Outcome:
    arguments = tuple(a.clone() for a in arguments)
    outcome = Outcome()
    calls_before = len(getattr(module, "CALLS", ()))
    with observing(module, log_level, outcome.events):
        try:
            outcome.value = normalize(function(*arguments))
        except Exception as error:  # noqa: BLE001 - the exception is what is compared
            outcome.error = exception_key(error, module.__name__)
    outcome.arguments_after = normalize(arguments)
    outcome.impure_calls = len(getattr(module, "CALLS", ())) - calls_before
    return outcome


def load_module(name: str, code) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(code, module.__dict__)  # noqa: S102 - running the generated program is the point
    return module


@dataclass
class Variants:
    original: types.ModuleType
    mended: types.ModuleType  # compiled from MendResult.tree: original line numbers kept
    mended_text: types.ModuleType  # compiled from mend_source's text, as the import hook does
    text: str


def build_variants(source: str, filename: str, stem: str) -> Variants:
    original = load_module(f"{stem}_original", compile(source, filename, "exec"))
    mended_name = f"{stem}_mended"
    result = mend_module_source(source, filename=filename, module_name=mended_name, scope="all")
    if result.changed:
        mended_code = compile(result.tree, filename, "exec")
    else:
        mended_code = compile(source, filename, "exec")
    mended = load_module(mended_name, mended_code)
    text_name = f"{stem}_text"
    text = graphmend.mend_source(source, filename=filename, module_name=text_name, scope="all")
    mended_text = load_module(text_name, compile(text, filename, "exec"))
    return Variants(original, mended, mended_text, text)


def unload(*modules: types.ModuleType) -> None:
    for module in modules:
        sys.modules.pop(module.__name__, None)


def compile_counting(function):
    """``torch.compile`` after a reset, with graphmend's counting backend (runs graphs as is)."""
    torch._dynamo.reset()
    counters.clear()
    backend = CountingBackend()
    return torch.compile(function, backend=backend, dynamic=False), backend


def call_counting(compiled, backend: CountingBackend, module, log_level: int, arguments):
    """The first call of a freshly compiled function, its breaks counted as count_breaks does."""
    with recording_graph_breaks() as sites:
        outcome = call_observed(compiled, module, log_level, arguments)
    return outcome, break_count_so_far(backend, sites)
