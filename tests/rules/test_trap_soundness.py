"""[Trap] soundness: what a lowered guard must not change (issue 15, Trap).

Two tables, as for every rule: programs whose guard the static rule must leave alone,
one named row per legality condition in ``graphmend.rules.trap.guards``; and programs the
static rule rewrites but whose guard the trace-time check
(``graphmend.runtime.traps.trap_lowerable``) must refuse or restore exactly, each
compared original vs mended, eagerly and compiled under ``eager`` and ``aot_eager``:
value, exception (type, message, args, attributes, where it is caught), the inputs'
state and the program's own records afterwards.
"""

import textwrap
import traceback
import types

import pytest
import torch

from graphmend.runtime import traps
from graphmend.runtime.store import store
from helpers import (
    breaks,
    finding_reasons,
    graphs_and_breaks_under_aot_eager,
    graphs_and_outcomes_over_calls,
    mend,
    original_and_mended,
)

PRELUDE = """
import contextlib
import types
import torch
import torch.nn.functional as F

class MaskError(Exception):
    pass
"""

# Rows named after the static legality condition that must refuse them.
MUST_NOT_REWRITE = {
    "raised_name_may_be_a_class__instance": (
        """
        ERROR = ValueError("shared instance")
        def f(x):
            if (x < 0).any():
                raise ERROR
            return x
        """,
        "bound to a value",
    ),
    "raised_name_may_be_a_class__factory": (
        """
        def make_error(message):
            return KeyError(message)
        def f(x):
            if (x < 0).any():
                raise make_error("negative")
            return x
        """,
        "is a function",
    ),
    "message_free_of_effects__call_in_f_string": (
        """
        CALLS = []
        def describe(x):
            CALLS.append(1)
            return "bad"
        def f(x):
            if (x < 0).any():
                raise ValueError(f"input is {describe(x)}")
            return x
        """,
        "describe",
    ),
    "message_free_of_effects__format_argument": (
        """
        def describe(x):
            print("describing")
            return "bad"
        def f(x):
            if (x < 0).any():
                raise ValueError("input is {}".format(describe(x)))
            return x
        """,
        "describe",
    ),
    "no_in_place_write_before_guard__method": (
        """
        def f(x):
            x.add_(1)
            if (x > 100).any():
                raise ValueError("big")
            return x
        """,
        "written in place",
    ),
    "no_in_place_write_before_guard__out_keyword": (
        """
        def f(x, buffer):
            torch.add(x, 1, out=buffer)
            if (x > 100).any():
                raise ValueError("big")
            return x
        """,
        "`buffer` may be written",
    ),
    "no_in_place_write_before_guard__inplace_keyword": (
        """
        def f(x):
            y = F.relu(x, inplace=True)
            if (y > 100).any():
                raise ValueError("big")
            return y
        """,
        "`x` may be written",
    ),
    "no_in_place_write_before_guard__augmented_assignment": (
        """
        def f(x):
            x += 1
            if (x > 100).any():
                raise ValueError("big")
            return x
        """,
        "written in place",
    ),
    "no_in_place_write_before_guard__setitem": (
        """
        def f(x):
            x[0] = 5
            if (x > 100).any():
                raise ValueError("big")
            return x
        """,
        "written in place",
    ),
    "no_in_place_write_before_guard__in_loop_after": (
        """
        def f(x):
            for _ in range(2):
                if (x > 100).any():
                    raise ValueError("big")
                x.mul_(2)
            return x
        """,
        "written in place",
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_must_not_rewrite(name):
    body, expected_reason = MUST_NOT_REWRITE[name]
    source = PRELUDE + textwrap.dedent(body)
    result = mend(source, rules=("trap",))
    assert not result.changed and result.source == source
    reasons = finding_reasons(result, "Trap")
    assert reasons and any(expected_reason in reason for reason in reasons), reasons


def test_fresh_local_written_in_place_is_still_lowered():
    """A tensor the function made itself is nobody else's: writing it does not decline."""
    source = PRELUDE + textwrap.dedent(
        """
        def f(x):
            y = torch.zeros(4)
            y.add_(x)
            if (y < 0).any():
                raise ValueError("negative")
            return y
        """
    )
    result = mend(source, rules=("trap",))
    assert result.changed, result.findings


# --------------------------------------------------------------------------------------
# Differential runs: original eagerly is the reference.


class Outcome:
    def __init__(self, value=None, error=None, inputs=None, records=None):
        self.value, self.error, self.inputs, self.records = value, error, inputs, records

    def key(self):
        return (self.value, self.error, self.inputs, self.records)


def tensor_key(value):
    if isinstance(value, torch.Tensor):
        values = tuple(value.detach().reshape(-1).tolist())
        return ("tensor", value.dtype, tuple(value.shape), values)
    if isinstance(value, (tuple, list)):
        return tuple(tensor_key(v) for v in value)
    return repr(value)


def error_key(error):
    if error is None:
        return None
    attributes = {k: repr(v) for k, v in vars(error).items()}
    return (type(error).__qualname__, repr(error.args), str(error), attributes)


def run(function, module, arguments, backend=None):
    arguments = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in arguments)
    if hasattr(module, "RECORDS"):
        module.RECORDS.clear()
    target = function
    if backend is not None:
        torch._dynamo.reset()
        target = torch.compile(function, backend=backend, dynamic=False)
    value = error = None
    try:
        value = target(*arguments)
    except Exception as exception:  # noqa: BLE001 - the exception is the observation
        error = exception
    records = list(getattr(module, "RECORDS", ()))
    return Outcome(tensor_key(value), error_key(error), tensor_key(arguments), repr(records)), error


def assert_same_everywhere(source, *arguments, entry="main"):
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(source))
    assert result.changed, result.findings  # the static rule lowers it: the run decides
    reference, _ = run(getattr(original, entry), original, arguments)
    for backend in (None, "eager", "aot_eager"):
        outcome, _ = run(getattr(mended, entry), mended, arguments, backend)
        assert outcome.key() == reference.key(), (backend, outcome.key(), reference.key())
    return original, mended


