"""The conditions of the whole trace: facts that decide whether a claim stands come only
later in the trace that made it, and each is checked before TorchDynamo compiles the
graph (by the hooks of ``graphmend.runtime.trace_hooks``):

- an op after the statement fails while TorchDynamo traces it (``no_later_op_failed_while_tracing``);
- TorchDynamo gives up on the whole frame after the statement (an error the code
  raises escapes the frame while traced, a construct it cannot resume after), which it
  then runs eagerly (``frame_was_not_given_up_while_tracing``);
- the joined graph records autograd: a capture, a merged branch, or a selection that
  recorded something for autograd itself is then refused
  (``joined_graph_records_no_autograd``); output, lowered guards and selections that
  recorded nothing for autograd (``joins_under_grad``) stay joined where the
  backend runs the graph as written, or traces its backward (``aot_eager``), no tensor's
  gradient would be summed in another order, and no tensor made before the statement
  leaves the graph (``backend_differentiates_as_written``,
  ``gradient_sums_keep_their_order``, ``earlier_tensors_stay_in_the_graph``, the last
  checked when the graph, with its outputs, is handed to the backend);
- the joined graph draws random numbers on both sides of the statement
  (``random_draws_stay_on_their_side``);
- the joined graph holds a batch norm of a tensor that is not contiguous, which torch
  traces with the wrong strides (``batch_norms_read_contiguous_tensors``);
- the joined graph enters ``torch.inference_mode()`` (``joined_graph_enters_no_inference_mode``),
  or runs autograd on an inference tensor it is given
  (``joined_graph_records_no_autograd_on_an_inference_tensor``);
- the graph breaks on a size a capture made, or tracing needs that size on the host
  anywhere, an inlined function too (``captured_sizes_decide_no_break``,
  ``trace_hooks._refuse_captures_whose_sizes_are_needed``);
- output shares the graph with a lowered guard (``outputs_share_no_graph_with_a_lowered_guard``)
  or with an input written in place (``outputs_share_no_graph_with_an_input_written_in_place``),
  or follows output that reads a size only the graph knows
  (``outputs_follow_no_output_of_a_data_dependent_size``);
- TorchDynamo ran (or, after a guard fails once, runs) the rest of the original frame
  eagerly, and the mended frame does not compile to its end in one graph
  (``rest_of_eager_frame_compiles_whole``), or guards on a list of numbers a resume function's
  frame computed before its break, which compiles it again for each new list
  (``rest_of_eager_frame_guards_no_resumed_list``);
- a ``.item()`` kept as a tensor has no check that reads it lowered in the same graph
  (``items_stay_with_lowered_checks``);
- the backend compiles the joined graph (``backend_compiles_the_joined_graph``);
- the graph holds an op of the program's own, not only graphmend's
  (``graph_holds_an_op_of_the_program``);
- a claim in an inlined call, where the trace guards on a module global it also writes
  (``inlined_claims_guard_no_global_the_trace_writes``), or a claim with ops before it
  and none after, where that guard came after it
  (``claims_precede_no_guard_on_a_global_the_trace_writes``);
- a test or padding decided from fixed tensors, where the graph writes one of them
  after the decision (``fixed_tensors_not_written_later``).

``whole_trace_refusals`` applies them, in order, to a trace's claims. Each is registered
in ``graphmend.core.legality`` by its ``module:function``.
"""

from __future__ import annotations

import re

import torch

from graphmend.core.legality import failed
from graphmend.runtime.backends import (
    backend_is,
    backend_keeps_graph_order,
    backend_runs_the_graph_as_written,
)
from graphmend.runtime.claims import (
    ALWAYS,
    CALL_BEGAN_ATTRIBUTE,
    CALL_ENDED_ATTRIBUTE,
    CAPTURE,
    CAPTURE_SITES_ATTRIBUTE,
    CHECKS_LOWERED_ATTRIBUTE,
    DECIDED,
    GUARD,
    ITEM,
    MERGE,
    MERGES_ENTERED_ATTRIBUTE,
    OUTPUT,
    SELECTION,
    UNDER_GRAD,
    VALUES,
    fixed_reads_in_trace,
    program_op_count,
    refused_for_good_as,
    refused_reason,
    selected_without_grad,
    undone_in_trace,
)
from graphmend.runtime.graph_inspection import (
    ancestors,
    computed_nodes,
    draw_positions,
    inputs_written_in_place,
    is_graphmend_operator,
    known_contiguous,
    nodes_in_trace_order,
    records_autograd,
    tensors_requiring_grad,
    unbacked_symbols,
)
from graphmend.runtime.resumable_states import made_by_the_runtime
from graphmend.runtime.store import store
from graphmend.torch_adapter import ops
from graphmend.torch_adapter.tracing import autocast_in_trace, rng_ops_are_functionalized


def no_later_op_failed_while_tracing(site: tuple[str, int]) -> str | None:
    """An op TorchDynamo cannot run on fake tensors (an in-place write to a leaf that
    requires grad, a shape mismatch) fails the whole traced region while tracing, before
    any of it runs. The original statement was a graph break: the code before it ran
    (compiled), and the op after it was traced only when reached, in a frame of its own.
    A claim made in a trace that failed so is refused when TorchDynamo traces the frame
    again (``trace_hooks._restart_trace_without_claims``)."""
    return refused_for_good_as(site, FAILED_OP_REASON)


FAILED_OP_REASON = "an op after it fails while TorchDynamo traces it"


def frame_was_not_given_up_while_tracing(site: tuple[str, int], code) -> str | None:
    """TorchDynamo gives up on a frame whose trace fails as a whole (an exception the
    code raises escapes the frame while traced, a construct it cannot resume after) and
    runs that frame eagerly from then on. The original statement was a graph break: the
    code before it compiled, and only the resume function after it was given up, which
    later calls reach from every path through the frame (an op that fails on a later call ran eagerly and raised its own error, where
    the mended frame, its capture refused only then, traced the op afresh and raised
    TorchDynamo's). A claim made in a trace given up so is refused when TorchDynamo
    traces the frame again (``trace_hooks._restart_given_up_frame_without_claims``). The
    refusal holds in that frame's code only: the statement's other frames (a module's
    forward compiled on its own, the frame given up having run eagerly) were not given
    up for it."""
    return refused_for_good_as(site, GIVEN_UP_REASON, code)


GIVEN_UP_REASON = "TorchDynamo gave up on the frame after it"


