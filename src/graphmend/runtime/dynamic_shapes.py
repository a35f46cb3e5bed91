"""Positions of nonzero elements, kept inside the graph (the Capture rule).

``torch.nonzero(x)``, ``x.nonzero()``, ``torch.where(x)`` and ``torch.argwhere(x)`` give
as many positions as ``x`` has nonzero elements: an output size that depends on tensor
data, which TorchDynamo captures only under ``capture_dynamic_output_shape_ops`` (a
global flag that changes other code too) and otherwise breaks the graph at. Rewritten
code calls the functions here on its compiled path only: each computes the positions
with ``graphmend::nonzero``, an operator that runs ``torch.nonzero`` itself and, while
tracing, gives its output a fresh size for the one call (an unbacked size), so only the
rewritten calls are captured and the positions are the same numbers. The tuple forms
unbind the positions as ``torch.where`` does (``nonzero().unbind(1)``), so they are views
with the same strides.

Each captured call is a claim on its break (``graphmend.runtime.claims``): where the
whole trace shows that joining the graphs would change what the program does (the
joined graph records autograd, random draws sit on both sides), TorchDynamo traces
the frame again with the original call, and its break.

A size made here that TorchDynamo must later know on the host (``.tolist()`` of the
positions, a shape that reaches Python) makes tracing fail with
``GuardOnDataDependentSymNode`` where the original broke the graph. The rule declines
the uses it can see; for any other, the frame runs eagerly as its original would
(``conversion_failures``), the frame being converted before any of it runs.
"""

from __future__ import annotations

import threading

import torch
from torch._dynamo.comptime import comptime

from graphmend.runtime import claims
from graphmend.runtime.selection import is_plain_tensor

_state = threading.local()


def sizes_made() -> int:
    """How many sizes ``graphmend::nonzero`` made on this thread while tracing."""
    return getattr(_state, "sizes_made", 0)


@torch.library.custom_op("graphmend::nonzero", mutates_args=())
def _nonzero(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x)


@_nonzero.register_fake
def _nonzero_while_tracing(x: torch.Tensor) -> torch.Tensor:
    # ``ctx.new_dynamic_size()`` refuses unless the global flag is set; the size is made
    # the way it makes it, for this operator alone.
    from torch._library.fake_impl import allocate_size

    shape_env = torch.library.get_ctx()._shape_env
    count = allocate_size(shape_env)
    _state.sizes_made = sizes_made() + 1
    # The capture claimed last is this call's: the captured calls run only once claimed.
    claimed = captures_claimed()
    if claimed:
        claims.record_size_made(shape_env, count, claimed[-1])
    # ``torch.nonzero`` writes its positions column by column: strides ``(1, count)``.
    # A fake of other strides misleads the functionalizing backends, which plan views
    # of the real output by the fake's strides (CLAP under aot_eager: "view size is not
    # compatible with input tensor's size and stride").
    return x.new_empty_strided((count, x.dim()), (1, count), dtype=torch.long)


def _captured(x) -> bool:
    # Eagerly (``graphmend fix`` may write these calls on the one path) the original op.
    return torch.compiler.is_compiling() and is_plain_tensor(x) and x.dim() > 0 and not x.is_sparse


def may_capture() -> bool:
    """While tracing: whether the user's statement may lose its break in this trace (a
    claim the whole-trace checks may refuse, as Where's and Defer's: a joined graph that
    records autograd, random draws on both sides; ``graphmend.runtime.claims``). Not
    tracing, False. Refused, the statement runs as written, with its break where the
    original had it."""
    claimed = False
    comptime(_claim)
    return claimed


def _claim(context) -> None:
    claims.decide_in_trace(context, "claimed", (), _claim_capture)


def _claim_capture(tracer) -> bool:
    if not claims.claim_break_at_user_site(tracer, kind=claims.CAPTURE):
        return False
    user = claims.user_translator(tracer)
    captures_claimed().append((user.f_code.co_filename, user.lineno))
    return True


