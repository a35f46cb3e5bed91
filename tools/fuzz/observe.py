"""Run a grammar program (see ``grammar``) original and mended, eagerly and compiled, and compare.

One *run* loads a fresh copy of the program's module (or modules, when another module
compiles it), then calls ``f(x, y, box, items, table)`` on each input set in turn, in
one process state: module globals carry over between the calls, as they would in a
user's program, so a difference that shows only on a later call is seen too. Before
each call the torch generator is seeded. Every call records one ``Observation``:

* ``error``: the exception that left ``f`` (module, type, args, message, the type of
  its ``__context__``/``__cause__`` and whether the context is suppressed) or None;
* ``value``: the returned value, tensors bit-exact (with dtype, shape, requires_grad,
  whether they have a grad_fn) and each object's identity relative to the inputs and
  module globals (``is x``, shares storage with ``y``);
* ``gradients``: after ``backward()`` of the sum of returned tensors that require grad,
  the gradients of ``x`` and ``y`` bit-exact (NaN equal to the same NaN), or the
  exception backward raised;
* ``arguments``: ``x``, ``y``, ``box.__dict__``, ``items`` and ``table`` afterwards;
* ``globals``: the module's state names (``COUNT``, ``TOTAL``, ``HISTORY``, ``SEEN``,
  ``CACHE``) afterwards;
* ``rng``: a digest of the torch generator state afterwards;
* ``events``: stdout, stderr, log records and warnings, interleaved in one list.

``compare`` runs the original eagerly as the reference, then the mended program
eagerly and compiled with each backend asked for. A compiled run that differs from the
reference is checked against the original compiled with the same backend: when on each
call each piece of what the mended run observed (outcome, gradients, arguments, globals,
generator, output) is what the original observed on that call, eagerly or compiled, the
difference is TorchDynamo's own (counted, not a finding).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import math
import os
import queue
import re
import sys
import threading
import traceback
import types
import warnings
from dataclasses import dataclass, field

import torch

import graphmend
import graphmend.runtime  # wraps torch.compile: flushes deferred effects, restores traps
from graphmend.rewrite.pipeline import mend_module_source
from graphmend.runtime import reset, trace_hooks
from graphmend.runtime.store import store

from . import (
    compile_state,
    fuzz_check_helper,  # noqa: F401 - the validation helper programs call, registered
)
from .grammar import BACKEND_LINE, CAUGHT_BY_THE_CALLER, STATE_NAMES, Program, other_module_source

TORCH_DIRECTORY = os.path.dirname(torch.__file__)
RESUME_PREFIX = "torch_dynamo_resume_in_"
PARTS = ("error", "value", "gradients", "arguments", "globals", "rng", "events", "traceback")
MODES = ("eager", "compiled:eager", "compiled:aot_eager", "compiled:inductor")


@dataclass
class Observation:
    error: object = None
    value: object = None
    gradients: object = None
    arguments: object = None
    globals: object = None
    rng: object = None
    events: list = field(default_factory=list)
    # Not compared; what ``traced_op_failures`` needs: the program line the error was
    # raised at (for TorchDynamo's trace-time error, the line of the op it traced) and
    # whether torch's compiler itself failed (not the program).
    error_site: object = None
    compiler_failed: bool = False
    # Compared only by ``compare(..., tracebacks=True)``: the frames of the exception
    # that left ``f`` in the program's files and in graphmend's (``traceback_frames``).
    traceback: object = None


@dataclass
class Difference:
    mode: str
    call: int
    input_name: str
    part: str
    expected: object
    actual: object
    # see ``exposed_dynamo_error``: reported apart, as TorchDynamo's difference, not a rule's
    exposed: bool = False

    @property
    def klass(self) -> str:
        return difference_class(self)

    @property
    def signature(self) -> tuple:
        return (self.mode, self.klass, self.input_name)

    def describe(self, limit: int = 1500) -> str:
        return (
            f"[{self.mode}] call {self.call} (input {self.input_name!r}), part {self.part!r}\n"
            f"  expected (original, eager): {_short(self.expected, limit)}\n"
            f"  actual   (mended):          {_short(self.actual, limit)}"
        )


def _short(value, limit: int) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def exposed_dynamo_error(difference: Difference) -> bool:
    """The compiled mended program raised TorchDynamo's trace-time wrapper
    (``TorchRuntimeError``) of the very failure the original raised eagerly.

    Mending let TorchDynamo trace code it ran eagerly before, and TorchDynamo reports an
    op's failure found while tracing as its own error (e.g. ``z1.add_`` on a leaf that
    requires grad). The original message must appear inside TorchDynamo's: a different
    message (an untaken arm's shape mismatch traced by Where) is a rule's difference.
    Counted apart, never dropped.
    """
    expected, actual = difference.expected, difference.actual
    return (
        difference.part == "error" and difference.mode != "eager" and expected is not None
        and actual is not None and actual[0] == "torch._dynamo.exc" and actual[1] == "TorchRuntimeError"
        and bool(expected[3]) and expected[3] in actual[3]
    )


def difference_class(difference: Difference) -> str:
    """A coarse name for a difference, so one bug found a hundred times is minimised once."""
    kind = "eager" if difference.mode == "eager" else "compiled"
    detail = ""
    expected, actual = difference.expected, difference.actual
    if difference.part == "error":
        names = [None if e is None else e[1] for e in (expected, actual)]
        if expected and actual and expected[:4] == actual[:4]:
            detail = "exception context/cause changed"
        elif expected and actual and expected[:2] == actual[:2]:
            detail = f"{names[0]} message/args changed"
        else:
            detail = f"{names[0]} -> {names[1]}"
    elif difference.part == "events":
        kinds_expected = [e[0] for e in expected]
        kinds_actual = [e[0] for e in actual]
        if sorted(_event_pieces(expected)) == sorted(_event_pieces(actual)):
            detail = "reordered"
        elif len(actual) < len(expected):
            detail = "missing " + ",".join(sorted(set(kinds_expected) - set(kinds_actual)) or ["output"])
        elif len(actual) > len(expected):
            detail = "extra " + ",".join(sorted(set(kinds_actual) - set(kinds_expected)) or ["output"])
        else:
            detail = "text of " + ",".join(sorted({a[0] for a, b in zip(actual, expected) if a != b}))
    return f"{kind} {difference.part}" + (f": {detail}" if detail else "")


def _event_pieces(events: list) -> list[str]:
    """Events with output text split into lines (consecutive writes are merged as seen)."""
    pieces = []
    for event in events:
        if event[0] in ("stdout", "stderr"):
            pieces += [repr((event[0], line)) for line in event[1].splitlines(keepends=True)]
        else:
            pieces.append(repr(event))
    return pieces


# normalising values ------------------------------------------------------------


def tensor_bits(value: torch.Tensor) -> tuple:
    flat = value.detach().contiguous().reshape(-1)
    if flat.dtype.is_floating_point:
        flat = flat.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()])
    return tuple(flat.tolist())


class Normaliser:
    """Turns values into comparable keys, naming objects the program was given or owns."""

    def __init__(self, known: dict[int, str], storages: dict[int, str], named=()):
        self.known = known
        self.storages = storages
        # The objects named by identity or storage, held while values are normalised: a
        # global the call rebinds is freed otherwise, and an object the call makes may
        # be given its id or its memory and read as that global (a gradient allocated
        # where ``TOTAL`` was before ``TOTAL = TOTAL + x``, not where a rewrite's ops
        # put it).
        self.named = tuple(named)

    def __call__(self, value, depth: int = 0):
        identity = self.known.get(id(value))
        if isinstance(value, torch.Tensor):
            key = (
                "tensor", str(value.dtype), tuple(value.shape), value.requires_grad,
                value.grad_fn is not None, tensor_bits(value),
                tuple(value.stride()) if value.layout == torch.strided else None,
            )
            storage = None
            if value.layout == torch.strided and value.device.type == "cpu":
                with contextlib.suppress(Exception):
                    storage = self.storages.get(value.untyped_storage().data_ptr())
            return key + (("is", identity), ("storage", storage))
        if depth > 4:
            return ("deep", type(value).__name__)
        if isinstance(value, (tuple, list)):
            return (type(value).__name__, ("is", identity), tuple(self(v, depth + 1) for v in value))
        if isinstance(value, dict):
            return ("dict", ("is", identity), tuple((repr(k), self(v, depth + 1)) for k, v in value.items()))
        if isinstance(value, float) and math.isnan(value):
            return ("float", "nan")
        if isinstance(value, (bool, int, float, str, type(None))):
            return (type(value).__name__, value)
        if hasattr(value, "__dict__"):
            return (type(value).__qualname__, ("is", identity), self(dict(vars(value)), depth + 1))
        return ("object", type(value).__qualname__, ("is", identity))


DYNAMO_MESSAGE_SUFFIX = "\n\nfrom user code:"


def _without_dynamo_suffix(text: str) -> str:
    """TorchDynamo appends where in the user's code a compiled op failed; the same error
    raised by the original compiled with fewer graphs would not carry it, so it is no
    part of the comparison."""
    return text.split(DYNAMO_MESSAGE_SUFFIX, 1)[0]


_COMPILER_DIRECTORIES = tuple(
    os.path.join(TORCH_DIRECTORY, part) + os.sep for part in ("_dynamo", "_functorch", "_inductor", "_subclasses")
)


def error_site(error: BaseException, program_files: set[str]) -> tuple[str, int] | None:
    """Where in the program ``error`` was raised: for TorchDynamo's error about an op
    it traced, that op's line (its ``real_stack``); else the innermost frame of the
    traceback in a program file."""
    if isinstance(error, torch._dynamo.exc.TorchRuntimeError):
        stack = getattr(error, "real_stack", None) or []
        return (stack[-1].filename, stack[-1].lineno) if stack else None
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename in program_files]
    return (frames[-1].filename, frames[-1].lineno) if frames else None


def _program_files(module_names: set[str]) -> set[str]:
    return {
        value.__code__.co_filename
        for name in module_names
        for value in vars(sys.modules.get(name, types.ModuleType(name))).values()
        if isinstance(value, types.FunctionType)
    }


def compiler_failed(error: BaseException) -> bool:
    """torch's compiler, not the program, failed: TorchDynamo crashed transforming the
    frame (seed 132739: an AssertionError from its bytecode transformation), or a backend
    rejected a graph (133609: ``BackendCompilerFailed``). TorchDynamo's error about an op
    of the program that fails while traced is the program's."""
    if isinstance(error, torch._dynamo.exc.TorchRuntimeError):
        return False
    if isinstance(error, (torch._dynamo.exc.BackendCompilerFailed, torch._dynamo.exc.InternalTorchDynamoError)):
        return True
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(_COMPILER_DIRECTORIES)


def exception_key(error: BaseException, module_names: set[str]) -> tuple:
    def owner(kind):
        return "<program>" if kind.__module__ in module_names else kind.__module__

    kind = type(error)
    context = error.__context__
    cause = error.__cause__
    return (
        owner(kind), kind.__qualname__, repr(tuple(_without_dynamo_suffix(a) if isinstance(a, str) else a for a in error.args)),
        _without_dynamo_suffix(str(error)),
        None if context is None else type(context).__qualname__,
        None if cause is None else type(cause).__qualname__,
        error.__suppress_context__,
    )


GRAPHMEND_DIRECTORY = os.path.dirname(os.path.abspath(graphmend.__file__)) + os.sep
_RESUME_NAME = re.compile(r"^torch_dynamo_resume_in_(\w+?)_at_\d+$")


def frame_function(name: str) -> str:
    """A frame's function, TorchDynamo's resume functions named after the one they resume."""
    while (match := _RESUME_NAME.match(name)) is not None:
        name = match.group(1)
    return name


def traceback_frames(error: BaseException, program_files: set[str]) -> tuple:
    """The frames the program's own traceback shows, innermost last: each frame of the
    program's files (function, line) and of graphmend's (``("graphmend", function)``);
    torch's frames and the harness's are TorchDynamo's and ours, not the program's. A
    rewrite must leave the program's frames as they were and add none of its own.

    A frame of one of TorchDynamo's resume functions stands in place of the frame that
    called it, of the same function: TorchDynamo resumes a function after each graph
    break by calling a new function from the old one, so the compiled original's
    traceback repeats the function once per break before the raise, and a mended
    program that breaks less repeats it less. The repetitions are not the program's
    frames (eager code shows one), so each resume frame replaces its caller's."""
    frames = []
    for frame in traceback.extract_tb(error.__traceback__):
        path = os.path.abspath(frame.filename)
        if (
            _RESUME_NAME.match(frame.name)
            and frames
            and frames[-1][0] == frame_function(frame.name)
            and frame.filename in program_files
        ):
            frames.pop()
        # Before the program's files: those are read from the functions a program's module
        # holds, and a compiled function it holds is torch's or graphmend's wrapper.
        if path.startswith(GRAPHMEND_DIRECTORY):
            frames.append(("graphmend", frame.name))
        elif path.startswith(TORCH_DIRECTORY):
            continue
        elif frame.filename in program_files:
            frames.append((frame_function(frame.name), frame.lineno))
    return tuple(frames)


# observing output -----------------------------------------------------------------


class _Stream(io.TextIOBase):
    def __init__(self, events: list, channel: str):
        self.events = events
        self.channel = channel

    def writable(self) -> bool:
        return True

    @torch._dynamo.disable  # as a real stream's is: traced code cannot reach its state
    def write(self, text: str) -> int:
        if text:
            if self.events and self.events[-1][0] == self.channel:
                self.events[-1] = (self.channel, self.events[-1][1] + text)
            else:
                self.events.append((self.channel, text))
        return len(text)


class _LogEvents(logging.Handler):
    # Records what the program logs for the comparison; the program never reads it.
    graphmend_output_only = True

    def __init__(self, events: list):
        super().__init__(logging.DEBUG)
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        function = record.funcName
        if function.startswith(RESUME_PREFIX):
            function = function[len(RESUME_PREFIX):].rsplit("_at_", 1)[0]
        self.events.append(("log", record.levelname, record.getMessage(), record.lineno, function))


@contextlib.contextmanager
def _torch_diagnostics_silenced():
    """Two diagnostics torch gives depending on what TorchDynamo traced, which graphmend
    changes: like TorchDynamo's warnings, they are not the program's output.

    TorchDynamo's one-time warnings (``warn_once``: "does not know how to trace the
    builtin time.time") come the first time in the process it traces such a call: a
    program whose own ``showwarning`` keeps every warning it is shown got one on a later
    call than the original, which had it on its first call, while the harness's own
    ``showwarning`` set it aside (seed 370879).

    ``torch.fx`` prints to ``sys.stderr`` where a graph's generated code raised (a
    traceback and "Call using an FX-traced Module"), under TorchDynamo's ``eager`` and
    ``aot_eager`` backends, before the exception goes on: in seed 391274 (``dynamic=True``) the
    mended program's graph divided by the symbolic ``box.n`` and raised
    ZeroDivisionError there, where the original's trace had specialised ``box.n`` and
    raised it eagerly; the exception the program sees is the same."""
    import torch._dynamo.utils as dynamo_utils
    import torch.fx.graph_module as graph_module

    warn_once = dynamo_utils.warn_once
    dynamo_utils.warn_once = lambda message, stacklevel=1: None
    graph_module.print = lambda *args, **kwargs: None
    try:
        yield
    finally:
        dynamo_utils.warn_once = warn_once
        del graph_module.print


class _ToTheRealStderr(logging.Filter):
    """torch's own log records (``E... fake_tensor.py] failed while attempting to run
    meta``, written when an op fails on fake tensors while traced) are torch's
    diagnostics, not the program's output. A handler made with a fixed stream wrote them
    to the stderr of the process whatever the program's ``sys.stderr`` was (torch 2.13);
    one that follows ``sys.stderr`` (torch 2.15) would write them into the observed
    output: this sends them where the fixed stream did."""

    def __init__(self, handler: logging.Handler):
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        with contextlib.suppress(Exception):  # a diagnostic that cannot be shown is dropped
            sys.__stderr__.write(self.handler.format(record) + "\n")
        return False


@contextlib.contextmanager
def _torch_logs_to_the_real_stderr():
    redirected = []
    torch_loggers = [
        logger for name, logger in list(logging.root.manager.loggerDict.items())
        if (name == "torch" or name.startswith("torch.")) and isinstance(logger, logging.Logger)
    ]
    for handler in {id(h): h for logger in torch_loggers for h in logger.handlers}.values():
        # A ``stream`` that is a property looks ``sys.stderr`` up when it writes.
        if isinstance(getattr(type(handler), "stream", None), property):
            log_filter = _ToTheRealStderr(handler)
            handler.addFilter(log_filter)
            redirected.append((handler, log_filter))
    try:
        yield
    finally:
        for handler, log_filter in redirected:
            handler.removeFilter(log_filter)


@contextlib.contextmanager
def observing(logger_names: list[str], log_level: int, events: list):
    handlers = []
    for name in logger_names:
        logger = logging.getLogger(name)
        handler = _LogEvents(events)
        logger.addHandler(handler)
        logger.setLevel(log_level)
        logger.propagate = False
        handlers.append((logger, handler))

    @torch._dynamo.disable
    def show_warning(message, category, filename, lineno, file=None, line=None):
        if os.path.abspath(filename).startswith(TORCH_DIRECTORY):
            return  # TorchDynamo's own warnings, not the program's
        events.append(("warning", str(message), category.__qualname__, lineno))

    try:
        with contextlib.redirect_stdout(_Stream(events, "stdout")), contextlib.redirect_stderr(
            _Stream(events, "stderr")
        ), warnings.catch_warnings(), _torch_diagnostics_silenced(), _torch_logs_to_the_real_stderr():
            warnings.simplefilter("always")
            warnings.showwarning = show_warning
            yield
    finally:
        for logger, handler in handlers:
            logger.removeHandler(handler)


# loading programs -------------------------------------------------------------------


def with_backend(source: str, backend: str) -> str:
    return source.replace(BACKEND_LINE, f'BACKEND = "{backend}"')


@dataclass
class LoadedCode:
    """Code objects of one variant of a program for one backend (mended once, executed per run)."""

    module_name: str
    code: types.CodeType
    main_name: str | None = None
    main_code: types.CodeType | None = None


# The original program with its validation helper made outside TorchDynamo, as graphmend
# makes a check call it keeps (``checks.call_eagerly``): the same line, another callee.
_CHECK_IMPORT = "from graphmend_fuzz_checks import torch_compilable_check"
CHECKS_MADE_EAGERLY = "original-checks-made-eagerly"

# The original program with each compile-state test answering as while TorchDynamo
# traces (``is_compiling()`` is True), run eagerly: what the program does where every
# statement is traced. The original compiled runs some frames eagerly (after a break it
# cannot resume from, after an error while tracing) and there the test answers False;
# graphmend lets TorchDynamo trace code the original ran eagerly, and the program's own
# test then answers True there (seed 140784: `if torch.compiler.is_compiling():` took the
# traced arm in the mended compiled run, the eager arm in the original compiled one).
COMPILE_STATE_AS_TRACED = "original-compile-state-as-traced"

# The original program compiled with graphmend's policy for random draws applied to all
# of its graphs, as to graphs of mended code (``trace_hooks._check_the_compiled_graph``:
# ``fallback_random``, draws nothing uses returned): its numbers are eager's, its
# rounding the backend's. Under AOTAutograd the original compiled drops draws nothing
# uses, so its numbers shift, and eager code rounds otherwise (seed 182914: the mended
# gradient one unit in the last place from eager's and far from the original
# compiled's, bit for bit this run's).
DRAWS_AS_EAGERLY = "original-draws-as-eagerly"

# The original compiled with TorchDynamo's assembly of every frame mended as graphmend
# mends it for frames of rewritten code (``conversion_failures``: offsets given again
# where ``EXTENDED_ARG`` prefixes were replaced). Where the original compiled fails on
# that assembly bug on every call, it shows nothing past it; this shows what TorchDynamo
# does there, as it does for the mended program (seed 242676: past it, an op failing
# while traced inside the program's ``contextlib.suppress`` raises TorchDynamo's error,
# as in 232488).
ASSEMBLY_AS_FOR_REWRITTEN_CODE = "original-assembly-as-for-rewritten-code"
_ASSEMBLY_FAILURE = "exception table entry start instruction has no offset"
_DRAWS = re.compile(r"\b(?:rand\w*|bernoulli|dropout|multinomial|normal)\(")


def prepare(
    program: Program, variant: str, backend: str, filename: str, module_name: str, mended_source: str | None = None
) -> LoadedCode:
    source = with_backend(program.source, backend)
    if variant == CHECKS_MADE_EAGERLY:
        source = source.replace(_CHECK_IMPORT, _CHECK_IMPORT + "_eagerly as torch_compilable_check")
    if variant == COMPILE_STATE_AS_TRACED:
        source = compile_state.COMPILE_STATE_TEST.sub("True", source)
    if compile_state.is_answers_variant(variant):
        source = compile_state.answering(source, variant)
    if variant == "mended" and mended_source is not None:  # the harness's own tests: a hand-made "mended" text
        source, variant = with_backend(mended_source, backend), "given"
    main_name = main_code = None
    if program.compile_site == "other-module":
        main_name = module_name + "_main"
        main_source = with_backend(other_module_source(module_name, program.caller_catches, program.compiled_dynamic), backend)
        main_filename = filename.replace(".py", "_main.py")
        main_code = _compile(main_source, main_filename, main_name, variant, scope="entry")
    scope = "entry" if program.compile_site == "module" else "all"
    return LoadedCode(module_name, _compile(source, filename, module_name, variant, scope), main_name, main_code)


def _compile(source: str, filename: str, module_name: str, variant: str, scope: str) -> types.CodeType:
    if variant == "mended":
        result = mend_module_source(source, filename=filename, module_name=module_name, scope=scope)
        if result.changed:
            return compile(result.tree, filename, "exec")
    return compile(source, filename, "exec")


def _exec_module(name: str, code: types.CodeType) -> types.ModuleType:
    logger = logging.getLogger(name)
    logger.handlers.clear()  # a fresh copy of the program adds its own handlers again
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(code, module.__dict__)  # noqa: S102 - running the generated program is the point
    return module


def unload(loaded: LoadedCode) -> None:
    for name in (loaded.module_name, loaded.main_name):
        if name:
            sys.modules.pop(name, None)
            logging.getLogger(name).handlers.clear()


# inputs -----------------------------------------------------------------------------


INPUT_NAMES = ("positive", "negative", "zeros", "small")


def input_values(seed: int, shape: tuple, resized: bool = False) -> list[tuple[str, torch.Tensor, torch.Tensor, int, int]]:
    """(name, x, y, how many items, box.n) per input set; ``zeros`` has exact zeros (sqrt's
    infinite derivative), ``small`` fails range guards. ``resized`` (programs compiled
    with ``dynamic=True``): a last set, ``resized``, of other sizes (each dimension one
    larger, no size 0 or 1, which TorchDynamo specialises), drawn after the others so
    that theirs stay what they were."""
    generator = torch.Generator().manual_seed(seed)

    def draw(size=shape):
        return torch.randn(size, generator=generator).clamp(-3.0, 3.0)

    positive = torch.rand(shape, generator=generator) + 0.5
    negative = -(torch.rand(shape, generator=generator) + 0.1)
    zeros = draw()
    zeros.view(-1)[::2] = 0.0
    small = draw() - 6.0
    sets = [
        ("positive", positive, positive.clone(), 0, 1),
        ("negative", negative, draw(), 1, 0),
        ("zeros", zeros, zeros.clone(), 0, 0),
        ("small", small, small.clone(), 2, 1),
    ]
    if resized:
        other = tuple(size + 1 for size in shape)
        sets.append(("resized", draw(other), draw(other), 1, 1))
    return sets


def laid_out_transposed(value: torch.Tensor) -> torch.Tensor:
    """``value`` (2-D) with the same shape and values, stored transposed."""
    return value.t().contiguous().t()


# one run ------------------------------------------------------------------------------


def run_program(
    program: Program, loaded: LoadedCode, mode: str, inputs, fresh_dynamo_before: int | None = None
) -> list[Observation]:
    """Load the program once and call it on every input set in turn (TorchDynamo's
    caches emptied just before the call on ``inputs[fresh_dynamo_before]``)."""
    torch.manual_seed(program.seed)
    module = _exec_module(loaded.module_name, loaded.code)
    main = _exec_module(loaded.main_name, loaded.main_code) if loaded.main_name else None
    if mode == "eager":
        target = module.f
    else:
        backend = mode.split(":", 1)[1]
        if program.compile_site == "module":
            target = module.compiled_f
        elif program.compile_site == "other-module":
            target = main.compiled_f
        else:
            target = torch.compile(module.f, backend=backend, dynamic=program.compiled_dynamic)
    names = {loaded.module_name} | ({loaded.main_name} if loaded.main_name else set())
    observations = []
    if program.warm_helpers:
        observations.append(_warm_up(program, module, mode, names, inputs[0]))
    if program.caller_catches:
        # ``f`` alone first (its guards may be lowered: nothing catches there), then
        # every call through the other module's ``caller``, which catches.
        warm_target = module.f if mode == "eager" else main.compiled_f
        observations.append(_call(program, module, warm_target, names, -1, *inputs[0][1:]))
        target = main.caller if mode == "eager" else main.compiled_caller
    for index, (_, x_value, y_value, item_count, box_count) in enumerate(inputs):
        if index == fresh_dynamo_before:
            torch._dynamo.reset()
        observations.append(
            _call(program, module, target, names, index, x_value, y_value, item_count, box_count)
        )
    return observations


WARM_UP = ("warm-up", None, None, 0, 0)


def call_labels(program: Program, inputs) -> list:
    """The input set of each observation ``run_program`` makes, the warm-up first."""
    warm_ups = bool(program.warm_helpers) + bool(program.caller_catches)
    return [WARM_UP] * warm_ups + list(inputs)


def _warm_up(program, module, mode, module_names, first_inputs) -> Observation:
    """Each of ``program.warm_helpers`` called once, on the first input set, before
    ``f``: compiled on its own in compiled modes, so that ``f`` may then enter a helper
    whose graph TorchDynamo has cached (traced under no caller of ``f``'s)."""
    _, x_value, y_value, _, _ = first_inputs
    if "x" in program.transposed_inputs:
        x_value = laid_out_transposed(x_value)
    if "y" in program.transposed_inputs:
        y_value = laid_out_transposed(y_value)
    normalise = Normaliser({}, {})
    observation = Observation()
    torch.manual_seed(999)
    outcomes = []
    with observing(list(module_names), program.log_level, observation.events):
        for name in program.warm_helpers:
            helper = getattr(module, name, None)
            if helper is None:  # the minimiser removed it
                continue
            if mode != "eager":
                helper = torch.compile(helper, backend=mode.split(":", 1)[1], dynamic=program.compiled_dynamic)
            try:
                outcomes.append(("value", normalise(helper(x_value.clone(), y_value.clone()))))
            except Exception as error:  # noqa: BLE001 - compared like f's exceptions
                outcomes.append(("error", exception_key(error, module_names)))
    observation.value = tuple(outcomes)
    _record_globals_and_rng(observation, module, normalise)
    return observation


def _record_globals_and_rng(observation: Observation, module, normalise) -> None:
    observation.globals = tuple((name, normalise(module.__dict__.get(name))) for name in STATE_NAMES)
    observation.rng = hashlib.md5(torch.get_rng_state().numpy().tobytes()).hexdigest()


def _call(program, module, target, module_names, index, x_value, y_value, item_count, box_count) -> Observation:
    if "x" in program.transposed_inputs:
        x_value = laid_out_transposed(x_value)
    if "y" in program.transposed_inputs:
        y_value = laid_out_transposed(y_value)
    if program.inputs_share_memory:
        x, y = torch.stack([x_value, y_value]).unbind(0)
    else:
        x = x_value.clone().requires_grad_(program.requires_grad)
        y = y_value.clone().requires_grad_(program.requires_grad)
    tracked = getattr(module, "Tracked", None) if program.inputs_are_tracked else None
    if isinstance(tracked, type):
        x, y = (t.detach().as_subclass(tracked).requires_grad_(t.requires_grad) for t in (x, y))
    box_class = getattr(module, "Box", None)
    box = box_class() if isinstance(box_class, type) else types.SimpleNamespace(t=None, n=0)
    with contextlib.suppress(Exception):
        box.n = box_count
    items = [torch.ones_like(x_value) * (k + 1) for k in range(item_count)]
    table = {"k": 0}
    known = {id(x): "x", id(y): "y", id(box): "box", id(items): "items", id(table): "table"}
    storages = {}
    for label, tensor in (("x", x), ("y", y)):
        storages[tensor.untyped_storage().data_ptr()] = label
    named = [x, y, box, items, table]
    for name in STATE_NAMES:
        if name in module.__dict__:
            known.setdefault(id(module.__dict__[name]), name)
            named.append(module.__dict__[name])
            if isinstance(module.__dict__[name], torch.Tensor):
                storages[module.__dict__[name].untyped_storage().data_ptr()] = name
    normalise = Normaliser(known, storages, named)
    observation = Observation()
    torch.manual_seed(1000 + index)
    value = None
    calling_thread = _CallingThread() if program.calls_from_threads else None
    made_there = calling_thread.run if calling_thread is not None else (lambda function, *args: function(*args))
    _printing_defaults()
    try:
        with observing(list(module_names), program.log_level, observation.events):
            before_call = getattr(module, "before_call", None)
            if callable(before_call):  # the program's own change of its output settings
                before_call(index)
            try:
                value = made_there(target, x, y, box, items, table)
                observation.value = normalise(value)
            except Exception as error:  # noqa: BLE001 - the exception is what is compared
                observation.error = exception_key(error, module_names)
                observation.error_site = error_site(error, _program_files(module_names))
                observation.traceback = traceback_frames(error, _program_files(module_names))
                observation.compiler_failed = compiler_failed(error)
        if observation.error is None and (program.requires_grad or program.parameters_require_grad):
            parameters = tuple(getattr(module, "PARAMETERS", ()))
            observation.gradients = made_there(_gradients, value, x, y, normalise, parameters)
    finally:
        if calling_thread is not None:
            calling_thread.close()
        _printing_defaults()
    observation.arguments = normalise((x, y, box, items, table))
    _record_globals_and_rng(observation, module, normalise)
    return observation


class _CallingThread:
    """A thread of a call's own (``Program.calls_from_threads``), where ``f`` runs and then
    the backward of what it returned. Autograd sums the gradients an input gets in the
    order of the numbers its nodes were given, counted per thread: with ``f``'s nodes
    numbered in a new thread and the backward's sum made in the main thread, the order
    depended on how many nodes the main thread had made before in the process (seed
    243502, the second program of a new process: the original's first run summed a
    gradient one unit in the last place apart from every later run, the mended one's
    included). Made in the same thread, the sum's nodes come after ``f``'s."""

    def __init__(self):
        self._tasks: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="fuzz-call")
        self._thread.start()

    def run(self, function, *arguments):
        """``function(*arguments)`` there: its value, or its exception raised again here
        (its traceback keeps the thread's frames)."""
        outcome: queue.Queue = queue.Queue(maxsize=1)
        self._tasks.put((function, arguments, outcome))
        succeeded, result = outcome.get()
        if not succeeded:
            raise result
        return result

    def close(self) -> None:
        self._tasks.put(None)
        self._thread.join()

    def _serve(self) -> None:
        while (task := self._tasks.get()) is not None:
            function, arguments, outcome = task
            try:
                outcome.put((True, function(*arguments)))
            except BaseException as error:  # noqa: BLE001 - raised again in the caller's thread
                outcome.put((False, error))


