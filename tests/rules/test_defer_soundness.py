"""[Defer] differential runs for the soundness classes of issue 15.

Each program runs original and mended, eagerly and under ``torch.compile`` with the
``eager`` and ``aot_eager`` backends. One observation is everything a user sees, in
the order they see it: printed lines, log records (level, line, function, message)
and warnings (category, line, message) all go to one stream, then the outcome (the
value, or the exception's type and message; where it was caught shows in the value
or the text). Mended code must give the original's observation under each backend.
"""

import contextlib
import io
import logging
import re
import sys
import textwrap
import warnings

import pytest
import torch

from helpers import load_module, original_and_mended

LOGGER_NAME = "graphmend_defer_soundness"
PRELUDE = f"""
import logging
import sys
import warnings
import torch
logger = logging.getLogger({LOGGER_NAME!r})
"""
BACKENDS = (None, "eager", "aot_eager")
RESUME_FUNCTION = re.compile(r"torch_dynamo_resume_in_(\w+?)_at_\d+")


def observe(function, args, backend, warning_filter="always"):
    """(text in order, outcome) of one call of ``function``, compiled with ``backend``."""
    stream = io.StringIO()
    logger = logging.getLogger(LOGGER_NAME)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("LOG %(levelname)s:%(lineno)d:%(funcName)s:%(message)s"))
    saved = logger.handlers[:], logger.propagate, logger.level
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.DEBUG)

    @torch._dynamo.disable  # like a real stream: traced code cannot reach its state
    def show(message, category, filename, lineno, file=None, line=None):
        if not filename.startswith("<fixture"):
            return  # TorchDynamo's own warnings are not the program's output
        stream.write(f"WARN {category.__name__}:{lineno}:{message}\n")

    target = function
    torch._dynamo.reset()
    if backend is not None:
        target = torch.compile(function, backend=backend, dynamic=False)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(stream):
            warnings.simplefilter(warning_filter)
            warnings.showwarning = show
            try:
                value = target(*args)
                outcome = ("value", _plain(value))
            except Exception as error:  # noqa: BLE001 - the observation is the exception itself
                outcome = ("raised", type(error).__name__, str(error))
    finally:
        logger.handlers, logger.propagate = saved[0], saved[1]
        logger.setLevel(saved[2])
    # A record made after a graph break names TorchDynamo's resume function; the
    # mended program, which has no break there, names the user's function as eager
    # code does. That difference is TorchDynamo's, not a change of behaviour.
    return RESUME_FUNCTION.sub(r"\1", stream.getvalue()), outcome


def _plain(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", value.detach().tolist(), value.requires_grad)
    if isinstance(value, (tuple, list)):
        return type(value).__name__, [_plain(item) for item in value]
    return value


def assert_same_behaviour(source, entry, make_args, warning_filter="always", rules=None):
    """``make_args()`` builds fresh arguments for every run (runs may mutate them)."""
    options = {} if rules is None else {"rules": rules}
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(source), **options)
    assert result.changed, "the program was expected to be mended"
    for backend in BACKENDS:
        expected = observe(getattr(original, entry), make_args(), backend, warning_filter)
        seen = observe(getattr(mended, entry), make_args(), backend, warning_filter)
        assert seen == expected, f"backend={backend}\nmended:   {seen}\noriginal: {expected}"
    return original, mended


# 1. Output before a failure inside the graph is kept; output after it is not.

def test_output_before_a_failing_guard_in_a_callee_is_kept():
    assert_same_behaviour(
        """
        def check(x):
            if (x < 0).any():
                raise ValueError("negative input")
            return x

        def f(x):
            print("before the check", x.shape)
            logger.warning("checking %d values", x.numel())
            y = check(x * 2)
            print("after the check")
            return y + 1
        """,
        "f",
        lambda: (-torch.ones(3),),
    )


def test_output_before_a_failing_guard_in_the_caller_is_kept():
    assert_same_behaviour(
        """
        def helper(x):
            print("helper ran", x.shape)
            return x * 2

        def f(x):
            y = helper(x)
            if (y > 10).any():
                raise OverflowError("too large")
            return y
        """,
        "f",
        lambda: (torch.full((2,), 100.0),),
    )


def test_output_before_a_run_time_error_in_an_op_is_kept():
    assert_same_behaviour(
        """
        def f(table, index):
            print("looking up", index.shape)
            rows = torch.nn.functional.embedding(index, table)
            print("looked up")
            return rows
        """,
        "f",
        lambda: (torch.randn(4, 2), torch.tensor([1, 7])),
    )


def test_a_warning_turned_into_an_error_raises_at_the_call_every_time():
    source = """
        def f(x):
            y = x + 1
            warnings.warn("degenerate input", RuntimeWarning)
            print("after the warning")
            return y

        def caller(x):
            try:
                return f(x)
            except RuntimeWarning as caught:
                print("caught", caught)
                return x
        """
    original, mended = assert_same_behaviour(source, "caller", lambda: (torch.ones(2),), "error")
    # The effect is not left pending for a later call either.
    compiled = torch.compile(mended.caller, backend="eager", dynamic=False)
    torch._dynamo.reset()
    stream = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(stream):
        warnings.simplefilter("error")
        compiled(torch.ones(2))
        compiled(torch.ones(2))
    assert stream.getvalue() == "caught degenerate input\n" * 2


