"""[Where] data-dependent two-way branches become a selection inside the graph.

    if x.sum() > 0:
        z = x_1 + y_1
    else:
        z = x_1 * y_1
becomes (on the compiled path; the eager path keeps the original ``if``)
    _gm_taken_1 = __graphmend__.guard_holds(x.sum() > 0, True)
    z__gm_true_1 = x_1 + y_1
    z__gm_false_1 = x_1 * y_1
    z = __graphmend__.select(_gm_taken_1, z__gm_true_1, z__gm_false_1)

Three shapes are handled: the arms assign the same names, the arms return, or the
arms end by calling the same function with different positional arguments. Both
arms then run, so every statement in them must be unobservable on the untaken
path: no possible exception, no write that escapes (writes to locals are renamed
per arm), apart from two licensed writes that are idempotent: a device move
``self.a = self.a.to(d)`` and an initialization guarded by its own existence
check ``if not hasattr(self, "a"): self.a = f(...)``. ``select`` uses
``torch.where`` only when both values are tensors of one shape, dtype and device.

Legality conditions: the condition is tensorizable (``conditions.why_not_tensorizable``:
no ``.item()``, and/or operands safe to evaluate unconditionally); the arms have one
of the three shapes and leave only by their final ``return``; every setup statement
is safe on the untaken path (``ExpressionSafety`` in safety.py, the two licensed
writes, no augmented assignment, which may update a tensor in place); a name live
after the branch is bound on both paths; no arm returns None.

Not modelled (documented assumption): elementwise arithmetic is taken not to raise;
a broadcasting error between operand shapes would surface while tracing.
"""

from __future__ import annotations

import ast
import copy

from graphmend.rewrite.findings import DATA_DEPENDENT_CONTROL_FLOW
from graphmend.rewrite.templates import RUNTIME_NAME, compiled_or_original, place, statements
from graphmend.rules.base import FunctionContext, first_failure, rewrite_statements
from graphmend.rules.safety import ExpressionSafety
from graphmend.rules.conditions import (
    conjunction,
    holds_expression,
    split_static_prefix,
    why_not_tensorizable,
)

RULE = "Where"
class Decline(Exception):
    pass


