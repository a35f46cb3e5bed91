"""[Where] data-dependent two-way branches become a selection inside the graph.

    if x.sum() > 0:
        z = x_1 + y_1
    else:
        z = x_1 * y_1
becomes (on the compiled path, when the checks made while tracing hold; the eager
path keeps the original ``if``)
    _gm_taken_1 = __graphmend__.guard_holds(x.sum() > 0, True)
    z__gm_true_1 = x_1 + y_1
    z__gm_false_1 = x_1 * y_1
    z = __graphmend__.select(_gm_taken_1, z__gm_true_1, z__gm_false_1)

Three shapes are handled: the arms assign the same names, the arms return, or the
arms end by calling the same function with different positional arguments. Arms that
instead choose which existing object an attribute holds (``self.register_buffer("a",
self.b)`` against ``self.register_buffer("a", self.c)``), which no selection can keep,
are run as they are when the graph runs, with the condition it computed (``performed.py``). Both
arms then run, so every statement in them must be unobservable on the untaken path:
no possible exception, no write that escapes (writes to locals are renamed per
arm), no random draw. Two idempotent writes are licensed when a check made while
tracing shows they change nothing: a device move ``self.a = self.a.to(d)`` (the
tensor is on ``d`` already) and a memoized initialization ``if not hasattr(self,
"a"): self.a = f(...)`` (``self.a`` exists already); the compiled form then leaves
them out. ``select`` (runtime/selection.py) uses ``torch.where`` only when both
values are tensors of one shape, dtype and device that no autograd flows through,
and the plain choice (the original graph break) otherwise.

Legality conditions, each a function (in ``conditions.py``, or a method of
``WhereRewrite`` below) returning None when it holds or the reason it fails
(``graphmend check`` prints the reason):
- ``why_not_tensorizable`` (rules/conditions.py): no ``.item()``; ``and``/``or``
  operands safe to evaluate unconditionally.
- ``arms_leave_only_at_their_end``: no ``return``/``break``/``raise`` inside an arm.
- ``arms_end_alike``: both arms return, or neither does.
- ``returned_value_is_not_none``.
- ``setup_statement_runs_on_both_paths``: each statement binds locals to safe
  expressions (``ExpressionSafety`` in analysis/safety.py: no exception, no ``out=``
  or ``inplace=`` write, no in-place method, no random draw, helpers checked the same
  way), or is one of the two licensed writes; ``x += 1`` may update a tensor in place.
- ``writes_no_outer_name``: no name bound in an arm is ``global`` or ``nonlocal``,
  and the function does not read its locals by name (``locals()``, ``eval``).
- ``bound_on_both_paths``: a name read after the branch is bound on both paths.
- ``selected_value_is_fresh``: each value the selection picks between is computed
  by the arm (arithmetic, a pointwise function), never an existing object such as
  a parameter or attribute, or what a call writing in place returns (``F.relu(x,
  inplace=True)`` is ``x``): ``torch.where`` returns a new tensor, so ``z is x`` and
  an in-place update through ``z`` would change meaning.
  An earlier value carried into another name (``z = y``) must also satisfy
  ``carried_value_is_the_only_reference``: ``y`` is not read after the branch and the
  arm passes it on once. A value that is not fresh is still allowed when the selected
  name is only consumed (``selected_name_is_only_consumed``) and
  ``nothing_updated_in_place_while_selected_is_read``.
- ``selected_names_hold_distinct_objects``: an arm does not make two selected names
  one object (``w = z``): the selection would make two.
- ``merged_call_means_one_callee``: for the call shape, the callee and keywords
  read no name the arms bind, so they mean the same object on both paths.
The facts the freshness predicates read (reads of a name and whether they keep a
reference, in-place updates, CFG reachability) are in analysis/aliasing.py.

Checks made while tracing (added to the compiled form's condition): every outside
value elementwise code combines is of the kind the operation accepts and all
broadcast together (``operands_combine``), every attribute read exists and reading
it runs none of the program's code (``reads_plainly``, runtime/attribute_access.py:
no ``__getattribute__``/``__getattr__`` of its own, no property, since both arms run),
a licensed write that is left out would not have run a ``__setattr__`` or setter
either (``writes_plainly``), a call ``self.m(...)`` read in the enclosing class
reaches that function and no override or wrapper (``is_the_method``), and the
graph captured up to the branch draws no random numbers (``graph_so_far_may_continue``,
made by ``operands_combine`` too): the original graph ends at the branch, while in one
graph with the code after it AOTAutograd drops a draw whose value ends up unused (in
this function or a caller). Under autograd ``select`` refuses values that require
grad, and the whole trace lets the selection join a graph that records autograd only
where its arms and ``torch.where`` recorded none (its test may: ``h.sum() > 0`` of
activations, which the original computed before its break and no backward reaches),
on the terms of output and guards (runtime/whole_trace_conditions.py).
"""