def joined_graph_records_no_autograd(output) -> str | None:
    """A merged branch or a capture (Capture), or a selection (Where) that recorded
    something for autograd itself, joins no graph that records autograd: autograd
    differentiates the untaken arm of a ``torch.where`` too (zero gradients where the
    original gave none, and zero times an infinite derivative is NaN), and Capture's
    writes of rows are not proved to differentiate as the original's indexing did.
    Under ``torch.no_grad`` nothing is recorded. Output, lowered guards, and a
    selection whose arms and ``torch.where`` recorded nothing for autograd (values
    that require no grad: a mask or a scale; autograd never reaches its arms) are
    judged by ``backend_differentiates_as_written`` and ``gradient_sums_keep_their_order``
    instead (``joins_under_grad``). Its test may record autograd (``h.sum() > 0`` of
    activations): the original computed it before its break, and no backward reaches
    what only a comparison reads."""
    for node in computed_nodes(output):
        if records_autograd(node):
            return failed(
                "G303",
                "the joined graph records autograd, which would differentiate a capture's writes, "
                "or a selection's arms where they record autograd, unlike the original"
            )
    return None


# Claims that may join graphs that record autograd: they put no value of their own in
# the graph's differentiable computation (an ``.item()`` kept for a check only feeds it;
# a decided comparison only chooses which code is traced, as the original's test did;
# a tensor's integers read into a list are no value autograd reaches).
_JOINS_UNDER_GRAD = frozenset({OUTPUT, GUARD, ITEM, DECIDED, VALUES})
# Claims whose trace made data-dependent sizes: positions, and a tensor's integers.
_CAPTURE_KINDS = frozenset({CAPTURE, VALUES})


def joins_under_grad(output, claim) -> bool:
    """Whether ``claim`` puts nothing differentiable of its own in the graph, and so may
    join one that records autograd on the terms of output and guards: output, a lowered
    guard, an ``.item()`` kept for a check, or a selection that took ``torch.where``
    between values that require no grad, its arms recording nothing for autograd
    either (``claims.note_selection``). Autograd never reaches such a
    selection's result, so it differentiates neither arm; what it does differentiate is
    the code before and after the statement, whose gradients the original's two graphs
    computed apart (``backend_differentiates_as_written``, ``gradient_sums_keep_their_order``,
    ``earlier_tensors_stay_in_the_graph``)."""
    if claim.kind in _JOINS_UNDER_GRAD:
        return True
    return claim.kind == SELECTION and selected_without_grad(output, claim.site)


def backend_differentiates_as_written(output) -> str | None:
    """Under autograd, a joined graph keeps the original's gradients only where the
    backend's backward is known: one that runs the graph as written on the real tensors
    (TorchDynamo's ``eager``, a backend that returns its graph unchanged, one marked
    ``runs_the_graph_as_written``) records the same operators for autograd, one by one,
    as the original's graphs did; ``aot_eager`` traces one backward graph, which sums
    gradients in the autograd engine's order (``gradient_sums_keep_their_order``).
    Inductor compiles the backward into kernels of its own: its gradients are not
    bit-identical to the original's compiled graphs, and graphmend does not yet check
    that they are at least as close to a float64 reference, so it joins nothing there
    under autograd."""
    if backend_is(output, ("eager", "aot_eager"), "runs_the_graph_as_written"):
        return None
    return failed(
        "G311",
        "the joined graph records autograd, and the backend compiles its backward in an order graphmend cannot check",
    )


def gradient_sums_keep_their_order(output, claims) -> list[tuple[tuple[str, int], str]]:
    """The CPU autograd engine runs backward nodes from the last made to the first, and
    adds a tensor's gradient contributions in that order, one at a time. Where the
    original broke, each graph's backward was one node, which handed the engine one
    summed contribution per tensor; joined under a backend that traces one backward
    graph (``aot_eager``), the graph's contributions are added one at a time, or handed
    over as one sum where the original handed several. Floating-point addition is not
    associative, so the claim keeps its break where, counting contributions on the
    autograd graph TorchDynamo's fake tensors recorded (``w * w`` and ``F.normalize(w)``
    give two), and splitting them where the original's graphs met:

    - a graph input (a parameter, a tensor made before the frame) receives
      contributions in more than one of the original's graphs: their sums reached the
      engine apart, the joined graph's as one (``e + (b + a)`` where the original added
      ``(e + b) + a``, ``e`` coming from a later graph or eager code);
    - a tensor made inside the graph receives two or more contributions in a later
      graph of the original that is not the last to contribute: that graph handed the
      one that made the tensor their sum, added to what the still later graph handed,
      where the joined graph adds them one at a time (``(c + b2) + b1`` where the
      original added ``c + (b2 + b1)``). The first sum to arrive, and the contributions
      in the graph that made the tensor, are added one at a time either way. Where the
      tensor leaves the joined graph, later code could send it the first contribution
      instead: ``earlier_tensors_stay_in_the_graph`` refuses that.

    The original's graphs met at each claimed statement and, for a statement in a
    function TorchDynamo inlined, where each enclosing inlined call began and where it
    returned (TorchDynamo broke the graph at the outermost call and resumed the caller
    after it). Returns (site, reason) for each claim that keeps its break."""
    if backend_is(output, ("eager",), "runs_the_graph_as_written"):
        return []
    joined = [claim for claim in claims.values() if joins_under_grad(output, claim)]
    boundaries_of = {claim.site: _original_boundaries(claim) for claim in joined}
    refusals = [(site, failed("G312", _UNKNOWN_BOUNDARY_REASON)) for site, owned in boundaries_of.items() if owned is None]
    if refusals or not joined:
        return refusals
    contributions = _gradient_contributions(output)
    if contributions is None:
        reason = "cannot tell which gradient contributions the graph's tensors receive"
        return [(claim.site, failed("G312", reason)) for claim in joined]
    boundaries = sorted({boundary for owned in boundaries_of.values() for boundary in owned})
    offending = _boundaries_summed_across(boundaries, contributions)
    for site, owned in boundaries_of.items():
        reasons = [offending[boundary] for boundary in sorted(owned) if boundary in offending]
        if reasons:
            refusals.append((site, failed("G312", reasons[0])))
    return refusals


_UNKNOWN_BOUNDARY_REASON = "cannot tell where the original's graphs began and ended around it"


def _original_boundaries(claim) -> set[int] | None:
    """The autograd sequence numbers where the original's graphs met around the claimed
    statement: at it and, for each inlined call it is in, where the call began and
    where it returned. None where one is not known."""
    boundaries = {claim.autograd_sequence}
    for translator in claim.inlined_calls:
        began = getattr(translator, CALL_BEGAN_ATTRIBUTE, None)
        ended = getattr(translator, CALL_ENDED_ATTRIBUTE, None)
        if began is None or ended is None:
            return None
        boundaries |= {began, ended}
    return None if min(boundaries) < 0 else boundaries