def _printing_defaults() -> None:
    """Print options and the default dtype are the process's: a program that sets them
    (``program-print-options``) must not change how the next call, or the next run,
    prints and makes tensors."""
    torch.set_printoptions(profile="default")
    torch.set_default_dtype(torch.float32)


def _gradients(value, x, y, normalise, parameters=()):
    tensors = []

    def collect(item, depth=0):
        if isinstance(item, torch.Tensor):
            if item.requires_grad and item.is_floating_point():
                tensors.append(item)
        elif isinstance(item, (tuple, list)) and depth < 3:
            for element in item:
                collect(element, depth + 1)

    collect(value)
    if not tensors:
        return None
    try:
        sum(t.sum() for t in tensors).backward()
    except Exception as error:  # noqa: BLE001
        return ("backward raised", type(error).__qualname__, str(error)[:200])
    # The module parameters a program lists in ``PARAMETERS`` (``program-*`` constructs):
    # gradients of the program's own state, after a backward made after the call.
    return (normalise(x.grad), normalise(y.grad), *(normalise(p.grad) for p in parameters))


# graph and break counts -------------------------------------------------------------


@dataclass
class Worse:
    """A compiled function the mended program compiles into more graphs, or breaks more
    often in, than the original does in the same mode (over the run's calls)."""

    mode: str
    function: str
    original: tuple  # (graphs, breaks)
    mended: tuple

    @property
    def klass(self) -> str:
        what = [
            name for name, before, after in zip(("graphs", "breaks"), self.original, self.mended) if after > before
        ]
        return "compiled counts: more " + " and ".join(what)

    def describe(self) -> str:
        return (
            f"[{self.mode}] {self.function}: original {self.original[0]} graphs, {self.original[1]} breaks; "
            f"mended {self.mended[0]} graphs, {self.mended[1]} breaks"
        )


