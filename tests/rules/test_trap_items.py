"""[Trap] ``.item()`` values only a known check reads (rules/trap/items.py): must-rewrite
with exact break and graph counts, one named must-not case per legality condition
(and the trace-time one), differential runs (eager, and compiled with ``eager`` and
``aot_eager``, passing and failing checks: value, printed text, exception type and
message). The helper is test_trap_checks' stand-in for transformers' check."""

from __future__ import annotations

import pytest
import torch

from graphmend.counting import count_breaks
from helpers import assert_equivalent, breaks, finding_reasons, original_and_mended
from tests.rules.test_trap_checks import declined_while_tracing, known_test_helper, program  # noqa: F401 - the fixture registers the helper

# qwen2-audio's merge (transformers 5.x): a count of tokens against a count of rows a
# boolean mask selected (the Capture rule keeps that selection in the graph).
MERGE = """
    def main(ids, feats, lengths, embeds):
        mask = torch.arange(feats.shape[1])[None, :] < lengths[:, None]
        feats = feats[mask]
        n_tokens = (ids == 5).sum().item()
        n_features = feats.shape[0]
        torch_compilable_check(
            n_tokens == n_features,
            f"features and tokens do not match, tokens: {n_tokens}, features: {n_features}",
        )
        return embeds.masked_scatter((ids == 5).unsqueeze(-1), feats)
"""


def merge_arguments(tokens: int):
    ids = torch.tensor([[1, 5, 5, 2, 5, 5, 3]] if tokens == 4 else [[1, 5, 5, 2, 5, 1, 3]])
    feats = torch.randn(1, 6, 3, generator=torch.Generator().manual_seed(0))
    return ids, feats, torch.tensor([4]), torch.zeros(1, 7, 3)