def test_a_repr_that_raises_raises_at_the_call_and_is_caught_there():
    assert_same_behaviour(
        """
        class Unprintable:
            def __repr__(self):
                raise KeyError("no text")

        THING = Unprintable()

        def f(x):
            print("printing", THING)
            print("not reached")
            return x + 1

        def caller(x):
            try:
                return f(x)
            except KeyError:
                print("caught the repr failure")
                return x
        """,
        "caller",
        lambda: (torch.ones(2),),
    )


# 2. Output stays in order with output that stays eager.

def test_deferred_output_keeps_its_place_before_eager_stream_writes():
    assert_same_behaviour(
        """
        def f(x):
            print("first", x.shape)
            sys.stdout.write("second\\n")
            print("third")
            return x + 1
        """,
        "f",
        lambda: (torch.ones(2),),
    )


def test_deferred_output_keeps_its_place_before_an_unmended_helper():
    helper = load_module(
        "def shout(x):\n    print('helper says', x.shape)\n    return x * 2\n", "unmended_helper"
    )
    sys.modules["graphmend_defer_soundness_helper"] = helper
    try:
        assert_same_behaviour(
            """
            import graphmend_defer_soundness_helper as helper

            def f(x):
                print("before the helper")
                logger.info("also before")
                y = helper.shout(x)
                print("after the helper")
                return y
            """,
            "f",
            lambda: (torch.ones(2),),
        )
    finally:
        del sys.modules["graphmend_defer_soundness_helper"]


# 3. The printed value is the value at the call, with the text it had there.

def test_tensor_with_autograd_history_prints_its_grad_fn():
    assert_same_behaviour(
        """
        def f(w):
            y = torch.relu(w * 2)
            print("activation", y)
            return y.sum()
        """,
        "f",
        lambda: (torch.ones(3, requires_grad=True),),
    )


def test_parameter_prints_as_a_parameter():
    assert_same_behaviour(
        """
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = torch.nn.Parameter(torch.ones(2))

            def forward(self, x):
                print("scale", self.scale)
                return x * self.scale

        def f(x):
            torch.manual_seed(0)
            return Model()(x)
        """,
        "f",
        lambda: (torch.ones(2),),
    )


def test_mutable_object_prints_its_state_at_the_call():
    assert_same_behaviour(
        """
        def f(x, history):
            history.append(len(history))
            print("history", history, {"last": history[-1]})
            history.append(99)
            return x + 1
        """,
        "f",
        lambda: (torch.ones(2), [7]),
    )


def test_object_prints_the_state_it_has_at_the_call():
    assert_same_behaviour(
        """
        class Counter:
            def __init__(self):
                self.n = 0

            def __repr__(self):
                return f"Counter({self.n})"

        COUNTER = Counter()

        def f(x):
            COUNTER.n = 1
            print("counter", COUNTER)
            COUNTER.n = 11
            return x + 1
        """,
        "f",
        lambda: (torch.ones(2),),
    )


def test_tensor_updated_in_place_after_the_call_prints_the_old_value():
    assert_same_behaviour(
        """
        def f(x):
            y = x * 3
            print("y is", y)
            logger.warning("y is %s", y)
            y.add_(1)
            return y
        """,
        "f",
        lambda: (torch.arange(3.0),),
    )


# 4. Logger behaviour is what the logger does.

def test_logger_class_override_is_used():
    assert_same_behaviour(
        f"""
        class Shouting(logging.Logger):
            def warning(self, msg, *args, **kwargs):
                super().warning(msg.upper(), *args, **kwargs)

        logging.setLoggerClass(Shouting)
        shouting = logging.getLogger({LOGGER_NAME + ".shouting"!r})
        logging.setLoggerClass(logging.Logger)

        def f(x):
            shouting.warning("quiet words")
            return x + 1
        """,
        "f",
        lambda: (torch.ones(2),),
    )


def test_handler_state_read_after_the_call_is_current():
    assert_same_behaviour(
        f"""
        SEEN = []

        class Collect(logging.Handler):
            def emit(self, record):
                SEEN.append(record.getMessage())

        collecting = logging.getLogger({LOGGER_NAME + ".collecting"!r})
        collecting.addHandler(Collect())

        def f(x):
            SEEN.clear()
            collecting.warning("one")
            return x + len(SEEN)
        """,
        "f",
        lambda: (torch.ones(2),),
    )


def test_record_names_the_line_of_a_call_spanning_lines():
    assert_same_behaviour(
        """
        def f(x):
            logger.warning(
                "spans %s",
                "lines",
            )
            warnings.warn(
                "also spans",
            )
            return x + 1
        """,
        "f",
        lambda: (torch.ones(2),),
    )


def test_logger_warn_keeps_its_deprecation_warning():
    assert_same_behaviour(
        """
        def f(x):
            logger.warn("old spelling")
            print("and a print")
            return x + 1
        """,
        "f",
        lambda: (torch.ones(2),),
    )


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_deferrable_output_costs_no_graph_break(backend):
    """The exact mechanism still removes the breaks it is for."""
    from graphmend.counting import CountingBackend

    source = PRELUDE + textwrap.dedent(
        """
        def f(x):
            y = torch.relu(x)
            print("shape", y.shape, y)
            logger.warning("values %s", y.sum())
            warnings.warn("careful")
            return y * 2
        """
    )
    _, mended, _ = original_and_mended(source)
    torch._dynamo.reset()
    counter = CountingBackend()
    compiled = torch.compile(mended.f, backend=counter, dynamic=False)
    stream = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(stream):
        warnings.simplefilter("ignore")
        compiled(torch.ones(2))
    assert counter.graphs == 1
    assert stream.getvalue() == "shape torch.Size([2]) tensor([1., 1.])\n"


