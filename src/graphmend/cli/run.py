"""``graphmend run``: run a script as ``python script.py`` would, with graph breaks mended.

    graphmend run [--package NAME]... [--rules trap,where,defer] [--no-cache]
                  [--no-user-code] (script.py | -m module) [args...]

With no flags, the user's own code is mended: the script (or the ``-m`` module) and
every module it imports that is not part of the standard library or an installed
distribution, through ``graphmend.hook`` (``scope="all"``: any function may be
compiled, from any module, and every rewrite is exact when not compiling). Each
``--package`` adds an installed package; ``--no-user-code`` mends only the script and
the named packages.

The script runs as ``__main__`` exactly as ``python script.py`` runs it: the same
module attributes (``__name__``, ``__file__``, ``__spec__``, ``__annotations__``,
``__builtins__``, ``__loader__``, ``__cached__``, in the same order), ``sys.argv ==
[script.py, *args]`` and its folder as ``sys.path[0]``. ``-m module`` runs as
``python -m module`` does: ``sys.argv[0]`` is the module's file, ``sys.path[0]`` the
current folder, ``__spec__`` the module's spec and a package runs its ``__main__``.
Its exit status is ours: ``SystemExit`` passes its code through, an uncaught
exception prints its traceback (through ``sys.excepthook``) and gives 1. Bad
command-line input prints one line on stderr and gives 2.
"""

from __future__ import annotations

import argparse
import builtins
import importlib.machinery
import importlib.util
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
# python -m with a module it cannot find or run exits 1.
MODULE_NOT_RUNNABLE_EXIT_CODE = 1


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
        help="also rewrite this installed package (and its submodules) on import; "
        "repeatable, or comma-separated",
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
    parser.add_argument(
        "--no-user-code",
        action="store_true",
        help="mend only the script and the --package packages, not the other modules of "
        "your own that it imports",
    )
    parser.add_argument(
        "-m",
        dest="module",
        metavar="MODULE",
        help="run a module as 'python -m MODULE' does, then its own arguments",
    )
    parser.add_argument(
        "script", nargs="?", help="the Python script to run, then its own arguments"
    )
    return parser


def split_script_arguments(argv: list[str]) -> tuple[list[str], list[str]]:
    """Ours up to and including the script (or ``-m MODULE``), the program's after it."""
    return config.split_script_arguments(argv, _OPTIONS_WITH_A_SEPARATE_VALUE, module_option=True)


def run_command(argv: list[str]) -> int:
    """Run ``graphmend run`` with ``argv`` (the words after ``run``); return the exit code."""
    try:
        our_arguments, program_arguments = split_script_arguments(list(argv))
        arguments = build_parser().parse_args(our_arguments)
        rules = normalize_rules(arguments.rules, ALL_RULES)
        packages = [
            check_package_name(name.strip())
            for option in arguments.package
            for name in option.split(",")
            if name.strip()
        ]
        if arguments.module is None and arguments.script is None:
            raise ValueError("the following arguments are required: script (or -m MODULE)")
    except (ConfigError, ValueError) as exc:
        return _usage_error(str(exc))
    except SystemExit as exc:  # --help
        return _exit_code(exc)

    use_cache = not arguments.no_cache
    user_code = not arguments.no_user_code
    if arguments.module is not None:
        handle = install(packages, rules=rules, cache=use_cache, user_code=user_code, progress=True)
        try:
            return _run_module_as_main(arguments.module, program_arguments)
        finally:
            handle.uninstall()

    script = arguments.script
    try:
        with open(script, "rb") as script_file:
            source_bytes = script_file.read()
    except OSError as exc:
        return _usage_error(f"can't open file {script!r}: [Errno {exc.errno}] {exc.strerror}")

    path = os.path.abspath(script)
    options = MendOptions(
        rules=rules,
        scope="all",
        use_cache=use_cache,
        cache_dir=os.environ.get(CACHE_DIR_ENVIRONMENT_VARIABLE) or None,
    )
    try:
        code = mended_code(source_bytes, path, "__main__", options, HookStats())
    except SyntaxError as exc:  # the script's own error, shown as python shows it
        traceback.print_exception(type(exc), exc, None)
        return UNCAUGHT_EXCEPTION_EXIT_CODE

    # Installing the hook also puts the boundary of compiled calls in place before the
    # script binds ``torch.compile``.
    handle = install(packages, rules=rules, cache=use_cache, user_code=user_code, progress=True)
    if not handle.installed:  # a torch graphmend does not support: the script runs unmended
        code = compile(source_bytes, path, "exec", dont_inherit=True)
    try:
        return _run_as_main(code, script, path, program_arguments)
    finally:
        handle.uninstall()


