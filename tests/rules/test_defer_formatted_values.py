"""[Defer] values an output call formats or converts at the call (an f-string, ``%``,
``.format()``, ``str``/``repr``/``int``/``float``) that the analysis cannot show are not
tensors: rewritten, and decided while tracing (``message_formatted_at_the_call``, D208).

The rewritten code evaluates the arguments as the original does, in the trace before
the call, so TorchDynamo does the same with them in both programs: a plain Python value
becomes text at the call (in the graph now), an f-string or ``.format()`` of a tensor a
format applied when the graph ends (handed back, with the original's break), ``str``,
``int`` or ``float`` of a tensor a break at the conversion (in both). A value computed
from tensor data is declined statically (D107, rows in ``test_defer.py``)."""

import contextlib
import io
import logging
import textwrap

import pytest
import torch

import helpers
from graphmend.core.legality import condition_id
from graphmend.counting import CountingBackend
from graphmend.runtime.store import store
from helpers import assert_equivalent, graphs_and_breaks, mend, original_and_mended


@pytest.fixture(autouse=True)
def comparison_handler_only_records(monkeypatch):
    """``helpers.observe`` records log records for the comparison, which the programs
    never read (as in ``test_defer.py``)."""
    monkeypatch.setattr(helpers._Records, "graphmend_output_only", True, raising=False)


PRELUDE = """
import logging
import torch
logger = logging.getLogger(__name__)
"""

# name: (source, the argument ``n``, what ``check`` adds to "fixed"). Each logs between
# two tensor ops: the original has 2 graphs and 1 break, the mended 1 graph and none.
MUST_REWRITE = {
    # The shape of the example: an int from a shape, in an f-string (typed by
    # the analysis: nothing is left to tracing).
    "fstring_of_int_from_a_shape": ("""
        def f(x, n):
            y = x.sin()
            rows = x.shape[0] * 3
            logger.warning(f"rows {rows}")
            return y.cos()
    """, 3, None),
    "fstring_of_a_helper_result": ("""
        def buckets_for(length):
            return 2 ** ((2 * length).bit_length() - 1)

        def f(x, n):
            y = x.sin()
            buckets = buckets_for(x.shape[0])
            logger.warning(f"Setting num_buckets to {buckets}...")
            return y.cos()
    """, 3, "if `buckets` is not a tensor while tracing"),
    "percent_of_a_parameter": ("""
        def f(x, n):
            y = x.sin()
            logger.warning("n is %d of %s" % (n, x.shape[0]))
            return y.cos()
    """, 3, "if `n` is not a tensor while tracing"),
    "format_method_of_a_parameter": ("""
        def f(x, n):
            y = x.sin()
            logger.info("n is {} of {:>3}".format(n, x.shape[0]))
            return y.cos()
    """, 3, "if `n` is not a tensor while tracing"),
    "conversions_of_a_parameter": ("""
        def f(x, n):
            y = x.sin()
            print("n", str(n), repr(n), int(n), float(n))
            return y.cos()
    """, 3, "if `n` is not a tensor while tracing"),
    "fstring_of_an_attribute_and_a_parameter": ("""
        class Settings:
            chunk = 4

        settings = Settings()

        def f(x, n):
            y = x.sin()
            print(f"{settings.chunk} chunks of {n:>3}")
            return y.cos()
    """, 5, "if `settings.chunk` and `n` are not tensors while tracing"),
}


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_a_formatted_python_value_joins_the_graph(name):
    source, n, while_tracing = MUST_REWRITE[name]
    original, mended, result = original_and_mended(PRELUDE + textwrap.dedent(source))
    (finding,) = [f for f in result.findings if f.rule == "Defer"]
    assert finding.fixed
    if while_tracing is None:
        assert finding.while_tracing is None and finding.outcome() == "fixed by Defer"
    else:
        assert finding.while_tracing == f"{while_tracing} [D208 message_formatted_at_the_call]"
        assert finding.outcome() == f"fixed by Defer {finding.while_tracing}"
    x = torch.randn(4)
    assert graphs_and_breaks(original.f, x, n) == (2, 1)
    assert graphs_and_breaks(mended.f, x, n) == (1, 0)
    assert_equivalent(original.f, mended.f, x, n, backends=("eager", "aot_eager"))


