"""The benchmark's categories: Dynamo's record of each break, sorted by the reader
(``graphmend.dynamo_records``), counted in the paper's legend order."""

import importlib.util
import sys

import pytest
import torch

from benchmarks.categories import count_categories
from graphmend.counting import count_breaks
from graphmend.dynamo_records import category_for, is_validation_guard

PROGRAMS = '''\
import logging
import warnings

import torch

logger = logging.getLogger("bench_category_programs")


def printing(x):
    print("x")
    return x + 1


def logging_call(x):
    logger.warning("careful")
    return x + 1


def warning(x):
    warnings.warn("careful")
    return x + 1


def branch(x):
    if x.sum() > 0:
        x = x + 1
    return x * 2


def guard(x):
    if x.sum() < 0:
        raise ValueError("negative")
    return x + 1


def scalar(x):
    return x * x.sum().item()


def nonzero(x):
    return torch.nonzero(x) + 1


def data_dependent_operator(x):
    n = x.sum().int()
    return torch.arange(n) + 1


def branch_in_a_loop(x):
    h = x * 1.0
    for _ in range(2):
        if x.sum() > 0:
            h = h * 0.5
    return h


def context_manager(x):
    with open(__file__) as handle:
        pass
    return x * 2
'''


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """The programs above as a module with a real file, so each break has a real line."""
    path = tmp_path_factory.mktemp("categories") / "bench_category_programs.py"
    path.write_text(PROGRAMS)
    spec = importlib.util.spec_from_file_location("bench_category_programs", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def line_of(text: str) -> int:
    return PROGRAMS.splitlines().index(text) + 1


@pytest.mark.parametrize(
    ("name", "site", "category"),
    [
        ("printing", '    print("x")', "LC"),
        ("logging_call", '    logger.warning("careful")', "LC"),
        ("warning", '    warnings.warn("careful")', "LC"),
        ("branch", "    if x.sum() > 0:", "DC"),
        ("guard", "    if x.sum() < 0:", "VG"),
        ("scalar", "    return x * x.sum().item()", "TI"),
        ("nonzero", "    return torch.nonzero(x) + 1", "DS"),
        ("data_dependent_operator", "    return torch.arange(n) + 1", "DO"),
        # a break in a loop skips the frame; it takes the category of the break in the loop
        ("branch_in_a_loop", "        if x.sum() > 0:", "DC"),
    ],
)
@pytest.mark.filterwarnings("ignore:careful:UserWarning")
def test_each_kind_of_break_gets_its_category_from_dynamos_record(programs, name, site, category):
    _, count = count_breaks(getattr(programs, name), torch.ones(3))
    rows = [record.summary() for record in count.records]
    assert len(rows) == 1, rows
    (row,) = rows
    assert (row["file"], row["line"], row["source"]) == (
        programs.__file__,
        line_of(site),
        site.strip(),
    )
    assert row["category"] == category
    assert count_categories(item["category"] for item in rows) == {category: 1}


def test_a_break_dynamo_does_not_type_as_a_known_kind_is_other(programs):
    _, count = count_breaks(programs.context_manager, torch.ones(3))
    rows = [record.summary() for record in count.records]
    assert rows and {row["category"] for row in rows} == {"other"}
    assert "Unsupported context manager" in {row["gb_type"] for row in rows}
    assert count_categories(row["category"] for row in rows) == {"other": len(rows)}


def test_the_statement_at_the_site_tells_a_validation_guard_from_control_flow(tmp_path):
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
        "    print(x)\n"  # 13
        "    return x\n"
    )
    branching = "Data-dependent branching"
    assert category_for(branching, str(path), 2) == "VG"
    assert category_for(branching, str(path), 4) == "DC"
    assert category_for(branching, str(path), 7) == "VG"
    assert category_for(branching, str(path), 9) == "DC", "an if with an else is control flow"
    assert not is_validation_guard(str(path), 999)
    assert not is_validation_guard(str(tmp_path / "missing.py"), 1)
    # Dynamo's type wins over the guard's shape: an .item() inside a guard is TI.
    item = "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    assert category_for(item, str(path), 2) == "TI"
    # A type that only says "a call Dynamo cannot trace" is sorted by the call at the site.
    assert category_for("Failed to trace builtin operator", str(path), 13) == "LC"
    assert category_for("Failed to trace builtin operator", str(path), 5) == "other"


def test_count_categories_in_legend_order():
    categories = ["LC", "DC", "LC", "other"]
    assert list(count_categories(categories).items()) == [("DC", 1), ("LC", 2), ("other", 1)]
    assert count_categories([]) == {}