def declined_reasons():
    return list(store.trace_time_declines.values())


def caller_in_another_module(helper_module, caller_source: str):
    """``main`` from ``caller_source``, unmended, in a namespace of its own that binds
    ``helper`` to ``helper_module``'s: this module's static conditions cannot see it, so
    the trace-time conditions decide."""
    namespace = {"torch": torch, "contextlib": __import__("contextlib"), "helper": helper_module.helper}
    exec(textwrap.dedent(caller_source), namespace)  # noqa: S102
    return namespace["main"]


def assert_same_with_a_caller_elsewhere(helper_source, caller_source, *arguments):
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(helper_source))
    assert result.changed, result.findings
    reference, _ = run(caller_in_another_module(original, caller_source), original, arguments)
    main = caller_in_another_module(mended, caller_source)
    for backend in (None, "eager", "aot_eager"):
        outcome, _ = run(main, mended, arguments, backend)
        assert outcome.key() == reference.key(), (backend, outcome.key(), reference.key())
    return main


HELPER = """
def helper(x):
    if (x < 0).any():
        raise ValueError("negative")
    return x + 1
"""


CAUGHT_BY_CALLER = """
def main(x):
    try:
        y = helper(x)
    except ValueError:
        y = x * 0
    return y
"""


CAUGHT_EAGERLY_AFTER_A_BREAK = """
def main(x):
    try:
        torch._dynamo.graph_break()
        y = helper(x)
    except ValueError:
        y = x * 0
    return y
"""


def test_no_handler_in_traced_frames__caller_catches():
    """The helper's guard is inlined into the caller's graph inside its `try`."""
    x = torch.arange(4.0)
    store.trace_time_declines.clear()
    main = assert_same_with_a_caller_elsewhere(HELPER, CAUGHT_BY_CALLER, x - 10)
    assert any("inside a `try` or `with`" in reason for reason in declined_reasons())
    assert breaks(main, x) >= 1  # declined: the original graph break stays
    assert_same_with_a_caller_elsewhere(HELPER, CAUGHT_BY_CALLER, x)


def test_no_handler_in_traced_frames__caller_suppresses_with_context_manager():
    caller = """
    def main(x):
        y = x * 2
        with contextlib.suppress(ValueError):
            y = helper(x)
        return y
    """
    x = torch.arange(4.0)
    assert_same_with_a_caller_elsewhere(HELPER, caller, x - 10)
    assert_same_with_a_caller_elsewhere(HELPER, caller, x)


@pytest.mark.parametrize("caller", ["try", "suppress", "module_level_try"])
def test_not_called_inside_a_handler_in_this_module(caller):
    """A function this module calls inside a `try` (or a `with` that is not torch's) keeps
    its guard, whatever the trace would decide: a graph lowered where nothing catches is
    reused when the function is later entered from an eager caller's `try`."""
    callers = {
        "try": "def main(x):\n    try:\n        return helper(x)\n    except ValueError:\n        return x * 0\n",
        "suppress": "def main(x):\n    with contextlib.suppress(ValueError):\n        return helper(x)\n",
        "module_level_try": "try:\n    helper(torch.ones(1))\nexcept ValueError:\n    pass\n",
    }
    result = mend(PRELUDE + textwrap.dedent(HELPER) + callers[caller], rules=("trap",))
    assert not result.changed
    reasons = finding_reasons(result, "Trap")
    assert any("calls `helper` inside a `try` or `with` block" in reason for reason in reasons), reasons


