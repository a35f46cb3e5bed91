"""Deferred output whatever compiled the code: entries, loops, threads, tasks, exit.

Output of a mended ``print`` / logger call happens inside the graph at the point of
the call, so no entry point needs a boundary that flushes it, and no graphmend state
is read while tracing (nothing to guard on, nothing to recompile for).
"""

import asyncio
import contextlib
import io
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import graphmend
from graphmend.counting import CountingBackend
from helpers import original_and_mended

SOURCE = """
import logging
import torch
logger = logging.getLogger("graphmend_runtime_entries")

def step(x, t):
    y = torch.sin(x) + t
    print("step", t)
    return y * 2

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(2))

    def forward(self, x, t):
        print("forward", t, x.shape)
        return x * self.scale + t
"""


@pytest.fixture(scope="module")
def modules():
    original, mended, result = original_and_mended(SOURCE)
    assert result.changed
    return original, mended


def run_loop(function, calls: int = 50, compile_with=None):
    """(printed text, graphs compiled) for ``calls`` calls through ``compile_with``."""
    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = compile_with(backend)(function)
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        for call in range(calls):
            compiled(torch.ones(2), torch.tensor(float(call)))
    return stream.getvalue(), backend.graphs


def printed(value: float) -> str:
    return str(torch.tensor(float(value)))


EXPECTED_LINES = "".join(f"step {printed(call)}\n" for call in range(50))


def test_serving_loop_under_dynamo_optimize_prints_every_line_once_in_order(modules):
    original, mended = modules
    text, graphs = run_loop(
        mended.step, compile_with=lambda backend: torch._dynamo.optimize(backend)
    )
    original_text, original_graphs = run_loop(
        original.step, compile_with=lambda backend: torch._dynamo.optimize(backend)
    )
    assert text == original_text == EXPECTED_LINES
    assert graphs <= original_graphs
    assert graphs == 1


def test_serving_loop_under_torch_compile(modules):
    _, mended = modules
    text, graphs = run_loop(
        mended.step, compile_with=lambda backend: lambda f: torch.compile(f, backend=backend)
    )
    assert text == EXPECTED_LINES
    assert graphs == 1


def test_module_kept_and_called_by_an_engine(modules):
    """An engine holds the compiled module and calls it; nothing wraps the call."""
    _, mended = modules

    class Engine:
        def __init__(self, model):
            self.model = model

        def serve(self, requests):
            return [self.model(torch.ones(2), t) for t in requests]

    torch._dynamo.reset()
    backend = CountingBackend()
    engine = Engine(torch._dynamo.optimize(backend)(mended.Model()))
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        engine.serve([torch.tensor(float(n)) for n in range(5)])
    assert stream.getvalue() == "".join(
        f"forward {printed(n)} torch.Size([2])\n" for n in range(5)
    )
    assert backend.graphs == 1


class _PerCaller(io.TextIOBase):
    """A standard output that keeps each thread's or task's text apart."""

    def __init__(self, key):
        self.key, self.texts, self.lock = key, {}, threading.Lock()

    def write(self, text):
        with self.lock:
            self.texts.setdefault(self.key(), []).append(text)
        return len(text)


def test_threads_each_see_exactly_their_own_output(modules):
    _, mended = modules
    torch._dynamo.reset()
    compiled = torch._dynamo.optimize("eager")(mended.step)
    compiled(torch.ones(2), torch.tensor(-1.0))  # compile once, before the threads
    sink = _PerCaller(lambda: threading.current_thread().name)
    barrier = threading.Barrier(2)

    def serve(value):
        barrier.wait()
        for _ in range(20):
            compiled(torch.ones(2), torch.tensor(value))

    threads = [threading.Thread(target=serve, args=(float(n),), name=f"worker-{n}") for n in (1, 2)]
    with contextlib.redirect_stdout(sink):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for n in (1, 2):
        assert "".join(sink.texts[f"worker-{n}"]) == f"step {printed(n)}\n" * 20


def test_asyncio_tasks_each_see_exactly_their_own_output(modules):
    _, mended = modules
    torch._dynamo.reset()
    compiled = torch._dynamo.optimize("eager")(mended.step)

    def current_task_name():
        task = asyncio.current_task()
        return task.get_name() if task else None

    sink = _PerCaller(current_task_name)

    async def serve(value):
        for _ in range(10):
            compiled(torch.ones(2), torch.tensor(value))
            await asyncio.sleep(0)

    async def main():
        await asyncio.gather(
            asyncio.create_task(serve(1.0), name="task-1"),
            asyncio.create_task(serve(2.0), name="task-2"),
        )

    with contextlib.redirect_stdout(sink):
        asyncio.run(main())
    for n in (1, 2):
        assert "".join(sink.texts[f"task-{n}"]) == f"step {printed(n)}\n" * 10


SCRIPT = """
import sys
from torch import compile as compile_bound_early  # before graphmend is imported
import torch
import graphmend
import graphmend.runtime

source = '''
import torch
def step(x):
    print("step", x.shape)
    return x + 1
'''
result = graphmend.mend_module_source(source, scope="all")
assert result.changed
namespace = {"__name__": "mended_in_subprocess"}
exec(compile(result.tree, "<mended>", "exec"), namespace)
entry = sys.argv[1]
if entry == "early_compile":
    compiled = compile_bound_early(namespace["step"], backend="eager")
else:
    compiled = torch._dynamo.optimize("eager")(namespace["step"])
for _ in range(3):
    compiled(torch.ones(2))
# the interpreter exits right after the last compiled call
"""


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize("entry", ["early_compile", "dynamo_optimize"])
def test_output_is_complete_at_interpreter_exit(entry, tmp_path):
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent(SCRIPT))
    environment = dict(os.environ)
    # the graphmend this test process runs
    source_root = os.path.dirname(os.path.dirname(graphmend.__file__))
    environment["PYTHONPATH"] = os.pathsep.join([source_root, environment.get("PYTHONPATH", "")])
    finished = subprocess.run(
        [sys.executable, str(script), entry],
        capture_output=True, text=True, env=environment, timeout=300,
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout == "step torch.Size([2])\n" * 3
