"""A validation helper with the contract of transformers 5's ``torch_compilable_check``,
for grammar programs (``check-call``): eagerly it raises ``error_type(msg)`` when the
condition fails; traced, it checks with ``torch._check_tensor_all`` (a graph break).
Importing it registers it as a known helper (``graphmend.runtime.checks``), as the
real one is, so Trap lowers its calls; programs import it as ``graphmend_fuzz_checks``,
whichever way the test runner imported this package."""

from __future__ import annotations

import sys

import torch

from graphmend.runtime import checks

MODULE_NAME = "graphmend_fuzz_checks"


def torch_compilable_check(cond, msg, error_type=ValueError):
    if torch.compiler.is_compiling():
        if isinstance(cond, torch.Tensor):
            torch._check_tensor_all(cond)
        else:
            torch._check(cond)
        return
    message = msg if callable(msg) else (lambda: msg)
    if callable(cond):
        cond = cond()
    if isinstance(cond, torch.Tensor):
        torch._check_tensor_all_with(error_type, cond, message)
    else:
        torch._check_with(error_type, cond, message)


_HELPER = checks.CheckFunction(
    module=MODULE_NAME,
    name="torch_compilable_check",
    parameters=("cond", "msg", "error_type"),
    default_error_type=ValueError,
    disabled=lambda: False,
)
sys.modules.setdefault(MODULE_NAME, sys.modules[__name__])
if _HELPER not in checks.KNOWN_CHECK_FUNCTIONS:
    checks.KNOWN_CHECK_FUNCTIONS = (*checks.KNOWN_CHECK_FUNCTIONS, _HELPER)