# A tensor while tracing: an f-string or ``.format()`` of it is a format TorchDynamo
# applies when the graph ends, so the call is handed back (D208) and keeps its break, as
# the original; ``str``/``int`` of it breaks the graph at the conversion, in both (the
# resume function guards on the text's or the number's value, and the call, first in it,
# keeps its break as the original's, G203); ``%`` of it makes TorchDynamo give up the
# frame, in both. (original, mended) counts.
TENSOR_WHILE_TRACING = {
    "fstring": ("logger.warning(f'n {n}')", (2, 1), (2, 1), True),
    "format_method": ("logger.warning('n {:>4}'.format(n))", (2, 1), (2, 1), True),
    "str": ("print('n ' + str(n))", (2, 2), (2, 2), False),
    "int": ("print('n', int(n))", (2, 2), (2, 2), False),
    "percent": ("print('n %s' % n)", (0, 1), (0, 1), False),
}


@pytest.mark.parametrize("name", sorted(TENSOR_WHILE_TRACING))
def test_a_tensor_formatted_at_the_call_keeps_the_original_break(name):
    call, original_counts, mended_counts, refused = TENSOR_WHILE_TRACING[name]
    source = PRELUDE + f"def f(x, n):\n    y = x.sin()\n    {call}\n    return y.cos()\n"
    original, mended, result = original_and_mended(source)
    assert [f.fixed for f in result.findings if f.rule == "Defer"] == [True]
    x, n = torch.randn(4), torch.tensor(3)
    store.trace_time_declines.clear()
    assert graphs_and_breaks(original.f, x, n) == original_counts
    assert graphs_and_breaks(mended.f, x, n) == mended_counts
    declines = [condition_id(reason) for reason in store.trace_time_declines.values()]
    assert ("D208" in declines) is refused, declines
    assert_equivalent(original.f, mended.f, x, n, backends=("eager", "aot_eager"))


def _compiled_dynamic(function, sizes):
    """Graphs compiled with ``dynamic=True`` over one call per size, and the messages
    logged and printed."""
    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(function, backend=backend, dynamic=True)
    records = helpers._Records()
    root = logging.getLogger()
    root.addHandler(records)
    saved_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            for size in sizes:
                compiled(torch.ones(size))
    finally:
        root.removeHandler(records)
        root.setLevel(saved_level)
    return backend.graphs, [message for _, message, _, _ in records.records], printed.getvalue()


def _eager_messages(function, sizes):
    records = helpers._Records()
    root = logging.getLogger()
    root.addHandler(records)
    saved_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            for size in sizes:
                function(torch.ones(size))
    finally:
        root.removeHandler(records)
        root.setLevel(saved_level)
    return [message for _, message, _, _ in records.records], printed.getvalue()


SYMBOLIC_SIZES = {
    # TorchDynamo formats a symbolic size at the call into text it guards on, in the
    # original as in the mended program (the f-string is built in the trace before the
    # call): the mended compiles no more graphs, and not refusing keeps the fix.
    "fstring": "logger.warning(f'rows {rows}')",
    "str": "logger.warning('rows ' + str(rows))",
    # ``int`` of a symbolic size is the size itself: an operand, printed when the graph
    # runs, specialised nowhere.
    "int": "print('rows', int(rows))",
}


# (original, mended) graphs over the four sizes.
SYMBOLIC_SIZE_GRAPHS = {"fstring": (5, 4), "str": (2, 2), "int": (2, 1)}