def test_not_called_inside_a_handler_in_this_module__torch_context_managers_do_not_count():
    source = HELPER + "def main(x):\n    with torch.no_grad():\n        return helper(x)\n"
    assert mend(PRELUDE + textwrap.dedent(source), rules=("trap",)).changed


def test_no_handler_in_traced_frames__guard_in_except_body_chains_context():
    source = """
    def main(x):
        try:
            {}["missing"]
        except KeyError:
            if (x < 0).any():
                raise ValueError("negative while handling")
        return x
    """
    x = torch.arange(4.0)
    original, mended = assert_same_everywhere(source, x - 10)
    torch._dynamo.reset()
    with pytest.raises(ValueError) as caught:
        torch.compile(mended.main, backend="eager")(x - 10)
    assert isinstance(caught.value.__context__, KeyError)


def test_no_handler_in_eager_callers__caller_runs_eagerly_inside_compiled_call():
    """A graph break in a `try` makes TorchDynamo run the caller eagerly and compile the
    helper as its own frame: its RuntimeError would pass the caller's `except`."""
    x = torch.arange(4.0)
    assert_same_with_a_caller_elsewhere(HELPER, CAUGHT_EAGERLY_AFTER_A_BREAK, x - 10)
    assert_same_with_a_caller_elsewhere(HELPER, CAUGHT_EAGERLY_AFTER_A_BREAK, x)


def test_raised_class_is_exception__factory_behind_an_attribute():
    """The source cannot tell what `errors.Negative` is; tracing can."""
    source = """
    errors = types.SimpleNamespace(Negative=lambda message: KeyError(message))

    def main(x):
        if (x < 0).any():
            raise errors.Negative("negative")
        return x
    """
    x = torch.arange(4.0)
    store.trace_time_declines.clear()
    assert_same_everywhere(source, x - 10)
    assert any("not an exception class" in reason for reason in declined_reasons())
    assert_same_everywhere(source, x)


def test_raised_class_is_exception__instance_behind_an_attribute():
    source = """
    errors = types.SimpleNamespace(Negative=ValueError("one shared instance"))

    def main(x):
        if (x < 0).any():
            raise errors.Negative
        return x
    """
    x = torch.arange(4.0)
    assert_same_everywhere(source, x - 10)


def test_no_input_mutated_before_guard__caller_writes_input():
    """aot_eager applies the caller's `add_` after the graph: a failed assertion lost it."""
    source = """
    def helper(x):
        if (x > 100).any():
            raise ValueError("big")
        return x * 2

    def main(x):
        x.add_(1)
        return helper(x)
    """
    x = torch.arange(4.0)
    store.trace_time_declines.clear()
    assert_same_everywhere(source, x + 200)
    assert any("written in place" in reason for reason in declined_reasons()), declined_reasons()
    assert_same_everywhere(source, x)


def test_no_input_mutated_before_guard__write_through_a_view():
    source = """
    def main(x):
        head = x[0:2]
        head.mul_(2)
        if (x > 100).any():
            raise ValueError("big")
        return x
    """
    x = torch.arange(4.0)
    assert_same_everywhere(source, x + 60)


def test_no_pending_side_effect_before_guard__record_appended():
    source = """
    RECORDS = []

    def helper(x):
        if (x < 0).any():
            raise ValueError("negative")
        return x

    def main(x):
        RECORDS.append("entered")
        return helper(x)
    """
    x = torch.arange(4.0)
    assert_same_everywhere(source, x - 10)
    assert_same_everywhere(source, x)


SET_THEN_RESET = """
class Collector:
    def __init__(self):
        self.active = None
        self.compiling = False

COLLECTOR = Collector()

def helper(x):
    if (x < 0).any():
        raise ValueError("negative")
    return x

def main(x):
    COLLECTOR.active = "collecting"
    COLLECTOR.compiling = True
    y = x * 2
    COLLECTOR.active = None
    COLLECTOR.compiling = False
    return helper(y){tail}
"""