MUST_REWRITE = {
    "count_against_a_size": (
        """
        def main(x, n):
            count = (x > 0).sum().item()
            torch_compilable_check(count == x.shape[0], f"{count} of {x.shape[0]} entries are positive")
            return x * n
        """,
        (torch.arange(4.0) + 1, 2.0),
        (torch.arange(4.0) - 1, 2.0),
    ),
    "bool_item_with_a_format_spec": (
        """
        def main(x, n):
            total = x.long().sum().item()
            size = len(x)
            torch_compilable_check(total != size, f"the sum {total:>5} equals the length")
            return x + n
        """,
        (torch.arange(4.0), 1.0),
        (torch.ones(4), 1.0),
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_must_rewrite(name):
    source, passing, failing = MUST_REWRITE[name]
    original, mended, result = original_and_mended(program(source))
    fixed = [f for f in result.findings if f.category == "TI" and f.fixed and f.rule == "Trap"]
    assert len(fixed) == 1, result.findings
    _, before = count_breaks(original.main, *passing)
    _, after = count_breaks(mended.main, *passing)
    assert before.breaks >= 1
    assert (after.breaks, after.graphs) == (0, 1)
    for arguments in (passing, failing):
        assert_equivalent(original.main, mended.main, *arguments, backends=("eager", "aot_eager"))


def test_the_check_after_a_kept_item_is_reported_as_following_it():
    # In the original the break is at `.item()` (line 6 of MERGE): the check then
    # compares Python ints. It is a break only once Trap keeps the count a tensor.
    _, _, result = original_and_mended(program(MERGE))
    (item,) = [f for f in result.findings if f.category == "TI"]
    (check,) = [f for f in result.findings if f.category == "VG"]
    assert check.fixed and item.follows is None
    assert check.follows == f"the `.item()` at line {item.line} is kept in the graph"


def test_a_check_on_tensor_values_follows_nothing():
    source = """
        def main(x):
            torch_compilable_check((x > 0).all(), "not all positive")
            return x + 1
    """
    _, _, result = original_and_mended(program(source))
    (check,) = [f for f in result.findings if f.category == "VG"]
    assert check.fixed and check.follows is None


def test_qwen2_audio_merge_is_one_graph():
    original, mended, _ = original_and_mended(program(MERGE))
    _, before = count_breaks(original.main, *merge_arguments(4))
    _, after = count_breaks(mended.main, *merge_arguments(4))
    assert (before.graphs, before.breaks) == (3, 2)
    assert (after.graphs, after.breaks) == (1, 0)
    for tokens in (4, 3):  # 3: the check fails, with the counts in its message
        assert_equivalent(original.main, mended.main, *merge_arguments(tokens), backends=("eager", "aot_eager"))


# name -> (source, reason). One row per legality condition.
MUST_NOT_REWRITE = {
    "assigns_one_local": (
        """
        def main(x, n):
            def later():
                return count
            count = (x > 0).sum().item()
            torch_compilable_check(count == 4, f"{count} positive")
            return x * later()
        """,
        "nested function",
    ),
    "read_only_by_checks": (
        """
        def main(x, n):
            count = (x > 0).sum().item()
            torch_compilable_check(count == 4, f"{count} positive")
            return x * count
        """,
        "read outside a validation check",
    ),
    "read_only_by_checks__chained_comparison": (
        """
        def main(x, n):
            count = (x > 0).sum().item()
            torch_compilable_check(0 < count <= x.shape[0], f"{count} positive")
            return x
        """,
        "read outside a validation check",
    ),
    "read_only_by_checks__converted_in_the_message": (
        """
        def main(x, n):
            count = (x > 0).sum().item()
            torch_compilable_check(count == 4, f"{count!r} positive")
            return x
        """,
        "read outside a validation check",
    ),
    "reads_see_only_this_value": (
        """
        def main(x, n):
            count = (x > 0).sum().item()
            if n > 1:
                count = 4
            torch_compilable_check(count == 4, f"{count} positive")
            return x
        """,
        "another binding",
    ),
    "compared_with_integers": (
        """
        def main(x, n):
            count = (x > 0).sum().item()
            torch_compilable_check(count == n, f"{count} positive")
            return x
        """,
        "may not be an integer",
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_must_not_rewrite(name):
    source, reason = MUST_NOT_REWRITE[name]
    original, mended, result = original_and_mended(program(source))
    reasons = [f.reason for f in result.findings if f.category == "TI" and not f.fixed]
    assert any(reason in (r or "") for r in reasons), result.findings
    for arguments in ((torch.arange(4.0) + 1, 2.0), (torch.arange(4.0) - 1, 2.0)):
        assert_equivalent(original.main, mended.main, *arguments, backends=("eager", "aot_eager"))


def test_keeps_item_tensor__a_float_value_keeps_the_item():
    """While tracing: a float's ``.item()`` is a double, which compares with Python
    floats in double precision where the float32 tensor would not; the ``.item()``
    (and its break) stays."""
    source = """
        def main(x, n):
            total = x.sum().item()
            torch_compilable_check(total == 6, f"the sum is {total}")
            return x * n
    """
    original, mended, result = original_and_mended(program(source))
    assert any(f.category == "TI" and f.fixed for f in result.findings)
    arguments = (torch.arange(4.0), 2.0)
    assert breaks(mended.main, *arguments) == breaks(original.main, *arguments) >= 1
    for arguments in ((torch.arange(4.0), 2.0), (torch.arange(4.0) + 1, 2.0)):
        assert_equivalent(original.main, mended.main, *arguments, backends=("eager", "aot_eager"))


def test_keeps_item_tensor__a_narrow_integer_keeps_the_item():
    """An int32 tensor cannot hold every integer a Python int compares with."""
    source = """
        def main(x, n):
            count = (x > 0).int().sum(dtype=torch.int32).item()
            torch_compilable_check(count == 4, f"{count} positive")
            return x * n
    """
    original, mended, _ = original_and_mended(program(source))
    arguments = (torch.arange(4.0) + 1, 2.0)
    assert breaks(mended.main, *arguments) == breaks(original.main, *arguments) >= 1
    assert_equivalent(original.main, mended.main, torch.arange(4.0), 2.0, backends=("eager", "aot_eager"))


def test_an_item_no_check_reads_is_reported_as_before():
    source = """
        def main(x, n):
            count = (x > 0).sum().item()
            return x * count
    """
    _, _, result = original_and_mended(program(source))
    items = [f for f in result.findings if f.category == "TI"]
    assert len(items) == 1 and items[0].rule is None and not items[0].fixed
    assert finding_reasons(result, "Trap") == []


def _outcomes_over_calls(function, calls, dynamic):
    """Each call's value or exception (type and message), compiled with ``eager``."""
    torch._dynamo.reset()
    compiled = torch.compile(function, backend="eager", dynamic=dynamic)
    outcomes = []
    for arguments in calls:
        try:
            outcomes.append(compiled(*arguments).tolist())
        except Exception as error:  # noqa: BLE001 - the exception is the observation
            outcomes.append((type(error).__qualname__, str(error)))
    return outcomes


def test_items_stay_with_lowered_checks__an_item_whose_check_keeps_its_break_keeps_its_own():
    """While tracing: the check is refused (a break after it in the same frame), so the
    ``.item()`` keeps its break too. Compiled with ``dynamic=True``, the original's resume
    function after the ``.item()`` formats a symbolic count in the message, which
    TorchDynamo cannot trace: it runs the rest of the frame eagerly, and a shape mismatch
    there raises the op's own RuntimeError. With the count kept a tensor, the mended frame
    traced the rest, and TorchDynamo raised its TorchRuntimeError (long fuzz run seed
    321019)."""
    source = """
        def main(x, y):
            count = (x > 0).sum().item()
            torch_compilable_check(count <= len(x), f"count {count:>4}", IndexError)
            torch._dynamo.graph_break()
            return x + y
    """
    original, mended, result = original_and_mended(program(source))
    assert any(f.category == "TI" and f.fixed for f in result.findings)
    calls = [(torch.arange(4.0), torch.ones(4)), (torch.arange(5.0), torch.ones(4))]
    expected = [original.main(*arguments).tolist() if i == 0 else None for i, arguments in enumerate(calls)]
    try:
        original.main(*calls[1])
    except RuntimeError as error:
        expected[1] = ("RuntimeError", str(error))
    assert expected[1] is not None
    compiled = _outcomes_over_calls(original.main, calls, dynamic=True)
    # torch 2.15 traces the formatting of the symbolic count: the original's resume
    # function then traces the shape mismatch too, and raises TorchDynamo's error.
    if compiled[1][0] != "TorchRuntimeError":
        assert compiled == expected
    assert compiled[0] == expected[0]
    assert _outcomes_over_calls(mended.main, calls, dynamic=True) == compiled
    assert any("no check that reads it" in reason for reason in declined_while_tracing())
