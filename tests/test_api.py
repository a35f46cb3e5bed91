"""The in-memory API: mend_source, mend_module_source and mend."""

import textwrap

import pytest
import torch

import graphmend
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
    assert "__graphmend__.select" in graphmend.mend_source(FIGURES)
    without_entry = FIGURES.replace("compiled = torch.compile(figure_2)\n", "")
    assert graphmend.mend_source(without_entry) == without_entry
    assert "__graphmend__.select" in graphmend.mend_source(without_entry, scope="all")


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
    exec(compile(FIGURES, "<figures>", "exec"), namespace)
    x, y = torch.randn(5), torch.randn(5)
    # Source for exec'd code is not available: mend reports it instead of guessing.
    with pytest.raises((OSError, TypeError, ValueError)):
        graphmend.mend(namespace["figure_2"])

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
