"""The predicates of graphmend.runtime.output_call_arguments on templates like those
Defer's runtime builds (constants, and the kind of each operand)."""

import pytest

from graphmend.runtime import output_call_arguments as arguments

INT, TENSOR = "int", "tensor"
C = arguments.CONSTANT


@pytest.mark.parametrize(
    "operands",
    [
        [(C, "plain text")],
        [(TENSOR, None)],
        [(C, "%s and %r"), (TENSOR, None), (C, [1])],
        [(C, "%d of %5.1f%%"), (INT, None), (C, 2.5)],
        [(C, "%x %o %X"), (C, 255), (C, True), (INT, None)],
        [(C, "%-8s|%+.3e"), (C, "left"), (C, 3)],
    ],
)
def test_log_message_formats_holds(operands):
    assert arguments.log_message_formats(operands, INT) is None


@pytest.mark.parametrize(
    "operands, reason",
    [
        ([(C, "%d"), (C, "text")], "the message does not format its arguments (TypeError: "),
        ([(C, "%d"), (C, float("nan"))], "the message does not format its arguments (ValueError: "),
        ([(C, "%x"), (C, 1.5)], "the message does not format its arguments (TypeError: "),
        ([(C, "%s %s"), (C, 1)], "the message does not format its arguments (TypeError: "),
        ([(C, "no conversion"), (C, 1)], "the message does not format its arguments (TypeError: "),
        ([(C, "%s %"), (C, 1)], "the message does not format its arguments (ValueError: "),
        ([(C, "%d"), (TENSOR, None)], "an operand meets `%d` in the message, which may not format it"),
        ([(C, "%c"), (INT, None)], "an operand meets `%c` in the message, which may not format it"),
        ([(C, "%s"), (C, 1), (INT, None)], "an operand meets `%` in the message, which may not format it"),
        ([(C, "%(name)s"), (C, 1)], "the message takes its arguments by name or its widths from them"),
        ([(C, "%*d"), (C, 3), (C, 1)], "the message takes its arguments by name or its widths from them"),
        ([(C, 5), (C, 1)], "a message with arguments is not a string"),
        ([(TENSOR, None), (C, 1)], "a message with arguments is not a string"),
    ],
)
def test_log_message_formats_fails(operands, reason):
    assert arguments.log_message_formats(operands, INT).startswith(reason)


def test_a_named_conversion_fails_with_a_tuple_of_arguments():
    # Refused without trying: logging passes a tuple unless the one argument is a
    # mapping, which Defer's runtime never performs in a graph. (``%*d`` is refused
    # only so that conversions and operands stay in step.)
    with pytest.raises(TypeError):
        "%(name)s" % (1,)  # noqa: B018, F502, UP031 - the TypeError under test


def test_print_separators_are_strings():
    assert arguments.print_separators_are_strings({"sep": "-", "end": None, "flush": True}) is None
    assert arguments.print_separators_are_strings({"end": 5}) == "`end=` is not a string, so the call raises TypeError"
    assert arguments.print_separators_are_strings({"sep": b"-"}) == "`sep=` is not a string, so the call raises TypeError"


def test_log_level_is_an_integer():
    assert arguments.log_level_is_an_integer([(C, 20), (C, "m")], INT) is None
    assert arguments.log_level_is_an_integer([(INT, None), (C, "m")], INT) is None
    assert arguments.log_level_is_an_integer([(C, "loud"), (C, "m")], INT) is not None
    assert arguments.log_level_is_an_integer([(TENSOR, None), (C, "m")], INT) is not None
    assert arguments.log_level_is_an_integer([], INT) is not None


def test_extra_names_no_record_attribute():
    assert arguments.extra_names_no_record_attribute({"extra": {"request": "r1"}}) is None
    assert arguments.extra_names_no_record_attribute({}) is None
    for key in ("message", "asctime", "levelname", "lineno"):
        assert arguments.extra_names_no_record_attribute({"extra": {key: 1}}) is not None


def test_warning_arguments_given_once():
    assert arguments.warning_arguments_given_once(("m",), {"category": UserWarning}) is None
    assert arguments.warning_arguments_given_once(("m", UserWarning), {"category": UserWarning}) is not None
    assert arguments.warning_arguments_given_once(("m",), {"message": "n"}) is not None