class _GraphsPerFunction(logging.Handler):
    """Reads TorchDynamo's structured trace: each graph it outputs in the last attempt at
    a frame, counted for the function whose frame it compiled (TorchDynamo's
    ``compilation_metrics`` event, which ends each frame's compilation, names it; a
    resume function counts as the function it resumes)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.pending: dict = {}
        self.graphs: dict[str, int] = {}
        self.fail_reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        metadata = getattr(record, "metadata", None)
        if not isinstance(metadata, dict):
            return
        frame = (metadata.get("frame_id"), metadata.get("frame_compile_id"))
        if "dynamo_output_graph" in metadata:
            # Only the last attempt's graphs run: an attempt TorchDynamo (or graphmend, for
            # a refused claim) restarted output a graph no backend compiled.
            attempt = metadata.get("attempt") or 0
            last, count = self.pending.get(frame, (attempt, 0))
            self.pending[frame] = (attempt, count + 1) if attempt == last else (max(attempt, last), 1)
        elif "compilation_metrics" in metadata:
            metrics = metadata["compilation_metrics"]
            if metrics.get("fail_reason"):
                self.fail_reasons.append(str(metrics["fail_reason"]))
            name = frame_function(str(metrics.get("co_name") or "?"))
            attempt, count = self.pending.pop(frame, (0, 0))
            # The last attempt may output no graph (seed 851106: restarted without a claim,
            # the frame broke at its first call); an earlier attempt's graph does not run.
            if count and attempt == (metadata.get("attempt") or 0):
                self.graphs[name] = self.graphs.get(name, 0) + count


@contextlib.contextmanager
def counting_graphs_and_breaks(counts: dict, failures: list | None = None):
    """Fills ``counts`` with function -> (graphs, breaks) for what TorchDynamo compiles
    while the block runs. Breaks are TorchDynamo's own records (``graphmend.dynamo_records``,
    which drops those of a trace graphmend makes TorchDynamo start again), each counted
    for the outermost frame being compiled. ``failures`` gets the reason of each frame
    TorchDynamo failed to compile."""
    import torch._logging._internal as logging_internal

    from graphmend.dynamo_records import recording

    trace_log = logging_internal.trace_log
    handler = _GraphsPerFunction()
    saved_level = trace_log.level
    trace_log.addHandler(handler)
    trace_log.setLevel(logging.DEBUG)
    try:
        with recording() as records:
            yield counts
    finally:
        trace_log.removeHandler(handler)
        trace_log.setLevel(saved_level)
    breaks: dict[str, int] = {}
    for record in records.breaks:
        name = frame_function(record.frames[0].function) if record.frames else "?"
        breaks[name] = breaks.get(name, 0) + 1
    for name in set(handler.graphs) | set(breaks):
        counts[name] = (handler.graphs.get(name, 0), breaks.get(name, 0))
    if failures is not None:
        failures.extend(handler.fail_reasons)


def worse_counts(mode: str, original: dict, mended: dict) -> list[Worse]:
    """The run's graphs and breaks, over every frame TorchDynamo compiled, when the
    mended program has more of either than the original.

    Counted over all frames, not per function: a break removed inside a helper lets
    TorchDynamo inline the helper into its caller, so the caller's frame gains the graph
    the helper's own frame compiled before (a helper printing a tensor: the caller
    ``f`` goes from 0 graphs to 1 and the helper from 1 to 0). Each function whose
    count grew is named in the finding."""
    def total(counts: dict) -> tuple[int, int]:
        return (sum(graphs for graphs, _ in counts.values()), sum(breaks for _, breaks in counts.values()))

    before, after = total(original), total(mended)
    if after[0] <= before[0] and after[1] <= before[1]:
        return []
    grown = [
        name for name in sorted(mended)
        if any(now > then for now, then in zip(mended[name], original.get(name, (0, 0))))
    ]
    return [Worse(mode, "all frames (grown: " + (", ".join(grown) or "-") + ")", before, after)]


@contextlib.contextmanager
def _torch_compile_of(variant: str, applies: bool):
    """With ``applies``, every run but the mended one's compiles with torch's own
    ``torch.compile``, not the one ``graphmend.runtime`` wraps: the original program is
    what a user runs without graphmend, and what the wrapper adds (its frames in
    tracebacks, a compile of a compiled function) is the mended program's difference."""
    from graphmend.runtime import compiled_calls

    plain = compiled_calls.original_compile()
    if not applies or variant == "mended" or plain is None:
        yield
        return
    wrapped = torch.compile
    torch.compile = plain
    try:
        yield
    finally:
        torch.compile = wrapped


