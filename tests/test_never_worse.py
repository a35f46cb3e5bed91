"""A mended frame compiles no more graphs and records no more breaks than the original
(issue 46): a user's backend that runs its graph as given is recognised as keeping the
graph's order; a claim refused while tracing leaves the original's breaks, no more (the
attempts TorchDynamo abandoned count none, and a kept check call breaks only where the
original's did)."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings

import pytest
import torch

from graphmend.core.legality import condition_id
from graphmend.runtime import backends, reset
from graphmend.runtime.store import store
from helpers import assert_equivalent, graphs_and_breaks, original_and_mended
from tests.rules.test_trap_checks import known_test_helper  # noqa: F401 - a fixture
from tests.rules.test_trap_checks import program as check_program

TWO_PRINTS = """
import torch

def f(x):
    y = x * 2
    print("first", y.shape)
    y = y + 1
    print("second", y.shape)
    return y.sin()
"""


def _graphs_and_printed(function, backend_for_counter):
    """Graphs the backend was given in one fresh compiled call, and the printed text."""
    counter = [0]
    backend = backend_for_counter(counter)
    torch._dynamo.reset()
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        torch.compile(function, backend=backend)(torch.ones(2))
    return counter[0], printed.getvalue()


def _returning_the_forward(counter):
    def backend(gm, example_inputs):
        counter[0] += 1
        return gm.forward

    return backend


def _returning_the_module(counter):
    def backend(graph_module, example_inputs):
        counter[0] += 1
        return graph_module

    return backend


class _CountingObject:
    def __init__(self, counter):
        self.counter = counter

    def __call__(self, gm, example_inputs):
        self.counter[0] += 1
        return gm.forward


def _wrapping_the_forward(counter):
    def backend(gm, example_inputs):
        counter[0] += 1
        forward = gm.forward
        return lambda *arguments: forward(*arguments)

    return backend


@pytest.mark.parametrize("backend_for_counter", [_returning_the_forward, _returning_the_module, _CountingObject])
def test_a_users_backend_that_returns_its_graph_keeps_two_outputs_in_one_graph(backend_for_counter):
    """The usual counting backend of a test runs the graph as ``eager`` does: the second
    output in a graph keeps no break (it did, as if the backend could reorder them)."""
    original, mended, _ = original_and_mended(TWO_PRINTS)
    before = _graphs_and_printed(original.f, backend_for_counter)
    after = _graphs_and_printed(mended.f, backend_for_counter)
    assert before == (3, "first torch.Size([2])\nsecond torch.Size([2])\n")
    assert after == (1, before[1])


def test_a_backend_that_wraps_the_graph_may_reorder_and_keeps_one_output_per_graph():
    original, mended, _ = original_and_mended(TWO_PRINTS)
    before = _graphs_and_printed(original.f, _wrapping_the_forward)
    after = _graphs_and_printed(mended.f, _wrapping_the_forward)
    assert (before[0], after[0]) == (3, 2)
    assert after[1] == before[1]


def _other(gm, example_inputs):
    return gm.forward


def _passes_it_on(gm, example_inputs):
    return _other(gm, example_inputs)


def _reads_its_graph(gm, example_inputs):
    gm.graph.lint()
    return gm.forward


def _replaces_it(gm, example_inputs):
    gm = example_inputs
    return gm.forward


def _keeps_it_in_a_closure(gm, example_inputs):
    return lambda *arguments: gm(*arguments)


@pytest.mark.parametrize(
    "backend", [_passes_it_on, _reads_its_graph, _replaces_it, _keeps_it_in_a_closure, len, "eager"]
)
def test_only_a_backend_that_returns_its_graph_unchanged_is_recognised(backend):
    assert not backends.returns_its_graph_unchanged(backend)


def test_returning_the_graph_or_its_forward_is_recognised():
    assert backends.returns_its_graph_unchanged(_other)
    assert backends.returns_its_graph_unchanged(lambda gm, example_inputs: gm)
    assert backends.returns_its_graph_unchanged(_CountingObject([0]))


# A count kept a tensor for the check that reads it (Trap's ``.item()``), then refused.
COUNT_CHECKED = """
    def f(x, w):
        h = x * w
        count = (h > 0).sum().item()
        torch_compilable_check(count == h.shape[0], f"{count} of {h.shape[0]} entries are positive")
        return h * 2
"""

COUNT_PRINTED_THEN_CHECKED = """
    def f(x, w):
        h = x * w
        count = (h > 0).sum().item()
        print("count", h.shape)
        torch_compilable_check(count == h.shape[0], f"{count} of {h.shape[0]} entries are positive")
        return h * 2
"""


@pytest.mark.usefixtures("known_test_helper")
def test_a_check_of_a_count_refused_under_grad_is_the_helper_traced_with_no_break():
    """Under grad, with a backend whose backward graphmend cannot check
    (``backend_differentiates_as_written``), every claim is refused: the count is a
    Python int again, which the helper traced checks with no break. Made eagerly
    (``checks.call_eagerly``), the kept call broke the graph: 1 break, mended 2."""
    from torch._dynamo.utils import counters

    original, mended, _ = original_and_mended(check_program(COUNT_CHECKED))
    arguments = (torch.arange(4.0) + 1, torch.ones(4, requires_grad=True))
    counts = []
    for module in (original, mended):
        reset()
        counter = [0]
        torch._dynamo.reset()
        counters.clear()
        torch.compile(module.f, backend=_wrapping_the_forward(counter))(*arguments)
        counts.append((counter[0], sum(counters["graph_break"].values())))
    assert counts == [(2, 1), (2, 1)]
    assert store.trace_time_declines  # the count's claim was refused while tracing
    assert_equivalent(original.f, mended.f, *arguments, backends=("eager", "aot_eager"))


@pytest.mark.usefixtures("known_test_helper")
def test_a_trace_abandoned_for_a_refused_claim_counts_no_break():
    """The unchanged ``print`` breaks the graph before the check: the count's claim is
    refused and the frame traced again. TorchDynamo had counted the print's break in the
    abandoned attempt (``counters["graph_break"]``) and counted it again: 2 breaks, mended 3."""
    from torch._dynamo.utils import counters

    original, mended, _ = original_and_mended(check_program(COUNT_PRINTED_THEN_CHECKED))
    arguments = (torch.arange(4.0) + 1, torch.ones(4))
    assert graphs_and_breaks(original.f, *arguments) == (2, 2)
    assert graphs_and_breaks(mended.f, *arguments) == (2, 2)
    assert sum(counters["graph_break"].values()) == 2
    assert store.trace_time_declines  # the count's claim was refused while tracing
    assert_equivalent(original.f, mended.f, *arguments, backends=("eager", "aot_eager"))


# A model's forward with a debugging print, a logger.warning and a data-dependent branch,
# run while autograd records: every claim is refused, the output's by the backend
# (``backend_differentiates_as_written``), the branch's by ``select``, whose arms require grad.
TRAINING_FORWARD = """
import logging
import torch

