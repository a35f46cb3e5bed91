"""The hooks ``graphmend.torch_adapter`` installs into TorchDynamo for the checks of the
whole trace (``PATCHES``, each wrapper named by its factory here).

- ``_check_before_compiling`` (``OutputGraph.compile_subgraph``): before TorchDynamo
  compiles a graph that holds claims, the conditions of
  ``graphmend.runtime.whole_trace_conditions`` refuse those that must keep their breaks,
  and TorchDynamo's writes of a performed choice's stand-in are dropped
  (``graphmend.runtime.performed_choice``);
- ``_check_the_compiled_graph`` (``OutputGraph.call_user_compiler``): the same for a
  tensor made before a claim that leaves the graph, and for a backend that fails on the
  joined graph; a graph compiled from mended code that draws random numbers compiles
  with inductor's ``fallback_random``: its numbers are eager's;
- ``_restart_trace_without_claims``, ``_restart_on_observed_failed_op``,
  ``_restart_given_up_frame_without_claims``: an op that fails while traced, or a frame
  TorchDynamo gives up, refuses the trace's claims;
- ``_refuse_captures_whose_sizes_are_needed`` (``ShapeEnv._make_data_dependent_error``):
  a capture whose size tracing needs on the host is refused;
- ``_note_the_calls_inference_mode``, ``_note_inlined_call_spans``: facts the conditions
  read later.

When a claim is refused, TorchDynamo is made to trace the frame again
(``UnspecializeRestartAnalysis``, which TorchDynamo raises itself for other reasons;
``graphmend.runtime.trace_restarts``) and the claims it names are refused in that trace
and later ones, so the original breaks come back exactly where the original had them. A
refused trace has not run: nothing is done twice.

The hooks wrap private TorchDynamo functions; where a torch lacks them the later checks
cannot be made, and every claim is refused (``claims.trace_checks_unavailable``).
"""

from __future__ import annotations

import contextlib
import threading
import warnings

import torch

from graphmend.core.legality import failed
from graphmend.runtime.claims import (
    ALWAYS,
    CALL_BEGAN_ATTRIBUTE,
    CALL_ENDED_ATTRIBUTE,
    CAPTURE_SITES_ATTRIBUTE,
    CLAIMS_ATTRIBUTE,
    UNDER_GRAD,
    VALUES,
    autograd_sequence_now,
    error_headline,
    refuse,
    refuse_for_good,
    refuse_in_frame,
)
from graphmend.runtime.graph_inspection import (
    computed_nodes,
    draws_random_numbers,
    graph_draws_random_numbers,
    is_rewritten_code,
    records_autograd,
)
from graphmend.runtime.performed_choice import keep_stand_ins_out_of_replay
from graphmend.runtime.store import store
from graphmend.runtime.trace_decisions import current_translator
from graphmend.runtime.trace_restarts import note_break_counts_at_compile_start, restart
from graphmend.runtime.whole_trace_conditions import (
    FAILED_OP_REASON,
    GIVEN_UP_REASON,
    backend_compiles_the_joined_graph,
    earlier_tensors_stay_in_the_graph,
    refused_capture_reason,
    whole_trace_refusals,
)
from graphmend.torch_adapter import ops
from graphmend.torch_adapter.tracing import tensor_numbers_allowed