# comparing -----------------------------------------------------------------------------


def first_difference(mode, inputs, expected: list[Observation], actual: list[Observation]) -> Difference | None:
    for index, (reference, observed) in enumerate(zip(expected, actual)):
        for part in PARTS:
            if getattr(reference, part) != getattr(observed, part):
                return Difference(mode, index, inputs[index][0], part, getattr(reference, part), getattr(observed, part))
    return None


@dataclass
class Report:
    differences: list[Difference] = field(default_factory=list)
    torch_own: list[Difference] = field(default_factory=list)  # original compiled differs the same way
    # The original compiled with its check helper made outside TorchDynamo differs the same way.
    checks_made_eagerly: list[Difference] = field(default_factory=list)
    numeric: list[Difference] = field(default_factory=list)  # inductor: float bits only, allclose
    # The program's own compile-state test answered True where the original compiled ran
    # the code eagerly (see ``COMPILE_STATE_AS_TRACED``).
    compile_state_answers: list[Difference] = field(default_factory=list)
    # TorchDynamo's trace-time error for the op eager fails at, where the original compiled
    # is no reference: torch's compiler failed on it first (see ``traced_op_failures``).
    traced_op_failures: list[Difference] = field(default_factory=list)
    # The original compiled with graphmend's policy for random draws differs the same
    # way (see ``DRAWS_AS_EAGERLY``).
    draws_as_eagerly: list[Difference] = field(default_factory=list)
    # The original compiled failed on TorchDynamo's assembly bug; with its assembly
    # mended as graphmend's frames are, it differs the same way
    # (``ASSEMBLY_AS_FOR_REWRITTEN_CODE``).
    assembly_as_for_rewritten_code: list[Difference] = field(default_factory=list)
    modes_run: list[str] = field(default_factory=list)
    crashed: str | None = None
    # ``compare(..., counts=True)``: compiled functions the mended program compiles into
    # more graphs, or breaks more often in, than the original.
    worse: list[Worse] = field(default_factory=list)


