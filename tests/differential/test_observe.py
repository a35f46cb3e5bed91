"""The fuzzer's comparison sees every observable: one hand-made change per channel.

Each row is a program and a "mended" text that differs from it in exactly one way a
rewrite could; ``compare`` (eager mode only: fast) must report the difference in the
named part, and must report nothing for the unchanged program.
"""

from __future__ import annotations

import pytest
import torch

from graphmend.runtime import reset
from tools.fuzz.grammar import HEADER, Program
from tools.fuzz.observe import compare


def program_of(body: str, requires_grad: bool = False) -> str:
    lines = "\n".join("    " + line for line in body.strip("\n").split("\n"))
    return HEADER.format(shape=(4,)) + "\n\ndef f(x, y, box, items, table):\n" + lines + "\n"


CHANGES = [
    # (name, part, original body, changed body, requires_grad)
    ("identity of a returned input", "value", "return x", "return x * 1.0", False),
    ("storage shared with an input", "value", "return x.view(-1)", "return x.clone().view(-1)", False),
    ("in-place write to an argument", "arguments", "x.add_(1.0)\nreturn y", "return y", False),
    ("attribute of an argument", "arguments", "box.n = 5\nreturn y", "return y", False),
    ("container argument", "arguments", "items.append(x)\nreturn y", "items.append(x.clone())\nreturn y", False),
    ("global written", "globals", "global COUNT\nCOUNT += 1\nreturn y", "return y", False),
    ("global tensor in place", "globals", "TOTAL.add_(x)\nreturn y", "return y", False),
    ("random draw", "rng", "torch.rand(1)\nreturn y", "return y", False),
    ("stdout text", "events", 'print("a", x)\nreturn y', 'print("a", x.detach())\nreturn y', True),
    ("stdout against stderr", "events", 'print("a")\nreturn y', 'print("a", file=sys.stderr)\nreturn y', False),
    ("output order", "events", 'print("a")\nlogger.warning("b")\nreturn y', 'logger.warning("b")\nprint("a")\nreturn y', False),
    ("warning category", "events", 'warnings.warn("w")\nreturn y', 'warnings.warn("w", RuntimeWarning)\nreturn y', False),
    ("log record line", "events", 'logger.info("i")\nreturn y', 'pass\nlogger.info("i")\nreturn y', False),
    ("exception type", "error", 'raise ValueError("v")', 'raise RuntimeError("v")', False),
    ("exception context", "error", 'raise ValueError("v")',
     'try:\n    raise KeyError("k")\nexcept KeyError:\n    raise ValueError("v")', False),
    ("NaN gradient from an untaken arm", "gradients", "return x * 2.0",
     "return torch.where(x > -100, x * 2.0, torch.sqrt(x))", True),
    ("gradient requires_grad of the result", "value", "return x * 2.0", "return (x * 2.0).detach()", True),
]


@pytest.mark.parametrize(
    "name, part, original, changed, requires_grad", CHANGES, ids=[row[0].replace(" ", "-") for row in CHANGES]
)
def test_compare_reports_the_changed_part(name, part, original, changed, requires_grad) -> None:
    program = Program(seed=7, source=program_of(original), requires_grad=requires_grad)
    same = compare(program, modes=("eager",), mended_source=program_of(original))
    assert same.differences == []
    report = compare(program, modes=("eager",), mended_source=program_of(changed))
    assert [d.part for d in report.differences] == [part], [d.describe() for d in report.differences]


def _observation(error=None, globals_=(("A", 1), ("B", 1)), gradients=None, rng="r"):
    from tools.fuzz.observe import Observation

    return Observation(error=error, value=("v",), gradients=gradients, arguments=(), globals=globals_, rng=rng)


def test_each_global_and_each_gradient_may_be_either_originals_but_not_neither() -> None:
    """A compiled run may match the original eager run in one global (a draw kept as
    eagerly) and the original compiled run in another (a tensor's text): each is an
    observable of its own. So is each input's gradient (seed 40497)."""
    from tools.fuzz.observe import _each_call_is_the_originals as each_call

    eager = [_observation(globals_=(("A", 1), ("B", 1)), gradients=(None, "g"))]
    compiled = [_observation(globals_=(("A", 2), ("B", 2)), gradients=("zeros", "h"))]
    mixed = [_observation(globals_=(("A", 1), ("B", 2)), gradients=("zeros", "g"))]
    assert each_call(eager, compiled, mixed)
    assert not each_call(eager, compiled, [_observation(globals_=(("A", 1), ("B", 3)), gradients=(None, "g"))])
    assert not each_call(eager, compiled, [_observation(globals_=(("A", 1), ("B", 1)), gradients=("x", "g"))])
    failed = ("backward raised", "RuntimeError", "m")
    assert not each_call(
        [_observation(gradients=failed)], [_observation(gradients=("backward raised", "E", "n"))],
        [_observation(gradients=("backward raised", "RuntimeError", "n"))],
    )