# 5. Output into a Python object that traced code also writes to.

class ListStream:
    """A stream in Python code: traced writes to it are TorchDynamo's to replay."""

    def __init__(self):
        self.pieces = []

    def write(self, text):
        self.pieces.append(text)
        return len(text)

    def flush(self):
        pass


def _run_with_python_stream(function, backend):
    stream = ListStream()
    torch._dynamo.reset()
    target = function if backend is None else torch.compile(function, backend=backend, dynamic=False)
    with contextlib.redirect_stdout(stream):
        value = target(torch.ones(2))
    return "".join(stream.pieces), value.tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_stream_is_opaque_to_tracing__print_into_a_python_stream_traced_code_writes(backend):
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(
        """
        def f(x):
            print("in the graph", x.shape)
            sys.stdout.write("written by the function\\n")
            return x + 1
        """
    ))
    assert _run_with_python_stream(mended.f, backend) == _run_with_python_stream(original.f, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stream_is_opaque_to_tracing__log_handler_on_a_python_stream(backend):
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(
        """
        def f(x):
            logger.warning("logged %d", x.numel())
            sys.stdout.write("written by the function\\n")
            return x + 1
        """
    ))

    def run(function):
        stream = ListStream()
        logger = logging.getLogger(LOGGER_NAME)
        saved = logger.handlers[:], logger.propagate
        logger.handlers, logger.propagate = [logging.StreamHandler(stream)], False
        try:
            torch._dynamo.reset()
            target = function if backend is None else torch.compile(function, backend=backend, dynamic=False)
            with contextlib.redirect_stdout(stream):
                value = target(torch.ones(2))
        finally:
            logger.handlers, logger.propagate = saved
        return "".join(stream.pieces), value.tolist()

    assert run(mended.f) == run(original.f)


@pytest.mark.parametrize("backend", BACKENDS)
def test_showwarning_is_opaque_to_tracing__replaced_by_python_code_that_shares_state(backend):
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(
        """
        def f(x):
            warnings.warn("careful")
            sys.stdout.write("written by the function\\n")
            return x + 1
        """
    ))

    def run(function):
        stream = ListStream()

        def show(message, category, filename, lineno, file=None, line=None):
            if filename.startswith("<fixture"):
                stream.write(f"WARN {message}\\n")

        torch._dynamo.reset()
        target = function if backend is None else torch.compile(function, backend=backend, dynamic=False)
        with warnings.catch_warnings(), contextlib.redirect_stdout(stream):
            warnings.simplefilter("always")
            warnings.showwarning = show
            value = target(torch.ones(2))
        return "".join(stream.pieces), value.tolist()

    assert run(mended.f) == run(original.f)


def test_output_into_a_stream_under_dynamo_disable_stays_in_the_graph():
    """A Python stream TorchDynamo does not trace into is as safe as a real file."""
    from graphmend.counting import CountingBackend

    class OpaqueStream(ListStream):
        @torch._dynamo.disable
        def write(self, text):
            return super().write(text)

    _, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(
        """
        def f(x):
            print("in the graph", x.shape)
            return x + 1
        """
    ))
    torch._dynamo.reset()
    counter = CountingBackend()
    stream = OpaqueStream()
    with contextlib.redirect_stdout(stream):
        torch.compile(mended.f, backend=counter, dynamic=False)(torch.ones(2))
    assert counter.graphs == 1
    assert "".join(stream.pieces) == "in the graph torch.Size([2])\n"


# 6. An op that fails while TorchDynamo traces it, after output put in the graph.

@pytest.mark.parametrize(
    "body",
    [
        # The original broke the graph at the print: the print ran, then tracing the
        # rest failed (TorchRuntimeError after the text).
        """
        def f(x):
            print("before the failing op")
            x.add_(1)
            return x
        """,
        # A break in a loop: TorchDynamo ran the original frame eagerly, so the op
        # raised the user's RuntimeError.
        """
        def f(x):
            for step in range(2):
                print("step", step)
            x.add_(1)
            return x
        """,
        # The same through a logger call in a helper.
        """
        def report(x):
            logger.warning("reporting %d values", x.numel())

        def f(x):
            report(x)
            x.add_(1)
            return x
        """,
    ],
    ids=["print_then_leaf_write", "print_in_a_loop_then_leaf_write", "helper_log_then_leaf_write"],
)
def test_no_later_op_failed_while_tracing__output_before_an_op_that_fails_tracing(body):
    assert_same_behaviour(body, "f", lambda: (torch.ones(3, requires_grad=True),))


def test_output_stays_in_the_graph_when_nothing_after_it_fails_tracing():
    from graphmend.counting import CountingBackend

    _, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(
        """
        def f(x):
            print("before", x.shape)
            return x * 2
        """
    ))
    torch._dynamo.reset()
    counter = CountingBackend()
    with contextlib.redirect_stdout(io.StringIO()):
        torch.compile(mended.f, backend=counter, dynamic=False)(torch.ones(3, requires_grad=True))
    assert counter.graphs == 1