def _boundaries_summed_across(boundaries: list[int], contributions) -> dict[int, str]:
    """The boundaries (sorted autograd sequence numbers where the original's graphs
    met) across which the joined graph would sum some tensor's gradient in another
    order, each with why."""
    import bisect

    offending: dict[int, str] = {}
    for name, (made, sequences) in contributions.items():
        groups: dict[int, int] = {}
        for sequence in sequences:
            group = bisect.bisect_right(boundaries, sequence)
            groups[group] = groups.get(group, 0) + 1
        if made is None:
            if len(groups) > 1:
                reason = (f"{name} receives gradient contributions in {len(groups)} of the original's graphs: "
                          "one backward graph would hand the engine their sum where the original handed one each")
                for boundary in boundaries[min(groups):max(groups)]:
                    offending.setdefault(boundary, reason)
            continue
        home = bisect.bisect_right(boundaries, made)
        latest = max(groups)
        for group, count in groups.items():
            if home < group < latest and count >= 2:
                reason = (f"{name} receives {count} gradient contributions in a later graph of the original, "
                          "and more in a still later one: one backward graph would add them one at a time "
                          "where the original added their sum")
                for boundary in boundaries[home:group]:
                    offending.setdefault(boundary, reason)
    return offending


def earlier_tensors_stay_in_the_graph(output, graph_module, claims) -> list[tuple[tuple[str, int], str]]:
    """Under a backend that traces one backward graph (``aot_eager``), a tensor that
    autograd records, made before a claimed statement (or a view of one), must not
    leave the joined graph. Where the original broke, such a tensor left an earlier
    graph: a loss that reads only it ran that graph's backward alone, and the inputs
    of the later graphs kept no gradient (``None``); joined, its gradient runs the whole
    backward, which gives them zeros (an optimizer with momentum then moves them).
    Checked when TorchDynamo hands the graph to the backend, once its outputs are
    known; a claim refused here is traced again with its break. Returns (site, reason)
    for each such claim."""
    if backend_is(output, ("eager",), "runs_the_graph_as_written"):
        return []
    joined = [claim for claim in claims.values() if joins_under_grad(output, claim)]
    results = next((node for node in reversed(graph_module.graph.nodes) if node.op == "output"), None)
    if not joined or results is None:
        return []
    made_at = []
    for node in results.all_input_nodes:
        if node.op == "placeholder":
            continue
        for value in tensors_requiring_grad(node.meta.get("example_value")):
            sequences = [
                tensor.grad_fn._sequence_nr()
                for tensor in (value, value._base if value._is_view() else None)
                if isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None
            ]
            if sequences:
                made_at.append((min(sequences), node.name))
    last_recorded = max(
        (tensor.grad_fn._sequence_nr() for node in computed_nodes(output)
         for tensor in tensors_requiring_grad(node.meta.get("example_value")) if tensor.grad_fn is not None),
        default=-1,
    )
    refusals = []
    for claim in joined:
        boundaries = _original_boundaries(claim)
        if boundaries is None:
            refusals.append((claim.site, failed("G313", _UNKNOWN_BOUNDARY_REASON)))
            continue
        if last_recorded < max(boundaries):
            # Nothing after the statement records autograd (a loss printed last): the
            # joined backward is the earlier graph's.
            continue
        for sequence, name in made_at:
            if sequence < max(boundaries):
                refusals.append((claim.site, failed("G313",
                    f"the tensor `{name}`, made before it, leaves the joined graph: a gradient reaching it alone "
                    "would run the whole joined backward, where the original ran only an earlier graph's"
                )))
                break
    return refusals


def _gradient_contributions(output) -> dict[str, tuple[int | None, list[int]]] | None:
    """For each tensor that receives a gradient from the graph's autograd nodes: the
    sequence number of the node that made it (None for a graph input or another leaf),
    and the sequence numbers of the nodes that send it a contribution, one per edge
    (None: not known)."""
    names: dict[tuple[int, int], str] = {}
    made: dict[tuple[int, int], int | None] = {}
    held = []
    outside = set()
    for node in output.graph.nodes:
        for value in tensors_requiring_grad(node.meta.get("example_value")):
            function = value.grad_fn
            if function is None:
                if node.op not in ("placeholder", "get_attr"):
                    continue
                held.append(value)
                names[(id(value), -1)] = f"the graph input `{node.name}`"
            elif node.op in ("placeholder", "get_attr"):
                held.append(function)
                outside.add(id(function))
                names[(id(function), value.output_nr)] = f"the graph input `{node.name}`"
            else:
                held.append(function)
                names.setdefault((id(function), value.output_nr), f"the tensor `{node.name}`")
    contributions: dict[tuple[int, int], list[int]] = {}
    try:
        pending = [
            value.grad_fn
            for node in computed_nodes(output)
            for value in tensors_requiring_grad(node.meta.get("example_value"))
            if value.grad_fn is not None and id(value.grad_fn) not in outside
        ]
        # Held so that each node's Python object, and so its id, stays the same.
        seen: dict[int, object] = {}
        while pending:
            function = pending.pop()
            if id(function) in seen:
                continue
            seen[id(function)] = function
            sequence = function._sequence_nr()
            for child, input_number in function.next_functions:
                if child is None:
                    continue
                variable = getattr(child, "variable", None)
                key = (id(variable), -1) if variable is not None else (id(child), input_number)
                if key not in made:
                    inside = variable is None and id(child) not in outside
                    made[key] = child._sequence_nr() if inside else None
                    # A leaf the graph reads some other way than as an input (a module's
                    # parameter kept as an attribute) is an input all the same.
                    default = f"a tensor made by `{type(child).__name__}`" if inside else "a leaf"
                    names.setdefault(key, default)
                    held.append(variable if variable is not None else child)
                contributions.setdefault(key, []).append(sequence)
                if variable is None and id(child) not in outside and hasattr(child, "next_functions"):
                    pending.append(child)
    except Exception:  # noqa: BLE001 - autograd's Python view changed: not known
        return None
    return {names[key]: (made[key], sequences) for key, sequences in contributions.items()}


def _autograd_refusals(output, claims) -> list[tuple[tuple[str, int], str]]:
    """(site, reason) for each claim refused because the joined graph records autograd."""
    recorded = joined_graph_records_no_autograd(output)
    if recorded is None:
        return []
    differentiated = [claim.site for claim in claims.values() if not joins_under_grad(output, claim)]
    if differentiated:
        return [(site, recorded) for site in differentiated]
    backend = backend_differentiates_as_written(output)
    if backend is not None:
        return [(site, backend) for site in claims]
    values = values_join_where_the_graph_runs_as_written(output, claims)
    if values:
        return values
    return gradient_sums_keep_their_order(output, claims)


