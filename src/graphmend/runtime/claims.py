"""Which user statements lose their graph break in the trace TorchDynamo is making (a
*claim* on the break), and which sites an earlier trace refused.

Defer, Where, Trap and Capture decide while tracing, at the statement, whether the
statement may stay in the graph, and record a ``Claim`` on the trace's output graph
(``claim_break_at_user_site``, ``record_claim``). No claim is made where an earlier
trace refused the site (``refused_reason``), where the whole-trace checks cannot be
made (``trace_checks_unavailable``) or inside ``torch.inference_mode()``
(``not_inside_inference_mode``: the original's graph after the break runs inside the
real mode, and its outputs are inference tensors).

Facts that come later in the same trace may refuse a claim
(``graphmend.runtime.whole_trace_conditions``, run by the hooks of
``graphmend.runtime.trace_hooks``); a refused site keeps its break in later traces,
for good or only while grad mode is on (``refuse``), and its reason is kept in
``store.trace_time_declines`` (``graphmend.runtime.store``), which ``graphmend
explain`` reads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from graphmend.core.legality import failed
from graphmend.runtime.graph_inspection import nodes_in_trace_order, unbacked_symbols
from graphmend.runtime.store import store
from graphmend.runtime.trace_decisions import user_site, user_translator
from graphmend.runtime.trace_restarts import restart
from graphmend.torch_adapter import ops
from graphmend.torch_adapter.tracing import frame_code_of

# The claims of a trace, on its output graph (``claims_in_trace``).
CLAIMS_ATTRIBUTE = "_graphmend_claims"
# A site refused for good, or only while grad mode is on (``store.refused``).
ALWAYS = "always"
UNDER_GRAD = "grad"
# What stands in the graph for a claimed statement.
GUARD, OUTPUT, SELECTION, MERGE, CAPTURE = "guard", "output", "selection", "merge", "capture"
# A ``.item()`` kept as a tensor for the checks that read it (``rules/trap/items.py``).
ITEM = "item"
# A comparison of a uniform draw its range decided (``rules/where/ranges.py``).
DECIDED = "decided"
# A tensor's integers read into a list in the graph (``runtime/captured_values.py``).
VALUES = "values"
# (file, original line of a check call) -> the site of its GUARD claim in this trace.
CHECKS_LOWERED_ATTRIBUTE = "_graphmend_checks_lowered"
# The merged branches (Capture's ``torch.cond``) whose ``merge_rows`` this trace entered.
MERGES_ENTERED_ATTRIBUTE = "_graphmend_merges_entered"
# Site of a SELECTION claim -> whether every ``torch.where`` it made in this trace put
# nothing differentiable in the graph (``note_selection``).
SELECTIONS_MADE_ATTRIBUTE = "_graphmend_selections_made"
# On the trace's ShapeEnv: the user site of the capture that made each unbacked size
# (unbacked symbols are numbered per ShapeEnv, so ``u0`` of another trace is another size).
CAPTURE_SITES_ATTRIBUTE = "_graphmend_capture_sites"
# On an inlined call's translator: the autograd sequence numbers where the call began and
# where it returned (``trace_hooks._note_inlined_call_spans``).
CALL_BEGAN_ATTRIBUTE = "_graphmend_call_began"
CALL_ENDED_ATTRIBUTE = "_graphmend_call_ended"
# On the trace's output graph: the program's ops and the module globals whose value the
# trace guarded on, when the latest claim was made (``no_global_value_guarded_before_the_first_op``).
LATEST_CLAIM_ATTRIBUTE = "_graphmend_latest_claim"
# On the trace's output graph: the claims a later statement's condition undid.
UNDONE_ATTRIBUTE = "_graphmend_undone"
# On the trace's output graph: site of a DECIDED claim -> the fixed tensors the decision
# read (``runtime/fixed_values.py``).
FIXED_READS_ATTRIBUTE = "_graphmend_fixed_reads"


@dataclass(frozen=True)
class Claim:
    """A user statement that lost its break in this trace."""

    site: tuple[str, int]
    # How many nodes TorchDynamo's graph had when the statement was traced, its inputs
    # aside (``graph_inspection.nodes_in_trace_order``).
    position: int
    # Why the rest of the original frame ran (or may later run) eagerly, where it did:
    # the mended frame must then compile to its end in one graph.
    rest_ran_eagerly: str | None
    # GUARD (Trap), OUTPUT (Defer), SELECTION (Where), CAPTURE (Capture's positions),
    # MERGE (Capture's branch on whether positions are empty), VALUES (Capture's
    # ``.tolist()``), ITEM (Trap's ``.item()``)
    # or DECIDED (Where's comparison of a draw its range decides).
    kind: str = SELECTION
    # For an ITEM: the original lines of the check calls that read the value.
    checks: tuple[int, ...] = ()
    # The autograd sequence number when the statement was traced (for a selection, once
    # its test was evaluated: ``note_test_evaluated``): autograd nodes made for the code
    # before it have smaller ones (``whole_trace_conditions.gradient_sums_keep_their_order``).
    autograd_sequence: int = 0
    # The translators of the inlined calls the statement is in, innermost first: the
    # original broke the graph at each call and after it returned as well.
    inlined_calls: tuple = ()
    # How many of the program's ops the graph held when the statement was traced, and
    # the module globals whose value or length the trace guarded on by then.
    ops_before: int = 0
    globals_guarded_before: frozenset = frozenset()


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
    claims = getattr(output, CLAIMS_ATTRIBUTE, None)
    if claims is None:
        claims = {}
        setattr(output, CLAIMS_ATTRIBUTE, claims)
    return claims


def refused_reason(site: tuple[str, int], code=None) -> str | None:
    """Why an earlier trace refused this site's claim, where that still holds (in the
    frame of ``code``, where given)."""
    kinds = store.refused.get(site)
    if (kinds and (ALWAYS in kinds or (UNDER_GRAD in kinds and torch.is_grad_enabled()))) or _refused_in_frame(
        site, code
    ):
        return store.trace_time_declines.get(site, "an earlier trace kept its break")
    return None


def _refused_in_frame(site: tuple[str, int], code) -> bool:
    return code is not None and code in store.refused_in_frames.get(site, ())


def refused_between(filename: str, first: int, last: int, code=None) -> str | None:
    """Why an earlier trace refused a claim at some line ``first..last`` of ``filename``,
    where that still holds (in the frame of ``code``, where given)."""
    for site in [*store.refused, *store.refused_in_frames]:
        if site[0] == filename and first <= site[1] <= last:
            reason = refused_reason(site, code)
            if reason is not None:
                return f"line {site[1]}: {reason}"
    return None


def trace_checks_unavailable() -> str | None:
    """The checks made later in the trace need hooks into TorchDynamo; a torch
    without the functions they wrap gets no rewrite that needs them."""
    missing = [name for name, installed in store.hooks_installed.items() if not installed]
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
    """Record the claim on the break of the statement at ``site`` in the trace of ``translator``."""
    from graphmend.torch_adapter.guards import guarded_global_names

    position = len(nodes_in_trace_order(translator.output))
    claims_in_trace(translator)[site] = Claim(
        site, position, rest_ran_eagerly, kind, tuple(checks), autograd_sequence_now(),
        tuple(_inlined_calls(translator)), program_op_count(translator.output),
        frozenset(guarded_global_names(translator.output)),
    )
    setattr(translator.output, LATEST_CLAIM_ATTRIBUTE, (*_ops_and_guarded_globals(translator.output), site))


def latest_claim_site(output) -> tuple[str, int] | None:
    """The site of the claim this trace recorded last, or None."""
    latest = getattr(output, LATEST_CLAIM_ATTRIBUTE, None)
    return latest[2] if latest is not None else None


def fixed_reads_in_trace(output) -> dict:
    """Site -> [tensor], for the decisions from fixed tensors in this trace."""
    noted = getattr(output, FIXED_READS_ATTRIBUTE, None)
    if noted is None:
        noted = {}
        setattr(output, FIXED_READS_ATTRIBUTE, noted)
    return noted


def undone_in_trace(output) -> dict:
    """Site -> reason, for the claims of this trace a later statement's condition undid
    (``no_global_value_guarded_before_the_first_op``)."""
    undone = getattr(output, UNDONE_ATTRIBUTE, None)
    if undone is None:
        undone = {}
        setattr(output, UNDONE_ATTRIBUTE, undone)
    return undone


def _ops_and_guarded_globals(output) -> tuple[int, frozenset]:
    """How many of the program's ops the trace's graph holds, and the values it guards on
    that a program may change between calls: module globals, and the numbers and strings
    reached from the frame's locals, and their containers' lengths (an instance whose
    method is called for others too, a function's arguments, in a resume function the
    numbers its frame computed before the break)."""
    from graphmend.torch_adapter.guards import (
        guarded_global_values,
        guarded_input_values,
    )

    guarded = (
        frozenset(guarded_global_values(output))
        | frozenset(guarded_input_values(output))
    )
    return program_op_count(output), guarded


def program_op_count(output) -> int:
    """How many of the program's ops (not graphmend's runtime's) the trace's graph holds."""
    from graphmend.runtime.resumable_states import made_by_the_runtime

    return sum(1 for node in output.graph.nodes if node.op in _OPS and not made_by_the_runtime(node))


def _inlined_calls(translator):
    root = getattr(translator.output, "root_tx", None)
    while translator is not None and translator is not root:
        yield translator
        translator = getattr(translator, "parent", None)


def autograd_sequence_now() -> int:
    """Autograd's sequence number now: nodes made for code traced before have smaller ones."""
    try:
        return ops.autograd_sequence_number()
    except Exception:  # noqa: BLE001 - another torch: no boundary known, so every join under grad is refused
        return -1