# 7. A call whose own arguments make it fail fails at the call (output_call_arguments.py).

@pytest.mark.parametrize(
    "call, caught",
    [
        ('print("value", end=5)', "TypeError"),
        ('print("a", "b", sep=b"-")', "TypeError"),
        ('logger.log("loud", "message %s", 3)', "TypeError"),
        ('logger.log(x.sum(), "message")', "TypeError"),
        ("logger.warning()", "TypeError"),
        ('logger.warning("extra", extra={"message": "clash"})', "KeyError"),
        ('warnings.warn("careful", UserWarning, category=UserWarning)', "TypeError"),
    ],
    ids=[
        "print_separators_are_strings__end",
        "print_separators_are_strings__sep",
        "log_level_is_an_integer__string",
        "log_level_is_an_integer__tensor",
        "log_message_is_given",
        "extra_names_no_record_attribute",
        "warning_arguments_given_once",
    ],
)
def test_a_call_its_arguments_make_fail_fails_at_the_call_inside_a_try_there_or_in_the_caller(call, caught):
    assert_same_behaviour(
        f"""
        def f(x):
            y = x * 2
            try:
                {call}
            except {caught} as error:
                print("caught", type(error).__name__)
            print("after")
            return y + 1
        """,
        "f",
        lambda: (torch.ones(3),),
    )
    assert_same_behaviour(
        f"""
        def g(x):
            y = x * 2
            {call}
            print("not reached")
            return y + 1

        def caller(x):
            try:
                return g(x)
            except {caught} as error:
                print("caught", type(error).__name__)
                return x
        """,
        "caller",
        lambda: (torch.ones(3),),
    )


@pytest.mark.parametrize(
    "call",
    [
        'logger.warning("count %d", "many")',
        'logger.warning("a %s b %s", 1)',
        'logger.warning("%x", 1.5)',
        'logger.warning("%(name)s", 1)',
    ],
    ids=["number_conversion_of_a_string", "too_few_arguments", "hex_of_a_float", "named_conversion"],
)
def test_log_message_formats__logging_reports_the_error_with_the_stack_at_the_call(call):
    """Logging catches a formatting error and prints it with the call stack at the
    call; from inside a graph that stack would end in graphmend's runtime."""
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(
        f"""
        def f(x):
            y = x * 2
            {call}
            return y + 1
        """
    ))
    logger = logging.getLogger(LOGGER_NAME)
    saved = logger.handlers[:], logger.propagate
    logger.handlers, logger.propagate = [logging.StreamHandler(io.StringIO())], False
    try:
        for backend in BACKENDS:
            reports = []
            for module in (original, mended):
                function = module.f
                torch._dynamo.reset()
                if backend is not None:
                    function = torch.compile(function, backend=backend, dynamic=False)
                errors = io.StringIO()
                with contextlib.redirect_stderr(errors):
                    function(torch.ones(3))
                reports.append(errors.getvalue())
            assert "--- Logging error ---" in reports[0]
            assert reports[1] == reports[0], f"backend={backend}"
    finally:
        logger.handlers, logger.propagate = saved


@pytest.mark.parametrize(
    "call",
    [
        'print("a", "b", sep="-", end="")',
        'logger.log(logging.WARNING, "count %d of %s", x.numel(), "values")',
        'logger.warning("%5.2f%% and %x", 1.5, 255)',
        'warnings.warn("careful", category=UserWarning)',
    ],
    ids=["print", "log", "number_conversions", "warn"],
)
def test_a_call_its_arguments_do_not_make_fail_stays_in_the_graph(call):
    from graphmend.counting import CountingBackend

    _, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(
        f"""
        def f(x):
            y = x * 2
            {call}
            return y + 1
        """
    ))
    torch._dynamo.reset()
    counter = CountingBackend()
    # Ignored warnings: pytest records shown ones into a list, which keeps them eager.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(mended.f, backend=counter, dynamic=False)(torch.ones(3))
    assert counter.graphs == 1  # a break at the call would make two


# 8. Output settings the trace decided on, changed by the program between two calls.

def _calls_with_a_change_between(module, entry, backend, change, make_args):
    """Outcomes of two calls of ``module.<entry>`` compiled once, ``change()`` between."""
    torch._dynamo.reset()
    function = torch.compile(getattr(module, entry), backend=backend, dynamic=False)
    outcomes = []
    saved_stdout = sys.stdout
    shown = io.StringIO()

    @torch._dynamo.disable  # like a real stream: traced code cannot reach its state
    def show(message, category, filename, lineno, file=None, line=None):
        shown.write(f"{category.__name__}: {message}\n")

    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        sys.stdout = io.StringIO()
        try:
            for call in range(2):
                if call == 1:
                    change(module)
                arguments = make_args()
                try:
                    outcome = ("value", _plain(function(*arguments)))
                except Exception as error:  # noqa: BLE001 - the observation is the exception itself
                    outcome = ("raised", type(error).__name__, str(error))
                outcomes.append((
                    outcome, [_plain(argument) for argument in arguments], list(module.HISTORY),
                    dict(vars(module.STATE)), shown.getvalue(),
                ))
        finally:
            sys.stdout = saved_stdout
    return outcomes


