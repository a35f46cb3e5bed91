"""The fuzzer's program constructs (``tools/fuzz/program_constructs.py``) and its two newer
comparisons: graph and break counts per compiled function, and traceback frames."""

from __future__ import annotations

import ast
import traceback

import pytest
import torch

from graphmend.rewrite.pipeline import mend_module_source
from tools.fuzz.grammar import Program, generate
from tools.fuzz.observe import compare, frame_function, traceback_frames, worse_counts
from tools.fuzz.program_constructs import ALL_KINDS, LATER_KINDS, MODULE_TENSOR_KINDS

# The functions of each construct that graphmend must rewrite in some program.
REWRITTEN = {
    "module-method": ("Scaler.forward", "Scaler.describe"),
    "hooks": ("Doubler.forward", "record_output"),
    "replaced-forward": ("noisy_forward",),
    "moe": ("SparseBlock.forward",),
    "print-options": ("f",),
    "default-dtype": ("f",),
    "rebuilt-code": ("rebuilt_source",),
    "compiled-twice": ("twice_source",),
    "nested-guard": ("innermost_check",),
    "fixed-values": ("Padder.forward",),
    "written-back": ("Encoder.forward",),
    "given-up-loop": ("loop_helper",),
    "two-sizes": ("SizedPadder.forward",),
}


