"""[Where] soundness (issue 15): each class of behaviour change has a named legality
predicate (must-not-rewrite table, one row per predicate) or a mechanism that keeps
the rewrite exact, and a differential check: original run eagerly against mended run
eagerly and compiled (``eager`` and ``aot_eager``), comparing the value or exception,
gradients, the state of the inputs and globals, and the random generator afterwards.
"""

import textwrap

import pytest
import torch

from graphmend.runtime import reset
from graphmend.runtime.store import store
from helpers import (
    breaks,
    finding_reasons,
    graphs_and_outcomes_over_calls,
    mend,
    original_and_mended,
)

PRELUDE = "import torch\nimport torch.nn.functional as F\n"

# name -> (source, expected reason, arguments). Each row is named after the predicate
# (or the part of ExpressionSafety) that declines it.
MUST_NOT_REWRITE = {
    # 1. in-place writes through a keyword or a trailing-underscore method
    "writes_through_keyword_inplace": (
        """
        def f(x, y):
            if x.sum() > 100:
                z = F.relu(y, inplace=True)
            else:
                z = y * 2
            return z
        """, "inplace=", lambda: (torch.ones(3), torch.tensor([-1.0, 2.0, -3.0])),
    ),
    "writes_through_keyword_out": (
        """
        def f(x, y, buf):
            if x.sum() > 100:
                z = torch.exp(x, out=buf)
            else:
                z = x * 2
            return z
        """, "out=", lambda: (torch.ones(3), torch.ones(3), torch.zeros(3)),
    ),
    "updates_in_place_method": (
        """
        def f(x, y):
            if x.sum() > 100:
                z = y.add_(1) * 2
            else:
                z = y * 3
            return z
        """, "in place", lambda: (torch.ones(3), torch.ones(3)),
    ),
    "updates_in_place_in_helper": (
        """
        def act(v):
            return F.relu(v, inplace=True)

        def f(x, y):
            if x.sum() > 100:
                z = act(y)
            else:
                z = y * 3
            return z
        """, "inplace=", lambda: (torch.ones(3), torch.tensor([-1.0, 2.0, -3.0])),
    ),
    # 2. aliasing: torch.where returns a new tensor
    "selected_value_is_fresh_names": (
        """
        def f(x, y):
            if x.sum() > 0:
                z = x
            else:
                z = y
            z.mul_(10)
            return z is x
        """, "existed before the branch", lambda: (torch.ones(3), torch.ones(3)),
    ),
    "selected_value_is_fresh_returns": (
        """
        def f(x, y):
            if x.sum() > 0:
                return x
            return y

        def g(x, y):
            return f(x, y) is x
        """, "existed before the branch", lambda: (torch.ones(3), torch.ones(3)),
    ),
    "selected_value_is_fresh_attributes": (
        """
        class Box:
            def __init__(self):
                self.w = torch.ones(3)
                self.v = torch.zeros(3)

        def f(x, box):
            if x.sum() > 0:
                z = box.w
            else:
                z = box.v
            return z is box.w
        """, "may be an existing object", lambda: (torch.ones(3), None),
    ),
    "selected_value_is_fresh_inplace_call_returns_its_argument": (
        # long fuzz run seed 20937: ``F.relu(x, inplace=True)`` returns ``x`` itself
        """
        def f(x, y):
            y = F.relu(y, inplace=True)
            x = F.relu(x, inplace=True)
            if (x > 1).any():
                return x
            return y

        def g(x, y):
            return f(x, y) is x
        """, "existed before the branch", lambda: (torch.tensor([0.5, 2.0, -1.0]), torch.ones(3)),
    ),
    "selected_value_is_fresh_inplace_positional": (
        """
        def f(x, y):
            y = F.relu(y, True)
            x = F.relu(x, True)
            if (x > 1).any():
                return x
            return y

        def g(x, y):
            return f(x, y) is x
        """, "existed before the branch", lambda: (torch.tensor([0.5, 2.0, -1.0]), torch.ones(3)),
    ),
    "selected_value_is_fresh_earlier_alias": (
        """
        def f(x, y):
            z = x * 2
            kept = z
            if y.sum() > 0:
                z = z + 1
            z.mul_(10)
            return kept
        """, "referred to elsewhere", lambda: (torch.ones(3), -torch.ones(3)),
    ),
    "carried_value_is_the_only_reference_read_after": (
        # long fuzz run seeds 2530 and 2553: ``y`` still names the object ``z`` updates
        """
        def f(x, y):
            a = x * 1.0
            b = y * 1.0
            if x.sum() > 0:
                z = a
            else:
                z = b
            z.mul_(10)
            return a + b
        """, "still read after the branch", lambda: (torch.ones(3), torch.ones(3)),
    ),
    "carried_value_is_the_only_reference_passed_twice": (
        """
        def f(x, y):
            a = x * 1.0
            if x.sum() > 0:
                z = a
                w = a
            else:
                z = y * 2
                w = y * 3
            z.mul_(10)
            return w
        """, "on twice", lambda: (torch.ones(3), torch.ones(3)),
    ),
    "selected_names_hold_distinct_objects": (
        """
        def f(x, y):
            if x.sum() > 0:
                z = x * 2
                w = z
            else:
                z = y * 2
                w = y * 3
            z.mul_(10)
            return w
        """, "hold one object in an arm", lambda: (torch.ones(3), torch.ones(3)),
    ),
    "nothing_updated_in_place_while_selected_is_read": (
        """
        def f(x, y):
            if x.sum() > 0:
                z = x
            else:
                z = y
            x.mul_(2)
            return z * 1
        """, "updates a tensor in place (line", lambda: (torch.ones(3), torch.ones(3)),
    ),
    # 3. the merged call must mean one callee
    "merged_call_means_one_callee_receiver": (
        """
        def f(x, first, second):
            if x.sum() > 0:
                dst = first
                dst.append(x + 1)
            else:
                dst = second
                dst.append(x - 1)
            return len(first), len(second)
        """, "which an arm binds", lambda: (-torch.ones(3), [], []),
    ),
    "merged_call_means_one_callee_keyword": (
        """
        def record(value, log, tag):
            log.append(tag)

        def f(x, log):
            if x.sum() > 0:
                t = 1
                record(x + 1, log, tag=t)
            else:
                t = 2
                record(x - 1, log, tag=t)
            return log
        """, "which an arm binds", lambda: (-torch.ones(3), []),
    ),
    # 4. global and nonlocal writes
    "writes_no_outer_name_global": (
        """
        last = None

        def f(x):
            global last
            if x.sum() > 0:
                last = x + 1
            else:
                last = x - 1
            return x * 2
        """, "global or nonlocal", lambda: (torch.ones(3),),
    ),
    "writes_no_outer_name_nonlocal": (
        """
        def f(x):
            last = x * 0

            def inner():
                nonlocal last
                if x.sum() > 0:
                    last = x + 1
                else:
                    last = x - 1
                return x * 2

            inner()
            return last
        """, "global or nonlocal", lambda: (torch.ones(3),),
    ),
    "writes_no_outer_name_locals": (
        """
        def f(x):
            if x.sum() > 0:
                z = x + 1
            else:
                z = x - 1
            return sorted(k for k in locals() if not k.startswith('_'))
        """, "locals", lambda: (torch.ones(3),),
    ),
    # 6. random draws
    "draws_random_numbers_rand_like": (
        """
        def f(x):
            if x.sum() > 100:
                z = torch.rand_like(x)
            else:
                z = x * 2
            return z
        """, "random", lambda: (torch.ones(3),),
    ),
    "draws_random_numbers_dropout": (
        """
        def f(x, training=False):
            if x.sum() > 100:
                z = F.dropout(x, p=0.5, training=training)
            else:
                z = x * 2
            return z
        """, "random", lambda: (torch.ones(3),),
    ),
    "draws_random_numbers_rrelu": (
        """
        def f(x):
            if x.sum() > 100:
                z = F.rrelu(x, training=True)
            else:
                z = x * 2
            return z
        """, "random", lambda: (torch.ones(3),),
    ),
    "draws_random_numbers_gumbel_softmax": (
        """
        def f(x):
            if x.sum() > 100:
                z = F.gumbel_softmax(x)
            else:
                z = x * 2
            return z
        """, "random", lambda: (torch.ones(3),),
    ),
    "draws_random_numbers_in_helper": (
        """
        def noise(v):
            return v + torch.randn_like(v)

        def f(x):
            if x.sum() > 100:
                z = noise(x)
            else:
                z = x * 2
            return z
        """, "random", lambda: (torch.ones(3),),
    ),
    # 7. code that raises on the untaken path
    "call_is_safe_embedding": (
        """
        def f(x, ids, table):
            if x.sum() > 100:
                z = F.embedding(ids, table)
            else:
                z = x * 2
            return z
        """, "not known to be free of exceptions", lambda: (torch.ones(3), torch.tensor([7]), torch.ones(2, 3)),
    ),
    "call_is_safe_gather": (
        """
        def f(x, ids):
            if x.sum() > 100:
                z = torch.gather(x, 0, ids)
            else:
                z = x * 2
            return z
        """, "not known to be free of exceptions", lambda: (torch.ones(3), torch.tensor([9, 9, 9])),
    ),
    "helper_is_safe_integer_division": (
        """
        def per_head(v, heads):
            return v * (12 // heads)

        def f(x, heads):
            if x.sum() > 100:
                z = per_head(x, heads)
            else:
                z = x * 2
            return z
        """, "may raise", lambda: (torch.ones(3), 0),
    ),
    "negative_integer_power": (
        """
        def f(x, counts):
            if x.sum() > 100:
                z = counts ** -1
            else:
                z = x * 2
            return z
        """, "exponents", lambda: (torch.ones(3), torch.tensor([1, 2, 3])),
    ),
}


