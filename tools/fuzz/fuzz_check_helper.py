"""The test double of transformers 5's ``torch_compilable_check``, for grammar programs
(``check-call``) and the rule tests (tests/rules/test_trap_checks.py, test_trap_items.py):
eagerly it raises ``error_type(msg)`` when the condition fails; traced, it checks with
``torch._check_tensor_all`` (a graph break); with ``GRAPHMEND_TEST_DISABLE_CHECKS=1``
it checks nothing, as transformers' does under ``TRANSFORMERS_DISABLE_TORCH_CHECK=1``.
Importing it registers it as a known helper (``graphmend.runtime.checks``), as the
real one is, so Trap lowers its calls; programs import it as ``graphmend_fuzz_checks``,
whichever way the test runner imported this package."""

from __future__ import annotations

import os
import sys

import torch

from graphmend.runtime import checks

MODULE_NAME = "graphmend_fuzz_checks"
DISABLE_VARIABLE = "GRAPHMEND_TEST_DISABLE_CHECKS"


def _disabled() -> bool:
    return os.getenv(DISABLE_VARIABLE, "0") == "1"


def torch_compilable_check(cond, msg, error_type=ValueError):
    if _disabled():
        return
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


# The helper as the harness's reference runs it: outside TorchDynamo, raising what it
# raises eagerly (``observe.CHECKS_MADE_EAGERLY``).
torch_compilable_check_eagerly = torch._dynamo.disable(torch_compilable_check)

_HELPER = checks.CheckFunction(
    module=MODULE_NAME,
    name="torch_compilable_check",
    parameters=("cond", "msg", "error_type"),
    default_error_type=ValueError,
    disabled=_disabled,
)
sys.modules.setdefault(MODULE_NAME, sys.modules[__name__])
if _HELPER not in checks.KNOWN_CHECK_FUNCTIONS:
    checks.KNOWN_CHECK_FUNCTIONS = (*checks.KNOWN_CHECK_FUNCTIONS, _HELPER)
