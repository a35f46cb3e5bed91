"""TorchDynamo's resumable states, counted over the program's own calls.

At a break it cannot resume from (a name it cannot find, an unsupported bytecode),
TorchDynamo compiles the graph up to the last *resumable state*, an instruction where the
value stack was empty and the graph already held more than one call, and runs the rest
of the frame eagerly. With no such state it gives the whole frame up: the frame runs
eagerly on this call and every later one.

The runtime functions rewritten code calls add calls of their own to the graph while
traced (``operands_combine`` reads each operand's sizes, which under dynamic shapes are
``size`` and comparison nodes). Counted, they make a resumable state where the original
has none: the mended frame then compiles its first op where the original frame was given
up, and a later call that traces it again fails on fake tensors (``TorchRuntimeError``)
where the original raised the op's own error eagerly (``t.clamp_`` of a leaf that requires grad, before a branch reading an undefined name).
So TorchDynamo's test is made here with those calls left out.

The same holds for a frame that traces no op at all. TorchDynamo skips such a frame (it
runs eagerly, with no graph), unless the frame asked whether it is being compiled
(``torch.compiler.is_compiling()``), whose answer eager code would not share
(``mark_inconsistent_side_effects``). Rewritten code asks on every rewritten statement,
and its eager path is the original statement: a frame of the program's that traced no
op compiled an empty graph once mended, one graph more than the original (fuzz seed
790033: a branch on a length, in a module that keeps a fixed tensor). Only the
program's own questions count: graphmend's (``__graphmend__.is_compiling()`` in
rewritten code whose bytecode asks no other way, and its runtime's, inlined into the
program's frame) mark nothing.
"""

from __future__ import annotations

import re
import weakref

from graphmend.runtime.trace_decisions import is_runtime_file

_CALLS = ("call_function", "call_method", "call_module")
_FRAME_FILE = re.compile(r'^\s*File "([^"]+)", line \d+')

def made_by_the_runtime(node) -> bool:
    """Whether the innermost frame TorchDynamo recorded for ``node`` is in graphmend's
    runtime (a node without a recorded frame is the program's)."""
    trace = node.meta.get("stack_trace")
    if not trace:
        return False
    innermost = None
    for line in trace.splitlines():
        found = _FRAME_FILE.match(line)
        if found:
            innermost = found.group(1)
    return innermost is not None and is_runtime_file(innermost)


def program_made_more_than_one_call(output) -> bool:
    """TorchDynamo's ``count_calls() > 1``, over the calls the program made."""
    calls = 0
    for node in output.graph.nodes:
        if node.op in _CALLS and not made_by_the_runtime(node):
            calls += 1
            if calls > 1:
                return True
    return False


def _count_only_the_programs_calls(original):
    """TorchDynamo's ``is_non_empty_graph``, over the program's calls (applied by
    ``graphmend.torch_adapter``)."""

    def is_non_empty_graph(self) -> bool:
        if program_made_more_than_one_call(self.output):
            # As TorchDynamo's own: once true, true for the rest of the trace.
            self.is_non_empty_graph = lambda: True
            return True
        return False

    is_non_empty_graph._graphmend_wrapped = True
    return is_non_empty_graph


def _runtime_questions_mark_nothing(original):
    """TorchDynamo's ``mark_inconsistent_side_effects``, ignored where only graphmend
    asked: from one of its runtime functions inlined into a frame of the program's, or
    from rewritten code whose every such question is ``__graphmend__.is_compiling()``
    (applied by ``graphmend.torch_adapter``). A runtime function TorchDynamo traces as a
    frame of its own (``checks.called_outside_torchdynamo``, called from a frame run
    eagerly) and the program's own questions mark the frame as before."""

    def mark_inconsistent_side_effects(self) -> None:
        code = getattr(self, "f_code", None)
        inlined = getattr(getattr(self, "output", None), "root_tx", self) is not self
        if inlined and is_runtime_file(getattr(code, "co_filename", "") or ""):
            return None
        if code is not None and _only_graphmend_asks(code, getattr(self, "f_globals", {})):
            return None
        return original(self)

    mark_inconsistent_side_effects._graphmend_wrapped = True
    return mark_inconsistent_side_effects


_ASKED_ONLY_BY_GRAPHMEND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _only_graphmend_asks(code, module_globals) -> bool:
    from graphmend.rewrite.templates import RUNTIME_NAME
    from graphmend.runtime.graph_inspection import is_rewritten_code
    from graphmend.torch_adapter.tracing import asks_whether_compiling_only_through

    try:
        return _ASKED_ONLY_BY_GRAPHMEND[code]
    except (KeyError, TypeError):
        pass
    try:
        answer = is_rewritten_code(code) and asks_whether_compiling_only_through(code, module_globals, RUNTIME_NAME)
    except Exception:  # noqa: BLE001 - cannot read the code: the program may be asking
        answer = False
    try:
        _ASKED_ONLY_BY_GRAPHMEND[code] = answer
    except TypeError:
        pass
    return answer
