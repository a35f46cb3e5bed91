"""[Trap] calls to a known validation helper: must-rewrite calls with break counts, one
named must-not case per legality condition (source and trace time), differential runs.

The helper is the test double of transformers' ``torch_compilable_check`` (5.x) in
tools/fuzz/fuzz_check_helper.py (the fuzz programs' too): eagerly it raises
``error_type(msg)`` when the condition fails; traced, it checks with
``torch._check_tensor_all`` (a graph break). It is a known helper.
With transformers 5.x installed, the last test uses the real one.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from graphmend.runtime import checks, reset
from graphmend.runtime.store import store
from helpers import assert_equivalent, breaks, finding_reasons, observe, original_and_mended
from tools.fuzz import fuzz_check_helper


def _not_a_known_helper(cond, msg, error_type=ValueError):
    return fuzz_check_helper.torch_compilable_check(cond, msg, error_type)


TEST_HELPER = fuzz_check_helper._HELPER


@pytest.fixture(autouse=True)
def known_test_helper(monkeypatch):
    monkeypatch.setattr(checks, "KNOWN_CHECK_FUNCTIONS", checks.KNOWN_CHECK_FUNCTIONS + (TEST_HELPER,))
    reset()
    store.trace_time_declines.clear()
    yield
    reset()


PRELUDE = f"""
import sys
import torch

torch_compilable_check = sys.modules[{fuzz_check_helper.MODULE_NAME!r}].torch_compilable_check

class ShapeError(Exception):
    pass