def claim_item_for_checks(translator, check_lines: tuple[int, ...]) -> bool:
    """Whether the ``.item()`` being traced (in the first frame outside graphmend's
    runtime) may stay a tensor for the checks at ``check_lines`` (original lines) that
    read it; if so, the claim is recorded, and it stands only where one of those checks
    is lowered in the same trace (``whole_trace_conditions.items_stay_with_lowered_checks``)."""
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
    lowered = getattr(output, CHECKS_LOWERED_ATTRIBUTE, None)
    if lowered is None:
        lowered = {}
        setattr(output, CHECKS_LOWERED_ATTRIBUTE, lowered)
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
    reason = (
        no_global_value_guarded_before_the_first_op(translator)
        or no_other_path_reaches_it_before_the_first_op(translator)
        or no_earlier_compile_of_the_frame_before_the_first_op(translator)
        if kind == OUTPUT
        else None
    )
    if reason is not None:
        store.trace_time_declines[site] = reason
        ops_before, _guarded, latest = getattr(translator.output, LATEST_CLAIM_ATTRIBUTE, (0, frozenset(), None))
        if latest is not None and ops_before:
            # The graph-less part follows a statement that lost its break, which joined it
            # to the ops before: that claim depended on this break being removed too. It is
            # undone (when the trace is complete, ``whole_trace_conditions``, which traces
            # the frame again), so that the graph-less part is a frame of its own again, as
            # in the original, and its guard recompiles no graph.
            undone_in_trace(translator.output)[latest] = reason
        return False
    record_claim(translator, site, original_break_keeps_frame_compiled(translator), kind)
    return True