logger = logging.getLogger("graphmend_test_training_forward")

def f(x, w):
    h = torch.tanh(x @ w)
    print("debug: hidden", h.shape)
    h = h * 2
    logger.warning("forward with %d rows", h.shape[0])
    if h.abs().max() > 100:
        h = h * 0.5
    else:
        h = h * 1.0
    return h.sum()
"""


def test_claims_refused_under_grad_count_the_original_breaks():
    """Under a backend that may reorder (inductor; here one that wraps its graph) and
    with autograd recording, the frame is traced again with every claim refused: the
    original's 2 counted breaks became 3 in TorchDynamo's counters, the attempts
    abandoned counting theirs."""
    from torch._dynamo.utils import counters

    original, mended, _ = original_and_mended(TRAINING_FORWARD)
    counts = []
    for module in (original, mended):
        reset()
        graphs, printed = _graphs_and_printed_for(module.f, _wrapping_the_forward)
        counts.append((graphs, sum(counters["graph_break"].values()), printed))
    assert counts[0][:2] == (4, 2)
    assert counts[1] == counts[0]
    assert {condition_id(reason) for reason in store.trace_time_declines.values()} == {"W207", "G311"}


def _graphs_and_printed_for(function, backend_for_counter):
    from torch._dynamo.utils import counters

    counter = [0]
    torch._dynamo.reset()
    counters.clear()
    x, w = torch.ones(3, 4), torch.ones(4, 2, requires_grad=True)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        torch.compile(function, backend=backend_for_counter(counter))(x, w).backward()
    return counter[0], printed.getvalue()


ONE_WARNING = """
import warnings
import torch

def f(x):
    y = x * 2
    warnings.warn("careful")
    return y.sin()
"""


def _calls_with_recorders(function, recorders):
    """Graphs, breaks and recompilations over one call per recorder factory, each call
    inside its own ``catch_warnings`` with ``showwarning`` set to a new recorder (as a
    test harness sets one per call); and what the recorders saw."""
    from graphmend.counting import CountingBackend, recording_graph_breaks

    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(function, backend=backend)
    seen = []
    with recording_graph_breaks() as records:
        for make_recorder in recorders:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = make_recorder(seen)
                compiled(torch.ones(3))
    return backend.graphs, len(records.breaks), len(records.recompilations), seen


def _disabled_recorder(seen):
    @torch._dynamo.disable
    def record(message, category, filename, lineno, file=None, line=None):
        seen.append(("disabled", str(message), lineno))

    return record


def _python_recorder(seen):
    def record(message, category, filename, lineno, file=None, line=None):
        seen.append(("python", str(message), lineno))

    return record


def test_a_warning_recorder_made_anew_for_each_call_keeps_the_graph():
    """The in-graph warning's trace was guarded on ``warnings.showwarning`` itself: a
    recorder made for each call (``torch._dynamo.disable``d, as tests make them) freed the
    last one, TorchDynamo dropped the graph, and the frame compiled on every call: 3
    graphs over 3 calls where the original compiles 2 once."""
    reset()
    original, mended, _ = original_and_mended(ONE_WARNING)
    recorders = [_disabled_recorder] * 3
    before = _calls_with_recorders(original.f, recorders)
    assert before[:3] == (2, 1, 0)
    after = _calls_with_recorders(mended.f, recorders)
    assert after == (1, 0, 0, before[3])


def test_a_warning_recorder_of_python_code_is_decided_again():
    """Guarded on the code of ``torch._dynamo.disable``'s wrappers, a recorder that is
    plain Python code (which the in-graph warning may not call: ``_opaque_to_tracing``)
    fails the guard: the frame is traced again and the warning made eagerly, to it."""
    reset()
    original, mended, _ = original_and_mended(ONE_WARNING)
    recorders = [_disabled_recorder, _python_recorder, _disabled_recorder]
    before = _calls_with_recorders(original.f, recorders)
    after = _calls_with_recorders(mended.f, recorders)
    assert [kind for kind, _message, _line in after[3]] == ["disabled", "python", "disabled"]
    assert after[3] == before[3]
    assert after[2] >= 1  # the Python recorder made TorchDynamo trace the frame again


ONE_LOG = """
import logging
import torch

logger = logging.getLogger("never_worse_program")

def f(x):
    y = x + 1
    logger.warning("rows %d", 3)
    return y * 2