"""


def program(body: str) -> str:
    return PRELUDE + textwrap.dedent(body)


def declined_while_tracing() -> list[str]:
    return list(store.trace_time_declines.values())


MUST_REWRITE = {
    "default_error_type": """
        def main(x, n):
            torch_compilable_check(x.sum() == n, "the sizes do not match")
            return x * 2
    """,
    "error_type_keyword": """
        def main(x, n):
            torch_compilable_check((x >= 0).all(), "negative entries", error_type=IndexError)
            return x + n
    """,
    "user_error_type_positional": """
        def main(x, n):
            y = x * 3
            torch_compilable_check(y.sum() != n, f"expected a sum other than {n}", ShapeError)
            return y - 1
    """,
    "tensor_condition_checks_every_element": """
        def main(x, n):
            torch_compilable_check(x.cumsum(0) < n, "a running sum is too large")
            return x.exp()
    """,
    "message_with_static_parts": """
        def main(x, n):
            torch_compilable_check((x.abs() < 100).all(), f"entries of a {tuple(x.shape)} tensor are too large")
            return x - n
    """,
    "message_with_tensor_values": """
        def main(x, n):
            total = x.sum()
            torch_compilable_check(total == n, f"the sum is {total}, the mean {x.mean():.2f}, expected {n}")
            return x * 2
    """,
    "in_a_loop": """
        def main(x, n):
            for step in range(3):
                torch_compilable_check((x < 1000).all(), "overflow")
                x = x * 2
            return x + n
    """,
}

PASSING = (torch.arange(4.0), 6.0)
PASSING_FOR = {
    "user_error_type_positional": (torch.arange(4.0), 5.0),
    "tensor_condition_checks_every_element": (torch.arange(4.0), 7.0),
}
FAILING = {
    "default_error_type": (torch.arange(4.0), 5.0),
    "error_type_keyword": (torch.arange(4.0) - 2, 1.0),
    "user_error_type_positional": (torch.arange(4.0), 18.0),
    "tensor_condition_checks_every_element": (torch.arange(4.0), 5.0),
    "message_with_static_parts": (torch.arange(4.0) * 100, 1.0),
    "in_a_loop": (torch.arange(4.0) * 200, 1.0),
    "message_with_tensor_values": (torch.arange(4.0), 5.0),
}


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_must_rewrite(name):
    original, mended, result = original_and_mended(program(MUST_REWRITE[name]))
    assert result.changed and not finding_reasons(result, "Trap"), result.findings
    passing = PASSING_FOR.get(name, PASSING)
    assert breaks(original.main, *passing) >= 1
    assert breaks(mended.main, *passing) == 0
    assert declined_while_tracing() == []


@pytest.mark.default_tier_stride(3)
@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
@pytest.mark.parametrize("case", ["passing", "failing"])
def test_differential(name, case):
    """Original eagerly against mended eagerly and compiled: the value, or the helper's
    own exception type and message where the check fails (TorchDynamo's RuntimeError
    or a graph break before)."""
    original, mended, _ = original_and_mended(program(MUST_REWRITE[name]))
    if case == "passing":
        arguments = PASSING_FOR.get(name, PASSING)
    else:
        arguments = FAILING[name]
    assert_equivalent(original.main, mended.main, *arguments, backends=("eager", "aot_eager"))


def test_failing_check_raises_the_helpers_error_under_fullgraph():
    original, mended, _ = original_and_mended(program(MUST_REWRITE["error_type_keyword"]))
    x = torch.arange(4.0) - 2
    torch._dynamo.reset()
    with pytest.raises(IndexError, match=r"^negative entries$"):
        torch.compile(mended.main, backend="aot_eager", fullgraph=True)(x, 1.0)
    torch._dynamo.reset()
    with pytest.raises(Exception) as raised:
        torch.compile(original.main, backend="aot_eager", fullgraph=True)(x, 1.0)
    assert not isinstance(raised.value, IndexError)


def test_a_condition_that_is_not_a_bool_tensor_is_left_to_the_helper():
    """Eagerly the helper raises its TypeError; traced, ``check_holds`` raises it, the
    claim falls, and the call is made outside TorchDynamo: the same TypeError, where the
    original's compiled call fails with TorchDynamo's TorchRuntimeError."""
    source = """
        def main(x, n):
            torch_compilable_check((x * n).sum(), "not a bool")
            return x
    """
    original, mended, _ = original_and_mended(program(source))
    arguments = (torch.arange(4.0), 2.0)
    eager = observe(original.main, *arguments)
    assert isinstance(eager.error, TypeError)
    observe(mended.main, *arguments).assert_same_as(eager)
    for backend in ("eager", "aot_eager"):
        observe(mended.main, *arguments, compiled=True, backend=backend).assert_same_as(eager)


# --------------------------------------------------------------------------------------
# Must not rewrite: one case per legality condition of the rule's file and of Trap's.

MUST_NOT_REWRITE = {
    "arguments_bind": (
        """
        def main(x, n):
            arguments = ((x > 0).all(), "positive")
            torch_compilable_check(*arguments)
            return x
        """,
        "do not bind plainly",
    ),
    "message_is_text": (
        """
        def main(x, n):
            torch_compilable_check((x > 0).all(), lambda: "positive")
            return x
        """,
        "the message is a function",
    ),
    "why_not_tensorizable": (
        """
        def main(x, n):
            torch_compilable_check((s := x.sum()) > n, "small")
            return x + s
        """,
        "binds a name",
    ),
    "exception_restorable": (
        """
        def main(x, n):
            error = ShapeError
            torch_compilable_check((x > 0).all(), "positive", error)
            return x
        """,
        "is a local name",
    ),
    "raised_name_may_be_a_class": (
        """
        def make_error(message):
            return ShapeError(message)

        def main(x, n):
            torch_compilable_check((x > 0).all(), "positive", make_error)
            return x
        """,
        "is a function",
    ),
    "message_restorable": (
        """
        MESSAGE = "positive"

        def main(x, n):
            torch_compilable_check((x > 0).all(), MESSAGE)
            return x
        """,
        "not a string expression",
    ),
    "message_holes_formattable": (
        """
        def main(x, n):
            total = x.sum()
            torch_compilable_check(total > n, "the sum is " + str(total))
            return x
        """,
        "is not an f-string",
    ),
    "message_holes_formattable__conversion": (
        """
        def main(x, n):
            total = x.sum()
            torch_compilable_check(total > n, f"the sum is {total!r}")
            return x
        """,
        "is converted",
    ),
    "message_calls_are_pure": (
        """
        def describe(t):
            return "shape " + str(tuple(t.shape))

        def main(x, n):
            torch_compilable_check((x > 0).all(), "{}".format(describe(x)))
            return x
        """,
        "may have effects",
    ),
    "not_caught_in_function": (
        """
        def main(x, n):
            try:
                torch_compilable_check((x > 0).all(), "positive")
            except ValueError:
                return x * 0
            return x
        """,
        "enclosing `try`",
    ),
    "no_in_place_write_before_guard": (
        """
        def main(x, n):
            x = x.clone()
            x.add_(n)
            torch_compilable_check((x > 0).all(), "positive")
            return x
        """,
        "written in place before the guard",
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_must_not_rewrite(name):
    source, reason = MUST_NOT_REWRITE[name]
    original, mended, result = original_and_mended(program(source))
    reasons = finding_reasons(result, "Trap")
    assert any(reason in r for r in reasons), reasons
    assert_kept_call_raises_as_eagerly(original, mended, torch.arange(4.0) - 1, 1.0)


def assert_kept_call_raises_as_eagerly(original, mended, *arguments, passing=(torch.arange(4.0) + 1, 1.0)):  # noqa: B008 - one tensor for every call, as always
    """A known helper's call Trap does not lower keeps a break, and is made outside
    TorchDynamo (``checks.call_eagerly``): compiled, it raises the helper's own
    ``error_type`` and message as the original does eagerly, where the original compiled
    raises TorchDynamo's RuntimeError (fuzz seed 72508)."""
    eager = observe(original.main, *arguments)
    observe(mended.main, *arguments).assert_same_as(eager)
    for backend in ("eager", "aot_eager"):
        observe(mended.main, *arguments, compiled=True, backend=backend).assert_same_as(eager)
    # One break at the call; the original also broke in the helper's own frame.
    assert 1 <= breaks(mended.main, *passing) <= breaks(original.main, *passing)