def test_globals_are_not_compared_after_a_call_that_failed_as_torch_did() -> None:
    """Seed 40225: inductor failed to compile the first call, as it does for the
    original; the globals of later calls sum calls that went two ways."""
    from tools.fuzz.observe import _each_call_is_the_originals as each_call

    eager = [_observation(globals_=(("W", "printed"),)), _observation(globals_=(("W", "printed"),))]
    compiled = [_observation(error="BackendCompilerFailed", globals_=(("W", ""),)),
                _observation(error="ValueError", globals_=(("W", "printed"),))]
    mended = [_observation(error="BackendCompilerFailed", globals_=(("W", ""),)), _observation(globals_=(("W", ""),))]
    assert each_call(eager, compiled, mended)
    # before any such call, the globals count
    assert not each_call(eager[1:], compiled[1:], mended[1:])


def test_the_generator_is_not_compared_from_a_call_that_failed_as_torch_did() -> None:
    """Seed 53506: the call raised TorchDynamo's trace-time error, as the original
    compiled did; how far the generator got depends on which graphs ran before the
    failing trace. Before such a call it counts."""
    from tools.fuzz.observe import _each_call_is_the_originals as each_call

    eager = [_observation(rng="r0"), _observation(error="RuntimeError", rng="r1")]
    compiled = [_observation(rng="r0"), _observation(error="TorchRuntimeError", rng="r2")]
    mended = [_observation(rng="r0"), _observation(error="TorchRuntimeError", rng="r3")]
    assert each_call(eager, compiled, mended)
    assert not each_call(eager, compiled, [_observation(rng="r9"), mended[1]])


def test_autograd_node_names_in_text_kept_in_a_global_are_set_aside() -> None:
    """Seed 53307: a log handler writes the text of a tensor into a list the program
    keeps; made in a graph it names ``CompiledFunctionBackward``."""
    from tools.fuzz.observe import _each_call_is_the_originals as each_call

    def kept(text):
        return _observation(globals_=(("WRITTEN", ("list", (("str", text),))),))

    eager = [kept("own log tensor(6., grad_fn=<SumBackward0>)\n")]
    compiled = [kept("own log tensor(6., grad_fn=<SumBackward0>)\n")]
    assert each_call(eager, compiled, [kept("own log tensor(6., grad_fn=<CompiledFunctionBackward>)\n")])
    assert not each_call(eager, compiled, [kept("own log tensor(7., grad_fn=<SumBackward0>)\n")])


def test_printed_autograd_node_names_are_set_aside_but_not_their_presence() -> None:
    """Seed 40850: the same tensor prints ``grad_fn=<AbsBackward0>`` made eagerly and
    ``grad_fn=<CompiledFunctionBackward>`` made in a graph (with the line wrapped
    otherwise); a tensor printed without one is still a difference."""
    from tools.fuzz.observe import _each_call_is_the_originals as each_call

    def printed(text):
        from tools.fuzz.observe import Observation

        return Observation(value=("v",), events=[("stdout", text)], globals=(), rng="r")

    eager = [printed("t tensor([0.5000], grad_fn=<AbsBackward0>)\n")]
    compiled = [printed("t tensor([0.5000],\n       grad_fn=<CompiledFunctionBackward>)\n")]
    assert each_call(eager, compiled, [printed("t tensor([0.5000], grad_fn=<MulBackward0>)\n")])
    assert not each_call(eager, compiled, [printed("t tensor([0.5000])\n")])
    assert not each_call(eager, compiled, [printed("t tensor([0.6000], grad_fn=<AbsBackward0>)\n")])