def test_no_pending_side_effect_before_guard__attributes_set_and_put_back_are_no_change():
    """transformers' output collector sets a flag and resets it before the guard: the
    pending writes store what the object holds already, so losing them changes nothing."""
    source = SET_THEN_RESET.format(tail="")
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(source))
    x = torch.arange(4.0)
    assert breaks(original.main, x) > 0
    assert breaks(mended.main, x) == 0
    assert_same_everywhere(source, x)
    assert_same_everywhere(source, x - 10)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_no_pending_side_effect_before_guard__attribute_put_back_is_guarded_between_calls(backend):
    """The put-back writes are no change only while the attribute holds what they store:
    a program that leaves another value there between calls must not run the graph
    whose failing guard drops them (the original resets the flag, then raises)."""
    source = SET_THEN_RESET.format(tail="")
    results = []
    for module in original_and_mended(PRELUDE + textwrap.dedent(source))[:2]:
        torch._dynamo.reset()
        compiled = torch.compile(module.main, backend=backend, dynamic=False)
        compiled(torch.arange(4.0))
        module.COLLECTOR.active = "left by someone else"
        with pytest.raises(ValueError):
            compiled(torch.arange(4.0) - 10)
        results.append(vars(module.COLLECTOR))
    assert results[1] == results[0] == {"active": None, "compiling": False}


def test_no_pending_side_effect_before_guard__attribute_left_changed():
    source = SET_THEN_RESET.format(tail="").replace('COLLECTOR.active = None', 'COLLECTOR.active = "done"')
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(source))
    store.trace_time_declines.clear()
    x = torch.arange(4.0)
    assert breaks(mended.main, x) > 0
    assert any("COLLECTOR" in reason for reason in declined_reasons()), declined_reasons()


def test_no_pending_side_effect_before_guard__contents_of_a_dict_subclass_changed():
    """Attributes put back are no change, but what the object holds as a ``dict`` is:
    each torch tracks those contents in its own way (``torch_adapter.contents_modified``)."""
    source = (
        SET_THEN_RESET.format(tail="")
        .replace("class Collector:", "class Collector(dict):")
        .replace("    y = x * 2\n", "    y = x * 2\n    COLLECTOR['seen'] = True\n")
    )
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(source))
    store.trace_time_declines.clear()
    x = torch.arange(4.0)
    assert breaks(original.main, x) > 0 and breaks(mended.main, x) > 0
    assert any("COLLECTOR" in reason for reason in declined_reasons()), declined_reasons()
    assert_same_everywhere(source, x - 10)


CLOSURE_CELL_WRITTEN = """
def main(x):
    torch._dynamo.graph_break()
    acc = x * 0.0
    def bump(t):
        nonlocal acc
        acc = acc + t
    if (x.abs() > 100).any():
        raise RuntimeError("overflow")
    return x + 1
"""


@pytest.mark.parametrize("scale", [1.0, 1000.0])
def test_no_pending_side_effect_before_guard__closure_cell_in_resumed_frame(scale):
    """Found by the long fuzz run (seeds 2039, 2365): after a break, the resumed frame
    writes a closure cell before the guard; TorchDynamo's source for that cell has no
    name, and naming it failed compiling with InternalTorchDynamoError."""
    assert_same_everywhere(CLOSURE_CELL_WRITTEN, torch.arange(4.0) * scale)


CLOSURE_CELL_ESCAPED = """
READERS = []

def main(x):
    acc = x * 0.0
    def read():
        return acc
    READERS.append(read)
    torch._dynamo.graph_break()
    acc = x + 1
    if (x > 100).any():
        raise ValueError("big")
    return x
"""


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_no_pending_side_effect_before_guard__closure_cell_seen_by_an_escaped_closure(backend):
    """A closure that escaped before the break sees the cell the original wrote before
    raising: a lowered guard would drop the write (TorchDynamo applies it after the
    graph), so the guard is refused and the write is kept."""
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(CLOSURE_CELL_ESCAPED))
    assert result.changed, result.findings
    x = torch.arange(4.0) + 200
    seen = []
    store.trace_time_declines.clear()
    for module, compiled in ((original, False), (mended, True)):
        module.READERS.clear()
        torch._dynamo.reset()
        target = torch.compile(module.main, backend=backend, dynamic=False) if compiled else module.main
        with pytest.raises(ValueError, match="big"):
            target(x.clone())
        seen.append(module.READERS[0]().tolist())
    assert seen[0] == seen[1] == (x + 1).tolist()
    assert any("closure cell" in reason for reason in declined_reasons()), declined_reasons()


# --------------------------------------------------------------------------------------
# The restored exception itself.

GUARD = """
def main(x):
    if (x < 0).any():
        raise MaskError("negative")
    return x
"""


def raised(function, *arguments, backend="eager"):
    torch._dynamo.reset()
    try:
        torch.compile(function, backend=backend)(*arguments) if backend else function(*arguments)
    except Exception as error:  # noqa: BLE001
        return error
    raise AssertionError("nothing raised")


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_restored_exception_keeps_the_users_frame_and_context(backend):
    original, mended, result = original_and_mended(PRELUDE + GUARD)
    assert result.changed
    x = torch.arange(4.0) - 10
    expected = raised(original.main, x, backend=None)
    error = raised(mended.main, x, backend=backend)
    assert type(error).__qualname__ == "MaskError" and error.args == expected.args
    last, expected_last = traceback.extract_tb(error.__traceback__)[-1], traceback.extract_tb(
        expected.__traceback__
    )[-1]
    assert (last.filename, last.lineno, last.name, last.line) == (
        expected_last.filename,
        expected_last.lineno,
        expected_last.name,
        expected_last.line,
    )
    assert error.__cause__ is None and error.__context__ is None
    assert error.__suppress_context__ is False


