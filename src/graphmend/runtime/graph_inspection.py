"""What a trace's graph and code hold: its computing nodes, which record autograd or draw
random numbers, which inputs were written in place, the unbacked sizes a value holds,
and whether code is graphmend's rewrite.
"""

from __future__ import annotations

import torch

from graphmend.runtime import operators
from graphmend.torch_adapter import ops


def ancestors(node):
    """The nodes ``node`` is computed from, itself last, in the graph's order."""
    seen, pending = {}, [node]
    while pending:
        current = pending.pop()
        if current not in seen:
            seen[current] = None
            pending.extend(current.all_input_nodes)
    return [current for current in node.graph.nodes if current in seen]


def computed_nodes(output):
    """The nodes of the trace's graph that compute (calls of functions, methods and modules)."""
    return [
        node for node in output.graph.nodes if node.op in ("call_function", "call_method", "call_module")
    ]


def records_autograd(node) -> bool:
    """Whether the node's value has a place in an autograd graph (a ``grad_fn``). A leaf
    that requires grad records nothing: TorchDynamo's example value of ``weight.t()``
    traced under ``torch.no_grad`` is such a leaf (layoutlmv3's relative position bias)."""
    value = node.meta.get("example_value")
    values = value if isinstance(value, (tuple, list)) else [value]
    return any(isinstance(v, torch.Tensor) and v.requires_grad and v.grad_fn is not None for v in values)


def tensors_requiring_grad(value):
    """The tensors among ``value`` (one, or a tuple or list of them) that require grad."""
    values = value if isinstance(value, (tuple, list)) else [value]
    return [v for v in values if isinstance(v, torch.Tensor) and v.requires_grad]


def inputs_written_in_place(output):
    """The graph's input nodes written in place so far in the trace (the fake tensors of
    the inputs count every in-place write, through any view)."""
    for node in output.graph.nodes:
        if node.op != "placeholder":
            continue
        example = node.meta.get("example_value")
        if isinstance(example, torch.Tensor) and example._version > 0:
            yield node


def input_written_in_place_so_far(translator) -> str | None:
    """The name of a graph input written in place so far in the trace, or None."""
    for node in inputs_written_in_place(translator.output):
        return node.name
    return None


_SEEDED = torch.Tag.nondeterministic_seeded
_DROPOUTS = ("dropout", "dropout_", "feature_dropout", "feature_dropout_", "alpha_dropout",
             "alpha_dropout_", "feature_alpha_dropout", "feature_alpha_dropout_")


def _aten_packet_is_seeded(name: str) -> bool:
    packet = getattr(torch.ops.aten, name, None)
    if not ops.is_op_overload_packet(packet):
        return False
    return any(_SEEDED in getattr(packet, overload).tags for overload in packet.overloads())


def is_graphmend_operator(node) -> bool:
    """Whether an FX node calls one of graphmend's own operators (``graphmend::*``)."""
    target = node.target
    return getattr(target, "namespace", None) == operators.NAMESPACE or str(target).startswith(
        f"{operators.NAMESPACE}."
    )


