"""The paper's Figures 2, 4 and 5: one graph after mending; Figure 3 (longrope): one graph
too, its arms (which pick one of two existing buffers, which ``torch.where`` cannot keep)
performed when the graph runs. All: the same outputs, printed text and exceptions as the
original, eager and compiled with the eager and inductor backends."""

import pathlib
import textwrap

import pytest
import torch

from helpers import assert_equivalent, breaks, original_and_mended

EXAMPLE = pathlib.Path(__file__).parent.parent / "examples" / "paper_figures.py"
ROTARY = (pathlib.Path(__file__).parent / "rules" / "test_where_performed.py").read_text()


def figures_source() -> str:
    text = EXAMPLE.read_text()
    return text[: text.index("graphs = []")]


def rotary_source() -> str:
    """Figure 3's module, as tests/rules/test_where_performed.py holds it (``ROTARY``)."""
    start = ROTARY.index('ROTARY = textwrap.dedent(\n    """\n') + len('ROTARY = textwrap.dedent(\n    """\n')
    end = ROTARY.index('    """\n)\n', start)
    return textwrap.dedent(ROTARY[start:end])


@pytest.fixture(scope="module")
def figures():
    original, mended, _ = original_and_mended(figures_source())
    return original, mended


@pytest.mark.parametrize(
    "name, arguments",
    [
        ("figure_2", (torch.randn(6), torch.randn(6))),
        ("figure_2", (-torch.ones(6), torch.randn(6))),
        ("figure_4", (torch.randn(6),)),
        ("figure_5", (torch.ones(2, 3), torch.ones(2, 3))),
        ("figure_5", (torch.ones(2, 3), torch.zeros(2, 3))),
    ],
)
@pytest.mark.slow  # compiles with TorchInductor
def test_figures_compile_to_one_graph_and_behave_the_same(figures, name, arguments):
    original, mended = figures
    rejects = name == "figure_5" and not torch.equal(*arguments)
    if not rejects:
        assert breaks(getattr(original, name), *arguments) >= 1
        assert breaks(getattr(mended, name), *arguments) == 0
    assert_equivalent(getattr(original, name), getattr(mended, name), *arguments, backends=("eager", "inductor"))


@pytest.mark.slow  # compiles with TorchInductor
@pytest.mark.parametrize("first_position", [0, 20])
def test_figure_3_longrope_under_inductor(first_position):
    original, mended, _ = original_and_mended(rotary_source())
    x = torch.randn(1, 6, 1)
    positions = torch.arange(first_position, first_position + 6)[None]
    assert breaks(original.Rotary(), x, positions) >= 1
    assert breaks(mended.Rotary(), x, positions) == 0
    assert_equivalent(original.Rotary(), mended.Rotary(), x, positions, backends=("eager", "inductor"))
