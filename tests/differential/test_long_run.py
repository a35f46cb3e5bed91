"""The long run's bookkeeping: a tally that survives JSON, a run split over fresh processes
that sums to the run made in one, and a process that dies counted as a crash, not lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from tools.fuzz import long_run
from tools.fuzz.long_run import Tally

LONG_RUN = os.path.abspath(long_run.__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(LONG_RUN)))


def test_tally_keeps_counters_classes_and_crashes_through_json(tmp_path) -> None:
    tally = Tally(programs=3, elapsed=1.5, last_seed=7)
    tally.runs.update(["eager", "eager", "compiled:eager"])
    tally.coverage.update(["alias", "print"])
    tally.classes["compiled events: reordered"] = [(5, "compiled:eager", {"lines": 4, "rules": "defer"})]
    tally.crashes.append((6, "boom"))
    path = tmp_path / "tally.json"
    tally.save(str(path))
    loaded = Tally.load(str(path))
    assert loaded.runs == Counter({"eager": 2, "compiled:eager": 1})
    assert isinstance(loaded.coverage, Counter) and loaded.coverage["alias"] == 1
    assert loaded.classes == {"compiled events: reordered": [[5, "compiled:eager", {"lines": 4, "rules": "defer"}]]}
    assert (loaded.programs, loaded.elapsed, loaded.last_seed, loaded.crashes) == (3, 1.5, 7, [[6, "boom"]])
    assert [p.name for p in tmp_path.iterdir()] == ["tally.json"]  # no temporary file left


def test_a_tally_file_not_there_yet_starts_empty(tmp_path) -> None:
    assert Tally.load(str(tmp_path / "none.json")) == Tally()


class _ProcessKilledInSomePrograms:
    """A chunk's process that runs its seeds in turn and is killed in any of ``DEADLY``."""

    DEADLY = {11, 14}

    def __init__(self, command, **kwargs) -> None:
        tally_path = command[command.index("--tally") + 1]
        tally = Tally.load(tally_path)
        self.returncode = 0
        for seed in (int(s) for s in command[command.index("--seeds") + 1].split(",")):
            if seed in self.DEADLY:
                self.returncode = -signal.SIGKILL
                break
            tally.programs += 1
            tally.last_seed = seed
            tally.save(tally_path)

    def wait(self) -> int:
        return self.returncode

    def send_signal(self, signum) -> None:
        pass


def test_a_chunk_whose_process_dies_counts_its_program_as_a_crash_and_runs_the_rest(monkeypatch) -> None:
    monkeypatch.setattr(long_run.subprocess, "Popen", _ProcessKilledInSomePrograms)
    options = long_run.argparse.Namespace(
        fresh_process_every=3, time_limit=0, tally=None, programs=7, start=10, seeds=None, shard="0/1",
        chunk_of_a_run=False, inductor_every=25,
    )
    tally = long_run.run_in_fresh_processes(options, [], list(range(10, 17)), stop_asked=[])
    assert [seed for seed, _ in tally.crashes] == [11, 14]
    assert all("exited with -9" in text for _, text in tally.crashes)
    assert tally.programs == 5 and tally.last_seed == 16


def _summary(*arguments: str) -> str:
    completed = subprocess.run(
        [sys.executable, LONG_RUN, "--programs", "3", "--start", "200000", "--no-aot-eager",
         "--inductor-every", "0", *arguments],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "src"), os.environ.get("PYTHONPATH", "")])},
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    summary = completed.stdout[completed.stdout.index("==== graphmend"):]
    # The time taken is the one line that may differ.
    return "\n".join(line for line in summary.splitlines() if "programs run:" not in line)


@pytest.mark.slow
def test_a_run_in_fresh_processes_sums_to_the_run_in_one() -> None:
    in_one = _summary()
    in_fresh_processes = _summary("--fresh-process-every", "2")
    assert "construct coverage" in in_one and "harness crashes: 0" in in_one
    assert in_fresh_processes == in_one


class _ProcessWhoseHarnessCrashes(_ProcessKilledInSomePrograms):
    """A chunk's process that stops after a harness crash in any of ``CRASHING``, the
    crash recorded in the tally, as ``run_programs`` does in a chunk of a run."""

    CRASHING = {12}
    started: list = []

    def __init__(self, command, **kwargs) -> None:
        tally_path = command[command.index("--tally") + 1]
        tally = Tally.load(tally_path)
        self.returncode = 0
        chunk = [int(s) for s in command[command.index("--seeds") + 1].split(",")]
        self.started.append(chunk)
        for seed in chunk:
            tally.last_seed = seed
            if seed in self.CRASHING:
                tally.crashes.append((seed, "harness crash"))
                tally.save(tally_path)
                self.returncode = long_run.CRASHED_PROCESS
                break
            tally.programs += 1
            tally.save(tally_path)


def test_a_harness_crash_ends_its_chunks_process_and_the_rest_runs_in_a_new_one(monkeypatch) -> None:
    """Seed 230025: torch's state broken by one program made each later program of its
    process fail in the harness. The crash is counted once; the next seed starts anew."""
    monkeypatch.setattr(long_run.subprocess, "Popen", _ProcessWhoseHarnessCrashes)
    _ProcessWhoseHarnessCrashes.started.clear()
    options = long_run.argparse.Namespace(
        fresh_process_every=4, time_limit=0, tally=None, programs=7, start=10, seeds=None, shard="0/1",
        chunk_of_a_run=False, inductor_every=25,
    )
    tally = long_run.run_in_fresh_processes(options, [], list(range(10, 17)), stop_asked=[])
    assert [seed for seed, _ in tally.crashes] == [12]
    assert tally.programs == 6 and tally.last_seed == 16
    assert _ProcessWhoseHarnessCrashes.started == [[10, 11, 12, 13], [13, 14, 15, 16]]


def test_a_chunk_stops_at_its_first_harness_crash(monkeypatch) -> None:
    monkeypatch.setattr(long_run, "generate", lambda seed, **kwargs: long_run.argparse.Namespace(seed=seed, features={}))

    def compare(program, modes, **comparison):
        raise RuntimeError("torch's state is broken")

    monkeypatch.setattr(long_run, "compare", compare)
    options = long_run.argparse.Namespace(
        findings=None, time_limit=0, tally=None, chunk_of_a_run=True, no_aot_eager=False, inductor_every=0,
        no_counts=False, no_tracebacks=False, no_compiled_eager=False,
        **dict.fromkeys(
            (
                "without_positions", "without_item_checks", "without_finally_reads", "without_layouts",
                "without_merges", "without_blocks", "without_fusions", "without_warm", "without_shared_inputs",
                "without_threads", "without_handlers", "without_grad_modes", "without_attribute_code",
                "with_tracked_inputs", "without_global_rebinds", "without_transposed_inputs",
                "without_dynamic_compiles", "without_helper_branches", "without_failing_outputs",
                "without_between_calls", "without_programs", "without_module_tensors", "without_later_kinds",
            ),
            False,
        ),
    )
    tally = Tally()
    assert long_run.run_programs(options, [20, 21, 22], tally, stop_asked=[]) is True
    assert [seed for seed, _ in tally.crashes] == [20] and tally.last_seed == 20
    options.chunk_of_a_run = False
    tally = Tally()
    assert long_run.run_programs(options, [20, 21], tally, stop_asked=[]) is False
    assert [seed for seed, _ in tally.crashes] == [20, 21]
