"""Options: the ``[tool.graphmend]`` table of the nearest ``pyproject.toml``, and flags.

    [tool.graphmend]
    rules = ["trap", "where", "defer"]   # or "trap,where"
    select = ["DC", "LC"]                # report only these categories
    ignore = ["TI"]                      # never report these categories
    all = true                           # or scope = "all": every function, not only entry points
    packages = ["mylib"]                 # rewritten on import by ``graphmend explain``

The nearest file is the first ``pyproject.toml`` holding a ``[tool.graphmend]`` table,
walking up from the first path on the command line (as ruff finds its settings), so a
project's settings apply from wherever it is run. Command-line flags override them.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from graphmend.rewrite.findings import CATEGORY_TITLES
from graphmend.rewrite.pipeline import ALL_RULES, SCOPES, parse_rules

CONFIG_FILE_NAME = "pyproject.toml"
KNOWN_KEYS = ("rules", "select", "ignore", "all", "scope", "packages", "exclude")


USAGE_ERROR_EXIT_CODE = 2


class ConfigError(Exception):
    """A setting or flag that cannot be used; reported in one line as a usage error (exit 2)."""


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse that raises ConfigError instead of printing usage and exiting."""

    def error(self, message: str):
        raise ConfigError(message)


def split_script_arguments(
    argv: list[str], options_with_a_value: frozenset[str], *, module_option: bool = False
) -> tuple[list[str], list[str]]:
    """Split ``argv`` after the script's name: ours up to and including it, the
    script's own after it.

    Everything after the script goes to the script verbatim, ``--`` and option-like
    words included, as with ``python script.py ...``; argparse alone would eat them.
    A ``--`` before the script stays ours, so argparse reads a script named like an
    option (``-s.py``) as the script. With ``module_option``, ``-m MODULE`` (or
    ``-mMODULE``, as python takes it) ends ours as a script's name does.
    """
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            index += 1
            break
        if module_option and word == "-m":
            return argv[: index + 2], argv[index + 2 :]
        if module_option and word.startswith("-m") and not word.startswith("--"):
            return argv[: index + 1], argv[index + 1 :]
        if not word.startswith("-") or word == "-":
            break
        index += 2 if word in options_with_a_value else 1
    return argv[: index + 1], argv[index + 1 :]


def usage_error(program: str, message: str) -> int:
    print(f"{program}: error: {message}", file=sys.stderr)
    return USAGE_ERROR_EXIT_CODE


@dataclass
class Settings:
    rules: tuple[str, ...] = ALL_RULES
    select: frozenset[str] | None = None  # None: every category
    ignore: frozenset[str] = frozenset()
    scope: str = "entry"
    packages: tuple[str, ...] = ()
    source: str | None = None  # the pyproject.toml these came from
    warnings: list[str] = field(default_factory=list)
    # Glob patterns (relative to the pyproject.toml's folder) of files and folders that
    # ``check`` and ``fix`` skip when they walk a folder; a file named on the command
    # line is always looked at.
    exclude: tuple[str, ...] = ()

    def reports(self, category: str) -> bool:
        if category in self.ignore:
            return False
        return self.select is None or category in self.select

    def excludes(self, path: str) -> bool:
        if not self.exclude:
            return False
        root = os.path.dirname(self.source) if self.source else os.getcwd()
        relative = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
        if relative.startswith("../"):
            return False
        return any(
            fnmatch.fnmatchcase(relative, pattern.rstrip("/"))
            or fnmatch.fnmatchcase(relative, pattern.rstrip("/") + "/*")
            for pattern in self.exclude
        )


def parse_codes(value: str | Sequence[str], where: str) -> frozenset[str]:
    """``"DC,LC"`` or ``["DC", "LC"]`` -> the set of category codes, checked."""
    if isinstance(value, str):
        words = value.split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(word, str) for word in value):
        words = list(value)
    else:
        raise ConfigError(f"{where}: expected a list of category codes, got {value!r}")
    codes = frozenset(word.strip().upper() for word in words if word.strip())
    unknown = sorted(codes - set(CATEGORY_TITLES))
    if unknown:
        raise ConfigError(
            f"{where}: unknown category {unknown[0]!r}; choose from {', '.join(CATEGORY_TITLES)}"
        )
    return codes