def _assert_same_with_a_change_between(source, entry, change, make_args):
    original, mended, result = original_and_mended(
        PRELUDE + "HISTORY = []\nclass State:\n    pass\nSTATE = State()\n" + textwrap.dedent(source)
    )
    assert result.changed
    for backend in ("eager", "aot_eager"):
        expected = _calls_with_a_change_between(original, entry, backend, change, make_args)
        seen = _calls_with_a_change_between(mended, entry, backend, change, make_args)
        assert seen == expected, f"backend={backend}\nmended:   {seen}\noriginal: {expected}"


# A stream whose ``write`` is Python code appending to ``HISTORY``, which the function reads.
LIST_STREAM = """
class ListStream:
    def write(self, text):
        HISTORY.append(text)
        return len(text)

    def flush(self):
        pass
"""


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_standard_stream_swapped_between_calls_for_a_stream_whose_write_is_python_code(stream):
    """The trace put the print in the graph for a builtin stream; the second call's
    stream appends to a list the function reads after printing. ``print(file=
    sys.stderr)`` names the stream and is performed into the one it holds then, but the
    decision read that stream's type, guarded on."""

    def swap(module):
        setattr(sys, stream, module.ListStream())

    file = ", file=sys.stderr" if stream == "stderr" else ""
    _assert_same_with_a_change_between(
        LIST_STREAM + textwrap.dedent(f"""
        def f(x):
            print("value", x.sum(){file})
            return x + len(HISTORY)
        """),
        "f",
        swap,
        lambda: (torch.ones(2),),
    )


@pytest.mark.parametrize(
    "body, entry",
    [
        (
            """
            def f(x, total):
                total.add_(1.0)
                warnings.warn("careful")
                return x * 2
            """,
            "f",
        ),
        (
            # A write TorchDynamo replays after the graph, to a value no guard reads.
            """
            def f(x, total):
                STATE.last = "before the warning"
                warnings.warn("careful")
                return x * 2
            """,
            "f",
        ),
        (
            """
            def g(x, total):
                y = x * 2
                warnings.warn("careful")
                return y

            def f(x, total):
                try:
                    return g(x, total)
                except UserWarning:
                    HISTORY.append("caught")
                    return x
            """,
            "f",
        ),
    ],
    ids=["no_input_mutated_before", "no_pending_side_effect_before", "no_handler_in_traced_frames"],
)
def test_nothing_lost_if_the_warning_raises__filter_set_to_error_between_calls(body, entry):
    def errors_from_now_on(module):
        warnings.simplefilter("error")
        vars(module.STATE).clear()

    _assert_same_with_a_change_between(body, entry, errors_from_now_on, lambda: (torch.ones(2), torch.zeros(2)))


def _compiled_counting_graphs(function):
    """``function`` compiled afresh with a backend that counts the graphs it is given."""
    from graphmend.counting import CountingBackend

    torch._dynamo.reset()
    counter = CountingBackend()
    return torch.compile(function, backend=counter, dynamic=False), counter


def _texts_per_call_with_a_new_stream_each_call(source: str, stream_of) -> dict:
    """For the original and the mended program: what was written into each of three
    streams, one made for each call of ``f`` (``stream_of(module, stream, call)`` puts it
    in place), and the graphs compiled over the calls."""
    original, mended, result = original_and_mended(PRELUDE + "import io\nimport types\n" + textwrap.dedent(source))
    assert result.changed
    seen = {}
    saved_stderr = sys.stderr
    try:
        for name, module in (("original", original), ("mended", mended)):
            compiled, counter = _compiled_counting_graphs(module.f)
            streams = []
            for call in range(3):
                streams.append(io.StringIO())
                stream_of(module, streams[-1], call)
                compiled(torch.full((3,), float(call)))
            seen[name] = ([stream.getvalue() for stream in streams], counter.graphs)
    finally:
        sys.stderr = saved_stderr
    return seen


PRINTED = ["value tensor(0.)\n", "value tensor(6.)\n", "value tensor(12.)\n"]


def test_print_into_stderr_swapped_for_another_builtin_stream_every_call_compiles_once():
    """``contextlib.redirect_stderr`` around each call: the print names ``sys.stderr``
    and finds the stream when performed, so no call compiles again (guarded on the
    stream's identity, every call compiled again)."""

    def swap(module, stream, call):
        sys.stderr = stream

    seen = _texts_per_call_with_a_new_stream_each_call(
        """
        def f(x):
            y = x * 2
            print("value", y.sum(), file=sys.stderr)
            return y + 1
        """,
        swap,
    )
    assert seen == {"original": (PRINTED, 2), "mended": (PRINTED, 1)}


def test_a_print_into_a_stream_that_is_not_a_standard_one_adds_no_compilation():
    """The print keeps its call; nothing guards on the stream, which each call replaces."""

    def swap(module, stream, call):
        module.STREAMS.stderr = stream

    seen = _texts_per_call_with_a_new_stream_each_call(
        """
        STREAMS = types.SimpleNamespace(stderr=None)

        def f(x):
            y = x * 2
            print("value", y.sum(), file=STREAMS.stderr)
            return y + 1
        """,
        swap,
    )
    assert seen["mended"] == seen["original"] == (PRINTED, 2)


