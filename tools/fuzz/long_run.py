"""The long differential fuzzing run: many grammar programs, every backend, minimised findings.

    PYTHONPATH=src python tools/fuzz/long_run.py --programs 5000 --inductor-every 25 \\
        --findings /tmp/fuzz_findings.md --time-limit 3600

On N cores, run N of these with ``--shard 0/N`` ... ``--shard N-1/N`` (and a findings
file each); each prints its own summary. ``kill -USR1`` stops one after the program it
is running, with its summary. ``--fresh-process-every 250`` runs the seeds 250 at a time,
each chunk in a new process adding to one tally (a process's memory grows by megabytes a
program and it slows with it); a process that dies counts its program as a crash.

Each program (``grammar.generate(seed, programs=True)``) runs original vs mended eagerly,
compiled with the ``eager`` and ``aot_eager`` backends, and, on every ``--inductor-every``-th
program, with ``inductor``; the frames of tracebacks are compared too, and in each compiled
mode a function the mended program compiles into more graphs or breaks more often in is a
finding (``compiled counts: more graphs``/``breaks``, not minimised). Each behaviour difference is put in a class (mode, observable part,
and a coarse shape of the difference); the first ``--minimise-per-class`` of each class
are minimised to a reproducer, whose mended text names the rules involved. The summary
gives programs run per mode, the classes with their counts and reproducers, the
differences that TorchDynamo makes on its own (original compiled differs the same way),
and how often each construct was generated.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter

if __package__ in (None, ""):  # run as a script: make ``tools.fuzz`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    __package__ = "tools.fuzz"

from graphmend.rewrite.pipeline import mend_module_source

from .grammar import generate
from .minimise import minimise, rules_involved
from .observe import Difference, compare, difference_class


def mended_text(source: str) -> str:
    return mend_module_source(source, filename="/graphmend-fuzz/reproducer.py", module_name="reproducer", scope="all").source


def append_finding(path: str, number: int, klass: str, program, difference: Difference, reproducer) -> None:
    mended = mended_text(reproducer.source)
    rules = rules_involved(mended) or ["none (module unchanged?)"]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M UTC")
    with open(path, "a") as out:
        out.write(
            f"\n## L{number}: {klass} (rules in the mended reproducer: {', '.join(rules)})\n"
            f"- found {stamp} by the long run: seed {program.seed}, mode {difference.mode}, "
            f"input {difference.input_name!r} (call {difference.call}), grad={program.requires_grad}, "
            f"compiled from: {program.compile_site}\n"
            f"- expected (original, eager): `{_clip(difference.expected)}`\n"
            f"- observed (mended, {difference.mode}): `{_clip(difference.actual)}`\n"
            f"- reproducer (`f(x, y, box, items, table)`, inputs from observe.input_values):\n"
            f"```python\n{reproducer.source}```\n"
            f"- mended text:\n```python\n{mended}```\n"
        )


def _clip(value, limit: int = 600) -> str:
    text = repr(value).replace("`", "'")
    return text if len(text) <= limit else text[:limit] + "..."


def skip_guard_latency_measurement() -> None:
    """TorchDynamo times each new guard set once for its compile metrics, flushing the
    CPU caches first: about a sixth of a program's run here. The guards themselves are
    still built and checked; only the timing is skipped."""
    import torch._dynamo.guards as guards

    guards.profile_guard_manager = lambda *args, **kwargs: 0.0


@dataclasses.dataclass
class Tally:
    """What a run has seen so far; saved as JSON so that a run split over fresh processes
    (``--fresh-process-every``) adds up to one summary."""

    programs: int = 0
    elapsed: float = 0.0
    last_seed: int | None = None
    runs: Counter = dataclasses.field(default_factory=Counter)
    # class -> [seed, mode, reproducer (its line count and rules) or None]
    classes: dict = dataclasses.field(default_factory=dict)
    torch_own: Counter = dataclasses.field(default_factory=Counter)
    checks_made_eagerly: Counter = dataclasses.field(default_factory=Counter)
    draws_as_eagerly: Counter = dataclasses.field(default_factory=Counter)
    assembly_as_for_rewritten_code: Counter = dataclasses.field(default_factory=Counter)
    numeric: Counter = dataclasses.field(default_factory=Counter)
    traced_op_failures: Counter = dataclasses.field(default_factory=Counter)
    compile_state_answers: Counter = dataclasses.field(default_factory=Counter)
    crashes: list = dataclasses.field(default_factory=list)
    coverage: Counter = dataclasses.field(default_factory=Counter)

    @classmethod
    def load(cls, path: str) -> Tally:
        if not os.path.exists(path):
            return cls()
        with open(path) as saved:
            fields = json.load(saved)
        counters = {f.name for f in dataclasses.fields(cls) if f.type == "Counter"}
        return cls(**{k: Counter(v) if k in counters else v for k, v in fields.items()})

    def save(self, path: str) -> None:
        # Atomic: a process killed while saving leaves the previous tally whole.
        directory = os.path.dirname(os.path.abspath(path))
        with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp") as out:
            # Not dataclasses.asdict: it rebuilds a Counter from its (key, count) pairs.
            json.dump({field.name: getattr(self, field.name) for field in dataclasses.fields(self)}, out)
        os.replace(out.name, path)


# The exit status of a chunk's process that stopped after a harness crash: torch's state
# in that process may be broken, and the rest of its chunk runs in a new one (seed 230025:
# inductor failing on a graph made under inference mode left the Python dispatcher's
# state set, and each of the chunk's 237 later programs failed in the harness).
CRASHED_PROCESS = 3


def run_programs(options, seeds, tally: Tally, stop_asked: list) -> bool:
    """Run each seed; True when one crashed the harness in a chunk of a run (which then
    stops there)."""
    started = time.monotonic()
    findings = 0
    if options.findings and os.path.exists(options.findings):
        with open(options.findings) as existing:  # number on from earlier runs' entries
            findings = sum(line.startswith("## L") for line in existing)
    for seed in seeds:
        if stop_asked or (options.time_limit and time.monotonic() - started > options.time_limit):
            break
        program_started = time.monotonic()
        program = generate(
            seed, positions=not options.without_positions, item_checks=not options.without_item_checks,
            finally_reads=not options.without_finally_reads, layouts=not options.without_layouts,
            merges=not options.without_merges, blocks=not options.without_blocks,
            fusions=not options.without_fusions, warm=not options.without_warm,
            shared_inputs=not options.without_shared_inputs, threads=not options.without_threads,
            handlers=not options.without_handlers, grad_modes=not options.without_grad_modes,
            attribute_code=not options.without_attribute_code, tracked_inputs=options.with_tracked_inputs,
            global_rebinds=not options.without_global_rebinds,
            transposed_inputs=not options.without_transposed_inputs,
            dynamic_compiles=not options.without_dynamic_compiles,
            helper_branches=not options.without_helper_branches,
            failing_outputs=not options.without_failing_outputs,
            between_calls=not options.without_between_calls,
            programs=not options.without_programs,
            drawn_ranges=not options.without_programs,
            module_tensors=not options.without_module_tensors,
            later_kinds=not options.without_programs and not options.without_later_kinds,
        )
        modes = ["eager"] + ([] if options.no_compiled_eager else ["compiled:eager"])
        if not options.no_aot_eager:
            modes.append("compiled:aot_eager")
        # Output between fused kernels shows its class only under inductor.
        fused = any(feature.startswith("fused-output") for feature in program.features)
        if (options.inductor_every and seed % options.inductor_every == 0) or fused:
            modes.append("compiled:inductor")
        try:
            report = compare(
                program, modes=tuple(modes), counts=not options.no_counts, tracebacks=not options.no_tracebacks,
            )
        except Exception:  # noqa: BLE001 - a harness failure is reported, not fatal
            tally.crashes.append((seed, traceback.format_exc(limit=3)))
            report = None
        if report is not None:
            findings = _add_report(options, tally, program, report, findings)
        tally.last_seed = seed
        tally.elapsed += time.monotonic() - program_started
        if options.tally:  # after every program: a process that dies loses none of its work
            tally.save(options.tally)
        if report is None and options.chunk_of_a_run:
            return True
    return False


def _add_report(options, tally: Tally, program, report, findings: int) -> int:
    tally.programs += 1
    tally.coverage.update(set(program.features))
    tally.runs.update(report.modes_run)
    for difference in report.torch_own:
        tally.torch_own[difference_class(difference)] += 1
    for difference in report.checks_made_eagerly:
        tally.checks_made_eagerly[difference_class(difference)] += 1
    for difference in report.draws_as_eagerly:
        tally.draws_as_eagerly[difference_class(difference)] += 1
    for difference in report.assembly_as_for_rewritten_code:
        tally.assembly_as_for_rewritten_code[difference_class(difference)] += 1
    for difference in report.numeric:
        tally.numeric[difference.mode] += 1
    for difference in report.traced_op_failures:
        tally.traced_op_failures[difference_class(difference)] += 1
    for difference in report.compile_state_answers:
        tally.compile_state_answers[difference_class(difference)] += 1
    minimised_here = set()
    for difference in report.differences:
        klass = difference_class(difference)
        if difference.exposed:
            klass = "exposed TorchDynamo trace-time error: " + klass
        entries = tally.classes.setdefault(klass, [])
        found = None
        limit = 1 if difference.exposed else options.minimise_per_class
        wanted = sum(1 for entry in entries if entry[2] is not None) < limit
        if wanted and klass not in minimised_here:
            minimised_here.add(klass)
            reproducer = minimise(program, difference, options.minimise_budget, tracebacks=not options.no_tracebacks)
            findings += 1
            if options.findings:
                append_finding(options.findings, findings, klass, program, difference, reproducer)
            found = {
                "lines": reproducer.source.count("\n"),
                "rules": ", ".join(rules_involved(mended_text(reproducer.source))) or "-",
            }
        entries.append((program.seed, difference.mode, found))
    for worse in report.worse:
        # Not minimised: the minimiser keeps what shows a behaviour difference.
        tally.classes.setdefault(worse.klass, []).append((program.seed, worse.mode, None))
    print(
        f"[{tally.elapsed:7.0f}s] seed {program.seed}: "
        + (", ".join([difference_class(d) + f" [{d.mode}]" for d in report.differences]
                     + [w.describe() for w in report.worse]) or "same"),
        flush=True,
    )
    return findings


# Options a parent run decides for each of its chunks; every other option is passed on as given.
_DECIDED_PER_CHUNK = {"programs", "start", "seeds", "shard", "tally", "time_limit", "fresh_process_every", "chunk_of_a_run"}


def run_in_fresh_processes(options, argv, seeds, stop_asked: list) -> Tally:
    """Run the seeds in chunks, each in a process of its own (the harness's memory grows by
    megabytes a program and the run slows with it); the chunks share one tally file."""
    passed_on = []
    for name, value in vars(options).items():
        if name in _DECIDED_PER_CHUNK or value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        passed_on += [flag] if value is True else [flag, str(value)]
    with tempfile.TemporaryDirectory(prefix="graphmend-long-run-") as scratch:
        tally_path = options.tally or os.path.join(scratch, "tally.json")
        started = time.monotonic()
        child = []

        def stop(signum, frame):
            stop_asked.append(signum)
            if child:
                child[0].send_signal(signal.SIGUSR1)

        signal.signal(signal.SIGUSR1, stop)
        pending = list(seeds)
        while pending and not stop_asked:
            left = options.time_limit - (time.monotonic() - started) if options.time_limit else None
            if left is not None and left <= 0:
                break
            chunk, pending = pending[: options.fresh_process_every], pending[options.fresh_process_every:]
            command = [sys.executable, os.path.abspath(__file__), *passed_on,
                       "--seeds", ",".join(map(str, chunk)), "--tally", tally_path, "--chunk-of-a-run"]
            if left is not None:
                command += ["--time-limit", str(left)]
            before = Tally.load(tally_path).last_seed
            child[:] = [subprocess.Popen(command)]
            returncode = child[0].wait()
            child.clear()
            if returncode == CRASHED_PROCESS:  # the crash is in the tally; the rest runs anew
                tally = Tally.load(tally_path)
                pending = chunk[chunk.index(tally.last_seed) + 1:] + pending
                continue
            if returncode != 0:
                # The process died in a program (killed, out of memory, a crash in native
                # code): that program is a crash; the rest of its chunk runs in a new process.
                tally = Tally.load(tally_path)
                done = chunk.index(tally.last_seed) + 1 if tally.last_seed != before and tally.last_seed in chunk else 0
                if done < len(chunk):
                    tally.crashes.append((chunk[done], f"the run's process exited with {returncode}"))
                    tally.last_seed = chunk[done]
                    tally.save(tally_path)
                    pending = chunk[done + 1:] + pending
        return Tally.load(tally_path)


def print_summary(tally: Tally, asked: str, stopped: bool) -> None:
    print("\n==== graphmend differential fuzzing: summary ====")
    print(f"{asked}; programs run: {tally.programs} in {tally.elapsed:.0f} s"
          + (" (stopped by SIGUSR1)" if stopped else ""))
    for mode in ("eager", "compiled:eager", "compiled:aot_eager", "compiled:inductor"):
        print(f"  {mode:20s} {tally.runs[mode]} programs")
    classes = tally.classes
    total = sum(len(v) for v in classes.values())
    print(f"behaviour differences: {total} in {len({s for v in classes.values() for s, _, _ in v})} programs, {len(classes)} classes")
    for klass, entries in sorted(classes.items(), key=lambda item: -len(item[1])):
        seeds = sorted({seed for seed, _, _ in entries})
        print(f"  {len(entries):5d}  {klass}  (seeds {', '.join(map(str, seeds[:8]))}{' ...' if len(seeds) > 8 else ''})")
        for seed, mode, found in entries:
            if found is not None:
                print(f"         reproducer from seed {seed} [{mode}], {found['lines']} lines, rules: {found['rules']}")
    _print_counter(
        "as the original compiled with its check helper made outside TorchDynamo "
        "(what graphmend does with a check call it keeps)", tally.checks_made_eagerly,
    )
    _print_counter(
        "as the original compiled with graphmend's random-draw policy (eager's numbers, the "
        "backend's rounding)", tally.draws_as_eagerly,
    )
    _print_counter("TorchDynamo's own differences (original compiled differs the same way)", tally.torch_own)
    _print_counter(
        "TorchDynamo's trace-time error for the op eager fails at, where torch's compiler failed on "
        "the original first, or the original compiled traced it too when called on that input alone "
        "(it had given up the op's frame on an earlier call)", tally.traced_op_failures,
    )
    _print_counter(
        "the program's own compile-state tests answering as traced where the original compiled ran "
        "that code eagerly (all of them, or some, traced at least where the original compiled traced)",
        tally.compile_state_answers,
    )
    _print_counter(
        "as the original compiled with TorchDynamo's assembly mended as for graphmend's rewritten "
        "frames (the original failed on its assembly bug)", tally.assembly_as_for_rewritten_code,
    )
    print(f"inductor float-bit-only differences (allclose): {sum(tally.numeric.values())}")
    print(f"harness crashes: {len(tally.crashes)}")
    for seed, text in tally.crashes[:5]:
        print(f"  seed {seed}: {text.strip().splitlines()[-1]}")
    print("construct coverage (programs containing each construct):")
    for feature, count in sorted(tally.coverage.items()):
        print(f"  {feature:30s} {count}")


def _print_counter(title: str, counter: Counter) -> None:
    print(f"{title}: {sum(counter.values())}")
    for klass, count in counter.most_common():
        print(f"  {count:5d}  {klass}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=300)
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seeds", help="comma-separated seeds to run instead of a range (e.g. those that differed)")
    parser.add_argument("--inductor-every", type=int, default=25, help="0: never")
    parser.add_argument("--no-aot-eager", action="store_true")
    parser.add_argument("--no-compiled-eager", action="store_true", help="no run compiled with the eager backend")
    parser.add_argument(
        "--without-positions", action="store_true",
        help="programs as the grammar drew them before its positions construct (earlier runs' seeds)",
    )
    parser.add_argument(
        "--without-finally-reads", action="store_true",
        help="draw programs as the grammar did before finally blocks read the try body's names",
    )
    parser.add_argument(
        "--without-layouts", action="store_true",
        help="draw programs as the grammar did before 2-D positions and batch norms of transposed tensors",
    )
    parser.add_argument(
        "--without-merges", action="store_true",
        help="draw programs as the grammar did before branches on whether positions are empty",
    )
    parser.add_argument(
        "--without-fusions", action="store_true",
        help="draw programs as the grammar did before output between two fused layer norms",
    )
    parser.add_argument(
        "--without-warm", action="store_true",
        help="draw programs as the grammar did before helpers compiled alone first",
    )
    parser.add_argument(
        "--without-shared-inputs", action="store_true",
        help="draw programs as the grammar did before arguments that share memory",
    )
    parser.add_argument(
        "--without-threads", action="store_true",
        help="draw programs as the grammar did before calls from threads of their own",
    )
    parser.add_argument(
        "--without-handlers", action="store_true",
        help="draw programs as the grammar did before code run while an exception is in flight",
    )
    parser.add_argument(
        "--without-grad-modes", action="store_true",
        help="draw programs as the grammar did before statements under a grad mode of their own",
    )
    parser.add_argument(
        "--without-attribute-code", action="store_true",
        help="draw programs as the grammar did before attribute access that runs the program's code",
    )
    parser.add_argument(
        "--with-tracked-inputs", action="store_true",
        help="also draw arguments of a tensor subclass that logs its operations (see grammar.generate)",
    )
    parser.add_argument(
        "--without-global-rebinds", action="store_true",
        help="draw programs as the grammar did before module globals rebound by f (the seeds of runs before it)",
    )
    parser.add_argument(
        "--without-dynamic-compiles", action="store_true",
        help="draw programs as the grammar did before programs compiled with dynamic=True (the seeds of runs before it)",
    )
    parser.add_argument(
        "--without-helper-branches", action="store_true",
        help="draw programs as the grammar did before positions handed to a helper that branches on their count",
    )
    parser.add_argument(
        "--without-failing-outputs", action="store_true",
        help="draw programs as the grammar did before output calls whose own arguments make them fail",
    )
    parser.add_argument(
        "--without-between-calls", action="store_true",
        help="draw programs as the grammar did before output settings changed between calls",
    )
    parser.add_argument(
        "--without-transposed-inputs", action="store_true",
        help="draw programs as the grammar did before arguments laid out transposed (the seeds of runs before it)",
    )
    parser.add_argument(
        "--without-blocks", action="store_true",
        help="draw programs as the grammar did before compile-state tests and with blocks that swallow",
    )
    parser.add_argument(
        "--without-item-checks", action="store_true",
        help="draw programs as the grammar did before checks of .item() counts (the seeds of earlier runs)",
    )
    parser.add_argument(
        "--without-programs", action="store_true",
        help="draw programs as the grammar did before the program constructs (modules, hooks, experts, ...)",
    )
    parser.add_argument(
        "--without-module-tensors", action="store_true",
        help="draw the program constructs as the grammar did before modules keeping fixed values as tensors "
        "and attributes written back as their own conversion (the seeds of runs before them)",
    )
    parser.add_argument(
        "--without-later-kinds", action="store_true",
        help="draw the program constructs as the grammar did before given-up loops and modules met at two "
        "sizes (the seeds of runs up to 810225)",
    )
    parser.add_argument(
        "--no-counts", action="store_true",
        help="do not compare graph and break counts (a mended function with more of either is a finding)",
    )
    parser.add_argument(
        "--no-tracebacks", action="store_true",
        help="do not compare the frames of tracebacks (the original then compiles through graphmend's wrapper)",
    )
    parser.add_argument("--minimise-per-class", type=int, default=2)
    parser.add_argument("--minimise-budget", type=float, default=120.0, help="seconds per reproducer")
    parser.add_argument("--findings", help="append each minimised finding to this markdown file")
    parser.add_argument(
        "--time-limit", type=float, default=0,
        help="stop starting programs after this many seconds (SIGUSR1 also stops it: the summary follows)",
    )
    parser.add_argument(
        "--shard", default="0/1",
        help="K/N: run only every N-th seed from the K-th (run N processes with K = 0..N-1 to use N cores)",
    )
    parser.add_argument(
        "--fresh-process-every", type=int, default=0, metavar="N",
        help="run the seeds N at a time, each N in a process of its own (one summary for all)",
    )
    parser.add_argument(
        "--tally", help="add to the tally saved in this JSON file (if any) and save it after each program",
    )
    parser.add_argument("--chunk-of-a-run", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)

    # TorchDynamo logs each failed fake-tensor call with a traceback; the program's own
    # errors are what we compare, not that log.
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    logging.getLogger("torch._dynamo").setLevel(logging.CRITICAL)
    skip_guard_latency_measurement()

    stop_asked = []
    # `kill -USR1 PID`: finish the program running, then print the summary (a run whose
    # end its caller cannot wait for still reports its coverage).
    signal.signal(signal.SIGUSR1, lambda signum, frame: stop_asked.append(signum))
    seeds = (
        [int(seed) for seed in options.seeds.split(",")] if options.seeds
        else range(options.start, options.start + options.programs)
    )
    try:
        shard, shards = (int(part) for part in options.shard.split("/"))
    except ValueError:
        parser.error(f"--shard takes K/N (e.g. 0/2), not {options.shard}")
    if not 0 <= shard < shards:
        # 2/2 would silently take every other seed from the third on (one skipped).
        parser.error(f"--shard K/N needs 0 <= K < N (numbered from 0), not {options.shard}")
    seeds = list(seeds)[shard::shards]
    if options.fresh_process_every < 0:
        parser.error(f"--fresh-process-every takes a number of programs (0: one process), not {options.fresh_process_every}")
    asked = options.seeds or f"{options.start}..{options.start + options.programs - 1}"
    if options.fresh_process_every:
        tally = run_in_fresh_processes(options, argv if argv is not None else sys.argv[1:], seeds, stop_asked)
    else:
        tally = Tally.load(options.tally) if options.tally else Tally()
        crashed = run_programs(options, seeds, tally, stop_asked)
        if options.tally:
            tally.save(options.tally)
        if crashed:
            return CRASHED_PROCESS
    if not options.chunk_of_a_run:
        print_summary(tally, f"seeds {asked} (shard {options.shard})", stopped=bool(stop_asked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