def test_under_inductor_each_output_line_may_be_either_originals_but_not_their_count() -> None:
    """Seed 54150: under inductor the printed sum is inductor's rounding (as the original
    compiled prints it) while the logged random tensor is eager's numbers (graphmend
    draws as eagerly where inductor's generator would draw others). Each line is one
    original's; a line neither printed, or a line dropped, is still a difference, and
    without ``output_lines_apart`` the output stays one piece."""
    from tools.fuzz.observe import Observation
    from tools.fuzz.observe import _each_call_is_the_originals as each_call

    def printed(*events):
        return Observation(value=("v",), events=list(events), globals=(), rng="r")

    eager = [printed(("stdout", "sum 3.84220814704895\n"), ("log", "INFO", "r tensor([0.4963])", 7, "f"))]
    compiled = [printed(("stdout", "sum 3.842207908630371\n"), ("log", "INFO", "r tensor([0.1117])", 7, "f"))]
    mixed = [printed(("stdout", "sum 3.842207908630371\n"), ("log", "INFO", "r tensor([0.4963])", 7, "f"))]
    assert each_call(eager, compiled, mixed, output_lines_apart=True)
    assert not each_call(eager, compiled, mixed)
    neither = [printed(("stdout", "sum 3.9\n"), ("log", "INFO", "r tensor([0.4963])", 7, "f"))]
    assert not each_call(eager, compiled, neither, output_lines_apart=True)
    dropped = [printed(("stdout", "sum 3.842207908630371\n"))]
    assert not each_call(eager, compiled, dropped, output_lines_apart=True)


def test_the_generator_may_be_where_the_original_compiled_keeping_every_draw_leaves_it() -> None:
    """Seed 70303: TorchDynamo ended a loop early (a check raising inside it, in a
    ``try``), with graphmend and without; AOTAutograd then dropped a draw nothing used,
    which graphmend keeps. The mended generator is where the original compiled with the
    ``eager`` backend (every draw kept) leaves it, and only that third state is taken."""
    from tools.fuzz.observe import _each_call_is_the_originals as each_call

    eager = [_observation(rng="r-eager")]
    compiled = [_observation(rng="r-aot")]
    kept = [_observation(rng="r-kept")]
    asked = []

    def draws_kept():
        asked.append(True)
        return kept

    assert each_call(eager, compiled, [_observation(rng="r-kept")], draws_kept=draws_kept)
    assert not each_call(eager, compiled, [_observation(rng="r-other")], draws_kept=draws_kept)
    assert not each_call(eager, compiled, [_observation(rng="r-kept")])
    assert each_call(eager, compiled, [_observation(rng="r-aot")], draws_kept=lambda: 1 / 0)
    assert asked == [True, True]


def test_each_argument_may_be_either_originals_but_not_neither() -> None:
    """Seed 80296: after a call that failed as the original compiled did, ``box.t``
    holds a draw kept as eagerly while ``items`` lacks the entry the failing call never
    appended: each argument is a piece of its own, as each global is."""
    from tools.fuzz.observe import _each_call_is_the_originals as each_call

    def arguments(box, items):
        return Observation(value=("v",), arguments=("tuple", ("is", None), (("x",), box, items)), globals=(), rng="r")

    from tools.fuzz.observe import Observation

    eager = [arguments("box-eager", "items-two")]
    compiled = [arguments("box-compiled", "items-one")]
    assert each_call(eager, compiled, [arguments("box-eager", "items-one")])
    assert not each_call(eager, compiled, [arguments("box-other", "items-one")])


def test_under_aot_autograd_a_gradient_zero_may_have_either_sign_but_nothing_else_may_differ() -> None:
    """Seed 71221: AOTAutograd's traced backward gives +0 where eager autograd gives -0
    (``y.neg_()`` before a product with a zero draw)."""
    from tools.fuzz.observe import Normaliser
    from tools.fuzz.observe import _each_call_is_the_originals as each_call

    normalise = Normaliser({}, {})

    def gradient(*values):
        return _observation(gradients=(normalise(torch.tensor(values)), ("NoneType", None)))

    eager = [gradient(-0.0, -0.5)]
    compiled = [gradient(-0.5, 0.0)]
    assert each_call(eager, compiled, [gradient(0.0, -0.5)], zero_signs_aside=True)
    assert not each_call(eager, compiled, [gradient(0.0, -0.5)])
    assert not each_call(eager, compiled, [gradient(0.0, -0.25)], zero_signs_aside=True)