def _source(body: str) -> str:
    return PRELUDE + textwrap.dedent(body)


@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_must_not_rewrite(name):
    body, expected, _ = MUST_NOT_REWRITE[name]
    source = _source(body)
    result = mend(source, rules=("where",))
    assert not result.changed and result.source == textwrap.dedent(source)
    reasons = finding_reasons(result, "Where")
    assert reasons and any(expected in r for r in reasons), reasons


# --- the differential check ----------------------------------------------------------

def _snapshot(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", value.detach().clone(), value.grad.clone() if value.grad is not None else None)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_snapshot(v) for v in value])
    if isinstance(value, dict):
        return ("dict", {k: _snapshot(v) for k, v in value.items()})
    if isinstance(value, (int, float, bool, str, type(None))):
        return value
    return ("object", _snapshot(dict(vars(value))) if hasattr(value, "__dict__") else type(value).__name__)


def _same(first, second) -> bool:
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return (
            isinstance(first, torch.Tensor)
            and isinstance(second, torch.Tensor)
            and first.shape == second.shape
            and first.dtype == second.dtype
            and first.stride() == second.stride()
            and torch.equal(first, second)
        )
    if isinstance(first, (list, tuple)):
        return type(first) is type(second) and len(first) == len(second) and all(
            _same(a, b) for a, b in zip(first, second)
        )
    if isinstance(first, dict):
        return isinstance(second, dict) and first.keys() == second.keys() and all(
            _same(first[k], second[k]) for k in first
        )
    return first == second


def _run(module, entry, make_args, backend=None, grad=False):
    torch.manual_seed(1234)
    args = make_args(module)
    function = getattr(module, entry)
    if backend is not None:
        torch._dynamo.reset()
        function = torch.compile(function, backend=backend, dynamic=False)
    try:
        value = function(*args)
        error = None
    except Exception as exception:  # noqa: BLE001 - the exception is part of the behaviour compared
        value, error = None, (type(exception).__name__, str(exception).splitlines()[0])
    if grad and error is None:
        value.sum().backward()
    globals_ = {k: _snapshot(v) for k, v in vars(module).items() if isinstance(v, (torch.Tensor, int, list))}
    return {
        "value": _snapshot(value),
        "error": error,
        "args": [_snapshot(a) for a in args],
        "globals": globals_,
        "rng": torch.get_rng_state(),
    }


def assert_same_behaviour(source, make_args, entry="f", grad=False, expect_fixed=None):
    original, mended, result = original_and_mended(source)
    if expect_fixed is not None:
        assert any(f.rule == "Where" and f.fixed for f in result.findings) == expect_fixed, result.findings
    reference = _run(original, entry, make_args, grad=grad)
    for backend in (None, "eager", "aot_eager"):
        # A fresh module each run: globals start from the same state.
        mended = original_and_mended(source)[1]
        observed = _run(mended, entry, make_args, backend=backend, grad=grad)
        for key in reference:
            assert _same(reference[key], observed[key]), (backend, key, reference[key], observed[key])
    return original, mended


def _arguments_for(name):
    make = MUST_NOT_REWRITE[name][2]

    def make_args(module):
        args = list(make())
        if name == "selected_value_is_fresh_attributes":
            args[1] = module.Box()
        return tuple(args)

    return make_args


@pytest.mark.default_tier_stride(3)
@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_differential_for_declined_classes(name):
    body, _, _ = MUST_NOT_REWRITE[name]
    entry = "g" if "def g(" in body else "f"
    assert_same_behaviour(_source(body), _arguments_for(name), entry=entry)


# --- mechanisms that keep the rewrite exact -----------------------------------------

def test_select_falls_back_under_autograd_no_nan_gradient():
    """5: ``x ** 0.5`` has an infinite derivative at 0; ``torch.where`` would make x.grad NaN."""
    source = _source(
        """
        def f(x):
            w = x * 1.0
            if w.sum() > 100:
                z = w ** 0.5
            else:
                z = w * 2
            return z
        """
    )
    make_args = lambda module: (torch.tensor([0.0, 1.0, 2.0], requires_grad=True),)  # noqa: E731
    original, mended = assert_same_behaviour(source, make_args, grad=True, expect_fixed=True)
    x = make_args(None)[0]
    compiled = torch.compile(mended.f, backend="aot_eager")
    torch._dynamo.reset()
    compiled(x).sum().backward()
    assert not torch.isnan(x.grad).any() and torch.equal(x.grad, torch.full((3,), 2.0))
    # Without autograd the same rewrite selects inside the graph.
    with torch.no_grad():
        assert breaks(mended.f, torch.tensor([0.0, 1.0, 2.0])) == 0


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["true_arm", "false_arm"])
def test_a_selection_of_values_without_grad_joins_a_graph_that_records_autograd(sign):
    """A mask chosen from an input that requires no grad, used with a value that does:
    autograd never reaches the selection or its arms, so it joins the graph that
    differentiates ``w`` (``whole_trace_conditions.joins_under_grad``), with the same
    value and gradient as the original, which broke at the branch."""
    reset()
    source = _source(
        """
        def f(w, x):
            if x.sum() > 0:
                m = (x > 0) * 1.0
            else:
                m = (x > -0.5) * 1.0
            return torch.tanh(x @ w) * m
        """
    )
    make_args = lambda module: (  # noqa: E731
        torch.linspace(-1.0, 1.0, 9).reshape(3, 3).requires_grad_(),
        sign * (torch.arange(9.0).reshape(3, 3) / 8.0 - 0.25),
    )
    original, mended = assert_same_behaviour(source, make_args, grad=True, expect_fixed=True)
    assert breaks(original.f, *make_args(None)) == 1
    assert breaks(mended.f, *make_args(None)) == 0
    assert not store.trace_time_declines