# sys.stderr is swapped every call; the print's stream is the one set on the first call.
HELD_FROM_THE_FIRST_CALL = ["".join(PRINTED), "", ""]


@pytest.mark.parametrize("holder", ["STREAMS", "sys"], ids=["another-object", "a-global-named-sys"])
def test_standard_stream_read__a_stderr_attribute_of_another_object_is_not_sys_stderr(holder):
    """Only ``sys.stderr`` itself is found again by name: the stream another object holds
    as ``stderr`` (``sys.stderr`` when first called) is the one the call writes to, also
    where that object is a module global named ``sys`` (the name TorchDynamo's source
    reads, not the module)."""

    def swap(module, stream, call):
        sys.stderr = stream
        if call == 0:
            getattr(module, holder).stderr = stream

    seen = _texts_per_call_with_a_new_stream_each_call(
        f"""
        {holder} = types.SimpleNamespace(stderr=None)

        def f(x):
            y = x * 2
            print("value", y.sum(), file={holder}.stderr)
            return y + 1
        """,
        swap,
    )
    assert seen["mended"][0] == seen["original"][0] == HELD_FROM_THE_FIRST_CALL


def _original_then_mended_compiled(source: str, backend: str):
    """Each of the original and the mended module, with its ``f`` compiled afresh."""
    original, mended, result = original_and_mended(source)
    assert result.changed
    for module in (original, mended):
        torch._dynamo.reset()
        yield module, torch.compile(module.f, backend=backend, dynamic=False)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize(
    "body, printed_to",
    [
        (
            """
            saved = sys.stdout
            sys.stdout = sys.stderr
            print("where", x.sum())
            sys.stdout = saved
            """,
            "stderr",
        ),
        (
            """
            saved = sys.stderr
            sys.stdout, sys.stderr = sys.stderr, sys.stdout
            print("where", x.sum(), file=sys.stderr)
            sys.stdout, sys.stderr = sys.stderr, saved
            """,
            "stdout",
        ),
    ],
    ids=["stdout-pointed-at-stderr", "both-swapped"],
)
def test_no_output_state_changed_in_trace__standard_streams_swapped_before_the_print(body, printed_to, backend):
    """TorchDynamo applies ``sys.stdout = ...`` only after the graph: a print in the graph
    would write to the stream of before the swap."""
    source = PRELUDE + "def f(x):\n" + textwrap.indent(textwrap.dedent(body), "    ") + "    return x * 2\n"
    seen = []
    for _, compiled in _original_then_mended_compiled(source, backend):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            value = compiled(torch.ones(2))
        seen.append((out.getvalue(), err.getvalue(), value.tolist()))
    assert seen[1] == seen[0]
    text = "where tensor(2.)\n"
    assert seen[0][:2] == ((text, "") if printed_to == "stdout" else ("", text))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_why_not_exact_log__a_method_replaced_on_the_logger_itself_for_one_call(backend):
    """``mock.patch.object(logger, "warning")`` around the second of three calls of one
    compiled function: the original call runs the mock, and no record is made. Without
    the check a record was made in the graph and the mock never called; without the
    guard, the first call's graph ran again on the second."""
    from unittest import mock

    source = PRELUDE + textwrap.dedent(
        f"""
        patched_logger = logging.getLogger("{LOGGER_NAME}.patched")

        def f(x):
            y = x * 2
            patched_logger.warning("value %s", y.sum())
            return y + 1
        """
    )
    seen = []
    for module, compiled in _original_then_mended_compiled(source, backend):
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        module.patched_logger.addHandler(handler)
        module.patched_logger.propagate = False
        calls = []
        try:
            for call in range(3):
                if call == 1:
                    with mock.patch.object(module.patched_logger, "warning") as patched:
                        compiled(torch.full((2,), float(call)))
                    calls.append([str(arguments) for arguments in patched.call_args_list])
                else:
                    compiled(torch.full((2,), float(call)))
        finally:
            module.patched_logger.removeHandler(handler)
        seen.append((stream.getvalue(), calls))
    assert seen[1] == seen[0]
    assert seen[0] == ("value tensor(0.)\nvalue tensor(8.)\n", [["call('value %s', tensor(4.))"]])


def test_swapping_stdout_for_another_builtin_stream_between_calls_compiles_nothing_more():
    from graphmend.counting import CountingBackend

    _, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(
        """
        def f(x):
            y = x * 2
            print("value", y.sum())
            warnings.warn("careful")
            return y + 1
        """
    ))
    torch._dynamo.reset()
    counter = CountingBackend()
    compiled = torch.compile(mended.f, backend=counter, dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            with contextlib.redirect_stdout(io.StringIO()):
                compiled(torch.ones(3))
    assert counter.graphs == 1


def _warnings_modules_own_display():
    """The warnings module's own ``_showwarnmsg_impl`` (pytest records warnings through
    a list's ``append`` while a test runs), from a fresh copy of the module."""
    import importlib.util

    spec = importlib.util.find_spec("warnings")
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    return fresh._showwarnmsg_impl


_WARNING_READ_BACK = """
HISTORY = []
""" + LIST_STREAM + """
def keep(message, category, filename, lineno, file=None, line=None):
    HISTORY.append(str(message))

def f(x):
    warnings.warn("careful")
    return x + len(HISTORY)
"""


def _assert_two_calls_are_the_originals(source, two_calls, expected, *changes):
    """``two_calls(module, backend, *changes)`` of the original gives ``expected``, and of
    the mended program the same, under each backend."""
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(source))
    assert result.changed
    for backend in ("eager", "aot_eager"):
        assert two_calls(original, backend, *changes) == expected, backend
        assert two_calls(mended, backend, *changes) == expected, backend


