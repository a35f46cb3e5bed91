"""Shared helpers for rule tests: load source as a module, run it eagerly and compiled."""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import sys
import textwrap
import types
import warnings

import torch

import graphmend
import graphmend.runtime  # wraps torch.compile before any test compiles
from graphmend.counting import CountingBackend, count_breaks

_names = itertools.count()


def load_module(source, stem: str = "fixture", filename: str | None = None) -> types.ModuleType:
    """Execute ``source`` (text or an ``ast.Module``) as a fresh, registered module."""
    name = f"graphmend_test_{stem}_{next(_names)}"
    module = types.ModuleType(name)
    module.__file__ = filename or f"<{name}>"
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - the program under test
    return module


def mend(source: str, **options) -> graphmend.MendResult:
    options.setdefault("scope", "all")
    return graphmend.mend_module_source(textwrap.dedent(source), **options)


def original_and_mended(source: str, **options):
    """Both versions from one file name; the mended one compiled from the rewritten tree,
    as the import hook does, so line numbers are the original ones."""
    source = textwrap.dedent(source)
    filename = f"<fixture_{next(_names)}>"
    result = mend(source, filename=filename, **options)
    original = load_module(source, "original", filename)
    mended = load_module(result.tree if result.changed else source, "mended", filename)
    return original, mended, result


class Observation:
    """Everything a user can see from one call: value or exception, stdout, logs, warnings."""

    def __init__(self, value=None, error=None, stdout="", logs=(), warned=()):
        self.value, self.error, self.stdout, self.logs, self.warned = value, error, stdout, list(logs), list(warned)

    def assert_same_as(self, other: Observation) -> None:
        assert (self.error is None) == (other.error is None), (self.error, other.error)
        if self.error is not None:
            # Each fixture module defines its own exception classes: compare by name,
            # and by identity for classes that both modules share (builtins).
            assert type(self.error).__qualname__ == type(other.error).__qualname__
            if type(other.error).__module__ == "builtins":
                assert type(self.error) is type(other.error)
            assert str(self.error) == str(other.error)
        else:
            assert_identical(self.value, other.value)
        assert self.stdout == other.stdout
        assert self.logs == other.logs
        assert self.warned == other.warned


def assert_identical(first, second) -> None:
    if isinstance(first, torch.Tensor):
        assert isinstance(second, torch.Tensor)
        assert first.dtype == second.dtype and first.shape == second.shape
        assert torch.equal(first, second), (first, second)
    elif isinstance(first, (tuple, list)):
        assert type(first) is type(second) and len(first) == len(second)
        for a, b in zip(first, second):
            assert_identical(a, b)
    else:
        assert first == second


class _Records(logging.Handler):
    # Records what the program logs for the comparison; the program never reads it.
    graphmend_output_only = True

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        if not record.name.startswith("graphmend_test_"):
            return  # torch's and inductor's own logs are not the program's output
        self.records.append((record.levelname, record.getMessage(), record.lineno, record.funcName))


def observe(function, *args, compiled: bool = False, backend: str = "eager") -> Observation:
    handler = _Records()
    root = logging.getLogger()
    root.addHandler(handler)
    saved_level = root.level
    root.setLevel(logging.DEBUG)
    stdout = io.StringIO()
    target = function
    if compiled:
        torch._dynamo.reset()
        target = torch.compile(function, backend=backend, dynamic=False)
    value = error = None
    caught = []

    # Out of TorchDynamo's reach, as a real stream is: ``catch_warnings(record=True)``
    # records into a list, which graphmend will not write to from inside a graph.
    @torch._dynamo.disable
    def record_warning(message, category, filename, lineno, file=None, line=None):
        caught.append((str(message), category, lineno, filename))

    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(stdout):
            warnings.simplefilter("always")
            warnings.showwarning = record_warning
            try:
                value = target(*args)
            except Exception as exception:  # noqa: BLE001 - the observation is the exception itself
                error = exception
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)
    return Observation(value, error, stdout.getvalue(), handler.records, caught)


def assert_equivalent(original, mended, *args, backends=("eager",)) -> None:
    """Mended code, eager and compiled, behaves exactly like the original.

    The reference is the original run eagerly; for inductor, whose fused kernels may
    round differently from eager kernels, tensor values are compared with the original
    compiled by inductor too (printed text, logs and exceptions still with eager).
    """
    reference = observe(original, *args)
    observe(mended, *args).assert_same_as(reference)
    for backend in backends:
        compiled = observe(mended, *args, compiled=True, backend=backend)
        if backend == "inductor" and reference.error is None:
            original_compiled = observe(original, *args, compiled=True, backend=backend)
            assert_identical(compiled.value, original_compiled.value)
            compiled.value = reference.value
        compiled.assert_same_as(reference)


def breaks(function, *args) -> int:
    return graphs_and_breaks(function, *args)[1]


def graphs_and_outcomes_over_calls(function, calls) -> tuple[int, list]:
    """Graphs compiled over ``calls`` (argument tuples, in turn, one compilation under
    the counting backend), and each call's (printed text, value as a list or the
    exception's type and message)."""
    torch._dynamo.reset()
    backend = CountingBackend()
    target = torch.compile(function, backend=backend, dynamic=False)
    outcomes = []
    for arguments in calls:
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            try:
                value = target(*arguments).tolist()
            except Exception as error:  # noqa: BLE001 - the exception is the observation
                value = (type(error).__qualname__, str(error))
        outcomes.append((printed.getvalue(), value))
    return backend.graphs, outcomes


class CountingAotEager:
    """Counts the graphs it is given and compiles each with ``aot_eager``, which it names
    as ``__wrapped__`` (graphmend decides some joins by the backend)."""

    def __init__(self) -> None:
        from torch._dynamo import lookup_backend

        self.graphs = 0
        self.__wrapped__ = lookup_backend("aot_eager")

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return self.__wrapped__(graph_module, example_inputs)


def graphs_and_breaks_under_aot_eager(function, *args) -> tuple[int, int]:
    """``graphs_and_breaks`` with the graphs compiled by ``aot_eager``."""
    from graphmend.counting import break_count_so_far, recording_graph_breaks
    from graphmend.torch_adapter import graph_break_counters, reset_dynamo

    reset_dynamo()
    graph_break_counters().clear()
    backend = CountingAotEager()
    compiled = torch.compile(function, backend=backend, dynamic=False)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), recording_graph_breaks() as records:
        warnings.simplefilter("ignore")
        compiled(*args)
    count = break_count_so_far(backend, records)
    return count.graphs, count.breaks


def graphs_and_breaks(function, *args) -> tuple[int, int]:
    """Graphs and breaks of one call under the counting backend, output silenced."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, count = count_breaks(function, *args)
    return count.graphs, count.breaks


def finding_reasons(result: graphmend.MendResult, rule: str) -> list[str]:
    return [f.reason for f in result.findings if f.rule == rule and not f.fixed]