def test_select_falls_back_when_the_arms_are_laid_out_differently():
    """``torch.where`` lays its result out as its first tensor operand: with ``x``
    transposed by the caller and the false arm taken, ``z`` came back laid out as
    ``x * 2`` (strides (1, 3)) where the original returns ``y + 1`` (3, 1), so
    ``z.is_contiguous()``, ``z.stride()`` and ``z.view(-1)`` changed."""
    source = _source(
        """
        def f(x, y):
            if y.sum() > 0:
                z = x * 2.0
            else:
                z = y + 1.0
            return z
        """
    )
    transposed = lambda: torch.arange(9.0).reshape(3, 3).t()  # noqa: E731
    make_args = lambda module: (transposed(), -torch.ones(3, 3))  # noqa: E731
    original, mended = assert_same_behaviour(source, make_args, expect_fixed=True)
    compiled = torch.compile(mended.f, backend="eager", dynamic=False)
    torch._dynamo.reset()
    assert compiled(*make_args(None)).stride() == (3, 1)
    # Arms laid out alike: the selection stays in the graph.
    assert breaks(mended.f, transposed(), -transposed()) == 0
    # Operands laid out differently keep the original branch and its one break.
    assert breaks(mended.f, *make_args(None)) == breaks(original.f, *make_args(None)) == 1
    # Laid out alike under dynamic shapes (symbolic strides): still one graph, each call.
    torch._dynamo.reset()
    whole = torch.compile(mended.f, backend="eager", dynamic=True, fullgraph=True)
    for rows in (3, 4, 6):
        x, y = (torch.randn(rows, rows + 1).t() for _ in range(2))
        assert whole(x, y).stride() == (1, rows + 1)