@torch._dynamo.disable  # traced code cannot reach what it does
def _show_nowhere(message, category, filename, lineno, file=None, line=None):
    pass


def _two_calls_shown_on_stderr(module, backend, change, first_display=None):
    """Two calls of ``module.f`` compiled once, warnings shown every time (``always``) on
    ``sys.stderr`` by the warnings module's own code (or first by ``first_display``),
    ``change`` between them."""
    torch._dynamo.reset()
    function = torch.compile(module.f, backend=backend, dynamic=False)
    module.HISTORY.clear()
    saved = sys.stderr
    outcomes = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = warnings._showwarning_orig
        warnings._showwarnmsg_impl = _warnings_modules_own_display()
        if first_display is not None:
            warnings.showwarning = first_display
        try:
            sys.stderr = io.StringIO()
            outcomes.append(function(torch.ones(2)).tolist())
            change(module)
            outcomes.append(function(torch.ones(2)).tolist())
        finally:
            sys.stderr = saved
    return outcomes, len(module.HISTORY)


@pytest.mark.parametrize(
    "change, first_display",
    [
        (lambda module: setattr(warnings, "showwarning", module.keep), None),
        (lambda module: setattr(warnings, "showwarning", module.keep), _show_nowhere),
        (lambda module: setattr(sys, "stderr", module.ListStream()), None),
    ],
    ids=["showwarning_replaced", "opaque_showwarning_replaced", "stderr_swapped"],
)
def test_warning_shown_between_calls_by_python_code_the_function_reads(change, first_display):
    """The trace put the warning in the graph while it was shown on a builtin stream by
    the warnings module's own code (or by a function traced code cannot reach, as the
    fuzz harness shows them: seeds 47 and 124); before the second call
    ``warnings.showwarning`` is replaced, or ``sys.stderr`` swapped, by Python code that
    appends to a list the function reads after warning (the graph had read the list
    before its warning)."""
    _assert_two_calls_are_the_originals(
        _WARNING_READ_BACK, _two_calls_shown_on_stderr, ([[1.0, 1.0], [2.0, 2.0]], 1), change, first_display
    )


def test_recording_warnings_around_every_call_compiles_nothing_more():
    """``catch_warnings(record=True)`` shows through a new list's ``append`` each time,
    and TorchDynamo drops a graph guarded on an object once it is freed: the trace is
    guarded on the displaying function's module only, and compiles as the original."""
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(
        """
        def f(x):
            y = x * 2
            warnings.warn("careful")
            return y + 1
        """
    ))
    graphs = {}
    for name, module in (("original", original), ("mended", mended)):
        compiled, counter = _compiled_counting_graphs(module.f)
        recorded = []
        for _ in range(4):
            with warnings.catch_warnings(record=True) as log:
                warnings.simplefilter("always")
                compiled(torch.ones(3))
            recorded.append([str(w.message) for w in log])
        assert recorded == [["careful"]] * 4, name
        graphs[name] = counter.graphs
    assert graphs == {"original": 2, "mended": 2}


_LOG_READ_BACK = """
HISTORY = []
own = logging.getLogger("graphmend_defer_soundness.own")
""" + LIST_STREAM + """
class Keep(logging.Handler):
    def emit(self, record):
        HISTORY.append(record.getMessage())

def f(x):
    own.warning("careful %s", 1)
    return x + len(HISTORY)
"""


def _two_logged_calls(module, backend, setup, change):
    torch._dynamo.reset()
    function = torch.compile(module.f, backend=backend, dynamic=False)
    module.HISTORY.clear()
    own = module.own
    saved = sys.stderr, own.handlers[:], own.propagate
    outcomes = []
    try:
        sys.stderr = io.StringIO()
        own.handlers, own.propagate = [], False
        setup(module)
        outcomes.append(function(torch.ones(2)).tolist())
        change(module)
        outcomes.append(function(torch.ones(2)).tolist())
    finally:
        sys.stderr, own.handlers, own.propagate = saved
    return outcomes, len(module.HISTORY)


def _stream_handler(module):
    module.own.addHandler(logging.StreamHandler(io.StringIO()))


@pytest.mark.parametrize(
    "setup, change",
    [
        (_stream_handler, lambda module: module.own.addHandler(module.Keep())),
        (_stream_handler, lambda module: module.own.handlers[0].setStream(module.ListStream())),
        (lambda module: None, lambda module: setattr(sys, "stderr", module.ListStream())),
    ],
    ids=["handler_added", "handler_stream_swapped", "last_resort_stream_swapped"],
)
def test_log_record_reaching_python_code_from_the_second_call_on(setup, change):
    """The trace put the record in the graph while every handler it reaches only wrote
    to a builtin stream; before the second call a handler is added, or a handler's stream
    (or, with no handler, ``sys.stderr``, where the last-resort handler writes) swapped,
    for Python code that appends to a list the function reads after logging."""
    _assert_two_calls_are_the_originals(
        _LOG_READ_BACK, _two_logged_calls, ([[1.0, 1.0], [2.0, 2.0]], 1), setup, change
    )