def assert_same_as_the_original(original, mended, *arguments):
    """A call kept as it was: eagerly as the original eagerly, compiled as the original
    compiled (where the helper's own traced path raises TorchDynamo's RuntimeError)."""
    observe(mended.main, *arguments).assert_same_as(observe(original.main, *arguments))
    for backend in ("eager", "aot_eager"):
        compiled = observe(mended.main, *arguments, compiled=True, backend=backend)
        compiled.assert_same_as(observe(original.main, *arguments, compiled=True, backend=backend))


@pytest.mark.parametrize("where", ["caught", "in_a_loop_with_a_break"])
def test_kept_call_where_torchdynamo_runs_the_frame_eagerly(where):
    """Fuzz seed 72508: a check inside ``try`` whose message formats a tensor. The
    f-string breaks the graph where TorchDynamo cannot resume (inside ``try``, or in a
    loop), so it runs the frame eagerly and compiles the helper's own frame when it is
    called, which raises RuntimeError; the mended call is made outside TorchDynamo there
    too, and the caught ``IndexError`` is caught as it is eagerly."""
    body = {
        "caught": """
            def main(x, n):
                y = x * 2
                try:
                    torch_compilable_check((x > n).all(), f"mean {x.mean():.3f}", IndexError)
                except IndexError as error:
                    print("caught", error)
                return y + 1
        """,
        "in_a_loop_with_a_break": """
            def main(x, n):
                y = x * 2
                for step in range(2):
                    print("step", step, y.sum())
                    torch_compilable_check((x > n).all(), f"mean {x.mean():.3f}", IndexError)
                return y + 1
        """,
    }[where]
    original, mended, _ = original_and_mended(program(body))
    failing = (torch.arange(4.0), 1.0)
    eager = observe(original.main, *failing)
    if where == "caught":
        assert eager.error is None and "caught mean 1.500" in eager.stdout
    else:
        assert isinstance(eager.error, IndexError)
    for backend in ("eager", "aot_eager"):
        observe(mended.main, *failing, compiled=True, backend=backend).assert_same_as(eager)
    compiled_original = observe(original.main, *failing, compiled=True, backend="eager")
    assert isinstance(compiled_original.error, RuntimeError)  # what graphmend corrects