@pytest.mark.parametrize("read_after", [False, True])
def test_only_names_read_after_the_branch_are_selected(read_after):
    """Seeds 72900 and 81724: ``h`` is read before the branch and rebound in it, but
    nothing reads it after. Selecting it anyway would read its earlier value on the
    compiled path, so the graph before the break would return ``sqrt(x * 0.25)`` where
    the original's does not, and AOTAutograd's backward would multiply that unused
    output's zero gradient by ``sqrt``'s infinite derivative at 0: ``x.grad`` NaN where
    the original's is 3. With a later read the selection is needed (the original's graph
    returns ``h`` then too, so no ``sqrt`` there: TorchDynamo alone would give NaN)."""
    earlier = "x * 0.25" if read_after else "torch.sqrt(x * 0.25)"
    source = _source(
        f"""
        def f(x, y):
            h = {earlier}
            z = x * h.shape[0]
            torch._dynamo.graph_break()
            if y.sum() > 0:
                h = y * 2.0
            return {"z + h" if read_after else "z + 1.0"}
        """
    )
    make_args = lambda module: (torch.tensor([0.0, 1.0, 4.0], requires_grad=True), torch.ones(3))  # noqa: E731
    assert_same_behaviour(source, make_args, grad=True, expect_fixed=True)
    assert ("h = __graphmend__.select(" in mend(source).source) == read_after


def test_a_name_read_in_finally_after_a_return_is_selected():
    """The ``finally`` block reads ``h`` after the ``return`` leaves the try: the branch's
    value must be selected (the analysis once missed the jump into ``finally``)."""
    source = _source(
        """
        SEEN = []

        def f(x):
            h = x * 2
            try:
                if x.sum() > 0:
                    h = x + 1
                return x * 3
            finally:
                SEEN.append(h * 1)
        """
    )
    make_args = lambda module: (torch.tensor([1.0, 2.0, 3.0]),)  # noqa: E731
    assert_same_behaviour(source, make_args, expect_fixed=True)
    assert "h = __graphmend__.select(" in mend(source).source


@pytest.mark.parametrize("shape_y", [(3,), (4,)])
def test_operands_combine_checked_while_tracing(shape_y):
    """7: a shape mismatch in the untaken arm: the compiled form keeps the original."""
    source = _source(
        """
        def f(x, y):
            if x.sum() > 100:
                z = x + y
            else:
                z = x * 2
            return z
        """
    )
    make_args = lambda module: (torch.ones(3), torch.ones(shape_y))  # noqa: E731
    original, mended = assert_same_behaviour(source, make_args, expect_fixed=True)
    expected_breaks = 0 if shape_y == (3,) else 1
    assert breaks(mended.f, *make_args(None)) == expected_breaks


@pytest.mark.parametrize("second", [torch.ones(3), None])
def test_and_or_operand_checked_while_tracing(second):
    """7: ``and``/``or`` evaluates every operand; an operand that would raise keeps the original."""
    source = _source(
        """
        def f(x, y):
            if (x > 5).all() and (x + y).sum() > 0:
                z = x + 1
            else:
                z = x * 2
            return z
        """
    )
    make_args = lambda module: (torch.ones(3), second)  # noqa: E731
    assert_same_behaviour(source, make_args, expect_fixed=True)


def test_bool_operand_of_subtraction_keeps_the_original():
    source = _source(
        """
        def f(x, flags):
            if x.sum() > 100:
                z = x - flags
            else:
                z = x * 2
            return z
        """
    )
    make_args = lambda module: (torch.ones(3), torch.tensor([True, False, True]))  # noqa: E731
    assert_same_behaviour(source, make_args, expect_fixed=True)


MEMOIZED = """
class Cache:
    pass

def f(x, owner):
    if x.sum() > 100:
        if not hasattr(owner, "table"):
            owner.table = x * 3
        z = x + 1
    else:
        z = x * 2
    return z, hasattr(owner, "table")
"""


def test_memoized_initialization_exists_already_absent():
    """8: the initialization would create ``owner.table`` on the untaken path."""
    make_args = lambda module: (torch.ones(3), module.Cache())  # noqa: E731
    original, mended = assert_same_behaviour(_source(MEMOIZED), make_args, expect_fixed=True)
    owner = mended.Cache()
    torch._dynamo.reset()
    torch.compile(mended.f, backend="eager")(torch.ones(3), owner)
    assert not hasattr(owner, "table")