from __future__ import annotations

import ast
import copy

from graphmend.analysis.aliasing import (
    FRESH_METHODS,
    References,
    assigns_name_alone,
    reachable_from,
    reaches_avoiding,
)
from graphmend.analysis.safety import (
    POINTWISE_TORCH,
    ExpressionSafety,
    updates_in_place,
    writes_through_keyword,
)
from graphmend.core.legality import condition_id, failed, restated
from graphmend.rewrite.findings import DATA_DEPENDENT_CONTROL_FLOW
from graphmend.rewrite.templates import (
    RUNTIME_NAME,
    compiled_or_original,
    is_guard,
    is_original,
    place,
    statements,
)
from graphmend.rules.base import (
    FunctionContext,
    enclosing_statements,
    first_failure,
    rewrite_statements,
)
from graphmend.rules.conditions import (
    conjunction,
    holds_expression,
    split_static_prefix,
    why_not_tensorizable,
)
from graphmend.rules.where import performed
from graphmend.rules.where.conditions import (
    arms_end_alike,
    arms_leave_only_at_their_end,
    bound_on_both_paths,
    merged_call_means_one_callee,
    returned_value_is_not_none,
    selected_names_hold_distinct_objects,
    writes_no_outer_name,
)
from graphmend.rules.where.memoized import attribute_missing_test

RULE = "Where"


class Decline(Exception):
    pass


class _Arm:
    """One arm, its statements rewritten to bind per-arm names."""

    def __init__(self, statements_: list[ast.stmt], suffix: str):
        self.original = statements_
        self.suffix = suffix
        self.renamed: dict[str, str] = {}
        # Why the value a name is bound to in this arm may be an existing object.
        self.not_fresh: dict[str, str | None] = {}
        # Earlier values (by name) this arm passes on as the value of another name.
        self.carried: dict[str, str | None] = {}
        # Which object each name the arm binds holds: ``w = z`` gives ``w`` ``z``'s.
        self.object_of: dict[str, int] = {}
        self.setup: list[ast.stmt] = []
        self.result: ast.expr | None = None
        self.unrenamed_result: ast.expr | None = None
        self.call: ast.Call | None = None

    def load(self, expression: ast.expr) -> ast.expr:
        renamed = self.renamed

        class Rename(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name):
                if isinstance(node.ctx, ast.Load) and node.id in renamed:
                    return ast.copy_location(ast.Name(id=renamed[node.id], ctx=ast.Load()), node)
                return node

        return Rename().visit(copy.deepcopy(expression))

    def bind(self, name: str) -> str:
        self.renamed[name] = f"{name}__gm_{self.suffix}"
        return self.renamed[name]

    def value_of(self, name: str) -> ast.expr:
        return ast.Name(id=self.renamed.get(name, name), ctx=ast.Load())


def _in_loop(context: FunctionContext, statement: ast.stmt) -> bool:
    return any(
        isinstance(outer, (ast.For, ast.While, ast.AsyncFor))
        for outer in enclosing_statements(context.facts.function, statement)
    )