class _Arm:
    """One arm, its statements rewritten to bind per-arm names."""

    def __init__(self, statements_: list[ast.stmt], suffix: str):
        self.original = statements_
        self.suffix = suffix
        self.renamed: dict[str, str] = {}
        self.setup: list[ast.stmt] = []
        self.result: ast.expr | None = None
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

    # legality conditions -------------------------------------------------------------

    # arm analysis -------------------------------------------------------------------

    def _is_self_attribute(self, node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == self.context.facts.self_name
            and self.context.facts.self_name is not None
        )

    def _licensed_device_move(self, statement: ast.stmt) -> bool:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            return False
        target, value = statement.targets[0], statement.value
        return (
            self._is_self_attribute(target)
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "to"
            and ast.dump(value.func.value) == ast.dump(ast.Attribute(value=target.value, attr=target.attr, ctx=ast.Load()))
            and not value.keywords
            and len(value.args) == 1
            and self.expression_is_safe(value.args[0]) is None
        )

    def _licensed_memoized_init(self, statement: ast.stmt) -> str | None | bool:
        """False when not this shape; None when licensed; else the reason it is not."""
        if not (isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1):
            return False
        test = statement.test
        if not (
            isinstance(test, ast.UnaryOp)
            and isinstance(test.op, ast.Not)
            and isinstance(test.operand, ast.Call)
            and isinstance(test.operand.func, ast.Name)
            and test.operand.func.id == "hasattr"
            and len(test.operand.args) == 2
            and isinstance(test.operand.args[1], ast.Constant)
        ):
            return False
        owner, attribute = test.operand.args
        assignment = statement.body[0]
        if not isinstance(assignment, ast.Assign) or len(assignment.targets) != 1:
            return False
        target = assignment.targets[0]
        elements = target.elts if isinstance(target, ast.Tuple) else [target]
        guarded = [
            e for e in elements
            if isinstance(e, ast.Attribute) and ast.dump(e.value) == ast.dump(owner)
            and e.attr == attribute.value
        ]
        if len(guarded) != 1 or not all(
            e is guarded[0] or (isinstance(e, ast.Name) and e.id == "_") for e in elements
        ):
            return False
        call = assignment.value
        if not isinstance(call, ast.Call):
            return self.expression_is_safe(call)
        reason = self.call_is_safe(call)
        if reason is None:
            return None
        # An attribute holding a function (``self.rope_init_fn``) cannot be resolved
        # here; the rewrite then checks while tracing that it is a function graphmend
        # proved pure in its own module, and keeps the original otherwise.
        if self._is_self_attribute(call.func):
            arguments_reason = first_failure(
                *[lambda e=e: self.expression_is_safe(e) for e in call.args + [k.value for k in call.keywords]]
            )
            if arguments_reason:
                return arguments_reason
            keywords = ast.Tuple(elts=[ast.Constant(k.arg) for k in call.keywords], ctx=ast.Load())
            self.trace_time_checks.append(
                statements(
                    f"{RUNTIME_NAME}.proven_pure(CALLEE, KEYWORDS)",
                    CALLEE=call.func,
                    KEYWORDS=keywords,
                )[0].value
            )
            return None
        return reason

    def analyse_arm(self, arm: _Arm, ends_with: str) -> None:
        self.safety.bound_names = set()
        body = list(arm.original)
        if ends_with == "return":
            last = body.pop()
            if last.value is None or (isinstance(last.value, ast.Constant) and last.value.value is None):
                raise Decline("an arm returns None")
            arm.result = last.value
        elif ends_with == "call":
            last = body.pop()
            arm.call = last.value
        for statement in body:
            self.analyse_setup(arm, statement)
            self.safety.bound_names = set(arm.renamed)
        if arm.result is not None:
            reason = self.expression_is_safe(arm.result)
            if reason:
                raise Decline(f"the returned value: {reason}")
            arm.result = arm.load(arm.result)
        if arm.call is not None:
            for argument in arm.call.args:
                reason = self.expression_is_safe(argument)
                if reason:
                    raise Decline(f"an argument of the shared call: {reason}")

    def analyse_setup(self, arm: _Arm, statement: ast.stmt) -> None:
        line = statement.lineno
        if isinstance(statement, ast.Pass):
            return
        if self._licensed_device_move(statement):
            arm.setup.append(copy.deepcopy(statement))
            return
        memoized = self._licensed_memoized_init(statement)
        if memoized is None:
            arm.setup.append(copy.deepcopy(statement))
            return
        if isinstance(memoized, str):
            raise Decline(f"line {line}: the memoized initialization: {memoized}")
        if isinstance(statement, ast.Assign) and all(
            isinstance(t, ast.Name) or (isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts))
            for t in statement.targets
        ):
            reason = self.expression_is_safe(statement.value)
            if reason:
                raise Decline(f"line {line}: {reason}")
            value = arm.load(statement.value)
            targets = []
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    targets.append(ast.Name(id=arm.bind(target.id), ctx=ast.Store()))
                else:
                    if not isinstance(statement.value, (ast.Tuple, ast.List)) or len(
                        statement.value.elts
                    ) != len(target.elts):
                        raise Decline(f"line {line}: unpacking may raise")
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
            raise Decline(f"line {line}: `{ast.unparse(statement)}` may update a tensor in place")
        if isinstance(statement, ast.Expr):
            call = statement.value
            if isinstance(call, ast.Call):
                reason = self.call_is_safe(call)
                if reason:
                    raise Decline(f"line {line}: {reason}")
                return  # a pure call whose value is unused does nothing
        if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            raise Decline(f"line {line}: the write to `{ast.unparse(statement).split('=')[0].strip()}` escapes the branch")
        raise Decline(f"line {line}: a `{type(statement).__name__}` statement cannot run on both paths")

    # planning -----------------------------------------------------------------------

    def shape(self) -> str:
        true_last = self.true_arm.original[-1] if self.true_arm.original else None
        false_last = self.false_arm.original[-1] if self.false_arm.original else None
        for arm in (self.true_arm.original, self.false_arm.original):
            for statement in arm[:-1] if arm else []:
                for node in ast.walk(statement):
                    if isinstance(node, (ast.Return, ast.Break, ast.Continue, ast.Raise, ast.Yield)):
                        raise Decline(f"line {node.lineno}: an arm leaves the branch early")
        returns = [isinstance(last, ast.Return) for last in (true_last, false_last)]
        if all(returns):
            return "return"
        if any(returns):
            raise Decline("one arm returns and the other does not")
        for last in (true_last, false_last):
            if isinstance(last, (ast.Raise, ast.Break, ast.Continue)):
                raise Decline(f"line {last.lineno}: an arm leaves the branch with `{type(last).__name__.lower()}`")
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
        """Names read outside the branch (``h += y`` and ``del h`` read ``h`` too)."""
        function = self.context.facts.function
        inside = {id(node) for node in ast.walk(self.statement)}
        used = set()
        for node in ast.walk(function):
            if id(node) in inside:
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Load, ast.Del)):
                used.add(node.id)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                used.add(node.target.id)
        return used

    def plan(self) -> list[ast.stmt]:
        shape = self.shape()
        self.analyse_arm(self.true_arm, shape)
        self.analyse_arm(self.false_arm, shape)
        taken = f"_gm_taken_{self.number}"
        planned = statements(f"{taken} = HOLDS", HOLDS=holds_expression(self.context, self.test, True))
        planned += self.true_arm.setup + self.false_arm.setup
        taken_name = ast.Name(id=taken, ctx=ast.Load())
        if shape == "return":
            planned += statements(
                f"return {RUNTIME_NAME}.select(TAKEN, IF_TRUE, IF_FALSE)",
                TAKEN=taken_name, IF_TRUE=self.true_arm.result, IF_FALSE=self.false_arm.result,
            )
            return planned
        used_after = self.names_used_after()
        facts = self.context.facts
        for name in sorted(set(self.true_arm.renamed) | set(self.false_arm.renamed)):
            if name not in used_after:
                continue
            for arm in (self.true_arm, self.false_arm):
                if name not in arm.renamed and not facts.reaching.definitely_assigned(self.node, name):
                    raise Decline(f"`{name}` is bound on one path only and may be unbound after")
            planned += statements(
                f"{name} = {RUNTIME_NAME}.select(TAKEN, IF_TRUE, IF_FALSE)",
                TAKEN=taken_name,
                IF_TRUE=self.true_arm.value_of(name),
                IF_FALSE=self.false_arm.value_of(name),
            )
        if shape == "call":
            merged = copy.deepcopy(self.true_arm.call)
            merged.func = self.true_arm.load(merged.func)
            merged.keywords = [
                ast.keyword(arg=k.arg, value=self.true_arm.load(k.value)) for k in merged.keywords
            ]
            merged.args = []
            for true_argument, false_argument in zip(self.true_arm.call.args, self.false_arm.call.args):
                if ast.dump(true_argument) == ast.dump(false_argument) and not (
                    self.true_arm.renamed or self.false_arm.renamed
                ):
                    merged.args.append(copy.deepcopy(true_argument))
                    continue
                merged.args.append(
                    statements(
                        f"{RUNTIME_NAME}.select(TAKEN, IF_TRUE, IF_FALSE)",
                        TAKEN=taken_name,
                        IF_TRUE=self.true_arm.load(true_argument),
                        IF_FALSE=self.false_arm.load(false_argument),
                    )[0].value
                )
            planned.append(ast.Expr(value=merged))
        return planned


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
        false_arm, consumed_next = false_arm_of(statement, enclosing)
        static_prefix, dynamic = split_static_prefix(context, statement.test, node)
        reason = why_not_tensorizable(context, dynamic, node)
        if reason is None and static_prefix and (false_arm or consumed_next):
            reason = "a static `and` part guards a branch with an else arm"
        if reason is None:
            rewrite_plan = WhereRewrite(context, statement, false_arm, consumed_next, test=dynamic)
            try:
                planned = rewrite_plan.plan()
            except Decline as decline:
                reason = str(decline)
        context.module.report(
            context.facts, statement, DATA_DEPENDENT_CONTROL_FLOW,
            f"data-dependent branch `if {ast.unparse(statement.test)}:`", RULE, reason,
        )
        if reason:
            return None
        context.module.uses_runtime = True
        if static_prefix:
            # ``if S and D: body`` is ``if S: (if D: body)``: S keeps short-circuiting.
            planned = statements("if PREFIX:\n    BODY", PREFIX=conjunction(static_prefix), BODY=planned)
        place(planned, statement)
        original = [statement] + ([consumed_next] if consumed_next is not None else [])
        also = None
        for check in rewrite_plan.trace_time_checks:
            also = check if also is None else ast.BoolOp(op=ast.And(), values=[also, check])
        guard = compiled_or_original(planned, original, f"{RULE}: original branch", also=also)
        if consumed_next is not None:
            enclosing.remove(consumed_next)
        return [guard]

    rewrite_statements(context.facts.function, rewrite)
