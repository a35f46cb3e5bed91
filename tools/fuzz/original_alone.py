"""Run a grammar program's original, compiled, in a process that never imports graphmend.

A harness crash (``long_run.py``'s "harness crashes") is a program after which torch's
own state was broken, so that the harness could not even read the arguments back. When the
original program alone, in a fresh process without graphmend, leaves the same state, the
crash is torch's and says nothing about graphmend (seeds 380404 and 380416 under
``aot_eager``: "Cannot set version_counter for inference tensor" while compiling a
function that runs under ``torch.inference_mode()`` on inputs that are views of one
tensor, after which the ``PythonDispatcher`` key stays in the thread's dispatch state and
every later operator fails with torch's ``PythonDispatcherTLS`` assertion).

    PYTHONPATH=src python tools/fuzz/original_alone.py 380404 --backend aot_eager

Prints one line per call (returned, or the exception) and whether the ``PythonDispatcher``
key was left in the dispatch state after it; exits 3 when it was.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile

BROKEN_STATE = 3
_CHECK_HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_check_helper.py")


def check_helper_without_graphmend() -> str:
    """The fuzz programs' check helper, without its registration with graphmend: its
    imports of the standard library and torch, its constants and its functions."""
    with open(_CHECK_HELPER) as file:
        tree = ast.parse(file.read())
    kept = [
        node for node in tree.body
        if (isinstance(node, (ast.Import, ast.ImportFrom)) and not (getattr(node, "module", "") or "").startswith("graphmend"))
        or isinstance(node, ast.FunctionDef)
        or (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant))
    ]
    return ast.unparse(ast.Module(body=kept, type_ignores=[]))


def prepare(seed: int, backend: str, directory: str) -> str:
    """Write the program (compiled with ``backend``), the module that compiles it from
    elsewhere, the check helper and the input sets into ``directory``; the module's name."""
    from .grammar import generate, other_module_source
    from .observe import input_values, with_backend

    program = generate(seed)
    name = f"original_alone_{seed}"
    with open(os.path.join(directory, name + ".py"), "w") as out:
        out.write(with_backend(program.source, backend))
    main = other_module_source(name, program.caller_catches, program.compiled_dynamic)
    with open(os.path.join(directory, name + "_main.py"), "w") as out:
        out.write(with_backend(main, backend))
    with open(os.path.join(directory, "graphmend_fuzz_checks.py"), "w") as out:
        out.write(check_helper_without_graphmend())
    inputs = [
        (label, x.tolist(), y.tolist(), items, box)
        for label, x, y, items, box in input_values(seed, program.shape, program.compiled_dynamic)
    ]
    with open(os.path.join(directory, name + ".json"), "w") as out:
        json.dump({
            "inputs": inputs, "share_memory": program.inputs_share_memory, "site": program.compile_site,
            "dynamic": program.compiled_dynamic, "backend": backend,
        }, out)
    return name


def run_alone(directory: str, name: str) -> int:
    """In this process (which must not have imported graphmend): call the compiled
    original on each input set, as the harness does, until the dispatch state breaks."""
    import contextlib
    import importlib
    import io

    import torch

    sys.path.insert(0, directory)
    with open(os.path.join(directory, name + ".json")) as file:
        settings = json.load(file)
    module = importlib.import_module(name)
    if settings["site"] == "other-module":
        target = importlib.import_module(name + "_main").compiled_f
    elif settings["site"] == "module":
        target = module.compiled_f
    else:
        target = torch.compile(module.f, backend=settings["backend"], dynamic=settings["dynamic"])
    assert not [loaded for loaded in sys.modules if loaded.split(".")[0] == "graphmend"], "graphmend was imported"
    for label, x_value, y_value, item_count, box_count in settings["inputs"]:
        x_value, y_value = torch.tensor(x_value), torch.tensor(y_value)
        if settings["share_memory"]:
            x, y = torch.stack([x_value, y_value]).unbind(0)
        else:
            x, y = x_value.clone(), y_value.clone()
        box = module.Box()
        box.n = box_count
        items = [torch.ones_like(x_value) * (k + 1) for k in range(item_count)]
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                target(x, y, box, items, {"k": 0})
            outcome = "returned"
        except Exception as error:  # noqa: BLE001 - the outcome is what is reported
            outcome = f"raised {type(error).__name__}: {' '.join(str(error).split())[:160]}"
        broken = torch._C._dispatch_tls_is_dispatch_key_included(torch._C.DispatchKey.PythonDispatcher)
        print(f"{label}: {outcome}; PythonDispatcher left in the dispatch state: {broken}")
        if broken:
            return BROKEN_STATE
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seed", type=int)
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--alone-in", help=argparse.SUPPRESS)  # the child process: directory, module
    options = parser.parse_args(argv)
    if options.alone_in:
        directory, name = options.alone_in.split(os.pathsep)
        return run_alone(directory, name)
    with tempfile.TemporaryDirectory() as directory:
        name = prepare(options.seed, options.backend, directory)
        child = subprocess.run(
            [sys.executable, os.path.abspath(__file__), str(options.seed), "--alone-in", directory + os.pathsep + name],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=directory,
            env={**os.environ, "PYTHONPATH": ""},
        )
    print(child.stdout, end="")
    return child.returncode


if __name__ == "__main__":
    if __package__ in (None, "") and "--alone-in" not in sys.argv:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        __package__ = "tools.fuzz"
    sys.exit(main())
