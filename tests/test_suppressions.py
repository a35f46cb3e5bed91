"""Inline suppressions (``# graphmend: ignore`` / ``# graphmend: ignore[CODES]``): the
statement is left as it is by every rule, and ``check`` does not report it."""

from graphmend.rewrite.suppressions import ALL, suppressions_in
from helpers import mend

SOURCE = '''
import torch

@torch.compile
def step(x):
    if (x < 0).any():{guard_comment}
        raise ValueError("negative")
    if x.sum() > 0:{branch_comment}
        y = x + 1
    else:
        y = x * 2
    print("step", y.shape){print_comment}
    return y
'''


def _findings(**comments):
    values = {"print_comment": "", "branch_comment": "", "guard_comment": ""}
    values.update(comments)
    result = mend(SOURCE.format(**values))
    return result, {finding.category: finding for finding in result.findings}


def test_without_comments_every_rule_rewrites():
    result, findings = _findings()
    assert all(findings[code].fixed and not findings[code].suppressed for code in ("LC", "DC", "VG"))


def test_ignore_without_codes_leaves_the_statement_alone():
    result, findings = _findings(branch_comment="  # graphmend: ignore")
    assert findings["DC"].suppressed and not findings["DC"].fixed
    assert "_gm_taken" not in result.source
    assert findings["LC"].fixed and findings["VG"].fixed


def test_ignore_with_codes_names_the_categories_it_suppresses():
    result, findings = _findings(print_comment="  # graphmend: ignore[LC]", guard_comment="  # graphmend: ignore[DC]")
    assert findings["LC"].suppressed and not findings["LC"].fixed
    assert "print_in_graph" not in result.source
    # a guard is VG, not DC: the comment does not name it
    assert findings["VG"].fixed and not findings["VG"].suppressed


def test_a_comment_in_an_if_body_does_not_suppress_the_if():
    source = '''
import torch

@torch.compile
def step(x):
    if x.sum() > 0:
        x = x + 1  # graphmend: ignore
    return x
'''
    result = mend(source)
    assert [f.suppressed for f in result.findings] == [False]


def test_only_comments_count_not_text_in_strings():
    assert suppressions_in('x = "# graphmend: ignore"\nprint(1)  # graphmend: ignore[lc, DC]\n') == {
        2: frozenset({"LC", "DC"})
    }
    assert suppressions_in("f()  # graphmend: ignore\n") == {1: ALL}

