"""The program's own compile-state tests (``is_compiling()``), answering as a run made them answer.

graphmend removes breaks, so code the original compiled ran eagerly may run traced in the
mended program, and a compile-state test there answers True where it answered False. Where
a break the original also has is left (one TorchDynamo cannot resume from), the mended run
is a mixture: some tests answer as traced, others as eagerly (seed 232508: the print before
a ``warnings.catch_warnings()`` no longer breaks, so the test after the print answers True,
the test after the ``with`` block still False). Neither the original compiled (both False)
nor the original with every test answering True is then a reference.

The reference here: the original run eagerly with each test site answering a fixed answer,
one run per set of sites answering True. A mended call is taken as the program's own
compile-state answers when it shows some answer set that contains an answer set the
original compiled's call shows: graphmend may only move code from eager to traced, never
back (seeds 223137 and 222544 were a rewritten frame run eagerly where the original
compiled traced it; those still differ here).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence

COMPILE_STATE_TEST = re.compile(r"\b(?:torch\.compiler\.|torch\._dynamo\.)?is_compiling\(\)")
ANSWERS_VARIANT = "original-compile-state-answers:"
# 2**4 eager runs of a small program at most; a program with more test sites keeps its
# difference (reported, to be looked at by hand).
MOST_SITES = 4


def tests_compile_state(source: str) -> bool:
    return bool(COMPILE_STATE_TEST.search(source))


def answer_sets(source: str) -> list[frozenset[int]] | None:
    """Every set of test sites (numbered in source order) that may answer True, or None
    when the program has more than ``MOST_SITES`` sites."""
    sites = len(COMPILE_STATE_TEST.findall(source))
    if sites > MOST_SITES:
        return None
    return [frozenset(chosen) for size in range(sites + 1) for chosen in itertools.combinations(range(sites), size)]


def variant(answering_true: frozenset[int]) -> str:
    return ANSWERS_VARIANT + ",".join(str(site) for site in sorted(answering_true))


def is_answers_variant(name: str) -> bool:
    return name.startswith(ANSWERS_VARIANT)


def answering(source: str, name: str) -> str:
    """``source`` with each test site answering as the variant ``name`` says."""
    listed = name[len(ANSWERS_VARIANT):]
    answering_true = {int(site) for site in listed.split(",")} if listed else set()
    sites = itertools.count()
    return COMPILE_STATE_TEST.sub(lambda _test: "True" if next(sites) in answering_true else "False", source)


SameCall = Callable[[object, object, object, int], bool]


def explained_by_answers(
    runs: dict[frozenset[int], Sequence], original_compiled: Sequence, actual: Sequence, same_call: SameCall,
) -> bool:
    """True when, on every call, the mended call (``actual``) is the original's run with some
    answer set, and that set contains an answer set the original compiled's call is.
    ``runs`` maps each answer set to the original's eager run with it; ``same_call(reference,
    compiled, observed, call)`` compares one call as the harness compares calls (each piece
    may be the reference's or the compiled run's)."""
    for call, (original, observed) in enumerate(zip(original_compiled, actual)):
        original_shows = [chosen for chosen, run in runs.items() if same_call(run[call], run[call], original, call)]
        if not original_shows:
            return False
        mended_shows = [chosen for chosen, run in runs.items() if same_call(run[call], original, observed, call)]
        if not any(shown >= base for shown in mended_shows for base in original_shows):
            return False
    return True
