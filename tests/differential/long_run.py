"""The long differential fuzzing run: many grammar programs, every backend, minimised findings.

    PYTHONPATH=src python tests/differential/long_run.py --programs 5000 --inductor-every 25 \\
        --findings /tmp/fuzz_findings.md --time-limit 3600

On N cores, run N of these with ``--shard 0/N`` ... ``--shard N-1/N`` (and a findings
file each); each prints its own summary. ``kill -USR1`` stops one after the program it
is running, with its summary.

Each program (``grammar.generate(seed)``) runs original vs mended eagerly, compiled with
the ``eager`` and ``aot_eager`` backends, and, on every ``--inductor-every``-th program,
with ``inductor``. Each behaviour difference is put in a class (mode, observable part,
and a coarse shape of the difference); the first ``--minimise-per-class`` of each class
are minimised to a reproducer, whose mended text names the rules involved. The summary
gives programs run per mode, the classes with their counts and reproducers, the
differences that TorchDynamo makes on its own (original compiled differs the same way),
and how often each construct was generated.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import signal
import sys
import time
import traceback
from collections import Counter

if __package__ in (None, ""):  # run as a script: make ``tests.differential`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    __package__ = "tests.differential"  # noqa: A001

from graphmend.rewrite.pipeline import mend_module_source  # noqa: E402

from .grammar import generate  # noqa: E402
from .minimise import minimise, rules_involved  # noqa: E402
from .observe import Difference, compare, difference_class  # noqa: E402


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=300)
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seeds", help="comma-separated seeds to run instead of a range (e.g. those that differed)")
    parser.add_argument("--inductor-every", type=int, default=25, help="0: never")
    parser.add_argument("--no-aot-eager", action="store_true")
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
        "--without-blocks", action="store_true",
        help="draw programs as the grammar did before compile-state tests and with blocks that swallow",
    )
    parser.add_argument(
        "--without-item-checks", action="store_true",
        help="draw programs as the grammar did before checks of .item() counts (the seeds of earlier runs)",
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
    options = parser.parse_args(argv)

    # TorchDynamo logs each failed fake-tensor call with a traceback; the program's own
    # errors are what we compare, not that log.
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    logging.getLogger("torch._dynamo").setLevel(logging.CRITICAL)
    skip_guard_latency_measurement()

    stop_asked = []
    # `kill -USR1 PID`: finish the program running, then print the summary (a run whose
    # end the session cannot wait for still reports its coverage).
    signal.signal(signal.SIGUSR1, lambda signum, frame: stop_asked.append(signum))
    started = time.monotonic()
    runs = Counter()
    classes: dict[str, list] = {}
    torch_own = Counter()
    checks_made_eagerly = Counter()
    draws_as_eagerly = Counter()
    numeric = Counter()
    traced_op_failures = Counter()
    compile_state_answers = Counter()
    crashes = []
    coverage = Counter()
    programs = 0
    findings = 0
    if options.findings and os.path.exists(options.findings):
        with open(options.findings) as existing:  # number on from earlier runs' entries
            findings = sum(line.startswith("## L") for line in existing)
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
    for seed in seeds:
        if stop_asked or (options.time_limit and time.monotonic() - started > options.time_limit):
            break
        program = generate(
            seed, positions=not options.without_positions, item_checks=not options.without_item_checks,
            finally_reads=not options.without_finally_reads, layouts=not options.without_layouts,
            merges=not options.without_merges, blocks=not options.without_blocks,
            fusions=not options.without_fusions, warm=not options.without_warm,
            shared_inputs=not options.without_shared_inputs, threads=not options.without_threads,
            handlers=not options.without_handlers, grad_modes=not options.without_grad_modes,
        )
        modes = ["eager", "compiled:eager"]
        if not options.no_aot_eager:
            modes.append("compiled:aot_eager")
        # Output between fused kernels shows its class only under inductor.
        fused = any(feature.startswith("fused-output") for feature in program.features)
        if (options.inductor_every and seed % options.inductor_every == 0) or fused:
            modes.append("compiled:inductor")
        try:
            report = compare(program, modes=tuple(modes))
        except Exception:  # noqa: BLE001 - a harness failure is reported, not fatal
            crashes.append((seed, traceback.format_exc(limit=3)))
            continue
        programs += 1
        coverage.update(set(program.features))
        runs.update(report.modes_run)
        for difference in report.torch_own:
            torch_own[difference_class(difference)] += 1
        for difference in report.checks_made_eagerly:
            checks_made_eagerly[difference_class(difference)] += 1
        for difference in report.draws_as_eagerly:
            draws_as_eagerly[difference_class(difference)] += 1
        for difference in report.numeric:
            numeric[difference.mode] += 1
        for difference in report.traced_op_failures:
            traced_op_failures[difference_class(difference)] += 1
        for difference in report.compile_state_answers:
            compile_state_answers[difference_class(difference)] += 1
        minimised_here = set()
        for difference in report.differences:
            klass = difference_class(difference)
            if difference.exposed:
                klass = "exposed TorchDynamo trace-time error: " + klass
            entries = classes.setdefault(klass, [])
            reproducer = None
            limit = 1 if difference.exposed else options.minimise_per_class
            wanted = sum(1 for e in entries if e[2] is not None) < limit
            if wanted and klass not in minimised_here:
                minimised_here.add(klass)
                reproducer = minimise(program, difference, options.minimise_budget)
                findings += 1
                if options.findings:
                    append_finding(options.findings, findings, klass, program, difference, reproducer)
            entries.append((seed, difference.mode, reproducer))
        print(
            f"[{time.monotonic() - started:7.0f}s] seed {seed}: "
            + (", ".join(difference_class(d) + f" [{d.mode}]" for d in report.differences) or "same"),
            flush=True,
        )

    elapsed = time.monotonic() - started
    print("\n==== graphmend differential fuzzing: summary ====")
    asked = options.seeds or f"{options.start}..{options.start + options.programs - 1}"
    print(f"seeds {asked} (shard {options.shard}); programs run: {programs} in {elapsed:.0f} s"
          + (" (stopped by SIGUSR1)" if stop_asked else ""))
    for mode in ("eager", "compiled:eager", "compiled:aot_eager", "compiled:inductor"):
        print(f"  {mode:20s} {runs[mode]} programs")
    total = sum(len(v) for v in classes.values())
    print(f"behaviour differences: {total} in {len({s for v in classes.values() for s, _, _ in v})} programs, {len(classes)} classes")
    for klass, entries in sorted(classes.items(), key=lambda item: -len(item[1])):
        seeds = sorted({seed for seed, _, _ in entries})
        print(f"  {len(entries):5d}  {klass}  (seeds {', '.join(map(str, seeds[:8]))}{' ...' if len(seeds) > 8 else ''})")
        for seed, mode, reproducer in entries:
            if reproducer is not None:
                lines = reproducer.source.count("\n")
                print(f"         reproducer from seed {seed} [{mode}], {lines} lines, rules: "
                      f"{', '.join(rules_involved(mended_text(reproducer.source))) or '-'}")
    print(
        "as the original compiled with its check helper made outside TorchDynamo "
        f"(what graphmend does with a check call it keeps): {sum(checks_made_eagerly.values())}"
    )
    for klass, count in checks_made_eagerly.most_common():
        print(f"  {count:5d}  {klass}")
    print(
        "as the original compiled with graphmend's random-draw policy (eager's numbers, the "
        f"backend's rounding): {sum(draws_as_eagerly.values())}"
    )
    for klass, count in draws_as_eagerly.most_common():
        print(f"  {count:5d}  {klass}")
    print(f"TorchDynamo's own differences (original compiled differs the same way): {sum(torch_own.values())}")
    for klass, count in torch_own.most_common():
        print(f"  {count:5d}  {klass}")
    print(
        "TorchDynamo's trace-time error for the op eager fails at, where torch's compiler failed on "
        f"the original first (no original run to compare): {sum(traced_op_failures.values())}"
    )
    for klass, count in traced_op_failures.most_common():
        print(f"  {count:5d}  {klass}")
    print(
        "the program's own compile-state test answering as traced where the original compiled ran "
        f"that code eagerly: {sum(compile_state_answers.values())}"
    )
    for klass, count in compile_state_answers.most_common():
        print(f"  {count:5d}  {klass}")
    print(f"inductor float-bit-only differences (allclose): {sum(numeric.values())}")
    print(f"harness crashes: {len(crashes)}")
    for seed, text in crashes[:5]:
        print(f"  seed {seed}: {text.strip().splitlines()[-1]}")
    print("construct coverage (programs containing each construct):")
    for feature, count in sorted(coverage.items()):
        print(f"  {feature:30s} {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