def test_memoized_initialization_exists_already_present_is_whole():
    def make_args(module):
        owner = module.Cache()
        owner.table = torch.zeros(3)
        return torch.ones(3), owner

    original, mended = assert_same_behaviour(_source(MEMOIZED), make_args, expect_fixed=True)
    assert breaks(mended.f, *make_args(mended)) == 0
    assert breaks(original.f, *make_args(original)) >= 1


def test_device_move_moves_nothing_is_whole():
    source = _source(
        """
        class Holder:
            def __init__(self):
                self.table = torch.ones(3)

            def step(self, x, device):
                if x.sum() > 100:
                    self.table = self.table.to(device)
                    z = x + 1
                else:
                    z = x * 2
                return z

        def f(holder, x, device):
            return holder.step(x, device)
        """
    )
    make_args = lambda module: (module.Holder(), torch.ones(3), torch.device("cpu"))  # noqa: E731
    original, mended = assert_same_behaviour(source, make_args, expect_fixed=True)


def test_earlier_fresh_local_may_be_replaced():
    """2: an earlier local nothing else refers to can be replaced by a new tensor."""
    source = _source(
        """
        def f(x, y):
            z = x * 2
            if y.sum() > 0:
                z = z + 1
            return z
        """
    )
    make_args = lambda module: (torch.ones(3), -torch.ones(3))  # noqa: E731
    original, mended = assert_same_behaviour(source, make_args, expect_fixed=True)
    assert breaks(mended.f, *make_args(None)) == 0


def test_names_read_in_a_loop_condition_are_kept():
    """4: in a loop the branch's own condition reads the name the arm writes."""
    source = _source(
        """
        def f(x):
            count = x * 0.0
            z = x * 1.0
            for _ in range(3):
                if z.sum() > 0:
                    z = z - 1
                    count = count + 1
                else:
                    z = z + 1
                    count = count - 1
            return count
        """
    )
    make_args = lambda module: (torch.ones(3),)  # noqa: E731
    assert_same_behaviour(source, make_args)


def test_and_or_operand_needing_a_check_declines_trap():
    """Trap cannot check operands while tracing: an and/or operand combining two
    outside values declines there."""
    source = _source(
        """
        def f(x, y):
            if (x > 5).all() and (x + y).sum() > 0:
                raise ValueError("bad")
            return x
        """
    )
    result = mend(source, rules=("trap",))
    assert not result.changed
    assert any("known only while tracing" in r for r in finding_reasons(result, "Trap"))


def test_selected_name_is_only_consumed_allows_existing_objects():
    """2: ``z = x`` / ``z = y`` is exact when ``z`` is only consumed (never kept,
    returned, compared by identity or updated in place) after the branch."""
    source = _source(
        """
        def f(x, y):
            if x.sum() > 0:
                z = x
            else:
                z = y
            return torch.relu(z) * 2
        """
    )
    make_args = lambda module: (-torch.ones(3), torch.ones(3))  # noqa: E731
    assert_same_behaviour(source, make_args, expect_fixed=True)
    original, mended, _ = original_and_mended(source)
    assert breaks(mended.f, *make_args(None)) == 0


def test_selected_name_is_only_consumed_declines_identity_and_in_place():
    for tail in ("return z is x", "z.mul_(10)\n    return x", "return z"):
        source = _source(
            "def f(x, y):\n    if x.sum() > 0:\n        z = x\n    else:\n        z = y\n    " + tail + "\n"
        )
        result = mend(source, rules=("where",))
        assert not result.changed, tail
        assert any("existed before the branch" in r for r in finding_reasons(result, "Where")), tail


@pytest.mark.parametrize(
    "arm, arguments",
    [
        ("z = torch.exp(scale) * x", (torch.ones(3), 2.0)),
        ("z = torch.maximum(x, scale)", (torch.ones(3), 2.0)),
        ("z = x * scale.abs()", (torch.ones(3), 2.0)),
    ],
)
def test_torch_functions_need_tensor_operands(arm, arguments):
    """7: ``torch.exp(2.0)`` raises TypeError: a Python number reaching a torch function
    on the untaken path keeps the original (the check made while tracing fails)."""
    source = _source(
        f"def f(x, scale):\n    if x.sum() > 100:\n        {arm}\n    else:\n        z = x * 2\n    return z\n"
    )
    assert_same_behaviour(source, lambda module: arguments)


def test_where_condition_must_be_bool():
    source = _source(
        "def f(x, mask):\n    if x.sum() > 100:\n        z = torch.where(mask, x, x * 2)\n"
        "    else:\n        z = x * 2\n    return z\n"
    )
    result = mend(source, rules=("where",))
    assert not result.changed
    assert any("bool tensor" in r for r in finding_reasons(result, "Where"))
    assert_same_behaviour(source, lambda module: (torch.ones(3), torch.tensor([1, 0, 1])))


def test_carried_value_unread_after_may_be_replaced():
    """2: ``z = b`` with ``b`` new, unaliased and not read after the branch: ``z`` is the
    only name of that object, so a new tensor in its place is indistinguishable."""
    source = _source(
        """
        def f(x, y):
            a = x * 1.0
            b = y * 1.0
            if x.sum() > 0:
                z = a
            else:
                z = b
            z.mul_(10)
            return z
        """
    )
    make_args = lambda module: (-torch.ones(3), torch.ones(3))  # noqa: E731
    assert_same_behaviour(source, make_args, expect_fixed=True)
    original, mended, _ = original_and_mended(source)
    assert breaks(mended.f, *make_args(None)) == 0


