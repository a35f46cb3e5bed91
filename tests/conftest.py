"""Test tiers: the default tier leaves out tests marked ``slow``; ``--full`` runs them too.

Slow tests build transformers models, compile with TorchInductor, run most of the
generated-program differential seeds, or start fresh interpreters. ``.ci/run`` runs the
full tier. A test is slow when it carries ``@pytest.mark.slow`` or is listed in
``SLOW_TESTS`` below (which marks tests of files that are edited elsewhere in one place).
The many-case differential tests keep one case in ``DEFAULT_TIER_STRIDE[test]`` in the
default tier (every rule's must-rewrite and must-not tests stay whole): the default tier
must run in under 3 minutes on 2 cores.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
# The default tier keeps the first seeds of the generated-program differential tests.
DEFAULT_TIER_SEEDS = 4

# "file::test" -> k: the default tier keeps cases 0, k, 2k, ... of a parametrized test (in
# collection order; k prime to the parameter lists' lengths spreads the cases over all of them).
DEFAULT_TIER_STRIDE: dict[str, int] = {
    "differential/test_fuzz_slice.py::test_grammar_program_behaves_the_same_once_mended": 4,
    "rules/test_capture_merges.py::test_differential": 3,
    "rules/test_capture.py::test_differential": 5,
    "rules/test_where_soundness.py::test_differential_for_declined_classes": 3,
    "rules/test_where_soundness.py::test_random_draw_traced_before_the_branch_keeps_the_original": 2,
    "rules/test_trap_checks.py::test_differential": 3,
}

# file under tests/ -> {test function name (without parameters), or "*" for every test: why}
SLOW_TESTS: dict[str, dict[str, str]] = {
    "test_examples.py": {
        "test_model_examples_compile_to_one_graph_under_graphmend_run": (
            "runs the model example scripts in fresh interpreters; they need transformers"
        ),
        "test_paper_figures_lose_every_break_under_graphmend_run_with_the_same_output": (
            "runs the README's example in two fresh interpreters"
        ),
    },
    "cli/test_cli_main.py": {"test_python_dash_m_graphmend": "fresh interpreter"},
    "bench/test_bench_worker.py": {"test_a_worker_that_fails_still_writes_a_result": "fresh interpreter"},
    "cli/test_cli_explain_runs.py": {"*": "runs scripts in fresh interpreters"},
    "hook/test_hook_remote_code.py": {
        "test_remote_code_module_is_mended": "builds a transformers remote-code model",
    },
    "test_paper_figures.py": {
        "test_figures_compile_to_one_graph_and_behave_the_same": "compiles with TorchInductor",
        "test_figure_3_longrope_under_inductor": "compiles with TorchInductor",
    },
    "rules/test_trap.py": {
        "test_a_lowered_guard_fires_under_inductor": "compiles with TorchInductor",
    },
    "hook/test_default_reach.py": {
        "test_two_file_layout_every_spelling_one_graph_no_break_same_output": "fresh interpreters",
        "test_torch_dynamo_optimize_reaches_the_model_module": "fresh interpreters",
        "test_dash_m_runs_a_package_as_python_dash_m_does": "fresh interpreters",
        "test_dash_m_with_a_module_that_is_not_there_exits_1_in_one_line": "fresh interpreters",
        "test_install_with_no_arguments_mends_the_users_own_modules": "fresh interpreters",
    },
    "hook/test_hook_cache.py": {
        "test_cache_hit_in_a_fresh_interpreter": "fresh interpreters",
        "test_two_processes_filling_a_cold_cache_at_once": "fresh interpreters",
    },
    "hook/test_hook_run.py": {
        "test_end_to_end_in_a_fresh_interpreter": "fresh interpreter",
        "test_end_to_end_uncaught_exception": "fresh interpreter",
        "test_the_scripts_main_is_the_one_python_gives_it": "fresh interpreter",
    },
    "cli/test_cli_explain.py": {
        "test_explain_runs_the_script_both_ways": "runs a script in two fresh interpreters",
    },
    "cli/test_cli_explain_item.py": {
        "test_the_example_script_end_to_end": "runs a script in two fresh interpreters",
    },
    "test_runtime_entries.py": {
        "test_output_is_complete_at_interpreter_exit": "fresh interpreters",
    },
}
GENERATED_PROGRAMS = "differential/test_generated_programs.py"
SEED = re.compile(r"\[seed(\d+)\]$")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        help="run the full tier: the tests marked slow as well (what .ci/run runs)",
    )


def _path_under_tests(item: pytest.Item) -> str | None:
    try:
        return item.path.relative_to(TESTS).as_posix()
    except ValueError:
        return None


def _is_listed_slow(item: pytest.Item) -> bool:
    path = _path_under_tests(item)
    if path is None:
        return False
    if path == GENERATED_PROGRAMS:
        seed = SEED.search(item.name)
        return seed is not None and int(seed.group(1)) >= DEFAULT_TIER_SEEDS
    listed = SLOW_TESTS.get(path, {})
    return "*" in listed or getattr(item, "originalname", item.name) in listed


def _stride_key(item: pytest.Item) -> str | None:
    path = _path_under_tests(item)
    if path is None:
        return None
    key = f"{path}::{getattr(item, 'originalname', item.name)}"
    return key if key in DEFAULT_TIER_STRIDE and hasattr(item, "callspec") else None


@pytest.hookimpl(tryfirst=True)  # mark before -m or -k selects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cases_seen: dict[str, int] = {}
    for item in items:
        key = _stride_key(item)
        if key is not None:
            index = cases_seen.get(key, 0)
            cases_seen[key] = index + 1
            if index % DEFAULT_TIER_STRIDE[key]:
                item.add_marker(pytest.mark.slow)
        if _is_listed_slow(item):
            item.add_marker(pytest.mark.slow)
    # --full runs everything; an explicit -m expression (e.g. `-m slow`) chooses on its own.
    if config.getoption("--full") or config.getoption("markexpr"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
