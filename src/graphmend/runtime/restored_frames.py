"""The frames of an exception a lowered guard restores: the user's, as the original's.

The original raised from its helper's frame, called from the frames of the helpers
above it. Inside a graph those helpers were inlined: no frame of theirs exists, and the
compiled function's own frame stands at its ``def`` line while the graph runs. So the
exception is raised from frames made for the purpose, one per frame of the original
(``raise_from``): each runs a code object with the user's file, function name, first
line and the very positions of the call (or of the ``raise``) in the original, so a
traceback prints the same lines, carets included, and pytest shows each function's
source from its ``def``. Where the call leaves the compiled region, the boundary
(``compiled_calls``) links the caller's frame to the first of them, dropping the
compiled frame and the frames of torch and graphmend between (``keep_only_user_frames``).

The places are read while tracing, from TorchDynamo's stack of inlined frames, and are
part of the trap site: a helper inlined from two callers has two sites.
"""

from __future__ import annotations

import ast
import builtins
import dis
import linecache
import os
import traceback
import types
from dataclasses import dataclass

from graphmend.runtime.store import store

# In the globals of every made frame: what the boundary looks for.
_MARK = "__graphmend_restored_frame__"
_RAISED = "__graphmend_restored_exception__"
_CALL = "__graphmend_call__"
_CODE = "__graphmend_code__"
_GLOBALS = "__graphmend_globals__"
_LOCAL_NAMES = "__graphmend_local_names__"
_HELPER = "__graphmend_helper__"
_HELPER_ARGUMENTS = "__graphmend_helper_arguments__"


@dataclass(frozen=True)
class FramePlace:
    """Where one frame of the original stood: its code's file, names and first line,
    and the source positions (line, end line, column, end column) of the instruction
    it was running."""

    filename: str
    function_name: str
    qualified_name: str
    first_line: int
    positions: tuple[int, int, int | None, int | None]
    local_names: tuple[str, ...] = ()

    @property
    def line(self) -> int:
        return self.positions[0]


def _place(code: types.CodeType, positions, line: int) -> FramePlace:
    if positions is None or positions.lineno is None:
        positions = (line, line, None, None)
    else:
        positions = (positions.lineno, positions.end_lineno or positions.lineno,
                     positions.col_offset, positions.end_col_offset)
    return FramePlace(code.co_filename, code.co_name, getattr(code, "co_qualname", code.co_name),
                      code.co_firstlineno, positions, code.co_varnames + code.co_cellvars + code.co_freevars)


def callers_while_tracing(translator) -> tuple[FramePlace, ...]:
    """The calls that led to the frame ``translator`` traces, outermost first: one per
    frame TorchDynamo inlined it from, up to the frame it compiles."""
    places = []
    caller = translator.parent
    while caller is not None:
        instruction = caller.current_instruction
        places.append(_place(caller.f_code, getattr(instruction, "positions", None), caller.lineno))
        caller = caller.parent
    return tuple(reversed(places))


def _at_line(code: types.CodeType, line: int, opname_prefix: str):
    """The positions of each instruction of ``code`` at ``line`` whose name begins with
    ``opname_prefix``, in order."""
    for instruction in dis.get_instructions(code):
        positions = getattr(instruction, "positions", None)  # Python 3.11 and later
        if instruction.opname.startswith(opname_prefix) and positions is not None and positions.lineno == line:
            yield positions


def raise_in(code: types.CodeType, line: int) -> FramePlace:
    """The place of the ``raise`` at ``line`` of ``code`` (the mended code keeps the
    original's ``raise``, with its positions, in the branch it runs eagerly)."""
    return _place(code, next(_at_line(code, line, "RAISE_VARARGS"), None), line)


def call_in(code: types.CodeType, line: int) -> FramePlace:
    """The place of the outermost call at ``line`` of ``code``: a lowered check call,
    whose original statement the mended code keeps, with its positions, in the branch
    it runs eagerly."""
    calls = [
        positions for positions in _at_line(code, line, "CALL")
        if positions.col_offset is not None and positions.end_col_offset is not None
    ]
    outermost = min(
        calls, key=lambda p: (p.col_offset, -(p.end_lineno or line), -p.end_col_offset), default=None
    )
    return _place(code, outermost, line)


def _span(place: FramePlace) -> tuple[int, int, int, int]:
    """Positions for the made instruction: the original's, or, where those have no
    columns, the whole statement on its line (which a traceback prints without carets)."""
    line, end_line, column, end_column = place.positions
    if column is not None and end_column is not None:
        return line, end_line, column, end_column
    text = linecache.getline(place.filename, line).rstrip()
    return line, line, len(text) - len(text.lstrip()), len(text)


def _code(place: FramePlace, statement: ast.stmt) -> types.CodeType:
    """``statement`` compiled as if it stood at ``place``: line numbers count from the
    function's first line, which the code object then takes as its own."""
    line, end_line, column, end_column = _span(place)
    first = min(place.first_line, line)
    for node in ast.walk(statement):
        if "lineno" in node._attributes:
            node.lineno, node.end_lineno = line - first + 1, end_line - first + 1
            node.col_offset, node.end_col_offset = column, end_column
    module = ast.Module(body=[statement], type_ignores=[])
    code = compile(module, place.filename, "exec", dont_inherit=True)
    replaced = {"co_firstlineno": first, "co_name": place.function_name}
    if hasattr(code, "co_qualname"):
        replaced["co_qualname"] = place.qualified_name
    return code.replace(**replaced)


