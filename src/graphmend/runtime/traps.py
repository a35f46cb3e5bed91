"""Graph-native validation guards and the restoration of the exceptions they stand for.

A lowered guard calls ``torch._assert_async(condition, message)``; the message
carries a marker naming the module and the exception class of the original
``raise``. When a compiled call fails with such a message, the boundary raises the
original class with the original message instead of TorchDynamo's RuntimeError.
A message is always passed: without one, inductor drops the assertion.
"""

from __future__ import annotations

import builtins
import sys

import torch

TRAP_MARKER = "[graphmend-trap "
_FIELD_SEPARATOR = "|"


class TrapFailure(RuntimeError):
    """Raised in place of an original exception whose class could not be found again."""


def trap_message(module_name: str, exception_path: str, message) -> str:
    """The assertion message for a lowered guard (built while tracing, so it is a constant)."""
    has_message = "0" if message is None else "1"
    text = "" if message is None else str(message)
    return (
        f"{TRAP_MARKER}{module_name}{_FIELD_SEPARATOR}{exception_path}"
        f"{_FIELD_SEPARATOR}{has_message}] {text}"
    )


def equal_as_tensor(left, right):
    """``torch.equal(left, right)`` as a 0-d bool tensor, with no data-dependent Python bool.

    Shapes are static while tracing, so checking them first costs no graph break and
    keeps broadcasting from calling a [4] and a [1, 4] tensor equal. Like
    ``torch.equal``, values of different dtypes compare after promotion. Anything
    else (different devices, non-tensors) goes to ``torch.equal`` itself.
    """
    if not (isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor)) or (
        left.device != right.device
    ):
        return torch.equal(left, right)
    if left.shape != right.shape:
        return torch.zeros((), dtype=torch.bool, device=left.device)
    return (left == right).all()


def _parse(error_text: str):
    start = error_text.find(TRAP_MARKER)
    if start < 0:
        return None
    rest = error_text[start + len(TRAP_MARKER) :]
    header, separator, message = rest.partition("] ")
    if not separator:
        header, _, message = rest.partition("]")
    module_name, _, rest_of_header = header.partition(_FIELD_SEPARATOR)
    exception_path, _, has_message = rest_of_header.partition(_FIELD_SEPARATOR)
    return module_name, exception_path, message if has_message == "1" else None


def _resolve(module_name: str, exception_path: str):
    module = sys.modules.get(module_name)
    namespace = vars(module) if module is not None else {}
    head, *attributes = exception_path.split(".")
    if head in namespace:
        value = namespace[head]
    elif hasattr(builtins, head):
        value = getattr(builtins, head)
    else:
        return None
    for attribute in attributes:
        value = getattr(value, attribute, None)
    if isinstance(value, type) and issubclass(value, BaseException):
        return value
    return None


def raise_original_for_trap_failure(error: BaseException) -> None:
    """Raise the original exception if ``error`` is a failed lowered guard; else return."""
    parsed = _parse(str(error))
    if parsed is None:
        return
    module_name, exception_path, message = parsed
    exception_class = _resolve(module_name, exception_path)
    if exception_class is None:
        raise TrapFailure(message) from error
    if message is not None:
        raise exception_class(message) from None
    raise exception_class() from None


def guard_holds(value, expected_truth: bool):
    """Whether ``bool(value) == expected_truth``, as a 0-d bool tensor when ``value`` is one.

    Only facts TorchDynamo knows statically (type, element count, dtype) pick the
    form, so this costs no graph break; a value that is not a one-element tensor
    is tested with ``bool()`` exactly as the original ``if`` did.
    """
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        truth = value if value.dtype == torch.bool else value != 0
        truth = truth.reshape(())
        return truth if expected_truth else torch.logical_not(truth)
    return bool(value) == expected_truth


def assert_guard(holds, message: str) -> None:
    """Fail with ``message`` unless ``holds``: inside the graph when ``holds`` is a tensor."""
    if isinstance(holds, torch.Tensor):
        torch._assert_async(holds, message)
    elif not holds:
        raise RuntimeError(message)


def _combine(values, deciding_truth: bool, combine):
    """Fold truth values: a plain bool equal to ``deciding_truth`` decides at once (as
    Python's short-circuit would); tensor truths are combined inside the graph."""
    tensors = []
    for value in values:
        truth = guard_holds(value, True)
        if isinstance(truth, torch.Tensor):
            tensors.append(truth)
        elif truth == deciding_truth:
            return deciding_truth
    if not tensors:
        return not deciding_truth
    combined = tensors[0]
    for truth in tensors[1:]:
        combined = combine(combined, truth)
    return combined


def all_of(*values):
    """``v1 and v2 and ...`` as a truth value, every operand evaluated (they are safe)."""
    return _combine(values, False, torch.logical_and)


def any_of(*values):
    """``v1 or v2 or ...`` as a truth value, every operand evaluated (they are safe)."""
    return _combine(values, True, torch.logical_or)
