"""The in-memory API: mend_source, mend_module_source and mend."""

import textwrap
import warnings

import pytest
import torch

import graphmend
from graphmend.api import MendWarning
from helpers import assert_equivalent, breaks

FIGURES = textwrap.dedent(
    """
    import torch

    def figure_2(x, y):
        x_1 = x * 2
        y_1 = y * 2
        if x.sum() > 0:
            z = x_1 + y_1
        else:
            z = x_1 * y_1
        return torch.relu(z)

    compiled = torch.compile(figure_2)
    """
)


def test_text_that_does_not_parse_raises_pythons_own_syntax_error():
    with pytest.raises(SyntaxError) as caught:
        graphmend.mend_source("def f(:\n    pass\n")
    assert type(caught.value) is SyntaxError
    assert caught.value.lineno == 1


def test_unknown_rule_and_scope_are_value_errors():
    with pytest.raises(ValueError, match="unknown rule"):
        graphmend.mend_module_source("x = 1\n", rules=("trap", "hoist"))
    with pytest.raises(ValueError, match="unknown scope"):
        graphmend.mend_module_source("x = 1\n", scope="some")


def test_entry_scope_rewrites_what_compile_reaches_and_nothing_without_entry_points():
    assert "__graphmend__.select" in graphmend.mend_source(FIGURES, scope="entry")
    without_entry = FIGURES.replace("compiled = torch.compile(figure_2)\n", "")
    assert graphmend.mend_source(without_entry, scope="entry") == without_entry
    assert "__graphmend__.select" in graphmend.mend_source(without_entry, scope="all")


def test_mend_source_by_default_mends_a_module_compiled_elsewhere():
    # The module that calls torch.compile is another one: every function may be compiled.
    without_entry = FIGURES.replace("compiled = torch.compile(figure_2)\n", "")
    assert "__graphmend__.select" in graphmend.mend_source(without_entry)


def test_mending_twice_changes_nothing_the_second_time():
    once = graphmend.mend_source(FIGURES)
    assert graphmend.mend_source(once) == once


def test_constructs_not_understood_are_left_unchanged():
    source = textwrap.dedent(
        """
        import torch
        async def f(x):
            async with x as y:
                print(y)
            match x:
                case [a, *rest]:
                    return a
        compiled = torch.compile(f)
        """
    )
    result = graphmend.mend_module_source(source)
    assert result.source == source or "__graphmend__" not in result.source.split("async with")[1]


def test_mend_function_module_and_class():
    namespace = {}
    exec(compile(FIGURES, "<figures>", "exec"), namespace)  # noqa: S102
    x, y = torch.randn(5), torch.randn(5)
    # Source for exec'd code is not available: mend warns and leaves it as it was.
    with pytest.warns(MendWarning):
        assert graphmend.mend(namespace["figure_2"]) is namespace["figure_2"]

    from tests_fixtures_for_api import Gate, gate_function

    mended_function = graphmend.mend(gate_function)
    assert mended_function is not gate_function
    assert breaks(gate_function, x, y) >= 1 and breaks(mended_function, x, y) == 0
    assert_equivalent(gate_function, mended_function, x, y)

    model = Gate()
    reference = model(x, y)
    assert graphmend.mend(model) is model
    assert breaks(model, x, y) == 0
    assert torch.equal(model(x, y), reference)


def test_mend_rejects_other_objects():
    with pytest.raises(TypeError, match="takes a function"):
        graphmend.mend(42)


def _no_warnings_from(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    assert [str(w.message) for w in caught] == []
    return result


def test_a_lambda_is_returned_as_it_is_without_a_warning():
    # A lambda's body is one expression; every rule rewrites statements.
    square = lambda x: x * x  # noqa: E731 - the case under test is a lambda
    assert _no_warnings_from(lambda: graphmend.mend(square)) is square
    namespace = {}
    exec("anonymous = lambda x: x + 1", namespace)  # noqa: S102 - no source on disk either
    assert _no_warnings_from(lambda: graphmend.mend(namespace["anonymous"])) is namespace["anonymous"]


def test_a_function_without_source_is_returned_unchanged_with_one_warning():
    namespace = {}
    exec(compile(FIGURES, "<figures>", "exec"), namespace)  # noqa: S102
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = graphmend.mend(namespace["figure_2"])
    assert result is namespace["figure_2"]
    assert len(caught) == 1 and caught[0].category is MendWarning
    message = str(caught[0].message)
    assert "\n" not in message and message.startswith("graphmend: figure_2 left as it was: ")
    assert "source" in message
    assert caught[0].filename == __file__  # points at the caller's line


def test_a_functools_wraps_wrapper_calls_the_mended_function():
    import api_wrapped_fixtures as fixtures

    x, y = torch.randn(5), torch.randn(5)
    original_code = fixtures.gate.__wrapped__.__code__
    mended = _no_warnings_from(lambda: graphmend.mend(fixtures.gate))
    assert mended is not fixtures.gate
    assert mended.__name__ == "gate" and mended.__wrapped__ is not fixtures.gate.__wrapped__
    # the originals are untouched
    assert fixtures.gate.__wrapped__.__code__ is original_code
    assert breaks(fixtures.gate, x, y) >= 1 and breaks(mended, x, y) == 0
    for inputs in ((x, y), (-x.abs(), y)):
        fixtures.calls.clear()
        assert torch.equal(mended(*inputs), fixtures.gate(*inputs))
        assert fixtures.calls == ["gate", "gate"]  # the wrapper still runs, once per call
    assert_equivalent(fixtures.gate, mended, x, y)


def test_a_wrapper_that_does_not_call_through_its_closure_is_left_with_one_warning():
    import api_wrapped_fixtures as fixtures

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = graphmend.mend(fixtures.hides_what_it_wraps)
    assert result is fixtures.hides_what_it_wraps
    assert len(caught) == 1
    assert "does not call through a closure variable" in str(caught[0].message)


def test_a_module_with_a_wrapped_forward_is_mended():
    import api_wrapped_fixtures as fixtures

    x, y = torch.randn(5), torch.randn(5)
    model = fixtures.TracedGate()
    reference = model(x, y)
    assert breaks(model, x, y) >= 1
    _no_warnings_from(lambda: graphmend.mend(model))
    assert breaks(model, x, y) == 0
    assert torch.equal(model(x, y), reference)
