"""[Where]: must-rewrite branches with break counts, named must-not cases, differential runs."""

import textwrap

import pytest
import torch

from helpers import assert_equivalent, breaks, finding_reasons, mend, original_and_mended

PRELUDE = """
import torch
"""

MUST_REWRITE = {
    "figure_2_same_names": """
        def f(x, y):
            x_1 = x * 2
            y_1 = y * 2
            if x.sum() > 0:
                z = x_1 + y_1
            else:
                z = x_1 * y_1
            return torch.relu(z)
    """,
    "return_arms": """
        def f(x, y):
            if x.max() > 0.5:
                return x + y
            else:
                return x - y
    """,
    "return_then_fallthrough_return": """
        def f(x, y):
            if (x > 0).any():
                return torch.sigmoid(x)
            return torch.tanh(y)
    """,
    "one_armed_update_of_bound_name": """
        def f(x, y):
            z = x * y
            if y.mean() > 0:
                z = z + 1
            return z
    """,
    "setup_statements_renamed_per_arm": """
        def f(x, y):
            if x.sum() > y.sum():
                t = x * 2
                out = t + y
            else:
                t = y * 3
                out = t - x
            return out * t
    """,
    "negated_condition_and_reaching_definition": """
        def f(x, y):
            total = torch.max(x) + 1
            limit = 3
            if not total > limit:
                out = x * 1.0
            else:
                out = y * 1.0
            return out
    """,
    "same_call_different_arguments": """
        def f(x, y):
            collected = []
            if x.sum() > 0:
                collected.append(x + 1)
            else:
                collected.append(y - 1)
            return collected[0]
    """,
    "data_dependent_and_or": """
        def f(x, y):
            if (x > 0).all() or (torch.isnan(y).any() and y.sum() > 1):
                z = x + y
            else:
                z = x - y
            return z
    """,
    "static_prefix_one_armed": """
        def f(x, y, mask=None):
            h = y * 1.0
            if mask is None and (x == 0.5).any():
                h = h * 2
            return h
    """,
    "name_read_only_by_later_augmented_assignment": """
        def f(x, y):
            if x.sum() > 0:
                h = x + 1.0
            else:
                h = x - 1.0
            h += y
            return x * 2.0
    """,
    "pure_helper_call_in_arm": """
        def scale(v, k):
            return v * k

        def f(x, y):
            if x.sum() > 0:
                z = scale(x, 2)
            else:
                z = scale(y, 3)
            return z
    """,
}


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_must_rewrite_removes_every_break(name, sign):
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(MUST_REWRITE[name]))
    assert any(f.rule == "Where" and f.fixed for f in result.findings), result.findings
    x = torch.linspace(-1, 2, 6) * sign
    y = torch.linspace(3, -2, 6)
    assert breaks(original.f, x, y) >= 1
    assert breaks(mended.f, x, y) == 0
    assert_equivalent(original.f, mended.f, x, y)


def test_mismatched_shapes_fall_back_to_the_original_choice():
    """``torch.where`` would broadcast; ``select`` keeps the taken arm's exact value."""
    source = PRELUDE + textwrap.dedent(
        """
        def f(x, y):
            if x.sum() > 0:
                z = x + 0
            else:
                z = y + 0
            return z
        """
    )
    original, mended, _ = original_and_mended(source)
    for x in (torch.ones(3), -torch.ones(3)):
        assert_equivalent(original.f, mended.f, x, torch.ones(1, 3))


