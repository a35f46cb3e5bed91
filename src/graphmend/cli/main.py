"""``graphmend``: the command line.

    graphmend run      run a script (or -m module) with its graph breaks mended
    graphmend check    list graph-break candidates and what graphmend does about each
    graphmend fix      rewrite files in place (or show the diff)
    graphmend explain  run a script with and without graphmend and explain each break
    graphmend rule     what a break category means and what graphmend does about it
    graphmend bench    benchmark harness (run from a checkout: benchmarks/)
    graphmend census   every transformers model, original against mended (tools/census/)

Each command parses its own arguments; this module only picks the command.
"""

from __future__ import annotations

import os
import sys

from graphmend import __version__

# ``graphmend.cli.config``'s; kept here so that ``--help`` loads no rule (a test checks both agree).
USAGE_ERROR_EXIT_CODE = 2

PROGRAM = "graphmend"
COMMANDS = {
    "run": "run a Python script (or -m module) with your code's graph breaks mended",
    "check": "list graph-break candidates and what graphmend does about each",
    "fix": "rewrite files so their graph breaks are mended (shows a diff by default)",
    "explain": "run a script with and without graphmend and explain each graph break",
    "rule": "explain a graph-break category (DC, LC, VG, ...) and what graphmend does about it",
    "bench": "run the benchmark suite (from a checkout of graphmend's repository)",
    "census": "measure graph breaks of every transformers model, original against mended",
}


def _help() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        f"usage: {PROGRAM} [--version] COMMAND [ARGS...]",
        "",
        "Remove TorchDynamo graph breaks by rewriting Python source.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {summary}" for name, summary in COMMANDS.items()),
        "",
        f"Run '{PROGRAM} COMMAND --help' for a command's options.",
    ]
    return "\n".join(lines)


def _bench(argv: list[str]) -> int:
    from graphmend.cli.bench_harness import NOT_FOUND, find_bench_command

    bench_command = find_bench_command()
    if bench_command is None:
        print(NOT_FOUND, file=sys.stderr)
        return USAGE_ERROR_EXIT_CODE
    return bench_command(argv)


def _census(argv: list[str]) -> int:
    from graphmend.cli.census import census_command

    return census_command(argv)


def _run(argv: list[str]) -> int:
    from graphmend.cli.run import run_command

    return run_command(argv)


def _check(argv: list[str]) -> int:
    from graphmend.cli.check import check_command

    return check_command(argv)


def _fix(argv: list[str]) -> int:
    from graphmend.cli.fix import fix_command

    return fix_command(argv)


def _rule(argv: list[str]) -> int:
    from graphmend.cli.rule import rule_command

    return rule_command(argv)


def _explain(argv: list[str]) -> int:
    from graphmend.cli.explain import explain_command

    return explain_command(argv)


# Imported on use: ``graphmend check`` should not pay for what ``run`` imports.
_HANDLERS = {
    "run": _run, "check": _check, "fix": _fix, "explain": _explain, "rule": _rule, "bench": _bench,
    "census": _census,
}


def main(argv: list[str] | None = None) -> int:
    """Run the ``graphmend`` command line with ``argv`` (default ``sys.argv[1:]``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(_help(), file=sys.stderr)
        return USAGE_ERROR_EXIT_CODE
    command, rest = argv[0], argv[1:]
    if command in ("-h", "--help"):
        print(_help())
        return 0
    if command in ("-V", "--version"):
        print(f"{PROGRAM} {__version__}")
        return 0
    handler = _HANDLERS.get(command)
    if handler is None:
        choices = ", ".join(COMMANDS)
        print(
            f"{PROGRAM}: error: unknown command {command!r}; choose from {choices}", file=sys.stderr
        )
        return USAGE_ERROR_EXIT_CODE
    try:
        return handler(rest)
    except KeyboardInterrupt:
        print(f"{PROGRAM} {command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into ``head`` and the like: stop quietly, as cat does.
        _silence_stdout()
        return 1


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