def test_restored_exception_chains_what_the_caller_was_handling():
    original, mended, _ = original_and_mended(PRELUDE + GUARD)
    x = torch.arange(4.0) - 10
    torch._dynamo.reset()
    compiled = torch.compile(mended.main, backend="eager")
    for function in (original.main, compiled):
        try:
            try:
                raise KeyError("outer")
            except KeyError:
                function(x)
        except Exception as error:  # noqa: BLE001
            assert type(error).__name__ == "MaskError"
            assert isinstance(error.__context__, KeyError) and error.__suppress_context__ is False


def test_restored_exception_with_custom_init_keeps_args_and_attributes():
    source = """
    class CodedError(Exception):
        def __init__(self, message, code=7):
            super().__init__(message)
            self.code = code
            self.described = f"{message} ({code})"

    def main(x):
        if (x < 0).any():
            raise CodedError("negative")
        return x
    """
    assert_same_everywhere(source, torch.arange(4.0) - 10)


def test_exception_class_rebound_after_compiling_raises_the_new_class():
    original, mended, result = original_and_mended(PRELUDE + GUARD)
    assert result.changed
    x = torch.arange(4.0)
    torch._dynamo.reset()
    compiled = torch.compile(mended.main, backend="eager")
    compiled(x)  # compiled while MaskError is the prelude's class

    class Replacement(Exception):
        pass

    for module in (original, mended):
        module.MaskError = Replacement
    with pytest.raises(Replacement):
        original.main(x - 10)
    with pytest.raises(Replacement):
        compiled(x - 10)


def test_assert_statement_under_optimize_is_dropped_like_the_original():
    source = PRELUDE + textwrap.dedent(
        """
        def main(x):
            assert (x > 0).all(), "must be positive"
            return x * 2
        """
    )
    result = mend(source)
    assert result.changed
    original = types.ModuleType("graphmend_test_optimized")
    mended = types.ModuleType("graphmend_test_optimized_mended")
    exec(compile(source, "<optimized>", "exec", optimize=1), original.__dict__)  # noqa: S102
    exec(compile(result.tree, "<optimized>", "exec", optimize=1), mended.__dict__)  # noqa: S102
    x = torch.arange(4.0) - 10
    assert torch.equal(original.main(x), x * 2)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(mended.main, backend="aot_eager")(x), x * 2)


def test_restored_traceback_names_the_users_source_line_in_format():
    original, mended, _ = original_and_mended(PRELUDE + GUARD)
    error = raised(mended.main, torch.arange(4.0) - 10, backend="eager")
    text = "".join(traceback.format_exception(error))
    assert "in main" in text and "During handling" not in text
    assert "graphmend-trap" not in text



def test_cached_lowering_not_reused_under_an_eager_callers_try_in_this_module():
    """The helper is first compiled straight from the compiled call (nothing catches
    there), then entered from `main`'s `try`, which TorchDynamo runs eagerly: the static
    condition kept the guard, so no lowered graph is there to be reused."""
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(HELPER + CAUGHT_EAGERLY_AFTER_A_BREAK))
    x = torch.arange(4.0)
    torch._dynamo.reset()
    torch.compile(mended.helper, backend="eager")(x)
    expected = original.main(x - 10)
    assert torch.equal(torch.compile(mended.main, backend="eager")(x - 10), expected)


CLEANED_UP_EAGERLY_AFTER_A_BREAK = """
class Seen:
    def __init__(self):
        self.exit_type = None
    def __enter__(self):
        return self
    def __exit__(self, kind, value, traceback):
        self.exit_type = kind
        return kind is ValueError

def main(x):
    seen = Seen()
    with seen:
        torch._dynamo.graph_break()
        y = helper(x)
    return seen.exit_type, x * 0 if seen.exit_type else y
"""


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize(
    "caller", [CAUGHT_EAGERLY_AFTER_A_BREAK, CLEANED_UP_EAGERLY_AFTER_A_BREAK], ids=["try", "with"]
)
def test_cached_lowering_reused_under_an_eager_callers_handler_in_another_module(backend, caller):
    """The helper is lowered when compiled straight from the compiled call (nothing
    catches there); its graph is then reused when an eager caller in another module
    (which the static condition cannot see) calls it inside a `try` or a `with`. The
    failed guard raises the user's exception inside the graph, so the caller's handler
    sees a ValueError, as it does in the original."""
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(HELPER))
    x = torch.arange(4.0)
    assert breaks(mended.helper, x) == 0  # lowered: nothing catches here
    torch._dynamo.reset()
    torch.compile(mended.helper, backend=backend)(x)
    expected = caller_in_another_module(original, caller)(x - 10)
    main = caller_in_another_module(mended, caller)
    got = torch.compile(main, backend=backend)(x - 10)
    if isinstance(expected, tuple):
        assert got[0] is expected[0] is ValueError
        expected, got = expected[1], got[1]
    assert torch.equal(got, expected)