def test_selected_existing_object_read_before_any_update_is_whole():
    """2: the selected existing object may be updated once every read of the selection
    is done (the update then cannot show through it)."""
    source = _source(
        """
        def f(x, y):
            if x.sum() > 0:
                z = x
            else:
                z = y
            w = torch.relu(z) * 2
            x.mul_(2)
            return w
        """
    )
    make_args = lambda module: (torch.ones(3), -torch.ones(3))  # noqa: E731
    assert_same_behaviour(source, make_args, expect_fixed=True)


RANDOM_DRAW_BEFORE_THE_BRANCH = {
    # long fuzz run seed 2049: the dead draw would sit in one graph with the code after
    # the branch, and AOTAutograd drops it (the original graph returned it at the break)
    "dead_draw_in_the_function": """
        def f(x, y):
            h = x + torch.rand_like(y)
            if (x > 0).all():
                h = x * 1.5
            else:
                h = x * 3.0
            return h * 2
        """,
    "draw_only_the_untaken_arm_reads": """
        def f(x, y):
            n = torch.rand_like(y)
            if (x > 0).all():
                h = x * 1.5
            else:
                h = x + n
            return h * 2
        """,
    "draw_in_a_caller": """
        def g(x, n):
            if (x > 0).all():
                h = x * 1.5
            else:
                h = x * 3.0
            return h * 2

        def f(x, y):
            return g(x, torch.rand_like(y))
        """,
    "draw_behind_a_module_call": """
        class Noisy(torch.nn.Module):
            def forward(self, v):
                return v + torch.rand_like(v)

        NOISY = Noisy()

        def f(x, y):
            h = NOISY(y)
            if (x > 0).all():
                h = x * 1.5
            else:
                h = x * 3.0
            return h * 2
        """,
    "draw_after_the_branch_in_a_loop": """
        def f(x, y):
            h = x * 1.0
            for _ in range(2):
                if (h > 0).all():
                    h = h * 1.5
                else:
                    h = h * 3.0
                n = h + torch.rand_like(y)
            return h
        """,
    "arms_of_names_only": """
        def f(x, y):
            a = x * 1.0
            b = y * 1.0
            n = a + torch.rand_like(y)
            if x.sum() > 0:
                z = a
                n = b
            else:
                z = b
                n = a
            return z * 2 + n
        """,
}


@pytest.mark.default_tier_stride(2)
@pytest.mark.parametrize("name", sorted(RANDOM_DRAW_BEFORE_THE_BRANCH))
def test_random_draw_traced_before_the_branch_keeps_the_original(name):
    """6: the rewrite is made, and checked while tracing: when the graph captured up to
    the branch draws random numbers, the compiled form keeps the original branch (and
    its break), so the generator advances as in the original."""
    source = _source(RANDOM_DRAW_BEFORE_THE_BRANCH[name])
    make_args = lambda module: (torch.ones(3), torch.ones(3))  # noqa: E731
    original, mended = assert_same_behaviour(source, make_args, expect_fixed=True)
    assert breaks(mended.f, *make_args(None)) >= 1


def test_random_draw_in_an_earlier_graph_is_whole():
    """6: a draw before an earlier break is in another graph: the rewrite after that
    break stays whole (here the earlier break is the first branch, kept because the
    draw is in its graph)."""
    source = _source(
        """
        def f(x, y):
            n = torch.rand_like(y)
            if n.sum() > 100:
                n = n * 2
            if (x > 0).all():
                h = x * 1.5
            else:
                h = x * 3.0
            return h * 2 + n
        """
    )
    make_args = lambda module: (torch.ones(3), torch.ones(3))  # noqa: E731
    original, mended = assert_same_behaviour(source, make_args, expect_fixed=True)
    assert breaks(original.f, *make_args(None)) == 2
    assert breaks(mended.f, *make_args(None)) == 1


def test_random_draw_after_the_branch_keeps_the_rewrite():
    """6: a draw after the branch (not in a loop) is in the same graph either way."""
    source = _source(
        """
        def f(x, y):
            if (x > 0).all():
                h = x * 1.5
            else:
                h = x * 3.0
            return h + torch.rand_like(y)
        """
    )
    make_args = lambda module: (torch.ones(3), torch.ones(3))  # noqa: E731
    original, mended = assert_same_behaviour(source, make_args, expect_fixed=True)
    assert breaks(mended.f, *make_args(None)) == 0


def test_value_saved_for_backward_updated_after_the_branch_keeps_the_original():
    """7 (seed 2209's shape): ``sigmoid`` saves its output for backward and ``relu_``
    updates it after the branch. Apart (the original's break between them) AOTAutograd
    compiles both graphs; in one graph its compile fails (BackendCompilerFailed), and
    the frame is traced again with the branch kept (``backend_compiles_the_joined_graph``)."""
    source = _source(
        """
        def f(x, y):
            h = torch.sigmoid(x)
            if y.sum() > 0:
                z = y * 2
            else:
                z = y * 3
            F.relu(h, inplace=True)
            return z + 1, h * 1
        """
    )
    make_args = lambda module: (torch.rand(3, requires_grad=True), torch.ones(3))  # noqa: E731
    original, mended = assert_same_behaviour(source, make_args, expect_fixed=True)
    with torch.no_grad():
        assert breaks(mended.f, *make_args(None)) == 0