def test_past_a_kept_check_the_reference_is_the_original_with_its_checks_made_eagerly() -> None:
    """Seeds 7349 and 91042: the original compiled raises the traced helper's
    RuntimeError, the mended call (as eagerly) catches the check's own error and goes on
    to gradients AOTAutograd computes in its own way; the original with its checks made
    outside TorchDynamo is the reference then. A change elsewhere is still reported."""
    from collections import Counter

    from tools.fuzz.grammar import HEADER

    def source(returned: str) -> str:
        return (
            HEADER.format(shape=(4,)) + "from graphmend_fuzz_checks import torch_compilable_check\n\n"
            "def f(x, y, box, items, table):\n"
            "    a = x * 2.0\n"
            "    y2 = y * 2.0\n"
            "    try:\n"
            '        torch_compilable_check(x.sum() > 100.0, "small", error_type=ProgramError)\n'
            "    except ProgramError as error:\n"
            '        print("caught", error)\n'
            '    print("y2", y2.sum())\n'
            f"    return {returned}\n"
        )

    def program(features: Counter) -> Program:
        return Program(seed=7, source=source("a * 3.0"), requires_grad=True, features=features)

    kept = source("a * 3.0").replace(
        "from graphmend_fuzz_checks import torch_compilable_check",
        "from graphmend_fuzz_checks import torch_compilable_check_eagerly as torch_compilable_check",
    )
    checked = Counter({"check-call": 1})
    assert compare(program(checked), modes=("compiled:aot_eager",), mended_source=kept).differences == []
    # Without that reference: y's gradient is AOTAutograd's zeros (the graph before the
    # check returned y2, which the loss does not use) where eager's is None.
    unchecked = compare(program(Counter()), modes=("compiled:aot_eager",), mended_source=kept)
    assert [d.part for d in unchecked.differences] == ["gradients"]
    changed = kept.replace("return a * 3.0", "return a * 3.5")
    assert compare(program(checked), modes=("compiled:aot_eager",), mended_source=changed).differences != []


def test_under_inductor_numbers_in_printed_text_compare_as_float_bits_aside() -> None:
    """Seed 71925: a sum inductor computes in the graph prints its own last digits."""
    from tools.fuzz.observe import Observation
    from tools.fuzz.observe import _each_call_is_the_originals as each_call

    def printed(text):
        return Observation(value=("v",), events=[("stdout", text)], globals=(), rng="r")

    eager = [printed("f -14.593205451965332\n")]
    compiled = [printed("f -14.593205451965332\n")]
    close = [printed("f -14.593206405639648\n")]
    assert each_call(eager, compiled, close, float_bits_aside=True, output_lines_apart=True)
    assert not each_call(eager, compiled, close, output_lines_apart=True)
    assert not each_call(eager, compiled, [printed("f -14.6\n")], float_bits_aside=True, output_lines_apart=True)


def test_under_inductor_a_printed_sum_near_zero_compares_as_zero() -> None:
    """Seed 343001: terms that cancel leave rounding error alone, in inductor's order."""
    from tools.fuzz.observe import Observation
    from tools.fuzz.observe import _each_call_is_the_originals as each_call

    def printed(text):
        return Observation(value=("v",), events=[("stdout", text)], globals=(), rng="r")

    eager = [printed("s tensor(-2.2650e-06)\n")]
    compiled = [printed("s tensor(-1.3113e-06)\n")]
    rounded = [printed("s tensor(5.6624e-07)\n")]
    assert each_call(eager, compiled, rounded, float_bits_aside=True, output_lines_apart=True)
    assert not each_call(eager, compiled, rounded, output_lines_apart=True)
    assert not each_call(eager, compiled, [printed("s tensor(0.0003)\n")], float_bits_aside=True, output_lines_apart=True)


def test_where_torch_failed_on_the_original_first_its_trace_time_error_is_the_reference() -> None:
    """Seeds 132739 and 133609: torch's compiler fails on the original compiled (here
    AOTAutograd rejects a graph with an in-place write to a value its backward needs),
    the mended run gets further and TorchDynamo raises its ``TorchRuntimeError`` for the
    op eager fails at, on the same line. Reported apart, not as a difference; a mended
    run that also changes anything else, or fails on another line, still differs."""
    from collections import Counter

    from tools.fuzz.grammar import HEADER

    def source(update: str, failing: str = "    return y + torch.ones(5)\n") -> str:
        return (
            HEADER.format(shape=(4,)) + "\ndef f(x, y, box, items, table):\n"
            "    a = x * 2.0\n"
            "    b = a.sin()\n"
            f"    {update}\n"
            "    box.t = b\n"
            '    print("between graphs")\n'
            + failing
        )

    program = Program(seed=8, source=source("a.add_(1.0)"), requires_grad=True, features=Counter())
    mended = source("a = a + 1.0")
    report = compare(program, modes=("compiled:aot_eager",), mended_source=mended)
    assert report.differences == [] and len(report.traced_op_failures) == 1
    assert report.traced_op_failures[0].actual[:2] == ("torch._dynamo.exc", "TorchRuntimeError")
    elsewhere = source("a = a + 1.0", "    z = y * 2.0\n    return z + torch.ones(5)\n")
    assert compare(program, modes=("compiled:aot_eager",), mended_source=elsewhere).differences != []
    changed = mended.replace("box.t = b", "box.t = b\n    box.n = 7")
    assert compare(program, modes=("compiled:aot_eager",), mended_source=changed).differences != []