def _functions(tree: ast.Module) -> dict[str, str]:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = ast.dump(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found[f"{node.name}.{item.name}"] = ast.dump(item)
    return found


def test_every_program_construct_is_generated_and_rewritten_by_graphmend() -> None:
    assert set(REWRITTEN) == set(ALL_KINDS)
    rewritten: set[str] = set()
    for seed in range(80):
        program = generate(seed, programs=True, later_kinds=True)
        kinds = [kind for kind in ALL_KINDS if program.features.get("program-" + kind)]
        if not kinds or set(kinds) <= rewritten:
            continue
        mended = mend_module_source(program.source, filename=f"/fuzz/p{seed}.py", module_name=f"p{seed}", scope="all")
        before, after = _functions(ast.parse(program.source)), _functions(ast.parse(mended.source))
        for kind in kinds:
            if any(name in before and before[name] != after.get(name) for name in REWRITTEN[kind]):
                rewritten.add(kind)
    assert rewritten == set(ALL_KINDS), f"never rewritten: {sorted(set(ALL_KINDS) - rewritten)}"


def test_the_program_constructs_leave_the_seeds_of_earlier_runs_as_they_were() -> None:
    for seed in range(40):
        assert generate(seed).source == generate(seed, programs=False).source
    assert any(generate(seed, programs=True).source != generate(seed).source for seed in range(10))


def _module_tensor_features(program: Program) -> set[str]:
    return {f for f in program.features if f.startswith(tuple("program-" + kind for kind in MODULE_TENSOR_KINDS))}


def test_the_module_tensor_constructs_leave_the_other_constructs_of_a_seed_as_they_were() -> None:
    """Drawn from a stream of their own: with them or without, a seed has the same other
    constructs and the same body of ``f`` around their statements."""
    with_them = 0
    for seed in range(60):
        program, before = generate(seed, programs=True), generate(seed, programs=True, module_tensors=False)
        assert not _module_tensor_features(before)
        assert {f: n for f, n in program.features.items() if f not in _module_tensor_features(program)} == before.features
        added = _module_tensor_features(program)
        if not added:
            assert program.source == before.source
            continue
        with_them += 1
        kept = [line for line in program.source.splitlines() if "PADDER" not in line and "ENCODER" not in line]
        assert set(kept) >= {line for line in before.source.splitlines() if line.startswith("    ")} - {""}
    assert with_them >= 10


# Each adversarial variant of the module-tensor constructs, over seeds 0-399.
MODULE_TENSOR_VARIANTS = {
    "program-fixed-values-" + variant for variant in (
        "buffer", "registered", "attribute", "persistent", "test-fixed", "test-float", "test-input",
        "write-none", "write-in-place", "write-augmented", "write-after", "write-view", "write-between-calls",
        "two-modules",
    )
} | {
    "program-written-back-" + variant for variant in (
        "buffer", "registered", "persistent", "attribute", "parameter", "float64",
        "to-input-device", "to-keywords", "to-input-dtype", "to-local-device", "to-other-dtype",
        "observed-none", "observed-identity", "observed-read-after",
        "access-none", "access-setattr", "access-getattr", "access-pre-hook-read", "access-pre-hook-write", "alias",
    )
}


def test_every_variant_of_the_module_tensor_constructs_is_generated_and_rewritten() -> None:
    seen: set[str] = set()
    for seed in range(400):
        program = generate(seed, programs=True)
        added = _module_tensor_features(program)
        seen |= added
        if seed < 60 and added:
            mended = mend_module_source(program.source, filename=f"/fuzz/m{seed}.py", module_name=f"m{seed}",
                                        scope="all").source
            if "program-fixed-values" in added:
                assert "__graphmend__.fixed_values." in mended  # the branch or the padding
            if "program-written-back" in added:
                assert "__graphmend__.written_back.converts_nothing(self, 'pos'" in mended
    assert seen >= MODULE_TENSOR_VARIANTS, sorted(MODULE_TENSOR_VARIANTS - seen)


# Seeds whose programs hold the module-tensor constructs: under the harness, eagerly and
# compiled, they behave as the original and compile no more graphs or breaks.
MODULE_TENSOR_SEEDS = {
    73: "fixed values: buffers, a float buffer in the test, two modules, written by f between calls",
    157: "written back: a buffer converted to another dtype, a pre-hook that reads it",
}


@pytest.mark.parametrize("seed", sorted(MODULE_TENSOR_SEEDS))
def test_module_tensor_programs_run_under_the_harness(seed: int) -> None:
    program = generate(seed, programs=True)
    kind = "fixed-values" if "fixed values" in MODULE_TENSOR_SEEDS[seed] else "written-back"
    assert program.features.get("program-" + kind)
    _assert_the_same_and_no_worse(program, "compiled:eager")


def test_the_moe_construct_routes_through_the_loop_capture_rewrites() -> None:
    program = next(p for p in (generate(s, programs=True) for s in range(200)) if p.features.get("program-moe"))
    mended = mend_module_source(program.source, filename="/fuzz/moe.py", module_name="moe", scope="all").source
    assert "for expert_idx in range(self.num_experts):" in mended  # the every-expert loop


def test_worse_counts_compare_the_runs_totals_and_name_the_functions_that_grew() -> None:
    original = {"f": (2, 1), "helper": (1, 0)}
    mended = {"f": (1, 2), "helper": (1, 0), "torch_dynamo_resume_in_f_at_3": (0, 0), "other": (1, 0)}
    worse = worse_counts("compiled:eager", original, mended)
    assert [(w.function, w.klass) for w in worse] == [
        ("all frames (grown: f, other)", "compiled counts: more breaks"),
    ]
    # A helper inlined once its break is gone: its graph moves to the caller's frame.
    assert worse_counts("compiled:eager", {"f": (0, 1), "helper": (1, 0)}, {"f": (1, 0)}) == []
    assert frame_function("torch_dynamo_resume_in_f_at_3") == "f"


CHECK_FAILING_THEN_HELPER = """
import torch
from graphmend_fuzz_checks import torch_compilable_check


def helper(t):
    return torch.sigmoid(t) * 2.0


def f(x, y, box, items, table):
    try:
        torch_compilable_check(y.sum() > 1000.0, "the check failed", IndexError)
    except IndexError:
        pass
    return helper(y)
"""


def test_counts_where_the_originals_traced_check_raised_are_those_of_its_check_made_eagerly() -> None:
    # Traced, the check helper fails with torch's RuntimeError, which the program does not
    # catch: the original compiled never reaches ``helper`` (0 graphs, 2 breaks). The
    # mended program makes the check outside TorchDynamo, raising the IndexError eager
    # raises, and compiles ``helper`` (1 graph, 1 break), as does the original with its
    # helper made so.
    report = compare(Program(seed=1, source=CHECK_FAILING_THEN_HELPER, shape=(2, 3)), modes=("compiled:eager",),
                     counts=True, tracebacks=True)
    assert not report.differences and not report.worse, [w.describe() for w in report.worse]


def test_traceback_frames_keep_the_programs_frames_and_name_graphmends() -> None:
    def inner():
        raise ValueError("x")

    def outer():
        inner()

    try:
        torch._dynamo.disable(outer)()
    except ValueError as error:
        frames = traceback_frames(error, {__file__})
    assert [name for name, _ in frames][-3:] == ["test_traceback_frames_keep_the_programs_frames_and_name_graphmends", "outer", "inner"]
    assert all(not str(line).startswith("torch") for _, line in frames)


def _breaks_then_raises(x):
    print("break")
    y = x + 1
    print("break again")
    raise ValueError(y.sum())


def test_traceback_frames_set_torchdynamos_resume_frames_aside() -> None:
    # Each graph break makes TorchDynamo call a resume function from the frame it left:
    # the compiled traceback repeats the function once per break, eager code's does not.
    frames = {}
    for label, function in (("eager", _breaks_then_raises), ("compiled", torch.compile(_breaks_then_raises, backend="eager"))):
        torch._dynamo.reset()
        try:
            function(torch.ones(2))
        except ValueError as error:
            raw = [frame.name for frame in traceback.extract_tb(error.__traceback__) if frame.filename == __file__]
            frames[label] = (raw, traceback_frames(error, {__file__}))
    torch._dynamo.reset()
    assert any(name.startswith("torch_dynamo_resume_in_") for name in frames["compiled"][0])
    assert frames["compiled"][1] == frames["eager"][1]


def test_graphs_of_a_restarted_attempt_are_not_counted() -> None:
    import logging

    from tools.fuzz.observe import _GraphsPerFunction

    def record(**metadata):
        entry = logging.LogRecord("trace", logging.DEBUG, __file__, 1, "", (), None)
        entry.metadata = metadata
        return entry

    handler = _GraphsPerFunction()
    # Attempt 0 output a graph, then was restarted (a claim refused); attempt 1 compiled one.
    handler.emit(record(frame_id=3, frame_compile_id=0, attempt=0, dynamo_output_graph={}))
    handler.emit(record(frame_id=3, frame_compile_id=0, attempt=1, dynamo_output_graph={}))
    handler.emit(record(frame_id=3, frame_compile_id=0, attempt=1,
                        compilation_metrics={"co_name": "torch_dynamo_resume_in_f_at_9"}))
    handler.emit(record(frame_id=4, frame_compile_id=0, attempt=0, dynamo_output_graph={}))
    handler.emit(record(frame_id=4, frame_compile_id=0, attempt=0, compilation_metrics={"co_name": "g"}))
    # Seed 851106: attempt 1 output a graph and was restarted; attempt 3, the last, broke at
    # the frame's first call and output none.
    handler.emit(record(frame_id=0, frame_compile_id=0, attempt=1, dynamo_output_graph={}))
    handler.emit(record(frame_id=0, frame_compile_id=0, attempt=3, compilation_metrics={"co_name": "h"}))
    assert handler.graphs == {"f": 1, "g": 1}


def test_the_drawn_range_construct_is_generated_and_rewritten_by_graphmend() -> None:
    """LayerDrop's comparison of a draw, off by default (the seeds' programs stay theirs)."""
    for seed in range(20):
        assert generate(seed).source == generate(seed, drawn_ranges=False).source
    program = next(
        p for p in (generate(s, drawn_ranges=True) for s in range(60))
        if any(feature.startswith("drawn-range") for feature in p.features)
    )
    mended = mend_module_source(program.source, filename="/fuzz/drawn.py", module_name="drawn", scope="all")
    assert "drawn_ranges.decided(" in mended.source


# Where's fixed-values pass is offered every test of a module that keeps any tensor
# attribute. A helper that traces no op but that test compiled an empty graph once
# mended, which the original never did: TorchDynamo compiles any frame that asked
# ``is_compiling()``, and rewritten code asks (seed 790033: 0 graphs became 1). Asked
# by rewritten code only, the question no longer keeps such a frame from being skipped.
DATA_DEPENDENT_LENGTH_TEST = """
import torch


class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.level = torch.tensor(0.25)


def scattered_if_any(positions, total):
    if len(positions) > 0:
        pass
    return total


def f(x, y, box, items, table):
    try:
        y = y * (1.0 / len(items))
    except Exception as error:
        flat = x.flatten()
        (positions,) = torch.where(flat > 10.0)
        return scattered_if_any(positions, torch.zeros_like(flat))
    return y
"""


def test_a_test_of_a_data_dependent_length_compiles_no_graph_more() -> None:
    program = Program(seed=790033, source=DATA_DEPENDENT_LENGTH_TEST, shape=(2, 3))
    report = compare(program, modes=("compiled:eager",), counts=True, tracebacks=True)
    assert not report.differences and not report.worse, [w.describe() for w in report.worse]


# A counter the module keeps as a fixed tensor and writes every call (``self.step += 1``,
# a break of TorchDynamo's before the test): the resume function's first trace decided
# ``self.step % 2 == 0`` and guarded on its value; the next call's value failed the
# guard, and the trace again declined (W218) and kept the break. Under ``aot_eager``,
# one graph more than the original (3 graphs and 5 breaks became 4 and 3; seed 408).
# W218 now declines a tensor a method of the module's class writes (not ``__init__``),
# from the first trace; declining every tensor written in place since it was made (its
# version counter) would also decline the buffers transformers 5 initialises in place
# (Mimi lost all 32 of its removed breaks).
COUNTER_WRITTEN_EVERY_CALL = """
import torch
import torch.nn.functional as F


class Padder(torch.nn.Module):
    def __init__(self, kernel, stride, mode):
        super().__init__()
        self.stride = torch.nn.Buffer(torch.tensor(stride), persistent=False)
        self.kernel_size = torch.nn.Buffer(torch.tensor(kernel), persistent=False)
        self.padding_total = torch.nn.Buffer(torch.tensor(kernel - stride), persistent=False)
        self.step = torch.nn.Buffer(torch.tensor(0), persistent=False)
        self.mode = mode

    def extra_padding(self, t):
        length = t.shape[-1]
        n_frames = (length - self.kernel_size + self.padding_total) / self.stride + 1
        n_frames = torch.ceil(n_frames).to(torch.int64) - 1
        ideal_length = n_frames * self.stride + self.kernel_size - self.padding_total
        return ideal_length - length

    def forward(self, t):
        self.step += 1
        rows = t.reshape(-1, t.shape[-1])
        length = rows.shape[-1]
        extra = self.extra_padding(rows)
        max_pad = max(self.padding_total, extra)
        if length <= max_pad:
            pass
        padded = F.pad(rows, (self.padding_total, extra), self.mode)
        if self.step % 2 == 0:
            padded = padded * 2.0
        return padded


PADDER = Padder(4, 2, "reflect")


def f(x, y, box, items, table):
    return PADDER(x)
"""


def test_a_fixed_counter_written_every_call_compiles_no_graph_more() -> None:
    program = Program(seed=408, source=COUNTER_WRITTEN_EVERY_CALL, shape=(4,))
    report = compare(program, modes=("compiled:aot_eager",), counts=True, tracebacks=True)
    assert not report.differences and not report.worse, [w.describe() for w in report.worse]


# Open (seed 840153, minimised): a branch TorchDynamo breaks at, whose two resume frames
# run a loop calling a helper that prints; the original gives up both frames (a break in
# a loop) and compiles the helper as frames of its own. Mended, the first arm's frame
# joins whole (the loop and its prints in one graph) and the other's keeps its break (an
# ``out=`` write, G306), so the helper is compiled for it all the same: one
# graph more in all (5 became 6, breaks 6 became 4), though each frame compiles no
# more than the original's, the joined one a graph in place of the helper's four.
GIVEN_UP_ON_ONE_ARM_ONLY = """
import torch


def loop_helper(t, step):
    print("loop step", step, t.sum())
    return t * 0.5 + step


def f(x, y, box, items, table):
    if x.sum() > 0:
        h1 = torch.sigmoid(x)
    else:
        h1 = torch.sigmoid(torch.sigmoid(y))
        torch.tanh(x, out=h1)
    for step in range(2):
        h1 = loop_helper(h1, step)


BACKEND = "eager"
compiled_f = torch.compile(f, backend=BACKEND, dynamic=False)
"""


@pytest.mark.xfail(strict=True, reason="open: a frame joined whole where another compiles its helpers anyway")
def test_a_frame_joined_whole_on_one_arm_compiles_no_graph_more_in_all() -> None:
    program = generate(840153, programs=True, drawn_ranges=True, later_kinds=True)
    program = Program(seed=840153, source=GIVEN_UP_ON_ONE_ARM_ONLY, shape=program.shape)
    report = compare(program, modes=("compiled:aot_eager",), counts=True, tracebacks=True)
    assert not report.differences and not report.worse, [w.describe() for w in report.worse]


# Open: programs of the long runs over seeds 840000-850999 (every construct, the later ones
# too) that graphmend changes.
OPEN_LATER_FINDINGS = {
    # 19 graphs and 20 breaks became 20 and 18 under aot_eager: AOTAutograd failed on the
    # original's padder frame (``F.pad`` given its fixed tensors as sizes) and TorchDynamo
    # ran the rest of it eagerly; mended, the sizes are decided values and both arms of a
    # later test of a written counter compile, a graph each.
    850079: "compiled:aot_eager",
    # 1 graph and 2 breaks became 2 and 2 in ``helper2`` (a guard helper): its lowered
    # guard's graph reads both arguments, where the original's graph before the guard's
    # break read one; a later call passing one tensor as both fails that graph's guard on
    # distinct inputs, and the helper compiles again, where the original's raise came
    # before any code that read both.
    852223: "compiled:eager",
    # The generator after the call stands where neither eager nor the original compiled
    # leaves it under aot_eager: the loop's ``.item()`` made TorchDynamo give up the
    # mended frame, and the helper it called, compiled as a frame of its own, drops its
    # unused draws, where the mended frame's graphs keep theirs.
    852012: "compiled:aot_eager",
    # Seeds from 853000, not yet reduced (853007 and 853129 also on the code before
    # 852012's fix): 853007, under eager and aot_eager, a ZeroDivisionError raised in an
    # arm of a branch Where rewrote shows the ``if``'s line, not the arm's; the others
    # compile a graph more (853050: 11 graphs and 17 breaks became 12 and 16; 853129: 1
    # and 2 became 2 and 3; 853272: 36 and 30 became 38 and 32; 853279 under aot_eager: 12
    # and 9 became 13 and 8).
    853007: "compiled:eager",
    853050: "compiled:eager",
    853129: "compiled:eager",
    853272: "compiled:eager",
    853279: "compiled:aot_eager",
}


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="open findings of the long run (docs/fuzzing.md)")
@pytest.mark.parametrize("seed", sorted(OPEN_LATER_FINDINGS))
def test_open_later_construct_program_behaves_the_same_and_no_worse(seed: int) -> None:
    _assert_the_same_and_no_worse(generate(seed, programs=True, drawn_ranges=True, later_kinds=True),
                                  OPEN_LATER_FINDINGS[seed])


