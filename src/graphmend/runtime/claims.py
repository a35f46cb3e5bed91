"""Which user statements lose their graph break in the trace TorchDynamo is making, and
tracing the frame again with their breaks kept when the rest of the trace shows that
joining the graphs would change what the program does.

Defer, Where and Trap decide while tracing, at the statement, whether the statement
may stay in the graph (a *claim* on its break). No claim is made inside
``torch.inference_mode()`` (``not_inside_inference_mode``: the original's graph after
the break runs inside the real mode, and its outputs are inference tensors). Some facts
that decide it come only later in the same trace:

- an op after the statement fails while TorchDynamo traces it (``no_later_op_failed_while_tracing``);
- TorchDynamo gives up on the whole frame after the statement (an error the code
  raises escapes the frame while traced, a construct it cannot resume after), which it
  then runs eagerly (``frame_was_not_given_up_while_tracing``);
- the joined graph records autograd: a selection or a capture is then refused
  (``joined_graph_records_no_autograd``); output and lowered guards stay joined where the
  backend runs the graph as written, or traces its backward (``aot_eager``), no tensor's
  gradient would be summed in another order, and no tensor made before the statement
  leaves the graph (``backend_differentiates_as_written``,
  ``gradient_sums_keep_their_order``, ``earlier_tensors_stay_in_the_graph``, the last
  checked when the graph, with its outputs, is handed to the backend);
- the joined graph draws random numbers on both sides of the statement
  (``random_draws_stay_on_their_side``);
- the joined graph holds a batch norm of a tensor that is not contiguous, which torch
  traces with the wrong strides (``batch_norms_read_contiguous_tensors``);
- the joined graph enters ``torch.inference_mode()`` (``joined_graph_enters_no_inference_mode``);
- the graph breaks on a size a capture made, or tracing needs that size on the host
  anywhere, an inlined function too (``captured_sizes_decide_no_break``,
  ``_refuse_captures_whose_sizes_are_needed``);
- output shares the graph with a lowered guard (``outputs_share_no_graph_with_a_lowered_guard``)
  or with an input written in place (``outputs_share_no_graph_with_an_input_written_in_place``);
- TorchDynamo ran (or, after a guard fails once, runs) the rest of the original frame
  eagerly, and the mended frame does not compile to its end in one graph
  (``rest_of_eager_frame_compiles_whole``);
- a ``.item()`` kept as a tensor has no check that reads it lowered in the same graph
  (``items_stay_with_lowered_checks``).

Separately, a graph compiled from mended code that draws random numbers compiles with
inductor's ``fallback_random`` (``_check_the_compiled_graph``): its numbers are eager's.

When one fails, TorchDynamo is made to trace the frame again
(``UnspecializeRestartAnalysis``, which TorchDynamo raises itself for other reasons) and
the claims it names are refused in that trace and later ones, so the original breaks
come back exactly where the original had them. A refused trace has not run: nothing is
done twice.

The hooks wrap three private TorchDynamo functions; where a torch lacks them the later
checks cannot be made, and every claim is refused (``trace_checks_unavailable``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import torch

from graphmend import torch_adapter
from graphmend.core.legality import failed
from graphmend.torch_adapter import ops

_RUNTIME_DIRECTORY = os.path.dirname(os.path.abspath(__file__))
_CLAIMS_ATTRIBUTE = "_graphmend_claims"

# The latest reason a claim was refused while tracing, by (file, line): `graphmend check`
# cannot report these statically, so tests and users look here.
trace_time_declines: dict[tuple[str, int], str] = {}

# Sites refused for good ("always") or only while grad mode is on ("grad").
_refused: dict[tuple[str, int], set[str]] = {}
_ALWAYS = "always"
_UNDER_GRAD = "grad"

# Called with TorchDynamo's output graph of a trace attempt that graphmend abandons (the
# break records of that attempt are not breaks of the program: ``graphmend.dynamo_records``).
abandoned_trace_listeners: list = []

# Hooks every torch needs; one only some torches need (``restart_on_observed_failed_op``)
# is added by ``graphmend.torch_adapter`` where this torch has what it wraps.
_hooks_installed = {
    "restart_on_failed_op": False,
    "restart_on_given_up_frame": False,
    "check_before_compiling": False,
    "check_the_compiled_graph": False,
    "refuse_captures_whose_sizes_are_needed": False,
    "note_the_calls_inference_mode": False,
    "note_inlined_call_spans": False,
}

# Per thread: whether the call TorchDynamo is converting was made inside
# ``torch.inference_mode()``, which TorchDynamo turns off while it traces (None: not known).
_conversion = threading.local()


# What stands in the graph for a claimed statement.
GUARD, OUTPUT, SELECTION, MERGE, CAPTURE = "guard", "output", "selection", "merge", "capture"
# A ``.item()`` kept as a tensor for the checks that read it (``rules/trap/items.py``).
ITEM = "item"
# (file, original line of a check call) -> the site of its GUARD claim in this trace.
_CHECKS_LOWERED_ATTRIBUTE = "_graphmend_checks_lowered"
# The merged branches (Capture's ``torch.cond``) whose ``merge_rows`` this trace entered.
_MERGES_ENTERED_ATTRIBUTE = "_graphmend_merges_entered"


@dataclass(frozen=True)
class Claim:
    """A user statement that lost its break in this trace."""

    site: tuple[str, int]
    # How many nodes TorchDynamo's graph had when the statement was traced.
    position: int
    # Why the rest of the original frame ran (or may later run) eagerly, where it did:
    # the mended frame must then compile to its end in one graph.
    rest_ran_eagerly: str | None
    # GUARD (Trap), OUTPUT (Defer), SELECTION (Where), CAPTURE (Capture's positions),
    # MERGE (Capture's branch on whether positions are empty) or ITEM (Trap's ``.item()``).
    kind: str = SELECTION
    # For an ITEM: the original lines of the check calls that read the value.
    checks: tuple[int, ...] = ()
    # The autograd sequence number when the statement was traced: autograd nodes made
    # for the code before it have smaller ones (``gradient_sums_keep_their_order``).
    autograd_sequence: int = 0
    # The translators of the inlined calls the statement is in, innermost first: the
    # original broke the graph at each call and after it returned as well.
    inlined_calls: tuple = ()


def current_translator():
    """TorchDynamo's innermost instruction translator, or None when not tracing."""
    from graphmend.torch_adapter.tracing import root_translator

    root = root_translator()
    if root is None:
        return None
    return root.output.current_tx