_VALUES_UNDER_GRAD_REASON = (
    "the joined graph records autograd and reads a tensor's integers as sizes; only a backend that runs the "
    "graph as written is known to differentiate such a graph as the original's graphs"
)


def values_join_where_the_graph_runs_as_written(output, claims) -> list[tuple[tuple[str, int], str]]:
    """G319: a tensor's integers read into a list in the graph (``.tolist()`` split
    sizes, a VALUES claim) give its operators sizes that are symbols of their own. A backend that runs the graph as written
    records the same operators on the real tensors, one by one, as the original did;
    ``aot_eager`` traces one backward over those symbols, and on JetMoe's experts (three
    SGD steps) its gradients differ from the original's in the last bits, where the
    gradient-order check of ``gradient_sums_keep_their_order`` finds no sum across the
    original's graphs. Until that is understood the claim keeps its break there."""
    if backend_is(output, ("eager",), "runs_the_graph_as_written"):
        return []
    return [(claim.site, failed("G319", _VALUES_UNDER_GRAD_REASON)) for claim in claims.values() if claim.kind == VALUES]


def random_draws_stay_on_their_side(output, claims) -> str | None:
    """Where the original broke, its graphs drew random numbers apart: inductor takes
    seeds from the generator once per graph that draws, so draws on both sides of a
    claimed statement, joined in one graph, take one set of seeds where the original
    took two. Where TorchDynamo ran the rest of the original frame eagerly, every draw
    ran eagerly, with eager's generator. Draws on one
    side only, in a frame the original compiled, are compiled the same either way.

    Where the backend runs the graph's ops in order (``eager``, ``aot_eager`` with
    torch's random ops left as they are), each draw is an op of its own, drawn in the
    original's order from the one generator, joined or not, and a draw nothing reads
    is kept (``trace_hooks``): draws on both sides are not judged there. Training graphs
    draw in every dropout, so judging them refused every claim in them. Draws the
    original ran eagerly stay refused except under a backend that runs the graph as
    written on the real tensors (``eager``), and a backend that keeps the graph's order
    where autocast applies to no op of the trace and no draw reads or makes a float16
    or bfloat16 tensor: ``aot_eager`` differentiates a dropout in reduced precision
    otherwise than eager does (in float32 and float64 its draws and their backward are
    eager's, bit for bit: dropout and its variants, rrelu, bernoulli, the ``rand``
    family, ``randperm``, ``multinomial``, ``exponential_``)."""
    in_order = backend_keeps_graph_order(output) and not rng_ops_are_functionalized()
    if in_order and backend_runs_the_graph_as_written(output):
        return None
    positions = draw_positions(output)
    if not positions:
        return None
    if any(claim.rest_ran_eagerly for claim in claims.values()):
        if not in_order:
            return failed("G307", "the original ran these random draws eagerly; compiled they would not advance the generator as eagerly")
        if autocast_in_trace(output.graph) or _draws_in_reduced_precision(output, positions):
            return failed(
                "G307",
                "the original ran these random draws eagerly, and in reduced precision (autocast, "
                "float16 or bfloat16) the backend differentiates them otherwise than eager",
            )
    if in_order:
        return None
    for claim in claims.values():
        if positions[0] < claim.position <= positions[-1]:
            return failed("G307", "random draws on both sides of it would share one graph's seeds, where the original's graphs drew apart")
    return None


_REDUCED_PRECISION = (torch.float16, torch.bfloat16)


def _draws_in_reduced_precision(output, positions) -> bool:
    """Whether a draw of the trace reads or makes a float16 or bfloat16 tensor (or one
    whose dtype the trace does not show): ``aot_eager``'s dropout backward rounds such
    tensors otherwise than eager's."""
    nodes = nodes_in_trace_order(output)
    for position in positions:
        node = nodes[position]
        if node.target is getattr(torch.ops.higher_order, "cond", None):
            return True  # the draw is in a branch, on tensors the trace does not show here
        values = [node.meta.get("example_value")] + [arg.meta.get("example_value") for arg in node.all_input_nodes]
        tensors = [value for value in ops.tensor_leaves(values) if isinstance(value, torch.Tensor)]
        if not tensors or any(tensor.dtype in _REDUCED_PRECISION for tensor in tensors):
            return True
    return False


def rest_of_eager_frame_compiles_whole(graph_break: bool) -> str | None:
    """Where the rest of the original frame ran eagerly (TorchDynamo gave up on a frame
    whose break was in a loop; or, after a guard's ``raise`` was traced once, on the
    frame resumed at the guard), the mended frame may compile, but only as one graph to
    its end: the graph's own checks then cover all of it. A break left after the claim
    would compile the rest in resumed frames that no check sees, whose ops fail while
    traced where the original raised the user's error eagerly, or whose random draws
    are dropped. A break TorchDynamo restarts the trace for, to compile up to an earlier
    point where it cannot resume at the break, is judged at that restart
    (``trace_hooks._refuse_claims_of_a_frame_run_eagerly``)."""
    if graph_break:
        return failed(
            "G310",
            "the rest of the original frame ran eagerly, and the mended frame still breaks "
            "later, so the rest would run compiled"
        )
    return None


def rest_of_eager_frame_guards_no_resumed_list(output) -> str | None:
    """Where the rest of the original frame ran eagerly (its break was in a loop, or
    where TorchDynamo could not resume after it), the original's frame compiled no
    graph, on any call, whatever it read. The mended frame
    compiles, and guards on what its trace read: in a resume function, on a list of
    numbers the frame it resumes computed before its break (the experts a batch hit,
    ``(counts > 0).nonzero().squeeze(-1).tolist()``, which breaks the graph itself),
    whose length a loop over it is unrolled to and whose items it reads. The list
    changes with the tensor values, and each new list compiles the mended frame again
    (fuzz seed 740080, minimised: a loop over the experts hit, with Capture's
    ``torch.where`` in it; over four calls with a different number of experts hit, 1
    graph and 4 breaks became 3 graphs and 3 breaks). Such a trace gives its claims
    back, and the frame runs eagerly as the original's did. A loop over a list whose
    length the program fixes (``range(self.num_experts)``, a module list) guards on no
    such list, and joins; so does a claim outside the loop, where the original compiled
    the frame too, again for each list."""
    from graphmend.torch_adapter.guards import guarded_resumed_lists

    guarded = guarded_resumed_lists(output)
    if not guarded:
        return None
    return failed(
        "G318",
        f"the rest of the original frame ran eagerly, and the mended frame guards on {guarded[0]}, a list "
        "the frame computed before its break: it would compile again for each new list, where the original "
        "compiled none",
    )