def _assert_the_same_and_no_worse(program: Program, mode: str) -> None:
    report = compare(program, modes=("eager", mode), counts=True, tracebacks=True)
    assert not report.differences and not report.worse, (
        program.describe(), [d.describe() for d in report.differences], [w.describe() for w in report.worse],
    )


# Programs of the long runs over seeds 840000-851999 that graphmend changed (or the harness
# misjudged), fixed since.
FIXED_LATER_FINDINGS = {
    # A failing lowered check raised its error from the caller's line with no frame of
    # the helper's, where the original raised from the helper's own frames (the first
    # call's TorchRuntimeError is TorchDynamo's own: the original compiled raises it
    # too). The helper is now called at the boundary and raises from its own frames.
    840528: "compiled:eager",
    # 9 graphs and 11 breaks became 10 and 10: a local bound on one arm of an ``if`` and
    # rebound after a logging call graphmend wrote as a branch, which made TorchDynamo
    # count it live at the break before; calls that had and had not bound it compiled
    # two resume functions (``torch_adapter.liveness``).
    840628: "compiled:eager",
    # The harness's (840475: 2 graphs and 4 breaks became 4 and 4; 840184: 26 and 20 became
    # 27 and 14 under aot_eager): a check caught by the program, kept as a call made
    # eagerly, let the program run on into helpers TorchDynamo compiled as frames of their
    # own, where the traced helper's error ended the original compiled's calls. Measured
    # against the original with its checks made so only from the first call on which the
    # two differed, which TorchDynamo's own error on another op ended alike; the calls are
    # now compared one by one, and the mended counts are that original's.
    840475: "compiled:eager",
    840184: "compiled:aot_eager",
    # The harness's (16 graphs and 16 breaks became 17 and 15 under aot_eager): the mended
    # frame's trace was restarted without a claim after an attempt that output a graph,
    # and its last attempt output none; the earlier attempt's graph was counted.
    851106: "compiled:aot_eager",
    # 11 graphs and 13 breaks became 13 and 12 (10 and 14 became 12 and 13 under
    # aot_eager), in ``f``: ``print("items", len(items), box.n)`` first in the frame
    # joined, its graph guarded on the printed list length, and compiled whole again as
    # the calls' lengths changed, where the original's graph-less part was compiled
    # again and its resume function shared. G203 now counts a list argument's length
    # and a number argument.
    851579: "compiled:eager",
    # 7 graphs and 9 breaks became 8 and 9 in ``f`` under inductor: a print in a
    # one-pass loop joined, and its frame, which the original gave up at the print (a
    # break in a loop) and ran eagerly, compiled a graph up to the loop, where a later
    # break inside ``warnings.catch_warnings()`` in a ``try`` could not be resumed from.
    # Such a claim is now refused in its frame when TorchDynamo restarts to compile up to
    # a break (G310).
    852031: "compiled:inductor",
}