def draws_random_numbers(node, output=None) -> bool:
    """Whether an FX node of TorchDynamo's graph draws from a random generator, by the
    ``nondeterministic_seeded`` tag of the ATen operator of the same name (torch
    functions and tensor methods keep ATen's names). Dropout in eval mode or with
    ``p=0`` draws nothing, nor does attention with ``dropout_p=0``."""
    target = node.target
    if node.op == "call_function" and target is getattr(torch.ops.higher_order, "cond", None):
        # The branches are graphs of their own (Capture's merged branches): a draw in
        # either is a draw at the ``cond``.
        modules = getattr(output, "nn_modules", {}) if output is not None else {}
        branches = [getattr(a, "target", None) for a in node.args[1:3]]
        return any(
            not isinstance(modules.get(name), torch.fx.GraphModule) or graph_draws_random_numbers(modules[name], output)
            for name in branches
        )
    if node.op == "call_module":
        module = getattr(output, "nn_modules", {}).get(target) if output is not None else None
        if isinstance(module, (*ops.dropout_module_types(), torch.nn.RReLU)):
            return bool(module.training) and getattr(module, "p", 1) != 0
        return module is None
    if is_graphmend_operator(node):
        return False  # graphmend's own operators, tagged seeded only to run when the graph runs
    if node.op == "call_function" and getattr(target, "_nondeterministic_seeded", False):
        return True
    name = target if isinstance(target, str) else getattr(target, "__name__", None)
    if not isinstance(name, str) or not _aten_packet_is_seeded(name):
        return False
    if name == "scaled_dot_product_attention":
        # Seeded for its dropout, which draws nothing at p=0 (its default).
        arguments = list(node.args)
        probability = node.kwargs.get("dropout_p", arguments[4] if len(arguments) > 4 else 0.0)
        return not (isinstance(probability, (int, float)) and probability == 0)
    if name in _DROPOUTS:
        arguments = list(node.args[1:3])
        probability = node.kwargs.get("p", arguments[0] if arguments else 0.5)
        training = node.kwargs.get("training", node.kwargs.get("train", arguments[1] if len(arguments) > 1 else True))
        return training is not False and probability != 0
    return True


def nodes_in_trace_order(output) -> list:
    """The trace's graph nodes but its inputs, in the order the trace made them. TorchDynamo
    makes an input when the trace first reads it and puts it before every other node,
    so a position among all nodes moves as the trace goes on; among these it does not
    (a claim's ``position``)."""
    return [node for node in output.graph.nodes if node.op != "placeholder"]


def draw_positions(output) -> list[int]:
    """The positions (``nodes_in_trace_order``) of the nodes that draw random numbers."""
    return [
        position
        for position, node in enumerate(nodes_in_trace_order(output))
        if node.op in ("call_function", "call_method", "call_module") and draws_random_numbers(node, output)
    ]


def graph_draws_random_numbers(graph_module, output=None) -> bool:
    """Whether a node of ``graph_module`` draws random numbers (``draws_random_numbers``)."""
    return any(
        node.op in ("call_function", "call_method") and draws_random_numbers(node, output)
        for node in graph_module.graph.nodes
    )


def known_contiguous(value) -> bool:
    """Whether ``value`` is a tensor known to be contiguous."""
    if not isinstance(value, torch.Tensor):
        return False
    try:
        from torch.fx.experimental.symbolic_shapes import guard_or_false

        return bool(guard_or_false(value.is_contiguous()))
    except Exception:  # noqa: BLE001 - a layout torch cannot tell: not known contiguous
        return False


def unbacked_symbols(value) -> set:
    """The unbacked size symbols ``value`` (a tensor's shape, a size, a number) holds."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    if isinstance(value, torch.Tensor):
        value = tuple(value.shape)
    if value is None or isinstance(value, (bool, int, float)):
        return set()
    try:
        return set(free_unbacked_symbols(value))
    except Exception:  # noqa: BLE001 - a value free_unbacked_symbols does not walk holds none we made
        return set()


def is_rewritten_code(code) -> bool:
    """Whether graphmend rewrote ``code`` itself: its own bytecode reaches the runtime.
    A resume function TorchDynamo made after a break is judged by the code it resumes.

    The module is not the unit: a function of a mended module that no rule rewrote is
    the original's code, and TorchDynamo's errors on it are the original's too (they
    were swallowed, and the function ran uncompiled, because another function of the
    same module was rewritten)."""
    from graphmend.rewrite.templates import reaches_runtime

    try:
        from graphmend.torch_adapter.tracing import resume_function_origins

        resumed = resume_function_origins()
    except (ImportError, AttributeError):  # pragma: no cover - another torch: judge the code as given
        resumed = {}
    for _ in range(64):
        metadata = resumed.get(code) if code is not None else None
        if metadata is None:
            break
        code = metadata.code
    return reaches_runtime(code)