def captures_claimed() -> list:
    """The sites of calls ``may_capture`` let into the graph on this thread, in the order
    claimed (``conversion_failures`` traces a frame again without them when tracing
    needs a size they made on the host)."""
    if not hasattr(_state, "captures"):
        _state.captures = []
    return _state.captures


def captured_nonzero(x, *args, **kwargs):
    """``torch.nonzero(x, as_tuple=...)``, captured."""
    if not _captured(x) or args or set(kwargs) - {"as_tuple"}:
        return torch.nonzero(x, *args, **kwargs)
    positions = _nonzero(x.detach())
    return positions.unbind(1) if kwargs.get("as_tuple", False) else positions


def captured_nonzero_method(x, *args, **kwargs):
    """``x.nonzero(as_tuple=...)``, captured (any other object's ``nonzero`` is called)."""
    if not _captured(x) or args or set(kwargs) - {"as_tuple"}:
        return x.nonzero(*args, **kwargs)
    positions = _nonzero(x.detach())
    return positions.unbind(1) if kwargs.get("as_tuple", False) else positions


def captured_where(x, *args, **kwargs):
    """``torch.where(x)`` with the one argument, captured."""
    if not _captured(x) or args or kwargs:
        return torch.where(x, *args, **kwargs)
    return _nonzero(x.detach()).unbind(1)


def captured_argwhere(x, *args, **kwargs):
    """``torch.argwhere(x)``, captured."""
    if not _captured(x) or args or kwargs:
        return torch.argwhere(x, *args, **kwargs)
    return _nonzero(x.detach())


# ------------------------------------------------------------------------------------
# A loop over the experts a batch chose, run over every expert (``rules/capture_loops.py``).

_ELEMENTWISE_ACTIVATIONS = frozenset(
    {
        torch.nn.ReLU, torch.nn.ReLU6, torch.nn.GELU, torch.nn.SiLU, torch.nn.Tanh, torch.nn.Sigmoid,
        torch.nn.Mish, torch.nn.Hardswish, torch.nn.Hardsigmoid, torch.nn.LeakyReLU, torch.nn.ELU,
        torch.nn.SELU, torch.nn.CELU, torch.nn.Softplus, torch.nn.Tanhshrink, torch.nn.Identity,
    }
)
# transformers' activation classes (``ACT2FN``): elementwise functions of their input.
_ELEMENTWISE_ACTIVATION_MODULES = frozenset({"transformers.activations"})
_row_wise_classes: dict[type, str | None] = {}


def experts_run_empty_exactly(experts, classes, body_lines=()) -> bool:
    """Whether running the loop's body for every class ``< classes`` is exact: each
    expert ``experts[e]`` maps rows to rows with no effect (so no token, no effect), and
    no gradient is recorded for it. ``body_lines`` (first, last) are the loop body's
    lines in the caller's file: a claim refused there (the positions' capture) leaves
    the original loop, whose break is before it. A constant of the trace; not tracing,
    False."""
    exact = False
    comptime(_decide_experts)
    return exact


def _decide_experts(context) -> None:
    claims.decide_in_trace(
        context, "exact", ("experts", "classes", "body_lines"), _experts_exact, read=_module_or_constant
    )


def _experts_exact(translator, experts, classes, body_lines) -> bool:
    reason = why_not_run_empty_exactly(experts, classes) or body_keeps_its_captures(translator, body_lines)
    if reason is not None:
        claims.decline_at_user_site(translator, f"the loop keeps its chosen experts: {reason}")
    return reason is None


def body_keeps_its_captures(translator, body_lines) -> str | None:
    """The body's ``torch.where`` may be captured in this trace. Refused (an earlier
    trace's checks, no hooks into TorchDynamo, inference mode), it would break the graph
    inside the loop over every expert, where TorchDynamo cannot resume, and the whole
    frame would run eagerly (code before the loop that the
    original compiled traced ran eagerly, and the program's own ``is_compiling()`` test
    answered otherwise); the original loop breaks at ``.tolist()``, before it."""
    user = claims.user_translator(translator)
    if user is None:
        return "the loop's frame is not known"
    unavailable = claims.trace_checks_unavailable() or claims.not_inside_inference_mode(user)
    if unavailable is not None:
        return unavailable
    if body_lines:
        first, last = body_lines
        return claims.refused_between(user.f_code.co_filename, first, last)
    return None