@pytest.mark.slow
@pytest.mark.parametrize("seed", sorted(FIXED_LATER_FINDINGS))
def test_fixed_later_construct_program_behaves_the_same_and_no_worse(seed: int) -> None:
    _assert_the_same_and_no_worse(generate(seed, programs=True, drawn_ranges=True, later_kinds=True),
                                  FIXED_LATER_FINDINGS[seed])


def _later_features(program: Program) -> set[str]:
    return {f for f in program.features if f.startswith(tuple("program-" + kind for kind in LATER_KINDS))}


def test_the_later_constructs_leave_the_other_constructs_of_a_seed_as_they_were() -> None:
    """Drawn from a third stream: with them or without, a seed has the same other
    constructs, and the seeds of earlier runs keep their programs."""
    with_them = 0
    for seed in range(60):
        program, before = generate(seed, programs=True, later_kinds=True), generate(seed, programs=True)
        assert not _later_features(before)
        assert {f: n for f, n in program.features.items() if f not in _later_features(program)} == before.features
        if not _later_features(program):
            assert program.source == before.source
            continue
        with_them += 1
        assert set(program.source.splitlines()) >= {line for line in before.source.splitlines() if line.startswith("    ")}
    assert with_them >= 10


LATER_VARIANTS = {
    "program-given-up-loop-" + variant for variant in ("print", "log", "state", "item", "branch")
} | {"program-two-sizes-cut-1", "program-two-sizes-cut-2"}