def compare(
    program: Program, modes=("eager", "compiled:eager", "compiled:aot_eager"), filename=None, mended_source=None,
    calls: int | None = None, counts: bool = False, tracebacks: bool = False,
) -> Report:
    """Original eagerly against mended in each mode; see the module docstring.

    ``mended_source`` replaces graphmend's output by a given text (to test the harness);
    ``calls`` keeps only the first input sets (the minimiser needs no more than the one
    that showed the difference). ``counts``: in each compiled mode, the original
    compiled runs too, and a function the mended program compiles into more graphs or
    breaks more often in is reported (``Report.worse``). ``tracebacks``: the frames of
    each exception's traceback are compared too (``traceback_frames``), and the original
    program compiles with torch's own ``torch.compile``, not graphmend's wrapper."""
    filename = filename or f"/graphmend-fuzz/program_{program.seed}.py"
    module_name = f"gm_fuzz_{program.seed}"
    inputs = input_values(program.seed, program.shape, program.compiled_dynamic)[:calls]
    report = Report()
    cache: dict[tuple[str, str], LoadedCode] = {}
    counted: dict[tuple[str, str], dict] = {}
    compile_failures: dict[tuple[str, str], list[str]] = {}
    whole_runs: dict[tuple[str, str], list[Observation]] = {}

    def observe(variant: str, mode: str, call_inputs=None, fresh_dynamo_before=None) -> list[Observation]:
        whole = call_inputs is None and fresh_dynamo_before is None
        if whole and counts and (variant, mode) in whole_runs:
            return whole_runs[(variant, mode)]
        backend = mode.split(":", 1)[1] if ":" in mode else "eager"
        key = (variant, backend)
        if key not in cache:
            cache[key] = prepare(program, variant, backend, filename, module_name, mended_source)
        torch._dynamo.reset()
        count = {}
        failures: list[str] = []
        try:
            with _draws_as_eagerly(variant == DRAWS_AS_EAGERLY), _assembly_as_for_rewritten_code(
                variant == ASSEMBLY_AS_FOR_REWRITTEN_CODE
            ), _torch_compile_of(variant, tracebacks), (
                counting_graphs_and_breaks(count, failures) if counts and whole and mode != "eager" else contextlib.nullcontext()
            ):
                observations = run_program(
                    program, cache[key], mode, inputs if call_inputs is None else call_inputs, fresh_dynamo_before
                )
        finally:
            torch._dynamo.reset()
            unload(cache[key])
        if not tracebacks:
            for observation in observations:
                observation.traceback = None
        if counts and whole:
            counted[(variant, mode)] = count
            compile_failures[(variant, mode)] = failures
            whole_runs[(variant, mode)] = observations
        return observations

    def original_compiled_alone(mode: str):
        """The original compiled, called on one observation's input set after the same
        earlier calls, with TorchDynamo's caches emptied just before it: what the call
        does with no earlier call's compiled or given-up frames, the program's own state
        being what its earlier calls made it (seed 272822: a global list the program
        appends to is printed; called alone, the count differed)."""
        warm_ups = len(call_labels(program, inputs)) - len(inputs)

        seen: dict[int, Observation | None] = {}

        def run(index: int) -> Observation | None:
            if index not in seen:
                call = index - warm_ups
                seen[index] = (
                    None if call < 0 else observe("original", mode, inputs[: call + 1], fresh_dynamo_before=call)[-1]
                )
            return seen[index]

        return run

    # Refusals are keyed by file and line, and the minimiser's candidates share the
    # program's file name: each comparison starts from none.
    reset()
    reference = observe("original", "eager")
    for mode in modes:
        report.modes_run.append(mode)
        actual = observe("mended", mode)
        if counts and mode != "eager":
            observe("original", mode)
            worse = worse_counts(mode, counted[("original", mode)], counted[("mended", mode)])
            if worse and any(_ASSEMBLY_FAILURE in reason for reason in compile_failures[("original", mode)]):
                # TorchDynamo failed to assemble the original's frame and ran it eagerly,
                # compiling nothing; graphmend mends that assembly for rewritten code. The
                # original with its assembly mended so is what the mended program's counts
                # are measured against (seed 700222: 0 graphs, where it compiles 7).
                observe(ASSEMBLY_AS_FOR_REWRITTEN_CODE, mode)
                worse = worse_counts(
                    mode, counted[(ASSEMBLY_AS_FOR_REWRITTEN_CODE, mode)], counted[("mended", mode)]
                )
            if worse and _CHECK_IMPORT in program.source and _checks_made_eagerly_go_further(
                reference, observe("original", mode), observe(CHECKS_MADE_EAGERLY, mode)
            ):
                # The traced helper raised RuntimeError where the eager one raised the
                # program's own error, which the program caught and ran on: the original
                # compiled stopped there, compiling nothing of the code past the check,
                # which the mended program (its kept call made eagerly, as the helper
                # runs eagerly) and eager run. The original with its checks made so is
                # what the counts are measured against (seeds 740074 and 740202: the
                # hooks and functions called after a caught check compiled graphs the
                # original compiled never reached).
                worse = worse_counts(mode, counted[(CHECKS_MADE_EAGERLY, mode)], counted[("mended", mode)])
            report.worse += worse
        difference = first_difference(mode, call_labels(program, inputs), reference, actual)
        if difference is None:
            continue
        difference.exposed = exposed_dynamo_error(difference)
        if mode == "eager":
            report.differences.append(difference)
            continue
        original_compiled = observe("original", mode)
        under_inductor = mode.endswith("inductor")
        # Under AOTAutograd the original compiled drops a draw nothing uses, which the
        # mended run keeps (graphmend.runtime.trace_hooks): its generator may stand where the
        # original compiled with the ``eager`` backend, which keeps such draws, leaves it.
        draws_kept = (lambda: observe("original", "compiled:eager")) if mode != "compiled:eager" else None
        joint_backward = mode != "compiled:eager"
        if _each_call_is_the_originals(
            reference, original_compiled, actual, output_lines_apart=under_inductor, draws_kept=draws_kept,
            zero_signs_aside=joint_backward,
        ):
            report.torch_own.append(difference)
        elif compile_state.tests_compile_state(program.source) and _each_call_is_the_originals(
            reference, original_compiled, actual, output_lines_apart=under_inductor, draws_kept=draws_kept,
            zero_signs_aside=joint_backward, others=(observe(COMPILE_STATE_AS_TRACED, "eager"),),
        ):
            report.compile_state_answers.append(difference)
        elif compile_state.tests_compile_state(program.source) and _answers_explain(
            program, observe, original_compiled, actual, output_lines_apart=under_inductor, draws_kept=draws_kept,
            zero_signs_aside=joint_backward,
        ):
            report.compile_state_answers.append(difference)
        elif program.features.get("check-call") and _each_call_is_the_originals(
            reference, observe(CHECKS_MADE_EAGERLY, mode), actual, output_lines_apart=under_inductor,
            draws_kept=draws_kept, zero_signs_aside=joint_backward,
        ):
            # A check call graphmend keeps is made outside TorchDynamo, raising (and
            # caught) as eagerly where the traced helper raises RuntimeError: past such a
            # call the original compiled is no reference, the original with its checks
            # made so is (seeds 7349 and 91042: AOTAutograd's gradients of the calls
            # that then ran on, summed in its order, zeros for an unused graph output;
            # 93284: after the traced check failed once, TorchDynamo ran the original's
            # frame eagerly on every later call, where it traces the mended one and a
            # later op fails while tracing). Reported apart, in the summary.
            report.checks_made_eagerly.append(difference)
        elif _each_call_is_the_originals(
            reference, traced_op_failures(reference, original_compiled, actual, alone := original_compiled_alone(mode)),
            actual, output_lines_apart=under_inductor, draws_kept=draws_kept, zero_signs_aside=joint_backward,
            others=(original_compiled, calls_alone_as_observed(reference, actual, alone)),
        ):
            # Seeds 132739 and 133609: TorchDynamo (or AOTAutograd) failed on the original
            # on every call, so no original run shows what TorchDynamo does at the op the
            # mended run reached; it is what it does at any op that fails while traced.
            # Seed 221043: the original compiled ran the op eagerly only because
            # TorchDynamo gave up its frame on an earlier call; called on that input
            # with TorchDynamo's caches fresh, it traced the op and raised the same error.
            report.traced_op_failures.append(difference)
        elif mode != "compiled:eager" and _DRAWS.search(program.source) and _each_call_is_the_originals(
            reference, observe(DRAWS_AS_EAGERLY, mode), actual, output_lines_apart=under_inductor,
            draws_kept=draws_kept, zero_signs_aside=joint_backward,
        ):
            report.draws_as_eagerly.append(difference)
        elif _failed_on_assembly(original_compiled) and _each_call_is_the_originals(
            reference, observe(ASSEMBLY_AS_FOR_REWRITTEN_CODE, mode), actual, output_lines_apart=under_inductor,
            draws_kept=draws_kept, zero_signs_aside=joint_backward,
        ):
            report.assembly_as_for_rewritten_code.append(difference)
        elif under_inductor and any(
            _each_call_is_the_originals(
                reference, compiled, actual, float_bits_aside=True, output_lines_apart=True, draws_kept=draws_kept,
            )
            for compiled in _numeric_references(program, observe, mode, original_compiled)
        ):
            report.numeric.append(difference)
        else:
            report.differences.append(difference)
    return report


