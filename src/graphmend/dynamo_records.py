"""TorchDynamo's own records of graph breaks, graphs and recompilations.

One reader for ``graphmend explain``, ``graphmend.counting`` and the benchmark. It reads
what Dynamo knows as data, never the text it logs for people:

* a break: the fields Dynamo's ``unimplemented`` formats into its message (graph-break
  type, explanation, hints; ``torch._dynamo.exc.format_graph_break_message`` is wrapped
  to keep them), the exception it then handles (``InstructionTranslatorBase.
  log_graph_break`` is wrapped: one call per break, with the traced user stack and
  whether Dynamo gives up on the whole frame), and Dynamo's documentation page for
  that type (``get_gbid_documentation_link``);
* graphs and recompilations: Dynamo's structured trace (``torch._logging.
  trace_structured``, the records ``TORCH_TRACE`` and tlparse read), through a handler
  on its logger: one ``dynamo_output_graph`` event per graph, the ``recompile_reasons``
  artifact (the guard failures, as JSON) and the ``compilation_metrics`` event that
  names the recompiled function.

The wrapped functions return what they returned before; while nothing records, they
are not wrapped at all.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import linecache
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import graphmend

# Frames in graphmend's own runtime are never "the user's code" a break is reported at.
_GRAPHMEND_DIRECTORY = os.path.dirname(os.path.abspath(graphmend.__file__)) + os.sep


@dataclass(frozen=True)
class UserFrame:
    file: str
    line: int
    function: str


@dataclass
class GraphBreakRecord:
    """One graph break, as Dynamo describes it."""

    gb_type: str  # Dynamo's graph-break type, e.g. "Data-dependent branching"
    explanation: str = ""
    hints: list[str] = field(default_factory=list)
    reference: str | None = None  # Dynamo's page for this break type
    frames: list[UserFrame] = field(default_factory=list)  # the traced stack, outermost first
    skips_frame: bool = False  # Dynamo runs the whole frame eagerly (e.g. a break in a loop)
    cause: GraphBreakRecord | None = None  # the break this one was raised while handling
    context: str = ""  # Dynamo's developer context (the values involved)

    @property
    def frame(self) -> UserFrame | None:
        """Where Dynamo was tracing: the innermost traced frame (torch's code included)."""
        return self.frames[-1] if self.frames else None

    @property
    def user_frame(self) -> UserFrame | None:
        """The innermost frame in the user's code (not torch's, not graphmend's)."""
        users = [frame for frame in self.frames if is_user_file(frame.file)]
        return users[-1] if users else self.frame

    @property
    def root(self) -> GraphBreakRecord:
        """The first break of a chain: for a break in a loop, the break in that loop."""
        return self.cause.root if self.cause is not None else self

    @property
    def headline(self) -> str:
        return f"{self.gb_type}: {self.explanation}" if self.explanation else self.gb_type

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> dict:
        """One flat row for a report: the user's place, Dynamo's words, the category."""
        frame = self.user_frame
        file, line = (frame.file, frame.line) if frame else (None, None)
        return {
            "file": file,
            "line": line,
            "function": frame.function if frame else None,
            "source": linecache.getline(file, line).strip() if file and line else "",
            "gb_type": self.gb_type,
            "explanation": self.explanation,
            "hints": list(self.hints),
            "reference": self.reference,
            "cause": self.cause.gb_type if self.cause is not None else None,
            "skips_frame": self.skips_frame,
            "category": break_category(self),
        }

    @classmethod
    def from_json(cls, data: dict) -> GraphBreakRecord:
        data = dict(data)
        data["frames"] = [UserFrame(**frame) for frame in data.get("frames", [])]
        if data.get("cause") is not None:
            data["cause"] = cls.from_json(data["cause"])
        return cls(**data)


@dataclass
class Recompilation:
    """A function compiled again because the guards of every earlier compilation failed."""

    function: str
    file: str
    first_line: int
    compile_id: str  # Dynamo's "frame/attempt", e.g. "4/1"
    reasons: list[str]  # Dynamo's guard-failure reasons, one per earlier compilation

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Recompilation:
        return cls(**data)


@dataclass
class DynamoRecords:
    """What Dynamo recorded while ``recording`` was active."""

    breaks: list[GraphBreakRecord] = field(default_factory=list)
    graphs: int = 0
    recompilations: list[Recompilation] = field(default_factory=list)
    # Called with each record as it arrives (a break or a recompilation).
    listener: Callable[[GraphBreakRecord | Recompilation], None] | None = None
    # formatted message -> its fields, for messages formatted while recording
    _messages: dict[str, tuple[str, str, str, list[str]]] = field(default_factory=dict, repr=False)
    _pending_reasons: dict[str, list[str]] = field(default_factory=dict, repr=False)
    # id(break record) -> the compilation of a frame that logged it (all its attempts)
    _attempts: dict[int, tuple] = field(default_factory=dict, repr=False)

    @property
    def frames_skipped(self) -> int:
        """Frames Dynamo ran wholly eagerly because of a break in a loop in them. A frame
        whose first traced step breaks (nothing to resume from) is skipped too, but lost
        only what the resumed rest would have compiled; it counts as its break alone."""
        return sum(
            1 for record in self.breaks if record.skips_frame and record.gb_type == LOOP_BREAK_TYPE
        )

    def _add(self, record: GraphBreakRecord | Recompilation, attempt: tuple | None = None) -> None:
        if isinstance(record, GraphBreakRecord):
            self.breaks.append(record)
            if attempt is not None:
                self._attempts[id(record)] = attempt
        else:
            self.recompilations.append(record)
        if self.listener is not None:
            self.listener(record)

    def _forget_attempt(self, attempt: tuple) -> None:
        """Drop the breaks logged so far in the compilation of a frame that graphmend makes
        TorchDynamo trace again (``graphmend.runtime.trace_restarts``): no attempt so far compiled
        anything, and the next one logs the breaks that remain. (TorchDynamo logs a break
        in the attempt that finds it, then restarts to compile up to it; so the key is the
        frame's compilation, not the attempt.)"""
        kept = [record for record in self.breaks if self._attempts.get(id(record)) != attempt]
        dropped = [record for record in self.breaks if self._attempts.get(id(record)) == attempt]
        for record in dropped:
            del self._attempts[id(record)]
        self.breaks[:] = kept
        if dropped and self.listener is not None:
            self.listener(ForgottenBreaks(dropped))


@dataclass
class ForgottenBreaks:
    """Told to a listener when breaks it was told of are dropped again: those of a trace
    attempt graphmend abandoned (``DynamoRecords._forget_attempt``)."""

    breaks: list[GraphBreakRecord]


# --- where the records come from ----------------------------------------------------------

# Dynamo's type for a break in a loop, which makes it skip the whole frame.
LOOP_BREAK_TYPE = "graph break in loop"

Listener = Callable[["GraphBreakRecord | Recompilation | ForgottenBreaks"], None]

_ACTIVE: list[DynamoRecords] = []
_RESTORE: list[Callable[[], None]] = []


@contextlib.contextmanager
def recording(listener: Listener | None = None) -> Iterator[DynamoRecords]:
    """Record Dynamo's breaks, graphs and recompilations while the block runs."""
    records = start_recording(listener)
    try:
        yield records
    finally:
        stop_recording(records)


def start_recording(listener: Listener | None = None) -> DynamoRecords:
    """``recording`` without a block, for a process that records until it exits."""
    records = DynamoRecords(listener=listener)
    if not _ACTIVE:
        _install()
    _ACTIVE.append(records)
    return records


def stop_recording(records: DynamoRecords) -> None:
    if records in _ACTIVE:
        _ACTIVE.remove(records)
    if not _ACTIVE:
        while _RESTORE:
            _RESTORE.pop()()


def _install() -> None:
    from graphmend.torch_adapter import records as dynamo

    def keeping_fields(format_message):
        @functools.wraps(format_message)
        def format_and_keep_fields(gb_type, context, explanation, hints):
            message = format_message(gb_type, context, explanation, hints)
            for records in _ACTIVE:
                records._messages[message] = (gb_type, context, explanation, list(hints))
            return message

        return format_and_keep_fields

    _RESTORE.append(dynamo.wrap_break_message_formatting(keeping_fields))

    def recording(log_graph_break):
        @functools.wraps(log_graph_break)
        def log_and_record(self, code_options, reason, exc):
            if not getattr(exc, "logged", False):  # Dynamo logs each exception once
                try:
                    _record_break(code_options, exc, _current_compile())
                except Exception:  # recording must never change what Dynamo does
                    logging.getLogger(__name__).debug("could not record a graph break", exc_info=True)
            return log_graph_break(self, code_options, reason, exc)

        return log_and_record

    _RESTORE.append(dynamo.wrap_break_logging(recording))

    _listen_for_abandoned_traces()

    trace_log = dynamo.structured_trace_log()
    handler = _TraceHandler()
    saved_level = trace_log.level
    trace_log.addHandler(handler)
    trace_log.setLevel(logging.DEBUG)

    def remove_handler() -> None:
        trace_log.removeHandler(handler)
        trace_log.setLevel(saved_level)

    _RESTORE.append(remove_handler)


def _forget_abandoned_attempt(output) -> None:
    compile_key = _current_compile()
    if compile_key is not None:
        for records in _ACTIVE:
            records._forget_attempt(compile_key)


def _listen_for_abandoned_traces() -> None:
    """Be told of the trace attempts graphmend's runtime abandons, once it is loaded.
    Only mended code's runtime abandons traces, and recording an unmended program must
    not import it (importing it patches TorchDynamo: ``graphmend.torch_adapter``); a
    recording started before the runtime loaded (``graphmend explain``'s child, which
    starts recording before the script imports anything) listens from its first break."""
    import sys

    runtime_store = sys.modules.get("graphmend.runtime.store")
    if runtime_store is None or not _ACTIVE:
        return
    listeners = runtime_store.store.abandoned_trace_listeners
    if _forget_abandoned_attempt not in listeners:
        listeners.append(_forget_abandoned_attempt)
        _RESTORE.append(lambda: listeners.remove(_forget_abandoned_attempt))


def _current_compile() -> tuple | None:
    """TorchDynamo's (frame, compilation of that frame) being traced, the same over its
    restarted attempts."""
    from graphmend.torch_adapter import current_compile_key

    return current_compile_key()


def _record_break(code_options, exc, attempt: tuple | None = None) -> None:
    from graphmend.torch_adapter.records import traced_user_stack

    _listen_for_abandoned_traces()

    stack = getattr(exc, "real_stack", None) or traced_user_stack()
    frames = [
        UserFrame(
            summary.filename,
            summary.lineno or 0,
            source_function_name(summary.filename, summary.lineno or 0, summary.name),
        )
        for summary in stack
    ]
    if not frames:  # the frame's first instruction, as Dynamo reports it
        frames = [
            UserFrame(
                code_options["co_filename"],
                code_options["co_firstlineno"],
                code_options.get("co_name", ""),
            )
        ]
    for records in _ACTIVE:
        record = _record_from_message(records, getattr(exc, "msg", str(exc)), frames)
        if not record.gb_type:  # not raised through ``unimplemented``: its message is all there is
            record.gb_type = getattr(exc, "gb_type", None) or type(exc).__name__
            record.explanation = record.explanation or str(exc)
        record.skips_frame = bool(getattr(exc, "skip_frame", False))
        records._add(record, attempt)


def _record_from_message(
    records: DynamoRecords, message: str, frames: list[UserFrame]
) -> GraphBreakRecord:
    """A break's fields from the message Dynamo formatted for it. A break raised while
    Dynamo handled another one carries both messages, the earlier first."""
    own = records._messages.get(message)
    cause = None
    if own is None:
        known = [text for text in records._messages if text and text in message]
        last = max((text for text in known if message.endswith(text)), key=len, default=None)
        first = max((text for text in known if message.startswith(text)), key=len, default=None)
        own = records._messages.get(last) if last else None
        if first is not None and first != last:
            cause = _from_fields(records._messages[first], frames)
    if own is None:
        return GraphBreakRecord(gb_type="", frames=frames, cause=cause)
    record = _from_fields(own, frames)
    record.cause = cause
    return record


def _from_fields(
    fields: tuple[str, str, str, list[str]], frames: list[UserFrame]
) -> GraphBreakRecord:
    gb_type, context, explanation, hints = fields
    return GraphBreakRecord(
        gb_type=gb_type,
        explanation=explanation,
        hints=list(hints),
        reference=documentation_link(gb_type),
        frames=list(frames),
        context=context,
    )


def documentation_link(gb_type: str) -> str | None:
    """Dynamo's page for a graph-break type (None for a type it has none for)."""
    from graphmend.torch_adapter.records import graph_break_documentation_links

    link_of = graph_break_documentation_links()
    try:
        return link_of(gb_type)
    except Exception:  # noqa: BLE001 - a missing registry means no link, not a failure
        return None


class _TraceHandler(logging.Handler):
    """Reads Dynamo's structured trace: the event name and its metadata are data."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)

    def emit(self, record: logging.LogRecord) -> None:
        metadata = getattr(record, "metadata", None)
        if not isinstance(metadata, dict):
            return
        try:
            self._read(metadata, getattr(record, "payload", None))
        except Exception:  # noqa: BLE001 - a record we cannot read is not ours to fail on
            pass

    @staticmethod
    def _read(metadata: dict, payload) -> None:
        compile_id = f"{metadata.get('frame_id')}/{metadata.get('frame_compile_id')}"
        if "dynamo_output_graph" in metadata:
            for records in _ACTIVE:
                records.graphs += 1
        elif metadata.get("artifact", {}).get("name") == "recompile_reasons" and payload:
            reasons = json.loads(payload)
            reasons = [reasons] if isinstance(reasons, str) else [str(item) for item in reasons]
            for records in _ACTIVE:
                records._pending_reasons[compile_id] = reasons
        elif "compilation_metrics" in metadata:
            metrics = metadata["compilation_metrics"]
            if not metrics.get("recompile_reason"):
                return
            compile_id = metrics.get("compile_id") or compile_id
            file, first_line = metrics.get("co_filename") or "", metrics.get("co_firstlineno") or 0
            function = source_function_name(file, first_line, metrics.get("co_name") or "")
            for records in _ACTIVE:
                reasons = records._pending_reasons.pop(compile_id, [metrics["recompile_reason"]])
                records._add(
                    Recompilation(
                        function=function,
                        file=file,
                        first_line=first_line,
                        compile_id=str(compile_id),
                        reasons=reasons,
                    )
                )


# --- user code and categories -------------------------------------------------------------


def is_user_file(path: str) -> bool:
    if path.startswith("<"):
        return False
    absolute = os.path.abspath(path)
    if absolute.startswith(_GRAPHMEND_DIRECTORY):
        return False
    return not any(absolute.startswith(directory) for directory in _torch_directories())


@functools.cache
def _torch_directories() -> tuple[str, ...]:
    """Where torch lives, found without importing it (a reading process may not need it)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    locations = spec.submodule_search_locations if spec is not None else None
    return tuple(os.path.abspath(location) + os.sep for location in locations or ())


OTHER_CATEGORY = "other"

# Dynamo's graph-break types (its registry's ``Gb_type``) -> the paper's categories.
# A type that only says "a call Dynamo cannot trace" is sorted by the call at the site.
_CATEGORY_OF_TYPE = {
    "Data-dependent branching": "DC",
    "Data-dependent branching with non-constant __bool__": "DC",
    "Data-dependent assertion failed (cannot compile partial graph)": "VG",
    "logging.Logger method not supported for non-export cases": "LC",
    "Unsupported Tensor.item() call with capture_scalar_outputs=False": "TI",
    "Tensor.tolist() with non-integer tensor": "TI",
    "Dynamic shape operator": "DS",
    "Dynamic shape operator (no meta kernel)": "DS",
    "Attempted to use `torch.nn.functional.one_hot` with data-dependent output shape": "DS",
    "Data dependent operator": "DO",
}
_UNTRACEABLE_CALL_TYPES = frozenset(
    {
        "Failed to trace builtin operator",
        "Attempted to call function marked as skipped",
        "Unsupported function call",
    }
)
_LOGGING_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}
    | {"warning_once", "info_once"}
)