def test_a_site_message_naming_another_site_is_not_restored_as_that_site():
    """A graph compiled elsewhere may number its sites differently: the message also
    names the line and function, and a mismatch leaves TorchDynamo's error alone."""
    number = traps._register_site(traps.TrapSite(KeyError, "<elsewhere>", 3, "elsewhere"))
    good = traps.site_message(number, 3, "elsewhere", "lost")
    with pytest.raises(KeyError):
        traps.raise_original_for_trap_failure(RuntimeError(good))
    stale = good.replace("|3|elsewhere|", "|4|elsewhere|")
    assert traps.raise_original_for_trap_failure(RuntimeError(stale)) is None


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_no_input_mutated_before_guard__module_buffer_and_global_tensor(backend):
    """A buffer and a global tensor become graph inputs too: their writes before a
    failing guard are kept exactly as the original keeps them."""
    source = """
    TOTAL = torch.zeros(4)

    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(4))

        def forward(self, x):
            self.count.add_(1)
            bump()
            return check(x)

    def bump():
        TOTAL.add_(1)

    def check(x):
        if (x < 0).any():
            raise ValueError("negative")
        return x
    """
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(source))
    assert result.changed
    states = []
    for module, compile_with in ((original, None), (mended, backend)):
        torch._dynamo.reset()
        network = module.Counter()
        call = torch.compile(network, backend=compile_with) if compile_with else network
        with pytest.raises(ValueError, match="negative"):
            call(torch.arange(4.0) - 10)
        states.append((network.count.tolist(), module.TOTAL.tolist()))
    assert states[0] == states[1]


def test_two_guards_in_one_function_stay_whole_and_restore_their_own_site():
    """Sites registered while tracing must not be read back by traced code (the list
    TorchDynamo saw would be stale): both guards lower, each restores its own raise."""
    source = """
    def main(x, y):
        if not torch.equal(x, y):
            raise ValueError("x and y differ")
        if not (y > -5).all():
            raise MaskError("y out of range")
        return x + y
    """
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(source))
    x = torch.arange(4.0)
    assert breaks(mended.main, x, x.clone()) == 0
    for arguments in ((x, x.clone()), (x, x + 1), (x - 10, x - 10)):
        reference, expected = run(original.main, original, arguments)
        for backend in ("eager", "aot_eager"):
            outcome, error = run(mended.main, mended, arguments, backend)
            assert outcome.key() == reference.key()
            if expected is not None:
                last = traceback.extract_tb(error.__traceback__)[-1]
                assert last.lineno == traceback.extract_tb(expected.__traceback__)[-1].lineno


RESUMED_CALLER = """
def helper(t, u):
    if t.max() > 0.5:
        raise ValueError("helper rejects its input")

def main(x, y):
    def bump(t):
        return t + 1.0
    if (y > 0).all():
        y = bump(x)
    y = helper(y, y)
    if x.sum() > y.sum():
        pass
"""


@pytest.mark.parametrize("scale", [0.1, 1.0])
def test_no_handler_in_eager_callers__caller_resumed_after_a_break(scale):
    """Found by the long fuzz run (seed 2039): the eager-caller walk met a frame of code
    TorchDynamo generated, whose constants are unhashable, and compiling failed with
    InternalTorchDynamoError instead of raising the helper's ValueError."""
    assert_same_everywhere(RESUMED_CALLER, torch.ones(4) * scale, torch.ones(4))


# --------------------------------------------------------------------------------------
# Where TorchDynamo could not resume after the original break, it ran the frame eagerly.

GUARD_IN_A_LOOP = """
def main(x):
    for step in range(2):
        if (x < -100).any():
            raise ValueError("too small")
    x.add_(1)
    return x
"""

GUARD_IN_A_HELPER_CALLED_IN_A_LOOP = """
def helper(t):
    if (t < -100).any():
        raise ValueError("too small")
    return t

def main(x):
    for step in range(2):
        x = helper(x)
    x.add_(1)
    return x
"""


