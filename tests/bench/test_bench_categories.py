"""Sorting graph-break reasons into the paper's categories."""

import pytest

from benchmarks.categories import (
    GraphBreak,
    categorize,
    count_categories,
    is_validation_guard,
    parse_graph_break_log,
    short_reason,
)

LOGGER_REASON = (
    "Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):\n\n"
    "logging.Logger method not supported for non-export cases\n"
    "  Explanation: logging.Logger methods are not supported for non-export cases."
)
WARN_REASON = (
    "Attempted to call function marked as skipped\n"
    "  Explanation: Dynamo does not know how to trace the Python builtin `_warnings.warn`."
)
ITEM_REASON = (
    "Unsupported Tensor.item() call with capture_scalar_outputs=False\n"
    "  Explanation: Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False."
)
NONZERO_REASON = (
    "Dynamic shape operator\n"
    "  Explanation: Operator `aten.nonzero.default`'s output shape depends on input Tensor data."
)
SCALAR_REASON = (
    "Data dependent operator\n"
    "  Explanation: Operator `aten._local_scalar_dense.default` has a non-Tensor output whose value is "
    "dependent on the data of Tensor inputs."
)
BRANCH_REASON = (
    "Data-dependent branching\n"
    "  Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`). "
    "Dynamo does not support tracing dynamic control flow."
)
PRINT_REASON = "Failed to trace builtin operator\n  Explanation: Dynamo does not know how to trace builtin operator `print`"


@pytest.mark.parametrize(
    ("reason", "source", "expected"),
    [
        (LOGGER_REASON, "logger.warning_once(", "LC"),
        (WARN_REASON, "warnings.warn(", "LC"),
        (PRINT_REASON, 'print("x")', "LC"),
        ("some unknown reason", 'print("x", y)', "LC"),
        (ITEM_REASON, "is_global_attn = mask.flatten().any().item()", "TI"),
        (ITEM_REASON, "mask_flatten_ = padding_mask[:, a : (a + h * w)]", "TI"),
        (NONZERO_REASON, "idxs = torch.nonzero(mask)", "DS"),
        ("graph break", "rows = x.nonzero(as_tuple=True)", "DS"),
        (SCALAR_REASON, "torch.linspace(0.5, height - 0.5, height)", "DO"),
        (BRANCH_REASON, "if seq_len > original_max_position_embeddings:", "DC"),
        ("list_richcompare_nonconst", "if list(a.size()) == [b]:", "DC"),
        ("Unsupported context manager", "with open(f):", "other"),
        ("", "", "other"),
    ],
)
def test_categorize_from_reason_and_source(reason, source, expected):
    assert categorize(reason, source) == expected


def test_a_data_dependent_if_with_a_lone_raise_is_a_validation_guard(tmp_path):
    path = tmp_path / "guards.py"
    path.write_text(
        "def f(x, n):\n"  # 1
        "    if (x[:, 0] * x[:, 1]).sum() != n:\n"  # 2
        "        raise ValueError('bad')\n"  # 3
        "    if x.sum() > 0:\n"  # 4
        "        x = x + 1\n"  # 5
        "    assert list(x.size()) == [\n"  # 6
        "        n,\n"  # 7
        "    ], 'shape'\n"  # 8
        "    if x.any():\n"  # 9
        "        raise ValueError('a')\n"  # 10
        "    else:\n"  # 11
        "        x = x * 2\n"  # 12
        "    return x\n"
    )
    assert categorize(BRANCH_REASON, "", str(path), 2) == "VG"
    assert categorize(BRANCH_REASON, "", str(path), 4) == "DC"
    assert categorize("list_richcompare_nonconst", "", str(path), 7) == "VG"
    assert not is_validation_guard(str(path), 9), "an if with an else is control flow"
    assert not is_validation_guard(str(path), 999)
    assert not is_validation_guard(str(tmp_path / "missing.py"), 1)
    # The reason wins over the guard shape: an .item() inside a guard is TI.
    assert categorize(ITEM_REASON, "", str(path), 2) == "TI"


def test_parse_a_graph_break_log_message(tmp_path):
    path = tmp_path / "model.py"
    path.write_text("def forward(self):\n    logger.warning_once('deprecated')\n")
    message = (
        f"Graph break in user code at {path}:2\n"
        f"Graph Break Reason: {LOGGER_REASON}\n"
        "User code traceback:\n"
        f'  File "{path}", line 2, in forward\n'
        "    logger.warning_once('deprecated')\n"
    )
    item = parse_graph_break_log(message)
    assert item == GraphBreak(
        str(path), 2, LOGGER_REASON, "logger.warning_once('deprecated')", "LC", False
    )
    assert item.to_json()["reason"] == (
        "logging.Logger method not supported for non-export cases | "
        "Explanation: logging.Logger methods are not supported for non-export cases."
    )


def test_parse_a_duplicate_break_and_ignore_other_messages(tmp_path):
    message = (
        "Graph break (user stack suppressed due to duplicate graph break) in user code at "
        "/nowhere/model.py:7\nGraph Break Reason: " + NONZERO_REASON
    )
    item = parse_graph_break_log(message)
    assert (item.file, item.line, item.category, item.duplicate) == (
        "/nowhere/model.py",
        7,
        "DS",
        True,
    )
    assert parse_graph_break_log("Step 1: torchdynamo start tracing forward") is None


def test_count_categories_in_legend_order():
    breaks = [GraphBreak(None, None, "", "", category) for category in ("LC", "DC", "LC", "other")]
    assert list(count_categories(breaks).items()) == [("DC", 1), ("LC", 2), ("other", 1)]


def test_short_reason_keeps_headline_and_explanation():
    assert short_reason(BRANCH_REASON).startswith(
        "Data-dependent branching | Explanation: Detected"
    )
    assert short_reason("") == ""