class WhereRewrite:
    def __init__(self, context: FunctionContext, statement: ast.If, false_arm, consumed_next, test=None):
        self.context = context
        self.statement = statement
        self.test = test if test is not None else statement.test
        self.node = context.facts.node_for(statement)
        self.number = context.module.fresh_suffix()
        self.true_arm = _Arm(statement.body, f"true_{self.number}")
        self.false_arm = _Arm(false_arm, f"false_{self.number}")
        self.consumed_next = consumed_next
        self.trace_time_checks: list[ast.expr] = []
        self.safety = ExpressionSafety(context, self.node)
        self.expression_is_safe = self.safety.expression_is_safe
        self.call_is_safe = self.safety.call_is_safe
        self.references = References(context)

    # licensed writes ------------------------------------------------------------------

    def _is_self_attribute(self, node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == self.context.facts.self_name
            and self.context.facts.self_name is not None
        )

    def _licensed_device_move(self, statement: ast.stmt) -> bool:
        """``self.a = self.a.to(d)``: licensed when, while tracing, ``self.a`` is on ``d``
        already (then ``to`` returns ``self.a`` itself and the write changes nothing)."""
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            return False
        target, value = statement.targets[0], statement.value
        if not (
            self._is_self_attribute(target)
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "to"
            and ast.dump(value.func.value) == ast.dump(ast.Attribute(value=target.value, attr=target.attr, ctx=ast.Load()))
            and not value.keywords
            and len(value.args) == 1
            and self.expression_is_safe(value.args[0]) is None
        ):
            return False
        self.trace_time_checks.append(
            statements(
                f"{RUNTIME_NAME}.reads_plainly(OWNER, {target.attr!r})"
                f" and {RUNTIME_NAME}.writes_plainly(OWNER, {target.attr!r})"
                f" and {RUNTIME_NAME}.moves_nothing(TENSOR, DESTINATION)",
                OWNER=target.value,
                TENSOR=value.func.value,
                DESTINATION=value.args[0],
            )[0].value
        )
        return True

    def memoized_initialization_exists_already(self, statement: ast.stmt) -> str | bool | None:
        """``if not hasattr(self, "a"): self.a = f(...)``: licensed when ``self.a`` exists
        while tracing, so the initialization does nothing on either path. Creating it on
        the untaken path would change the object's state (and ``hasattr`` afterwards).

        False when the statement is not this shape; None when licensed.
        """
        if not (isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1):
            return False
        tested = attribute_missing_test(statement.test)
        if tested is None:
            return False
        owner, attribute = tested
        if self.expression_is_safe(owner) is not None or not isinstance(owner, ast.Name):
            return False
        self.trace_time_checks.append(
            statements(f"{RUNTIME_NAME}.reads_plainly(OWNER, {attribute!r})", OWNER=owner)[0].value
        )
        return None

    # arm analysis ---------------------------------------------------------------------

    def analyse_arm(self, arm: _Arm, ends_with: str) -> None:
        self.safety.bound_names = set()
        self.safety.definitions = {}
        body = list(arm.original)
        if ends_with == "return":
            last = body.pop()
            reason = failed("W105", returned_value_is_not_none(last.value))
            if reason:
                raise Decline(reason)
            arm.result = last.value
        elif ends_with == "call":
            last = body.pop()
            arm.call = last.value
        for statement in body:
            self.setup_statement_runs_on_both_paths(arm, statement)
            self.safety.bound_names = set(arm.renamed)
        if arm.result is not None:
            reason = self.expression_is_safe(arm.result)
            if reason:
                raise Decline(failed("W107", f"the returned value: {reason}"))
            arm.unrenamed_result = arm.result
            arm.result = arm.load(arm.result)
        if arm.call is not None:
            for argument in arm.call.args:
                reason = self.expression_is_safe(argument)
                if reason:
                    raise Decline(failed("W107", f"an argument of the shared call: {reason}"))
            reason = first_failure(
                lambda: self.expression_is_safe(arm.call.func),
                *[lambda k=k: self.expression_is_safe(k.value) for k in arm.call.keywords],
            )
            if reason:
                raise Decline(failed("W107", f"the shared call: {reason}"))

    def setup_statement_runs_on_both_paths(self, arm: _Arm, statement: ast.stmt) -> None:
        """Raises Decline with the reason when ``statement`` is observable on the untaken path."""
        line = statement.lineno
        if isinstance(statement, ast.Pass):
            return
        if self._licensed_device_move(statement):
            return  # a no-op whenever the compiled form runs (checked while tracing)
        memoized = self.memoized_initialization_exists_already(statement)
        if memoized is None:
            return  # likewise
        if isinstance(statement, ast.Assign) and all(
            isinstance(t, ast.Name) or (isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts))
            for t in statement.targets
        ):
            reason = self.expression_is_safe(statement.value)
            if reason:
                raise Decline(failed("W106", f"line {line}: {reason}"))
            value = arm.load(statement.value)
            targets = []
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    self.safety.define(target.id, statement.value)
                    arm.not_fresh[target.id] = self.value_is_fresh(arm, statement.value, carried_into=target.id)
                    arm.object_of[target.id] = self._object_bound(arm, statement.value)
                    targets.append(ast.Name(id=arm.bind(target.id), ctx=ast.Store()))
                else:
                    if not isinstance(statement.value, (ast.Tuple, ast.List)) or len(
                        statement.value.elts
                    ) != len(target.elts):
                        raise Decline(failed("W106", f"line {line}: unpacking may raise"))
                    for element, element_value in zip(target.elts, statement.value.elts):
                        self.safety.define(element.id, element_value)
                        arm.not_fresh[element.id] = self.value_is_fresh(arm, element_value, carried_into=element.id)
                        arm.object_of[element.id] = self._object_bound(arm, element_value)
                    targets.append(
                        ast.Tuple(
                            elts=[ast.Name(id=arm.bind(e.id), ctx=ast.Store()) for e in target.elts],
                            ctx=ast.Store(),
                        )
                    )
            arm.setup.append(ast.copy_location(ast.Assign(targets=targets, value=value), statement))
            return
        if isinstance(statement, ast.AugAssign):
            # ``x += 1`` calls ``__iadd__``: on a tensor it mutates the caller's object.
            raise Decline(failed("W106", f"line {line}: `{ast.unparse(statement)}` may update a tensor in place"))
        if isinstance(statement, ast.Expr):
            call = statement.value
            if isinstance(call, ast.Call):
                reason = self.call_is_safe(call)
                if reason:
                    raise Decline(failed("W106", f"line {line}: {reason}"))
                return  # a safe call whose value is unused does nothing
        if isinstance(statement, (ast.Assign, ast.AnnAssign)):
            raise Decline(failed("W106", f"line {line}: the write to `{ast.unparse(statement).split('=')[0].strip()}` escapes the branch"))
        raise Decline(failed("W106", f"line {line}: a `{type(statement).__name__}` statement cannot run on both paths"))

    def _object_bound(self, arm: _Arm, value: ast.expr) -> int:
        if isinstance(value, ast.Name) and value.id in arm.object_of:
            return arm.object_of[value.id]
        self._objects = getattr(self, "_objects", 0) + 1
        return self._objects

    # freshness ------------------------------------------------------------------------

    def value_is_fresh(
        self, arm: _Arm, expression: ast.expr, helper_locals=None, carried_into: str | None = None
    ) -> str | None:
        """None when ``expression`` (in the arm's terms, before renaming) is a new object
        or not a tensor; else why it may be an existing object. ``carried_into`` names the
        variable that will hold the value after the branch (None: a returned value or a
        shared call's argument)."""
        facts = self.context.facts
        if isinstance(expression, ast.Constant):
            return None
        if isinstance(expression, (ast.BinOp, ast.Compare)):
            return None
        if isinstance(expression, ast.UnaryOp) and not isinstance(expression.op, ast.UAdd):
            return None
        if isinstance(expression, (ast.Tuple, ast.List)):
            # Not a tensor: ``select`` would make the plain choice, breaking inside
            # graphmend's runtime where the original broke once at its ``if``.
            return f"`{ast.unparse(expression)}` is a tuple or list, which no graph form selects"
        if isinstance(expression, ast.Name):
            if helper_locals is not None:
                if expression.id in helper_locals:
                    return helper_locals[expression.id]
                return f"`{expression.id}` is a helper's parameter"
            if expression.id in arm.not_fresh:
                return arm.not_fresh[expression.id]
            return self.earlier_value_is_unaliased(arm, expression.id, carried_into)
        if isinstance(expression, ast.Call):
            callee = expression.func
            # ``F.relu(x, inplace=True)``, ``torch.exp(x, out=buf)`` and ``x.add_(1)``
            # return the tensor they write: an existing object, not a new one.
            written = writes_through_keyword(expression) or updates_in_place(expression)
            if written is not None:
                return written
            qualified = facts.qualified_name_of(callee) if helper_locals is None else None
            if qualified in POINTWISE_TORCH:
                if len(expression.args) > POINTWISE_TORCH[qualified][1][1]:
                    # a positional argument past the operands may be ``inplace``
                    return f"`{ast.unparse(expression)}` has arguments past its operands"
                return None
            if (
                isinstance(callee, ast.Attribute)
                and callee.attr in FRESH_METHODS
                and qualified is None
                and len(expression.args) <= 1  # ``F.relu(x, True)`` is in place
            ):
                return None
            purity = self.context.module.purity
            function = None
            if isinstance(callee, ast.Name) and callee.id in purity.functions and not facts.is_local(callee.id):
                function = purity.functions[callee.id]
            elif helper_locals is None:
                function = self.safety._same_class_method(callee)
            if function is not None:
                return self._helper_returns_fresh(arm, function)
        return f"`{ast.unparse(expression)}` may be an existing object"

    def earlier_value_is_unaliased(self, arm: _Arm, name: str, carried_into: str | None) -> str | None:
        """The value ``name`` has at the branch is a new object nothing else refers to.

        That holds when every definition reaching the branch is ``name = <new value>``
        and every read that may see one of those definitions keeps no reference to
        it (an operand, a pointwise call's argument, the receiver of a method that
        returns a new tensor, ``.shape``). Then the object is unreachable once
        ``select`` rebinds ``name``, and a new tensor in its place is indistinguishable.

        When the value is carried into another name (``z = y`` in an arm, a returned
        ``y``, a shared call's argument), ``y`` itself is not rebound: ``carried_value_is_the_only_reference``
        must hold as well.
        """
        existing = f"`{name}` holds an object that existed before the branch and may be referred to elsewhere"
        facts = self.context.facts
        definitions = facts.reaching.reaching(self.node, name)
        if not definitions:
            return existing
        for definition in definitions:
            statement = definition.node.statement
            if not (
                assigns_name_alone(statement, name)
                and self.value_is_fresh(_Arm([], "earlier"), statement.value, helper_locals={}) is None
            ):
                return existing
        arms = {id(n) for arm_ in (self.true_arm.original, self.false_arm.original) for s in arm_ for n in ast.walk(s)}
        for read, cfg_node, parent in self.references.reads_of(name):
            if id(read) in arms or self.references.keeps_no_reference(read, parent, may_update=True):
                continue
            if cfg_node is None:
                return existing
            # A read the old value reaches only through the branch sees the selected value.
            if any(
                d is e and reaches_avoiding(e.node, cfg_node, self.node)
                for d in facts.reaching.reaching(cfg_node, name)
                for e in definitions
            ):
                return existing
        if carried_into != name:
            return self.carried_value_is_the_only_reference(arm, name, carried_into, definitions)
        return None

    def carried_value_is_the_only_reference(
        self, arm: _Arm, name: str, carried_into: str | None, definitions
    ) -> str | None:
        """``z = y`` in an arm (or ``return y``, or ``y`` as a shared call's argument) with
        ``y``'s earlier value new and unaliased: ``select`` gives ``z`` a new tensor while
        ``y`` keeps the old object. That cannot be observed only when ``y``'s old value is
        read nowhere after the branch (``z.mul_(10)`` would update it in the original; seed
        2530) and the arm passes it on once (``z = y; w = y`` makes ``z`` and ``w`` one
        object in the original).
        """
        if name in arm.carried and (carried_into is None or arm.carried[name] != carried_into):
            return failed("W111", f"the arm passes `{name}`'s earlier value on twice; each copy would be a new tensor")
        facts = self.context.facts
        inside = {id(n) for arm_ in (self.true_arm.original, self.false_arm.original) for s in arm_ for n in ast.walk(s)}
        after = reachable_from(self.node)
        for read, cfg_node, _parent in self.references.reads_of(name):
            if id(read) in inside:
                continue
            if cfg_node is None:
                return failed("W111", f"`{name}` is read where the analysis cannot place it, and shares the selected object")
            if id(cfg_node) in after and any(
                d is e for d in facts.reaching.reaching(cfg_node, name) for e in definitions
            ):
                return failed("W111", (
                    f"`{name}` is still read after the branch (line {read.lineno}) and would no longer share "
                    f"its object with the selected value"
                ))
        arm.carried[name] = carried_into
        return None

    def selected_name_is_only_consumed(self, name: str) -> str | None:
        """Every read that may see the selected value keeps no reference to it: then
        whether it is the arm's object or a new tensor cannot be observed."""
        facts = self.context.facts
        inside = {id(n) for arm in (self.true_arm.original, self.false_arm.original) for s in arm for n in ast.walk(s)}
        escapes = f"the selected `{name}` may be kept, returned or updated in place after the branch"
        for read, cfg_node, parent in self.references.reads_of(name):
            if self.references.keeps_no_reference(read, parent):
                continue
            if cfg_node is None:
                return escapes
            if any(id(d.node.statement) in inside for d in facts.reaching.reaching(cfg_node, name)):
                return escapes
        for node in ast.walk(facts.function):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                cfg_node = facts.node_for(node)
                if cfg_node is None or any(
                    id(d.node.statement) in inside for d in facts.reaching.reaching(cfg_node, name)
                ):
                    return escapes  # ``h += 1`` updates the selected tensor in place
        return None

    def nothing_updated_in_place_while_selected_is_read(self, name: str) -> str | None:
        """The selected ``name`` holds an arm's existing object in the original and a new
        tensor after ``select``: both read alike only while that object keeps its value.
        No statement between the branch and a read of the selected value may update a
        tensor in place (``x.mul_(2)`` after ``z = x`` shows through ``z``)."""
        facts = self.context.facts
        inside = {id(n) for arm in (self.true_arm.original, self.false_arm.original) for s in arm for n in ast.walk(s)}
        reads = [
            cfg_node
            for _read, cfg_node, _parent in self.references.reads_of(name)
            if cfg_node is not None
            and any(id(d.node.statement) in inside for d in facts.reaching.reaching(cfg_node, name))
        ]
        before_a_read: set[int] = set()
        frontier = list(reads)
        while frontier:
            node = frontier.pop()
            if id(node) in before_a_read:
                continue
            before_a_read.add(id(node))
            frontier.extend(node.predecessors)
        after = reachable_from(self.node)
        for cfg_node in facts.graph.nodes:
            if id(cfg_node) not in after or id(cfg_node) not in before_a_read:
                continue
            statement = cfg_node.statement
            if statement is None or id(statement) in inside or statement is self.statement:
                continue
            reason = self.references.may_update_in_place(
                statement,
                since=self.node,
                is_new=lambda value: self.value_is_fresh(_Arm([], "later"), value, helper_locals={}) is None,
            )
            if reason:
                return f"the selected `{name}` may hold an existing object, and {reason} (line {statement.lineno}) before it is read"
        return None

    def _helper_returns_fresh(self, arm: _Arm, function: ast.FunctionDef) -> str | None:
        # The helper passed ExpressionSafety: a docstring, local bindings, one return.
        locals_: dict[str, str | None] = {}
        for statement in function.body:
            if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name):
                locals_[statement.targets[0].id] = self.value_is_fresh(arm, statement.value, locals_)
            elif isinstance(statement, ast.Return):
                reason = self.value_is_fresh(arm, statement.value, locals_)
                return f"`{function.name}` may return an existing object: {reason}" if reason else None
        return f"`{function.name}` may return an existing object"

    def selected_value_is_fresh(self, arm: _Arm, expression: ast.expr, carried_into: str | None = None) -> str | None:
        """``torch.where`` returns a new tensor: the value selected must be new too."""
        reason = self.value_is_fresh(arm, expression, carried_into=carried_into)
        if reason:
            return failed(condition_id(reason) or "W110", f"{reason}; `torch.where` would return a new tensor in its place")
        return None

    # planning -------------------------------------------------------------------------

    def shape(self) -> str:
        true_last = self.true_arm.original[-1] if self.true_arm.original else None
        false_last = self.false_arm.original[-1] if self.false_arm.original else None
        reason = first_failure(
            lambda: failed("W103", arms_leave_only_at_their_end([self.true_arm.original, self.false_arm.original])),
            lambda: failed("W104", arms_end_alike(true_last, false_last)),
        )
        if reason:
            raise Decline(reason)
        if isinstance(true_last, ast.Return):
            return "return"
        if (
            isinstance(true_last, ast.Expr)
            and isinstance(false_last, ast.Expr)
            and isinstance(true_last.value, ast.Call)
            and isinstance(false_last.value, ast.Call)
            and self._same_call_shape(true_last.value, false_last.value)
        ):
            return "call"
        return "assign"

    @staticmethod
    def _same_call_shape(first: ast.Call, second: ast.Call) -> bool:
        return (
            ast.dump(first.func) == ast.dump(second.func)
            and len(first.args) == len(second.args)
            and [ast.dump(k) for k in first.keywords] == [ast.dump(k) for k in second.keywords]
            and not any(isinstance(a, ast.Starred) for a in first.args + second.args)
            and any(ast.dump(a) != ast.dump(b) for a, b in zip(first.args, second.args))
        )

    def names_used_after(self) -> set[str]:
        """Names read outside the arms (``h += y`` and ``del h`` read ``h`` too); in a loop,
        reads inside the branch read the previous iteration's value, so they count as well."""
        function = self.context.facts.function
        in_loop = _in_loop(self.context, self.statement)
        inside = set()
        if not in_loop:
            for arm in (self.true_arm.original, self.false_arm.original):
                for statement in arm:
                    inside.update(id(node) for node in ast.walk(statement))
        used = set()
        for node in ast.walk(function):
            if id(node) in inside:
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Load, ast.Del)):
                used.add(node.id)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                used.add(node.target.id)
        return used

    def selected_value_may_be_read(self, name: str) -> bool:
        """Whether a read may see the value ``name`` has after the branch: a read (``h +=
        1`` and ``del h`` too) that a binding in an arm reaches, or one the analysis
        cannot place. Only such names are selected. Selecting any other name would read
        its earlier value on the compiled path, keeping it alive across an earlier graph
        break where the original let it die: that graph then returns it, and AOTAutograd
        gives the inputs it depends on a gradient the original never did (zeros where
        there was none; NaN through ``sqrt`` at 0)."""
        facts = self.context.facts
        inside = {id(n) for arm in (self.true_arm.original, self.false_arm.original) for s in arm for n in ast.walk(s)}
        # An earlier rewrite's compiled form has no place in the analysis; each read there
        # either mirrors one in the original it keeps or is a selection that this
        # branch's value reaches only through a later read counted here.
        generated = {
            id(n)
            for guard in ast.walk(facts.function)
            if is_guard(guard)
            for n in ast.walk(guard)
            if not is_original(n)
        }

        def sees_an_arm_binding(cfg_node) -> bool:
            return cfg_node is None or any(
                id(d.node.statement) in inside for d in facts.reaching.reaching(cfg_node, name)
            )

        if any(
            sees_an_arm_binding(cfg_node)
            for read, cfg_node, _parent in self.references.reads_of(name)
            if id(read) not in generated
        ):
            return True
        for node in ast.walk(facts.function):
            if isinstance(node, ast.AugAssign):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            else:
                continue
            if id(node) in generated:
                continue
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and sees_an_arm_binding(
                facts.node_for(node)
            ):
                return True
        return False

    def _select(self, taken: ast.expr, if_true: ast.expr, if_false: ast.expr) -> ast.expr:
        return statements(
            f"{RUNTIME_NAME}.select(TAKEN, IF_TRUE, IF_FALSE)", TAKEN=taken, IF_TRUE=if_true, IF_FALSE=if_false,
        )[0].value

    def plan(self) -> list[ast.stmt]:
        shape = self.shape()
        self.analyse_arm(self.true_arm, shape)
        self.analyse_arm(self.false_arm, shape)
        arms = (self.true_arm, self.false_arm)
        arm_bound = set(self.true_arm.renamed) | set(self.false_arm.renamed)
        reason = failed("W108", writes_no_outer_name(self.context, arm_bound))
        if reason:
            raise Decline(reason)
        taken = f"_gm_taken_{self.number}"
        planned = statements(f"{taken} = HOLDS", HOLDS=holds_expression(self.context, self.test, True))
        planned += self.true_arm.setup + self.false_arm.setup
        taken_name = ast.Name(id=taken, ctx=ast.Load())
        if shape == "return":
            reason = first_failure(
                *[lambda arm=arm: self.selected_value_is_fresh(arm, arm.unrenamed_result) for arm in arms]
            )
            if reason:
                raise Decline(restated(reason, f"the returned value: {reason}"))
            planned += statements(
                "return SELECTED",
                SELECTED=self._select(taken_name, self.true_arm.result, self.false_arm.result),
            )
            return planned
        used_after = self.names_used_after()
        selected = [
            name for name in sorted(arm_bound) if name in used_after and self.selected_value_may_be_read(name)
        ]
        held = [list(selected), list(selected)]
        if shape == "call":
            for index, arm in enumerate(arms):
                held[index] += [a.id for a in arm.call.args if isinstance(a, ast.Name) and a.id in arm.renamed]
        reason = failed("W113", selected_names_hold_distinct_objects(arms, held))
        if reason:
            raise Decline(reason)
        for name in selected:
            reason = failed("W109", bound_on_both_paths(self.context, self.node, name, arms))
            if reason is None:
                reason = first_failure(
                    *[
                        lambda arm=arm, name=name: self.selected_value_is_fresh(
                            arm, ast.Name(id=name, ctx=ast.Load()), carried_into=name
                        )
                        for arm in arms
                    ],
                )
                if reason and self.selected_name_is_only_consumed(name) is None:
                    # Exact when the arm's object keeps its value while the selected name is read.
                    reason = failed("W112", self.nothing_updated_in_place_while_selected_is_read(name))
            if reason:
                raise Decline(reason)
            planned += statements(
                f"{name} = SELECTED",
                SELECTED=self._select(taken_name, self.true_arm.value_of(name), self.false_arm.value_of(name)),
            )
        if shape == "call":
            true_call, false_call = self.true_arm.call, self.false_arm.call
            reason = failed("W114", merged_call_means_one_callee(true_call, false_call, arm_bound))
            if reason:
                raise Decline(reason)
            merged = copy.deepcopy(true_call)
            merged.args = []
            for true_argument, false_argument in zip(true_call.args, false_call.args):
                if ast.dump(true_argument) == ast.dump(false_argument) and not (
                    {n.id for n in ast.walk(true_argument) if isinstance(n, ast.Name)} & arm_bound
                ):
                    merged.args.append(copy.deepcopy(true_argument))
                    continue
                reason = first_failure(
                    lambda argument=true_argument: self.selected_value_is_fresh(self.true_arm, argument),
                    lambda argument=false_argument: self.selected_value_is_fresh(self.false_arm, argument),
                )
                if reason:
                    raise Decline(restated(reason, f"an argument of the shared call: {reason}"))
                merged.args.append(
                    self._select(taken_name, self.true_arm.load(true_argument), self.false_arm.load(false_argument))
                )
            planned.append(ast.Expr(value=merged))
        return planned

    def operand_checks(self, extra: ExpressionSafety | None = None) -> list[ast.expr]:
        """Checks made while tracing that the hoisted code cannot raise (see analysis/safety.py)."""
        checks: list[ast.expr] = []
        seen: set[str] = set()
        sources = [self.safety] + ([extra] if extra is not None else [])
        for source in sources:
            for attribute in source.attributes:
                chain = []
                node = attribute
                while isinstance(node, ast.Attribute):
                    chain.append(node)
                    node = node.value
                for link in reversed(chain):
                    text = f"{ast.unparse(link.value)}.{link.attr}"
                    if text not in seen:
                        seen.add(text)
                        checks.append(
                            statements(f"{RUNTIME_NAME}.reads_plainly(OWNER, {link.attr!r})", OWNER=link.value)[0].value
                        )
            for callee, qualified_name in source.methods:
                text = f"{ast.unparse(callee)}()"
                if text not in seen:
                    seen.add(text)
                    checks.append(
                        statements(
                            f"{RUNTIME_NAME}.is_the_method(OWNER, {callee.attr!r}, {qualified_name!r}, __name__)",
                            OWNER=callee.value,
                        )[0].value
                    )
        pairs = []
        texts = set()
        for source in sources:
            for operand, kind in source.operands:
                text = f"{ast.unparse(operand)}:{kind}"
                if text not in texts:
                    texts.add(text)
                    pairs.append(ast.Tuple(elts=[copy.deepcopy(operand), ast.Constant(kind)], ctx=ast.Load()))
        if pairs:
            check = statements(f"{RUNTIME_NAME}.operands_combine()")[0].value
            check.args = pairs
            checks.append(check)
        return checks