def test_a_compile_state_test_answering_as_traced_is_reported_apart() -> None:
    """Seed 140784: the original compiled runs the frame eagerly after an error while
    tracing, so its `if torch.compiler.is_compiling():` takes the eager arm; graphmend's
    compiled run traced it and took the other. The reference for that is the original
    with each compile-state test answering True, run eagerly; a mended run whose traced
    arm computes anything else still differs. graphmend now refuses the capture that made
    that trace (the graph broke on the size it made:
    ``whole_trace_conditions.captured_sizes_decide_no_break``), so the mended text given here makes the
    capture unconditionally, as graphmend did before."""
    from graphmend.rewrite.pipeline import mend_module_source
    from tools.fuzz.grammar import generate
    from tools.fuzz.observe import with_backend

    program = generate(140784)
    mended = mend_module_source(
        with_backend(program.source, "eager"), filename=f"/graphmend-fuzz/program_{program.seed}.py",
        module_name=f"gm_fuzz_{program.seed}", scope="entry",
    ).source
    assert "x = x + 0.5" in mended and mended.count(_CAPTURE_CLAIM) == 1
    captured = mended.replace(_CAPTURE_CLAIM, "True")
    report = compare(program, modes=("compiled:eager",), mended_source=captured)
    assert report.differences == [] and len(report.compile_state_answers) == 1
    changed = captured.replace("x = x + 0.5", "x = x + 0.75")
    assert compare(program, modes=("compiled:eager",), mended_source=changed).differences != []
    reset()
    own = compare(program, modes=("compiled:eager",))
    assert own.differences == [] and own.compile_state_answers == []


_CAPTURE_CLAIM = "__graphmend__.dynamic_shapes.may_capture()"


GUARDED = 'z = x * 2\nif (x < 0).any():\n    raise ValueError("negative input")\nreturn z + y'


def test_a_caller_in_another_module_that_catches_sees_the_exception_the_original_raised() -> None:
    """``f`` compiled alone on the first input set (its guard lowered: nothing catches
    there), then called from the other module's ``caller`` after a break inside a
    ``try``: TorchDynamo reuses ``f``'s graph under a handler no trace saw. The warm-up
    call is an observation of its own, compared like the others."""
    program = Program(seed=0, source=program_of(GUARDED), compile_site="other-module", caller_catches=True)
    report = compare(program, modes=("eager", "compiled:eager"))
    assert report.differences == [] and report.torch_own == []
    from tools.fuzz.observe import call_labels, input_values

    labels = [label[0] for label in call_labels(program, input_values(0, (4,)))]
    assert labels == ["warm-up", "positive", "negative", "zeros", "small"]


def test_the_warm_up_call_is_compared() -> None:
    """A mended text whose first call (the warm-up) prints otherwise differs there."""
    program = Program(seed=0, source=program_of(GUARDED), compile_site="other-module", caller_catches=True)
    changed = program_of('print("first")\n' + GUARDED)
    report = compare(program, modes=("eager",), mended_source=changed)
    assert [(d.input_name, d.part) for d in report.differences] == [("warm-up", "events")]


def test_helpers_compiled_first_are_called_before_f_and_compared() -> None:
    source = program_of("return helper1(x, y)").replace(
        "\n\ndef f(", '\n\ndef helper1(t, u):\n    print("helper1")\n    return t + u\n\n\ndef f('
    )
    program = Program(seed=0, source=source, warm_helpers=("helper1",))
    assert compare(program, modes=("eager", "compiled:eager")).differences == []
    changed = source.replace('print("helper1")', 'print("helper 1")')
    report = compare(program, modes=("eager",), mended_source=changed)
    assert [(d.input_name, d.part) for d in report.differences][:1] == [("warm-up", "events")]


def test_calls_from_threads_are_made_from_a_thread_of_their_own() -> None:
    body = "import threading\nHISTORY.append(threading.current_thread().name)\nreturn y"
    program = Program(seed=7, source=program_of(body), calls_from_threads=True)
    made_there = compare(program, modes=("eager",), mended_source=program_of('HISTORY.append("fuzz-call")\nreturn y'))
    assert made_there.differences == []
    report = compare(program, modes=("eager",), mended_source=program_of('HISTORY.append("MainThread")\nreturn y'))
    assert [d.part for d in report.differences] == ["globals"]


