"""``fix`` keeps an ``elif`` an ``elif`` when a rule rewrites that clause.

An ``elif`` clause is an ``if`` alone in the ``orelse`` of the one above; the rule's
edit starts with ``if``, and written as is it would end the chain and start a new
statement (transformers' ``generation/utils.py`` was left unfixed for this).
"""

from __future__ import annotations

import ast

SOURCE = """\
import torch


@torch.compile
def f(x, flag):
    y = x
    if flag:
        y = x + 1
    # a comment above the elif stays where it is
    elif x.sum() > 0:
        y = x * 2
    else:
        y = x - 1
    return y
"""


def test_a_rewritten_elif_clause_stays_in_its_chain(cli, write):
    path = write("model.py", SOURCE)
    outcome = cli("fix", "--write", path)
    assert outcome.code == 0, outcome.err
    text = path.read_text()
    assert "    # graphmend: Where removes a graph break (DC); eager path unchanged\n" in text
    assert "    elif __graphmend__.is_compiling() and __graphmend__.operands_combine(" in text
    assert "    # a comment above the elif stays where it is\n" in text
    chain = next(node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.If))
    # if flag / elif compiling / elif x.sum() > 0 / else: one statement, three levels deep.
    assert isinstance(chain.orelse[0], ast.If)
    assert isinstance(chain.orelse[0].orelse[0], ast.If)
    assert len(chain.orelse) == 1


def test_the_fixed_elif_runs_as_before(cli, write):
    import torch

    path = write("model.py", SOURCE.replace("@torch.compile\n", ""))
    before: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), before)  # noqa: S102 - the module under test
    outcome = cli("fix", "--write", "--all", path)
    assert outcome.code == 0, outcome.err
    after: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), after)  # noqa: S102 - the module under test
    for x, flag in ((torch.ones(3), True), (torch.ones(3), False), (-torch.ones(3), False)):
        assert torch.equal(before["f"](x, flag), after["f"](x, flag))