# Decided while tracing ----------------------------------------------------------------


def test_callee_is_known_check__a_function_of_the_same_name_keeps_its_break():
    source = f"""
        torch_compilable_check = sys.modules[{__name__!r}]._not_a_known_helper

        def main(x, n):
            torch_compilable_check(x.sum() == n, "the sizes do not match")
            return x * 2
    """
    original, mended, result = original_and_mended(program(source))
    assert result.changed
    assert breaks(mended.main, *PASSING) == breaks(original.main, *PASSING) >= 1
    assert any("not a validation helper graphmend knows" in r for r in declined_while_tracing())
    assert_same_as_the_original(original, mended, torch.arange(4.0), 5.0)


def test_checks_enabled__a_disabled_helper_checks_nothing(monkeypatch):
    monkeypatch.setenv(fuzz_check_helper.DISABLE_VARIABLE, "1")
    original, mended, _ = original_and_mended(program(MUST_REWRITE["default_error_type"]))
    assert breaks(mended.main, *PASSING) == breaks(original.main, *PASSING) == 0
    assert any("disabled" in r for r in declined_while_tracing())
    assert_equivalent(original.main, mended.main, torch.arange(4.0), 5.0, backends=("eager", "aot_eager"))


def test_error_type_raisable__a_warning_class_keeps_the_call():
    source = """
        def main(x, n):
            torch_compilable_check(x.sum() == n, "sizes", UserWarning)
            return x * 2
    """
    original, mended, _ = original_and_mended(program(source))
    assert_kept_call_raises_as_eagerly(original, mended, torch.arange(4.0), 5.0, passing=PASSING)
    assert any("not an Exception class" in r for r in declined_while_tracing())


def test_a_check_in_a_helper_whose_caller_catches_keeps_its_break():
    """Trap's trace-time conditions apply to check calls: the caller's ``try`` around
    the inlined helper would have caught the helper's ValueError."""
    source = """
        def helper(x, n):
            torch_compilable_check(x.sum() == n, "the sizes do not match")
            return x

        def main(x, n):
            try:
                return helper(x, n)
            except ValueError:
                return x * 0
    """
    original, mended, result = original_and_mended(program(source))
    assert breaks(mended.main, *PASSING) >= 1
    # Declined before tracing (the caller is in this module); elsewhere, while tracing.
    reasons = [finding.reason or "" for finding in result.findings] + declined_while_tracing()
    assert any("inside a `try`" in r for r in reasons), reasons
    assert_kept_call_raises_as_eagerly(original, mended, torch.arange(4.0), 5.0, passing=PASSING)


def test_holes_renderable__a_tensor_hole_that_is_not_0d_keeps_the_call():
    """``f"{t}"`` of a 1-d tensor is its whole text (with any autograd history), which
    the graph cannot render exactly: decided while tracing."""
    source = """
        def main(x, n):
            torch_compilable_check(x.sum() == n, f"the entries are {x.cumsum(0)}")
            return x * 2
    """
    original, mended, result = original_and_mended(program(source))
    assert result.changed
    assert_kept_call_raises_as_eagerly(original, mended, torch.arange(4.0), 5.0, passing=PASSING)
    assert any("not a 0-d plain tensor" in r for r in declined_while_tracing())