@pytest.mark.parametrize(
    "source", [GUARD_IN_A_LOOP, GUARD_IN_A_HELPER_CALLED_IN_A_LOOP], ids=["in_the_loop", "helper_called_in_the_loop"]
)
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_frame_the_original_ran_eagerly__op_failing_while_traced_keeps_the_guard(source, backend):
    """A graph break in a loop makes TorchDynamo run the whole frame eagerly: the
    original's in-place write to a leaf that requires grad raised the user's RuntimeError
    (fuzz class "exposed TorchDynamo trace-time error"). A lowered guard compiles the
    frame, the write fails while tracing, and the trace restarts with the guard kept
    (``no_later_op_failed_while_tracing``), so the frame runs eagerly as the original's."""
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(source))
    assert result.changed, result.findings
    store.trace_time_declines.clear()
    observed = []
    for module, compiled in ((original, False), (original, True), (mended, True)):
        torch._dynamo.reset()
        target = torch.compile(module.main, backend=backend, dynamic=False) if compiled else module.main
        x = torch.arange(4.0).requires_grad_()
        with pytest.raises(Exception) as raised:
            target(x)
        observed.append((type(raised.value).__qualname__, str(raised.value)))
    assert observed[0][0] == "RuntimeError" and observed[0] == observed[1] == observed[2], observed
    assert any("fails while TorchDynamo traces it" in reason for reason in declined_reasons()), declined_reasons()


GUARD_IN_A_LOOP_THAT_COMPILES = """
def main(x):
    for step in range(3):
        if (x < -100).any():
            raise ValueError("too small")
        x = x * 2
    return x + 1
"""


def test_frame_the_original_ran_eagerly__guard_in_a_loop_is_lowered():
    """The original broke in the loop, so TorchDynamo ran the whole frame eagerly; the
    mended frame compiles to its end in one graph, with no random draw and no autograd,
    so the whole-trace checks keep the claim: one graph, the same results and error."""
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(GUARD_IN_A_LOOP_THAT_COMPILES))
    x = torch.arange(4.0)
    assert breaks(original.main, x) > 0
    assert breaks(mended.main, x) == 0
    assert_same_everywhere(GUARD_IN_A_LOOP_THAT_COMPILES, x)
    assert_same_everywhere(GUARD_IN_A_LOOP_THAT_COMPILES, x - 200)


GUARD_IN_A_LOOP_WITH_A_DRAW = """
def main(x):
    for step in range(2):
        if (x < -100).any():
            raise ValueError("too small")
        x = x + torch.rand(4)
    return x
"""


def test_frame_the_original_ran_eagerly__random_draws_join_where_drawn_in_order():
    """Eagerly, the original's draws advanced the generator as eager does; a backend
    that keeps the graph's order with torch's random ops as they are (``eager``,
    ``aot_eager``) draws the same numbers in the same order: the guard is lowered."""
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(GUARD_IN_A_LOOP_WITH_A_DRAW))
    x = torch.arange(4.0)
    assert graphs_and_breaks_under_aot_eager(original.main, x) == (0, 1)
    assert graphs_and_breaks_under_aot_eager(mended.main, x) == (1, 0)
    for value in (x, x - 200):
        torch.manual_seed(0)
        try:
            expected = original.main(value)
        except ValueError as error:
            expected = str(error)
        for backend in ("eager", "aot_eager"):
            torch._dynamo.reset()
            torch.manual_seed(0)
            try:
                got = torch.compile(mended.main, backend=backend)(value)
            except ValueError as error:
                got = str(error)
            assert type(got) is type(expected), backend
            assert got == expected if isinstance(got, str) else torch.equal(got, expected), backend


def test_frame_the_original_ran_eagerly__random_draws_keep_the_guard_under_autocast():
    """Under autocast, ``aot_eager`` would not differentiate the draws the original ran
    eagerly as eager does (``random_draws_stay_on_their_side``): the guard keeps its break."""
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(GUARD_IN_A_LOOP_WITH_A_DRAW))
    store.trace_time_declines.clear()
    x = torch.arange(4.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        counts = graphs_and_breaks_under_aot_eager(mended.main, x)
        assert counts == graphs_and_breaks_under_aot_eager(original.main, x)
    assert any("random draws" in reason for reason in declined_reasons()), declined_reasons()


def test_original_break_keeps_frame_compiled__guard_after_a_loop_is_still_lowered():
    source = """
    def main(x):
        for step in range(2):
            x = x * 2
        if (x < -100).any():
            raise ValueError("too small")
        return x + 1
    """
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(source))
    x = torch.arange(4.0)
    assert breaks(mended.main, x) == 0
    assert_same_everywhere(source, x)
    assert_same_everywhere(source, x - 200)