def _module_or_constant(variable):
    """The module a TorchDynamo variable stands for (inlined or specialised), or the
    Python constant it holds."""
    value = getattr(variable, "value", None)
    if isinstance(value, torch.nn.Module):
        return value
    return variable.as_python_constant()


def why_not_run_empty_exactly(experts, classes) -> str | None:
    if type(classes) is not int or classes < 0:
        return "the number of classes is not an int"
    if not isinstance(experts, (torch.nn.ModuleList, torch.nn.Sequential)) or len(experts) < classes:
        return "the experts are not a module list with an expert for every class"
    if torch.nn.modules.module._global_forward_hooks or torch.nn.modules.module._global_forward_pre_hooks:
        return "a global forward hook is registered"
    for index in range(classes):
        expert = experts[index]
        for module in expert.modules():
            if module._forward_hooks or module._forward_pre_hooks:
                return f"expert {index} has a forward hook"
        if torch.is_grad_enabled() and any(p.requires_grad for p in expert.parameters()):
            return f"gradients are recorded for expert {index}'s parameters"
        reason = _why_not_row_wise(expert)
        if reason:
            return f"expert {index}: {reason}"
    return None


def _why_not_row_wise(module: torch.nn.Module) -> str | None:
    kind = type(module)
    if kind in _ELEMENTWISE_ACTIVATIONS or kind.__module__ in _ELEMENTWISE_ACTIVATION_MODULES:
        return None
    if kind is torch.nn.Linear:
        return None
    if kind not in _row_wise_classes:
        _row_wise_classes[kind] = _why_not_row_wise_forward(kind)
    reason = _row_wise_classes[kind]
    if reason:
        return reason
    for name, child in module.named_children():
        reason = _why_not_row_wise(child)
        if reason:
            return f"`{name}`: {reason}"
    return None


def _why_not_row_wise_forward(kind: type) -> str | None:
    """A ``forward(self, x)`` whose statements bind names and return, built from its
    input, its own submodules' calls (``self.name(...)``) and arithmetic."""
    import ast
    import inspect
    import textwrap

    forward = kind.forward
    if forward is torch.nn.Module.forward:
        return f"`{kind.__name__}` has no forward"
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(forward)))
    except (OSError, TypeError, SyntaxError):
        return f"the source of `{kind.__name__}.forward` is not available"
    function = tree.body[0]
    if not isinstance(function, ast.FunctionDef) or function.decorator_list:
        return f"`{kind.__name__}.forward` is decorated"
    arguments = function.args
    if (len(arguments.args) != 2 or arguments.vararg or arguments.kwarg or arguments.kwonlyargs
            or arguments.defaults or arguments.posonlyargs):
        return f"`{kind.__name__}.forward` takes other than one input"
    self_name = arguments.args[0].arg
    bound = {arguments.args[1].arg}

    def row_wise(node) -> bool:
        if isinstance(node, ast.Name):
            return node.id in bound
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            return row_wise(node.left) and row_wise(node.right)
        if isinstance(node, ast.Call):
            callee = node.func
            return (
                isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name)
                and callee.value.id == self_name and len(node.args) == 1 and not node.keywords
                and row_wise(node.args[0])
            )
        return False

    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    for statement in body:
        if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name) and row_wise(statement.value)):
            bound.add(statement.targets[0].id)
        elif isinstance(statement, ast.Return) and statement.value is not None and row_wise(statement.value):
            return None
        else:
            return f"`{kind.__name__}.forward` does more than call its layers on its input"
    return f"`{kind.__name__}.forward` returns nothing"