def break_category(record: GraphBreakRecord) -> str:
    """The paper's category (DC LC VG TI DS DO, else ``other``) of one break; a break
    raised while Dynamo handled another (a break in a loop) takes that one's category."""
    root = record.root
    frame = root.user_frame
    return category_for(root.gb_type, frame.file if frame else None, frame.line if frame else None)


def category_for(gb_type: str, file: str | None, line: int | None) -> str:
    """The paper's category of a break of Dynamo's type ``gb_type`` at ``file:line``: from
    the type, and where the type is not specific, from the statement at the site."""
    category = _CATEGORY_OF_TYPE.get(gb_type)
    if category == "DC" and is_validation_guard(file, line):
        return "VG"
    if category is not None:
        return category
    if gb_type in _UNTRACEABLE_CALL_TYPES and calls_output_at(file, line):
        return "LC"
    return OTHER_CATEGORY


@functools.lru_cache(maxsize=64)
def _parsed_file(path: str) -> ast.Module | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None


def _nodes_at(path: str | None, line: int | None) -> list[ast.AST]:
    tree = _parsed_file(path) if path and line else None
    if tree is None:
        return []
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.stmt, ast.expr))
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]


def source_function_name(path: str, line: int, code_name: str) -> str:
    """The function the user wrote around ``path:line``, for a code object named
    ``code_name``. A name the file never defines is one Dynamo generated (the function
    it resumes in after a break): the innermost ``def`` around the line is the user's."""
    tree = _parsed_file(path) if path and line else None
    if tree is None:
        return code_name
    definitions = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]
    if any(node.name == code_name for node in definitions) or code_name.startswith("<"):
        return code_name
    around = [
        node
        for node in definitions
        if not isinstance(node, ast.ClassDef)
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    return max(around, key=lambda node: node.lineno).name if around else code_name


def is_validation_guard(path: str | None, line: int | None) -> bool:
    """The line lies in an ``assert``, or in the test of an ``if`` whose body is a lone
    ``raise`` and which has no ``else``."""
    for node in _nodes_at(path, line):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.If) and node.test.lineno <= line <= (node.test.end_lineno or line):
            return len(node.body) == 1 and isinstance(node.body[0], ast.Raise) and not node.orelse
    return False


def calls_output_at(path: str | None, line: int | None) -> bool:
    """A ``print``, ``warnings.warn`` or logger-method call spans the line."""
    for node in _nodes_at(path, line):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if isinstance(function, ast.Name) and function.id == "print":
            return True
        if isinstance(function, ast.Attribute):
            owner = function.value.id if isinstance(function.value, ast.Name) else ""
            if owner == "warnings" and function.attr == "warn":
                return True
            if function.attr in _LOGGING_METHODS and owner != "warnings":
                return True
    return False
