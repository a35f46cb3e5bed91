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

import inspect

import torch

from graphmend.core.legality import failed, restated
from graphmend.runtime import claims, expert_calls, trace_decisions
from graphmend.runtime.selection import is_plain_tensor
from graphmend.runtime.store import store
from graphmend.torch_adapter import ops
from graphmend.torch_adapter.tracing import (
    captures_data_dependent_output_sizes,
    comptime,
    frame_code_of,
    realized,
    translator_of,
)


def sizes_made() -> int:
    """How many sizes ``graphmend::nonzero`` made on this thread while tracing."""
    return getattr(store.captures, "sizes_made", 0)


@torch.library.custom_op("graphmend::nonzero", mutates_args=())
def _nonzero(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x)


@_nonzero.register_fake
def _nonzero_while_tracing(x: torch.Tensor) -> torch.Tensor:
    # ``ctx.new_dynamic_size()`` refuses unless the global flag is set; the size is made
    # the way it makes it, for this operator alone.
    shape_env = ops.fake_shape_env()
    count = ops.allocate_data_dependent_size(shape_env)
    store.captures.sizes_made = sizes_made() + 1
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
    records autograd, random draws on both sides; ``graphmend.runtime.whole_trace_conditions``). Not
    tracing, False. Refused, the statement runs as written, with its break where the
    original had it."""
    claimed = False
    comptime(_claim)
    return claimed


def _claim(context) -> None:
    trace_decisions.decide_in_trace(context, "claimed", (), _claim_capture)


def _claim_capture(tracer) -> bool:
    if torchdynamo_captures_it() is not None:
        return False
    if not claims.claim_break_at_user_site(tracer, kind=claims.CAPTURE):
        return False
    user = trace_decisions.user_translator(tracer)
    captures_claimed().append((user.f_code.co_filename, user.lineno))
    return True


def torchdynamo_captures_it() -> str | None:
    """Under ``capture_dynamic_output_shape_ops`` TorchDynamo captures the original call
    itself, with no break to remove: the statement is left as written, so that its graph
    holds torch's own operator and the runtime checks TorchDynamo adds with it."""
    if captures_data_dependent_output_sizes():
        return failed("C208", "torchdynamo_does_not_capture_it: `capture_dynamic_output_shape_ops` is set")
    return None


def captures_claimed() -> list:
    """The sites of calls ``may_capture`` let into the graph on this thread, in the order
    claimed (``conversion_failures`` traces a frame again without them when tracing
    needs a size they made on the host)."""
    if not hasattr(store.captures, "captures"):
        store.captures.captures = []
    return store.captures.captures


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
# A loop over the experts a batch chose, run over every expert (``rules/capture/loops.py``).

def experts_run_empty_exactly(experts, classes, body_lines=(), destination=None, tensors=(), modules=()) -> bool:
    """Whether running the loop's body for every class ``< classes`` is exact: each
    expert ``experts[e]`` (None where the experts are stacked in tensors) maps rows to
    rows with no effect (so no token, no effect), each stacked tensor ``owner.name`` of
    ``tensors`` has a row for every class, each module ``owner.name`` of ``modules``
    (shared by the experts) is known as an expert is, no gradient is recorded for any
    of them, and the ``index_add_`` of no rows into ``destination`` writes a tensor
    nothing outside this graph or autograd can see. ``body_lines`` (first, last) are the
    loop body's lines in the caller's file: a claim refused there (the positions'
    capture) leaves the original loop, whose break is before it. A constant of the
    trace; not tracing, False."""
    exact = False
    comptime(_decide_experts)
    return exact


def _decide_experts(context) -> None:
    trace_decisions.decide_in_trace(
        context, "exact", ("experts", "classes", "body_lines", "destination", "tensors", "modules"), _experts_exact,
        read=_read_nested,
    )


def _read_nested(variable):
    """``_module_node_or_constant`` of a variable, item by item for a tuple of them."""
    from graphmend.torch_adapter.tracing import TupleVariable

    if type(variable) is TupleVariable:
        return tuple(_read_nested(item) for item in variable.items)
    return _module_node_or_constant(variable)


