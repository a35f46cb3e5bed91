"""Minimal programs for the differences the generated programs found.

Each test states what the ORIGINAL program does when run eagerly and checks that the
mended program, compiled (``torch.compile`` after ``import graphmend.runtime``),
does the same. Those marked ``xfail(strict=True)`` still differ (a fix turns them
into failures that ask for the mark to be removed, as for the seeds listed in
``test_generated_programs.KNOWN_DIFFERENCES``); the others were fixed and stay as
regression tests.
"""

from __future__ import annotations

import itertools
import textwrap

import pytest
import torch

from graphmend.runtime import reset
from graphmend.runtime.store import store
from tools.fuzz.harness import (
    build_variants,
    call_counting,
    call_observed,
    compile_counting,
    unload,
)

_numbers = itertools.count()


def run_both(source: str, x: torch.Tensor, y: torch.Tensor, log_level: int = 10):
    """(original run eagerly, mended run compiled, original breaks, mended breaks)."""
    expected, actual, original_count, mended_count = run_counts(source, x, y, log_level)
    return expected, actual, original_count.breaks, mended_count.breaks


def run_counts(source: str, x: torch.Tensor, y: torch.Tensor, log_level: int = 10):
    """(original run eagerly, mended run compiled, original BreakCount, mended BreakCount)."""
    reset()  # every program here is compiled from the same file name
    variants = build_variants(
        textwrap.dedent(source), "/graphmend-differential/regression.py", f"gm_regression_{next(_numbers)}"
    )
    try:
        expected = call_observed(variants.original.f, variants.original, log_level, (x, y))
        compiled, backend = compile_counting(variants.original.f)
        _, original_count = call_counting(compiled, backend, variants.original, log_level, (x, y))
        compiled, backend = compile_counting(variants.mended.f)
        actual, mended_count = call_counting(compiled, backend, variants.mended, log_level, (x, y))
        return expected, actual, original_count, mended_count
    finally:
        torch._dynamo.reset()
        unload(variants.original, variants.mended, variants.mended_text)