def _python_constant(variable):
    return variable.as_python_constant()


def decide_in_trace(context, result_name: str, argument_names: tuple, decide, read=_python_constant) -> None:
    """Run by TorchDynamo (``comptime``) inside a runtime function it traces: call
    ``decide(translator, *arguments)`` with that function's arguments as Python
    constants (or as ``read`` makes them from TorchDynamo's variables) and bind its local
    ``result_name`` to the answer. The answer is a constant of the trace: no guard, and,
    unlike ``assume_constant_result``, no global written into the user's module.
    Anything unexpected leaves the local as it was (the statement keeps its break)."""
    try:
        from graphmend.torch_adapter.tracing import constant_variable, translator_of

        translator = translator_of(context)
        arguments = [read(translator.symbolic_locals[name]) for name in argument_names]
        answer = decide(translator, *arguments)
        translator.symbolic_locals[result_name] = constant_variable(answer)
    except Exception:  # noqa: BLE001 - TorchDynamo internals changed, or a value is not constant
        pass


class Numbering:
    """Numbers for hashable values met while tracing (a message, a template), so that a
    graph names the value by a constant int; the values, by number, for the operators
    that run the graph."""

    def __init__(self):
        self._lock = threading.Lock()
        self.values: list = []
        self._numbers: dict = {}

    def number(self, value) -> int:
        with self._lock:
            known = self._numbers.get(value)
            if known is None:
                known = self._numbers[value] = len(self.values)
                self.values.append(value)
            return known

    def decide(self, context, argument_name: str) -> None:
        """``comptime`` body: bind the traced function's local ``number`` to the number
        of its argument ``argument_name``."""
        decide_in_trace(context, "number", (argument_name,), lambda _tracer, value: self.number(value))


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


def is_runtime_file(filename: str) -> bool:
    """Whether ``filename`` is one of graphmend's runtime modules."""
    return os.path.dirname(os.path.abspath(filename)) == _RUNTIME_DIRECTORY


def original_break_keeps_frame_compiled(translator) -> str | None:
    """The original statement is a graph break. Where TorchDynamo cannot resume after a
    break (in a loop, under a context manager it cannot break in), it gives up on the
    whole frame and runs it eagerly, on every call. Returns why, or None.

    TorchDynamo decides this where the break happens: in the innermost frame with nested
    graph breaks, else in the outermost traced frame (at the call of the inlined one).
    Under ``fullgraph=True`` the original break is an error, which removing it fixes."""
    from graphmend.torch_adapter.tracing import graph_breaks_nest

    breaker = translator if graph_breaks_nest() else translator.output.root_tx
    if getattr(breaker, "one_graph", False) or getattr(breaker, "error_on_graph_break", False):
        return None
    try:
        in_loop = breaker.maybe_has_backedge()
        resumable = breaker.should_compile_partial_graph()
    except Exception:  # noqa: BLE001 - TorchDynamo internals changed: cannot tell, so decline
        return "cannot tell whether TorchDynamo would have resumed after the original break"
    if in_loop:
        return (
            f"`{breaker.f_code.co_name}` reaches it inside a loop: TorchDynamo would have run "
            "the frame eagerly (it does not resume after a graph break in a loop)"
        )
    if not resumable:
        return (
            f"TorchDynamo could not resume after the original break in `{breaker.f_code.co_name}` "
            "and would have run the frame eagerly"
        )
    return None


def claims_in_trace(translator) -> dict[tuple[str, int], Claim]:
    """The claims made so far in the trace ``translator`` belongs to (kept on its output
    graph, which TorchDynamo makes afresh for every attempt at a frame)."""
    output = translator.output
    claims = getattr(output, _CLAIMS_ATTRIBUTE, None)
    if claims is None:
        claims = {}
        setattr(output, _CLAIMS_ATTRIBUTE, claims)
    return claims


def refused_reason(site: tuple[str, int]) -> str | None:
    """Why an earlier trace refused this site's claim, where that still holds."""
    kinds = _refused.get(site)
    if not kinds:
        return None
    if _ALWAYS in kinds or (_UNDER_GRAD in kinds and torch.is_grad_enabled()):
        return trace_time_declines.get(site, "an earlier trace kept its break")
    return None


def refused_between(filename: str, first: int, last: int) -> str | None:
    """Why an earlier trace refused a claim at some line ``first..last`` of ``filename``,
    where that still holds."""
    for site in list(_refused):
        if site[0] == filename and first <= site[1] <= last:
            reason = refused_reason(site)
            if reason is not None:
                return f"line {site[1]}: {reason}"
    return None


def forget_refusals() -> None:
    """Forget every refusal and its reason (tests that reuse a file name for another
    program; a refusal is keyed by file and line)."""
    _refused.clear()
    trace_time_declines.clear()


def trace_checks_unavailable() -> str | None:
    """The checks made later in the trace need hooks into TorchDynamo; a torch
    without the functions they wrap gets no rewrite that needs them."""
    missing = [name for name, installed in _hooks_installed.items() if not installed]
    if missing:
        return failed("G201", f"this torch lacks what graphmend checks the whole trace with ({', '.join(missing)})")
    return None


def not_inside_inference_mode(translator) -> str | None:
    """None unless the statement being traced is inside ``torch.inference_mode()`` in
    this trace (a ``with`` block or a decorated function: TorchDynamo records entering
    and leaving the mode as graph nodes). The original breaks there, and TorchDynamo
    runs the graph after the break inside the real inference mode: its outputs are
    inference tensors, which the program may not update in place outside it
    (``RuntimeError``). In one graph with the code before the block, a functionalizing
    backend (``aot_eager``, inductor) computes them as ordinary tensors, or fails to
    compile the update."""
    modes = []
    for node in translator.output.graph.nodes:
        name = getattr(node.target, "__name__", "") if node.op == "call_function" else ""
        if name == "_enter_inference_mode":
            modes.append(bool(node.args[0]) if node.args else True)
        elif name == "_exit_inference_mode" and modes:
            modes.pop()
    if modes and modes[-1]:
        return failed("G202", "inside `torch.inference_mode()`, whose graph's outputs are inference tensors")
    return None


def record_claim(
    translator, site: tuple[str, int], rest_ran_eagerly: str | None, kind: str = SELECTION, checks: tuple = ()
) -> None:
    position = len(translator.output.graph.nodes)
    claims_in_trace(translator)[site] = Claim(
        site, position, rest_ran_eagerly, kind, tuple(checks), _autograd_sequence_now(),
        tuple(_inlined_calls(translator)),
    )