def test_every_variant_of_the_later_constructs_is_generated() -> None:
    seen: set[str] = set()
    for seed in range(200):
        seen |= _later_features(generate(seed, programs=True, later_kinds=True))
    assert seen >= LATER_VARIANTS, sorted(LATER_VARIANTS - seen)


# Seeds whose programs hold the later constructs: under the harness they behave as the
# original and compile no more graphs or breaks.
LATER_SEEDS = {
    830009: "a print in a helper of a loop given up for an `.item()` in its body",
    830010: "a module of fixed values met at two static sizes",
    830026: "a given-up loop; a replaced forward's print once joined a linear of an inference tensor (G321)",
    830114: "a given-up loop calling two padders of one class at one size, once one graph more (W218)",
    830200: "a given-up loop; a padder writing a fixed tensor every call, once one graph more (W218)",
}


@pytest.mark.slow
@pytest.mark.parametrize("seed", sorted(LATER_SEEDS))
def test_later_construct_programs_run_under_the_harness(seed: int) -> None:
    program = generate(seed, programs=True, drawn_ranges=True, later_kinds=True)
    kind = "given-up-loop" if "loop" in LATER_SEEDS[seed] else "two-sizes"
    assert program.features.get("program-" + kind)
    _assert_the_same_and_no_worse(program, "compiled:eager")


