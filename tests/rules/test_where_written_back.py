"""[Where] a tensor attribute written back as its own conversion, left out while tracing
where ``to`` returns the tensor itself (``rules/where/written_back.py``,
``runtime/written_back.py``): must-rewrite cases with exact counts, one named must-not
case per condition (W123, W219, W220, W221), and differential runs."""

from __future__ import annotations

import ast
import textwrap

import pytest
import torch

from graphmend import mend_source
from graphmend.core.legality import condition_id
from graphmend.rules.where.written_back import arguments_are_plain_reads
from graphmend.runtime import reset
from graphmend.runtime.store import store
from helpers import assert_equivalent, original_and_mended
from helpers import graphs_and_breaks as counts

# CTRL keeps its positional encoding on the input's device and dtype this way.
PROGRAM = """
import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Buffer(torch.arange(12.0).reshape(4, 3), persistent=False)
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        device = x.device
        self.pos = self.pos.to(device=device, dtype=x.dtype)
        return self.linear(x + self.pos[: x.shape[0]])


torch.manual_seed(0)
ENCODER = Encoder()


def main(x):
    return ENCODER(x)
"""

X = torch.randn(4, 3)


@pytest.fixture(autouse=True)
def _fresh():
    reset()
    yield
    reset()


def _declined() -> set[str]:
    return {condition_id(reason) for reason in store.trace_time_declines.values()}


def _variant(old: str, new: str) -> str:
    assert old in PROGRAM
    return PROGRAM.replace(old, new)


MUST_REWRITE = {
    "buffer, keywords": PROGRAM,
    "buffer, positional device": _variant("self.pos.to(device=device, dtype=x.dtype)", "self.pos.to(device)"),
    "persistent buffer": _variant("persistent=False)", ")"),
}
# TorchDynamo writes a plain attribute with no break: left out or not, one graph.
PLAIN_ATTRIBUTE = _variant("nn.Buffer(torch.arange(12.0).reshape(4, 3), persistent=False)",
                           "torch.arange(12.0).reshape(4, 3)")


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_must_rewrite(name):
    original, mended, result = original_and_mended(MUST_REWRITE[name])
    assert result.changed
    assert counts(original.main, X) == (2, 2)
    assert counts(mended.main, X) == (1, 0)
    assert _declined() == set()


@pytest.mark.parametrize("name", [*sorted(MUST_REWRITE), "plain attribute"])
def test_differential(name):
    source = PLAIN_ATTRIBUTE if name == "plain attribute" else MUST_REWRITE[name]
    original, mended, _ = original_and_mended(source)
    assert_equivalent(original.main, mended.main, X, backends=("eager", "aot_eager"))
    assert counts(mended.main, X) <= counts(original.main, X)


def test_the_written_back_tensor_is_the_same_object_with_its_registration():
    _original, mended, _ = original_and_mended(PROGRAM)
    before = mended.ENCODER.pos
    torch._dynamo.reset()
    torch.compile(mended.main, backend="eager")(X)
    assert mended.ENCODER.pos is before
    assert "pos" in mended.ENCODER._non_persistent_buffers_set and "pos" in mended.ENCODER._buffers


def test_arguments_that_run_code_are_not_candidates():
    """W123 ``arguments_are_plain_reads``: the original statement evaluates the
    arguments again where the decision keeps it."""
    source = _variant("self.pos.to(device=device, dtype=x.dtype)", "self.pos.to(torch.device('cpu'))")
    assert "written_back" not in mend_source(textwrap.dedent(source), filename="<written_back>")
    call = ast.parse("self.pos.to(torch.device('cpu'))", mode="eval").body
    assert condition_id(arguments_are_plain_reads(call)) == "W123"


def test_a_conversion_to_another_dtype_keeps_the_write():
    """W219 ``conversion_returns_the_tensor``: converted, the attribute holds a new tensor."""
    source = _variant("self.pos.to(device=device, dtype=x.dtype)", "self.pos.to(dtype=dtype)").replace(
        "        device = x.device\n", "        dtype = torch.float64\n"
    ).replace("self.linear(x + self.pos[: x.shape[0]])", "self.linear(x + self.pos[: x.shape[0]].float())")
    original, mended, result = original_and_mended(source)
    assert result.changed
    assert counts(mended.main, X) == counts(original.main, X)
    assert _declined() == {"W219"}
    reset()
    _original, mended, _ = original_and_mended(source)
    torch._dynamo.reset()
    torch.compile(mended.main, backend="eager")(X)
    assert mended.ENCODER.pos.dtype == torch.float64


def test_a_buffer_registration_hook_keeps_the_write():
    """W220 ``writing_it_back_changes_nothing``: the hook runs at every registration."""
    original, mended, _ = original_and_mended(PROGRAM)
    seen = []
    handle = torch.nn.modules.module.register_module_buffer_registration_hook(
        lambda module, name, tensor: seen.append(name)
    )
    try:
        assert counts(mended.main, X) == counts(original.main, X)
        assert _declined() == {"W220"}
        seen.clear()
        torch._dynamo.reset()
        torch.compile(mended.main, backend="eager")(X)
        assert seen == ["pos"]
    finally:
        handle.remove()