def test_a_rendered_message_is_the_eager_text_under_inductor():
    original, mended, _ = original_and_mended(program(MUST_REWRITE["message_with_tensor_values"]))
    torch._dynamo.reset()
    compiled = torch.compile(mended.main, backend="inductor", dynamic=False)
    with pytest.raises(ValueError) as raised:
        compiled(torch.arange(4.0), 5.0)
    with pytest.raises(ValueError) as eager:
        original.main(torch.arange(4.0), 5.0)
    assert str(raised.value) == str(eager.value) == "the sum is 6.0, the mean 1.50, expected 5.0"
    assert torch.equal(compiled(torch.arange(4.0), 6.0), torch.arange(4.0) * 2)


def test_transformers_own_helper():
    import_utils = pytest.importorskip("transformers.utils.import_utils")
    if not hasattr(import_utils, "torch_compilable_check"):
        pytest.skip("this transformers has no torch_compilable_check (it came with 5.x)")
    source = """
        from transformers.utils.import_utils import torch_compilable_check

        def main(x, n):
            torch_compilable_check(x.sum() == n, "the sizes do not match")
            return x * 2
    """
    original, mended, _ = original_and_mended(textwrap.dedent(source).replace("\n", "\nimport torch\n", 1))
    assert breaks(original.main, *PASSING) >= 1
    assert breaks(mended.main, *PASSING) == 0
    assert_equivalent(original.main, mended.main, torch.arange(4.0), 5.0, backends=("eager", "aot_eager"))
    assert sys.modules["transformers.utils.import_utils"] is import_utils


def test_transformers_own_helper_in_a_try_raises_and_is_caught_as_eagerly():
    """The real helper, kept as a call (a ``try`` catches its error): made outside
    TorchDynamo, its IndexError is caught under ``torch.compile`` as without it, where
    the traced helper raised RuntimeError."""
    import_utils = pytest.importorskip("transformers.utils.import_utils")
    if not hasattr(import_utils, "torch_compilable_check"):
        pytest.skip("this transformers has no torch_compilable_check (it came with 5.x)")
    source = """
        from transformers.utils.import_utils import torch_compilable_check

        def main(x, n):
            try:
                torch_compilable_check(x.sum() == n, f"the sum {x.sum():.1f} is not {n}", IndexError)
            except IndexError as error:
                print("caught", error)
            return x * 2
    """
    original, mended, _ = original_and_mended(textwrap.dedent(source).replace("\n", "\nimport torch\n", 1))
    failing = (torch.arange(4.0), 5.0)
    eager = observe(original.main, *failing)
    assert eager.error is None and "caught the sum 6.0 is not 5.0" in eager.stdout
    assert isinstance(observe(original.main, *failing, compiled=True).error, RuntimeError)
    for backend in ("eager", "aot_eager"):
        observe(mended.main, *failing, compiled=True, backend=backend).assert_same_as(eager)


# --------------------------------------------------------------------------------------
# Eager code runs the original statement: the frames of its exceptions and the places
# its warnings name are the original's.


def _from_a_file(tmp_path, source: str):
    """Original and mended modules compiled from a real file, so that a traceback's
    source lines are read back (``linecache``) as a user sees them."""
    import graphmend
    from helpers import load_module

    path = tmp_path / "program.py"
    source = textwrap.dedent(source)
    path.write_text(source)
    result = graphmend.mend_module_source(source, filename=str(path), scope="all")
    assert result.changed
    return load_module(source, "original", str(path)), load_module(result.tree, "mended", str(path))