def _experts_exact(translator, experts, classes, body_lines, destination, tensors, modules) -> bool:
    reason = (
        why_not_run_empty_exactly(experts, classes, tensors, modules)
        or why_destination_may_be_seen(translator, destination)
        or body_keeps_its_captures(translator, body_lines)
    )
    if reason is not None:
        claims.decline_at_user_site(translator, restated(reason, f"the loop keeps its chosen experts: {reason}"))
    return reason is None


def body_keeps_its_captures(translator, body_lines) -> str | None:
    """The body's ``torch.where`` may be captured in this trace. Refused (an earlier
    trace's checks, no hooks into TorchDynamo, inference mode), it would break the graph
    inside the loop over every expert, where TorchDynamo cannot resume, and the whole
    frame would run eagerly (code before the loop that the
    original compiled traced ran eagerly, and the program's own ``is_compiling()`` test
    answered otherwise); the original loop breaks at ``.tolist()``, before it."""
    user = trace_decisions.user_translator(translator)
    if user is None:
        return failed("C206", "the loop's frame is not known")
    unavailable = claims.trace_checks_unavailable() or claims.not_inside_inference_mode(user)
    if unavailable is not None:
        return unavailable
    if body_lines:
        first, last = body_lines
        return claims.refused_between(user.f_code.co_filename, first, last, frame_code_of(user))
    return None


def _module_node_or_constant(variable):
    """The module a TorchDynamo variable stands for (inlined or specialised), the graph
    node of a plain tensor, or the Python constant it holds."""
    from graphmend.torch_adapter.tracing import TensorVariable

    value = getattr(variable, "value", None)
    if isinstance(value, torch.nn.Module):
        return value
    variable = realized(variable)
    if type(variable) is TensorVariable:
        return variable.as_proxy().node
    return variable.as_python_constant()


def why_not_run_empty_exactly(experts, classes, tensors=(), modules=()) -> str | None:
    """The while-tracing conditions on the experts (``rules/capture/loops.py``), each
    reason naming its condition:
    - ``experts_are_a_module_list``: ``classes`` an int, ``experts`` (where the body
      takes its expert from a container) a ``ModuleList`` or ``Sequential`` as torch
      defines it (its ``__getitem__`` runs for every class), with an expert for every
      class;
    - ``expert_tensors_cover_every_class``: each stacked tensor ``owner.name`` is a
      parameter or buffer of the module ``owner``, read with no code of its own, a
      plain tensor with a row for every class;
    - ``no_module_hooks``: no global module hook (forward, pre-forward, backward);
    - ``no_expert_gradients``: no gradient recorded for an expert's parameters, a
      stacked tensor or a shared module's parameters (one that ran on no token would
      get a zero gradient where the original's has none);
    - ``expert_calls_are_known``: each expert's whole call, and each shared module's,
      is known to do nothing on no rows (``graphmend.runtime.expert_calls``): its
      class's ``forward`` and every module it reaches, no instance attribute replacing
      a method, no hook on it or on a module it calls, no tensor of a subclass."""
    if type(classes) is not int or classes < 0:
        return failed("C201", "experts_are_a_module_list: the number of classes is not an int")
    if experts is not None:
        kind = type(experts)
        if kind not in (torch.nn.ModuleList, torch.nn.Sequential) or len(experts) < classes:
            return failed(
                "C201", "experts_are_a_module_list: the experts are not a module list with an expert for every class"
            )
        if inspect.getattr_static(kind, "__getitem__") is not _CONTAINER_ITEMS[kind]:
            return failed("C201", f"experts_are_a_module_list: `{kind.__name__}.__getitem__` is not torch's")
    stacked = []
    for owner, name in tensors:
        value, reason = _plain_member(owner, name, ("_parameters", "_buffers"))
        if reason is None and not (type(value) in (torch.Tensor, torch.nn.Parameter) and value.dim() >= 1
                                   and value.shape[0] >= classes):
            reason = f"`{name}` is not a plain tensor with a row for each of the {classes} classes"
        if reason is not None:
            return failed("C207", f"expert_tensors_cover_every_class: {reason}")
        stacked.append((name, value))
    shared = []
    for owner, name in modules:
        module, reason = _plain_member(owner, name, ("_modules",))
        if reason is not None:
            return failed("C204", f"expert_calls_are_known: {reason}")
        shared.append((name, module))
    hooked = expert_calls.global_hooks()
    if hooked:
        return failed("C202", f"no_module_hooks: {hooked}")
    recording = torch.is_grad_enabled()
    for name, value in stacked:
        if recording and value.requires_grad:
            return failed("C203", f"no_expert_gradients: gradients are recorded for the stacked experts `{name}`")
    for name, module in shared:
        if recording and any(p.requires_grad for p in module.parameters()):
            return failed("C203", f"no_expert_gradients: gradients are recorded for the shared `{name}`'s parameters")
        reason = expert_calls.why_call_not_known(module)
        if reason:
            return failed("C204", f"expert_calls_are_known: the shared `{name}`: {reason}")
    for index in range(classes if experts is not None else 0):
        expert = experts[index]
        if recording and any(p.requires_grad for p in expert.parameters()):
            return failed("C203", f"no_expert_gradients: gradients are recorded for expert {index}'s parameters")
        reason = expert_calls.why_call_not_known(expert)
        if reason:
            return failed("C204", f"expert_calls_are_known: expert {index}: {reason}")
    return None