def test_without_handlers_a_record_into_a_python_stderr_keeps_its_call():
    """With no handler the last-resort handler writes to ``sys.stderr``: a stream whose
    ``write`` is Python code is decided on as a handler's would be."""
    def python_stderr(module):
        sys.stderr = module.ListStream()

    _assert_two_calls_are_the_originals(
        _LOG_READ_BACK, _two_logged_calls, ([[2.0, 2.0], [3.0, 3.0]], 2), python_stderr, lambda module: None
    )


# Print options and the default dtype: the text of a tensor printed inside the graph.

def _printed_over_calls(function, backend, calls, between=None):
    """(text printed over ``calls`` calls of ``function`` compiled with ``backend``,
    graphs compiled; ``None`` for a counting backend's count under another backend).
    ``between(call)`` runs before each call after the first; print options and the
    default dtype are restored afterwards."""
    from graphmend.counting import CountingBackend

    torch._dynamo.reset()
    counter = CountingBackend() if backend == "count" else None
    compiled = torch.compile(function, backend=counter or backend, dynamic=False)
    stream = io.StringIO()
    try:
        with contextlib.redirect_stdout(stream):
            for call in range(calls):
                if call and between is not None:
                    between(call)
                compiled(torch.tensor([1.0, 2.0]))
    finally:
        torch.set_printoptions(profile="default")
        torch.set_default_dtype(torch.float32)
    return stream.getvalue(), (counter.graphs if counter is not None else None)


PRINT_OPTIONS_SET_IN_THE_FUNCTION = {
    "precision": """
        def f(x):
            torch.set_printoptions(precision=2)
            print("scaled", x * 1.1234567)
            torch.set_printoptions(precision=4)
            return x + 1
        """,
    "sci_mode": """
        def f(x):
            torch.set_printoptions(sci_mode=True)
            print(x * 1.1234567)
            torch.set_printoptions(profile="default")
            return x + 1
        """,
    "logged": """
        def f(x):
            torch.set_printoptions(precision=1)
            logger.warning("scaled %s", x * 1.1234567)
            torch.set_printoptions(precision=4)
            return x + 1
        """,
    "warned": """
        def f(x):
            torch.set_printoptions(precision=1)
            warnings.warn(f"scaled {x.shape}")
            print(x * 1.1234567)
            torch.set_printoptions(precision=4)
            return x + 1
        """,
}


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("body", sorted(PRINT_OPTIONS_SET_IN_THE_FUNCTION))
def test_no_print_options_changed_in_trace__set_before_the_output(body, backend):
    """``torch.set_printoptions`` traced before an output changes ``PRINT_OPTS`` only
    after the graph has run (TorchDynamo replays the writes): a tensor printed inside
    the graph showed the options of before the call (``tensor([1.1235])`` where the
    original printed ``tensor([1.12])``). The output keeps its break, and the mended
    frame compiles no more graphs than the original."""
    source = PRELUDE + textwrap.dedent(PRINT_OPTIONS_SET_IN_THE_FUNCTION[body])
    original, mended, result = original_and_mended(source)
    assert result.changed
    expected = observe(original.f, (torch.tensor([1.0, 2.0]),), None)
    for module in (original, mended):
        assert observe(module.f, (torch.tensor([1.0, 2.0]),), backend) == expected, module.__name__
    torch.set_printoptions(profile="default")
    counts = [_printed_over_calls(module.f, "count", 2)[1] for module in (original, mended)]
    assert counts[1] <= counts[0], counts


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_print_options_changed_between_calls_print_as_the_original(backend):
    """A graph whose print was fixed while tracing runs again after the program changed
    the print options outside it: the text is rendered when the graph runs, with the
    options then in force, as the original call renders it."""
    source = PRELUDE + textwrap.dedent(
        """
        def f(x):
            y = x * 1.1234567
            print("scaled", y)
            return y + 1
        """
    )
    original, mended, result = original_and_mended(source)
    assert result.changed

    def change(call):
        torch.set_printoptions(precision=call, sci_mode=call == 2)

    texts = [_printed_over_calls(module.f, backend, 3, change)[0] for module in (original, mended)]
    assert texts[1] == texts[0]
    assert texts[0].splitlines()[1] == "scaled tensor([1.1, 2.2])"
    assert _printed_over_calls(mended.f, "count", 3, change)[1] == 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_default_dtype_set_in_the_function_prints_as_the_original_compiled(backend):
    """A float64 tensor prints without ``dtype=`` while float64 is the default: inside
    the graph the dtype in force where the print is decides, as in the original compiled
    program (whose ``set_default_dtype`` TorchDynamo keeps in the graph, and which
    AOTAutograd does not replay: both print ``dtype=torch.float64`` there)."""
    source = PRELUDE + textwrap.dedent(
        """
        def f(x):
            torch.set_default_dtype(torch.float64)
            print(x.double() * 2, torch.ones(1))
            torch.set_default_dtype(torch.float32)
            return x + 1
        """
    )
    original, mended, result = original_and_mended(source)
    assert result.changed

    def change(call):
        torch.set_default_dtype(torch.float64 if call == 1 else torch.float32)

    texts = [_printed_over_calls(module.f, backend, 3, change)[0] for module in (original, mended)]
    assert texts[1] == texts[0]