def _inlined_calls(translator):
    root = getattr(translator.output, "root_tx", None)
    while translator is not None and translator is not root:
        yield translator
        translator = getattr(translator, "parent", None)


def _autograd_sequence_now() -> int:
    try:
        return ops.autograd_sequence_number()
    except Exception:  # noqa: BLE001 - another torch: no boundary known, so every join under grad is refused
        return -1


def claim_item_for_checks(translator, check_lines: tuple[int, ...]) -> bool:
    """Whether the ``.item()`` being traced (in the first frame outside graphmend's
    runtime) may stay a tensor for the checks at ``check_lines`` (original lines) that
    read it; if so, the claim is recorded, and it stands only where one of those checks
    is lowered in the same trace (``items_stay_with_lowered_checks``)."""
    claimable = _claimable_user_site(translator)
    if claimable is None:
        return False
    translator, site = claimable
    record_claim(translator, site, None, ITEM, checks=check_lines)
    return True


def mark_check_lowered(translator, line: int, site: tuple[str, int]) -> None:
    """The check call at original ``line`` of the frame of ``translator`` is lowered in
    this trace, as the GUARD claim at ``site``."""
    output = translator.output
    lowered = getattr(output, _CHECKS_LOWERED_ATTRIBUTE, None)
    if lowered is None:
        lowered = {}
        setattr(output, _CHECKS_LOWERED_ATTRIBUTE, lowered)
    lowered[(translator.f_code.co_filename, line)] = site


def claim_break_at_user_site(translator, kind: str = SELECTION) -> bool:
    """Whether the user's statement being traced (in the first frame outside
    graphmend's runtime, from ``translator`` outwards) may lose its break in this
    trace; if so, the claim is recorded so that the checks made later in the trace can
    refuse it. Used by Defer's output and Where's selections; Trap records its own."""
    claimable = _claimable_user_site(translator)
    if claimable is None:
        return False
    translator, site = claimable
    record_claim(translator, site, original_break_keeps_frame_compiled(translator), kind)
    return True


def _claimable_user_site(translator):
    """(translator, site) of the user's statement being traced (the first frame outside
    graphmend's runtime, from ``translator`` outwards), or None where it may not lose
    its break in this trace (an earlier trace refused it, the whole-trace checks are
    unavailable, inside ``torch.inference_mode()``)."""
    translator = user_translator(translator)
    if translator is None:
        return None
    site = (translator.f_code.co_filename, translator.lineno)
    if refused_reason(site) is not None:
        return None
    unavailable = trace_checks_unavailable() or not_inside_inference_mode(translator)
    if unavailable is not None:
        trace_time_declines[site] = unavailable
        return None
    return translator, site


def decline_at_user_site(translator, reason: str) -> None:
    """Record why the user's statement keeps its break in this trace (``explain``)."""
    translator = user_translator(translator)
    if translator is not None:
        trace_time_declines[(translator.f_code.co_filename, translator.lineno)] = reason


def refuse_claim_at_user_site(translator, reason: str) -> None:
    """The rewritten statement being traced cannot keep its promise in this trace (a
    selection that would branch in Python, inside graphmend's runtime): where the
    statement holds a claim, refuse it for good and trace the frame again, so that the
    original statement runs with its one break. Without a claim, only say why."""
    user = user_translator(translator)
    if user is None:
        return
    site = (user.f_code.co_filename, user.lineno)
    if site not in claims_in_trace(user):
        decline_at_user_site(user, reason)
        return
    _refuse(site, _ALWAYS, reason)
    raise _restart(user.output, reason)


def mark_merge_entered(translator) -> None:
    """The trace reached ``merge_rows`` of the user's statement being traced."""
    site = user_site(translator)
    if site is not None:
        output = translator.output
        entered = getattr(output, _MERGES_ENTERED_ATTRIBUTE, None)
        if entered is None:
            entered = set()
            setattr(output, _MERGES_ENTERED_ATTRIBUTE, entered)
        entered.add(site)


def merged_branches_were_traced(output, claims) -> list[tuple[str, int]]:
    """The merged branches claimed in this trace whose ``torch.cond`` it never reached:
    TorchDynamo broke the graph at the call (a size in the body it had to know, which
    it turns into a break and a trace that stops before the call) and would run the
    rewritten branch eagerly, where the original's branch was compiled."""
    entered = getattr(output, _MERGES_ENTERED_ATTRIBUTE, set())
    return [claim.site for claim in claims.values() if claim.kind == MERGE and claim.site not in entered]


def user_site(translator) -> tuple[str, int] | None:
    """(file, line) of the user's statement being traced, or None."""
    translator = user_translator(translator)
    return None if translator is None else (translator.f_code.co_filename, translator.lineno)


