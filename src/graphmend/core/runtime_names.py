"""Names the rules look for and the runtime acts on, importable without torch.

The rules decide from these names which calls to rewrite (``graphmend check`` and
``graphmend fix`` run without torch); the runtime (``graphmend.runtime.deferred``,
``graphmend.runtime.checks``) imports them from here, so both read one table.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

# The standard Logger methods and the level each logs at (``log`` takes the level as its
# first argument); shared by Defer's rewrite and ``graphmend fix``'s in-place calls.
LOGGER_METHOD_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


@dataclass(frozen=True)
class CheckFunction:
    """A helper ``name(cond, msg, error_type=default_error_type)`` of ``module`` that
    raises ``error_type(str(msg))`` when ``cond`` (a bool tensor: all of it) is false,
    and checks nothing while ``disabled()``."""

    module: str
    name: str
    parameters: tuple[str, ...]
    default_error_type: type
    disabled: Callable[[], bool]


def _transformers_checks_disabled() -> bool:
    return os.getenv("TRANSFORMERS_DISABLE_TORCH_CHECK", "0") == "1"


KNOWN_CHECK_FUNCTIONS: tuple[CheckFunction, ...] = (
    CheckFunction(
        module="transformers.utils.import_utils",
        name="torch_compilable_check",
        parameters=("cond", "msg", "error_type"),
        default_error_type=ValueError,
        disabled=_transformers_checks_disabled,
    ),
)

# The names the rewrite looks for; the runtime then checks identity.
KNOWN_CHECK_NAMES = frozenset(check.name for check in KNOWN_CHECK_FUNCTIONS)