def _plain_member(owner, name: str, tables: tuple[str, ...]):
    """(value, None) where ``owner.name`` is found in one of ``owner``'s tables
    (``_parameters``, ``_buffers``, ``_modules``) with no code of its own on the way: no
    instance attribute or class attribute (a property) of that name, torch's
    ``__getattr__`` and ``object.__getattribute__``. Otherwise (None, the reason)."""
    if not isinstance(owner, torch.nn.Module):
        return None, f"`{name}` does not belong to a module"
    kind = type(owner)
    if (inspect.getattr_static(kind, "__getattr__", None) is not torch.nn.Module.__dict__["__getattr__"]
            or inspect.getattr_static(kind, "__getattribute__", None) is not object.__getattribute__):
        return None, f"`{kind.__name__}` changes attribute lookup"
    if name in vars(owner) or inspect.getattr_static(kind, name, _ABSENT) is not _ABSENT:
        return None, f"`{kind.__name__}.{name}` is set on the instance or the class"
    for table in tables:
        found = vars(owner).get(table, {})
        if name in found and found[name] is not None:
            return found[name], None
    return None, f"`{kind.__name__}.{name}` is not a {' or '.join(t.strip('_').rstrip('s') for t in tables)}"


_ABSENT = object()
_CONTAINER_ITEMS = {kind: kind.__dict__["__getitem__"] for kind in (torch.nn.ModuleList, torch.nn.Sequential)}


# ------------------------------------------------------------------------------------
# An in-place write of rows that may be none (the loop's ``index_add_``, the merged
# branch's ``D[P] = V``).

# What reading a tensor's metadata records in a graph: no autograd node saves it.
_METADATA_METHODS = frozenset({"size", "dim", "stride", "numel", "ndimension", "nelement", "storage_offset"})


def why_destination_may_be_seen(translator, destination) -> str | None:
    """``destination_is_unseen``: the rewritten code writes ``destination`` in place
    where the original writes nothing (no rows: the loop's ``index_add_`` for an expert
    no token chose, the merged branch's ``D[P] = V`` without positions). A write of no
    rows changes no value but bumps the tensor's version counter: a tensor autograd
    saved before would fail the later ``backward()`` ("modified by an inplace
    operation") where the original works, and a caller would see ``_version`` change.
    So the destination must be a tensor this graph made (not an input of the graph, not
    a module's parameter or buffer, not a view, sharing its storage with no other value
    of the graph), that nothing in the graph has read yet (only its sizes), and not a
    leaf that requires grad (where the write itself raises). Otherwise, the reason."""
    prefix = failed("C205", "destination_is_unseen: ")  # ``prefix + text`` keeps the id
    node = destination
    if not isinstance(node, torch.fx.Node):
        return prefix + "the destination is not a plain tensor of the graph"
    if node.op in ("placeholder", "get_attr"):
        return prefix + (
            f"the destination `{node.name}` comes from outside the graph: a write of no rows bumps its "
            "version counter, which autograd and the caller see"
        )
    example = node.meta.get("example_value")
    if not isinstance(example, torch.Tensor):
        return prefix + "the destination is not a tensor"
    if example._base is not None:
        return prefix + f"the destination `{node.name}` is a view of another tensor"
    if example.requires_grad and example.is_leaf:
        return prefix + f"the destination `{node.name}` is a leaf that requires grad"
    storage = _storage_of(example)
    for other in translator.output.graph.nodes:
        if other is node:
            continue
        values = ops.tensor_leaves(other.meta.get("example_value"))
        if any(isinstance(v, torch.Tensor) and _storage_of(v) == storage for v in values):
            return prefix + f"the destination `{node.name}` shares its storage with `{other.name}`"
    for user in node.users:
        if not _reads_metadata_only(user):
            return prefix + (
                f"`{user.name}` reads the destination `{node.name}` before the write, and autograd may "
                "have saved it"
            )
    return None