def outputs_share_no_graph_with_a_lowered_guard(output, claims) -> str | None:
    """A lowered guard is an assertion, which inductor fuses into a kernel; graphmend's
    output is an operator ordered only with other output. Inductor may then run the
    output before a guard that comes first (the output is made although the original
    raised first, and the kernels after it read freed buffers) or after
    one that comes later (the output is lost). So output keeps its break in a graph
    with a lowered guard, unless the backend runs the graph's ops in order (TorchDynamo's
    ``eager`` and ``aot_eager``, or one marked ``keeps_graph_order``)."""
    kinds = {claim.kind for claim in claims.values()}
    if GUARD in kinds and OUTPUT in kinds and not backend_keeps_graph_order(output):
        return failed("D301", "a lowered guard shares the graph, and the backend may not keep output and guards in order")
    return None


def outputs_share_no_graph_with_an_input_written_in_place(output, claims) -> str | None:
    """Inductor frees a graph input too early when the graph holds an output operator
    and writes an input in place from another tensor (``x.copy_(y)``, ``torch.exp(y,
    out=x)``, ``x.add_(y)``), before the output or after it: the kernel that writes the
    input then reads a deleted name (UnboundLocalError, with the write before the output
    or after it; the same with any ordered-effect operator in place of graphmend's). Output in such a graph keeps its break, unless the backend
    runs the graph's ops in order."""
    if not any(claim.kind == OUTPUT for claim in claims.values()) or backend_keeps_graph_order(output):
        return None
    for node in inputs_written_in_place(output):
        return failed("D302", f"the graph writes its input `{node.name}` in place, and the backend may free it early")
    return None


def outputs_follow_no_output_of_a_data_dependent_size(output, claims) -> str | None:
    """Inductor schedules an output operator that reads a value computed from a size
    only the graph knows (``print(positions.sum())`` after a captured ``nonzero``)
    after that size is computed, and a later output that reads none of it before: the
    two are written in the other order (a print and the warning after it, fuzz seed
    840188), although the effect tokens order them. Output in such a graph keeps its
    break, unless the backend runs the graph's ops in order."""
    if backend_keeps_graph_order(output):
        return None
    effects = [node for node in computed_nodes(output) if _is_output_operator(node)]
    for earlier in effects[:-1]:
        if _reads_a_data_dependent_size(earlier):
            return failed(
                "D303", "an output reads a value of a size only the graph knows, and another output follows it: "
                "the backend may write them in the other order"
            )
    return None


def _is_output_operator(node) -> bool:
    return is_graphmend_operator(node) and "emit_effect" in str(node.target)


def _reads_a_data_dependent_size(node) -> bool:
    for ancestor in ancestors(node)[:-1]:
        value = ancestor.meta.get("example_value")
        if any(unbacked_symbols(item) for item in (value if isinstance(value, (tuple, list)) else [value])):
            return True
    return False


def ordered_operators_share_no_graph_with_aliased_inputs_written_in_place(output, claims) -> str | None:
    """AOTAutograd fails on a graph holding an ordered operator (graphmend's output or
    lowered guard) that writes in place an input sharing its memory with another input
    (``x.sub_(y)`` with ``x.flatten()`` also an input): the forward it builds for the
    effect tokens reads a token it was not given (StopIteration under ``aot_eager``,
    InductorError under inductor; seen where Capture joined the
    graph around ``torch.where(x.flatten() > 0)`` and Defer put a print in it). Output
    and lowered guards in such a graph keep their breaks, unless the backend runs the
    graph as written (TorchDynamo's ``eager``, or one marked ``runs_the_graph_as_written``)."""
    if not any(claim.kind in (OUTPUT, GUARD) for claim in claims.values()):
        return None
    if backend_is(output, ("eager",), "runs_the_graph_as_written"):
        return None
    from torch.multiprocessing.reductions import StorageWeakRef

    inputs_by_memory: dict = {}
    for node in output.graph.nodes:
        example = node.meta.get("example_value") if node.op == "placeholder" else None
        if isinstance(example, torch.Tensor) and not example.is_sparse:
            inputs_by_memory.setdefault(StorageWeakRef(example.untyped_storage()).cdata, []).append((node, example))
    for sharing in inputs_by_memory.values():
        written = [node.name for node, example in sharing if example._version > 0]
        if len(sharing) > 1 and written:
            return failed(
                "G309",
                f"the graph writes its input `{written[0]}` in place, which shares its memory with another"
                " input, and the backend fails on such a graph holding an ordered operator"
            )
    return None


_BATCH_NORM_FUNCTIONS = frozenset({"batch_norm", "native_batch_norm", "_native_batch_norm_legit_no_training"})


def fixed_tensors_not_written_later(output, claims) -> list[tuple[tuple[str, int], str]]:
    """A test or padding decided from fixed tensors (``runtime/fixed_values.py``) is
    guarded on their values. Where the graph writes one in place after the decision (a
    counter the forward bumps, ``self.k += 1``, or a write through a view of its memory),
    the next call's guard fails and traces again, each call one more graph, where the
    original's one trace serves every call: such a decision keeps its break, for good."""
    from graphmend.runtime.fixed_values import graph_writes_memory_of

    refused = []
    for site, noted in fixed_reads_in_trace(output).items():
        if site in claims and any(graph_writes_memory_of(output.graph, tensor) for tensor in noted):
            refused.append((site, failed(
                "W303", "fixed_tensors_not_written_later: the graph writes a fixed tensor the decision read",
            )))
    return refused


def batch_norms_read_contiguous_tensors(output) -> str | None:
    """torch 2.13 traces a batch norm of a tensor that is not contiguous (``bn(x.transpose(1,
    3))``) with an output laid out as its input, where the CPU kernel returns a
    contiguous one. A backend that plans views by the traced strides (``aot_eager``,
    inductor) then fails on the real tensor at a later ``reshape`` in the same graph
    ("view size is not compatible": CLAP's audio encoder, whose original graph ends at
    the break just after its batch norm). Joined graphs may put such a reshape after
    it, so no claim survives in a graph holding one, unless the backend runs the graph
    as written on the real tensors (TorchDynamo's ``eager``, or one marked
    ``runs_the_graph_as_written``). Inductor is no exception: it checks the strides of
    what it hands a kernel it does not generate (CLAP's audio features entering a
    ``torch.cond`` branch: "expected size 4==4, stride 1==4096")."""
    if backend_is(output, ("eager",), "runs_the_graph_as_written"):
        return None
    modules = getattr(output, "nn_modules", {})
    for node in computed_nodes(output):
        if node.op == "call_module":
            if not isinstance(modules.get(node.target), ops.batch_norm_module_types()):
                continue
        elif getattr(node.target, "__name__", None) not in _BATCH_NORM_FUNCTIONS:
            continue
        read = node.args[0] if node.args else node.kwargs.get("input")
        value = read.meta.get("example_value") if isinstance(read, torch.fx.Node) else None
        if not known_contiguous(value):
            return failed(
                "G308",
                "a batch norm in the joined graph reads a tensor that is not contiguous, whose "
                "output strides torch traces unlike the kernel's; the backend plans views by them"
            )
    return None