@pytest.mark.parametrize("name", sorted(SYMBOLIC_SIZES))
def test_a_symbolic_size_is_formatted_as_the_original_formats_it(name):
    source = PRELUDE + (
        "def size_of(x):\n    return x.shape[0]\n\n"
        f"def f(x):\n    y = x.sin()\n    rows = size_of(x) * 3\n    {SYMBOLIC_SIZES[name]}\n    return y.cos()\n"
    )
    original, mended, result = original_and_mended(source)
    (finding,) = [f for f in result.findings if f.rule == "Defer"]
    assert finding.fixed and finding.while_tracing is not None
    sizes = (4, 5, 6, 7)
    expected = _eager_messages(original.f, sizes)
    original_graphs, *original_output = _compiled_dynamic(original.f, sizes)
    mended_graphs, *mended_output = _compiled_dynamic(mended.f, sizes)
    assert tuple(original_output) == expected
    assert tuple(mended_output) == expected
    assert (original_graphs, mended_graphs) == SYMBOLIC_SIZE_GRAPHS[name]


# An adversary's values: a ``__format__`` or ``__str__`` that prints, records or raises.
# The original runs it before the call; so does the mended program, where TorchDynamo
# puts it: an f-string or ``.format()`` of such an object is a format TorchDynamo applies
# when the graph ends, in both (the call is handed back, D208, and formats at its break,
# as the original); ``str`` of it is traced, and its ``print`` breaks the graph, in both.
class PrintsWhenFormatted:
    def __format__(self, spec):
        print("formatting with", repr(spec))
        return "loud"

    def __str__(self):
        print("converting")
        return "loud"


class RaisesWhenFormatted:
    def __format__(self, spec):
        raise ValueError(f"cannot format with {spec!r}")

    def __str__(self):
        raise ValueError("cannot convert")


# name: (call, value type, (original graphs, breaks), (mended graphs, breaks), the
# condition that refused the mended call while tracing). The original also breaks at
# the ``print`` before; the counts of a call that raises are of what compiled before.
# A ``%`` or a ``str`` that TorchDynamo gives up on leaves the frame's trace (G302).
ADVERSARIES = {
    "format_prints": ("print(f'value {v:>2}')", PrintsWhenFormatted, (2, 2), (2, 1), "D208"),
    "format_method_prints": ("logger.warning('value {}'.format(v))", PrintsWhenFormatted, (2, 2), (2, 1), "D208"),
    "str_prints": ("print('value ' + str(v))", PrintsWhenFormatted, (2, 3), (2, 2), "G203"),
    "percent_prints": ("print('value %s' % v)", PrintsWhenFormatted, (1, 2), (1, 2), "G302"),
    "format_raises": ("print(f'value {v}')", RaisesWhenFormatted, (1, 2), (1, 1), "D208"),
    "format_method_raises": ("logger.warning('value {:x}'.format(v))", RaisesWhenFormatted, (1, 2), (1, 1), "D208"),
    "str_raises": ("print('value ' + str(v))", RaisesWhenFormatted, (1, 2), (1, 2), "G302"),
}


def _graphs_and_breaks_even_if_raising(function, *args) -> tuple[int, int]:
    from graphmend.counting import break_count_so_far, recording_graph_breaks
    from graphmend.torch_adapter import graph_break_counters

    torch._dynamo.reset()
    graph_break_counters().clear()
    backend = CountingBackend()
    compiled = torch.compile(function, backend=backend, dynamic=False)
    with recording_graph_breaks() as records, contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(
        ValueError
    ):
        compiled(*args)
    count = break_count_so_far(backend, records)
    return count.graphs, count.breaks