def _is_runtime_call(expression: ast.expr, name: str) -> bool:
    return isinstance(expression, ast.Call) and ast.unparse(expression.func) == f"{RUNTIME_NAME}.{name}"


def false_arm_of(statement: ast.If, enclosing: list[ast.stmt]):
    """The else-arm; for ``if c: ...; return a`` followed by ``return b``, that return."""
    if statement.orelse:
        return statement.orelse, None
    index = next(i for i, s in enumerate(enclosing) if s is statement)
    following = enclosing[index + 1] if index + 1 < len(enclosing) else None
    if statement.body and isinstance(statement.body[-1], ast.Return) and isinstance(following, ast.Return):
        return [following], following
    return [], None


def apply(context: FunctionContext) -> None:
    if not context.may_depend_on_tensor_values():
        return
    def rewrite(statement: ast.stmt, enclosing: list[ast.stmt]) -> list[ast.stmt] | None:
        if not isinstance(statement, ast.If):
            return None
        node = context.facts.node_for(statement)
        if not context.data.is_data_dependent(statement.test, node):
            return None
        if context.depends_only_through_items(statement.test, node):
            return None  # a Python value from ``.item()``: the break is at that call
        false_arm, consumed_next = false_arm_of(statement, enclosing)
        static_prefix, dynamic = split_static_prefix(context, statement.test, node)
        condition_safety = ExpressionSafety(context, node)
        reason = failed("W101", why_not_tensorizable(context, dynamic, node, condition_safety))
        if reason is None and static_prefix and (false_arm or consumed_next):
            reason = failed("W102", "a static `and` part guards a branch with an else arm")
        performed_check = None
        if reason is None:
            rewrite_plan = WhereRewrite(context, statement, false_arm, consumed_next, test=dynamic)
            try:
                planned = rewrite_plan.plan()
            except Decline as decline:
                reason = decline.args[0]
                # Arms that choose which existing object an attribute holds: performed
                # when the graph runs (performed.py), where a selection would make a new one.
                if consumed_next is None:
                    performed_plan = performed.plan(
                        context, statement, false_arm, rewrite_plan.number,
                        holds_expression(context, dynamic, True), rewrite_plan.names_used_after(),
                    )
                    if isinstance(performed_plan, tuple):
                        planned, performed_check = performed_plan
                        rewrite_plan = WhereRewrite(context, statement, false_arm, consumed_next, test=dynamic)
                        reason = None
                    elif condition_id(performed_plan) != "W119":
                        reason = performed_plan
        message = f"data-dependent branch `if {ast.unparse(statement.test)}:`"
        if static_prefix:
            # ``if x.dtype == torch.float16 and (...).any():`` breaks only in half precision.
            message += f", a break only when `{ast.unparse(conjunction(static_prefix))}`"
        finding = context.module.report(
            context.facts, statement, DATA_DEPENDENT_CONTROL_FLOW, message, RULE, reason,
        )
        if not finding.fixed:
            return None
        context.module.uses_runtime = True
        if static_prefix:
            # ``if S and D: body`` is ``if S: (if D: body)``: S keeps short-circuiting.
            planned = statements("if PREFIX:\n    BODY", PREFIX=conjunction(static_prefix), BODY=planned)
        place(planned, statement)
        original = [statement] + ([consumed_next] if consumed_next is not None else [])
        checks = rewrite_plan.trace_time_checks + rewrite_plan.operand_checks(condition_safety)
        if performed_check is not None:
            checks.insert(0, performed_check)
        if not any(_is_runtime_call(check, "operands_combine") for check in checks):
            # ``operands_combine`` makes this check too (see runtime/selection.py).
            checks.append(statements(f"{RUNTIME_NAME}.selection.graph_so_far_may_continue()")[0].value)
        also = None
        for check in checks:
            also = check if also is None else ast.BoolOp(op=ast.And(), values=[also, check])
        guard = compiled_or_original(planned, original, f"{RULE}: original branch", also=also)
        if consumed_next is not None:
            enclosing.remove(consumed_next)
        return [guard]

    rewrite_statements(context.facts.function, rewrite)
