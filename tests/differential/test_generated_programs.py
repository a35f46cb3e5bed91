"""Differential tests: generated programs against their graphmend-mended versions.

For every seed a program ``def f(x, y)`` is generated (see ``program_generator``)
and mended with ``scope="all"``. On a few seeded inputs (some of them failing the
program's validation guards):

(a) eager: the mended function behaves exactly like the original: bit-identical
    outputs (or the same exception type, args and message), identical argument
    state afterwards, identical stdout, log records (level, message, path, line,
    function) and warnings (message, category, filename, line), in one interleaved
    order, and the same number of calls of the module's impure helper. This holds
    for the mended code compiled from the rewritten tree (original line numbers)
    and, line numbers of log records and warnings aside, for the text that
    ``mend_source`` returns (``ast.unparse`` output: its line numbers move).
(b) compiled: ``torch.compile(mended.f, dynamic=False)`` (graphmend's counting
    backend, which runs each graph as is, like ``backend="eager"``; a
    ``torch._dynamo.reset()`` first) gives the same observables as the ORIGINAL run
    eagerly. Records logged from a TorchDynamo resume function carry its name as
    ``funcName``; that name is mapped back to ``f``.
(c) graph breaks: the mended program breaks no more often than the original, and
    never when every construct in it is fixable.
"""

from __future__ import annotations

import ast
import hashlib
import os

import pytest
import torch

from tools.fuzz.harness import (
    build_variants,
    call_counting,
    call_observed,
    compile_counting,
    unload,
)
from tools.fuzz.program_generator import generate

SEEDS = range(200)
# The default tier runs the first seeds; the full tier runs them all.
DEFAULT_TIER_SEEDS = 4
FILENAME = "/graphmend-differential/program_{seed}.py"

# Seeds whose programs hit a known behavioural difference (each with its minimal
# repro in test_regressions.py). strict: once fixed, these seeds must pass.
KNOWN_DIFFERENCES: dict[int, str] = {}


# The programs the seeds stand for; KNOWN_DIFFERENCES names seeds, so a change to the
# generator must come with a new digest and a fresh look at those seeds.
PROGRAMS_DIGEST = "983aa419661b469b218c2e1d34f02750"  # md5 of the sources of seeds 0..239
CONSTRUCTS = {
    "where", "where-return", "where-in-loop", "print", "log", "warn", "guard", "loop",
    "mutation-after-print", "static-branch", "tuple-return", "item", "rebinds-argument",
    "where-declined-division", "where-declined-impure", "where-declined-inplace",
    "where-declined-print", "where-declined-boolop", "where-declined-item",
    "augmented-assignment-in-arm",
}


def test_generator_is_deterministic_and_covers_every_construct() -> None:
    programs = [generate(seed) for seed in SEEDS]
    assert len(programs) >= 200
    for program in programs:
        ast.parse(program.source)
    digest = hashlib.md5("".join(generate(seed).source for seed in range(240)).encode()).hexdigest()
    assert digest == PROGRAMS_DIGEST, "the generator changed: re-check KNOWN_DIFFERENCES, then update the digest"
    seen = set().union(*(program.features for program in programs))
    assert seen >= CONSTRUCTS, f"never generated: {sorted(CONSTRUCTS - seen)}"
    fixable = sum(program.fixable for program in programs)
    assert 0.25 * len(programs) <= fixable <= 0.75 * len(programs)


def make_inputs(seed: int, shape: tuple) -> list[tuple[str, tuple[torch.Tensor, torch.Tensor]]]:
    generator = torch.Generator().manual_seed(seed)

    def normal():
        return torch.randn(shape, generator=generator).clamp(-3.0, 3.0)

    equal = normal()
    negative = -(torch.rand(shape, generator=generator) + 0.1)
    small = normal() - 6.0
    return [
        ("equal", (equal, equal.clone())),  # passes every guard
        ("negative", (negative, negative.clone())),  # the other arm of most branches
        ("independent", (normal(), normal())),  # fails torch.equal guards
        ("small", (small, small.clone())),  # fails range guards
    ]