@pytest.mark.parametrize("name", sorted(ADVERSARIES))
def test_a_value_whose_formatting_has_effects_behaves_as_the_original(name):
    call, value_type, original_counts, mended_counts, refused_by = ADVERSARIES[name]
    source = PRELUDE + f"def f(x, v):\n    y = x.sin()\n    print('before')\n    {call}\n    return y.cos()\n"
    original, mended, result = original_and_mended(source)
    assert sum(f.fixed for f in result.findings if f.rule == "Defer") == 2
    x = torch.randn(4)
    store.trace_time_declines.clear()
    assert _graphs_and_breaks_even_if_raising(original.f, x, value_type()) == original_counts
    assert _graphs_and_breaks_even_if_raising(mended.f, x, value_type()) == mended_counts
    declines = [condition_id(reason) for reason in store.trace_time_declines.values()]
    assert declines == ([] if refused_by is None else [refused_by])
    assert_equivalent(original.f, mended.f, x, value_type(), backends=("eager", "aot_eager"))


RECORDING_VALUES = PRELUDE + """
SEEN = []

class Noted:
    def __format__(self, spec):
        print("noting", spec)
        SEEN.append(("format", spec))
        return "noted"

    def __str__(self):
        SEEN.append(("str",))
        return "noted"

def f(x, v):
    SEEN.clear()
    y = x.sin()
    logger.warning(f"first {v:>3}")
    print("second " + str(v))
    return y.cos(), list(SEEN)
"""


def test_a_value_formatted_in_the_mended_module_keeps_its_output_and_writes_in_order():
    """The f-string formats the object when the graph ends, in both programs (its
    ``__format__`` prints and records then, and the warning keeps its break, D208);
    its ``__str__`` is traced, and appends to ``SEEN``: the print of it, first in the
    frame resumed after the warning, where the trace guards on ``SEEN``'s length before
    any op, keeps its break too (G203), as the original's frame there compiled no graph.
    What the list holds is compared with the original compiled: TorchDynamo (2.13)
    replays the traced ``SEEN.clear()`` after the format it applies at the break, in
    the original as in the mended program, so both lose the ``__format__``'s entry."""
    original, mended, result = original_and_mended(RECORDING_VALUES)
    assert sum(f.fixed for f in result.findings if f.rule == "Defer") == 3
    x = torch.randn(4)
    assert graphs_and_breaks(original.f, x, original.Noted()) == (2, 2)
    store.trace_time_declines.clear()
    assert graphs_and_breaks(mended.f, x, mended.Noted()) == (2, 2)
    assert [condition_id(reason) for reason in store.trace_time_declines.values()] == ["D208", "G203"]
    expected = helpers.observe(original.f, x, original.Noted())
    for backend in ("eager", "aot_eager"):
        as_compiled = helpers.observe(original.f, x, original.Noted(), compiled=True, backend=backend)
        seen = helpers.observe(mended.f, x, mended.Noted(), compiled=True, backend=backend)
        assert seen.stdout == expected.stdout == "noting >3\nsecond noted\n"
        assert seen.logs == expected.logs
        helpers.assert_identical(seen.value[0], expected.value[0])
        assert seen.value[1] == as_compiled.value[1]


# transformers' reformer (``ReformerLSHAttention._set_num_buckets``): the number of
# buckets is computed from the sequence length the forward reads off its input, logged
# in an f-string, and kept on the module.
REFORMER_SHAPED = PRELUDE + """
class LSHAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.chunk_length = 4
        self.max_position_embeddings = 64
        self.num_buckets = None

    def _set_num_buckets(self, sequence_length):
        # `num_buckets` should be set to 2 * sequence_length // chunk_length as recommended in paper
        num_buckets_pow_2 = (2 * (sequence_length // self.chunk_length)).bit_length() - 1
        # make sure buckets are power of 2
        num_buckets = 2**num_buckets_pow_2

        # factorize `num_buckets` if `num_buckets` becomes too large
        num_buckets_limit = 2 * max(
            int((self.max_position_embeddings // self.chunk_length) ** (0.5)),
            self.chunk_length,
        )
        if num_buckets > num_buckets_limit:
            num_buckets = [2 ** (num_buckets_pow_2 // 2), 2 ** (num_buckets_pow_2 - num_buckets_pow_2 // 2)]

        logger.warning(f"config.num_buckets is not set. Setting config.num_buckets to {num_buckets}...")

        # set num buckets in config to be properly saved
        self.num_buckets = num_buckets

    def forward(self, hidden_states):
        query = hidden_states * 2
        if self.num_buckets is None:
            self._set_num_buckets(hidden_states.shape[1])
        return torch.softmax(query, dim=-1)

MODULE = LSHAttention()

def f(x, length_limit):
    MODULE.num_buckets = None
    MODULE.max_position_embeddings = length_limit
    return MODULE(x), MODULE.num_buckets
"""