@pytest.mark.parametrize(
    "between, rewritten",
    [
        ("h = x.abs() * 2.0 + y\n    h.mul_(2.0)", True),   # h is new since the branch
        ("y.mul_(2.0)", False),                              # y may be the selected object
        ("h = y\n    h.mul_(2.0)", False),                   # h names an existing object
    ],
)
def test_update_between_branch_and_read_of_an_existing_selected_object(between, rewritten):
    """2: ``nothing_updated_in_place_while_selected_is_read`` looks past an update of an
    object created after the branch (generated program seed 11 stays whole)."""
    source = _source(
        "def f(x, y):\n    if x.sum() > 0:\n        z = x\n    else:\n        z = y\n"
        f"    {between}\n    return z * 1\n"
    )
    result = mend(source, rules=("where",))
    assert result.changed == rewritten, finding_reasons(result, "Where")
    assert_same_behaviour(source, lambda module: (-torch.ones(3), torch.ones(3)))


@pytest.mark.parametrize(
    "body",
    [
        # A branch in a loop: TorchDynamo ran the original frame eagerly (it does not
        # resume after a break in a loop), so the failing op raised the user's error.
        """
        def f(x, y):
            z = y
            for step in range(2):
                if y.sum() > 0:
                    z = z * 2
                else:
                    z = z * 3
            x.add_(1)
            return z
        """,
        # A branch in a helper called from a loop.
        """
        def scale(y):
            if y.sum() > 0:
                w = y * 2
            else:
                w = y * 3
            return w

        def f(x, y):
            z = y
            for step in range(2):
                z = scale(z)
            x.add_(1)
            return z
        """,
    ],
    ids=["branch_in_a_loop", "helper_branch_in_a_loop"],
)
def test_no_later_op_failed_while_tracing__branch_before_an_op_that_fails_tracing(body):
    """Once the branch is a selection, the whole frame is traced and the in-place write
    to a leaf that requires grad fails while tracing (TorchRuntimeError); the trace
    restarts with the branch kept, and the frame runs eagerly as the original did."""
    make_args = lambda module: (torch.ones(3, requires_grad=True), torch.ones(3))  # noqa: E731
    assert_same_behaviour(_source(body), make_args, expect_fixed=True)


def test_branch_stays_a_selection_when_nothing_after_it_fails_tracing():
    source = _source(
        """
        def f(x, y):
            z = y
            for step in range(2):
                if y.sum() > 0:
                    z = z * 2
                else:
                    z = z * 3
            return z + x
        """
    )
    _, mended, _ = original_and_mended(source)
    assert breaks(mended.f, torch.ones(3), torch.ones(3)) == 0


def test_frame_was_not_given_up_while_tracing__a_selection_then_an_error_the_code_raises():
    """The branch is a selection, then an exception the code raises (an empty list
    indexed) escapes the frame while TorchDynamo traces it: TorchDynamo gave up the
    whole frame (no graph), where the original compiled the test before its break and
    gave up only the resume function after it. The branch keeps its break: the
    original's graphs and outcomes, call after call."""

    source = _source(
        """
        def f(x, items):
            if x.sum() > 0:
                z = x * 2
            else:
                z = x * 3
            return items[0] + z
        """
    )
    original, mended, _ = original_and_mended(source)
    calls = ((torch.ones(3), []), (-torch.ones(3), []), (torch.ones(3), [torch.ones(3)]))
    counts = {name: graphs_and_outcomes_over_calls(module.f, calls)
              for name, module in (("original", original), ("mended", mended))}
    assert counts["original"][0] == 1
    assert counts["mended"] == counts["original"]
    assert any("gave up on the frame" in reason for reason in store.trace_time_declines.values())


# --- attribute access that runs the program's code (runtime/attribute_access.py) -----
# Both arms run in the compiled form, and licensed writes are left out: exact only when
# reading (or writing) the attribute runs none of the program's code. Each program logs
# into ``ACCESSES`` (a global the differential check compares) when its code runs.

_SCALE_READ_IN_AN_ARM = """
        def f(x, owner):
            if x.sum() > 0:
                z = x + owner.scale
            else:
                z = x - 1
            return z
"""

_BASE_CALLING_SCALE = """
        ACCESSES = []

        class Base:
            def scale(self, t):
                return t * 2

            def step(self, x):
                if x.sum() > 0:
                    z = self.scale(x)
                else:
                    z = x - 1
                return z

        def f(x, owner):
            return owner.step(x)
"""