def _check_before_compiling(compile_subgraph):
    """Wrap ``OutputGraph.compile_subgraph``: before TorchDynamo compiles a graph that
    holds claims, refuse those the whole trace shows must keep their breaks, and trace
    the frame again without them."""

    def wrapped(self, tx, reason, *args, **kwargs):
        claims = getattr(self, CLAIMS_ATTRIBUTE, None)
        if claims:
            refusals = whole_trace_refusals(self, tx, claims, bool(getattr(reason, "graph_break", True)))
            if refusals:
                for site, kind, why in refusals:
                    refuse(site, kind, why)
                raise restart(self, refusals[0][2])
        stand_in_refusals = keep_stand_ins_out_of_replay(self, bool(getattr(reason, "graph_break", True)))
        if stand_in_refusals:
            for site, why in stand_in_refusals:
                refuse(site, ALWAYS, why)
            raise restart(self, stand_in_refusals[0][1])
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
        claims = getattr(self, CLAIMS_ATTRIBUTE, None)
        refusals = earlier_tensors_stay_in_the_graph(self, graph_module, claims) if claims else []
        if refusals:
            for site, why in refusals:
                refuse(site, UNDER_GRAD, why)
            raise restart(self, refusals[0][1])
        if claims:
            held = _WarningsHeld()
            numbers = (
                tensor_numbers_allowed(self) if any(claim.kind == VALUES for claim in claims.values())
                else contextlib.nullcontext()
            )
            try:
                with held, numbers:
                    compiled = _compile_joined_graph(self, graph_module, call_user_compiler, *args, **kwargs)
            except Exception as raised:
                refusal = backend_compiles_the_joined_graph(self, raised)
                if refusal is None:
                    held.show()
                    raise
                kind = UNDER_GRAD if any(records_autograd(node) for node in computed_nodes(self)) else ALWAYS
                for site in claims:
                    refuse(site, kind, refusal)
                # The failed compile's warnings (AOTAutograd's anomaly-mode report of the
                # error it then raised) belong to a graph the program never runs.
                raise restart(self, refusal) from None
            held.show()
            return compiled
        return _compile_joined_graph(self, graph_module, call_user_compiler, *args, **kwargs)

    wrapped._graphmend_wrapped = True
    return wrapped


class _WarningsHeld:
    """Holds the warnings this thread shows while a joined graph compiles, to show them
    after, as shown, if it compiles (``show``), or drop them if the claim is refused for
    it: the frame is traced again and compiles the original's graphs, whose own compile
    warns as it would have. The warnings filters are left alone (the compile may set
    some): only the last step, showing a warning that passed them, is held
    (``warnings._showwarnmsg_impl``, which ``catch_warnings`` inside the compile swaps for
    its own and restores, so that what torch records for itself stays torch's). A
    program that replaced ``warnings.showwarning`` is shown its warnings as before."""

    def __init__(self) -> None:
        self.held: list = []
        self._thread = threading.get_ident()
        self._show = None

    def __enter__(self):
        self._show = warnings._showwarnmsg_impl

        def hold(message) -> None:
            if threading.get_ident() == self._thread:
                self.held.append(message)
            else:
                self._show(message)

        warnings._showwarnmsg_impl = hold
        return self

    def __exit__(self, *exc) -> None:
        warnings._showwarnmsg_impl = self._show

    def show(self) -> None:
        held, self.held = self.held, []
        for message in held:
            warnings._showwarnmsg_impl(message)


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
    if _compiled_from_mended_code(self) and graph_draws_random_numbers(graph_module, self):
        outputs = _return_dead_draws(graph_module, self)
        with ops.inductor_draws_as_eager():
            compiled = call_user_compiler(self, graph_module, *args, **kwargs)
        if outputs is None:
            return compiled

        def without_the_dead_draws(*call_args, **call_kwargs):
            return compiled(*call_args, **call_kwargs)[:outputs]

        return without_the_dead_draws
    return call_user_compiler(self, graph_module, *args, **kwargs)


def _compiled_from_mended_code(output) -> bool:
    """Whether the trace holds code graphmend rewrote: the frame's or an inlined function's."""
    traced = getattr(getattr(output, "tracing_context", None), "traced_code", None)
    root = getattr(output, "root_tx", None)
    codes = list(traced or ()) + ([root.f_code] if root is not None else [])
    return any(is_rewritten_code(code) for code in codes)


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


