"""[Trap]: must-rewrite guards with break counts, named must-not cases, differential runs."""

import textwrap

import pytest
import torch

from helpers import assert_equivalent, breaks, finding_reasons, mend, original_and_mended

PRELUDE = """
import torch

class MaskError(Exception):
    pass
"""

MUST_REWRITE = {
    "figure_5_torch_equal": """
        def f(attention_mask, expected):
            if not torch.equal(attention_mask, expected):
                raise ValueError("unsupported attention mask")
            return attention_mask * 2
    """,
    "any_raises_user_class": """
        def f(x, y):
            if (x < -5).any():
                raise MaskError("too small")
            return x + y
    """,
    "all_guard_with_static_message_parts": """
        def f(x, y):
            if not (x > -5).all():
                raise RuntimeError(f"values below -5 in a tensor of shape {tuple(x.shape)}")
            return x - y
    """,
    "static_prefix_and": """
        def f(x, y=None):
            if y is not None and (y == 0).any():
                raise ValueError("zero in y")
            return x
    """,
    "guard_with_else_kept": """
        def f(x, y):
            if torch.equal(x, y):
                raise ValueError("identical")
            else:
                z = x + y
            return z
    """,
    "assert_statement": """
        def f(x, y):
            assert (x > -5).all(), "values below -5"
            return x + y
    """,
    "data_dependent_or": """
        def f(x, y):
            if torch.isnan(x).any() or (y < -5).any():
                raise ValueError("nan in x or y below -5")
            return x * y
    """,
    "exception_without_message": """
        def f(x, y):
            if x.sum() > 100:
                raise OverflowError
            return x * y
    """,
}


def inputs_for(name):
    x = torch.arange(4.0)
    passing = (x, x.clone()) if name in ("figure_5_torch_equal",) else (x, x + 1)
    failing = {
        "figure_5_torch_equal": (x, x + 1),
        "any_raises_user_class": (x - 10, x),
        "all_guard_with_static_message_parts": (x - 10, x),
        "static_prefix_and": (x, torch.zeros(4)),
        "guard_with_else_kept": (x, x.clone()),
        "exception_without_message": (x + 100, x),
        "assert_statement": (x - 10, x),
        "data_dependent_or": (x, x - 10),
    }[name]
    return passing, failing


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_must_rewrite_removes_every_break(name):
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(MUST_REWRITE[name]))
    assert any(f.rule == "Trap" and f.fixed for f in result.findings), result.findings
    passing, failing = inputs_for(name)
    if name != "assert_statement":  # Dynamo traces a plain assert itself (as RuntimeError)
        assert breaks(original.f, *passing) >= 1
    assert breaks(mended.f, *passing) == 0
    assert_equivalent(original.f, mended.f, *passing)
    assert_equivalent(original.f, mended.f, *failing)


def test_torch_equal_keeps_meaning_for_broadcastable_shapes():
    """(a == b).all() alone would call a [4] tensor equal to a [1, 4] one; torch.equal does not."""
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(MUST_REWRITE["figure_5_torch_equal"]))
    x = torch.ones(4)
    assert_equivalent(original.f, mended.f, x, x.reshape(1, 4))
    assert_equivalent(original.f, mended.f, x, x.to(torch.float64))


MUST_NOT_REWRITE = {
    # condition_tensorizable
    "static_condition": ("def f(x):\n    if x.shape[0] > 3:\n        raise ValueError('big')\n    return x", None),
    # a condition on ``.item()`` is a Python value: the break is at the call (TI), no guard
    "item_condition": ("def f(x):\n    if x.sum().item() > 0:\n        raise ValueError('p')\n    return x", None),
    "or_operand_may_raise": (
        "def f(x, y):\n    if (x > 0).all() or (x / y).any():\n        raise ValueError('p')\n    return x",
        "short-circuits",
    ),
    # exception_restorable
    "bare_raise": (
        "def f(x):\n    try:\n        pass\n    except Exception:\n        if x.sum() > 0:\n            raise\n    return x",
        "bare",
    ),
    "raise_from": (
        "def f(x):\n    if x.sum() > 0:\n        raise ValueError('p') from None\n    return x", "from",
    ),
    "two_arguments": ("def f(x):\n    if x.sum() > 0:\n        raise ValueError('p', 1)\n    return x", "more than one"),
    "local_exception_class": (
        "def f(x):\n    Error = ValueError\n    if x.sum() > 0:\n        raise Error('p')\n    return x",
        "local name",
    ),
    # message_restorable
    "message_depends_on_tensor_values": (
        "def f(x):\n    if x.sum() > 0:\n        raise ValueError(f'sum is {x.sum()}')\n    return x",
        "tensor values",
    ),
    "message_not_a_string": ("def f(x):\n    if x.sum() > 0:\n        raise ValueError(42)\n    return x", "not a string"),
    # not_caught_in_function
    "caught_by_enclosing_try": (
        "def f(x):\n    try:\n        if x.sum() > 0:\n            raise ValueError('p')\n"
        "    except ValueError:\n        x = -x\n    return x",
        "try",
    ),
    # guard_body_only_raises: not a guard at all, left to Where (which declines on the raise)
    "body_does_more_than_raise": (
        "def f(x):\n    if x.sum() > 0:\n        x = x + 1\n        raise ValueError('p')\n    return x",
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_must_not_rewrite_leaves_source_untouched(name):
    body, expected_reason = MUST_NOT_REWRITE[name]
    source = PRELUDE + body
    result = mend(source, rules=("trap",))
    assert not result.changed and result.source == source
    if expected_reason:
        reasons = finding_reasons(result, "Trap")
        assert reasons and any(expected_reason in r for r in reasons), reasons


def test_a_guard_on_an_item_value_is_not_a_candidate():
    """Issue 17 (check's precision): phi3's ``is_padding_right = ....sum().item() !=
    batch_size`` then ``if is_padding_right: raise``: the break is at ``.item()``."""
    source = PRELUDE + "def f(x):\n    flag = x.sum().item() > 0\n    if flag:\n        raise ValueError('p')\n    return x"
    result = mend(source)
    assert [finding.category for finding in result.findings] == ["TI"] and not result.changed


@pytest.mark.slow  # compiles with TorchInductor
def test_a_lowered_guard_fires_under_inductor():
    """Inductor keeps the guard's operator (an ordered effect that returns nothing) and
    the user's exception leaves the compiled call as itself."""
    original, mended, _ = original_and_mended(PRELUDE + textwrap.dedent(MUST_REWRITE["any_raises_user_class"]))
    x = torch.arange(4.0)
    assert_equivalent(original.f, mended.f, x - 10, x, backends=("inductor",))
