"""Whether an output call's own arguments make it fail at the call.

Defer performs a print, log record or warning inside the graph only when the graph
shows exactly what the call would (``output_decisions.why_not_exact_in_graph``). A call whose
arguments its callee rejects (``print(end=5)``, ``logger.log("loud", ...)``,
``logger.warning()``, an ``extra=`` key a record has already, a warning's message given
twice) raises at the call, where the function's own ``try`` may catch it and before the
code after it runs; a log message that its arguments do not format (``"%d"`` with a
string, one ``%s`` too many) has logging print an error report with the call stack at
the call. Inside a graph the first would raise when the graph runs, past the ``try``
and after the rest of the graph, and the second would report a stack inside graphmend.
So such a call is made by the original call, with its graph break.

Decided while tracing, from the call's template (its constant arguments, ``None``
where an operand goes) and the kind of each operand (``output_operands.TENSOR`` and so on).
Each predicate returns None when the call cannot fail that way, or the reason.
"""

from __future__ import annotations

import logging
import re

# What ``Logger.makeRecord`` refuses to overwrite from ``extra=``: a record's own
# attributes, and the two that formatting adds.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", logging.INFO, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
}

# One printf-style conversion of ``str % args``.
_CONVERSION = re.compile(
    r"%(?P<key>\([^)]*\))?(?P<flags>[-#0 +]*)(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d*))?[hlL]?(?P<type>.?)",
    re.DOTALL,
)
# What an operand whose value is known only when the graph runs may meet: any object
# takes ``%s``, ``%r`` and ``%a``; a 64-bit integer the number conversions but ``%c``.
_ANY_OBJECT_CONVERSIONS = frozenset("sra")
_INTEGER_CONVERSIONS = _ANY_OBJECT_CONVERSIONS | frozenset("diuxXoeEfFgG")

CONSTANT = "constant"

# The kinds of number an ``.item()`` read made when the graph runs gives, by the
# tensor's dtype, and the printf conversions that accept every value of each: a float
# may be NaN or infinite, which ``%d`` refuses; an integer may be too large for ``%c``.
FLOAT_ITEM, INTEGER_ITEM, COMPLEX_ITEM = "float item", "integer item", "complex item"
_ITEM_CONVERSIONS = {
    FLOAT_ITEM: _ANY_OBJECT_CONVERSIONS | frozenset("eEfFgG"),
    INTEGER_ITEM: _INTEGER_CONVERSIONS,
    COMPLEX_ITEM: _ANY_OBJECT_CONVERSIONS,
}
_ITEM_STAND_INS = {FLOAT_ITEM: 0.0, INTEGER_ITEM: 0, COMPLEX_ITEM: 0j}


def operand_kinds(template: tuple, slots: tuple, item_kind: str | None = None) -> list[tuple[str, object]]:
    """Per argument, ``(CONSTANT, value)`` or ``(its slot's kind, None)``; an ``.item()``
    read (slot kind ``item_kind``) as the kind of number it gives."""
    slot_kinds = {
        position: extent if slot_kind == item_kind else slot_kind for position, slot_kind, extent in slots
    }
    return [
        (slot_kinds[position], None) if position in slot_kinds else (CONSTANT, value)
        for position, value in enumerate(template)
    ]


def item_reads_format(slots: tuple, text_kind: str) -> str | None:
    """An f-string's ``{t.item():spec}`` formats every number of the read's kind:
    tried on a stand-in (``format(0.0, "d")`` raises as any float would), and ``c``,
    which a large integer overflows, is refused."""
    for _position, slot_kind, extent in slots:
        if slot_kind != text_kind:
            continue
        for kind, conversion, spec in extent:
            value = _ITEM_STAND_INS[kind]
            if conversion:
                value = {"s": str, "r": repr, "a": ascii}[conversion](value)
            if spec.endswith("c"):
                return "an f-string formats an `.item()` read with `c`, which a large number overflows"
            try:
                format(value, spec)
            except (TypeError, ValueError) as error:
                return f"an f-string's format does not apply to the `.item()` read ({type(error).__name__}: {error})"
    return None


def print_separators_are_strings(kwargs: dict) -> str | None:
    """``print`` raises TypeError on a ``sep=`` or ``end=`` that is not None or a string."""
    for name in ("sep", "end"):
        value = kwargs.get(name)
        if value is not None and not isinstance(value, str):
            return f"`{name}=` is not a string, so the call raises TypeError"
    return None


def log_level_is_an_integer(operands: list, integer_kind: str) -> str | None:
    """``Logger.log`` raises TypeError on a level that is not an ``int``."""
    if not operands:
        return "`log()` without a level raises TypeError"
    kind, value = operands[0]
    if kind == integer_kind or (kind == CONSTANT and isinstance(value, int)):
        return None
    return "the level is not an integer, so the call raises TypeError"


def log_message_is_given(operands: list) -> str | None:
    """A logger method without its message raises TypeError."""
    return None if operands else "the call has no message, so it raises TypeError"


def extra_names_no_record_attribute(kwargs: dict) -> str | None:
    """``makeRecord`` raises KeyError on an ``extra=`` key that a record has already."""
    extra = kwargs.get("extra") or {}
    clashing = sorted(str(key) for key in extra if key in _RECORD_ATTRIBUTES)
    if clashing:
        return f"`extra=` names the record's own `{clashing[0]}`, so the call raises KeyError"
    return None


def log_message_formats(operands: list, integer_kind: str) -> str | None:
    """``msg % args`` cannot fail: with arguments, the message is a string that
    formats its constant arguments (tried while tracing) and takes each operand known
    only when the graph runs with a conversion that accepts every value of its kind."""
    message, arguments = operands[0], operands[1:]
    if not arguments:
        return None  # a record without arguments is shown as ``str(msg)``
    kind, text = message
    if kind != CONSTANT or not isinstance(text, str):
        return "a message with arguments is not a string"
    conversions = []
    for match in _CONVERSION.finditer(text):
        if match.group(0) == "%%":
            continue
        if match.group("key") is not None or "*" in (match.group("width") or "") + (match.group("precision") or ""):
            return "the message takes its arguments by name or its widths from them"
        conversions.append(match.group("type"))
    stand_ins = []
    for position, (kind, value) in enumerate(arguments):
        conversion = conversions[position] if position < len(conversions) else None
        if kind == CONSTANT:
            stand_ins.append(value)
        elif kind in _ITEM_CONVERSIONS:
            if conversion not in _ITEM_CONVERSIONS[kind]:
                return f"an `.item()` read meets `%{conversion or ''}` in the message, which may not format it"
            stand_ins.append(_ITEM_STAND_INS[kind])
        elif kind == integer_kind and conversion in _INTEGER_CONVERSIONS:
            stand_ins.append(0)
        elif conversion in _ANY_OBJECT_CONVERSIONS:
            stand_ins.append("")
        else:
            return f"an operand meets `%{conversion or ''}` in the message, which may not format it"
    try:
        text % tuple(stand_ins)
    except (TypeError, ValueError, OverflowError, KeyError) as error:
        return f"the message does not format its arguments ({type(error).__name__}: {error})"
    return None


def warning_arguments_given_once(template: tuple, kwargs: dict) -> str | None:
    """``warnings.warn`` raises TypeError on an argument given by position and keyword."""
    for position, name in enumerate(("message", "category")):
        if name in kwargs and len(template) > position:
            return f"`{name}` is given twice, so the call raises TypeError"
    return None