def test_the_backward_of_a_call_from_a_thread_is_made_in_that_thread() -> None:
    """Seed 243502: autograd orders the gradients it sums by numbers counted per thread,
    so a backward made in the main thread summed in an order that depended on the
    process's history. The gradient hook records the thread the backward ran in."""
    from tools.fuzz import observe

    body = (
        "import threading\n"
        "y.register_hook(lambda g: HISTORY.append(threading.current_thread().name))\n"
        "return y * 2.0"
    )
    program = Program(seed=7, source=program_of(body), calls_from_threads=True, requires_grad=True)
    loaded = observe.prepare(program, "original", "eager", "/graphmend-fuzz/program_7.py", "gm_fuzz_7")
    try:
        observations = observe.run_program(program, loaded, "eager", observe.input_values(7, (4,)))
    finally:
        observe.unload(loaded)
    history = repr(observations[-1].globals)
    assert "fuzz-call" in history and "MainThread" not in history


def test_an_exception_of_a_call_from_a_thread_is_compared() -> None:
    program = Program(seed=7, source=program_of('raise ValueError("v")'), calls_from_threads=True)
    assert compare(program, modes=("eager",), mended_source=program_of('raise ValueError("v")')).differences == []
    report = compare(program, modes=("eager",), mended_source=program_of('raise RuntimeError("v")'))
    assert [d.part for d in report.differences] == ["error"]


def test_a_traced_op_error_counts_as_torchs_own_only_when_the_original_alone_raises_it() -> None:
    """Seed 221043: the original compiled ran an op eagerly (its own RuntimeError) only
    because TorchDynamo had given up the op's frame on an earlier call; the mended
    compiled traced it (TorchDynamo's TorchRuntimeError at the same line). That is
    TorchDynamo's own error when the original compiled, called on that input alone,
    raises it too; not otherwise."""
    from tools.fuzz.observe import Observation, traced_op_failures

    traced = ("torch._dynamo.exc", "TorchRuntimeError", "shape")
    eager = [Observation(error=("builtins", "RuntimeError", "shape"), error_site=("p.py", 9))]
    original = [Observation(error=("builtins", "RuntimeError", "shape"), error_site=("p.py", 9))]
    mended = [Observation(error=traced, error_site=("p.py", 9))]
    alone_same = lambda index: Observation(error=traced, error_site=("p.py", 9))  # noqa: E731
    alone_eager = lambda index: original[index]  # noqa: E731
    assert traced_op_failures(eager, original, mended, alone_same)[0].error == traced
    assert traced_op_failures(eager, original, mended, alone_eager)[0].error == eager[0].error
    assert traced_op_failures(eager, original, mended)[0].error == eager[0].error
    elsewhere = [Observation(error=traced, error_site=("p.py", 12))]
    assert traced_op_failures(eager, original, elsewhere, alone_same)[0].error == eager[0].error
    # Seed 232488: eagerly the program caught the op's error; alone, the original compiled
    # raised TorchDynamo's, as the mended did.
    caught = [Observation(error=None)]
    assert traced_op_failures(caught, caught, mended, alone_same)[0].error == traced
    assert traced_op_failures(caught, caught, mended, lambda index: caught[index])[0].error is None


def test_a_call_that_stopped_at_torchdynamos_error_may_be_the_original_alone_whole() -> None:
    """Seed 232488: the call stopped at TorchDynamo's error, so its output is the original
    compiled's called alone (which stopped there too), not eager's; a call whose alone run
    raised otherwise keeps eager's observation."""
    from tools.fuzz.observe import Observation, calls_alone_as_observed

    traced = ("torch._dynamo.exc", "TorchRuntimeError", "shape")
    eager = [Observation(events=[("stdout", "a\n"), ("log", "later")]), Observation(events=[("stdout", "b\n")])]
    mended = [Observation(error=traced, error_site=("p.py", 9), events=[("stdout", "a\n")]), Observation(events=[("stdout", "b\n")])]
    alone = {0: Observation(error=traced, error_site=("p.py", 9), events=[("stdout", "a\n")])}
    assert calls_alone_as_observed(eager, mended, alone.get) == [alone[0], eager[1]]
    other = {0: Observation(error=("builtins", "RuntimeError", "shape"), error_site=("p.py", 9))}
    assert calls_alone_as_observed(eager, mended, other.get) == eager


def test_compile_state_answer_sets_substitute_each_test_site_in_source_order() -> None:
    from tools.fuzz import compile_state

    source = "if not is_compiling():\n    a()\nif torch.compiler.is_compiling():\n    b()\n"
    assert compile_state.answer_sets(source) == [frozenset(), {0}, {1}, {0, 1}]
    assert compile_state.answering(source, compile_state.variant(frozenset({1}))) == (
        "if not False:\n    a()\nif True:\n    b()\n"
    )
    assert compile_state.answer_sets("is_compiling()\n" * (compile_state.MOST_SITES + 1)) is None