def parse_rule_names(value: str | Sequence[str], where: str) -> tuple[str, ...]:
    if not isinstance(value, str) and not (
        isinstance(value, (list, tuple)) and all(isinstance(word, str) for word in value)
    ):
        raise ConfigError(f"{where}: expected a list of rule names, got {value!r}")
    try:
        words = value if isinstance(value, str) else [word.strip() for word in value]
        rules = parse_rules(words)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if not rules:
        raise ConfigError(f"{where}: no rules selected; choose from {', '.join(ALL_RULES)}")
    return rules


def find_config_file(start: str) -> str | None:
    """The first ``pyproject.toml`` with a ``[tool.graphmend]`` table at or above ``start``."""
    directory = os.path.abspath(start)
    if not os.path.isdir(directory):
        directory = os.path.dirname(directory)
    while True:
        candidate = os.path.join(directory, CONFIG_FILE_NAME)
        if os.path.isfile(candidate) and _has_graphmend_table(candidate):
            return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _has_graphmend_table(path: str) -> bool:
    # A cheap text test first: most pyproject.toml files on the way up are not ours,
    # and a broken one that is not ours must not stop the command.
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return "tool.graphmend" in file.read()
    except OSError:
        return False


def _read_table(path: str) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise ConfigError(
                f"{path}: reading it needs Python 3.11 or the tomli package"
            ) from None
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    table = document.get("tool", {}).get("graphmend", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.graphmend] must be a table")
    return table


def load_settings(paths: Iterable[str]) -> Settings:
    """Settings from the ``pyproject.toml`` nearest the first of ``paths`` (or the cwd)."""
    first = next(iter(paths), os.curdir)
    config_file = find_config_file(first)
    settings = Settings(source=config_file)
    if config_file is None:
        return settings
    table = _read_table(config_file)
    where = f"{config_file}: [tool.graphmend]"
    for key in table:
        if key not in KNOWN_KEYS:
            settings.warnings.append(f"{where}: unknown key {key!r} ignored")
    if "rules" in table:
        settings.rules = parse_rule_names(table["rules"], f"{where} rules")
    if "select" in table:
        settings.select = parse_codes(table["select"], f"{where} select")
    if "ignore" in table:
        settings.ignore = parse_codes(table["ignore"], f"{where} ignore")
    if "scope" in table:
        if table["scope"] not in SCOPES:
            raise ConfigError(f"{where} scope: expected one of {', '.join(map(repr, SCOPES))}")
        settings.scope = table["scope"]
    if "all" in table:
        if not isinstance(table["all"], bool):
            raise ConfigError(f"{where} all: expected true or false")
        settings.scope = "all" if table["all"] else settings.scope
    if "packages" in table:
        packages = table["packages"]
        if isinstance(packages, str):
            packages = packages.split(",")
        if not isinstance(packages, list) or not all(isinstance(name, str) for name in packages):
            raise ConfigError(f"{where} packages: expected a list of package names")
        settings.packages = tuple(name.strip() for name in packages if name.strip())
    if "exclude" in table:
        exclude = table["exclude"]
        if not isinstance(exclude, list) or not all(isinstance(pattern, str) for pattern in exclude):
            raise ConfigError(f"{where} exclude: expected a list of glob patterns")
        settings.exclude = tuple(pattern.strip() for pattern in exclude if pattern.strip())
    return settings


def apply_overrides(
    settings: Settings,
    *,
    rules: str | None = None,
    select: str | None = None,
    ignore: str | None = None,
    all_functions: bool = False,
) -> Settings:
    """Command-line flags replace what the file set."""
    if rules is not None:
        settings.rules = parse_rule_names(rules, "--rules")
    if select is not None:
        settings.select = parse_codes(select, "--select")
    if ignore is not None:
        settings.ignore = parse_codes(ignore, "--ignore")
    if all_functions:
        settings.scope = "all"
    return settings


def print_warnings(settings: Settings, program: str) -> None:
    for warning in settings.warnings:
        print(f"{program}: warning: {warning}", file=sys.stderr)