"""


class _PythonStream:
    """A stream whose ``write`` is Python code (traced code could write through it too)."""

    def __init__(self, seen):
        self.seen = seen

    def write(self, text):
        self.seen.append(("python", text))

    def flush(self):
        pass


def _text_stream_handler(seen):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.close = lambda: seen.append(("text", stream.getvalue()))
    return handler


def _python_stream_handler(seen):
    return logging.StreamHandler(_PythonStream(seen))


def _calls_with_handlers(module, handlers):
    """As ``_calls_with_recorders``, with a new handler on the logger for each call (as
    pytest's log capture and per-request servers add one)."""
    from graphmend.counting import CountingBackend, recording_graph_breaks

    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(module.f, backend=backend)
    seen = []
    module.logger.propagate = False
    with recording_graph_breaks() as records:
        for make_handler in handlers:
            handler = make_handler(seen)
            module.logger.addHandler(handler)
            try:
                compiled(torch.ones(3))
            finally:
                module.logger.removeHandler(handler)
                handler.close()
    return backend.graphs, len(records.breaks), len(records.recompilations), seen


def test_a_log_handler_made_anew_for_each_call_keeps_the_graph():
    """The in-graph record's trace was guarded on each handler's identity: a handler
    added for each call failed the guard, and the frame compiled on every call (fuzz
    seed 500012: 5 breaks where the original records 3; in 8 calls TorchDynamo's
    recompile limit would run the frame eagerly). Guarded on the handler's type."""
    reset()
    original, mended, _ = original_and_mended(ONE_LOG)
    handlers = [_text_stream_handler] * 3
    before = _calls_with_handlers(original, handlers)
    assert before[:3] == (2, 1, 0)
    after = _calls_with_handlers(mended, handlers)
    assert after == (1, 0, 0, before[3])
    assert [text for _kind, text in after[3]] == ["rows 3\n"] * 3


def test_a_log_handler_on_a_python_stream_is_decided_again():
    """A handler of the same type whose stream is another type (one whose ``write`` is
    Python code, which an in-graph record may not reach: ``_stream_is_opaque``) fails the
    stream's type guard: the frame is traced again and the record made eagerly."""
    reset()
    original, mended, _ = original_and_mended(ONE_LOG)
    handlers = [_text_stream_handler, _python_stream_handler, _text_stream_handler]
    before = _calls_with_handlers(original, handlers)
    after = _calls_with_handlers(mended, handlers)
    assert [kind for kind, _text in after[3]] == ["text", "python", "text"]
    assert after[3] == before[3]
    assert after[2] >= 1


# Where selects between the inputs themselves: with autograd recording through them,
# ``torch.where`` would not return what the taken arm computed, so the selection is made
# in Python, which broke the graph inside graphmend's runtime and again at the call.
SELECTED_INPUTS = """
import torch

def f(x, y):
    if (x > 0).all():
        z = x
    else:
        z = y
    return z * 10.0
"""


def test_a_selection_made_in_python_keeps_the_originals_one_break():
    original, mended, result = original_and_mended(SELECTED_INPUTS)
    assert "select(" in ast_text(result)
    x = torch.rand(4, requires_grad=True)
    y = torch.rand(4, requires_grad=True)
    reset()
    assert graphs_and_breaks(mended.f, x, y) == graphs_and_breaks(original.f, x, y) == (2, 1)
    assert condition_id(next(iter(store.trace_time_declines.values()))) == "W207"
    reset()
    # Inputs that require no grad select inside the graph: one graph, no break.
    assert graphs_and_breaks(mended.f, x.detach(), y.detach()) == (1, 0)
    assert_equivalent(original.f, mended.f, x, y, backends=("eager", "aot_eager"))


def ast_text(result) -> str:
    import ast

    return ast.unparse(result.tree)


# The first log call carries no tensor: TorchDynamo, seeing the original's call run
# eagerly at its break, skips logging's frames for good. Defer moves that call into the
# graph; the second, in a ``with`` block (which Defer leaves as it is), then ran eagerly
# first, with a tensor, and TorchDynamo compiled logging's own
# frames: ``Logger.warning``, ``_log``, ``makeRecord`` and ``LogRecord.__init__``, each
# breaking (fuzz seed 720079: 8 breaks to 15, ``LogRecord.__init__`` compiled on every call).
FIRST_LOG_CALL_MOVED = """
import logging
import torch

logger = logging.getLogger(__name__)

def f(x):
    logger.warning("start")
    y = x * 2
    with torch.no_grad():
        logger.warning("sum %s", y.sum())
    return y + 1
"""


def test_logging_frames_compile_no_more_than_the_originals_first_log_call_left_them():
    from graphmend.runtime.output_frames import is_logging_code

    reset()
    original, mended, _ = original_and_mended(FIRST_LOG_CALL_MOVED)
    x = torch.ones(3)
    before = graphs_and_breaks(original.f, x)
    after = graphs_and_breaks(mended.f, x)
    assert before == (2, 2)
    assert after == (2, 1)
    assert is_logging_code(logging.Logger.warning.__code__)
    assert not is_logging_code(original.f.__code__)
    assert_equivalent(original.f, mended.f, x, backends=("eager", "aot_eager"))


# The print reads a global list's length before anything is computed, and the list
# grows between calls: TorchDynamo compiles the frame again on every call. The
# original's frame breaks there before any op (no graph: the code after the print is a
# resume function, compiled once); with the print in the graph, every call compiled the
# frame's whole graph again (fuzz seed 710001: 2 graphs became 6).
def _graphs_and_breaks_over(module, argument_sets, after_each=None, dynamic=None) -> tuple[int, int]:
    """Graphs and breaks of ``module.f`` compiled once and called on each of
    ``argument_sets`` in turn (``after_each()`` between calls), printed text silenced."""
    from graphmend.counting import CountingBackend, recording_graph_breaks

    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(module.f, backend=backend, dynamic=dynamic)
    with contextlib.redirect_stdout(io.StringIO()), recording_graph_breaks() as records:
        for arguments in argument_sets:
            compiled(*arguments)
            if after_each is not None:
                after_each()
    return backend.graphs, len(records.breaks)


def _graphs_and_breaks_as_the_global_grows(module, calls: int = 4) -> tuple[int, int]:
    return _graphs_and_breaks_over(module, [(torch.ones(3),)] * calls, after_each=lambda: module.SEEN.append(1))


def _graphs_and_breaks_on_both_paths(module) -> tuple[int, int]:
    return _graphs_and_breaks_over(module, [(torch.ones(3), torch.ones(3) * sign) for sign in (1.0, -1.0)])


def _graphs_and_breaks_on_both_paths_of(module) -> tuple[int, int]:
    return _graphs_and_breaks_over(module, [(torch.ones(3) * sign, torch.ones(3)) for sign in (1.0, -1.0)])


def _graphs_and_breaks_over_calls(module, calls: int = 3) -> tuple[int, int]:
    return _graphs_and_breaks_over(module, [(torch.ones(3), torch.ones(3))] * calls, dynamic=False)


def _graphs_and_breaks_for_counts(module) -> tuple[int, int]:
    counts = [torch.tensor([1.0] * positives + [-1.0] * (4 - positives)) for positives in (1, 2, 3)]
    return _graphs_and_breaks_over(module, [(x,) for x in counts], dynamic=False)


def _kept_as_the_original(source: str, counted, counts: tuple[int, int], condition: str):
    """Mend ``source``; ``counted`` of each version is ``counts``, and ``condition`` is
    among the reasons claims were declined or refused."""
    reset()
    original, mended, _ = original_and_mended(source)
    assert counted(original) == counts
    assert counted(mended) == counts
    assert condition in {condition_id(reason) for reason in store.trace_time_declines.values()}
    return original, mended


PRINT_OF_A_GROWING_GLOBAL_FIRST = """
import torch

SEEN = []

def f(x):
    print("seen", len(SEEN))
    return x * 2 + 1
"""


def test_a_claim_before_any_op_on_a_changing_global_keeps_its_break():
    original, mended = _kept_as_the_original(PRINT_OF_A_GROWING_GLOBAL_FIRST, _graphs_and_breaks_as_the_global_grows, (1, 4), "G203")
    original.SEEN.clear()
    mended.SEEN.clear()
    assert_equivalent(original.f, mended.f, torch.ones(3), backends=("eager", "aot_eager"))


def test_a_claim_before_any_op_reading_no_global_value_joins_the_graph():
    """G203's must-not row: the same print without the global's length is still claimed."""
    reset()
    source = PRINT_OF_A_GROWING_GLOBAL_FIRST.replace('print("seen", len(SEEN))', 'print("seen")')
    original, mended, _ = original_and_mended(source)
    assert _graphs_and_breaks_as_the_global_grows(original) == (1, 1)
    assert _graphs_and_breaks_as_the_global_grows(mended) == (1, 0)


# The same print after ops and another output: the original's frame breaks at the first
# print, and the part from there to the second print is a resume function with no op,
# which alone compiles again as the list grows. The first print's claim joined that part
# to the ops before it; it depended on the second print's break being removed too, and is
# undone with it, so that the graph-less part is a frame of its own again.
PRINT_OF_A_GROWING_GLOBAL_AFTER_AN_OUTPUT = """
import torch

SEEN = []

def f(x):
    y = x * 2
    print("start")
    print("seen", len(SEEN))
    return y + 1
"""


def test_a_claim_joining_a_graph_less_part_that_keeps_its_break_is_undone():
    original, mended = _kept_as_the_original(PRINT_OF_A_GROWING_GLOBAL_AFTER_AN_OUTPUT, _graphs_and_breaks_as_the_global_grows, (2, 5), "G203")
    assert len(store.trace_time_declines) == 2
    original.SEEN.clear()
    mended.SEEN.clear()
    assert_equivalent(original.f, mended.f, torch.ones(3), backends=("eager", "aot_eager"))


# A log call between two prints that keep their breaks (the first after print options
# changed in the frame, the second before any op, reading a module global): joined, it
# is a graph of graphmend's operators alone, where the original's stretch between the
# prints computed nothing and compiled no graph (fuzz seed 740041: 2 graphs became 3).
OUTPUT_ALONE_BETWEEN_KEPT_BREAKS = """
import logging
import torch

logger = logging.getLogger("graphmend.tests.output_alone")
COUNT = 0

def f(x, y):
    torch.set_printoptions(precision=3)
    print("scaled", y * 1.5)
    logger.warning("shape %s", x.shape)
    print(f"count {COUNT + y.shape[-1]}")
    return torch.sigmoid(x)
"""


def test_a_graph_of_graphmends_operators_alone_keeps_the_original_breaks():
    reset()
    original, mended, _ = original_and_mended(OUTPUT_ALONE_BETWEEN_KEPT_BREAKS)
    arguments = (torch.ones(3), torch.ones(3))
    try:
        before = graphs_and_breaks(original.f, *arguments)
        after = graphs_and_breaks(mended.f, *arguments)
        assert before == (2, 3)
        assert after == before
        assert "G315" in {condition_id(reason) for reason in store.trace_time_declines.values()}
        assert_equivalent(original.f, mended.f, *arguments, backends=("eager", "aot_eager"))
    finally:
        torch.set_printoptions(profile="default")


def test_an_output_joined_to_an_op_of_the_program_stays_claimed():
    """G315's must-not row: with an op of the program's after the log call, the graph
    holds more than graphmend's operators, and it saves breaks."""
    reset()
    source = OUTPUT_ALONE_BETWEEN_KEPT_BREAKS.replace(
        'logger.warning("shape %s", x.shape)', 'logger.warning("shape %s", x.shape)\n    x = x + 1'
    )
    original, mended, _ = original_and_mended(source)
    arguments = (torch.ones(3), torch.ones(3))
    try:
        assert graphs_and_breaks(original.f, *arguments) == (3, 3)
        assert graphs_and_breaks(mended.f, *arguments) == (2, 1)
        assert "G315" not in {condition_id(reason) for reason in store.trace_time_declines.values()}
    finally:
        torch.set_printoptions(profile="default")



# Both paths of a branch that keeps its break compute nothing before the print after
# the ``if``: the original broke at the print on each path and shared the code after
# it, one resume function compiled once; joined, each path compiled that code into a
# graph of its own (fuzz seed 740054: one graph more).
PRINT_WHERE_THE_PATHS_OF_A_BRANCH_MEET = """
import torch

def f(x, y):
    if y.mean() < 0:
        z = x
    else:
        z = y
    print("chosen", z is x)
    return (z * 2).sin()
"""


def _assert_kept_where_the_paths_meet(source: str, counts: tuple[int, int]) -> None:
    """G204 keeps the print's break: on both paths the mended program compiles and breaks
    as the original (``counts``) and behaves as it does."""
    original, mended = _kept_as_the_original(source, _graphs_and_breaks_on_both_paths, counts, "G204")
    for sign in (1.0, -1.0):
        assert_equivalent(original.f, mended.f, torch.ones(3), torch.ones(3) * sign, backends=("eager", "aot_eager"))


def test_an_output_where_the_paths_of_a_branch_meet_keeps_its_break():
    _assert_kept_where_the_paths_meet(PRINT_WHERE_THE_PATHS_OF_A_BRANCH_MEET, (2, 3))


def test_an_output_where_the_paths_of_a_branch_meet_keeps_its_break_after_a_test_of_none():
    """G204 reads where a resume function resumes in TorchDynamo's copy of the code,
    which is longer than the function's own where it tests ``x is None`` (a jump on
    ``None`` is copied as a comparison and a jump): read by offset, the place was lost,
    G204 never held, and the print joined on both paths (2 graphs became 3)."""
    source = PRINT_WHERE_THE_PATHS_OF_A_BRANCH_MEET.replace(
        "def f(x, y):\n", "def f(x, y, scale=None):\n    if scale is not None:\n        x = x * scale\n"
    )
    _assert_kept_where_the_paths_meet(source, (2, 3))


PRINT_WHERE_THE_PATHS_MEET_AFTER_SUPER = """
import torch

class Base(torch.nn.Module):
    def forward(self, x):
        return x * 2

class Child(Base):
    def forward(self, x, y):
        x = super().forward(x)
        if y.mean() < 0:
            z = x
        else:
            z = y
        print("chosen", z is x)
        return (z * 2).sin()

CHILD = Child()

def f(x, y):
    return CHILD(x, y)
"""


def test_an_output_where_the_paths_of_a_branch_meet_keeps_its_break_after_a_zero_argument_super():
    """TorchDynamo copies ``super()`` with no arguments as ``super(__class__, self)``
    (before Python 3.12), two instructions more: read past, G204 held again (2 graphs
    had become 3)."""
    _assert_kept_where_the_paths_meet(PRINT_WHERE_THE_PATHS_MEET_AFTER_SUPER, (2, 4))


def test_an_output_on_one_path_of_a_branch_stays_claimed():
    """G204's must-not row: a print inside one arm, with an op after it on that path, is
    reached by that path alone; it joins the graph of that path."""
    reset()
    source = PRINT_WHERE_THE_PATHS_OF_A_BRANCH_MEET.replace(
        "        z = x\n", '        z = x\n        print("chosen x")\n        z = z + 1\n'
    )
    original, mended, _ = original_and_mended(source)
    before = _graphs_and_breaks_on_both_paths(original)
    after = _graphs_and_breaks_on_both_paths(mended)
    assert before == (3, 4)
    assert after == (3, 2)
    declined = {line: condition_id(reason) for (_file, line), reason in store.trace_time_declines.items()}
    assert declined == {11: "G204"}


# A helper that counts its calls in a module global, with a branch Where rewrites: the
# original broke inside the helper, so its caller's trace stopped at the call and only
# the helper's own frame guarded on the count, compiling again on each call. Inlined,
# the count's guard joins the caller, which compiles again on each call too, recording
# the breaks it keeps each time (fuzz seeds 740093 and 740137, kept as slow tests: one
# break more than the original). The claim keeps its break (G316).
HELPER_COUNTING_ITS_CALLS = """
import torch

COUNT = 0

def helper(t, u):
    global COUNT
    COUNT += 1
    if t.sum() > 0:
        return u * 2.0 - t
    return torch.relu(t) + torch.sigmoid(u)

def f(x, y):
    y = helper(y, x)
    torch._dynamo.graph_break()
    y = y.cos()
    torch._dynamo.graph_break()
    return y.sin()
"""


def _counted_where_the_count_is_guarded(source: str, guarded_counts: tuple[int, int]):
    """Torch 2.13 guards on the count's value, so G316 refuses, and the mended counts are
    the original's (``guarded_counts``); a later torch that does not guard on it refuses
    nothing, and the mended program breaks less (torch 2.15: 4 graphs/4 breaks became 3/2)."""
    from graphmend.torch_adapter import torch_version

    reset()
    original, mended, _ = original_and_mended(source)
    before = _graphs_and_breaks_over_calls(original)
    after = _graphs_and_breaks_over_calls(mended)
    refused = "G316" in {condition_id(reason) for reason in store.trace_time_declines.values()}
    if torch_version() == (2, 13):
        assert refused
        assert before == guarded_counts
    if refused:
        assert after == before
    else:
        assert after[0] <= before[0] and after[1] < before[1]
    return original, mended


def test_a_claim_in_a_helper_writing_a_guarded_global_keeps_its_break():
    original, mended = _counted_where_the_count_is_guarded(HELPER_COUNTING_ITS_CALLS, (6, 6))
    original.COUNT = mended.COUNT = 0
    assert_equivalent(original.f, mended.f, torch.ones(3), torch.ones(3), backends=("eager", "aot_eager"))


def test_a_claim_in_a_helper_whose_caller_counts_the_calls_keeps_its_break():
    """The caller writes the global before the call (a decorator counting calls): the
    original's caller frame compiled again on each call too, but with no op of its own;
    the joined one compiled the helper's graph again each time (5 graphs against 4)."""
    source = HELPER_COUNTING_ITS_CALLS.replace("    global COUNT\n    COUNT += 1\n", "").replace(
        "def f(x, y):\n", "def f(x, y):\n    global COUNT\n    COUNT += 1\n"
    )
    _counted_where_the_count_is_guarded(source, (4, 6))


def test_a_claim_in_a_helper_writing_no_global_joins_its_caller():
    """G316's must-not row: the same helper without its count is inlined, its break removed."""
    reset()
    source = HELPER_COUNTING_ITS_CALLS.replace("    global COUNT\n    COUNT += 1\n", "")
    original, mended, _ = original_and_mended(source)
    assert _graphs_and_breaks_over_calls(original) == (4, 4)
    assert _graphs_and_breaks_over_calls(mended) == (3, 2)
    assert "G316" not in {condition_id(reason) for reason in store.trace_time_declines.values()}


# The same where one arm of the branch breaks on its own before the paths meet: the
# print after the ``if`` is reached past that break and by the other arm (fuzz seed
# 750095: a warning after an ``if`` whose arm wrote to ``sys.stderr``).
PRINT_AFTER_AN_ARM_THAT_BREAKS = """
import torch

def f(x, y):
    if x.sum() > 0:
        y = y + 1
        torch._dynamo.graph_break()
    print("after")
    return (y * 2).sin()
"""


def test_an_output_reached_past_a_break_and_by_another_path_keeps_its_break():
    original, mended = _kept_as_the_original(PRINT_AFTER_AN_ARM_THAT_BREAKS, _graphs_and_breaks_on_both_paths_of, (3, 4), "G204")


# A count read with ``.item()`` breaks the graph, and the resume function begins with a
# print of it: the resume function guards on the count's value, so each new count
# compiles it again. The original's resume function broke at the print before any op
# and compiled no graph each time; joined, the print took the rest of the frame into a
# graph compiled again for each count (fuzz seed 750137: one graph more).
PRINT_OF_AN_ITEM_FIRST_IN_A_RESUME_FUNCTION = """
import torch

def f(x):
    count = (x > 0).sum().item()
    print("count", count)
    return (x * 2).sin()
"""


def test_an_output_first_in_a_resume_function_guarding_a_number_keeps_its_break():
    original, mended = _kept_as_the_original(PRINT_OF_AN_ITEM_FIRST_IN_A_RESUME_FUNCTION, _graphs_and_breaks_for_counts, (2, 4), "G203")


def test_an_output_after_an_op_in_a_resume_function_guarding_a_number_joins():
    """G203's must-not row for resumed numbers: with an op before the print in the resume
    function, the original compiled a graph there for each count too."""
    reset()
    source = PRINT_OF_AN_ITEM_FIRST_IN_A_RESUME_FUNCTION.replace(
        '    print("count", count)\n    return (x * 2).sin()', '    y = x * 2\n    print("count", count)\n    return y.sin()'
    )
    original, mended, _ = original_and_mended(source)
    assert _graphs_and_breaks_for_counts(original) == (5, 4)
    assert _graphs_and_breaks_for_counts(mended) == (4, 1)
    assert "G203" not in {condition_id(reason) for reason in store.trace_time_declines.values()}


# Positions found with ``nonzero`` break the graph, and the resume function prints their
# list first. On the first call the list's ``tolist()`` breaks inside the helper, and the
# print begins a resume function of its own; on the second there are no positions, the
# resume function is compiled again, and the empty list makes no break before the print.
# The original broke at the print there with no graph and ran the code after it as
# compiled on the first call; joined, that code was compiled again into a new graph
# (fuzz seed 740103: one graph more, one break fewer).
PRINT_OF_POSITIONS_FIRST_IN_A_FRAME_COMPILED_AGAIN = """
import torch

def as_list(positions):
    return positions.tolist()

def f(x):
    positions = (x > 0.5).nonzero()
    print("positions", as_list(positions))
    return (x * 2).sin()
"""


def _graphs_and_breaks_with_positions_then_none(module) -> tuple[int, int]:
    return _graphs_and_breaks_over(
        module, [(torch.tensor([1.0, -1.0, 1.0]),), (torch.tensor([-1.0, -1.0, -1.0]),)], dynamic=False
    )


def test_an_output_first_in_a_frame_compiled_again_keeps_its_break():
    original, mended = _kept_as_the_original(
        PRINT_OF_POSITIONS_FIRST_IN_A_FRAME_COMPILED_AGAIN, _graphs_and_breaks_with_positions_then_none, (2, 5), "G205"
    )
    for x in (torch.tensor([1.0, -1.0, 1.0]), torch.tensor([-1.0, -1.0, -1.0])):
        assert_equivalent(original.f, mended.f, x, backends=("eager", "aot_eager"))


def test_an_output_after_an_op_in_a_frame_compiled_again_joins():
    """G205's must-not row: with an op before the print in the frame compiled again, the
    original compiled a graph there too, and the print joins it."""
    reset()
    source = PRINT_OF_POSITIONS_FIRST_IN_A_FRAME_COMPILED_AGAIN.replace(
        '    print("positions", as_list(positions))\n    return (x * 2).sin()',
        '    y = x * 2\n    print("positions", as_list(positions))\n    return y.sin()',
    )
    original, mended, _ = original_and_mended(source)
    assert _graphs_and_breaks_with_positions_then_none(original) == (4, 5)
    assert _graphs_and_breaks_with_positions_then_none(mended) == (4, 4)
    assert "G205" not in {condition_id(reason) for reason in store.trace_time_declines.values()}



def test_an_empty_list_printed_in_a_frames_first_compilation_keeps_its_break():
    """D209: no positions on the first call, so the list is empty and a constant there,
    and the print joined; on the second the list's numbers are unread and the print
    keeps its break, and the code after it was compiled anew where the original's second
    compilation reused the resume function its first made after the same print (fuzz
    seed 810132: one graph more). An empty list keeps the break in a frame's first
    compilation."""
    reset()
    original, mended, _ = original_and_mended(PRINT_OF_POSITIONS_FIRST_IN_A_FRAME_COMPILED_AGAIN)
    calls = [(torch.tensor([-1.0, -1.0, -1.0]),), (torch.tensor([1.0, -1.0, 1.0]),)]
    before = _graphs_and_breaks_over(original, calls, dynamic=False)
    after = _graphs_and_breaks_over(mended, calls, dynamic=False)
    assert after == before
    assert "D209" in {condition_id(reason) for reason in store.trace_time_declines.values()}
    for x in calls:
        assert_equivalent(original.f, mended.f, *x, backends=("eager", "aot_eager"))


def test_an_output_first_in_a_frame_compiled_again_with_no_resume_function_at_its_line_joins():
    """G205's must-not row for a first compilation that joined the print: compiled again
    for another size, no resume function is there to share (keeping the break would
    compile the code after it into a new one), and the print joins again."""
    reset()
    original, mended, _ = original_and_mended(PRINT_OF_A_SHAPE_FIRST)
    sizes = [(torch.ones(3),), (torch.ones(4),)]
    assert _graphs_and_breaks_over(original, sizes, dynamic=False) == (2, 2)
    assert _graphs_and_breaks_over(mended, sizes, dynamic=False) == (2, 0)
    assert "G205" not in {condition_id(reason) for reason in store.trace_time_declines.values()}


PRINT_OF_A_SHAPE_FIRST = """
import torch

def f(x):
    print("start", x.shape)
    return x * 2
"""

# The ``if`` arm breaks nowhere, the ``else`` arm prints a line of text before assigning
# ``h3`` again; both reach the branch on ``h1``, where the original breaks. TorchDynamo
# makes one resume function per place and per order of the frame's live names: in the
# original, ``h3`` is dead where each arm's frame broke and is assigned after, so both
# reach the later break with (h1, h3) and share one resume function. Joined, the print
# keeps ``h3`` in its place, the names come as (h3, h1), and the code after the branch
# compiles again (fuzz seed 770094: one graph more).
PRINT_OF_TEXT_IN_AN_ARM_BEFORE_AN_ASSIGNMENT = """
import torch

SEEN = []

def f(x, y):
    h3 = y + 1
    h1 = x * 2
    if h3.sum() > 0:
        h3 = h1 * 3.0
    else:
        print("arm", h3.shape)
        h3 = x
    if h1.mean() < 0:
        SEEN.append(1)
    return h1 + h3
"""


def _graphs_and_breaks_on_each_arm(module) -> tuple[int, int]:
    return _graphs_and_breaks_over(module, [(torch.ones(3), torch.ones(3)), (torch.ones(3), torch.ones(3) * -3.0)])


def test_claims_whose_break_would_resume_in_another_order_keep_their_breaks():
    original, mended = _kept_as_the_original(
        PRINT_OF_TEXT_IN_AN_ARM_BEFORE_AN_ASSIGNMENT, _graphs_and_breaks_on_each_arm, (4, 4), "G317"
    )
    for y in (torch.ones(3), torch.ones(3) * -3.0):
        assert_equivalent(original.f, mended.f, torch.ones(3), y, backends=("eager", "aot_eager"))


def test_claims_joining_two_stretches_that_compute_join_where_the_break_resumes_in_another_order():
    """G317's must-not row: the print computes the sum it shows, so the original compiled
    a graph before its break and one after; joined, they are one graph, which pays for
    the resume function made again."""
    reset()
    source = PRINT_OF_TEXT_IN_AN_ARM_BEFORE_AN_ASSIGNMENT.replace('print("arm", h3.shape)', 'print("arm", h3.sum())')
    original, mended, _ = original_and_mended(source)
    assert _graphs_and_breaks_on_each_arm(original) == (5, 4)
    assert _graphs_and_breaks_on_each_arm(mended) == (5, 3)
    assert "G317" not in {condition_id(reason) for reason in store.trace_time_declines.values()}


# A module's forward prints a number attribute of its own before any op, and the one
# method runs for several instances, each with its own value: the graph-less part of
# each frame guards on that attribute. The original broke at the print, and the code
# after it was one resume function shared by the instances, compiled once; joined, the
# whole graph was compiled again for each instance (fuzz seed 740080: experts printing
# their index, 4 graphs more).
PRINT_OF_AN_INSTANCE_ATTRIBUTE_FIRST = """
import torch

class Layer(torch.nn.Module):
    def __init__(self, index):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((3,), 0.5 + index))
        self.index = index

    def forward(self, t):
        print("layer", self.index)
        return torch.tanh(t * self.scale)

LAYERS = [Layer(index) for index in range(3)]

def f(layer, x):
    return layer(x)
"""


def _graphs_and_breaks_over_the_layers(module) -> tuple[int, int]:
    return _graphs_and_breaks_over(module, [(layer, torch.ones(2, 3)) for layer in module.LAYERS], dynamic=False)


def test_an_output_first_in_a_method_guarding_an_attribute_of_its_instance_keeps_its_break():
    original, mended = _kept_as_the_original(PRINT_OF_AN_INSTANCE_ATTRIBUTE_FIRST, _graphs_and_breaks_over_the_layers, (1, 4), "G203")
    for index in range(3):
        assert_equivalent(
            lambda x, index=index: original.f(original.LAYERS[index], x),
            lambda x, index=index: mended.f(mended.LAYERS[index], x),
            torch.ones(2, 3), backends=("eager", "aot_eager"),
        )


def test_an_output_first_in_a_method_reading_no_attribute_of_its_instance_joins():
    """G203's must-not row for attributes of the frame's instances: the same print
    without the index guards on nothing that differs between the instances."""
    reset()
    source = PRINT_OF_AN_INSTANCE_ATTRIBUTE_FIRST.replace('print("layer", self.index)', 'print("layer")')
    original, mended, _ = original_and_mended(source)
    assert _graphs_and_breaks_over_the_layers(original) == (1, 2)
    assert _graphs_and_breaks_over_the_layers(mended) == (1, 0)
    assert "G203" not in {condition_id(reason) for reason in store.trace_time_declines.values()}


PRINT_OF_ARGUMENTS_FIRST = """
import torch

class Box:
    def __init__(self, n):
        self.n = n

def f(x, items, box, step):
    print("read", READ)
    return x * 2 + 1
"""

# What the print reads, each a value that changes from call to call.
# Graphs and breaks, and the reason the last trace kept the break: a number becomes
# symbolic on its second value, and the recompiled frame keeps the break where the
# first compilation made its resume function (G205).
KEPT = {"list length": ((1, 4), "G203"), "attribute": ((1, 2), "G205"), "number argument": ((1, 2), "G205")}
ARGUMENT_READS = {"list length": "len(items)", "attribute": "box.n", "number argument": "step"}


def _graphs_and_breaks_over_changing_arguments(module) -> tuple[int, int]:
    calls = [(torch.ones(3), [0] * call, module.Box(call), call) for call in range(4)]
    return _graphs_and_breaks_over(module, calls)


@pytest.mark.parametrize("read", sorted(ARGUMENT_READS))
def test_an_output_first_reading_a_changing_argument_keeps_its_break(read):
    """A print before any op of numbers read from the call's arguments (fuzz seed
    851579): the original compiles that part again, with no graph, for each new value,
    and runs the shared resume function; joined, each new value compiled the whole
    graph again (2 graphs became 5 over four calls)."""
    source = PRINT_OF_ARGUMENTS_FIRST.replace("READ", ARGUMENT_READS[read])
    original, mended = _kept_as_the_original(source, _graphs_and_breaks_over_changing_arguments, *KEPT[read])
    for call in range(3):
        assert_equivalent(
            lambda x, module=original, call=call: module.f(x, [0] * call, module.Box(call), call),
            lambda x, module=mended, call=call: module.f(x, [0] * call, module.Box(call), call),
            torch.ones(3), backends=("eager", "aot_eager"),
        )


def test_an_output_first_reading_an_argument_after_an_op_joins():
    """G203's must-not row for arguments: with an op before the print, the original
    compiles a graph for each new value too, and the mended frame no more."""
    reset()
    source = PRINT_OF_ARGUMENTS_FIRST.replace('print("read", READ)', 'x = x + 1\n    print("read", len(items), box.n, step)')
    original, mended, _ = original_and_mended(source)
    assert _graphs_and_breaks_over_changing_arguments(original) == (5, 4)
    assert _graphs_and_breaks_over_changing_arguments(mended) == (4, 0)
    assert "G203" not in {condition_id(reason) for reason in store.trace_time_declines.values()}


PRINT_IN_A_LOOP_BEFORE_AN_UNRESUMABLE_BREAK = """
import torch
import warnings

def f(x, y):
    h = y * 2.0 + 1.5
    for i in range(1):
        print("between", i)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                y = torch.relu(y) + 2.0
        except UserWarning as error:
            print("caught", error)
    return h + y
"""


def test_a_claim_in_a_loop_before_a_break_torchdynamo_cannot_resume_from_is_refused():
    """The original breaks at the print in a loop and TorchDynamo runs the frame
    eagerly. Joined, the next break is inside a ``try`` in the same loop, where
    TorchDynamo cannot resume: it compiled the frame up to the loop, a graph the original
    did not have (fuzz seed 852031, under inductor: 7 graphs became 8). The claim is
    refused in that frame (G310), which runs eagerly as the original's."""
    reset()
    original, mended, result = original_and_mended(PRINT_IN_A_LOOP_BEFORE_AN_UNRESUMABLE_BREAK)
    assert all(finding.fixed for finding in result.findings if finding.rule == "Defer")
    x, y = torch.ones(3), torch.ones(3)
    assert graphs_and_breaks(original.f, x, y) == (0, 1)
    assert graphs_and_breaks(mended.f, x, y) == (0, 1)
    assert "G310" in {condition_id(reason) for reason in store.trace_time_declines.values()}
    assert_equivalent(original.f, mended.f, x, y, backends=("eager", "aot_eager"))


def test_a_claim_outside_a_loop_before_a_break_torchdynamo_cannot_resume_from_joins():
    """G310's must-not row for this restart: outside a loop the original compiled the
    part before the print, and the mended frame compiles it with the print in it."""
    reset()
    source = PRINT_IN_A_LOOP_BEFORE_AN_UNRESUMABLE_BREAK.replace("    for i in range(1):\n", "    i = 0\n    if True:\n")
    original, mended, _ = original_and_mended(source)
    x, y = torch.ones(3), torch.ones(3)
    assert graphs_and_breaks(original.f, x, y) == (1, 2)
    assert graphs_and_breaks(mended.f, x, y) == (1, 1)
    assert "G310" not in {condition_id(reason) for reason in store.trace_time_declines.values()}
    assert_equivalent(original.f, mended.f, x, y, backends=("eager", "aot_eager"))


QUESTIONS_OF_COMPILING = """
import torch

ASKED = []
compiling = torch.compiler.is_compiling


class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.level = torch.tensor(0.25)

    @staticmethod
    def only_graphmend_asks(n, total):
        if n > 0:
            pass
        return total

    @staticmethod
    def the_program_asks(n, total):
        if n > 0:
            pass
        if torch.compiler.is_compiling():
            ASKED.append(n)
        return total

    @staticmethod
    def the_program_asks_through_an_alias(n, total):
        if n > 0:
            pass
        if compiling():
            ASKED.append(n)
        return total
"""


@pytest.mark.parametrize("name", ["only_graphmend_asks", "the_program_asks", "the_program_asks_through_an_alias"])
def test_a_frame_with_no_op_is_skipped_unless_the_program_asks_whether_it_is_compiled(name):
    """TorchDynamo compiles a frame that asked ``is_compiling()`` even when it traced no
    op (its side effects replayed, its return value from a graph), and skips it
    otherwise. Rewritten code asks on every rewritten statement (here Where's
    fixed-values test, offered in a class keeping a tensor attribute); those questions
    keep no frame from being skipped (fuzz seed 790033: 0 graphs had become 1), the
    program's own still do: skipped, the frame would run eagerly and append nothing."""
    original, mended, result = original_and_mended(QUESTIONS_OF_COMPILING)
    assert result.changed
    arguments = (3, torch.zeros(2))
    counts = graphs_and_breaks(getattr(original.Holder, name), *arguments)
    assert graphs_and_breaks(getattr(mended.Holder, name), *arguments) == counts
    assert original.ASKED == mended.ASKED == ([] if name == "only_graphmend_asks" else [3])
    if name == "only_graphmend_asks":
        assert counts == (0, 0)


# A helper that prints, called in a loop whose frame TorchDynamo gives up at a layer it
# cannot trace: the helper is then compiled as a frame of its own.
PRINT_IN_A_GIVEN_UP_LOOP = """
import torch

LOG = []


def helper(x, i):
    y = x.sin()
    print("step", i)
    LOG.append(i)
    return y.cos()


def opaque(x):
    torch._dynamo.graph_break()
    return x + 1


def main(x):
    for i in range(3):
        x = helper(x, i)
        x = opaque(x)
    return x
"""


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_an_output_in_a_helper_of_a_given_up_loop_is_joined_in_the_helpers_own_frame(backend):
    """G302 ``frame_was_not_given_up_while_tracing`` refuses the print in ``main``'s
    frame, which TorchDynamo gives up; the helper, compiled on its own each iteration,
    joins it: printed text and its order, the list, the values as the original's, and
    fewer graphs and breaks."""
    original, mended, _ = original_and_mended(PRINT_IN_A_GIVEN_UP_LOOP)
    x = torch.randn(4)
    assert_equivalent(original.main, mended.main, x, backends=(backend,))
    assert (graphs_and_breaks(original.main, x), graphs_and_breaks(mended.main, x)) == ((7, 6), (4, 3))
    assert "G302" in {condition_id(reason) for reason in store.trace_time_declines.values()}


PRINT_OF_A_LIST_READ_FROM_A_TENSOR = """
import torch

def as_list(values):
    return values.tolist()

def f(x, more):
    y = x * 2
    print("values", as_list(y.long()))
    if more:
        return y + 1
    return None
"""


def _graphs_and_breaks_over_new_values(module, more: bool) -> tuple[int, int]:
    values = ([1.0, 2.0], [3.0, 4.0], [5.0, 6.0])
    return _graphs_and_breaks_over(module, [(torch.tensor(value), more) for value in values], dynamic=False)


@pytest.mark.parametrize("more", [False, True], ids=["print-last", "op-after"])
def test_listed_values_read_before_the_call__a_list_from_tolist_keeps_its_break(more):
    """D209's must-not row: ``.tolist()`` breaks, so its list reaches the print's resume
    function as an input whose elements the frame never reads. The original's print
    breaks guarded on the list's length; printed in the graph, or merely compared with
    ``is ()`` by the runtime and unpacked with ``*`` at the handed-back call, each element
    was guarded on its value and the frame compiled again for each new list (with the
    print last: 3 breaks became 5; with an op after it: 2 graphs became 3)."""
    reset()
    original, mended, _ = original_and_mended(PRINT_OF_A_LIST_READ_FROM_A_TENSOR)
    before = _graphs_and_breaks_over_new_values(original, more)
    assert _graphs_and_breaks_over_new_values(mended, more) == before == ((2, 3) if more else (1, 3))
    if more:
        assert "D209" in {condition_id(reason) for reason in store.trace_time_declines.values()}
    for value in ([1.0, 2.0], [3.0, 4.0]):
        assert_equivalent(original.f, mended.f, torch.tensor(value), more, backends=("eager", "aot_eager"))


def test_listed_values_read_before_the_call__a_list_the_frame_builds_is_printed_in_the_graph():
    """D209's must-rewrite row: a list the frame builds of sizes it reads is printed in
    the graph; its break is gone."""
    reset()
    source = """
    import torch

    def f(x):
        y = x * 2
        print("sizes", [y.shape[0], y.dim()])
        return y + 1
    """
    original, mended, _ = original_and_mended(source)
    x = torch.ones(3)
    assert (graphs_and_breaks(original.f, x), graphs_and_breaks(mended.f, x)) == ((2, 1), (1, 0))
    assert_equivalent(original.f, mended.f, x, backends=("eager", "aot_eager"))


PRINT_BEFORE_A_HOOK_THAT_COUNTS_ITS_CALLS = """
import torch

HISTORY = []

class Probe(torch.nn.Module):
    def forward(self, t):
        return t

PROBE = Probe()
PROBE.register_forward_pre_hook(lambda module, inputs: HISTORY.append(len(HISTORY)))

def f(x):
    y = x * 2
    print("y", y)
    return PROBE(y)
"""


def _graphs_and_breaks_over_three_calls(module) -> tuple[int, int]:
    return _graphs_and_breaks_over(module, [(torch.ones(3),)] * 3, dynamic=False)


def test_claims_precede_no_guard_on_a_global_the_trace_writes__nothing_computed_after_keeps_its_break():
    """G320's must-not row: the hook's list is guarded on and written, so the frame
    compiles again on every call. The original's print broke after ``x * 2``, which
    compiled once, and its resume function computed nothing; joined, ``x * 2`` was
    compiled again on every call (1 graph became 3)."""
    original, mended = _kept_as_the_original(
        PRINT_BEFORE_A_HOOK_THAT_COUNTS_ITS_CALLS, _graphs_and_breaks_over_three_calls, (1, 1), "G320"
    )
    assert_equivalent(original.f, mended.f, torch.ones(3), backends=("eager", "aot_eager"))


def test_claims_precede_no_guard_on_a_global_the_trace_writes__an_op_after_joins():
    """G320's must-rewrite row: with an op after the print, the original's resume function
    made a graph on every call too; joined, the frame makes one graph a call, one fewer."""
    reset()
    source = PRINT_BEFORE_A_HOOK_THAT_COUNTS_ITS_CALLS.replace("return PROBE(y)", "return PROBE(y) + 1")
    original, mended, _ = original_and_mended(source)
    counts = (_graphs_and_breaks_over_three_calls(original), _graphs_and_breaks_over_three_calls(mended))
    assert counts == ((4, 1), (3, 0))
    assert_equivalent(original.f, mended.f, torch.ones(3), backends=("eager", "aot_eager"))


def test_listed_values_read_before_the_call__a_list_of_tensors_is_printed_in_the_graph():
    """D209's other must-rewrite row: elements the frame never read that are tensors are
    guarded on their shape and kind, not their values, as the graph's other inputs are;
    a list of them is printed in the graph."""
    reset()
    source = """
    import torch

    def f(x, items):
        y = x * 2
        print("items", items)
        return y + 1
    """
    original, mended, _ = original_and_mended(source)
    arguments = (torch.ones(3), [torch.arange(2.0), torch.zeros(2)])
    assert (graphs_and_breaks(original.f, *arguments), graphs_and_breaks(mended.f, *arguments)) == ((2, 1), (1, 0))
    assert_equivalent(original.f, mended.f, *arguments, backends=("eager", "aot_eager"))