def error_headline(error: BaseException) -> str:
    """The first line of ``error``'s message, or its type's name (for a refusal's reason)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def refuse_for_good(site: tuple[str, int], reason: str) -> None:
    """The statement at ``site`` keeps its break in every later trace."""
    _refuse(site, _ALWAYS, reason)


def user_translator(translator):
    """The translator of the first traced frame outside graphmend's runtime, from
    ``translator`` outwards (the user's statement that called into the runtime)."""
    while translator is not None:
        if not is_runtime_file(translator.f_code.co_filename):
            return translator
        translator = getattr(translator, "parent", None)
    return None


def no_later_op_failed_while_tracing(site: tuple[str, int]) -> str | None:
    """An op TorchDynamo cannot run on fake tensors (an in-place write to a leaf that
    requires grad, a shape mismatch) fails the whole traced region while tracing, before
    any of it runs. The original statement was a graph break: the code before it ran
    (compiled), and the op after it was traced only when reached, in a frame of its own.
    A claim made in a trace that failed so is refused when TorchDynamo traces the frame
    again (``_restart_trace_without_claims``)."""
    return _refused_for_good_as(site, _FAILED_OP_REASON)


_FAILED_OP_REASON = "an op after it fails while TorchDynamo traces it"


def frame_was_not_given_up_while_tracing(site: tuple[str, int]) -> str | None:
    """TorchDynamo gives up on a frame whose trace fails as a whole (an exception the
    code raises escapes the frame while traced, a construct it cannot resume after) and
    runs that frame eagerly from then on. The original statement was a graph break: the
    code before it compiled, and only the resume function after it was given up, which
    later calls reach from every path through the frame (an op that fails on a later call ran eagerly and raised its own error, where
    the mended frame, its capture refused only then, traced the op afresh and raised
    TorchDynamo's). A claim made in a trace given up so is refused when TorchDynamo
    traces the frame again (``_restart_given_up_frame_without_claims``)."""
    return _refused_for_good_as(site, _GIVEN_UP_REASON)


_GIVEN_UP_REASON = "TorchDynamo gave up on the frame after it"


def _refused_for_good_as(site: tuple[str, int], reason_start: str) -> str | None:
    """The reason ``site`` was refused for good, where it begins with ``reason_start``."""
    if _ALWAYS in _refused.get(site, ()):
        reason = trace_time_declines.get(site, "")
        if reason.startswith(reason_start):
            return reason
    return None


# Checks of the whole trace, made just before TorchDynamo compiles its graph.


def computed_nodes(output):
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


def joined_graph_records_no_autograd(output) -> str | None:
    """A selection (Where), a merged branch or a capture (Capture) joins no graph that
    records autograd: autograd differentiates the untaken arm of a ``torch.where`` too
    (zero gradients where the original gave none, and zero times an infinite derivative
    is NaN), and Capture's writes of rows are not proved to differentiate as the
    original's indexing did. Under ``torch.no_grad`` nothing is recorded. Output and
    lowered guards are judged by ``backend_differentiates_as_written`` and
    ``gradient_sums_keep_their_order`` instead."""
    for node in computed_nodes(output):
        if records_autograd(node):
            return failed(
                "G303",
                "the joined graph records autograd, which would differentiate a selection's "
                "untaken arm or a capture's writes unlike the original"
            )
    return None


# Claims that may join graphs that record autograd: they put no value of their own in
# the graph's differentiable computation (an ``.item()`` kept for a check only feeds it).
_JOINS_UNDER_GRAD = frozenset({OUTPUT, GUARD, ITEM})


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
    if _backend_is(output, ("eager", "aot_eager"), "runs_the_graph_as_written"):
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
    if _backend_is(output, ("eager",), "runs_the_graph_as_written"):
        return []
    joined = [claim for claim in claims.values() if claim.kind in _JOINS_UNDER_GRAD]
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
_CALL_BEGAN_ATTRIBUTE = "_graphmend_call_began"
_CALL_ENDED_ATTRIBUTE = "_graphmend_call_ended"


def _original_boundaries(claim) -> set[int] | None:
    """The autograd sequence numbers where the original's graphs met around the claimed
    statement: at it and, for each inlined call it is in, where the call began and
    where it returned. None where one is not known."""
    boundaries = {claim.autograd_sequence}
    for translator in claim.inlined_calls:
        began = getattr(translator, _CALL_BEGAN_ATTRIBUTE, None)
        ended = getattr(translator, _CALL_ENDED_ATTRIBUTE, None)
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
    if _backend_is(output, ("eager",), "runs_the_graph_as_written"):
        return []
    joined = [claim for claim in claims.values() if claim.kind in _JOINS_UNDER_GRAD]
    results = next((node for node in reversed(graph_module.graph.nodes) if node.op == "output"), None)
    if not joined or results is None:
        return []
    made_at = []
    for node in results.all_input_nodes:
        if node.op == "placeholder":
            continue
        for value in _tensors(node.meta.get("example_value")):
            sequences = [
                tensor.grad_fn._sequence_nr()
                for tensor in (value, value._base if value._is_view() else None)
                if isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None
            ]
            if sequences:
                made_at.append((min(sequences), node.name))
    last_recorded = max(
        (tensor.grad_fn._sequence_nr() for node in computed_nodes(output)
         for tensor in _tensors(node.meta.get("example_value")) if tensor.grad_fn is not None),
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


def _note_inlined_call_spans(inline_call_):
    """Wrap ``InliningInstructionTranslator.inline_call_``: note on the translator the
    autograd sequence numbers where the inlined call began and returned, which are
    where the original's graphs met when it broke the graph inside the call
    (``gradient_sums_keep_their_order``)."""

    def wrapped(self, *args, **kwargs):
        setattr(self, _CALL_BEGAN_ATTRIBUTE, _autograd_sequence_now())
        try:
            return inline_call_(self, *args, **kwargs)
        finally:
            setattr(self, _CALL_ENDED_ATTRIBUTE, _autograd_sequence_now())

    wrapped._graphmend_wrapped = True
    return wrapped


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
        for value in _tensors(node.meta.get("example_value")):
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
            for value in _tensors(node.meta.get("example_value"))
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


def _tensors(value):
    values = value if isinstance(value, (tuple, list)) else [value]
    return [v for v in values if isinstance(v, torch.Tensor) and v.requires_grad]


def _autograd_refusals(output, claims) -> list[tuple[tuple[str, int], str]]:
    """(site, reason) for each claim refused because the joined graph records autograd."""
    recorded = joined_graph_records_no_autograd(output)
    if recorded is None:
        return []
    selections = [claim.site for claim in claims.values() if claim.kind not in _JOINS_UNDER_GRAD]
    if selections:
        return [(site, recorded) for site in selections]
    backend = backend_differentiates_as_written(output)
    if backend is not None:
        return [(site, backend) for site in claims]
    return gradient_sums_keep_their_order(output, claims)


_SEEDED = torch.Tag.nondeterministic_seeded
_DROPOUTS = ("dropout", "dropout_", "feature_dropout", "feature_dropout_", "alpha_dropout",
             "alpha_dropout_", "feature_alpha_dropout", "feature_alpha_dropout_")


def _aten_packet_is_seeded(name: str) -> bool:
    packet = getattr(torch.ops.aten, name, None)
    if not ops.is_op_overload_packet(packet):
        return False
    return any(_SEEDED in getattr(packet, overload).tags for overload in packet.overloads())


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
            not isinstance(modules.get(name), torch.fx.GraphModule) or _draws_any(modules[name], output)
            for name in branches
        )
    if node.op == "call_module":
        module = getattr(output, "nn_modules", {}).get(target) if output is not None else None
        if isinstance(module, (*ops.dropout_module_types(), torch.nn.RReLU)):
            return bool(module.training) and getattr(module, "p", 1) != 0
        return module is None
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


def _draw_positions(output) -> list[int]:
    return [
        position
        for position, node in enumerate(output.graph.nodes)
        if node.op in ("call_function", "call_method", "call_module") and draws_random_numbers(node, output)
    ]


def random_draws_stay_on_their_side(output, claims) -> str | None:
    """Where the original broke, its graphs drew random numbers apart: inductor takes
    seeds from the generator once per graph that draws, so draws on both sides of a
    claimed statement, joined in one graph, take one set of seeds where the original
    took two. Where TorchDynamo ran the rest of the original frame eagerly, every draw
    ran eagerly, with eager's generator. Draws on one
    side only, in a frame the original compiled, are compiled the same either way."""
    positions = _draw_positions(output)
    if not positions:
        return None
    if any(claim.rest_ran_eagerly for claim in claims.values()):
        return failed("G307", "the original ran these random draws eagerly; compiled they would not advance the generator as eagerly")
    for claim in claims.values():
        if positions[0] < claim.position <= positions[-1]:
            return failed("G307", "random draws on both sides of it would share one graph's seeds, where the original's graphs drew apart")
    return None


def _draws_any(graph_module, output=None) -> bool:
    return any(
        node.op in ("call_function", "call_method") and draws_random_numbers(node, output)
        for node in graph_module.graph.nodes
    )


def _return_dead_draws(graph_module, output) -> int | None:
    """Make the graph also return each random draw nothing it returns depends on, so
    that no backend drops it: ``fallback_random`` keeps such draws in an inference
    graph, but AOTAutograd's partition of a joint graph (autograd recorded) dropped
    some of them anyway (one of two, where eager draws both
    and the original's graph, compiled without it, neither). Returns how many outputs
    the graph had (the caller drops the rest), or None when it had no dead draw."""
    graph = graph_module.graph
    output_node = next((node for node in reversed(graph.nodes) if node.op == "output"), None)
    if output_node is None or not isinstance(output_node.args[0], (tuple, list)):
        return None
    live: set = set()
    pending = list(output_node.all_input_nodes)
    while pending:
        node = pending.pop()
        if node not in live:
            live.add(node)
            pending.extend(node.all_input_nodes)
    dead = [
        node for node in graph.nodes
        if node.op in ("call_function", "call_method") and node not in live and draws_random_numbers(node, output)
        and isinstance(node.meta.get("example_value"), torch.Tensor)
    ]
    if not dead:
        return None
    returned = output_node.args[0]
    output_node.args = (type(returned)(list(returned) + dead),) + tuple(output_node.args[1:])
    graph_module.recompile()
    return len(returned)


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


def _compiled_from_mended_code(output) -> bool:
    """Whether the trace holds code graphmend rewrote: the frame's or an inlined function's."""
    traced = getattr(getattr(output, "tracing_context", None), "traced_code", None)
    root = getattr(output, "root_tx", None)
    codes = list(traced or ()) + ([root.f_code] if root is not None else [])
    return any(is_rewritten_code(code) for code in codes)


def rest_of_eager_frame_compiles_whole(graph_break: bool) -> str | None:
    """Where the rest of the original frame ran eagerly (TorchDynamo gave up on a frame
    whose break was in a loop; or, after a guard's ``raise`` was traced once, on the
    frame resumed at the guard), the mended frame may compile, but only as one graph to
    its end: the graph's own checks then cover all of it. A break left after the claim
    would compile the rest in resumed frames that no check sees, whose ops fail while
    traced where the original raised the user's error eagerly, or whose random draws
    are dropped."""
    if graph_break:
        return failed(
            "G310",
            "the rest of the original frame ran eagerly, and the mended frame still breaks "
            "later, so the rest would run compiled"
        )
    return None


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
    if _backend_is(output, ("eager",), "runs_the_graph_as_written"):
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
    if _backend_is(output, ("eager",), "runs_the_graph_as_written"):
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
        if not _known_contiguous(value):
            return failed(
                "G308",
                "a batch norm in the joined graph reads a tensor that is not contiguous, whose "
                "output strides torch traces unlike the kernel's; the backend plans views by them"
            )
    return None


def _known_contiguous(value) -> bool:
    if not isinstance(value, torch.Tensor):
        return False
    try:
        from torch.fx.experimental.symbolic_shapes import guard_or_false

        return bool(guard_or_false(value.is_contiguous()))
    except Exception:  # noqa: BLE001 - a layout torch cannot tell: not known contiguous
        return False


def backend_keeps_graph_order(output) -> bool:
    return _backend_is(output, ("eager", "aot_eager"), "keeps_graph_order")


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
    if getattr(_conversion, "inference_mode", None):
        return None
    for node in inputs_written_in_place(output):
        try:
            given = node.meta["grapharg"].example
        except Exception:  # noqa: BLE001 - no real tensor recorded: not known to be ordinary
            given = None
        if not isinstance(given, torch.Tensor) or given.is_inference():
            return failed("G305", f"the joined graph writes its input `{node.name}` in place, an inference tensor, which fails")
    return None


def joined_graph_writes_through_no_out_keyword(output) -> str | None:
    """torch 2.13's functionalization gives a tensor written through ``out=`` the layout of
    the op's result, not its own: read later in the same graph (``torch.tanh(y,
    out=x)`` with ``y`` laid out transposed, then ``torch.tanh(x)``), it computes a
    result laid out as ``y`` where eager code keeps ``x``'s (seen where Capture joined the read to the write's graph; the original read ``x`` as an
    input of the next graph). No claim survives in a graph writing through ``out=``,
    unless the backend runs the graph as written (TorchDynamo's ``eager``, or one
    marked ``runs_the_graph_as_written``)."""
    if _backend_is(output, ("eager",), "runs_the_graph_as_written"):
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
    refused = _refused_capture_reason(claims)
    if refused is not None:
        return refused
    made = set()
    for node in output.graph.nodes:
        overload = getattr(node.target, "_overloadpacket", None) if node.op == "call_function" else None
        if getattr(overload, "_qualified_op_name", None) in _SIZE_MAKING_OPERATORS:
            made |= _unbacked_symbols(node.meta.get("example_value"))
    if not made:
        return None
    frame = translator
    while frame is not None:
        for variable in getattr(frame, "stack", ()):
            if _unbacked_symbols(getattr(variable, "sym_num", None)) & made:
                return failed("C301", "the graph breaks on the size the capture made, so the capture removes no break")
        frame = getattr(frame, "parent", None)
    return None


def _refused_capture_reason(claims) -> str | None:
    """Why the first capture claim of a trace was refused since it was made, if one was."""
    for claim in claims.values():
        if claim.kind == CAPTURE and refused_reason(claim.site):
            return refused_reason(claim.site)
    return None


_SIZE_NEEDED_REASON = failed("C301", "tracing needed the size the capture made on the host, so the capture removes no break")
# On the trace's ShapeEnv: the user site of the capture that made each unbacked size
# (unbacked symbols are numbered per ShapeEnv, so ``u0`` of another trace is another size).
_CAPTURE_SITES_ATTRIBUTE = "_graphmend_capture_sites"


def record_size_made(shape_env, size, site: tuple[str, int]) -> None:
    """``graphmend::nonzero``'s fake made ``size`` (a SymInt of ``shape_env``) for the
    capture at ``site``."""
    made = getattr(shape_env, _CAPTURE_SITES_ATTRIBUTE, None)
    if made is None:
        made = {}
        setattr(shape_env, _CAPTURE_SITES_ATTRIBUTE, made)
    for symbol in _unbacked_symbols(size):
        made[symbol] = site


def _refuse_captures_whose_sizes_are_needed(make_error):
    """Wrap ``ShapeEnv._make_data_dependent_error``, which makes the error tracing raises
    when it must know an unbacked size on the host (a branch on it, ``int()`` of it),
    wherever that is: in the frame or in a function TorchDynamo inlines, whose break
    TorchDynamo then takes at the call (and traces the frame again). A capture whose
    size is needed so removes no break: the original broke where it was made, and the
    mended graph breaks later, often more than once (a branch in a helper split the
    frame at the helper's call: 3 graphs and 2 breaks where the original has 2 and 1).
    The capture that made the size is refused for good, and the trace that holds it is
    refused before it compiles (``captured_sizes_decide_no_break``)."""

    def wrapped(self, expr, unhinted_expr, *args, **kwargs):
        try:
            made = getattr(self, _CAPTURE_SITES_ATTRIBUTE, {})
            for symbol in getattr(unhinted_expr, "free_symbols", ()):
                site = made.get(symbol)
                if site is not None:
                    refuse_for_good(site, _SIZE_NEEDED_REASON)
        except Exception:  # noqa: BLE001 - recording must never change the error torch raises
            pass
        return make_error(self, expr, unhinted_expr, *args, **kwargs)

    wrapped._graphmend_wrapped = True
    return wrapped


def _unbacked_symbols(value) -> set:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    if isinstance(value, torch.Tensor):
        value = tuple(value.shape)
    if value is None or isinstance(value, (bool, int, float)):
        return set()
    try:
        return set(free_unbacked_symbols(value))
    except Exception:  # noqa: BLE001 - a value free_unbacked_symbols does not walk holds none we made
        return set()


def _backend_is(output, names: tuple[str, ...], marker: str | None) -> bool:
    """Whether the backend compiling ``output`` is one of TorchDynamo's registered
    ``names`` (through the wrappers torch puts around it), one marked with ``marker`` =
    True, or one that runs its graph as given (``returns_its_graph_unchanged``: as
    TorchDynamo's ``eager`` does, which each of ``names`` covers)."""
    try:
        from graphmend.torch_adapter.tracing import backends_named

        known = backends_named(names)
    except Exception:  # noqa: BLE001 - another torch: assume it is none of them
        return False
    backend = getattr(output, "compiler_fn", None)
    through_torch_only = True
    for _ in range(8):
        if backend is None:
            return False
        if any(backend is k for k in known) or (marker is not None and getattr(backend, marker, False) is True):
            return True
        if through_torch_only and returns_its_graph_unchanged(backend):
            return True
        through_torch_only = through_torch_only and _is_torchs_own(backend)
        backend = (
            getattr(backend, "_torchdynamo_orig_backend", None)
            or getattr(backend, "compiler_fn", None)
            or getattr(backend, "__wrapped__", None)
        )
    return False


def _is_torchs_own(thing) -> bool:
    module = getattr(thing, "__module__", None) or getattr(type(thing), "__module__", "")
    return isinstance(module, str) and (module == "torch" or module.startswith("torch."))


_LOADS_OF_A_LOCAL = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW"})
# Instructions that name a local: the graph module's only ones must be plain loads.
_LOCAL_OPERATIONS = ("FAST", "DEREF", "CLOSURE")


def returns_its_graph_unchanged(backend) -> bool:
    """Whether ``backend`` (a function, a bound method or an object whose class defines
    ``__call__`` in Python) does nothing with the graph module it is given but return it
    or its ``forward``: then the graph runs as TorchDynamo's ``eager`` runs it, its ops
    in order on the real tensors. The counting backend of a test (``count += 1; return
    gm.forward``) is one; output in its graphs kept its break as if it could reorder
    them (issue 46). Read from the bytecode: any other use of the graph module (passing
    it on, reading its graph, a closure or ``locals()`` that could) is not this."""
    import dis
    import inspect
    import types

    skipped = 0
    function = backend
    if inspect.ismethod(backend):
        function, skipped = backend.__func__, 1
    elif not isinstance(backend, types.FunctionType):
        function, skipped = getattr(type(backend), "__call__", None), 1  # noqa: B004 - reads the method, not whether it is callable
    code = getattr(function, "__code__", None) if isinstance(function, types.FunctionType) else None
    if code is None or code.co_argcount <= skipped or "locals" in code.co_names:
        return False
    graph_module = code.co_varnames[skipped]
    if graph_module in code.co_cellvars:
        return False
    instructions = list(dis.get_instructions(code))
    returned = False
    for index, instruction in enumerate(instructions):
        argument = instruction.argval
        names_it = argument == graph_module or (isinstance(argument, tuple) and graph_module in argument)
        if not names_it or not any(part in instruction.opname for part in _LOCAL_OPERATIONS):
            continue
        following = [later.opname for later in instructions[index + 1:index + 3]]
        attribute = instructions[index + 1].argval if index + 1 < len(instructions) else None
        if instruction.opname not in _LOADS_OF_A_LOCAL:
            return False
        if following[:1] == ["RETURN_VALUE"] or (
            following == ["LOAD_ATTR", "RETURN_VALUE"] and attribute == "forward"
        ):
            returned = True
            continue
        return False
    return returned


def items_stay_with_lowered_checks(output, claims, refused_sites) -> list[tuple[str, int]]:
    """A ``.item()`` stays a tensor only for a check lowered into the same graph. Where
    no check that reads it is lowered in this trace (or each such check's claim is
    refused), the original breaks at the ``.item()``, and its resume function starts with
    a Python number: under ``dynamic=True`` a symbolic one, which the check's f-string
    message cannot format while traced, so TorchDynamo gave up that resume function and
    ran the rest of the frame eagerly; the mended frame, holding a tensor, broke only at
    the check's eager call and traced the rest, and an op there that fails made
    TorchDynamo's error where the original raised the op's own. Returns the sites of such ITEM claims."""
    lowered = getattr(output, _CHECKS_LOWERED_ATTRIBUTE, {})
    unsupported = []
    for claim in claims.values():
        if claim.kind != ITEM or claim.site in refused_sites:
            continue
        guards = [lowered.get((claim.site[0], line)) for line in claim.checks]
        if not any(guard is not None and guard not in refused_sites for guard in guards):
            unsupported.append(claim.site)
    return unsupported


_ITEM_WITHOUT_CHECK_REASON = failed("T301", "no check that reads it stays lowered in the same graph")


def _refusals(output, translator, claims, graph_break: bool):
    """(site, kind, reason) for each claim the whole trace refuses; an ITEM claim goes
    with the checks it was kept for."""
    refusals = _claim_refusals(output, translator, claims, graph_break)
    refused_sites = {site for site, kind, _reason in refusals if kind == _ALWAYS or torch.is_grad_enabled()}
    return refusals + [
        (site, _ALWAYS, _ITEM_WITHOUT_CHECK_REASON)
        for site in items_stay_with_lowered_checks(output, claims, refused_sites)
    ]


def _claim_refusals(output, translator, claims, graph_break: bool):
    stopped = merged_branches_were_traced(output, claims)
    if stopped:
        reason = failed("C302", "TorchDynamo broke the graph at the branch's `torch.cond`")
        return [(site, _ALWAYS, reason) for site in stopped]
    decided = captured_sizes_decide_no_break(output, translator, claims, graph_break)
    if decided is not None:
        return [(claim.site, _ALWAYS, decided) for claim in claims.values() if claim.kind == CAPTURE]
    with_guard = outputs_share_no_graph_with_a_lowered_guard(output, claims) or (
        outputs_share_no_graph_with_an_input_written_in_place(output, claims)
    )
    if with_guard is not None:
        return [(claim.site, _ALWAYS, with_guard) for claim in claims.values() if claim.kind == OUTPUT]
    aliased = ordered_operators_share_no_graph_with_aliased_inputs_written_in_place(output, claims)
    if aliased is not None:
        return [(claim.site, _ALWAYS, aliased) for claim in claims.values() if claim.kind in (OUTPUT, GUARD)]
    for_all = (
        random_draws_stay_on_their_side(output, claims)
        or batch_norms_read_contiguous_tensors(output)
        or joined_graph_enters_no_inference_mode(output)
        or joined_graph_writes_no_inference_tensor_in_place(output)
        or joined_graph_writes_through_no_out_keyword(output)
    )
    if for_all is not None:
        return [(site, _ALWAYS, for_all) for site in claims]
    under_grad = _autograd_refusals(output, claims)
    if under_grad:
        return [(site, _UNDER_GRAD, reason) for site, reason in under_grad]
    rest_compiled = rest_of_eager_frame_compiles_whole(graph_break)
    if rest_compiled is None:
        return []
    return [(claim.site, _ALWAYS, rest_compiled) for claim in claims.values() if claim.rest_ran_eagerly]


def _refuse(site, kind: str, reason: str) -> None:
    kinds = _refused.setdefault(site, set())
    if kind in kinds:
        # Refused for this reason before, yet claimed again (the grad mode read at the
        # claim was not the one the graph ran under): refuse for good, so that no frame
        # is traced again and again.
        kind = _ALWAYS
    kinds.add(kind)
    trace_time_declines[site] = reason


def _restart(output, reason: str):
    from graphmend.torch_adapter.errors import restart_the_trace

    _forget_break_counts_of_the_attempt()
    for listener in list(abandoned_trace_listeners):
        try:
            listener(output)
        except Exception:  # noqa: BLE001 - a listener must never change what TorchDynamo does
            pass
    return restart_the_trace(f"graphmend: {reason}")


# TorchDynamo's graph-break counters (``counters["graph_break"]``, the count tests and
# users read) as they were when the compilation of the frame being traced began: keyed
# by its frame and compile ids, the same over the attempts TorchDynamo restarts.
_break_counts_at_compile_start: dict = {}


def _compile_key():
    return torch_adapter.current_compile_key()


def _note_break_counts_at_compile_start() -> None:
    try:
        counters = torch_adapter.graph_break_counters()
        key = _compile_key()
        if key is not None and key not in _break_counts_at_compile_start:
            _break_counts_at_compile_start.clear()
            _break_counts_at_compile_start[key] = dict(counters["graph_break"])
    except Exception:  # noqa: BLE001 - counting must never change what TorchDynamo does
        return


def _forget_break_counts_of_the_attempt() -> None:
    """A trace graphmend abandons compiled nothing, and the next attempt counts the
    breaks that remain: TorchDynamo counts a break in the attempt that finds it, so the
    breaks the abandoned attempts found would count twice, and a mended program whose
    claim was refused would count more breaks than the original (a count kept a tensor
    for a check, refused where an unchanged ``print`` broke the graph first: 3 where the
    original counts 2). The counters go back to what they were when the frame's
    compilation began, as ``graphmend.dynamo_records`` forgets its records."""
    try:
        counters = torch_adapter.graph_break_counters()
        saved = _break_counts_at_compile_start.get(_compile_key())
        if saved is not None:
            counts = counters["graph_break"]
            counts.clear()
            counts.update(saved)
    except Exception:  # noqa: BLE001 - counting must never change what TorchDynamo does
        return


def _check_before_compiling(compile_subgraph):
    """Wrap ``OutputGraph.compile_subgraph``: before TorchDynamo compiles a graph that
    holds claims, refuse those the whole trace shows must keep their breaks, and trace
    the frame again without them."""

    def wrapped(self, tx, reason, *args, **kwargs):
        claims = getattr(self, _CLAIMS_ATTRIBUTE, None)
        if claims:
            refusals = _refusals(self, tx, claims, bool(getattr(reason, "graph_break", True)))
            if refusals:
                for site, kind, why in refusals:
                    _refuse(site, kind, why)
                raise _restart(self, refusals[0][2])
        return compile_subgraph(self, tx, reason, *args, **kwargs)

    wrapped._graphmend_wrapped = True
    return wrapped


def _check_the_compiled_graph(call_user_compiler):
    """Wrap ``OutputGraph.call_user_compiler``: a graph that holds claims is refused
    before it compiles where a tensor made before a claim leaves it
    (``earlier_tensors_stay_in_the_graph``), and after, where the backend fails on it
    (``backend_compiles_the_joined_graph``); either way the frame is traced again with
    the claims' breaks."""

    def wrapped(self, graph_module, *args, **kwargs):
        claims = getattr(self, _CLAIMS_ATTRIBUTE, None)
        refusals = earlier_tensors_stay_in_the_graph(self, graph_module, claims) if claims else []
        if refusals:
            for site, why in refusals:
                _refuse(site, _UNDER_GRAD, why)
            raise _restart(self, refusals[0][1])
        if claims:
            try:
                return _compile_joined_graph(self, graph_module, call_user_compiler, *args, **kwargs)
            except Exception as raised:
                refusal = backend_compiles_the_joined_graph(self, raised)
                if refusal is None:
                    raise
                kind = _UNDER_GRAD if any(records_autograd(node) for node in computed_nodes(self)) else _ALWAYS
                for site in claims:
                    _refuse(site, kind, refusal)
                raise _restart(self, refusal) from None
        return _compile_joined_graph(self, graph_module, call_user_compiler, *args, **kwargs)

    wrapped._graphmend_wrapped = True
    return wrapped


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


def _compile_joined_graph(self, graph_module, call_user_compiler, *args, **kwargs):
    """Compile the graph. One compiled from mended code that draws random numbers
    compiles with inductor's ``fallback_random``, so its draws are eager's, from eager's
    generator, and an unused one is kept (not dropped).

    Which draws end up unused depends on which locals TorchDynamo takes as live at a
    break, and its liveness analysis takes every local read after a jump as live: the
    rewritten code's jumps are not the original's, so a draw the original's graph
    returned may be unused in the mended one, or the other way round. And inductor's
    own random numbers depend on the graph they are compiled in (its seeds and offsets),
    which joining graphs changes. With ``fallback_random`` the mended program draws the
    numbers the original draws eagerly."""
    if _compiled_from_mended_code(self) and _draws_any(graph_module, self):
        outputs = _return_dead_draws(graph_module, self)
        with ops.inductor_draws_as_eager():
            compiled = call_user_compiler(self, graph_module, *args, **kwargs)
        if outputs is None:
            return compiled

        def without_the_dead_draws(*call_args, **call_kwargs):
            return compiled(*call_args, **call_kwargs)[:outputs]

        return without_the_dead_draws
    return call_user_compiler(self, graph_module, *args, **kwargs)


def _restart_trace_without_claims(wrap_failure):
    """Wrap TorchDynamo's conversion of a failed fake-tensor op into TorchRuntimeError:
    when statements lost their breaks earlier in the same trace, trace the frame again
    with them kept (a frame whose conversion fails has not run)."""

    def wrapped(graph_break):
        translator = current_translator()
        claims = getattr(translator.output, _CLAIMS_ATTRIBUTE, None) if translator is not None else None
        if claims:
            reason = failed("G301", f"{_FAILED_OP_REASON}; the original break keeps that apart")
            for site in claims:
                _refuse(site, _ALWAYS, reason)
            raise _restart(translator.output, reason)
        return wrap_failure(graph_break)

    wrapped._graphmend_wrapped = True
    return wrapped


def _restart_on_observed_failed_op(exception_handler):
    """Wrap ``InstructionTranslatorBase.exception_handler`` of a torch that turns a failed
    fake-tensor op into an exception of the traced program (``FakeTensorObservedException``),
    where ``_restart_trace_without_claims`` never sees it: the same refusal and restart,
    whether or not the traced code would catch the exception (the original traced that op
    in a frame of its own, after its break)."""
    from graphmend.torch_adapter.errors import FakeTensorObservedException

    def wrapped(self, raised_exception, *args, **kwargs):
        if isinstance(raised_exception, FakeTensorObservedException):
            claims = getattr(self.output, _CLAIMS_ATTRIBUTE, None)
            if claims:
                reason = f"{_FAILED_OP_REASON}; the original break keeps that apart"
                for site in claims:
                    _refuse(site, _ALWAYS, reason)
                raise _restart(self.output, reason) from None
        return exception_handler(self, raised_exception, *args, **kwargs)

    wrapped._graphmend_wrapped = True
    return wrapped


def _restart_given_up_frame_without_claims(run):
    """Wrap the root ``InstructionTranslator.run``: when TorchDynamo is about to give
    up a frame whose trace holds claims (``frame_was_not_given_up_while_tracing``),
    refuse them and trace the frame again (nothing of it has run), so that its graphs
    and resume functions are the original's. Under ``fullgraph=True`` the failure is
    the user's error, as in the original.

    Also: when TorchDynamo restarts the trace to break the graph at a call whose inlined
    function it could not trace, and a capture of this trace was refused meanwhile
    (``_refuse_captures_whose_sizes_are_needed``), the restart is made one that forgets
    the path taken: the trace again keeps the capture's original call, where
    TorchDynamo's own restart expects the path of this trace (``SpeculationLogDivergence``,
    and the frame would run eagerly)."""
    from graphmend.torch_adapter.errors import SpeculationRestartAnalysis, Unsupported, UserError

    def wrapped(self, *args, **kwargs):
        _note_break_counts_at_compile_start()
        try:
            return run(self, *args, **kwargs)
        except SpeculationRestartAnalysis:
            refused = _refused_capture_reason(getattr(self.output, _CLAIMS_ATTRIBUTE, None) or {})
            if refused is None:
                raise
            raise _restart(self.output, refused) from None
        except (Unsupported, UserError) as error:
            claims = getattr(self.output, _CLAIMS_ATTRIBUTE, None)
            if not claims or getattr(self, "error_on_graph_break", True) or getattr(self, "one_graph", True):
                raise
            reason = failed(
                "G302",
                f"{_GIVEN_UP_REASON} ({error_headline(error)}); the original break keeps the part before it compiled",
            )
            for site in claims:
                _refuse(site, _ALWAYS, reason)
            raise _restart(self.output, reason) from error

    wrapped._graphmend_wrapped = True
    return wrapped


def _note_the_calls_inference_mode(disable_inference_mode):
    """Wrap the context manager TorchDynamo enters to turn ``torch.inference_mode()`` off
    while it converts a frame: note first whether the call was made inside it
    (``joined_graph_writes_no_inference_tensor_in_place``)."""
    import contextlib

    @contextlib.contextmanager
    def wrapped(*args, **kwargs):
        _conversion.inference_mode = torch.is_inference_mode_enabled()
        with disable_inference_mode(*args, **kwargs):
            yield

    wrapped._graphmend_wrapped = True
    return wrapped