def captured_mask_index(values, mask):
    """``values[mask]``, captured when ``mask`` is a bool tensor of ``values``'s leading
    shape: the same rows, in the same order, as the positions of its nonzero elements
    select them (which is what indexing by a boolean mask is)."""
    if (
        _captured(mask) and is_plain_tensor(values) and mask.dtype == torch.bool
        and mask.dim() <= values.dim() and tuple(mask.shape) == tuple(values.shape[: mask.dim()])
        and mask.device == values.device
    ):
        return values[_nonzero(mask.detach()).unbind(1)]
    return values[mask]


# ------------------------------------------------------------------------------------
# A branch on whether positions are empty, kept in the graph (``rules/capture_merges.py``).


@torch.library.custom_op("graphmend::nonempty_positions", mutates_args=())
def _nonempty_positions(positions: torch.Tensor) -> torch.Tensor:
    return positions.clone()


@_nonempty_positions.register_fake
def _nonempty_positions_while_tracing(positions: torch.Tensor) -> torch.Tensor:
    # A fresh size, at least 1, born inside the branch that runs only for positions
    # that are not empty: what tracing learns from it (a batch norm's "is the input
    # empty?") holds in that branch alone.
    from torch._library.fake_impl import allocate_size

    count = allocate_size(torch.library.get_ctx()._shape_env, min_val=1)
    _state.sizes_made = sizes_made() + 1
    return positions.new_empty((count,))


def positions_known_nonempty(positions):
    """The same positions, in the branch ``merge_rows`` takes when there are some, with
    a size tracing knows to be at least 1. Not tracing, ``positions`` itself."""
    if not torch.compiler.is_compiling():
        return positions
    return _nonempty_positions(positions)


def may_merge_rows(positions, destination) -> bool:
    """While tracing, whether the branch on whether ``positions`` is empty may stay in
    the graph: ``positions`` is a 1-D integer tensor whose size tracing does not know
    (a captured one: otherwise the original branch does not break), ``destination`` a
    tensor, and the claim on the break holds (``graphmend.runtime.claims``). Not
    tracing, False."""
    merged = False
    if not (is_plain_tensor(positions) and is_plain_tensor(destination)):
        return merged  # a subclass's ``__torch_function__`` would see the merged form's operations
    comptime(_decide_merge)
    return merged


def _decide_merge(context) -> None:
    claims.decide_in_trace(
        context, "merged", ("positions", "destination"), _merge_claimed, read=_example_value,
    )


def _example_value(variable):
    proxy = variable.as_proxy()
    return proxy.node.meta.get("example_value")


def _merge_claimed(translator, positions, destination) -> bool:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    if not (isinstance(positions, torch.Tensor) and isinstance(destination, torch.Tensor)):
        return False
    if positions.dim() != 1 or positions.dtype not in (torch.int64, torch.int32) or positions.is_sparse:
        return False
    if not free_unbacked_symbols(positions.shape[0]):
        return False  # a size tracing knows: the original branch does not break
    if not claims.claim_break_at_user_site(translator, kind=claims.MERGE):
        return False
    site = claims.user_site(translator)
    if site is not None:
        merges_claimed().append(site)
    return True


def merges_claimed() -> list:
    """The sites of branches ``may_merge_rows`` let into the graph on this thread, in
    the order claimed (``conversion_failures`` traces a frame again without them when
    ``torch.cond`` cannot capture a branch)."""
    if not hasattr(_state, "merges"):
        _state.merges = []
    return _state.merges


def merge_rows(positions, destination, compute):
    """``compute(positions)`` when there are positions, as ``(positions, values)`` to
    write at them; otherwise the positions and ``destination``'s rows at them (none),
    whose write changes nothing. One graph either way (``torch.cond``)."""

    def unchanged(positions):
        return positions.clone(), destination[positions]

    comptime(_enter_merge)
    return torch.cond(positions.size(0) > 0, compute, unchanged, (positions,))


def _enter_merge(context) -> None:
    try:
        claims.mark_merge_entered(context._ComptimeContext__tx)
    except Exception:  # noqa: BLE001 - TorchDynamo internals changed: the claim is refused
        pass