def describe(program, name, label, expected, actual, text) -> str:
    return (
        f"{label} differs from the original run eagerly on input {name!r}\n"
        f"--- original program ---\n{program.describe()}\n"
        f"--- mended text ---\n{text}\n"
        f"--- original (eager) ---\n{expected}\n--- {label} ---\n{actual}"
    )


def assert_same(program, variants, name, label, expected, actual) -> None:
    for part in ("error", "value", "arguments_after", "impure_calls", "events"):
        if getattr(expected, part) != getattr(actual, part):
            raise AssertionError(
                describe(program, name, f"{label} [{part}]", getattr(expected, part), getattr(actual, part), variants.text)
            )


def _parameters():
    for seed in SEEDS:
        marks = [pytest.mark.slow] if seed >= DEFAULT_TIER_SEEDS else []
        if seed in KNOWN_DIFFERENCES:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_DIFFERENCES[seed]))
        yield pytest.param(seed, id=f"seed{seed}", marks=marks)


STATISTICS = os.environ.get("GRAPHMEND_DIFFERENTIAL_STATISTICS")


@pytest.mark.parametrize("seed", list(_parameters()))
def test_generated_program(seed: int) -> None:
    program = generate(seed)
    filename = FILENAME.format(seed=seed)
    variants = build_variants(program.source, filename, f"gm_differential_{seed}")
    try:
        inputs = make_inputs(seed, program.shape)
        level = program.log_level
        originals = {}
        # (a) eager
        for name, arguments in inputs:
            expected = call_observed(variants.original.f, variants.original, level, arguments)
            originals[name] = expected
            mended = call_observed(variants.mended.f, variants.mended, level, arguments)
            assert_same(program, variants, name, "mended (eager)", expected, mended)
            text = call_observed(variants.mended_text.f, variants.mended_text, level, arguments)
            assert_same(
                program, variants, name, "mended text (eager; line numbers aside)",
                expected.without(line_numbers=True), text.without(line_numbers=True),
            )

        # (b) compiled mended, against the original run eagerly; breaks are counted on
        # the first input that the original passes
        counted = next((name for name, _ in inputs if originals[name].error is None), None)
        mended_breaks = mended_count = original_count = None
        compiled, backend = compile_counting(variants.mended.f)
        order = sorted(inputs, key=lambda item: item[0] != counted)
        for index, (name, arguments) in enumerate(order):
            if index == 0 and name == counted:
                actual, mended_count = call_counting(compiled, backend, variants.mended, level, arguments)
                mended_breaks = mended_count.breaks
            else:
                actual = call_observed(compiled, variants.mended, level, arguments)
            assert_same(
                program, variants, name, "mended (compiled)",
                originals[name], actual.without(resume_function_names=True),
            )

        # (c) graph breaks: the original is compiled only when the comparison needs it
        original_breaks = None
        if counted is not None and (mended_breaks or STATISTICS):
            compiled, backend = compile_counting(variants.original.f)
            _, original_count = call_counting(compiled, backend, variants.original, level, dict(inputs)[counted])
            original_breaks = original_count.breaks
        if STATISTICS:
            with open(STATISTICS, "a") as out:
                out.write(f"{seed} {int(program.fixable)} {original_breaks} {mended_breaks}\n")
        if counted is not None:
            if mended_breaks:
                # (frames run wholly eagerly, breaks): a frame TorchDynamo skipped is worse
                # than any number of breaks in frames it compiled
                assert mended_count.cost <= original_count.cost, (
                    f"mending made compilation worse ((skipped frames, breaks) "
                    f"{original_count.cost} -> {mended_count.cost})\n{program.describe()}"
                )
            if program.fixable:
                assert mended_breaks == 0, (
                    f"{mended_breaks} graph break(s) left in a program of fixable constructs "
                    f"(sites: {mended_count.sites}, reasons: {mended_count.reasons})\n"
                    f"{program.describe()}\n--- mended text ---\n{variants.text}"
                )
    finally:
        torch._dynamo.reset()
        unload(variants.original, variants.mended, variants.mended_text)
