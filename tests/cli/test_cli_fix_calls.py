"""The output calls ``graphmend fix`` writes (``graphmend.runtime.fixed_calls``): the
file behaves as the original when not compiling, and compiles to the breaks
``graphmend run`` leaves, with the same output."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import re
import sys
import textwrap
import types
import warnings
from pathlib import Path

import pytest
import torch

from graphmend import mend
from graphmend.cli.main import main
from graphmend.counting import CountingBackend, recording_graph_breaks

MODULE = '''\
import logging
import warnings

import torch

logger = logging.getLogger("fixed_calls_case")


class OnceLogger(logging.Logger):
    def warning_once(self, *args, **kwargs):
        self.warning(*args, **kwargs)


logging.setLoggerClass(OnceLogger)
once_logger = logging.getLogger("fixed_calls_case.once")
logging.setLoggerClass(logging.Logger)


def f(x):
    y = x * 2.0
    print("value", y.sum())
    warnings.warn(
        "careful",
        UserWarning,
    )
    logger.warning("logged %s", 3)
    once_logger.warning_once("once %s", 4)
    return y + 1.0
'''


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def original_and_fixed(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    original_path = tmp_path / "a" / "case.py"
    fixed_path = tmp_path / "b" / "case.py"
    original_path.write_text(MODULE)
    fixed_path.write_text(MODULE)
    assert main(["fix", "--all", "--write", str(fixed_path)]) == 0
    capsys.readouterr()
    yield _load(original_path, "fixed_calls_original"), _load(fixed_path, "fixed_calls_fixed"), fixed_path
    for name in ("fixed_calls_original", "fixed_calls_fixed"):
        sys.modules.pop(name, None)


def _observe(module, backend=None, filter_action="always", records_by_python=True):
    """(value, printed text, warnings, log records), each place as (file name, the
    text of the line it names, function), and (graphs, TorchDynamo's break records).
    Warnings are shown by a Python function, which a graph does not call: compiled, the
    call is made with its break. ``records_by_python``: log records are kept by a
    Python handler (the same); otherwise a stream handler writes them into a string
    buffer, which a graph may do."""
    records = []
    buffer = io.StringIO()

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(_record_place(record.pathname, record.lineno, record.funcName, record.getMessage()))

    if records_by_python:
        handler = Keep()
    else:
        handler = logging.StreamHandler(buffer)
        handler.setFormatter(logging.Formatter("%(pathname)s|%(lineno)d|%(funcName)s|%(message)s"))
    logger = logging.getLogger("fixed_calls_case")
    logger.addHandler(handler)
    logger.propagate = False
    torch._dynamo.reset()
    counter = CountingBackend()
    function = torch.compile(module.f, backend=counter) if backend else module.f
    printed = io.StringIO()
    shown = []
    try:
        with recording_graph_breaks() as breaks, contextlib.redirect_stdout(printed), warnings.catch_warnings():
            warnings.simplefilter(filter_action)
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: (
                shown.append((Path(filename).name, _line_text(filename, lineno), category.__name__, str(message)))
            )
            try:
                value = function(torch.ones(3)).tolist()
            except Exception as error:  # noqa: BLE001 - compared
                value = (type(error).__name__, str(error))
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    if not records_by_python:
        records = [_record_place(*line.split("|")) for line in buffer.getvalue().splitlines()]
    return (value, printed.getvalue(), shown, records), (counter.graphs, len(breaks.breaks))


def _record_place(path, line, function, message):
    function = function.split("torch_dynamo_resume_in_")[-1].split("_at_")[0]
    return (Path(path).name, _line_text(path, int(line)), function, message)


def _line_text(path, line) -> str:
    """The line's text, with the fixed spelling of a call read back as the original's."""
    text = Path(path).read_text().splitlines()[line - 1].strip()
    text = re.sub(r"__graphmend__\.log\((\w+)\)", r"\1", text)
    return text.replace("__graphmend__.warn", "warnings.warn").replace("__graphmend__.print", "print")


def test_only_the_callees_change(original_and_fixed):
    _, _, fixed_path = original_and_fixed
    written = fixed_path.read_text()
    assert written == MODULE.replace("\nimport logging\n", "\nimport logging\n", 1).replace(
        "import logging\n", "import graphmend.runtime as __graphmend__\nimport logging\n", 1
    ).replace('    print("value"', '    __graphmend__.print("value"').replace(
        "    warnings.warn(\n", "    __graphmend__.warn(\n"
    ).replace("    logger.warning(", "    __graphmend__.log(logger).warning(").replace(
        "    once_logger.warning_once(", "    __graphmend__.log(once_logger).warning_once("
    )


def test_not_compiling_the_fixed_file_is_the_original(original_and_fixed):
    original, fixed, _ = original_and_fixed
    expected = _observe(original)
    observed = _observe(fixed)
    assert observed == expected
    (value, printed, shown, records), _ = observed
    # each place names the call's own line
    assert shown == [("case.py", "warnings.warn(", "UserWarning", "careful")]
    assert records[0][1:] == ('logger.warning("logged %s", 3)', "f", "logged 3")
    # a Logger method of its own names its own frame, as it did
    assert records[1][1:] == ("self.warning(*args, **kwargs)", "warning_once", "once 4")


def test_a_warning_shown_once_per_line_is_shown_once(original_and_fixed):
    original, fixed, _ = original_and_fixed
    first = _observe(original, filter_action="default")
    assert _observe(fixed, filter_action="default") == first


def test_compiled_the_fixed_file_has_the_breaks_graphmend_run_leaves(original_and_fixed):
    # Warnings ignored (a shown one goes to pytest's recorder, a list the graph could
    # also change, so it is handed back: the next test) and records written to a stream.
    original, fixed, _ = original_and_fixed
    mended = types.SimpleNamespace(f=mend(original.f))
    expected, original_counts = _observe(original, "counting", "ignore", records_by_python=False)
    observed, counts = _observe(fixed, "counting", "ignore", records_by_python=False)
    assert observed == expected
    assert expected[1] == "value tensor(6.)\n"
    assert [record[2:] for record in expected[3]] == [("f", "logged 3"), ("warning_once", "once 4")]
    assert original_counts == (2, 4)
    assert counts == _observe(mended, "counting", "ignore", records_by_python=False)[1] == (1, 0)


def test_compiled_a_call_the_graph_cannot_hold_is_made_as_in_the_original(original_and_fixed):
    # A warning shown by a Python function and records kept by a Python handler: each
    # call is handed back and made from the call's own line, as the original's graph
    # break made it, with the breaks graphmend run keeps.
    original, fixed, _ = original_and_fixed
    mended = types.SimpleNamespace(f=mend(original.f))
    (expected, _), (observed, counts) = _observe(original, "counting"), _observe(fixed, "counting")
    assert observed == expected
    assert expected[2] == [("case.py", "warnings.warn(", "UserWarning", "careful")]
    assert counts == _observe(mended, "counting")[1] == (2, 3)


def test_a_warnings_filter_that_raises_raises_as_in_the_original(original_and_fixed):
    original, fixed, _ = original_and_fixed
    (expected, _), (observed, _) = _observe(original, "counting", "error"), _observe(fixed, "counting", "error")
    assert expected[0] == ("UserWarning", "careful")
    assert observed == expected


def test_a_file_fixed_twice_changes_once(tmp_path, capsys):
    path = tmp_path / "case.py"
    path.write_text(textwrap.dedent(MODULE))
    assert main(["fix", "--all", "--write", str(path)]) == 0
    once = path.read_text()
    assert main(["fix", "--all", "--write", str(path)]) == 0
    assert path.read_text() == once