def test_deferred_print_is_not_overtaken_by_output_at_a_later_graph_break():
    """Defer: a deferred print must not be overtaken by output run eagerly at a later break.

    Found by the generated programs: the deferred ``print("a", z)`` was replayed only
    when the compiled call returned, after ``print(f"b {z.sum()}")`` had run at the
    graph break, so the compiled mended program printed "b" before "a".
    """
    source = """
        import torch

        def f(x, y):
            z = x + y
            print("a", z)
            print(f"b {z.sum()}")
            return z * 2
    """
    expected, actual, _, _ = run_both(source, torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    assert expected.events == [("stdout", "a tensor([2., 4.])\nb 6.0\n")]
    assert actual.events == expected.events


def test_deferred_f_string_of_a_tensor_shows_the_value_at_the_call():
    """Defer: a print formatting a tensor shows the value at the call, not a later one.

    Found by the generated programs: ``print(f"v {z}")`` was deferred (``z`` comes
    from no value operation) and TorchDynamo formatted the f-string when the effect
    was replayed, after ``z.add_(1)``.
    """
    source = """
        import torch

        def f(x, y):
            z = x + y
            print(f"v {z}")
            z.add_(1.0)
            return z
    """
    expected, actual, _, _ = run_both(source, torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    assert expected.events == [("stdout", "v tensor([2., 4.])\n")]
    assert actual.events == expected.events


def test_where_selects_a_name_that_is_only_read_by_a_later_augmented_assignment():
    """Where: ``h += y`` after the branch reads ``h``, so ``h`` needs its select.

    Found by the generated programs: only Load contexts counted as uses, so the
    compiled mended program raised UnboundLocalError.
    """
    source = """
        import torch

        def f(x, y):
            if x.sum() > 0:
                h = x + 1.0
            else:
                h = x - 1.0
            h += y
            return x * 2.0
    """
    expected, actual, _, _ = run_both(source, torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    assert expected.error is None
    assert actual.error == expected.error
    assert actual.value == expected.value


def test_where_keeps_the_in_place_effect_of_an_augmented_assignment_in_an_arm():
    """Where: ``x += 1.0`` in an arm updates the caller's tensor in place.

    Found by the generated programs: the arm was rewritten to bind ``x + 1.0`` to a
    new name, so the caller's tensor was no longer changed (Where now declines).
    """
    source = """
        import torch

        def f(x, y):
            if y.sum() > 0:
                x += 1.0
            return x * 2.0
    """
    expected, actual, _, _ = run_both(source, torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    assert expected.value == actual.value
    assert actual.arguments_after == expected.arguments_after  # x is [2., 3.] after the original


def test_warning_after_a_rewritten_branch_in_a_resume_function_keeps_its_line():
    source = """\
import warnings
import torch

def f(x, y):
    h = x * 0.25
    if x.sum() > 0:
        h.add_(1.0)
    if y.sum() > 0:
        h = x * 3.0
    else:
        h = x * y
    warnings.warn(f"bad {x.sum()}")
    return h
"""
    expected, actual, _, _ = run_both(source, torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    assert [event[4] for event in expected.events] == [12]
    assert actual.events == expected.events


LOOP_WITH_A_BRANCH = """
        import logging
        import torch

        logger = logging.getLogger(__name__)

        def f(x, y):
            h = x * 1.0
            for i in range(2):
                if x.sum() > 0:
                    h = h * 0.5
                else:
                    h = h - 0.5
            {after}
"""


def test_rest_of_eager_frame_compiles_whole__a_later_break_keeps_the_frame_skipped():
    """Found by the generated programs (seeds 125, 158), then by the long run (seed
    2477): a break inside a ``for`` loop makes TorchDynamo skip the whole frame (no
    graph; the bare count says 1 break). Where could remove it, but the ``.item()`` and
    logging breaks after the loop would then compile the rest of the frame in resumed
    frames, which the original ran eagerly (an op that fails while traced, a dropped
    random draw, would behave otherwise). So the trace keeps the loop's break and the
    frame is skipped as in the original (``graphmend.runtime.whole_trace_conditions``)."""
    source = LOOP_WITH_A_BRANCH.format(after='logger.info("v %s", y.sum().item())\n            return h')
    expected, actual, original, mended = run_counts(source, torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    assert actual.without(resume_function_names=True).events == expected.events
    assert (original.frames_skipped, original.graphs, original.breaks) == (1, 0, 1)
    assert (mended.frames_skipped, mended.graphs, mended.breaks) == (1, 0, 1)


def test_rest_of_eager_frame_compiles_whole__the_loop_break_goes_when_the_frame_is_one_graph():
    """The same loop without the later breaks: the mended frame compiles to its end in
    one graph, which the claim's checks see whole, so the loop's break is removed."""
    source = LOOP_WITH_A_BRANCH.format(after="return h + y")
    expected, actual, original, mended = run_counts(source, torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    assert actual.without(resume_function_names=True) == expected.without(resume_function_names=True)
    assert (original.frames_skipped, original.graphs, original.breaks) == (1, 0, 1)
    assert (mended.frames_skipped, mended.graphs, mended.breaks) == (0, 1, 0)


# A long-run program, reduced by hand: an input whose gradient nothing uses.
_UNUSED_INPUT_GRADIENT = """
    import torch

    def helper(t, u):
        print("in helper")
        return u * 0.25

    def f(x, y):
        y = torch.sigmoid(torch.sigmoid(y))
        x = helper(x, x)
        flat = x.flatten()
        (pos,) = torch.where(flat > 0.5)
        acc = flat * 0.5
        if pos.shape[0] >= 1:
            rows = flat[pos] * 2.0 + torch.tanh(acc[pos])
            rows = torch.nn.functional.relu(rows.reshape(-1, 1)).reshape(-1)
            acc[pos] = rows
        x = x + acc.reshape(x.shape)
        return torch.sigmoid(y)
"""


def test_an_input_the_loss_does_not_use_keeps_no_gradient_under_aot_autograd():
    """Capture's merged branch: its body became a function reading the frame's `acc` and
    `flat` from cells; TorchDynamo returned the cells' tensors from the graph, and
    AOTAutograd gave `x`, whose value the loss does not use, a zero gradient where the
    original compiled leaves it None (found by a long fuzzing run). The body's function now takes
    them as defaults."""
    import types

    from graphmend.rewrite.pipeline import mend_module_source

    source = textwrap.dedent(_UNUSED_INPUT_GRADIENT)
    gradients = []
    for mended in (False, True):
        reset()
        torch._dynamo.reset()
        filename = "/graphmend-differential/unused_input_gradient.py"
        result = mend_module_source(source, filename=filename) if mended else None
        module = types.ModuleType(f"gm_regression_unused_{mended}")
        exec(compile(result.tree if result is not None else source, filename, "exec"), module.__dict__)  # noqa: S102
        x = torch.tensor([[3.0, 0.6, 2.7], [0.3, 6.0, -3.0]], requires_grad=True)
        y = torch.full((2, 3), 0.5, requires_grad=True)
        torch.compile(module.f, backend="aot_eager")(x, y).sum().backward()
        gradients.append(x.grad)
    torch._dynamo.reset()
    assert gradients[0] is None
    assert gradients[1] is None


_EFFECT_BETWEEN_LAYER_NORMS = """
import torch
import torch.nn.functional as F

def f(x, residual, weight, bias, table, ids):
    encoded = F.layer_norm(x + residual, (32,), weight, bias)
    print("between the encoder and the decoder")
    embedded = table[ids] * 2.0
    decoded = F.layer_norm(embedded + torch.arange(6).unsqueeze(-1).float(), (32,), weight, bias)
    return encoded, decoded
"""


def _layer_norm_inputs():
    generator = torch.Generator().manual_seed(0)
    return (
        torch.randn(2, 8, 32, generator=generator), torch.randn(2, 8, 32, generator=generator),
        torch.randn(32, generator=generator), torch.randn(32, generator=generator),
        torch.randn(66, 32, generator=generator), torch.randint(0, 66, (2, 6), generator=generator),
    )


def _mended_module(source: str, name: str):
    import types

    from graphmend.rewrite.pipeline import mend_module_source

    filename = f"/graphmend-differential/{name}.py"
    result = mend_module_source(textwrap.dedent(source), filename=filename)
    module = types.ModuleType(name)
    exec(compile(result.tree, filename, "exec"), module.__dict__)  # noqa: S102
    return module


def test_an_output_without_tensors_gives_its_operator_a_tensor_on_the_graphs_device():
    """Inductor gives an operator with no tensor operand no device, and then does not emit
    the kernels pending before it first: a kernel fused from code on both sides of the
    output ran after buffers it reads were freed (bart, marian, blenderbot and whisper under
    transformers 4.52.4 failed under inductor). The effect takes an empty tensor instead."""
    module = _mended_module(_EFFECT_BETWEEN_LAYER_NORMS, "gm_regression_effect_device")
    operands = []

    def backend(graph_module, example_inputs):
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and "emit_effect" in str(node.target):
                operands.append([value.meta["example_value"].device for value in node.args[1]])
        return graph_module.forward

    reset()
    torch._dynamo.reset()
    try:
        torch.compile(module.f, backend=backend, fullgraph=True)(*_layer_norm_inputs())
    finally:
        torch._dynamo.reset()
    assert operands == [[torch.device("cpu")]]


def test_the_effects_tensor_is_on_an_accelerator_the_graph_uses_before_the_cpu():
    """A CPU tensor in a CUDA graph would keep inductor from recording a CUDA graph."""
    import types

    from graphmend.runtime import deferred

    def translator_with(*devices):
        nodes = [types.SimpleNamespace(meta={"example_value": torch.empty(0, device=d)}) for d in devices]
        nodes.append(types.SimpleNamespace(meta={}))
        return types.SimpleNamespace(output=types.SimpleNamespace(graph=types.SimpleNamespace(nodes=nodes)))

    assert deferred._device_of_traced_tensors(translator_with("cpu", "meta", "cpu")) == "meta"
    assert deferred._device_of_traced_tensors(translator_with("cpu")) == "cpu"
    assert deferred._device_of_traced_tensors(translator_with()) == str(torch.get_default_device())


@pytest.mark.slow
def test_an_output_between_two_fused_layer_norms_runs_under_inductor(capsys):
    import types

    original = types.ModuleType("gm_regression_layer_norms_original")
    exec(compile(textwrap.dedent(_EFFECT_BETWEEN_LAYER_NORMS), "<original>", "exec"), original.__dict__)  # noqa: S102
    mended = _mended_module(_EFFECT_BETWEEN_LAYER_NORMS, "gm_regression_layer_norms")
    expected = original.f(*_layer_norm_inputs())
    eager_text = capsys.readouterr().out
    reset()
    torch._dynamo.reset()
    try:
        actual = torch.compile(mended.f, backend="inductor", fullgraph=True)(*_layer_norm_inputs())
    finally:
        torch._dynamo.reset()
    assert capsys.readouterr().out == eager_text == "between the encoder and the decoder\n"
    for want, got in zip(expected, actual):
        torch.testing.assert_close(got, want)


SEED_145052 = """
import logging
import sys
import warnings
import torch
import torch.nn.functional as F
logger = logging.getLogger(__name__)
COUNT = 0
TOTAL = torch.zeros((2, 3))
HISTORY = []
SEEN = []
CACHE = {}
import contextlib
WRITTEN = []
class OwnStream:
    def write(self, text):
        WRITTEN.append(text)
        return len(text)
    def flush(self):
        pass
OWN_STREAM = OwnStream()
stream_logger = logging.getLogger(__name__ + ".own")
stream_logger.addHandler(logging.StreamHandler(OWN_STREAM))
class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = torch.nn.ModuleList([torch.nn.Tanh(), torch.nn.Identity()])
ROUTER = Router()
def positions_as_list(positions):
    return positions.tolist()
def f(x, y, box, items, table):
    h1 = x * torch.abs(x)
    h2 = torch.sigmoid((h1 + 3.0))
    flat_p1 = y.flatten()
    pos_p1 = torch.argwhere(flat_p1 > 0.5)[:, 0]
    acc_p1 = torch.zeros_like(flat_p1)
    acc_p1.index_add_(0, pos_p1, flat_p1[pos_p1] * 2.0)
    h1 = h1 + acc_p1.reshape(h1.shape)
    if x.sum() > y.sum() or h1.mean() < 0:
        z3 = x
    else:
        z3 = y
    stream_logger.warning("own log %s", x.sum())
    h1 = h2 * 3.0 * torch.abs(h2)
    items.append(h1)
    logger.debug("dbg %s", x.sum())
    return z3, z3 is x
"""


def test_a_failure_explaining_a_recompilation_runs_the_rewritten_frame_eagerly():
    """Long fuzz run seed 145052 (minimised): TorchDynamo explains why a resume
    function's cached guards failed by evaluating their sources against the new call,
    and a guard on `items[0]` raised IndexError there when the call's list was empty:
    the mended program failed where the original ran (its frames break elsewhere). The
    rewritten frame now runs eagerly instead, as for TorchDynamo's internal errors."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=145052, source=SEED_145052, shape=(2, 3), log_level=20)
    report = compare(program, modes=("eager", "compiled:eager"))
    assert report.differences == [], [d.describe() for d in report.differences]


SEED_142378 = """
import torch
def helper2(t, u):
    t.mul_(0.5)
def f(x, y, box, items, table):
    if y.sum() > 0:
        y = torch.relu(y)
    flat_p1 = x.flatten()
    pos_p1 = torch.argwhere(flat_p1 > -1.0)[:, 0]
    y = helper2(y, x)
    for i in range(3):
        try:
            flat_p2 = y.flatten()
        except UserWarning as error:
            pass
"""


def test_an_op_failing_while_traced_in_a_rewritten_frame_raises_the_users_error():
    """Long fuzz run seed 142378 (minimised): Capture took the argwhere into the graph on
    the first call, so the mended frame never got the resume function the original's
    break made, which TorchDynamo ran eagerly from then on (its trace failed on the first
    call). On the next call TorchDynamo traced `t.mul_` on a leaf that requires grad in a
    fresh resume function and raised its TorchRuntimeError, where the original raised
    the plain RuntimeError. (Running such a frame eagerly for that call fixed this seed
    but let its callees compile alone: seed 172167.) Now the capture is refused when
    TorchDynamo gives up the first call's frame, so the resume function after the
    argwhere is the original's, given up on the first call and run eagerly after
    (whole_trace_conditions.frame_was_not_given_up_while_tracing)."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=142378, source=SEED_142378, shape=(2, 3), log_level=20, requires_grad=True)
    report = compare(program, modes=("compiled:eager", "compiled:aot_eager"))
    assert report.differences == [], [d.describe() for d in report.differences]


SEED_154090 = """
import torch
def f(x, y, box, items, table):
    flat_m1 = x.flatten()
    (pos_m1,) = torch.where(flat_m1 > 0.0)
    acc_m1 = flat_m1 * 0.5
    if pos_m1.numel() != 0:
        rows_m1 = flat_m1[pos_m1] * 2.0 + torch.tanh(acc_m1[pos_m1])
        print("rows", rows_m1.sum())
    x.sub_(y)
"""


def test_an_output_kept_apart_from_an_aliased_input_written_in_place():
    """Long fuzz run seed 154090 (minimised): Capture joined the graph around the
    `torch.where`, Defer put the print in it, and the resume function's inputs `x` and
    `flat_m1` share memory; AOTAutograd's forward for that graph, writing `x` in place
    beside an ordered operator, raised StopIteration under aot_eager. The print keeps
    its break in such a graph (whole_trace_conditions.ordered_operators_share_no_graph_with_aliased_inputs_written_in_place)."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=154090, source=SEED_154090, shape=(2, 3), log_level=20)
    report = compare(program, modes=("compiled:eager", "compiled:aot_eager"))
    assert report.differences == [], [d.describe() for d in report.differences]


SEED_172051 = """
import torch
def positions_as_list(positions):
    return positions.tolist()
def helper1(t, u):
    t.mul_(0.5)
    return u * 0.25 * torch.relu(u)
def f(x, y, box, items, table):
    flat_p1 = y.flatten()
    pos_p1 = (flat_p1 > 0.5).nonzero()
    print("positions", positions_as_list(pos_p1))
    y = y * torch.bernoulli(torch.full_like(y, 0.5))
    y = helper1(y, x)
    if x.max() > 0.5:
        x.add_(1.0)
    return y - 0.5
"""


def test_a_capture_whose_size_tracing_needs_on_the_host_keeps_its_break():
    """Long fuzz run seed 172051 (minimised): `.tolist()` of captured positions needs
    their size on the host, so tracing the mended frame failed; the frame ran eagerly
    and TorchDynamo compiled `helper1` alone, whose input written in place got a zero
    gradient from AOTAutograd where eager gives none (the original's graphs inline it).
    The capture is now refused and the frame traced again with its break."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=172051, source=SEED_172051, shape=(4,), log_level=20, requires_grad=True)
    report = compare(program, modes=("compiled:eager", "compiled:aot_eager"))
    assert report.differences == [], [d.describe() for d in report.differences]


SEED_182689 = """
import torch
NORM = torch.nn.BatchNorm1d(3).eval()
def helper1(t, u):
    if t.max() > 0.5:
        return t * (1.0 / len(u.shape[1:]))
    return u * torch.abs(u)
def helper3(t, u):
    u = u + torch.randn_like(u) * 0.1
def f(x, y, box, items, table):
    x = helper1(x, x)
    flat_l1 = y.flatten()
    grid_l1 = torch.stack([flat_l1, -flat_l1, flat_l1 * 0.5], dim=1)
    normed_l1 = NORM(grid_l1.float().unsqueeze(0).transpose(1, 2))
    if flat_l1.sum() > 10.0:
        pass
    x = x + normed_l1.transpose(1, 2).reshape(-1).sum() * 0.125
    h2 = torch.abs(torch.relu(x))
    for i in range(2):
        h2 = helper3(h2, x)
        items.append(x)
"""


def test_unused_draws_of_a_joint_graph_from_mended_code_advance_the_generator_as_eagerly():
    """Long fuzz run seed 182689 (minimised): the resume function after the kept break
    (mended code) traced two draws nothing used into a graph AOTAutograd partitions
    (the batch norm's parameters record autograd); under ``fallback_random`` its
    partition kept one of them, so the generator stood where neither eager (both) nor
    the original compiled (neither) left it. Such draws are now returned from the graph
    (trace_hooks._return_dead_draws)."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=182689, source=SEED_182689, shape=(4,), log_level=10)
    report = compare(program, modes=("compiled:eager", "compiled:aot_eager"))
    assert report.differences == [], [d.describe() for d in report.differences]


def test_a_mended_gradient_with_eagers_draws_and_aotautograds_rounding_is_the_policys():
    """Long fuzz run seed 182914: under aot_eager the mended gradient was one unit in the
    last place from eager's (AOTAutograd's backward rounds otherwise) and far from the
    original compiled's (which dropped a draw nothing used, so its numbers shifted). It
    is bit for bit the original's compiled with graphmend's random-draw policy on all of
    its graphs, which the comparison now also takes as a reference, reported apart
    (``observe.DRAWS_AS_EAGERLY``)."""
    from tools.fuzz.grammar import generate
    from tools.fuzz.observe import compare

    reset()
    program = generate(182914, threads=False, handlers=False, grad_modes=False)
    report = compare(program, modes=("compiled:aot_eager",))
    assert report.differences == [], [d.describe() for d in report.differences]
    assert [d.part for d in report.draws_as_eagerly] == ["globals"]


SEED_300019 = '''\
import torch
HISTORY = []


class Gauge:
    @property
    def level(self):
        HISTORY.append("read level")
        return torch.tensor(0.25)


GAUGE = Gauge()


def f(x, y, box, items, table):
    h1 = (x * 3.0) * y
    if x.sum() > 0:
        h1 = h1 + GAUGE.level
    return h1
'''


def test_a_property_read_in_an_untaken_arm_runs_no_getter():
    """Fuzz seed 300019 (the attribute-code construct, minimised): Where hoisted the arm
    ``h1 + GAUGE.level`` and its check ``hasattr(GAUGE, "level")``, so the property's
    getter ran while tracing and on the untaken path (``HISTORY`` grew by four entries
    where eagerly it grew by one or none). The check is now ``reads_plainly``, decided
    from the object without running its code (runtime/attribute_access.py)."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=300019, source=SEED_300019, shape=(4,), log_level=10)
    report = compare(program, modes=("compiled:eager", "compiled:aot_eager"))
    assert report.differences == [], [d.describe() for d in report.differences]


SEED_220496 = '''\
import torch


def helper2(t, u):
    print("in helper2")
    return u - u


def f(x, y, box, items, table):
    h1 = x * 3.0 * 0.25
    with torch.inference_mode():
        h1 = helper2(h1, x)
        if y.mean() < 0:
            h1 = h1 + torch.ones(5)
    torch.tanh(h1, out=h1)
'''


def test_output_inside_inference_mode_keeps_its_break():
    """Long fuzz run seed 220496 (minimised): helper2's print joined the graph before
    the ``with torch.inference_mode()`` block, so under ``aot_eager`` ``h1`` was an
    ordinary tensor and ``torch.tanh(h1, out=h1)`` succeeded where eagerly (and in the
    original compiled, whose graph after the break runs inside the real mode) ``h1`` is
    an inference tensor and the update raises. No claim is made inside the mode now
    (``claims.not_inside_inference_mode``)."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=220496, source=SEED_220496, shape=(4,), log_level=10)
    report = compare(program, modes=("compiled:eager", "compiled:aot_eager"))
    assert report.differences == [], [d.describe() for d in report.differences]


SEED_250224 = '''\
import torch
HISTORY = []
ROW_HOOKED = torch.nn.Linear(1, 1)
ROW_HOOKED.register_forward_hook(lambda module, inputs, output: HISTORY.append(output.shape[0]))
def f(x, y, box, items, table):
    if y.sum() > 0:
        pass
    with torch.inference_mode():
        flat_m1 = x.flatten()
        (pos_m1,) = torch.where(flat_m1 > 0.0)
        acc_m1 = flat_m1 * 0.5
        if len(pos_m1) > 0:
            rows_m1 = flat_m1[pos_m1] * 2.0 + torch.tanh(acc_m1[pos_m1])
            rows_m1 = ROW_HOOKED(rows_m1.reshape(-1, 1)).reshape(-1)
        y = y + acc_m1.reshape(y.shape)
    print("v", y)
    y.add_(1.0)
'''


def test_output_after_inference_mode_keeps_its_break():
    """Long fuzz run seed 250224 (minimised): the print after the ``with
    torch.inference_mode()`` block joined the block's graph with ``y.add_(1.0)``, whose
    update of the inference tensor ``y`` then failed inside that graph, and the forward
    hook's ``HISTORY.append``, a side effect TorchDynamo applies when the graph returns,
    was lost; the original's graph returned at the print's break first. Under
    ``aot_eager`` the joined graph failed to compile (``BackendCompilerFailed``) where
    the original's update succeeds. No claim survives in a graph that enters the mode
    now (``whole_trace_conditions.joined_graph_enters_no_inference_mode``)."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=250224, source=SEED_250224, shape=(2, 3), log_level=10)
    report = compare(program, modes=("compiled:eager", "compiled:aot_eager"))
    assert report.differences == [], [d.describe() for d in report.differences]


SEED_261872 = '''\
import logging
import torch
import torch.nn.functional as F
logger = logging.getLogger(__name__)
HISTORY = []
SEEN = []
class ListHandler(logging.Handler):
    def emit(self, record):
        SEEN.append(record.getMessage())
ROW_HOOKED = torch.nn.Linear(1, 1)
ROW_HOOKED.register_forward_hook(lambda module, inputs, output: HISTORY.append(output.shape[0]))
class Gauge:
    def __init__(self):
        self.base = torch.tensor(0.5)
    def step(self, t):
        if t.sum() > 0:
            z = self.scale(t) + self.base
        return z
class LoudGauge(Gauge):
    def scale(self, t):
        return t * 3.0
GAUGE = LoudGauge()
def f(x, y, box, items, table):
    flat_m1 = x.flatten()
    (pos_m1,) = torch.where(flat_m1 > 0.0)
    acc_m1 = flat_m1 * 0.5
    if len(pos_m1) > 0:
        rows_m1 = flat_m1[pos_m1] * 2.0 + torch.tanh(acc_m1[pos_m1])
        rows_m1 = ROW_HOOKED(rows_m1.reshape(-1, 1)).reshape(-1)
        acc_m1[pos_m1] = rows_m1
    x = x + acc_m1.reshape(x.shape)
    y = F.relu(y, inplace=True)
    acc = x * 0.0
    x = GAUGE.step(x)
    if x.max() > 0.5:
        return torch.abs(torch.relu(x))
    return torch.tanh(y * 3.0)
'''


def test_a_capture_that_makes_a_mutated_input_of_the_next_graph_keeps_its_value_under_aot_eager():
    """Long fuzz run seed 261872 (minimised). With ``torch.where`` captured, the
    graph after the ``len(pos_m1) > 0`` break takes ``acc_m1`` as an input (the original's
    computes it), writes it with rows that require grad (``ROW_HOOKED``'s parameters), and
    also writes the input ``y`` in place and returns it. AOTAutograd in torch 2.13
    returns ``y``'s values for ``x`` in such a graph (pure torch: ``acc.mul_(w); x =
    x * 2; y = torch.relu_(y); return x, y`` with ``acc`` not requiring grad and ``w``
    requiring it), so the mended program returned the wrong value under ``aot_eager``.
    The capture removed no break there: the trace broke at ``len(pos_m1) > 0`` on the
    size it made, and the capture is now refused
    (``whole_trace_conditions.captured_sizes_decide_no_break``), so the graphs are the original's."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=261872, source=SEED_261872, shape=(2, 3), log_level=10)
    report = compare(program, modes=("compiled:aot_eager",))
    assert report.differences == [], [d.describe() for d in report.differences]


SEED_221043 = '''\
import logging
import warnings
import torch
logger = logging.getLogger(__name__)

def helper1(t, u):
    logger.info('helper1 %s', t.sum())
    return t * 2.0

def f(x, y, box, items, table):
    x = torch.sigmoid(x) - 0.25
    if torch._dynamo.is_compiling():
        x = x + 0.5
    else:
        print('eager only', x.sum())
        x = x * 2.0
        if x.sum() > 0:
            x = x + 1.0
    if x.sum() > y.sum():
        y = torch.tanh(torch.relu(x))
        x = torch.sigmoid(torch.sigmoid(x))
        torch.exp(x, out=y)
    else:
        y = y + torch.rand_like(y)
        x = x
        torch.exp(y, out=x)
    y = helper1(y, x)
    if y.mean() < 0:
        h2 = torch.tanh(x) * 3.0
        h3 = torch.abs(x * 0.25)
        x = torch.abs(torch.relu(y))
        y = h2 * 0.5
        print('arm', h2)
    else:
        h2 = torch.tanh(x) + y
        h3 = h2 + torch.rand_like(h2)
        x = torch.sqrt(x.abs()) * 0.25
        y = y - 1.5
        warnings.warn('arm')
    flat_m1 = x.flatten()
    pos_m1, = torch.where(flat_m1 > 0.0)
    acc_m1 = flat_m1 * 0.5
    if len(pos_m1) > 0:
        rows_m1 = flat_m1[pos_m1] * 2.0 + torch.tanh(acc_m1[pos_m1])
        rows_m1 = rows_m1 * (1.0 / len(items))
        acc_m1[pos_m1] = rows_m1
    if y.max() > 0.5:
        h2 = h2 + torch.ones(5)
'''


def test_an_op_failing_while_traced_on_a_later_call_raises_the_ops_own_error():
    """Long fuzz run seed 221043 (reduced): on its second call (input 'negative') the
    mended program raises TorchDynamo's ``TorchRuntimeError`` for ``h2 + torch.ones(5)``
    (a shape mismatch found while tracing), where the original compiled raises the op's
    own ``RuntimeError``. The first call's generator state is the original compiled's
    (its compile-state test answers as traced), so the report's first difference (the
    generator after call 0) is not the cause. The original compiled ran the op eagerly
    only because TorchDynamo gave up the op's resumed frame on call 0 (its
    ``ZeroDivisionError``); the mended program's frames after the rewritten branches are
    other code objects, which call 0 did not give up. Called on that input alone, the
    original compiled raises the same ``TorchRuntimeError``: TorchDynamo's own error for
    an op that fails while traced, counted apart (``observe.traced_op_failures``)."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=221043, source=SEED_221043, shape=(4,), log_level=10)
    report = compare(program, modes=("compiled:eager",))
    assert report.differences == [], [d.describe() for d in report.differences]
    assert len(report.traced_op_failures) == 1


SEED_223137 = '''\
import logging
import torch
import torch.nn.functional as F
logger = logging.getLogger(__name__)
class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = torch.nn.ModuleList([torch.nn.Tanh(), torch.nn.Identity()])
ROUTER = Router()
from torch.compiler import is_compiling
def f(x, y, box, items, table):
    if (y > 0).all():
        pass
    else:
        h1 = torch.sigmoid(y) + (y - y)
    z3 = (x - 2.0) - h1
    if not is_compiling() and box.n >= 0:
        logger.warning("eager %s", z3.sum())
    flat_p1 = x.flatten()
    mask_p1 = F.one_hot((flat_p1 > 0.5).long(), num_classes=2).permute(1, 0)
    acc_p1 = torch.zeros_like(flat_p1)
    hits_p1 = (mask_p1.sum(dim=(-1,)) > 0).nonzero(as_tuple=True)[0].tolist()
    for e_p1 in hits_p1:
        expert_p1 = ROUTER.experts[e_p1]
        (pos_p1,) = torch.where(mask_p1[e_p1])
        part_p1 = expert_p1(flat_p1[pos_p1]) * 2.0
        acc_p1.index_add_(0, pos_p1, part_p1)
    if torch._dynamo.is_compiling():
        print("eager only", z3.sum())
    print("items", len(items), box.n)
BACKEND = "eager"
compiled_f = torch.compile(f, backend=BACKEND, dynamic=False)
'''


def test_a_refused_capture_in_the_experts_loop_leaves_the_original_loop():
    """Long fuzz run seed 223137 (minimised): the loop over the chosen experts ran over
    every expert, its ``torch.where`` captured; a later break refused the capture, and
    traced again the loop over every expert broke inside, where TorchDynamo gave up on
    the whole resumed frame: the ``is_compiling()`` test before the loop answered False
    (a warning logged) where the original compiled, breaking at ``.tolist()``, traced
    it. The loop keeps its chosen experts once its body's capture is refused
    (``dynamic_shapes.body_keeps_its_captures``)."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(
        seed=223137, source=SEED_223137, shape=(2, 3), log_level=20, requires_grad=True, compile_site="module"
    )
    report = compare(program, modes=("compiled:eager", "compiled:aot_eager"))
    assert report.differences == [], [d.describe() for d in report.differences]


SEED_222544 = '''\
import logging
import torch
logger = logging.getLogger(__name__)
from graphmend_fuzz_checks import torch_compilable_check
from torch.compiler import is_compiling
def f(x, y, box, items, table):
    if x.mean() < 0 and x.max() > 0.5:
        pass
    else:
        z1 = y
    if z1.mean() < 0:
        pass
    else:
        z2 = y
    if is_compiling():
        pass
    else:
        h4 = y - x * 2.0
    torch_compilable_check(z1.mean() > -2.0, f"entries {tuple(z1.shape)}")
    if not torch._dynamo.is_compiling() and box.n >= 0:
        logger.warning("eager %s", h4.sum())
    try:
        try:
            pass
        except Exception as error:
            print("in flight", type(sys.exc_info()[1]).__name__, z2.sum())
            if (z2 > 0).any():
                pass
        logger.debug("dbg %s", h4.sum())
    finally:
        pass
'''


def test_a_rewritten_frame_whose_resume_function_needs_a_prefixed_jump_compiles():
    """Long fuzz run seed 222544 (minimised): TorchDynamo could not assemble the resume
    function after the branch break (a jump over the rewritten handler took an
    ``EXTENDED_ARG`` prefix whose offset it never set), so graphmend ran the whole
    rewritten frame eagerly: the program's ``is_compiling()`` tests answered False where
    the original compiled traced the code (an "eager only" output it skipped, and the
    reverse). The offsets are now given again for rewritten frames
    (``conversion_failures._offsets_of_replaced_extended_args``) and the frame compiles."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=222544, source=SEED_222544, shape=(2, 3), log_level=10, requires_grad=True)
    report = compare(program, modes=("compiled:eager", "compiled:aot_eager"))
    assert report.differences == [], [d.describe() for d in report.differences]


SEED_232488 = '''\
import torch
class Gauge:
    def __init__(self):
            z = self.scale(t) + self.base
import contextlib
def f(x, y, box, items, table):
    if x.mean() < 0:
        z1 = x
    else:
        z1 = y
    if y.max() > 0.5:
        h2 = z1 * z1 * 3.0
    flat_m1 = x.flatten()
    (pos_m1,) = torch.where(flat_m1 > 0.0)
    if len(pos_m1) > 0:
        acc_m1[pos_m1] = rows_m1
    with contextlib.suppress(RuntimeError, ZeroDivisionError):
        h2 = h2 + torch.ones(5)
'''


def test_torchdynamos_error_escaping_a_suppress_counts_as_its_own_when_the_original_alone_raises_it():
    """Long run seed 232488 (minimised): an op whose shape mismatch TorchDynamo finds
    while tracing sits in the program's ``contextlib.suppress(RuntimeError)``; eagerly
    the op's error is suppressed, TorchDynamo's (raised converting the frame) escapes.
    The original compiled ran the op eagerly only because it had given that frame up on
    an earlier call; called on that input alone it raises the same error, and its call
    stops there as the mended one does (``observe.calls_alone_as_observed``). The trace
    that reached the op came from capturing ``torch.where`` and breaking at
    ``len(pos_m1) > 0`` on the size it made; that capture is refused now, as soon as
    tracing needs that size on the host (``trace_hooks._refuse_captures_whose_sizes_are_needed``,
    before ``whole_trace_conditions.captured_sizes_decide_no_break`` would at the break), the mended program's graphs are the
    original's and no failure is left to tell apart (the classification itself:
    ``test_observe.test_a_traced_op_error_counts_as_torchs_own_only_when_the_original_alone_raises_it``)."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=232488, source=SEED_232488, shape=(4,), log_level=10)
    report = compare(program, modes=("compiled:eager",))
    assert report.differences == [], [d.describe() for d in report.differences]
    assert report.traced_op_failures == []
    refused = [reason for (_, line), reason in store.trace_time_declines.items() if line == 14]
    assert refused == ["tracing needed the size the capture made on the host, so the capture removes no break"]


SEED_232508 = '''\
import warnings
from torch.compiler import is_compiling
def f(x, y, box, items, table):
    if y.max() > 0.5:
        z1 = x
    print("alias", z1 is x, z1 is y)
    if not is_compiling():
        print("eager only", z1.sum())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
    if not is_compiling() and box.n >= 1:
        print("eager only", x.sum())
'''


def test_a_compile_state_mixture_left_by_a_break_graphmend_keeps_is_the_programs_own():
    """Long run seed 232508 (minimised, compiled from another module): the original
    breaks at the print and gives up the frame resumed there whole (its break inside
    ``catch_warnings`` cannot be resumed from), so both tests answer False. The mended
    print does not break: TorchDynamo traces up to the ``with`` block and runs the rest
    eagerly, so the first test answered True and the second False: the original with
    those answers, traced where the original compiled traced and more
    (``compile_state``). The resumable state TorchDynamo traced up to was made by
    graphmend's runtime calls alone; since they no longer count
    (``graphmend.runtime.resumable_states``, long run seed 330982), the mended frame is
    given up whole as the original's, and the run is the original's."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(
        seed=232508, source=SEED_232508, shape=(4,), log_level=10, requires_grad=True, compile_site="other-module"
    )
    report = compare(program, modes=("compiled:eager",))
    assert report.differences == [], [d.describe() for d in report.differences]
    assert report.compile_state_answers == [] and report.torch_own == []


SEED_242676 = '''\
import torch
class Router(torch.nn.Module):
    def __init__(self):
        pass
import contextlib
def f(x, y, box, items, table):
    if y.mean() < 0:
        pass
    with contextlib.suppress(RuntimeError, ZeroDivisionError):
        y = y * 3.0
        y = y + torch.ones(5)
    if (x > 1).any() and (x > 0).all():
        h2 = torch.sigmoid(y)
    try:
        h1 = y - 1.5
        for i in range(3):
            if h1.sum() > 0:
                h2 = h2 + torch.ones(5)
            grid_l1 = torch.stack([flat_l1, -flat_l1, flat_l1 * 0.5], dim=1)
            normed_l1 = NORM(grid_l1.float().unsqueeze(0).transpose(1, 2))
            print("normed", flat_l1.sum())
            h2 = h2 + normed_l1.transpose(1, 2).reshape(-1).sum() * 0.125
            try:
                pass
            except Exception as error:
                pass
    except ValueError as error:
        pass
'''


def test_an_op_failing_past_torchdynamos_assembly_bug_counts_as_the_original_with_its_assembly_mended():
    """Long run seed 242676 (minimised): the original compiled fails on every call on
    TorchDynamo's assembly bug (``exception table entry start instruction has no
    offset``), which graphmend mends for its own frames (``conversion_failures``). Past
    it, the mended frame traces an op inside ``contextlib.suppress(RuntimeError)`` that
    fails, and TorchDynamo's error escapes the ``suppress`` (as in seed 232488); eagerly
    a later op raises. The original compiled with its assembly mended the same way
    (``observe.ASSEMBLY_AS_FOR_REWRITTEN_CODE``) raises that same error; a mended run that
    also writes an argument still differs."""
    from graphmend.rewrite.pipeline import mend_module_source
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare, with_backend

    reset()
    program = Program(seed=242676, source=SEED_242676, shape=(2, 3), log_level=20)
    report = compare(program, modes=("compiled:eager",))
    assert report.differences == [], [d.describe() for d in report.differences]
    # Where a failed op is an exception of the traced program (torch 2.14 on), the
    # ``suppress`` catches it while traced, as eagerly: nothing differs to set apart.
    observed_failures = hasattr(torch._dynamo.exc, "FakeTensorObservedException")
    assert len(report.assembly_as_for_rewritten_code) == (0 if observed_failures else 1)
    mended = mend_module_source(
        with_backend(SEED_242676, "eager"), filename="/graphmend-fuzz/program_242676.py",
        module_name="gm_fuzz_242676", scope="all",
    ).source
    assert "print_in_graph" in mended
    writes_box = mended.replace("def f(x, y, box, items, table):\n", "def f(x, y, box, items, table):\n    box.n = 7\n")
    assert writes_box != mended
    assert compare(program, modes=("compiled:eager",), mended_source=writes_box).differences != []


SEED_272822 = r'''import torch
import torch.nn.functional as F
WRITTEN = []
class OwnStream:
    def write(self, text):
        WRITTEN.append(text)
OWN_STREAM = OwnStream()
class Router(torch.nn.Module):
    def __init__(self):
        self.experts = torch.nn.ModuleList([torch.nn.Tanh(), torch.nn.Identity()])
def f(x, y, box, items, table):
    acc = x * 0.0
    def bump(t):
        return t + 1.0
    if (x > 0).all():
        x = bump(x)
    print("acc", acc)
    OWN_STREAM.write("own raw\n")
    print("written", len(WRITTEN))
    try:
        x = F.relu(x, inplace=True)
        print("alias", z1 is x, z1 is y)
    finally:
        print("finally", len(items))
    try:
        try:
                y = torch.relu(x * 0.5)
        finally:
            print("finally", COUNT)
    except UserWarning as error:
        print("handled", type(error).__name__, str(error)[:40])
BACKEND = "eager"
compiled_f = torch.compile(f, backend=BACKEND, dynamic=False)
'''


def test_a_traced_op_error_after_an_earlier_call_gave_up_the_frame_is_judged_in_the_programs_state():
    """Long run seed 272822 (minimised): the first call raises NameError while its frame
    is traced, and TorchDynamo then runs the original's frame eagerly on the second call,
    where the in-place ``relu`` of a leaf that requires grad raises RuntimeError after the
    ``finally`` prints. graphmend's prints are in the graph, its frame is another code
    object, and TorchDynamo traces it: the op fails while traced (``TorchRuntimeError``),
    as the original compiled does on that call with TorchDynamo's caches fresh. The
    harness's reference for that call now keeps the program's state (the global list
    ``WRITTEN``, whose length is printed, grew over the first call); called alone it
    printed another count, and the program counted as a difference. Since graphmend's
    runtime calls no longer make a resumable state the original has not
    (``graphmend.runtime.resumable_states``, long run seed 330982), TorchDynamo gives the
    mended frame up as the original's on the first call, and the run is the original's."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=272822, source=SEED_272822, shape=(2, 3), log_level=10, requires_grad=True,
                      compile_site="module")
    report = compare(program, modes=("compiled:eager",))
    assert report.differences == [], [d.describe() for d in report.differences]
    assert report.traced_op_failures == [] and report.torch_own == []


SEED_290026 = r'''import torch
TOTAL = torch.zeros((2, 3))
def helper1(t, u):
    pass
def f(x, y, box, items, table):
    global TOTAL
    y = torch.sigmoid(torch.abs(y))
    if (y > 0).all():
        TOTAL = TOTAL + y
    for i in range(3):
        if x.max() > 0.5:
            pass
'''


def test_a_traced_op_error_is_the_originals_whatever_torchdynamo_names_its_sizes():
    """Long run seed 290026 (minimised), compiled with ``dynamic=True`` and called last
    on other sizes, where ``TOTAL + y`` fails. The original's frame after the first break
    holds a break in a loop, so TorchDynamo ran it eagerly from the first call on and the
    last call raised the op's own RuntimeError; graphmend's frame has no break and
    compiled, and its trace for the new sizes raises TorchDynamo's ``TorchRuntimeError``.
    The original compiled raises that error too on that call with TorchDynamo's caches
    fresh, but names the sizes by its own history of the frame (``(s10, s94)`` for the
    sizes the mended trace named ``(s17, s94)``); the harness set the names aside only
    now (``observe._raised_alone_as_observed``)."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=290026, source=SEED_290026, shape=(2, 3), log_level=20, compiled_dynamic=True)
    report = compare(program, modes=("compiled:eager",))
    assert report.differences == [], [d.describe() for d in report.differences]
    assert [d.input_name for d in report.traced_op_failures] == ["resized"]


SEED_290481 = r'''import logging
import sys
import warnings
import torch
import torch.nn.functional as F
logger = logging.getLogger(__name__)
COUNT = 0
TOTAL = torch.zeros((4,))
HISTORY = []
SEEN = []
CACHE = {}
class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = torch.nn.ModuleList([torch.nn.Tanh(), torch.nn.Identity()])
ROUTER = Router()
def helper2(t, u):
    global COUNT
    return u + (t * u)
def f(x, y, box, items, table):
    global TOTAL
    if (x > 0).all() or x.max() > 0.5:
        z1 = x
    else:
        z1 = y
    z1.mul_(10.0)
    print("alias", z1 is x, z1 is y)
    TOTAL = TOTAL + z1
    z1 = z1 * TOTAL
    try:
        z1 = torch.tanh(z1 * 1.5)
    finally:
        print("finally", COUNT)
        z1 = helper2(z1, y)
        z1 = z1 + torch.randn_like(z1)
    flat_p1 = y.flatten()
    pos_p1 = (flat_p1 > -1.0).nonzero()
    print("positions", pos_p1.sum(), pos_p1.shape[0])
    h4 = torch.tanh(y) * torch.relu(z1)
    if z1.max() > 0.5:
        h5 = torch.tanh(z1) - 3.0
        h6 = torch.tanh(z1) * h5
        z1 = torch.sqrt(h4.abs()) * 0.25
        h4 = z1
        h4 = h4 * (1 // box.n)
        h6 = helper7(h6, z1)
    return h4 - 3.0
'''


def test_the_traceback_torch_prints_for_an_error_inside_a_graph_is_compared_without_its_code_number():
    """Long run seed 290481 (minimised), under ``aot_eager``: ``h4 * (1 // box.n)``, where
    ``box.n`` is 0 on the later calls and TorchDynamo passes it to the graph as a size.
    The division fails inside the graph, and torch prints a traceback to stderr naming the
    graph's generated code ``<eval_with_key>.N``, N counted over the process. The original
    compiled prints the same traceback with another N (the harness compiles it first):
    counted as TorchDynamo's own only now (``observe._torch_names_aside``)."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=290481, source=SEED_290481, shape=(4,), log_level=20, compiled_dynamic=True)
    report = compare(program, modes=("compiled:aot_eager",))
    assert report.differences == [], [d.describe() for d in report.differences]
    assert report.torch_own, "the original compiled raises in its graph too"


SEED_302052 = r'''import logging
import sys
import warnings
import torch
WRITTEN = []
class OwnStream:
    def write(self, text):
        WRITTEN.append(text)
        return len(text)
OWN_STREAM = OwnStream()
class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = torch.nn.ModuleList([torch.nn.Tanh(), torch.nn.Identity()])
ROUTER = Router()
class Gauge:
    @property
    def step(self, t):
        if t.mean() < 0:
            z = self.scale(t) * self.level
        return z
class LookupGauge(Gauge):
    def __getattr__(self, name):
        HISTORY.append("lookup " + name)
        return torch.tensor(0.75)
GAUGE = LookupGauge()
import contextlib
def helper3(t, u):
    if (u > 1).any():
        return torch.sigmoid(torch.sigmoid(u))
    return t + 0.5
def f(x, y, box, items, table):
    warnings.warn("deprecated", DeprecationWarning)
    print("own", file=OWN_STREAM)
    print("written", len(WRITTEN))
    x = torch.abs(torch.tanh(y))
    if x.max() > 0.5:
        y = y * 0.5
        h1 = y * 0.5 - y * 0.25
        h2 = torch.sigmoid(h1)
        x = y
        y = torch.sigmoid(torch.sigmoid(h1))
        h2 = h2 * (1 // box.n)
        h1 = helper3(h1, h1)
    flat_p1 = y.flatten()
    pos_p1 = (flat_p1 > 0.0).nonzero()
    print("positions", positions_as_list(pos_p1))
    sys.stderr.write("err\n")
    h2 = GAUGE.step(h2)
    h4 = x + 3.0
'''


def test_the_traceback_torch_prints_for_an_error_inside_a_graph_is_not_the_programs_output():
    """Long run seed 302052 (minimised), under ``aot_eager``: Where joins the branch that
    holds ``h2 * (1 // box.n)`` to the graph before it; with ``box.n`` 0 the division
    fails inside the graph, and torch prints the traceback with the graph's code around
    the failing line, as the original compiled does from its own, smaller graph. The
    harness does not take torch.fx's print for the program's output
    (``observe._torch_diagnostics_silenced``), and the calls are the original's."""
    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=302052, source=SEED_302052, shape=(4,), log_level=10, compiled_dynamic=True)
    report = compare(program, modes=("compiled:aot_eager",))
    assert report.differences == [], [d.describe() for d in report.differences]
    assert not [d for d in report.torch_own if "stderr" in d.klass], [d.klass for d in report.torch_own]


SEED_740074 = '''\
import torch
from graphmend_fuzz_checks import torch_compilable_check

def scaled(t):
    return torch.tanh(t) * 3.0

def f(x, y, box, items, table):
    x = torch.relu(x)
    try:
        torch_compilable_check(x.sum() < -1.0 * x.numel(), f"entries {tuple(x.shape)}", IndexError)
    except IndexError as error:
        print("check caught", error)
    return scaled(y)
'''


def test_code_past_a_caught_check_counts_against_the_original_with_its_checks_made_eagerly():
    """Long run seed 740074 (minimised): the traced helper raises RuntimeError, which the
    program's ``except IndexError`` does not catch, so the original compiled ends every
    call at the check, compiling nothing past it. The mended program makes its kept call
    eagerly, catches the ``IndexError`` and runs on, as eager does, compiling the frame
    of ``scaled``, called past the check: one graph more than the original compiled
    (TorchDynamo gives up ``f``'s frame at the break in its ``try``), none more than the
    original with its checks made eagerly (``observe.CHECKS_MADE_EAGERLY``), the
    reference its behaviour is compared with too."""
    from collections import Counter

    from tools.fuzz.grammar import Program
    from tools.fuzz.observe import compare

    reset()
    program = Program(seed=740074, source=SEED_740074, shape=(4,), log_level=20, features=Counter({"check-call": 1}))
    report = compare(program, modes=("compiled:eager", "compiled:aot_eager"), counts=True)
    assert report.differences == [], [d.describe() for d in report.differences]
    assert report.worse == [], [w.describe() for w in report.worse]