def test_a_compile_state_mixture_counts_only_as_traced_at_least_where_the_original_compiled_traced() -> None:
    """Each string stands for one call's observation; an answer set names the sites
    answering True."""
    from tools.fuzz.compile_state import explained_by_answers

    runs = {frozenset(): ["AB"], frozenset({0}): ["B"], frozenset({1}): ["A"], frozenset({0, 1}): [""]}

    def same_call(reference, compiled, observed, call):
        return observed in (reference, compiled)

    # The original compiled ran both tests eagerly; the mended traced the first (232508).
    assert explained_by_answers(runs, ["AB"], ["B"], same_call)
    # Traced where the original compiled traced, and more.
    assert explained_by_answers(runs, ["A"], [""], same_call)
    # Eager where the original compiled traced: graphmend ran traced code eagerly.
    assert not explained_by_answers(runs, [""], ["B"], same_call)
    assert not explained_by_answers(runs, ["B"], ["A"], same_call)
    # No answer set shows the mended call, or the original compiled's.
    assert not explained_by_answers(runs, ["AB"], ["C"], same_call)
    assert not explained_by_answers(runs, ["C"], ["B"], same_call)


def test_a_mended_run_eager_where_the_original_compiled_traced_still_differs() -> None:
    """No break: the original compiled traces both tests and prints nothing. A "mended"
    text that prints the second line only is the original with the first test answering
    True and the second False, an answer set that leaves out a site the original
    compiled traced."""
    from collections import Counter

    header = HEADER.format(shape=(4,)) + "from torch.compiler import is_compiling\n"
    body = (
        "\n\ndef f(x, y, box, items, table):\n"
        "    z = x * 2.0\n"
        "    if not is_compiling():\n"
        '        print("first")\n'
        "    z = z + y\n"
        "    if not is_compiling():\n"
        '        print("second")\n'
        "    return z\n"
    )
    program = Program(seed=9, source=header + body, features=Counter())
    assert compare(program, modes=("compiled:eager",)).differences == []
    second_only = header + body.replace('print("first")', "pass").replace(
        "    if not is_compiling():\n        print(\"second\")", '    print("second")'
    )
    report = compare(program, modes=("compiled:eager",), mended_source=second_only)
    assert len(report.differences) == 1 and report.compile_state_answers == []
    nothing_printed = header + body.replace('print("first")', "pass").replace('print("second")', "pass")
    assert compare(program, modes=("compiled:eager",), mended_source=nothing_printed).differences == []



def test_a_global_the_call_rebinds_is_not_read_in_a_tensor_given_its_memory_later() -> None:
    """``TOTAL = TOTAL + x`` frees the old ``TOTAL`` (addition saves no input), and eagerly
    a gradient allocated next read as sharing ``TOTAL``'s storage, in the original and
    not in the mended run, whose ``torch.where`` allocates otherwise (a hand-made
    program). The normaliser holds the objects it names, so their memory is not given
    to a tensor the call makes. (Whether an unheld one's memory is given again is the
    allocator's choice: a fresh-clone CI run under load did not reuse it.)"""
    from tools.fuzz.observe import Normaliser

    def normaliser_of_a_freed_global(held: bool):
        total = torch.zeros(1000)
        storages = {total.untyped_storage().data_ptr(): "TOTAL"}
        return Normaliser({id(total): "TOTAL"}, storages, [total] if held else [])

    normalise = normaliser_of_a_freed_global(held=True)
    made = [torch.empty(1000) for _ in range(50)]
    assert [normalise(t)[-2:] for t in made] == [(("is", None), ("storage", None))] * 50


def test_a_program_compiled_dynamic_is_called_last_on_other_sizes() -> None:
    """``Program.compiled_dynamic``: ``torch.compile(..., dynamic=True)`` wherever the
    harness or the program compiles ``f``, and a fifth input set, ``resized``, each
    dimension one larger; the first four sets are the ones a static program gets. A
    mended text that computes otherwise on the other sizes alone differs there."""
    from tools.fuzz.grammar import generate
    from tools.fuzz.observe import call_labels, input_values

    static = input_values(3, (2, 3))
    sets = input_values(3, (2, 3), resized=True)
    assert [name for name, *_ in sets] == ["positive", "negative", "zeros", "small", "resized"]
    assert all(torch.equal(a[1], b[1]) and torch.equal(a[2], b[2]) for a, b in zip(static, sets))
    assert tuple(sets[-1][1].shape) == (3, 4)
    program = Program(seed=3, source=program_of("return x * 2.0"), shape=(2, 3), compiled_dynamic=True)
    assert [label[0] for label in call_labels(program, sets)][-1] == "resized"
    assert compare(program, modes=("eager", "compiled:eager")).differences == []
    other_sizes = program_of("if x.shape[0] == 2:\n    return x * 2.0\nreturn x * 3.0")
    report = compare(program, modes=("compiled:eager",), mended_source=other_sizes)
    assert [(d.mode, d.call, d.input_name) for d in report.differences] == [("compiled:eager", 4, "resized")]
    module_site = next(p for p in map(generate, range(400)) if p.compiled_dynamic and p.compile_site == "module")
    assert "dynamic=True)" in module_site.source