def _given_example(node):
    """The real value TorchDynamo recorded for a graph input, or None where none is."""
    try:
        return node.meta["grapharg"].example
    except Exception:  # noqa: BLE001 - no real value recorded
        return None


def joined_graph_writes_no_inference_tensor_in_place(output) -> str | None:
    """An inference tensor (made inside ``torch.inference_mode()``, in an earlier graph or
    eagerly) given to the joined graph and written in place there fails at run time
    outside the mode. In the original the write sat in a graph of its own: the graphs
    before it had returned (TorchDynamo applying their side effects) and, under a
    functionalizing backend, whose write to an input comes after the graph's ops, the
    output and guards the joined graph holds came after the failure (for example
    ``F.relu(h, inplace=True)`` of a helper's result inside the mode, then a
    print that Defer put in the graph after a Capture; the mended run printed it before
    failing). A call made inside the mode (serving code) writes its inference tensors
    as the program does."""
    if getattr(store.conversion, "inference_mode", None):
        return None
    for node in inputs_written_in_place(output):
        given = _given_example(node)
        if not isinstance(given, torch.Tensor) or given.is_inference():
            return failed("G305", f"the joined graph writes its input `{node.name}` in place, an inference tensor, which fails")
    return None


def joined_graph_records_no_autograd_on_an_inference_tensor(output) -> str | None:
    """An inference tensor given to the joined graph and read by an op that records
    autograd (``F.linear`` of it with a weight that requires grad) fails at run time
    outside the mode: autograd cannot save it for backward. The original broke before
    that op, and TorchDynamo applied the side effects of the graph before the break
    (a forward's ``HISTORY.append``) before the op failed in the next one; the joined
    graph fails with those side effects not yet applied (fuzz seed 830026: a module's
    replaced forward that records its call, prints, then applies the linear layer to a
    tensor made inside ``torch.inference_mode()``). A call made inside the mode (serving
    code) computes no autograd at all."""
    if getattr(store.conversion, "inference_mode", None):
        return None
    for node in output.graph.nodes:
        if node.op != "placeholder":
            continue
        given = _given_example(node)
        if isinstance(given, torch.Tensor) and given.is_inference() and any(records_autograd(user) for user in node.users):
            return failed(
                "G321", f"the joined graph records autograd on its input `{node.name}`, an inference tensor, which fails"
            )
    return None


def joined_graph_writes_through_no_out_keyword(output) -> str | None:
    """torch 2.13's functionalization gives a tensor written through ``out=`` the layout of
    the op's result, not its own: read later in the same graph (``torch.tanh(y,
    out=x)`` with ``y`` laid out transposed, then ``torch.tanh(x)``), it computes a
    result laid out as ``y`` where eager code keeps ``x``'s (seen where Capture joined the read to the write's graph; the original read ``x`` as an
    input of the next graph). No claim survives in a graph writing through ``out=``,
    unless the backend runs the graph as written (TorchDynamo's ``eager``, or one
    marked ``runs_the_graph_as_written``)."""
    if backend_is(output, ("eager",), "runs_the_graph_as_written"):
        return None
    for node in computed_nodes(output):
        if node.kwargs.get("out") is not None:
            return failed("G306", "the joined graph writes through `out=`, whose layout the backend may not keep")
    return None


def joined_graph_enters_no_inference_mode(output) -> str | None:
    """A claim made outside a ``torch.inference_mode()`` block joins the graph holding the
    block with code after it (or before it) that the original ran in another graph.
    The block's outputs are inference tensors when the graph runs under ``eager``, and
    an in-place update of one after the block then fails at run time inside the joined
    graph, losing the side effects TorchDynamo applies after a graph returns (a
    forward hook's ``HISTORY.append``), where the original's
    graph had returned before the update failed; a functionalizing backend fails to
    compile the update instead (``BackendCompilerFailed``). Claims made inside the
    block are refused when made (``not_inside_inference_mode``)."""
    for node in computed_nodes(output):
        if getattr(node.target, "__name__", None) == "_enter_inference_mode" and (not node.args or node.args[0]):
            return failed("G304", "the joined graph enters `torch.inference_mode()`, whose outputs are inference tensors")
    return None


# Capture's operators whose output size is a fresh unbacked symbol (``dynamic_shapes``).
_SIZE_MAKING_OPERATORS = ("graphmend::nonzero", "graphmend::nonempty_positions")


def captured_sizes_decide_no_break(output, translator, claims, graph_break: bool) -> str | None:
    """A capture removes the break at its call only when the trace goes past every use of
    the size it made. When the graph breaks with that size on TorchDynamo's stack (the
    branch ``if len(positions) > 0:`` whose merged form was refused, a print of the
    count), the break is still there, only later: the graph after it starts elsewhere
    than the original's and takes as inputs tensors the original's computes itself.
    Such a graph can meet torch's own bugs where the original's does not (one wrote an
    input not requiring grad with rows that do, and wrote and
    returned another input, and AOTAutograd in torch 2.13 returned one output's values
    for another). A capture that removes no break keeps the original call and its break."""
    if not graph_break:
        return None
    refused = refused_capture_reason(claims)
    if refused is not None:
        return refused
    made = set()
    for node in output.graph.nodes:
        overload = getattr(node.target, "_overloadpacket", None) if node.op == "call_function" else None
        if getattr(overload, "_qualified_op_name", None) in _SIZE_MAKING_OPERATORS:
            made |= unbacked_symbols(node.meta.get("example_value"))
    # The numbers ``captured_values`` read from a tensor, each recorded where it was made.
    made |= set(getattr(output.shape_env, CAPTURE_SITES_ATTRIBUTE, {}))
    if not made:
        return None
    frame = translator
    while frame is not None:
        for variable in getattr(frame, "stack", ()):
            if unbacked_symbols(getattr(variable, "sym_num", None)) & made:
                return failed("C301", "the graph breaks on the size the capture made, so the capture removes no break")
        frame = getattr(frame, "parent", None)
    return None


