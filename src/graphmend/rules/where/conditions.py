"""Where's static legality conditions (ids ``W101``-``W118`` in ``core/legality.py``).

The conditions that read only the branch are here, each returning None when it holds
or the reason it fails; ``branches.py`` marks each reason with its id where it calls
them. The branch's condition as a tensor (``W101``) is shared with Trap and imported
here from ``rules/conditions.py``. The rest are decided while ``branches.py`` plans the
rewrite, because they read the arms it renames:

- ``W102`` static_part_guards_no_else_arm: ``apply``;
- ``W106`` setup_statement_runs_on_both_paths:
  ``WhereRewrite.setup_statement_runs_on_both_paths``;
- ``W107`` arm_results_run_on_both_paths: ``WhereRewrite.analyse_arm``;
- ``W110`` selected_value_is_fresh: ``WhereRewrite.selected_value_is_fresh``;
- ``W111`` carried_value_is_the_only_reference:
  ``WhereRewrite.carried_value_is_the_only_reference``;
- ``W112`` nothing_updated_in_place_while_selected_is_read:
  ``WhereRewrite.nothing_updated_in_place_while_selected_is_read``.

The facts the freshness conditions read are in ``analysis/aliasing.py``, and whether
an expression may run on both paths in ``analysis/safety.py``.

The ``ranges`` pass (a comparison of a uniform draw its range decides) keeps its
conditions beside it, since they read its helpers, and they are imported here:
``W115``-``W118``. The performed choice's conditions (``W119``-``W122``) are in
``performed.py``, beside the plan that reads them.
"""

from __future__ import annotations

import ast

from graphmend.rules.base import FunctionContext
from graphmend.rules.conditions import why_not_tensorizable  # W101, shared with Trap (T101)
from graphmend.rules.where.ranges import (  # a comparison of a draw its range decides
    comparison_only_tested,  # W117
    comparison_rewritable_in_place,  # W118
    draw_is_the_only_definition,  # W115
    draw_read_only_by_comparisons,  # W116
)

__all__ = [
    "DYNAMIC_LOCALS",
    "arms_end_alike",
    "arms_leave_only_at_their_end",
    "bound_on_both_paths",
    "comparison_only_tested",
    "comparison_rewritable_in_place",
    "draw_is_the_only_definition",
    "draw_read_only_by_comparisons",
    "merged_call_means_one_callee",
    "returned_value_is_not_none",
    "selected_names_hold_distinct_objects",
    "why_not_tensorizable",
    "writes_no_outer_name",
]

# Builtins that read or write a frame's locals by name: renamed per-arm locals
# would show through them.
DYNAMIC_LOCALS = frozenset({"locals", "vars", "eval", "exec", "dir", "globals"})


def arms_leave_only_at_their_end(arms: list[list[ast.stmt]]) -> str | None:
    """Statements after an early exit would run on the compiled path."""
    for arm in arms:
        for statement in arm[:-1] if arm else []:
            for node in ast.walk(statement):
                if isinstance(node, (ast.Return, ast.Break, ast.Continue, ast.Raise, ast.Yield)):
                    return f"line {node.lineno}: an arm leaves the branch early"
        last = arm[-1] if arm else None
        if isinstance(last, (ast.Raise, ast.Break, ast.Continue)):
            return f"line {last.lineno}: an arm leaves the branch with `{type(last).__name__.lower()}`"
    return None


def arms_end_alike(true_last: ast.stmt | None, false_last: ast.stmt | None) -> str | None:
    returns = [isinstance(last, ast.Return) for last in (true_last, false_last)]
    if any(returns) and not all(returns):
        return "one arm returns and the other does not"
    return None


def returned_value_is_not_none(value: ast.expr | None) -> str | None:
    """``select`` needs a value on both paths; None carries no tensor to select."""
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return "an arm returns None"
    return None


def writes_no_outer_name(context: FunctionContext, names: set[str]) -> str | None:
    """A write to a global or nonlocal name is read outside this function, where the
    analysis of reads after the branch cannot see it; names read through ``locals()``
    or ``eval`` would see the per-arm names."""
    facts = context.facts
    for name in sorted(names):
        if name in facts.declared_global:
            return f"`{name}` is global or nonlocal: the write is visible outside the function"
        if name in facts.outer_names:
            return f"`{name}` belongs to an enclosing function"
    for node in facts.nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_LOCALS:
            return f"the function calls `{node.func.id}()`, which reads its locals by name"
    return None


def bound_on_both_paths(context: FunctionContext, node, name: str, arms) -> str | None:
    for arm in arms:
        if name not in arm.renamed and not context.facts.reaching.definitely_assigned(node, name):
            return f"`{name}` is bound on one path only and may be unbound after"
    return None


def selected_names_hold_distinct_objects(arms, held: list[list[str]]) -> str | None:
    """``z = x * 2; w = z`` in an arm makes ``z`` and ``w`` one object; ``select`` would
    give each its own new tensor, so ``z.mul_(10)`` would no longer show through ``w``.
    ``held[i]``: the names whose values arm ``i`` hands to a selection (the names read
    after the branch, and a shared call's arguments)."""
    for arm, names in zip(arms, held):
        holders: dict[int, str] = {}
        for name in names:
            token = arm.object_of.get(name)
            if token is None:
                continue
            if token in holders:
                return (
                    f"`{holders[token]}` and `{name}` hold one object in an arm; "
                    "the selection would make two"
                )
            holders[token] = name
    return None


def merged_call_means_one_callee(first: ast.Call, second: ast.Call, arm_bound: set[str]) -> str | None:
    """The merged call is evaluated once, through one callee: the arms must agree on it.

    Only the callee and keywords spelled alike and reading no name either arm binds
    mean the same object on both paths (``dst.append`` with ``dst`` rebound per arm
    does not).
    """
    if ast.dump(first.func) != ast.dump(second.func):
        return "the arms call different functions"
    if [ast.dump(k) for k in first.keywords] != [ast.dump(k) for k in second.keywords]:
        return "the arms pass different keyword arguments"
    read = {
        node.id
        for part in [first.func] + [k.value for k in first.keywords]
        for node in ast.walk(part)
        if isinstance(node, ast.Name)
    }
    rebound = sorted(read & arm_bound)
    if rebound:
        return f"the shared call's callee or keywords read `{rebound[0]}`, which an arm binds"
    return None