def _checks_made_eagerly_go_further(reference, original_compiled, checks_made_eagerly) -> bool:
    """Whether the original with its check helper made outside TorchDynamo raised as eager
    on some call where the original compiled raised otherwise, and on no call the other
    way round: the traced helper's error is what ended the original compiled's call
    early, so it is no reference for what the code past the check compiles. Calls are
    compared one by one, not from the first that differs (seed 840475: TorchDynamo's own
    error on an unrelated op ended the first call of both alike, and the later calls
    raised the program's errors made eagerly, the traced helper's compiled). Errors
    alone are compared, those the other module's ``caller`` catches and prints too
    (seed 810095): under AOTAutograd the random draws differ anyway."""

    def as_eager(expected, observed) -> bool:
        return (expected.error, _caught_by_the_caller(expected)) == (observed.error, _caught_by_the_caller(observed))

    further = False
    for expected, original, made_eagerly in zip(reference, original_compiled, checks_made_eagerly):
        original_as_eager, made_as_eager = as_eager(expected, original), as_eager(expected, made_eagerly)
        if original_as_eager and not made_as_eager:
            return False
        further = further or (made_as_eager and not original_as_eager)
    return further


def _caught_by_the_caller(observation: Observation) -> list[str]:
    """The lines the other module's ``caller`` printed for the errors it caught
    (``grammar.other_module_source``)."""
    return [
        line for event in observation.events if event[0] == "stdout"
        for line in str(event[1]).splitlines() if line.startswith(CAUGHT_BY_THE_CALLER)
    ]


def _numeric_references(program, observe, mode: str, original_compiled):
    """The compiled runs inductor's rounding is allowed against: the original compiled,
    and for a program with a check call the original with its checks made eagerly (seed
    343001: the reference past a failed check prints a sum near zero that inductor's
    reduction order in another partition rounds to other digits)."""
    yield original_compiled
    if program.features.get("check-call"):
        yield observe(CHECKS_MADE_EAGERLY, mode)