def test_size_symbol_names_in_a_printed_trace_time_error_are_set_aside() -> None:
    # Seed 331446: the same TorchDynamo error caught and printed by the program, its size
    # symbols numbered by how many sizes the trace had read before.
    from tools.fuzz.observe import Observation, _each_call_is_the_originals

    def printed(symbol: str) -> Observation:
        text = (
            "caught TorchRuntimeError RuntimeError when making fake tensor call\n  Explanation: Dynamo failed to"
            f" run FX node with fake tensors: call_method add_(*(FakeTensor(..., size=(s55,)), FakeTensor(...,"
            f" size=({symbol},))), **{{}}): got RuntimeError('Attempting to broadcast a dimension of length {symbol}')\n"
        )
        return Observation(globals=(), events=[("stdout", text)])

    def plain(text: str) -> Observation:
        return Observation(globals=(), events=[("stdout", text)])

    eager = [plain("caught RuntimeError The size of tensor a (4) must match\n")]
    assert _each_call_is_the_originals(eager, [printed("s17")], [printed("s57")])
    # Elsewhere, names alike are the program's own text and still count.
    assert not _each_call_is_the_originals(eager, [plain("s17\n")], [plain("s57\n")])


KEEPS_ITS_WARNINGS = '''
CALLS = []


def keep_warning(message, category, filename, lineno, file=None, line=None):
    HISTORY.append(str(message)[:40])


def before_call(index):
    if index >= 1:
        warnings.showwarning = keep_warning
'''


def test_torchdynamos_one_time_diagnostics_are_not_the_programs_output() -> None:
    """TorchDynamo warns once per process when it first traces a call of ``time.time``;
    the hand-made mended text reaches that call on the second call only, when the
    program's own ``showwarning`` keeps what it is shown (seed 370879)."""
    torch._dynamo.utils.warn_once_cache.clear()
    source = program_of("import time\ntime.time()\nreturn y * 2.0").replace(
        "\n\ndef f(", "\n" + KEEPS_ITS_WARNINGS + "\n\ndef f("
    )
    program = Program(seed=0, source=source)
    changed = source.replace("    time.time()\n", "    CALLS.append(1)\n    if len(CALLS) >= 2:\n        time.time()\n")
    report = compare(program, modes=("compiled:eager",), mended_source=changed)
    assert report.differences == []


@pytest.mark.slow
def test_original_alone_tells_a_crash_torch_makes_without_graphmend() -> None:
    """Seed 380404's original, compiled with aot_eager in a process without graphmend,
    leaves torch's dispatch state broken (the long run's harness crash is torch's); a
    program that does not, seed 380000, exits 0."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parents[2]
    script = root / "tools" / "fuzz" / "original_alone.py"
    environment = {"PYTHONPATH": f"{root / 'src'}", "PATH": "/usr/bin:/bin"}
    outcomes = {}
    for seed in (380404, 380000):
        done = subprocess.run([sys.executable, str(script), str(seed)], capture_output=True, text=True, env=environment)
        outcomes[seed] = done.returncode, done.stdout
    assert outcomes[380404][0] == 3 and "PythonDispatcher left in the dispatch state: True" in outcomes[380404][1]
    assert outcomes[380000][0] == 0 and outcomes[380000][1].count("left in the dispatch state: False") == 4


def test_torch_fx_printing_where_a_graph_raised_is_not_the_programs_output() -> None:
    """``torch.fx`` prints a traceback to stderr when a graph's generated code raises
    (seed 391274: ZeroDivisionError inside the mended program's graph, eagerly in the
    original's); the exception itself is still observed."""
    from tools.fuzz.observe import observing

    graph = torch.fx.symbolic_trace(lambda x: x.sum() + 1 // x.shape[0])
    events: list = []
    with observing([], 10, events), pytest.raises(ZeroDivisionError):
        graph(torch.ones(0))
    assert events == []