@pytest.mark.parametrize(("sequence_length", "length_limit", "buckets"), [(16, 4096, "8"), (64, 64, "[4, 8]")])
def test_reformer_num_buckets_warning_joins_the_graph(sequence_length, length_limit, buckets):
    """``num_buckets`` is an int (or, past the limit, a list of two ints) while
    tracing: the warning joins the graph with the text the original logged. (The
    original's break is counted in each frame it passes through.)"""
    original, mended, result = original_and_mended(REFORMER_SHAPED)
    (finding,) = [f for f in result.findings if f.rule == "Defer"]
    assert finding.fixed and finding.while_tracing.startswith("if `num_buckets` is not a tensor while tracing")
    torch.manual_seed(0)
    x = torch.randn(2, sequence_length, 8)
    assert graphs_and_breaks(original.f, x, length_limit) == (2, 3)
    assert graphs_and_breaks(mended.f, x, length_limit) == (1, 0)
    expected = helpers.observe(original.f, x, length_limit)
    assert [message for _, message, _, _ in expected.logs] == [
        f"config.num_buckets is not set. Setting config.num_buckets to {buckets}..."
    ]
    assert_equivalent(original.f, mended.f, x, length_limit, backends=("eager", "aot_eager"))


WARNING_ONCE_SHAPED = """
import torch
from transformers.utils import logging
logger = logging.get_logger(__name__)

def f(x, attention_window=4):
    y = x.sin()
    padding_len = (attention_window - x.shape[-1] % attention_window) % attention_window
    logger.warning_once(
        f"Input ids are automatically padded from {x.shape[-1]} to {x.shape[-1] + padding_len} to be a multiple of "
        f"`config.attention_window`: {attention_window}"
    )
    return y.cos()
"""


def test_led_and_bigbird_shaped_warning_once_joins_the_graph():
    """led and bigbird-pegasus: ``logger.warning_once(f"... {some_int} ...")`` with
    transformers' logger, once per message, as the original."""
    pytest.importorskip("transformers")
    original, mended, result = original_and_mended(WARNING_ONCE_SHAPED)
    (finding,) = [f for f in result.findings if f.rule == "Defer"]
    assert finding.fixed and finding.while_tracing == (
        "if `x.shape[-1] + padding_len` and `attention_window` are not tensors while tracing"
        " [D208 message_formatted_at_the_call]"
    )
    x = torch.randn(2, 7)
    assert graphs_and_breaks(original.f, x, 5) == (2, 1)
    assert graphs_and_breaks(mended.f, x, 5) == (1, 0)
    assert_equivalent(original.f, mended.f, x, 5, backends=("eager", "aot_eager"))


def test_check_names_the_values_decided_while_tracing():
    result = mend(PRELUDE + textwrap.dedent("""
        def f(x, n, m):
            logger.warning(f"static {x.shape[0] * 2}")
            logger.warning("a %s b %s" % (n, x.dim()))
            logger.warning("{} {} {}".format(n, m, n))
    """))
    outcomes = [f.outcome() for f in result.findings if f.rule == "Defer"]
    assert outcomes[0].startswith("fixed by Defer") and "while tracing" not in outcomes[0]
    assert outcomes[1].startswith("fixed by Defer if `n` is not a tensor while tracing [D208 ")
    assert outcomes[2].startswith("fixed by Defer if `n` and `m` are not tensors while tracing [D208 ")
