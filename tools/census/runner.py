"""Run census tasks (one entry in one mode: its original arm, then its graphmend arm,
each a fresh process), keep their rows in a JSONL file, and resume from it.

A task's two rows are appended with one ``write`` and flushed to disk, so a census killed
at any point leaves whole tasks behind (a torn last line is ignored on reading); a
second run with the same file skips every task whose both rows are there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tools.census.models import Entry

ARMS = ("original", "graphmend")
MODES = ("eval", "train")
BACKENDS = ("eager", "aot_eager", "inductor")
# The checkout (for ``tools`` and ``benchmarks``) and graphmend's own folder.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass(frozen=True)
class Task:
    entry: Entry
    mode: str
    backend: str
    max_parameters: int
    timeout: float

    def key(self, arm: str) -> tuple[str, str, str, str]:
        return (self.entry.name, self.mode, self.backend, arm)


def row_key(row: dict) -> tuple[str, str, str, str]:
    return (row.get("model"), row.get("mode"), row.get("backend"), row.get("arm"))


def child_environment() -> dict:
    """The parent's environment, with this checkout and this graphmend first on the path,
    and one hook cache for all children unless one is set."""
    import graphmend

    source = os.path.dirname(os.path.dirname(os.path.abspath(graphmend.__file__)))
    environment = dict(os.environ)
    path = [source, CHECKOUT] + [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    environment["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    environment.setdefault(
        "GRAPHMEND_CACHE_DIR", os.path.join(tempfile.gettempdir(), "graphmend-census-cache")
    )
    # Each child measures one model on one thread; N jobs must not oversubscribe the cores.
    environment.setdefault("OMP_NUM_THREADS", "1")
    return environment


def run_child(task: Task, arm: str, python: str = sys.executable) -> dict:
    """One arm in a fresh process; a row always comes back (timeouts and crashes included)."""
    payload = json.dumps(
        {
            "entry": task.entry.to_json(),
            "arm": arm,
            "mode": task.mode,
            "backend": task.backend,
            "max_parameters": task.max_parameters,
        }
    )
    base = {"model": task.entry.name, "mode": task.mode, "backend": task.backend, "arm": arm}
    with tempfile.TemporaryDirectory(prefix="graphmend-census-") as folder:
        result_path = os.path.join(folder, "result.json")
        command = [python, "-m", "tools.census.child", payload, result_path]
        start = time.perf_counter()
        process = subprocess.Popen(
            command,
            cwd=CHECKOUT,
            env=child_environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, stderr = process.communicate(timeout=task.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.communicate()
            return {**base, "status": "timeout", "reason": f"over {task.timeout:g} s",
                    "seconds": time.perf_counter() - start}
        try:
            with open(result_path, encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            tail = [line for line in (stderr or "").strip().splitlines() if line.strip()]
            return {**base, "status": "crash", "exit_code": process.returncode,
                    "reason": (tail[-1] if tail else "no output")[:300],
                    "seconds": time.perf_counter() - start}


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def compare(original: dict, mended: dict) -> dict:
    """Bit-for-bit comparison of the mended arm's outputs and gradients with the original's:
    per kind, True, False (with the differing names) or None (one arm has none); nothing
    where the original's own seeded calls differ from each other."""
    verdict: dict = {}
    if original.get("varies_between_calls"):
        return {"not_comparable": "the original's outputs differ between two seeded calls"}
    for kind in ("eager_outputs", "compiled_outputs", "eager_gradients", "compiled_gradients"):
        left, right = original.get(kind), mended.get(kind)
        if left is None or right is None:
            continue
        differing = sorted(name for name in set(left) | set(right) if left.get(name) != right.get(name))
        verdict[kind] = not differing
        if differing:
            verdict[f"{kind}_differing"] = differing[:10]
    if original.get("stdout_digest") is not None and mended.get("stdout_digest") is not None:
        verdict["stdout"] = original["stdout_digest"] == mended["stdout_digest"]
    return verdict


def run_task(task: Task, python: str = sys.executable) -> list[dict]:
    """Both arms of a task: two rows, the graphmend one carrying the comparison."""
    original = run_child(task, "original", python)
    mended = run_child(task, "graphmend", python)
    mended["identical"] = compare(original, mended)
    return [original, mended]


class ResultsFile:
    """The JSONL file of rows: read for resuming, appended a task at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def rows(self) -> list[dict]:
        rows = []
        try:
            with open(self.path, encoding="utf-8") as handle:
                for line in handle:
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue  # a line torn by a crash while writing
                    if isinstance(row, dict):
                        rows.append(row)
        except FileNotFoundError:
            pass
        return rows

    def finished(self) -> set:
        return {row_key(row) for row in self.rows()}

    def append(self, rows: list[dict]) -> None:
        text = "".join(json.dumps(row, default=str) + "\n" for row in rows)
        with self._lock:
            folder = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(folder, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                # A crash that tore the previous task's last line must not glue it to this one.
                if handle.tell() and not self._ends_with_newline():
                    text = "\n" + text
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"


def pending(tasks: Iterable[Task], finished: set) -> list[Task]:
    return [task for task in tasks if not all(task.key(arm) in finished for arm in ARMS)]


Progress = Callable[[list[dict]], None]


def run_local(tasks: list[Task], jobs: int, on_done: Progress) -> None:
    """``jobs`` tasks at a time, each in its own child processes."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(run_task, task) for task in tasks]
        for future in as_completed(futures):
            on_done(future.result())


RAY_MISSING = "graphmend census: --ray-address needs ray (pip install 'ray[default]'), which is not importable"


def run_ray(tasks: list[Task], address: str, on_done: Progress) -> None:
    """Each task a Ray task on the cluster at ``address`` ("local" starts one here). Every
    node needs this checkout at the same path and the same Python environment."""
    try:
        import ray
    except ImportError:
        raise RuntimeError(RAY_MISSING) from None
    environment = child_environment()
    runtime_env = {"env_vars": {"PYTHONPATH": environment["PYTHONPATH"]}}
    started_here = not ray.is_initialized()
    if started_here:
        if address == "local":
            ray.init(runtime_env=runtime_env, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1)(_run_task_on_node)
        waiting = {remote.remote(task): task for task in tasks}
        while waiting:
            done, _ = ray.wait(list(waiting), num_returns=1)
            for reference in done:
                task = waiting.pop(reference)
                try:
                    rows = ray.get(reference)
                except Exception as error:  # noqa: BLE001 - a lost node fails its task only
                    rows = [
                        {"model": task.entry.name, "mode": task.mode, "backend": task.backend,
                         "arm": arm, "status": "crash", "reason": f"ray: {type(error).__name__}"}
                        for arm in ARMS
                    ]
                on_done(rows)
    finally:
        if started_here:
            ray.shutdown()


def _run_task_on_node(task: Task) -> list[dict]:
    return run_task(task)