ATTRIBUTE_ACCESS_RUNS_CODE = {
    "reads_plainly__a_property_read_in_an_arm": (
        """
        ACCESSES = []

        class Owner:
            @property
            def scale(self):
                ACCESSES.append("get scale")
                return torch.ones(3)
        """ + _SCALE_READ_IN_AN_ARM, "f", lambda m, sign: (sign * torch.ones(3), m.Owner()),
    ),
    "reads_plainly__getattr_of_the_program": (
        """
        ACCESSES = []

        class Owner:
            def __getattr__(self, name):
                ACCESSES.append("getattr " + name)
                return torch.ones(3)
        """ + _SCALE_READ_IN_AN_ARM, "f", lambda m, sign: (sign * torch.ones(3), m.Owner()),
    ),
    "writes_plainly__setattr_of_the_program": (
        """
        ACCESSES = []

        class Holder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("table", torch.ones(3))

            def __setattr__(self, name, value):
                if name == "table":
                    ACCESSES.append("set table")
                super().__setattr__(name, value)

            def forward(self, x):
                if x.sum() > 0:
                    self.table = self.table.to("cpu")
                    z = x + 1
                else:
                    z = x - 1
                return z * self.table

        def f(x, holder):
            return holder(x)
        """, "f", lambda m, sign: (sign * torch.ones(3), m.Holder()),
    ),
    "writes_plainly__a_property_setter": (
        """
        ACCESSES = []

        class Holder:
            def __init__(self):
                self._table = torch.ones(3)

            @property
            def table(self):
                return self._table

            @table.setter
            def table(self, value):
                ACCESSES.append("set table")
                self._table = value

            def step(self, x):
                if x.sum() > 0:
                    self.table = self.table.to("cpu")
                    z = x + 1
                else:
                    z = x - 1
                return z

        def f(x, holder):
            return holder.step(x)
        """, "f", lambda m, sign: (sign * torch.ones(3), m.Holder()),
    ),
    "is_the_method__overridden_in_a_subclass": (
        _BASE_CALLING_SCALE + """
        class Sub(Base):
            def scale(self, t):
                ACCESSES.append("Sub.scale")
                return t * 3
        """, "f", lambda m, sign: (sign * torch.ones(3), m.Sub()),
    ),
    "is_the_method__an_instance_attribute_in_its_place": (
        _BASE_CALLING_SCALE + """
        class Shadowed(Base):
            def __init__(self):
                self.scale = lambda t: ACCESSES.append("instance scale") or t * 4
        """, "f", lambda m, sign: (sign * torch.ones(3), m.Shadowed()),
    ),
}


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("name", sorted(ATTRIBUTE_ACCESS_RUNS_CODE))
def test_attribute_access_that_runs_code_keeps_the_original_branch(name, sign):
    body, entry, make = ATTRIBUTE_ACCESS_RUNS_CODE[name]
    source = _source(body)
    original, mended = assert_same_behaviour(
        source, lambda module: make(module, sign), entry=entry, expect_fixed=True
    )
    # The rewrite is made, and declined while tracing: the original's break stays.
    assert breaks(getattr(mended, entry), *make(mended, sign)) == breaks(getattr(original, entry), *make(original, sign)) >= 1


def test_plain_attributes_and_the_class_own_method_stay_whole():
    """The negative twin: a plain instance attribute, a plain ``__setattr__`` (nn.Module's)
    and the class's own method; the branch becomes a selection (no break)."""
    source = _source(
        """
        class Holder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("table", torch.ones(3))
                self.offset = torch.full((3,), 0.5)

            def scale(self, t):
                return t * 2

            def forward(self, x):
                if x.sum() > 0:
                    self.table = self.table.to("cpu")
                    z = self.scale(x) + self.offset
                else:
                    z = x - 1
                return z * self.table

        def f(x, holder):
            return holder(x)
        """
    )
    for sign in (1.0, -1.0):
        make_args = lambda module, sign=sign: (sign * torch.ones(3), module.Holder())  # noqa: E731
        original, mended = assert_same_behaviour(source, make_args, expect_fixed=True)
        assert breaks(mended.f, *make_args(mended)) == 0
        assert breaks(original.f, *make_args(original)) >= 1


def test_is_the_method__a_decorated_method_is_not_followed():
    source = _source(
        """
        import functools

        def logged(function):
            @functools.wraps(function)
            def wrapper(*args):
                print("called")
                return function(*args)
            return wrapper

        class Owner:
            @logged
            def scale(self, t):
                return t * 2

            def step(self, x):
                if x.sum() > 0:
                    z = self.scale(x)
                else:
                    z = x - 1
                return z
        """
    )
    result = mend(source, rules=("where",))
    assert not result.changed
    assert any("self.scale" in reason and "not known" in reason for reason in finding_reasons(result, "Where"))


LOGGED_TENSOR = """
OPS = []

class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("mul", "add", "sub", "where", "__mul__", "__add__", "__sub__", "__getitem__", "nonzero", "detach", "unbind"):
            OPS.append(name)
        return super().__torch_function__(func, types, args, kwargs or {})
"""


def _ops_over_calls(function, module, calls):
    """(value, ops logged) per call, the function compiled once (backend ``eager``)."""
    torch._dynamo.reset()
    compiled = torch.compile(function, backend="eager", dynamic=False)
    seen = []
    for arguments in calls:
        del module.OPS[:]
        value = compiled(*arguments(module))
        seen.append((type(value).__name__, value.tolist(), list(module.OPS)))
    return seen


@pytest.mark.parametrize("subclass_argument", ["operand", "condition"])
def test_is_plain_tensor__a_subclass_sees_no_untaken_arm_and_no_where(subclass_argument):
    """A tensor subclass's ``__torch_function__`` runs for every operation on it: the
    compiled form must not run the untaken arm's operations or ``torch.where`` on it
    (``operands_combine`` and ``select`` take plain tensors only)."""
    source = _source(
        LOGGED_TENSOR
        + textwrap.dedent(
            """
            def f(x, y):
                if x.sum() > 0:
                    z = y * 2
                else:
                    z = y + 1
                return z
            """
        )
    )
    original, mended, _ = original_and_mended(source)

    def calls(sign):
        def make(module):
            x, y = sign * torch.ones(3), torch.ones(3)
            if subclass_argument == "operand":
                y = y.as_subclass(module.Logged)
            else:
                x = x.as_subclass(module.Logged)
            return x, y
        return make

    arguments = [calls(1.0), calls(-1.0), calls(1.0)]
    expected = []
    for make in arguments:
        del original.OPS[:]
        value = original.f(*make(original))
        expected.append((type(value).__name__, value.tolist(), list(original.OPS)))
    assert _ops_over_calls(mended.f, mended, arguments) == expected