# --------------------------------------------------------------------------------------
# An op after a lowered guard that fails while TorchDynamo traces it.

FAILS_TRACING_AFTER_EQUAL_GUARD = """
def main(x, y):
    if not torch.equal(x, y):
        raise MaskError("x and y differ")
    return x + torch.ones(5)
"""

FAILS_TRACING_AFTER_TENSOR_GUARD = """
def main(x, y):
    if (y < -100).any():
        raise ValueError("too small")
    x.add_(1)
    return x
"""

FAILS_TRACING_AFTER_HELPER_GUARD = """
def helper(t):
    if (t < -100).any():
        raise ValueError("too small")
    return t * 2

def main(x, y):
    y = helper(y)
    x.add_(1)
    return x + y
"""


def compiled_outcomes(module, backend, calls):
    """What each call in turn raises (type, message without TorchDynamo's user-code suffix)."""
    torch._dynamo.reset()
    target = torch.compile(module.main, backend=backend, dynamic=False)
    outcomes = []
    for x, y in calls:
        try:
            target(x.detach().clone().requires_grad_(x.requires_grad), y.clone())
            outcomes.append(None)
        except Exception as error:  # noqa: BLE001 - the exception is the observation
            outcomes.append((type(error).__qualname__, str(error).split("\n\nfrom user code:")[0]))
    return outcomes


@pytest.mark.parametrize(
    "source, calls",
    [
        (FAILS_TRACING_AFTER_EQUAL_GUARD,
         [(torch.ones(2, 3), torch.zeros(2, 3)), (torch.ones(2, 3), torch.ones(2, 3))]),
        (FAILS_TRACING_AFTER_TENSOR_GUARD,
         [(torch.ones(4, requires_grad=True), torch.full((4,), -200.0)),
          (torch.ones(4, requires_grad=True), torch.ones(4))]),
        (FAILS_TRACING_AFTER_HELPER_GUARD,
         [(torch.ones(4, requires_grad=True), torch.full((4,), -200.0)),
          (torch.ones(4, requires_grad=True), torch.ones(4))]),
    ],
    ids=["equal_guard_then_shape_mismatch", "tensor_guard_then_leaf_write", "helper_guard_then_leaf_write"],
)
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_no_later_op_failed_while_tracing(source, calls, backend):
    """Fuzz class "exposed TorchDynamo trace-time error" (seed 2098): an op after a lowered
    guard failed while tracing the whole frame, so a call whose guard fails raised
    TorchDynamo's TorchRuntimeError instead of the guard's exception; and after the
    original's guard had failed once, TorchDynamo ran the rest of that frame eagerly, so
    later calls raised the op's plain RuntimeError. The trace is restarted with the guard
    kept as the original `if`: the same sequence of exceptions as the original compiled."""
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(source))
    assert result.changed, result.findings
    expected = compiled_outcomes(original, backend, calls)
    assert expected[0] is not None and expected[0][0] in ("MaskError", "ValueError"), expected
    assert compiled_outcomes(mended, backend, calls) == expected
    assert any("fails while TorchDynamo traces it" in reason for reason in declined_reasons())


def test_no_later_op_failed_while_tracing__guard_alone_is_still_lowered():
    """A trace that does not fail keeps its guards lowered (no break)."""
    source = """
    def main(x, y):
        if (y < -100).any():
            raise ValueError("too small")
        return x + y
    """
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(source))
    x = torch.ones(4)
    assert breaks(mended.main, x, x.clone()) == 0
    assert_same_everywhere(source, x, x - 300)


GUARD_THEN_AN_ERROR_THE_CODE_RAISES = """
def main(x, items):
    if (x < -100).any():
        raise ValueError("too small")
    y = x * 2.0
    return items[0] + y
"""


def test_frame_was_not_given_up_while_tracing():
    """An exception the code raises escapes the frame while TorchDynamo traces it (an
    empty list indexed), so TorchDynamo gives the frame up and runs it eagerly from
    then on. The original compiled the guard's test before its break and gave up only
    the resume function after it; with the guard lowered, the whole frame was given up
    (no graph). The guard keeps its `if`: the graphs and errors of the original."""
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(GUARD_THEN_AN_ERROR_THE_CODE_RAISES))
    assert result.changed, result.findings
    calls = ((torch.ones(4), []), (torch.full((4,), -200.0), []), (torch.ones(4), [torch.ones(4)]))
    counts = {name: graphs_and_outcomes_over_calls(module.main, calls)
              for name, module in (("original", original), ("mended", mended))}
    assert counts["original"][0] == 1
    assert counts["mended"] == counts["original"]
    assert any("gave up on the frame" in reason for reason in declined_reasons())