_OPS = ("call_function", "call_method", "call_module")


def no_global_value_guarded_before_the_first_op(translator) -> str | None:
    """Where nothing is computed in the frame before the output call, or since the
    latest statement that lost its break (each a break of the original), the original
    broke before any op of its own frame: that part compiled no graph, only its guards,
    and the code after the break compiled once, in a resume function of its own.
    Removing the break saves no graph there, only the break; and where that graph-less
    part guards on the value of a module global (a counter the program bumps, the
    length of a list it appends to: ``print("seen", len(SEEN))``; in a resume function, a
    number the frame computed before its break, ``n = t.sum().item()``; a number or string
    attribute of the frame's instance, ``print("expert", self.index)``, whose method runs
    for every instance with a value of its own; a number argument, or how many items a
    list argument holds, ``print("items", len(items), box.n)``), the value changing makes TorchDynamo
    compile the frame again on each call, which for the original is a frame with no
    graph and for the mended one its whole graph, every time (fuzz seed 710001: 2 graphs
    became 6; 740080: experts printing their index, one graph per expert where the
    original's resume function was shared; 851579: 2 graphs became 5). So the output keeps its break there, and that part
    compiles as the original's does; the statements after it are decided in the resume
    function. Ops of graphmend's own runtime (``resumable_states.made_by_the_runtime``)
    are not the program's. Output only: the other claims are made before their test is
    computed, which the original computed before its break too."""
    ops, guarded = _ops_and_guarded_globals(translator.output)
    ops_before, guarded_before, _site = getattr(translator.output, LATEST_CLAIM_ATTRIBUTE, (0, frozenset(), None))
    if ops > ops_before:
        return None
    new = sorted(guarded - guarded_before)
    if not new:
        return None
    return failed(
        "G203",
        f"nothing is computed before it in its part of the frame, and that part guards on {new[0]}: the "
        "original compiled no graph there, and the mended frame would compile its whole graph again each "
        "time that value changes"
    )