def _frames_and_warnings(function, *arguments, backend=None):
    """(exception type and message, its traceback's frames as (file, function, line,
    source line), and (file, line) of each warning), for one call."""
    import traceback
    import warnings

    target = function
    if backend is not None:
        torch._dynamo.reset()
        target = torch.compile(function, backend=backend, dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            target(*arguments)
            raised, frames = None, []
        except Exception as error:  # noqa: BLE001 - the exception is the observation
            raised = (type(error).__name__, str(error))
            frames = [
                (frame.filename, frame.name, frame.lineno, frame.line)
                for frame in traceback.extract_tb(error.__traceback__)[1:]
            ]
    warned = [(warning.filename, warning.lineno, str(warning.message)) for warning in caught
              if str(warning.message).startswith("checking")]
    return raised, frames, warned


OWN_HELPER_OF_THE_NAME = """
import warnings
import torch

def torch_compilable_check(cond, msg, error_type=ValueError):
    warnings.warn("checking " + msg, stacklevel=2)
    if not bool(cond.all()):
        raise error_type(msg)

def main(x, n):
    y = x + 1
    torch_compilable_check(x.sum() > n, "must be large enough", IndexError)
    return y * 2
"""

KNOWN_HELPER_KEPT = PRELUDE + """
def main(x, n):
    y = x * 2
    torch_compilable_check((x > n).all(), f"mean {x.mean():.3f}", IndexError)
    return y + 1
"""


@pytest.mark.parametrize("source", [OWN_HELPER_OF_THE_NAME, KNOWN_HELPER_KEPT], ids=["own_helper", "known_helper"])
@pytest.mark.parametrize("failing", [False, True], ids=["passing", "failing"])
def test_kept_check_call_run_eagerly_is_the_original_statement(tmp_path, source, failing):
    """Not compiled, the mended program made the call through ``checks.call_eagerly``:
    its traceback had TorchDynamo's ``disable`` wrapper and graphmend's runtime between
    the caller and the helper, and a ``warnings.warn(..., stacklevel=2)`` in the helper
    named a line of graphmend's runtime instead of the call."""
    original, mended = _from_a_file(tmp_path, source)
    arguments = (torch.arange(4.0), 10.0 if failing else -1.0)
    expected = _frames_and_warnings(original.main, *arguments)
    assert (expected[0] is not None) == failing
    assert _frames_and_warnings(mended.main, *arguments) == expected


@pytest.mark.parametrize("failing", [False, True], ids=["passing", "failing"])
def test_own_helper_of_a_known_name_compiled_is_the_original_compiled(tmp_path, failing):
    """A program's own helper named like a known one is not the known helper: compiled,
    its call is traced as the original's is, with the same frames and warning places."""
    original, mended = _from_a_file(tmp_path, OWN_HELPER_OF_THE_NAME)
    arguments = (torch.arange(4.0), 10.0 if failing else -1.0)
    expected = _frames_and_warnings(original.main, *arguments, backend="eager")
    assert _frames_and_warnings(mended.main, *arguments, backend="eager") == expected
    passing = (torch.arange(4.0), -1.0)
    assert breaks(mended.main, *passing) <= breaks(original.main, *passing)


LOWERED_CHECKS = PRELUDE + """
def main(x, bound):
    h = x * 0.25
    count = (h > 0).sum().item()
    torch_compilable_check(count == h.numel(), f"{count} of {h.numel()} entries")
    torch_compilable_check((h < bound).all(), f"bound of {h.numel()}", IndexError)
    return h * 2
"""


@pytest.mark.parametrize(
    "arguments", [(-torch.ones(2, 3), 1.0), (torch.ones(2, 3) * 8, 1.0)], ids=["kept_item_count", "tensor_condition"]
)
def test_a_failing_lowered_check_raises_from_the_helpers_own_frames(tmp_path, arguments):
    """A lowered check's error was raised from the caller's line: the helper's frame
    (and torch's below it, where the helper raised) was missing. The helper is now
    called at the boundary with a failing condition of the kind the original passed
    (a kept ``.item()`` count compared with a size was a bool there: the helper raised
    from another line), so every frame from the caller's down is the original's."""
    original, mended = _from_a_file(tmp_path, LOWERED_CHECKS)
    assert breaks(mended.main, torch.ones(2, 3), 1.0) == 0  # both checks lowered
    expected = _frames_and_warnings(original.main, *arguments)
    assert expected[0] is not None
    raised, frames, _ = _frames_and_warnings(mended.main, *arguments, backend="eager")
    user_and_below = [frame for frame in frames if frame[1] != "compile_wrapper"]
    assert (raised, user_and_below) == expected[:2]


NESTED_LOWERED_CHECK = PRELUDE + """
def bounded(h, bound):
    torch_compilable_check((h < bound).all(), f"bound {bound} of {h.numel()}", IndexError)
    return h + 1

def main(x, bound):
    return bounded(x * 0.25, bound) * 2
"""


def test_a_failing_lowered_check_in_a_helper_under_a_compiled_caller_shows_the_originals_frames(tmp_path):
    """A lowered check in an inlined helper, under a compiled caller: every frame from
    the program's down is the original's, the helper's made call included (it runs
    with TorchDynamo's frame callback unset, with no wrapper's frame between)."""
    original, mended = _from_a_file(tmp_path, NESTED_LOWERED_CHECK)
    arguments = (torch.ones(2, 3) * 8, 1.0)
    expected = _frames_and_warnings(original.main, *arguments)

    def caller(x, bound):
        return torch.compile(mended.main, backend="eager")(x, bound)

    raised, frames, _ = _frames_and_warnings(caller, *arguments, backend="eager")
    program_frames = [frame for frame in frames if frame[1] not in ("compile_wrapper", "caller")]
    assert (raised, program_frames) == expected[:2]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_kept_call_made_outside_torchdynamo_shows_no_frame_of_graphmends(backend):
    """The kept call is made through ``checks.call_eagerly``: a failing check's
    traceback showed that function's frame between the program's and the helper's."""
    import os
    import traceback

    import graphmend

    source, _reason = MUST_NOT_REWRITE["message_is_text"]
    _original, mended, _result = original_and_mended(program(source))
    torch._dynamo.reset()
    try:
        torch.compile(mended.main, backend=backend)(torch.arange(4.0) - 1, 1.0)
    except Exception as error:  # noqa: BLE001 - the exception is the observation
        files = [frame.filename for frame in traceback.extract_tb(error.__traceback__)]
    else:
        raise AssertionError("the check did not fail")
    ours = os.path.dirname(os.path.abspath(graphmend.__file__))
    assert not [name for name in files if os.path.abspath(name).startswith(ours)]
    # The helper's own frame is the innermost of the program's, as eagerly.
    torch_directory = os.path.dirname(torch.__file__)
    assert [name for name in files if not name.startswith(torch_directory)][-1] == fuzz_check_helper.__file__


def _graphs_and_breaks_over(function, inputs) -> tuple[int, int]:
    from torch._dynamo.testing import CompileCounter
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    backend = CompileCounter()
    compiled = torch.compile(function, backend=backend, dynamic=True)
    for value in inputs:
        compiled(value)
    return backend.frame_count, sum(counters["graph_break"].values())


def test_a_kept_check_of_a_count_compiles_no_more_than_the_original_at_dynamic_sizes():
    """A kept check of an ``.item()`` count (a float: its ``.item()`` keeps its break)
    under ``dynamic=True``: the helper traced breaks where TorchDynamo cannot resume, and
    it compiles the frame up to the last point the stack was empty. With the condition
    bound in a statement of its own, that point followed it: a graph more, guarded on
    the input's sizes, compiled again for an input laid out otherwise (2 graphs became
    4 on torch 2.13). The condition and the call are one statement, as in the original."""
    source = program(
        """
        def f(x):
            count = x.sum().item()
            torch_compilable_check(count != x.shape[0], f"{count} of {x.numel()} entries", IndexError)
            return x + 1
        """
    )
    original, mended, _ = original_and_mended(source)
    base = torch.arange(12.0).reshape(3, 4)
    inputs = [base + 0.5, base.t().contiguous().t() + 0.25, torch.ones(4, 5), torch.ones(2, 7)]
    before = _graphs_and_breaks_over(original.f, inputs)
    after = _graphs_and_breaks_over(mended.f, inputs)
    assert after == before
    assert_equivalent(original.f, mended.f, base + 0.5)