def graph_holds_an_op_of_the_program(output) -> str | None:
    """A graph whose only calls are graphmend's own (its operators for an output, a
    guard, a message, moved in from between two breaks the mended frame keeps, and the
    operands its runtime makes for them) is one the original never compiled: where it
    broke, a stretch of the frame that computes nothing makes no graph. Joining there
    removes breaks but adds a graph (fuzz seed 740041: a log call between two prints
    that keep their breaks, 2 graphs became 3), so the claims keep their breaks and the
    frame compiles as the original's."""
    calls = computed_nodes(output)
    if not calls or not all(is_graphmend_operator(node) or made_by_the_runtime(node) for node in calls):
        return None
    return failed(
        "G315", "the joined graph would hold only graphmend's operators, a graph the original did not compile"
    )


def break_resumes_in_the_order_of_an_earlier_resume_function(output, translator, claims, graph_break: bool) -> str | None:
    """TorchDynamo makes one resume function per place and per order of the frame's live
    names (``ContinueExecutionCache``), and reads that order from the frame's locals as
    its trace left them: a name the frame assigns again after a break that dropped it
    (dead there) comes last in the resume function, while a frame whose trace went on
    keeps it where it was. Where the original reached a later break on two paths, one
    breaking just before such an assignment, its resume function there was shared; a
    claim removing that earlier break keeps the name in its place, and the same names in
    another order make another resume function, whose code compiles once more (fuzz seed
    770094: a print of text in an ``else`` arm before ``h3 = x``, then a branch where
    both arms meet; one graph more). That graph is paid for where the claims join two
    stretches that each compute something (the original compiled a graph for each); where
    at most one does, a trace that holds claims and breaks at a line whose resume
    function TorchDynamo made already for the same names in another order gives its
    claims back, and the frame resumes as the original's did."""
    from graphmend.torch_adapter.tracing import (
        earlier_resume_argument_orders,
        resume_argument_orders,
    )

    if not graph_break or translator is None or translator is not getattr(output, "root_tx", None):
        return None
    if _stretches_that_compute(output, claims) > 1:
        return None
    try:
        ours = resume_argument_orders(translator)
        earlier = earlier_resume_argument_orders(translator.f_code, translator.lineno)
    except (ImportError, AttributeError, KeyError, IndexError, TypeError):
        return None
    if not any(set(order) == set(other) and order != other for order in ours for other in earlier):
        return None
    return failed(
        "G317",
        "the trace breaks where TorchDynamo made a resume function for the same names in another order, and "
        "its claims join no two stretches that compute: the code after the break would compile again",
    )


def _stretches_that_compute(output, claims) -> int:
    """Of the stretches of the trace's graph between its claimed statements (where the
    original broke), how many hold an op of the program's own (each a graph of the
    original's). An op of the claimed statement itself (the values a print shows, a
    branch's test) is of the stretch before it: the original computed it before its break."""
    cuts = sorted((claim.position, claim.site) for claim in claims.values())
    computing = set()
    for index, node in enumerate(nodes_in_trace_order(output)):
        if node.op not in ("call_function", "call_method", "call_module") or is_graphmend_operator(node) or made_by_the_runtime(node):
            continue
        sites = _user_sites(node)
        computing.add(sum(1 for position, site in cuts if position <= index and site not in sites))
    return len(computing)


_FRAME_LINE = re.compile(r'^\s*File "([^"]+)", line (\d+)')


def _user_sites(node) -> set[tuple[str, int]]:
    """The (file, line) of each frame TorchDynamo recorded for ``node``."""
    trace = node.meta.get("stack_trace") or ""
    return {(found.group(1), int(found.group(2))) for found in map(_FRAME_LINE.match, trace.splitlines()) if found}


def inlined_claims_guard_no_global_the_trace_writes(output, claims) -> list[tuple[str, int]]:
    """Where the original broke inside a function its frame called, TorchDynamo cut the
    frame's trace at the call, and the function ran as a frame of its own: what it read
    was guarded there alone. Removing that break inlines the function, and its guards
    join the caller's frame. Where the trace also writes a module global whose value or
    length it guards on (a helper that counts its calls with ``global COUNT; COUNT +=
    1``, a hook appending to a list), the guard fails on the next call, and the whole
    caller compiles again, each time recording the breaks it keeps, where the original
    compiled only the callee again (fuzz seeds 740093 and 740137: one break more). That
    can cost fewer graphs too; but more breaks than the original is worse, so the claims
    inside inlined calls keep their breaks there. Returns their sites."""
    from graphmend.torch_adapter.guards import globals_written, guarded_global_names

    inlined = [claim.site for claim in claims.values() if claim.inlined_calls]
    if not inlined or not (globals_written(output) & guarded_global_names(output)):
        return []
    return inlined


def claims_precede_no_guard_on_a_global_the_trace_writes(output, claims) -> list[tuple[str, int]]:
    """Where the trace writes a module global whose value or length it guards on (a
    forward pre-hook appending to a list), the guard fails on the next call and the frame
    compiles again, every call. The original broke at the statement, and where that guard
    came after the break it belonged to the resume function alone: the ops before the
    break compiled once, and the resume function, compiled again on every call, made a
    graph each time only where ops follow the statement. Joined, with no op of the
    program after the statement, the ops before it are compiled again on every call into
    graphs the original did not make (fuzz seed 810088: a print after an op, then a
    module whose hook appends to a list and whose forward computes nothing; 1 graph
    became 4 over four calls). With ops after it, the joined frame makes no more graphs
    than the resume function did, and joins. Returns the sites that keep their breaks."""
    from graphmend.torch_adapter.guards import globals_written, guarded_global_names

    written = globals_written(output) & guarded_global_names(output)
    if not written:
        return []
    ops = program_op_count(output)
    return [
        claim.site for claim in claims.values()
        if not claim.inlined_calls and 0 < claim.ops_before == ops and written - claim.globals_guarded_before
    ]


_GLOBAL_GUARDED_AFTER_REASON = failed(
    "G320", "ops come before it and none after, and the trace later guards on a module global it also writes: "
    "they would compile again on every call, where the original compiled them once, before its break"
)


_GLOBAL_WRITTEN_REASON = failed(
    "G316", "it lies in an inlined call, and the trace guards on a module global it also writes: "
    "the caller would compile again on every call, where the original compiled only the callee again"
)


def refused_capture_reason(claims) -> str | None:
    """Why the first capture claim of a trace was refused since it was made, if one was."""
    for claim in claims.values():
        if claim.kind in _CAPTURE_KINDS and refused_reason(claim.site):
            return refused_reason(claim.site)
    return None