def no_other_path_reaches_it_before_the_first_op(translator) -> str | None:
    """Where the frame is one of TorchDynamo's resume functions, nothing is computed in it
    before the output call, and the function's code reaches the call on a path that does
    not pass where the frame resumes (the other arm of a branch that kept its break, or
    the way past an arm that broke): the original broke at the call before any op on
    each path, and the code after it was one resume function the paths shared, compiled
    once. Joined, that code is compiled again into the graph of each path that reaches
    it (fuzz seed 740054: an alias chosen by ``if y.mean() < 0`` and printed after the
    ``if``; 750095: a warning after an ``if`` whose arm wrote to ``sys.stderr``; one
    graph more each). The call keeps its break there; an output claimed before it on
    the same path then stands alone in its graph, and keeps its break too (G315)."""
    output = translator.output
    if translator is not getattr(output, "root_tx", None):
        return None
    if program_op_count(output):
        return None
    if not paths_meet_at(translator.f_code, translator.lineno):
        return None
    return failed(
        "G204",
        "another path of the function reaches it than the one its frame resumes on, and nothing is "
        "computed before it: the original shared the code after it between the paths, compiled once"
    )


def no_earlier_compile_of_the_frame_before_the_first_op(translator) -> str | None:
    """Where nothing is computed in the frame before the output call, or since the
    latest statement that lost its break, and TorchDynamo compiles the frame again (it
    holds a compiled version of the frame's code already, whose guards failed): the
    original broke there before any op, so compiling its frame again made no graph for
    that part, and the code after the break was the resume function an earlier
    compilation had made, run again as compiled. Joined, that code is compiled once more
    into the new graph (fuzz seed 740103: a resume function compiled again for positions
    that were now none, with the print of their list first in it; one graph more, one
    break fewer). The call keeps its break there, as the original's, where TorchDynamo
    made a resume function at its line already; a first compilation of the frame, or one
    where no earlier compilation broke at that line, has none to share, and joins."""
    from graphmend.torch_adapter.tracing import compiled_versions, earlier_resume_argument_orders

    output = translator.output
    root = getattr(output, "root_tx", None)
    if root is None:
        return None
    ops_before = getattr(output, LATEST_CLAIM_ATTRIBUTE, (0, frozenset(), None))[0]
    if program_op_count(output) > ops_before:
        return None
    try:
        versions = compiled_versions(root.f_code)
    except (ImportError, AttributeError):  # another torch: no versions known, keep the break
        versions = 1
    if not versions:
        return None
    try:
        shared = earlier_resume_argument_orders(translator.f_code, translator.lineno)
    except (ImportError, AttributeError):  # another torch: no resume function known, keep the break
        shared = [()]
    if not shared:
        # No resume function at this line yet: the earlier compilation joined it too, and
        # keeping the break would compile the code after it into a new one all the same.
        return None
    return failed(
        "G205",
        "nothing is computed before it in its part of the frame, and TorchDynamo compiles the frame again: "
        "the original's frame broke there with no graph and ran the code after it as compiled before"
    )


_ENDS_FLOW = frozenset({
    "RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD", "JUMP_BACKWARD",
    "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE", "JUMP",
})


