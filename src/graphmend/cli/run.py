"""``graphmend run``: run a script as ``python script.py`` would, with graph breaks mended.

    graphmend run [--package NAME]... [--rules trap,where,defer] [--no-cache] script.py [args...]

The script itself is rewritten with ``scope="entry"``; each ``--package`` is rewritten
on import (``scope="all"``) through ``graphmend.hook``. The script runs as
``__main__`` with ``sys.argv == [script.py, *args]`` and its folder as
``sys.path[0]``. Its exit status is ours: ``SystemExit`` passes its code through,
an uncaught exception prints its traceback (through ``sys.excepthook``) and gives 1.
Bad command-line input prints one line on stderr and gives 2.
"""

from __future__ import annotations

import argparse
import builtins
import importlib.machinery
import os
import sys
import traceback
import types

from graphmend.cli import config
from graphmend.cli.config import ConfigError, OneLineErrorParser
from graphmend.hook import CACHE_DIR_ENVIRONMENT_VARIABLE, install
from graphmend.hook.finder import check_package_name
from graphmend.hook.loader import HookStats, MendOptions, mended_code, normalize_rules
from graphmend.rewrite.pipeline import ALL_RULES

PROGRAM = "graphmend run"
USAGE_ERROR_EXIT_CODE = 2
UNCAUGHT_EXCEPTION_EXIT_CODE = 1
KEYBOARD_INTERRUPT_EXIT_CODE = 130


_OPTIONS_WITH_A_SEPARATE_VALUE = frozenset({"--package", "-p", "--rules"})


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog=PROGRAM,
        allow_abbrev=False,  # split_script_arguments knows only the full option names
        description="Run a Python script with its TorchDynamo graph breaks mended.",
    )
    parser.add_argument(
        "--package",
        "-p",
        action="append",
        default=[],
        metavar="NAME",
        help="also rewrite this package (and its submodules) on import; repeatable, "
        "or comma-separated",
    )
    parser.add_argument(
        "--rules",
        default=",".join(ALL_RULES),
        help=f"comma-separated rules to apply (default: {','.join(ALL_RULES)})",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor write the rewritten-code cache",
    )
    parser.add_argument("script", help="the Python script to run, then its own arguments")
    return parser


def split_script_arguments(argv: list[str]) -> tuple[list[str], list[str]]:
    return config.split_script_arguments(argv, _OPTIONS_WITH_A_SEPARATE_VALUE)


def run_command(argv: list[str]) -> int:
    """Run ``graphmend run`` with ``argv`` (the words after ``run``); return the exit code."""
    try:
        our_arguments, script_arguments = split_script_arguments(list(argv))
        arguments = build_parser().parse_args(our_arguments)
        rules = normalize_rules(arguments.rules, ALL_RULES)
        packages = [
            check_package_name(name.strip())
            for option in arguments.package
            for name in option.split(",")
            if name.strip()
        ]
    except (ConfigError, ValueError) as exc:
        return _usage_error(str(exc))
    except SystemExit as exc:  # --help
        return _exit_code(exc)

    script = arguments.script
    try:
        with open(script, "rb") as script_file:
            source_bytes = script_file.read()
    except OSError as exc:
        return _usage_error(f"can't open file {script!r}: [Errno {exc.errno}] {exc.strerror}")

    path = os.path.abspath(script)
    use_cache = not arguments.no_cache
    options = MendOptions(
        rules=rules,
        scope="entry",
        use_cache=use_cache,
        cache_dir=os.environ.get(CACHE_DIR_ENVIRONMENT_VARIABLE) or None,
    )
    try:
        code = mended_code(source_bytes, path, "__main__", options, HookStats())
    except SyntaxError as exc:  # the script's own error, shown as python shows it
        traceback.print_exception(type(exc), exc, None)
        return UNCAUGHT_EXCEPTION_EXIT_CODE

    handle = install(packages, rules=rules, cache=use_cache) if packages else None
    # The boundary of compiled calls must be in place before the script binds
    # ``torch.compile`` (install() does this too when packages are named).
    import graphmend.runtime  # noqa: F401

    try:
        return _run_as_main(code, script, path, script_arguments)
    finally:
        if handle is not None:
            handle.uninstall()


def _run_as_main(code: types.CodeType, script: str, path: str, script_arguments: list[str]) -> int:
    """Execute ``code`` as ``__main__``, restoring sys.argv, sys.path and sys.modules after."""
    module = types.ModuleType("__main__")
    module.__dict__.update(
        __file__=path,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
        __package__=None,
        __spec__=None,
        __builtins__=builtins,
    )
    saved_argv = sys.argv
    saved_path = list(sys.path)
    saved_main = sys.modules.get("__main__")
    script_directory = os.path.dirname(os.path.realpath(script))
    sys.argv = [script, *script_arguments]
    if sys.path:
        sys.path[0] = script_directory
    else:
        sys.path.append(script_directory)
    sys.modules["__main__"] = module
    try:
        return _execute(code, module)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        else:
            sys.modules.pop("__main__", None)


def _execute(code: types.CodeType, module: types.ModuleType) -> int:
    try:
        exec(code, module.__dict__)  # noqa: S102 - running the user's script is the point
    except SystemExit as exc:
        return _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - reported as python reports it, not raised
        # Start the traceback at the script, as python does, not at this frame. The
        # default excepthook prints exc.__traceback__, so that is what must change.
        if exc.__traceback__ is not None:
            exc.__traceback__ = exc.__traceback__.tb_next
        sys.excepthook(type(exc), exc, exc.__traceback__)
        if isinstance(exc, KeyboardInterrupt):
            return KEYBOARD_INTERRUPT_EXIT_CODE
        return UNCAUGHT_EXCEPTION_EXIT_CODE
    return 0


def _exit_code(exc: SystemExit) -> int:
    """The process exit status python gives for ``raise SystemExit(code)``."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _usage_error(message: str) -> int:
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)
    return USAGE_ERROR_EXIT_CODE


if __name__ == "__main__":
    raise SystemExit(run_command(sys.argv[1:]))