def merged_branches_were_traced(output, claims) -> list[tuple[str, int]]:
    """The merged branches claimed in this trace whose ``torch.cond`` it never reached:
    TorchDynamo broke the graph at the call (a size in the body it had to know, which
    it turns into a break and a trace that stops before the call) and would run the
    rewritten branch eagerly, where the original's branch was compiled."""
    entered = getattr(output, MERGES_ENTERED_ATTRIBUTE, set())
    return [claim.site for claim in claims.values() if claim.kind == MERGE and claim.site not in entered]


def items_stay_with_lowered_checks(output, claims, refused_sites) -> list[tuple[str, int]]:
    """A ``.item()`` stays a tensor only for a check lowered into the same graph. Where
    no check that reads it is lowered in this trace (or each such check's claim is
    refused), the original breaks at the ``.item()``, and its resume function starts with
    a Python number: under ``dynamic=True`` a symbolic one, which the check's f-string
    message cannot format while traced, so TorchDynamo gave up that resume function and
    ran the rest of the frame eagerly; the mended frame, holding a tensor, broke only at
    the check's eager call and traced the rest, and an op there that fails made
    TorchDynamo's error where the original raised the op's own. Returns the sites of such ITEM claims."""
    lowered = getattr(output, CHECKS_LOWERED_ATTRIBUTE, {})
    unsupported = []
    for claim in claims.values():
        if claim.kind != ITEM or claim.site in refused_sites:
            continue
        guards = [lowered.get((claim.site[0], line)) for line in claim.checks]
        if not any(guard is not None and guard not in refused_sites for guard in guards):
            unsupported.append(claim.site)
    return unsupported


_ITEM_WITHOUT_CHECK_REASON = failed("T301", "no check that reads it stays lowered in the same graph")


def whole_trace_refusals(output, translator, claims, graph_break: bool):
    """(site, kind, reason) for each claim the whole trace refuses; an ITEM claim goes
    with the checks it was kept for."""
    refusals = _claim_refusals(output, translator, claims, graph_break)
    refused_sites = {site for site, kind, _reason in refusals if kind == ALWAYS or torch.is_grad_enabled()}
    return refusals + [
        (site, ALWAYS, _ITEM_WITHOUT_CHECK_REASON)
        for site in items_stay_with_lowered_checks(output, claims, refused_sites)
    ]


def _claim_refusals(output, translator, claims, graph_break: bool):
    # Claims undone while tracing by a later statement's G203 (``claims.undone_in_trace``).
    undone = [(site, ALWAYS, reason) for site, reason in undone_in_trace(output).items() if site in claims]
    if undone:
        return undone
    only_ours = graph_holds_an_op_of_the_program(output)
    if only_ours is not None:
        return [(site, ALWAYS, only_ours) for site in claims]
    written = inlined_claims_guard_no_global_the_trace_writes(output, claims)
    if written:
        return [(site, ALWAYS, _GLOBAL_WRITTEN_REASON) for site in written]
    guarded_after = claims_precede_no_guard_on_a_global_the_trace_writes(output, claims)
    if guarded_after:
        return [(site, ALWAYS, _GLOBAL_GUARDED_AFTER_REASON) for site in guarded_after]
    reordered = break_resumes_in_the_order_of_an_earlier_resume_function(output, translator, claims, graph_break)
    if reordered is not None:
        return [(site, ALWAYS, reordered) for site in claims]
    stopped = merged_branches_were_traced(output, claims)
    if stopped:
        reason = failed("C302", "TorchDynamo broke the graph at the branch's `torch.cond`")
        return [(site, ALWAYS, reason) for site in stopped]
    decided = captured_sizes_decide_no_break(output, translator, claims, graph_break)
    if decided is not None:
        return [(claim.site, ALWAYS, decided) for claim in claims.values() if claim.kind in _CAPTURE_KINDS]
    with_guard = (
        outputs_share_no_graph_with_a_lowered_guard(output, claims)
        or outputs_share_no_graph_with_an_input_written_in_place(output, claims)
        or outputs_follow_no_output_of_a_data_dependent_size(output, claims)
    )
    if with_guard is not None:
        return [(claim.site, ALWAYS, with_guard) for claim in claims.values() if claim.kind == OUTPUT]
    aliased = ordered_operators_share_no_graph_with_aliased_inputs_written_in_place(output, claims)
    if aliased is not None:
        return [(claim.site, ALWAYS, aliased) for claim in claims.values() if claim.kind in (OUTPUT, GUARD)]
    for_all = (
        random_draws_stay_on_their_side(output, claims)
        or batch_norms_read_contiguous_tensors(output)
        or joined_graph_enters_no_inference_mode(output)
        or joined_graph_writes_no_inference_tensor_in_place(output)
        or joined_graph_records_no_autograd_on_an_inference_tensor(output)
        or joined_graph_writes_through_no_out_keyword(output)
    )
    if for_all is not None:
        return [(site, ALWAYS, for_all) for site in claims]
    rewritten = fixed_tensors_not_written_later(output, claims)
    if rewritten:
        return [(site, ALWAYS, reason) for site, reason in rewritten]
    under_grad = _autograd_refusals(output, claims)
    if under_grad:
        return [(site, UNDER_GRAD, reason) for site, reason in under_grad]
    rest_compiled = rest_of_eager_frame_compiles_whole(graph_break) or (
        rest_of_eager_frame_guards_no_resumed_list(output)
        if any(claim.rest_ran_eagerly for claim in claims.values())
        else None
    )
    if rest_compiled is None:
        return []
    return [(claim.site, ALWAYS, rest_compiled) for claim in claims.values() if claim.rest_ran_eagerly]


def backend_compiles_the_joined_graph(output, raised: BaseException) -> str | None:
    """The backend compiles the joined graph. Where the original broke, the backend
    compiled each of its graphs apart, and one may compile where the joined graph does
    not: AOTAutograd traces the backward of the whole graph at once, and fails while
    compiling where a tensor it saves for backward is written in place later in the same
    graph (``torch.relu(y)`` then ``y.mul_(2)``), where the original's graphs saved it in
    one graph and wrote it in the next, and the error came from ``backward()``, as
    eagerly. A claim whose joined graph the backend fails on keeps its break; the frame
    is traced again, and an error the original's own graphs raise is raised as theirs.
    TorchDynamo's own signals (a restart, a frame to skip) pass through."""
    from graphmend.torch_adapter.errors import is_dynamo_signal, what_the_backend_raised

    if is_dynamo_signal(raised):
        return None
    cause = what_the_backend_raised(raised)
    return failed(
        "G314", f"the backend failed to compile the joined graph ({type(cause).__name__}), "
        "where the original's graphs compiled apart"
    )