def test_a_class_with_its_own_setattr_keeps_the_write():
    """W220: a ``__setattr__`` of the program's runs at the write."""
    source = _variant("    def forward(self, x):", "    def __setattr__(self, name, value):\n"
                      "        super().__setattr__(name, value)\n\n    def forward(self, x):")
    original, mended, _ = original_and_mended(source)
    assert counts(mended.main, X) == counts(original.main, X)
    assert _declined() == {"W220"}


def test_an_owner_the_trace_changed_keeps_the_write():
    """W221 ``attribute_not_written_in_the_trace``: TorchDynamo writes the counter after
    the graph, so the object read while tracing is not the one the original writes."""
    source = _variant("        device = x.device\n", "        device = x.device\n        self.calls = 1\n")
    original, mended, _ = original_and_mended(source)
    assert counts(mended.main, X) == counts(original.main, X)
    assert _declined() == {"W221"}


# The cache is written back and read by nothing else in the trace: only the decision's
# own read guards it.
UNREAD = """
import torch
import torch.nn as nn


class Cache(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = nn.Buffer(torch.arange(3.0, dtype=torch.float64), persistent=False)
        self.plain = torch.zeros(2)

    def forward(self, x):
        dtype = torch.float64
        self.cache = self.cache.to(dtype=dtype)
        self.plain = self.plain.to(x.device)
        return x + 1


CACHE = Cache()


def main(x):
    return CACHE(x)
"""


def _over_calls(module, change):
    """(graphs, breaks, each call's outcome, the attributes' state) over three compiled
    calls, ``change(module)`` run before the second."""
    from torch._dynamo.testing import CompileCounter
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    backend = CompileCounter()
    compiled = torch.compile(module.main, backend=backend)
    outcomes = []
    for index in range(3):
        if index == 1:
            change(module)
        try:
            outcomes.append(compiled(X).tolist())
        except Exception as error:  # noqa: BLE001 - the exception is the observation
            outcomes.append((type(error).__name__, str(error)))
    cache, plain = module.CACHE.cache, module.CACHE.plain
    state = (cache.dtype, cache.device, type(plain).__name__, getattr(plain, "device", None))
    return backend.frame_count, sum(counters["graph_break"].values()), outcomes, state


@pytest.mark.parametrize("change", ["converted", "moved to meta", "replaced by None"])
def test_an_attribute_changed_between_calls_is_written_as_the_original_writes_it(change):
    """W219 ``conversion_returns_the_tensor``: the decision reads the attribute as the
    original statement does, so the trace is guarded on its type, device and dtype. A
    call after the program converted the buffer to float32 converts it back; one after
    it moved the plain tensor to the meta device raises what ``to`` raises; one after it
    set the attribute to None raises the AttributeError of ``None.to``."""
    actions = {
        "converted": lambda module: setattr(module.CACHE, "cache", module.CACHE.cache.float()),
        "moved to meta": lambda module: setattr(module.CACHE, "plain", module.CACHE.plain.to("meta")),
        "replaced by None": lambda module: setattr(module.CACHE, "plain", None),
    }
    original, mended, _ = original_and_mended(UNREAD)
    assert counts(mended.main, X) == (1, 0)
    before = _over_calls(original, actions[change])
    after = _over_calls(mended, actions[change])
    assert after[2:] == before[2:]
    assert after[0] <= before[0] and after[1] <= before[1]


def test_a_class_with_its_own_getattr_keeps_the_write():
    """W220 ``writing_it_back_changes_nothing``: the original statement reads the
    buffer through the class's ``__getattr__``, which logs the names read; the write left
    out would read nothing, and the log would miss them on every compiled call."""
    source = """
        import torch
        import torch.nn as nn

        READ = []


        class Logged(nn.Module):
            def __init__(self):
                super().__init__()
                self.table = nn.Buffer(torch.arange(3.0), persistent=False)

            def __getattr__(self, name):
                READ.append(name)
                return super().__getattr__(name)

            def forward(self, x):
                self.table = self.table.to(x.device)
                return x + 1


        LOGGED = Logged()


        def main(x):
            return LOGGED(x)
    """
    original, mended, _ = original_and_mended(textwrap.dedent(source))

    def names_read_per_call(module):
        torch._dynamo.reset()
        compiled = torch.compile(module.main, backend="eager")
        compiled(X)  # traced: TorchDynamo's own reads are logged too
        logged = []
        for _ in range(2):
            module.READ.clear()
            compiled(X)
            logged.append([name for name in module.READ if name == "table"])
        module.READ.clear()
        module.main(X)
        return logged, list(module.READ)

    assert names_read_per_call(mended) == names_read_per_call(original)
    assert "W220" in _declined()


def test_a_buffer_registration_hook_registered_after_compiling_runs_at_each_write():
    """W220: the decision is guarded on there being no global buffer-registration hook,
    so a hook registered after the first call makes the next one trace again, and it
    runs at every write, as in the original."""

    def hooked_writes(module):
        torch._dynamo.reset()
        compiled = torch.compile(module.main, backend="eager")
        compiled(X)
        seen = []
        handle = torch.nn.modules.module.register_module_buffer_registration_hook(
            lambda _module, name, _tensor: seen.append(name)
        )
        try:
            compiled(X)
            compiled(X)
        finally:
            handle.remove()
        return seen

    original, mended, _ = original_and_mended(PROGRAM)
    assert hooked_writes(mended) == hooked_writes(original) == ["pos", "pos"]