def _restart_trace_without_claims(wrap_failure):
    """Wrap TorchDynamo's conversion of a failed fake-tensor op into TorchRuntimeError:
    when statements lost their breaks earlier in the same trace, trace the frame again
    with them kept (a frame whose conversion fails has not run)."""

    def wrapped(graph_break):
        translator = current_translator()
        claims = getattr(translator.output, CLAIMS_ATTRIBUTE, None) if translator is not None else None
        if claims:
            reason = failed("G301", f"{FAILED_OP_REASON}; the original break keeps that apart")
            for site in claims:
                refuse(site, ALWAYS, reason)
            raise restart(translator.output, reason)
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
            claims = getattr(self.output, CLAIMS_ATTRIBUTE, None)
            if claims:
                reason = f"{FAILED_OP_REASON}; the original break keeps that apart"
                for site in claims:
                    refuse(site, ALWAYS, reason)
                raise restart(self.output, reason) from None
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
        note_break_counts_at_compile_start()
        try:
            return run(self, *args, **kwargs)
        except SpeculationRestartAnalysis:
            claims = getattr(self.output, CLAIMS_ATTRIBUTE, None) or {}
            refused = refused_capture_reason(claims) or _refuse_claims_of_a_frame_run_eagerly(self, claims)
            if refused is None:
                raise
            raise restart(self.output, refused) from None
        except (Unsupported, UserError) as error:
            claims = getattr(self.output, CLAIMS_ATTRIBUTE, None)
            if not claims or getattr(self, "error_on_graph_break", True) or getattr(self, "one_graph", True):
                raise
            reason = failed(
                "G302",
                f"{GIVEN_UP_REASON} ({error_headline(error)}); the original break keeps the part before it compiled",
            )
            for site in claims:
                refuse_in_frame(site, self.f_code, reason)
            raise restart(self.output, reason) from error

    wrapped._graphmend_wrapped = True
    return wrapped


_BREAKS_LATER_REASON = failed(
    "G310",
    "the rest of the original frame ran eagerly, and the mended frame breaks later: TorchDynamo "
    "would compile it up to an earlier point, a graph the original did not have"
)


def _refuse_claims_of_a_frame_run_eagerly(translator, claims) -> str | None:
    """TorchDynamo restarts the trace to compile it up to a break (or, where it cannot
    resume there, inside a ``try``, up to an earlier point, and to run the rest eagerly).
    A claim whose original break made TorchDynamo give up the whole frame (a break in a
    loop) then pays nothing: the rest of the frame still runs eagerly, or in resumed
    frames, and the part compiled before is a graph the original did not have (fuzz
    seed 852031: a print joined in a one-pass loop, and a break inside
    ``warnings.catch_warnings()`` after it made the frame compile up to the loop). Such
    claims are refused in this frame, which then runs as the original's. A break that
    TorchDynamo compiles up to and resumes after is decided at the compile (G310)."""
    eager = [claim.site for claim in claims.values() if claim.rest_ran_eagerly]
    for site in eager:
        refuse_in_frame(site, translator.f_code, _BREAKS_LATER_REASON)
    return _BREAKS_LATER_REASON if eager else None


_SIZE_NEEDED_REASON = failed("C301", "tracing needed the size the capture made on the host, so the capture removes no break")


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
            made = getattr(self, CAPTURE_SITES_ATTRIBUTE, {})
            for symbol in getattr(unhinted_expr, "free_symbols", ()):
                site = made.get(symbol)
                if site is not None:
                    refuse_for_good(site, _SIZE_NEEDED_REASON)
        except Exception:  # noqa: BLE001 - recording must never change the error torch raises
            pass
        return make_error(self, expr, unhinted_expr, *args, **kwargs)

    wrapped._graphmend_wrapped = True
    return wrapped


def _note_the_calls_inference_mode(disable_inference_mode):
    """Wrap the context manager TorchDynamo enters to turn ``torch.inference_mode()`` off
    while it converts a frame: note first whether the call was made inside it
    (``joined_graph_writes_no_inference_tensor_in_place``)."""
    import contextlib

    @contextlib.contextmanager
    def wrapped(*args, **kwargs):
        store.conversion.inference_mode = torch.is_inference_mode_enabled()
        with disable_inference_mode(*args, **kwargs):
            yield

    wrapped._graphmend_wrapped = True
    return wrapped


def _note_inlined_call_spans(inline_call_):
    """Wrap ``InliningInstructionTranslator.inline_call_``: note on the translator the
    autograd sequence numbers where the inlined call began and returned, which are
    where the original's graphs met when it broke the graph inside the call
    (``gradient_sums_keep_their_order``)."""

    def wrapped(self, *args, **kwargs):
        setattr(self, CALL_BEGAN_ATTRIBUTE, autograd_sequence_now())
        try:
            return inline_call_(self, *args, **kwargs)
        finally:
            setattr(self, CALL_ENDED_ATTRIBUTE, autograd_sequence_now())

    wrapped._graphmend_wrapped = True
    return wrapped