def paths_meet_at(code, line: int) -> bool:
    """Whether ``code``, a resume function, resumes at a place of the function it resumes
    past which the function reaches ``line`` on another path too (the other arm of a
    branch, or the way past an arm that broke): the original's resume function at that
    line was then shared by both paths. The paths are read in the function resumed
    (``tracing.resumed_at``), whose lines TorchDynamo's copy does not keep."""
    import dis

    from graphmend.torch_adapter.tracing import resume_function_line, resumed_at

    place = resumed_at(code)
    if place is None:
        return False
    resumed, entry_offset = place
    instructions = list(dis.get_instructions(resumed))
    index_of = {instruction.offset: index for index, instruction in enumerate(instructions)}
    entry = index_of.get(entry_offset)
    if entry is None:
        return False
    lines = [instruction.positions.lineno if instruction.positions else None for instruction in instructions]
    goals = {index for index, at in enumerate(lines) if at == line}
    if not goals or lines[entry] is None:
        return False

    def successors(index: int) -> list[int]:
        instruction = instructions[index]
        following = []
        if instruction.opcode in dis.hasjrel or instruction.opcode in dis.hasjabs:
            target = index_of.get(instruction.argval)
            if target is not None:
                following.append(target)
        if instruction.opname not in _ENDS_FLOW and index + 1 < len(instructions):
            following.append(index + 1)
        return following

    branch_line = resume_function_line(code)
    branches = {
        index for index, instruction in enumerate(instructions)
        if "JUMP" in instruction.opname and "_IF_" in instruction.opname
        and lines[index] == branch_line and entry in successors(index)
    }
    if branches:
        # Resumed at one way out of a branch: any other way to the line is another path.
        def ways_on(index: int) -> list[int]:
            return [after for after in successors(index) if not (index in branches and after == entry)]

        seen: set[int] = set()
    else:
        # Resumed after a call that broke: the statement it is in is passed whole (a
        # statement graphmend rewrote keeps its line, and its other arms, the call in the
        # graph and the eager arm, are the same statement of the original).
        if lines[entry] == line:
            return False
        ways_on = successors
        seen = {index for index, at in enumerate(lines) if at == lines[entry]}
    pending = [0]
    while pending:
        index = pending.pop()
        if index in goals:
            return True
        if index in seen:
            continue
        seen.add(index)
        pending.extend(ways_on(index))
    return False


def _claimable_user_site(translator):
    """(translator, site) of the user's statement being traced (the first frame outside
    graphmend's runtime, from ``translator`` outwards), or None where it may not lose
    its break in this trace (an earlier trace refused it, the whole-trace checks are
    unavailable, inside ``torch.inference_mode()``)."""
    translator = user_translator(translator)
    if translator is None or refused_at_user_site(translator):
        return None
    site = (translator.f_code.co_filename, translator.lineno)
    unavailable = trace_checks_unavailable() or not_inside_inference_mode(translator)
    if unavailable is not None:
        store.trace_time_declines[site] = unavailable
        return None
    return translator, site


def refused_at_user_site(translator) -> bool:
    """Whether an earlier trace refused the claim of the user's statement being traced,
    in this frame or for good."""
    translator = user_translator(translator)
    if translator is None:
        return False
    site = (translator.f_code.co_filename, translator.lineno)
    return refused_reason(site, frame_code_of(translator)) is not None


def decline_at_user_site(translator, reason: str) -> None:
    """Record why the user's statement keeps its break in this trace (``explain``)."""
    translator = user_translator(translator)
    if translator is not None:
        store.trace_time_declines[(translator.f_code.co_filename, translator.lineno)] = reason


def refuse_claim_at_user_site(translator, reason: str, kind: str = ALWAYS) -> None:
    """The rewritten statement being traced cannot keep its promise in this trace (a
    selection that would branch in Python, inside graphmend's runtime): where the
    statement holds a claim, refuse it (for good, or only while grad mode is on) and
    trace the frame again, so that the original statement runs with its one break.
    Without a claim, only say why."""
    user = user_translator(translator)
    if user is None:
        return
    site = (user.f_code.co_filename, user.lineno)
    if site not in claims_in_trace(user):
        decline_at_user_site(user, reason)
        return
    refuse(site, kind, reason)
    raise restart(user.output, reason)


def mark_merge_entered(translator) -> None:
    """The trace reached ``merge_rows`` of the user's statement being traced."""
    site = user_site(translator)
    if site is not None:
        output = translator.output
        entered = getattr(output, MERGES_ENTERED_ATTRIBUTE, None)
        if entered is None:
            entered = set()
            setattr(output, MERGES_ENTERED_ATTRIBUTE, entered)
        entered.add(site)