MUST_NOT_REWRITE = {
    "arm_divides": ("def f(x, y):\n    if x.sum() > 0:\n        z = x / y\n    else:\n        z = x\n    return z", "may raise"),
    "arm_indexes": ("def f(x, y):\n    if x.sum() > 0:\n        z = x[3]\n    else:\n        z = y\n    return z", "indexes"),
    "arm_matmul": ("def f(x, y):\n    if x.sum() > 0:\n        z = x @ y\n    else:\n        z = y\n    return z", "may raise"),
    "arm_calls_impure_function": (
        "def noisy_double(v):\n    print('doubling')\n    return v * 2\n"
        "def f(x, y):\n    if x.sum() > 0:\n        z = noisy_double(x)\n    else:\n        z = y\n    return z",
        "noisy_double",
    ),
    "arm_calls_unresolved_function": (
        "def f(x, y, helper):\n    if x.sum() > 0:\n        z = helper(x)\n    else:\n        z = y\n    return z",
        "not known to be free of exceptions",
    ),
    "arm_writes_attribute": (
        "def f(self, x):\n    if x.sum() > 0:\n        self.count = 1\n    else:\n        self.count = 2\n    return x",
        "escapes",
    ),
    "arm_raises": (
        "def f(x, y):\n    if x.sum() > 0:\n        z = x\n        raise ValueError('p')\n    else:\n        z = y\n    return z",
        "leaves the branch",
    ),
    "one_arm_returns": (
        "def f(x, y):\n    if x.sum() > 0:\n        return x\n    else:\n        z = y\n    return z * 2",
        "one arm returns",
    ),
    "returns_none": ("def f(x):\n    if x.sum() > 0:\n        return None\n    return None", "returns None"),
    "selected_value_is_fresh": (
        "def f(x, y):\n    if x.sum() > 0:\n        z = x\n    else:\n        z = y\n    return z",
        "existed before the branch",
    ),
    "bound_on_one_path_only": (
        "def f(x, y):\n    if x.sum() > 0:\n        z = x + 1\n    return z", "one path only",
    ),
    # (a condition on ``.item()`` alone is no candidate: test_a_branch_on_an_item_value...)
    "item_condition": (
        "def f(x):\n    if x.sum().item() > 0 and (x > 1).any():\n        x = x + 1\n    return x", ".item()",
    ),
    "short_circuit_operand_may_raise": (
        "def f(x):\n    if (x > 0).all() and (x.sum() / x.max()) > 0:\n        x = x + 1\n    return x", "short-circuits",
    ),
    "static_and_with_else_arm": (
        "def f(x, m):\n    if m is not None and (m > 0).any():\n        x = x + 1\n    else:\n        x = x - 1\n"
        "    return x",
        "else arm",
    ),
    "arm_breaks_loop": (
        "def f(x):\n    for i in range(3):\n        if x.sum() > i:\n            break\n        x = x + 1\n    return x",
        "leaves the branch",
    ),
    "augmented_assignment_in_arm": (
        "def f(x, y):\n    if y.sum() > 0:\n        x += 1.0\n    return x * 2.0", "in place",
    ),
    "unpacks_unknown_value": (
        "def f(x, pair):\n    if x.sum() > 0:\n        a, b = pair\n    else:\n        a, b = x, x\n    return a",
        "unpacking",
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_must_not_rewrite_leaves_source_untouched(name):
    body, expected_reason = MUST_NOT_REWRITE[name]
    source = PRELUDE + body
    result = mend(source, rules=("where",))
    assert not result.changed and result.source == source
    reasons = finding_reasons(result, "Where")
    assert reasons and any(expected_reason in r for r in reasons), reasons


def test_a_static_and_part_is_named_as_the_condition_of_the_break():
    """Issue 17 (check's precision): ``if h.dtype == torch.float16 and (...).any():``
    breaks only in half precision; the finding says so instead of claiming a break."""
    source = PRELUDE + textwrap.dedent(
        """
        def f(h):
            if h.dtype == torch.float16 and (torch.isinf(h).any() or torch.isnan(h).any()):
                h = torch.clamp(h, min=-1.0, max=1.0)
            return h
        """
    )
    (finding,) = mend(source).findings
    assert finding.message.endswith(", a break only when `h.dtype == torch.float16`")
    unconditional = mend(PRELUDE + "def f(h):\n    if h.sum() > 0:\n        h = h + 1.0\n    return h\n")
    assert "only when" not in unconditional.findings[0].message


def test_a_branch_on_an_item_value_is_not_a_candidate():
    """Issue 17 (check's precision): ``flag = x.any().item()`` breaks at ``.item()``
    (reported there, TI); ``if flag:`` branches on a Python bool and does not break."""
    source = PRELUDE + textwrap.dedent(
        """
        def f(x):
            flag = x.any().item()
            if flag:
                x = x + 1.0
            if x.sum().item() > 0 and (x > 1).any():
                x = x * 2.0
            return x
        """
    )
    result = mend(source)
    assert [(f.line - PRELUDE.count("\n"), f.category) for f in result.findings] == [
        (3, "TI"), (6, "DC"), (6, "TI"),
    ]


def test_static_conditions_are_not_candidates():
    source = PRELUDE + textwrap.dedent(
        """
        def f(self, x, mask=None):
            if hasattr(self, "cache") and mask is not None:
                x = x + 1
            if x.shape[-1] > 3 and x.dtype == torch.float32:
                x = x * 2
            return x
        """
    )
    result = mend(source)
    assert not result.changed and result.findings == []