def _failed_on_assembly(observations: list[Observation]) -> bool:
    return any(o.error is not None and o.error[1] == "AssertionError" and _ASSEMBLY_FAILURE in o.error[3] for o in observations)


class _EveryFrameAsRewritten(threading.local):
    """``store.converting`` answering that every frame is of rewritten code."""

    rewritten = property(lambda self: True, lambda self, value: None)


@contextlib.contextmanager
def _assembly_as_for_rewritten_code(applies: bool):
    """While ``applies``: TorchDynamo's assembly of every frame is mended as graphmend mends
    it for frames of rewritten code (``ASSEMBLY_AS_FOR_REWRITTEN_CODE``)."""
    if not applies:
        yield
        return
    converting = store.converting
    store.converting = _EveryFrameAsRewritten()
    try:
        yield
    finally:
        store.converting = converting


@contextlib.contextmanager
def _draws_as_eagerly(applies: bool):
    """While ``applies``: every compiled graph is taken as mended code's by graphmend's
    random-draw policy (``DRAWS_AS_EAGERLY``)."""
    if not applies:
        yield
        return
    taken_as_mended = trace_hooks._compiled_from_mended_code
    trace_hooks._compiled_from_mended_code = lambda output: True
    try:
        yield
    finally:
        trace_hooks._compiled_from_mended_code = taken_as_mended


def _answers_explain(program: Program, observe, original_compiled, actual, draws_kept=None, **comparison) -> bool:
    """The mended run is the original's with its compile-state tests answering as some
    mixture of traced and eager code, traced at least where the original compiled traced
    (``compile_state``)."""
    answer_sets = compile_state.answer_sets(program.source)
    if answer_sets is None:
        return False
    runs = {chosen: observe(compile_state.variant(chosen), "eager") for chosen in answer_sets}
    kept_run: list = []

    def kept_call(call: int):
        if not kept_run:
            kept_run.append(draws_kept())
        return kept_run[0][call : call + 1]

    def same_call(reference, compiled, observed, call: int) -> bool:
        kept = (lambda: kept_call(call)) if draws_kept is not None else None
        return _each_call_is_the_originals([reference], [compiled], [observed], draws_kept=kept, **comparison)

    return compile_state.explained_by_answers(runs, original_compiled, actual, same_call)


def traced_op_failures(
    eager: list[Observation], original_compiled: list[Observation], actual: list[Observation], alone=None,
) -> list[Observation]:
    """A reference where the original compiled is none: eager's observations, with the
    error of each call on which the mended compiled raised TorchDynamo's
    ``TorchRuntimeError`` for an op, replaced by that error, where either (1) torch's
    compiler failed on the original compiled and eager raised at that very line, or (2)
    the original compiled, called on that input set with TorchDynamo's caches fresh
    (``alone(index)``), raised that same error there (seed 232488: eagerly the op's error
    is caught by the program's ``contextlib.suppress``; TorchDynamo's, raised while
    converting the frame, is not). TorchDynamo reports an op that
    fails while it traces it as its own error (the class counted as TorchDynamo's own
    whenever the original compiled shows it); in (1) the original compiled never got
    that far, in (2) it ran the op eagerly only because it had given up the op's frame
    on an earlier call (a frame of the rewritten code is another code object, which
    that call did not give up). Every other piece of the call is still eager's
    (``_each_call_is_the_originals`` then sets the globals and generator aside from that
    call, as for any call that failed as TorchDynamo did)."""
    reference = []
    for index, (expected, original, observed) in enumerate(zip(eager, original_compiled, actual)):
        replaced = expected
        where_eager_raised = (
            original.compiler_failed and expected.error is not None
            and expected.error_site is not None and observed.error_site == expected.error_site
        )
        if _traced_op_error(observed) and (where_eager_raised or _raised_alone_as_observed(alone, index, observed)):
            replaced = Observation(**{**vars(expected), "error": observed.error})
        reference.append(replaced)
    return reference


def calls_alone_as_observed(eager: list[Observation], actual: list[Observation], alone) -> list[Observation]:
    """Eager's observations, with each call on which the original compiled, called on
    that input set with TorchDynamo's caches fresh (``alone(index)``), raised
    TorchDynamo's error as the mended run did, replaced by that whole run: the call stops at the error, so its output is that
    run's, not eager's (seed 232488: eagerly a log line follows the op the program's
    ``suppress`` caught)."""
    return [
        alone(index) if _raised_alone_as_observed(alone, index, observed) else expected
        for index, (expected, observed) in enumerate(zip(eager, actual))
    ]


def _traced_op_error(observed: Observation) -> bool:
    return observed.error is not None and observed.error[:2] == ("torch._dynamo.exc", "TorchRuntimeError")


def _raised_alone_as_observed(alone, index: int, observed: Observation) -> bool:
    """Only for a call that raised TorchDynamo's trace-time error is the original run
    alone (a run of its own per call asked). The error is TorchDynamo's rendering of the
    op's failure on fake tensors, whose size symbols TorchDynamo names by its own history
    of that frame (seed 290026: the mended frame, traced on the earlier calls, was
    recompiled for new sizes as ``(s55, s10) + (s17, s94)``; the original, traced first
    on that call, shares the symbol of the sizes equal there, ``(s55, s10) + (s10, s94)``):
    the names are set aside, nothing else."""
    if alone is None or not _traced_op_error(observed):
        return False
    first = alone(index)
    return (
        first is not None and first.error_site == observed.error_site and first.error is not None
        and _without_size_symbol_names(first.error) == _without_size_symbol_names(observed.error)
    )


_SIZE_SYMBOL = re.compile(r"\b[su]\d+\b")


def _without_size_symbol_names(error: tuple) -> tuple:
    return tuple(_SIZE_SYMBOL.sub("s?", part) if isinstance(part, str) else part for part in error)


# What a call observed, in pieces that can each be the original's eager or compiled one:
# the value and the exception go together (a call returns or raises).
_OBSERVED_TOGETHER = (
    ("error", "value"), ("gradients",), ("arguments",), ("globals",), ("rng",), ("events",), ("traceback",),
)