def _main_module(**attributes) -> types.ModuleType:
    """A fresh ``__main__`` whose namespace python's own would be, key for key, in order:
    ``__name__ __doc__ __package__ __loader__ __spec__ __annotations__ __builtins__
    __file__ __cached__``."""
    module = types.ModuleType("__main__")
    module.__dict__.update(__annotations__={}, __builtins__=builtins)
    module.__dict__.update(attributes)
    return module


def _run_as_main(code: types.CodeType, script: str, path: str, script_arguments: list[str]) -> int:
    """Execute ``code`` as ``__main__``, restoring sys.argv, sys.path and sys.modules after."""
    module = _main_module(__file__=path, __cached__=None)
    module.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    script_directory = os.path.dirname(os.path.realpath(script))
    return _run_in_main(code, module, [script, *script_arguments], script_directory)


def _run_module_as_main(name: str, module_arguments: list[str]) -> int:
    """``python -m name args``: find the module (importing its parent packages, through
    the hook), take its code (mended when the hook targets it) and run it as ``__main__``."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    # While the module is searched for, python shows "-m" as sys.argv[0] and puts the
    # current folder first on sys.path.
    sys.argv = ["-m", *module_arguments]
    _set_path0(os.getcwd())
    try:
        spec, failure = _find_main_spec(name)
        code = None
        if spec is not None:
            try:
                code = spec.loader.get_code(spec.name)
            except ImportError as exc:
                failure = f"Error while finding module specification for {name!r} ({type(exc).__name__}: {exc})"
            else:
                if code is None:
                    failure = f"No code object available for {spec.name}"
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    if failure is not None:
        print(f"{PROGRAM}: {failure}", file=sys.stderr)
        return MODULE_NOT_RUNNABLE_EXIT_CODE
    module = _main_module(__file__=spec.origin, __cached__=spec.cached)
    module.__doc__ = None
    module.__loader__ = spec.loader
    module.__package__ = spec.parent
    module.__spec__ = spec
    return _run_in_main(code, module, [spec.origin, *module_arguments], os.getcwd())


def _find_main_spec(name: str) -> tuple[importlib.machinery.ModuleSpec | None, str | None]:
    """The spec ``python -m name`` runs (a package's ``__main__``), or why there is none."""
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            package = name
            name = f"{package}.__main__"
            spec = importlib.util.find_spec(name)
            if spec is None:
                return None, f"No module named {name}; {package!r} is a package and cannot be directly executed"
    except (ImportError, ValueError) as exc:
        return None, f"Error while finding module specification for {name!r} ({type(exc).__name__}: {exc})"
    if spec is None or spec.loader is None:
        return None, f"No module named {name}"
    return spec, None


def _set_path0(folder: str) -> None:
    if sys.path:
        sys.path[0] = folder
    else:
        sys.path.append(folder)


def _run_in_main(code: types.CodeType, module: types.ModuleType, argv: list[str], path0: str) -> int:
    saved_argv = sys.argv
    saved_path = list(sys.path)
    saved_main = sys.modules.get("__main__")
    sys.argv = argv
    _set_path0(path0)
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