def note_test_evaluated(translator) -> None:
    """The test of the branch of a SELECTION claim (or a part of it) was evaluated. The
    original's graph ended after its test: autograd nodes the test made (``h.sum()`` of
    a tensor that requires grad, whose result only a comparison reads, so no backward
    reaches them) were made before the original's break. The claim's boundary moves
    here, for the gradient conditions and for ``note_selection``."""
    user = user_translator(translator)
    if user is None:
        return
    site = (user.f_code.co_filename, user.lineno)
    claims = claims_in_trace(user)
    claim = claims.get(site)
    if claim is not None and claim.kind == SELECTION and claim.autograd_sequence >= 0:
        claims[site] = replace(claim, autograd_sequence=autograd_sequence_now())


def note_selection(translator) -> None:
    """Where's ``select`` of the user's statement being traced took ``torch.where``
    (between values that require no grad: ``select`` takes no other). Note, for the
    statement's SELECTION claim, whether the statement recorded nothing for autograd
    since its test was evaluated (``note_test_evaluated``; both arms and the selection:
    no autograd node was made since), so that it may join a graph that records autograd elsewhere
    (``whole_trace_conditions.joins_under_grad``). A statement that selects several
    names is noted once per name, and keeps the answer only if every one holds."""
    user = user_translator(translator)
    if user is None:
        return
    site = (user.f_code.co_filename, user.lineno)
    claim = claims_in_trace(user).get(site)
    if claim is None or claim.kind != SELECTION:
        return
    recorded_nothing = claim.autograd_sequence >= 0 and autograd_sequence_now() == claim.autograd_sequence
    output = user.output
    made = getattr(output, SELECTIONS_MADE_ATTRIBUTE, None)
    if made is None:
        made = {}
        setattr(output, SELECTIONS_MADE_ATTRIBUTE, made)
    made[site] = made.get(site, True) and recorded_nothing


def selected_without_grad(output, site: tuple[str, int]) -> bool:
    """Whether the SELECTION claim at ``site`` made its selections in this trace with
    ``torch.where`` only, recording nothing for autograd (``note_selection``)."""
    return getattr(output, SELECTIONS_MADE_ATTRIBUTE, {}).get(site, False)


def record_size_made(shape_env, size, site: tuple[str, int]) -> None:
    """``graphmend::nonzero``'s fake made ``size`` (a SymInt of ``shape_env``) for the
    capture at ``site``."""
    made = getattr(shape_env, CAPTURE_SITES_ATTRIBUTE, None)
    if made is None:
        made = {}
        setattr(shape_env, CAPTURE_SITES_ATTRIBUTE, made)
    for symbol in unbacked_symbols(size):
        made[symbol] = site


def error_headline(error: BaseException) -> str:
    """The first line of ``error``'s message, or its type's name (for a refusal's reason)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def refuse_for_good(site: tuple[str, int], reason: str) -> None:
    """The statement at ``site`` keeps its break in every later trace."""
    refuse(site, ALWAYS, reason)


def refuse(site, kind: str, reason: str) -> None:
    """The statement at ``site`` keeps its break in later traces: for good (``ALWAYS``),
    or while grad mode is on (``UNDER_GRAD``); ``reason`` is what ``explain`` shows."""
    kinds = store.refused.setdefault(site, set())
    if kind in kinds:
        # Refused for this reason before, yet claimed again (the grad mode read at the
        # claim was not the one the graph ran under): refuse for good, so that no frame
        # is traced again and again.
        kind = ALWAYS
    kinds.add(kind)
    store.trace_time_declines[site] = reason


def refuse_in_frame(site, code, reason: str) -> None:
    """The statement at ``site`` keeps its break in later traces of the frame of
    ``code``; ``reason`` is what ``explain`` shows."""
    store.refused_in_frames.setdefault(site, set()).add(code)
    store.trace_time_declines[site] = reason


def refused_for_good_as(site: tuple[str, int], reason_start: str, code=None) -> str | None:
    """The reason ``site`` was refused for good (or in the frame of ``code``, where
    given), where it begins with ``reason_start``."""
    if ALWAYS in store.refused.get(site, ()) or _refused_in_frame(site, code):
        reason = store.trace_time_declines.get(site, "")
        if reason.startswith(reason_start):
            return reason
    return None