def _each_call_is_the_originals(
    eager: list[Observation], compiled: list[Observation], actual, float_bits_aside: bool = False,
    output_lines_apart: bool = False, draws_kept=None, zero_signs_aside: bool = False, others=(),
) -> bool:
    """True when, on every call, each piece of what the mended run observed (its outcome,
    the gradients, the arguments, the globals, the generator, the output) is what the
    original observed on that call, eagerly or compiled. Where the original compiled
    differs from eager (TorchDynamo's own difference: a dropped random draw, gradients
    summed in another order) the mended run may match either: graphmend keeps an unused
    draw as eagerly (``graphmend.runtime.trace_hooks``) while the gradients are compiled.
    Each global, each argument, and each input's gradient, is a piece of its own (one
    may hold a draw kept as eagerly, another the text of a tensor computed in a graph,
    or the zeros AOTAutograd gives an input of a graph whose output was not used: seed
    40497; seed 80296: ``box.t`` holds a draw kept as eagerly while ``items`` misses an
    entry because the call failed as the original compiled did).
    Printed tensors, in the output and in text the program keeps in a global (seed
    53307: a log handler writing into a list), are compared without their autograd
    node's name, and stderr tracebacks without the number torch gives a graph's code
    (``_torch_names_aside``). From a call that raised (or not) as the
    original compiled did and not as eager code did, the globals (which hold what every call
    before put there, and what that call did before it failed) are no longer compared, nor
    the generator. ``float_bits_aside``: tensors compare by
    dtype, shape and flags only (inductor's fused kernels round otherwise than eager's).
    ``output_lines_apart`` (inductor only): the output has as many lines as an original's,
    and each line is that original line, eager or compiled. Under inductor the original
    compiled draws random numbers with inductor's own generator and graphmend draws
    eager's (``fallback_random``, to keep the generator's state), so one printed line can
    be eager's random tensor and the next inductor's rounding of a sum (seed 54150).
    ``draws_kept`` (called only when needed) gives the original's run compiled with the
    ``eager`` backend: where a call's generator state is neither eager's nor the original
    compiled's, it may be that one's. AOTAutograd drops a random draw whose value nothing
    uses and graphmend keeps it, as eager code does (``graphmend.runtime.trace_hooks``); where
    TorchDynamo also ran other code than eager code (seed 70303: a check raising inside
    a loop in a ``try`` ended the loop early, as it did without graphmend), the mended
    generator is where TorchDynamo's code with every draw kept leaves it.
    ``zero_signs_aside`` (AOTAutograd's backends): gradients compare with the sign of
    their zeros set aside. The backward AOTAutograd traces computes a zero gradient as
    +0 where eager autograd's may give -0 (seed 71221: ``y.neg_()`` before a product
    with a zero draw); every other bit still counts. ``others``: further observations a
    piece may equal (``COMPILE_STATE_AS_TRACED``)."""

    def piece(observation, names, index=None):
        values = tuple(getattr(observation, name) for name in names)
        if names == ("events",) and output_lines_apart:
            lines = _event_pieces(_torch_names_aside(observation.events))
            if float_bits_aside:
                lines = _strip_float_bits(lines)
            return len(lines) if index is None else lines[index] if index < len(lines) else None
        if names == ("arguments",) and index is not None:  # one argument: its own observable
            return _strip_float_bits(observation.arguments[2][index]) if float_bits_aside else observation.arguments[2][index]
        if index is not None:  # one global, or one input's gradient: each its own observable
            values = values[0][index] if values[0] is not None and index < len(values[0]) else None
        if names in (("events",), ("globals",)):
            values = _torch_names_aside(values)
        if names == ("gradients",) and zero_signs_aside:
            values = _zero_signs_aside(values)
        return _strip_float_bits(values) if float_bits_aside else values

    def pieces(observation, after_torch_failure, torch_failure_now):
        for names in _OBSERVED_TOGETHER:
            if names == ("globals",):
                # From the call that failed as TorchDynamo's compiled run did (seed 73023:
                # the globals then hold what ran before the failure, draws kept as eagerly).
                if not (after_torch_failure or torch_failure_now):
                    yield from ((names, index) for index in range(len(observation.globals)))
            elif names == ("rng",):
                # Where the call failed as TorchDynamo's compiled run did, how far the
                # generator got depends on which graphs ran before the failing trace
                # (seed 53506: mended, the joined graph failed to trace before drawing).
                if not (after_torch_failure or torch_failure_now):
                    yield names, None
            elif names == ("arguments",) and _per_argument(observation.arguments):
                yield from ((names, index) for index in range(len(observation.arguments[2])))
            elif names == ("gradients",) and _per_input(observation.gradients):
                yield from ((names, index) for index in range(len(observation.gradients)))
            elif names == ("traceback",):
                # A call that failed as TorchDynamo's compiled run did (its trace-time error
                # for an op that fails) has that error's frames, not the program's.
                if not torch_failure_now:
                    yield names, None
            elif names == ("events",) and output_lines_apart:
                yield names, None  # how many lines
                yield from ((names, index) for index in range(len(_event_pieces(observation.events))))
            else:
                yield names, None

    kept: list[Observation] | None = None
    after_torch_failure = False
    for call, (reference, original, observed) in enumerate(zip(eager, compiled, actual)):
        torch_failure_now = observed.error != reference.error
        for names, index in pieces(observed, after_torch_failure, torch_failure_now):
            if piece(observed, names, index) in (
                piece(reference, names, index), piece(original, names, index),
                *(piece(other[call], names, index) for other in others if call < len(other)),
            ):
                continue
            if names == ("rng",) and draws_kept is not None:
                kept = kept if kept is not None else draws_kept()
                if call < len(kept) and observed.rng == kept[call].rng:
                    continue
            return False
        if observed.error != reference.error:
            # The call failed (or returned) as TorchDynamo's own compiled run did, not as
            # eager code: what the globals hold from here on sums calls that went two ways
            # (seed 40225: inductor could not compile the call that printed to a list).
            after_torch_failure = True
    return True


_FAKE_TENSOR_FAILURE = "Dynamo failed to run FX node with fake tensors"
_AUTOGRAD_NODE = re.compile(r",\s*grad_fn=<\w+>")
_GENERATED_CODE_KEY = re.compile(r"<eval_with_key>\.\d+")
# What ``torch.fx``'s ``_WrappedCall`` prints to stderr when an error is raised inside a
# graph: the traceback, then the graph's generated code around the failing line (lines
# of code are indented, the rest blank); group 1 is the error's own last line.
_ERROR_INSIDE_A_GRAPH = re.compile(
    r"Traceback \(most recent call last\):\n  File \"[^\"\n]*torch/fx/graph_module\.py\"[\s\S]*?"
    r"\n([A-Za-z_][\w.]*: [^\n]*|[A-Za-z_][\w.]*)\n\nCall using an FX-traced Module, line \d+ of the traced "
    r"Module's generated forward function:\n[\s\S]*?~~~ <--- HERE\n(?:(?: {4}[^\n]*)?\n)*"
)


def _torch_names_aside(value):
    """Text with two names torch gives left out: a printed tensor's autograd node's name
    (not whether it has one): a tensor made inside a graph prints
    ``grad_fn=<CompiledFunctionBackward>``, the same tensor made eagerly its op's node,
    and which statements end up in a graph is what graphmend changes (seed 40850); and
    the number of a graph's generated code, ``<eval_with_key>.13``, counted over the
    process, in the traceback torch prints to stderr when an error is raised inside a
    graph (seed 290481: ``1 // box.n`` with ``box.n`` a size input and 0; the original
    compiled printed the same traceback, numbered by the graphs compiled before it); and
    of that traceback, all but the error's own line: the rest is the graph's code around
    the failing line, and which statements a graph holds is what graphmend changes (seed
    302052: Where joined the branch holding ``1 // box.n`` to the graph before it); and
    in the text of TorchDynamo's trace-time error (``Dynamo failed to run FX node with
    fake tensors``) printed by the program, the names of size symbols, which count the
    symbols made before in the trace (seed 331446: ``s17`` in the original's message,
    ``s57`` in the mended one's, whose runtime tests had read more sizes)."""
    if isinstance(value, str):
        value = _ERROR_INSIDE_A_GRAPH.sub(r"<error inside a graph, printed by torch: \1>\n", value)
        if _FAKE_TENSOR_FAILURE in value:
            value = _SIZE_SYMBOL.sub("s?", value)
        return _GENERATED_CODE_KEY.sub("<eval_with_key>", _AUTOGRAD_NODE.sub(", grad_fn=<node>", value))
    if isinstance(value, (tuple, list)):
        return type(value)(_torch_names_aside(item) for item in value)
    return value


_NEGATIVE_ZERO_BITS = {"torch.float16": -(2**15), "torch.bfloat16": -(2**15), "torch.float32": -(2**31), "torch.float64": -(2**63)}


def _zero_signs_aside(value):
    """Tensors (as ``Normaliser`` keys) with each -0.0 read as +0.0."""
    if isinstance(value, tuple) and len(value) > 5 and value[0] == "tensor" and value[1] in _NEGATIVE_ZERO_BITS:
        negative_zero = _NEGATIVE_ZERO_BITS[value[1]]
        return value[:5] + (tuple(0 if bits == negative_zero else bits for bits in value[5]),) + value[6:]
    if isinstance(value, tuple):
        return tuple(_zero_signs_aside(item) for item in value)
    return value


def _per_argument(arguments) -> bool:
    """``("tuple", identity, (x, y, box, items, table))``: the state of each argument."""
    return isinstance(arguments, tuple) and len(arguments) == 3 and arguments[0] == "tuple" and isinstance(
        arguments[2], tuple
    )


def _per_input(gradients) -> bool:
    """``(x.grad, y.grad)``, not the ``("backward raised", ...)`` of a failed backward."""
    return isinstance(gradients, tuple) and len(gradients) >= 2 and gradients[0] != "backward raised"


_FLOAT_IN_TEXT = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")


# A printed number this near zero is what is left of a sum of terms that cancel: its
# digits are rounding error alone, and inductor's reduction order gives its own (seed
# 343001: 5.6624e-07 where the reference printed -1.3113e-06 and eager -2.2650e-06).
_NEAR_ZERO = 1e-4


def _number_as_compared(text: str) -> str:
    number = float(text)
    return "0" if abs(number) < _NEAR_ZERO else f"{number:.4g}"


def _strip_float_bits(value):
    """Tensors by dtype, shape and flags; numbers written in text to 4 significant digits,
    and as 0 below ``_NEAR_ZERO`` (a value computed by inductor's kernels prints its own
    last digits: seed 71925)."""
    if isinstance(value, tuple) and value and value[0] == "tensor":
        return value[:5]
    if isinstance(value, (tuple, list)):
        return type(value)(_strip_float_bits(v) for v in value)
    if isinstance(value, str):
        return _FLOAT_IN_TEXT.sub(lambda number: _number_as_compared(number.group()), value)
    return value