def _name(identifier: str) -> ast.Name:
    return ast.Name(id=identifier, ctx=ast.Load())


def _call_statement() -> ast.stmt:
    arguments = [_name(_CODE), _name(_GLOBALS), ast.Dict(keys=[], values=[])]
    return ast.Expr(value=ast.Call(func=_name(_CALL), args=arguments, keywords=[]))


def _raise_statement() -> ast.stmt:
    return ast.Raise(exc=_name(_RAISED), cause=None)


def _helper_call_statement() -> ast.stmt:
    call = ast.Call(func=_name(_HELPER), args=[ast.Starred(value=_name(_HELPER_ARGUMENTS), ctx=ast.Load())], keywords=[])
    return ast.Expr(value=call)


def _codes_for(places: tuple[FramePlace, ...], calls_helper: bool = False) -> tuple[types.CodeType, ...]:
    with store.restored_frame_codes_lock:
        codes = store.restored_frame_codes.get((places, calls_helper))
        if codes is None:
            codes = tuple(_code(place, _call_statement()) for place in places[:-1])
            codes += (_code(places[-1], _helper_call_statement() if calls_helper else _raise_statement()),)
            store.restored_frame_codes[(places, calls_helper)] = codes
        return codes


def raise_from(exception: BaseException, places: tuple[FramePlace, ...]) -> None:
    """Raise ``exception`` from one made frame per place, the last place's raising it.

    Each frame runs with locals of its own (empty: the values of an inlined frame
    live in the graph), so that a traceback's locals (pytest's ``--showlocals``) show
    none of graphmend's names."""
    raising = {"__builtins__": builtins, _MARK: True, _RAISED: exception}
    del exception
    try:
        _run_made_frames(_codes_for(places), places, raising)
    finally:
        # The traceback holds the raising frame, and its globals the exception: a
        # cycle that only the garbage collector would free (the original's is freed
        # as soon as the program lets go of the exception).
        del raising[_RAISED]


def call_from(places: tuple[FramePlace, ...], helper, arguments: tuple) -> None:
    """Call ``helper(*arguments)`` from one made frame per place, the last place's
    making the call at its positions: a lowered check's helper, called as the original
    called it, raises its error from its own frames, as eagerly."""
    calling = {"__builtins__": builtins, _MARK: True, _HELPER: helper, _HELPER_ARGUMENTS: arguments}
    try:
        _run_made_frames(_codes_for(places, calls_helper=True), places, calling)
    finally:
        del calling[_HELPER_ARGUMENTS]


def _run_made_frames(codes: tuple[types.CodeType, ...], places: tuple[FramePlace, ...], innermost: dict) -> None:
    namespace = innermost
    for code in reversed(codes[1:]):
        namespace = {"__builtins__": builtins, _MARK: True, _CALL: exec, _CODE: code, _GLOBALS: namespace}
    namespace[_LOCAL_NAMES] = places[0].local_names
    exec(codes[0], namespace, {})  # noqa: S102


def _made(entry: types.TracebackType) -> bool:
    return _MARK in entry.tb_frame.f_globals


def _same_function(frame: types.FrameType, code: types.CodeType) -> bool:
    own = frame.f_code
    return (own.co_filename, own.co_name, own.co_firstlineno) == (code.co_filename, code.co_name, code.co_firstlineno)


def keep_only_user_frames(error: BaseException) -> None:
    """Link the traceback of ``error``, if raised from made frames, from the frame that
    called the compiled frame straight to the first made frame (which stands for the
    compiled frame, at the line of its call). Done once: the first made frame is then
    marked as linked."""
    entries = []
    entry = error.__traceback__
    while entry is not None and not _made(entry):
        entries.append(entry)
        entry = entry.tb_next
    if entry is None or entry.tb_frame.f_globals[_MARK] is not True:
        return
    first_made = entry
    first_made.tb_frame.f_globals[_MARK] = "linked"
    code = first_made.tb_frame.f_code
    for index in range(len(entries) - 1, 0, -1):
        compiled = entries[index].tb_frame
        if _same_function(compiled, code):
            entries[index - 1].tb_next = first_made
            _take_locals(first_made.tb_frame, compiled)
            return


def _take_locals(made: types.FrameType, compiled: types.FrameType) -> None:
    """Give the frame that stands for the compiled frame that frame's locals (those of
    the original code: not TorchDynamo's temporaries)."""
    try:
        names = made.f_globals.get(_LOCAL_NAMES, ())
        values = compiled.f_locals
        made.f_locals.update({name: values[name] for name in names if name in values})
    except Exception:  # noqa: BLE001 - locals are for display only
        pass


_LAUNCHER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cli", "run.py")


def _user_stacks_begin_at_the_script(filter_stack):
    """Wrap TorchDynamo's ``filter_stack``, which makes the "user code traceback" of its
    graph-break and recompilation logs from the whole stack above its own frames: under
    ``graphmend run`` that stack begins with graphmend's launcher, where ``python
    script.py`` begins it at the script. The frames up to the launcher's ``exec`` of the
    script are left out (applied by ``graphmend.torch_adapter``)."""

    def filtered(stack):
        kept = filter_stack(stack)
        launched = [index for index, frame in enumerate(kept) if frame.filename == _LAUNCHER and frame.name == "_execute"]
        if not launched:
            return kept
        return traceback.StackSummary.from_list(list(kept)[launched[-1] + 1:])

    filtered._graphmend_wrapped = True
    return filtered