def _storage_of(tensor: torch.Tensor):
    from torch.multiprocessing.reductions import StorageWeakRef

    try:
        return StorageWeakRef(tensor.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return id(tensor)


def _reads_metadata_only(node: torch.fx.Node) -> bool:
    if node.op == "call_method":
        return node.target in _METADATA_METHODS
    if node.op == "call_function":
        target = node.target
        if target is getattr:  # ``x.shape``, ``x.dtype``
            return True
        name = getattr(target, "__name__", "")
        return name in _METADATA_METHODS or str(target).startswith(("aten.sym_size", "aten.sym_stride", "aten.sym_numel"))
    return False


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
# A branch on whether positions are empty, kept in the graph (``rules/capture/merges.py``).


@torch.library.custom_op("graphmend::nonempty_positions", mutates_args=())
def _nonempty_positions(positions: torch.Tensor) -> torch.Tensor:
    return positions.clone()


@_nonempty_positions.register_fake
def _nonempty_positions_while_tracing(positions: torch.Tensor) -> torch.Tensor:
    # A fresh size, at least 1, born inside the branch that runs only for positions
    # that are not empty: what tracing learns from it (a batch norm's "is the input
    # empty?") holds in that branch alone.
    count = ops.allocate_data_dependent_size(ops.fake_shape_env(), min_val=1)
    store.captures.sizes_made = sizes_made() + 1
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
    tensor that a write of no rows leaves unseen (``destination_is_unseen``: the merged
    form writes ``D[P] = V`` whether or not there are positions, the original only when
    there are), and the claim on the break holds (``graphmend.runtime.claims``). Not
    tracing, False."""
    merged = False
    if not (is_plain_tensor(positions) and is_plain_tensor(destination)):
        return merged  # a subclass's ``__torch_function__`` would see the merged form's operations
    comptime(_decide_merge)
    return merged


def _decide_merge(context) -> None:
    trace_decisions.decide_in_trace(
        context, "merged", ("positions", "destination"), _merge_claimed, read=_node,
    )


def _node(variable):
    return variable.as_proxy().node


def _merge_claimed(translator, positions_node, destination_node) -> bool:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    positions = positions_node.meta.get("example_value")
    destination = destination_node.meta.get("example_value")
    if not (isinstance(positions, torch.Tensor) and isinstance(destination, torch.Tensor)):
        return False
    if positions.dim() != 1 or positions.dtype not in (torch.int64, torch.int32) or positions.is_sparse:
        return False
    if not free_unbacked_symbols(positions.shape[0]):
        return False  # a size tracing knows: the original branch does not break
    unseen = why_destination_may_be_seen(translator, destination_node)
    if unseen is not None:
        claims.decline_at_user_site(translator, restated(unseen, f"the branch keeps its break: {unseen}"))
        return False
    if not claims.claim_break_at_user_site(translator, kind=claims.MERGE):
        return False
    site = trace_decisions.user_site(translator)
    if site is not None:
        merges_claimed().append(site)
    return True


def merges_claimed() -> list:
    """The sites of branches ``may_merge_rows`` let into the graph on this thread, in
    the order claimed (``conversion_failures`` traces a frame again without them when
    ``torch.cond`` cannot capture a branch)."""
    if not hasattr(store.captures, "merges"):
        store.captures.merges = []
    return store.captures.merges


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
        claims.mark_merge_entered(translator_of(context))
    except Exception:  # noqa: BLE001 - TorchDynamo internals changed: the claim is refused
        pass
