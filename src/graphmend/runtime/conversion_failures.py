"""A rewritten frame TorchDynamo fails to convert runs eagerly, as its original would.

TorchDynamo sometimes fails on the bytecode of rewritten code where it does not on the
original: building the resume function after a graph break, it raised
``AssertionError: exception table entry start instruction has no offset`` for a
branch break followed by loops and ``try`` blocks holding rewritten statements. Without graphmend the program compiled; with it, the call raised
TorchDynamo's internal error. And explaining why a rewritten resume function's cached
guards failed before compiling it again, TorchDynamo evaluated a guard's source against
the new call and raised IndexError, where the original's frames, broken
elsewhere, compiled again without it.

TorchDynamo converts a frame before any of it runs (a resume function, before the rest
of its frame runs), so running the frame eagerly instead is exact: the rewritten code's
eager path is the original code. That is what TorchDynamo itself does for every frame
under ``torch._dynamo.config.suppress_errors``; here only for frames whose own code
graphmend rewrote (``is_rewritten_code``), only for internal errors (not a graph break, not an error of the user's own
code that tracing surfaces) and for a data-dependent size graphmend made that tracing
then had to know (``dynamic_shapes``: the original broke the graph where the size was
made; the frame is first traced again with those captures refused, so that its graphs
are the original's), and never under ``fullgraph=True``, where the user asked for
errors. Each such frame is listed in ``store.frames_run_eagerly``.

One such failure is TorchDynamo's own bookkeeping, and is repaired instead, for
rewritten frames only (``_offsets_of_replaced_extended_args``): rewritten code is longer,
so more of its jumps need an ``EXTENDED_ARG`` prefix, and the resume function after a
break then failed to assemble (the whole frame ran eagerly,
where the original compiled traced it, and the program's own ``is_compiling()`` tests
answered otherwise).
"""

from __future__ import annotations

import logging
import sys

from graphmend.runtime.graph_inspection import is_rewritten_code
from graphmend.runtime.store import store

log = logging.getLogger(__name__)


def _is_rewritten(frame) -> bool:
    return is_rewritten_code(getattr(frame, "f_code", None))


# TorchDynamo explains why a cached graph's guards failed before it compiles again, and
# evaluates the sources of its guards against the new call to do so; a guard on an item
# of a list the new call's list no longer has raised IndexError there (`items[0]` of a
# resume function, called again with an empty list).
_RECOMPILATION_EXPLAINERS = frozenset({"get_and_maybe_log_recompilation_reasons", "get_guard_fail_reason"})


def _failed_explaining_a_recompilation(error: BaseException) -> bool:
    traceback = error.__traceback__
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if code.co_name in _RECOMPILATION_EXPLAINERS and code.co_filename.endswith("guards.py"):
            return True
        traceback = traceback.tb_next
    return False


def _run_eagerly_on_internal_error(convert):
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    from graphmend.runtime import claims, dynamic_shapes
    from graphmend.torch_adapter.errors import (
        ConvertFrameReturn,
        InternalTorchDynamoError,
        UncapturedHigherOrderOpError,
    )
    from graphmend.torch_adapter.tracing import nonrecursively_disabled_caller

    def again_without_failed_claims(convert, failure, claimed, why, made_by_claims=lambda sizes_before: True):
        # Convert the frame; when it fails with ``failure`` and claims of ``claimed()``
        # were made in that conversion (nothing of the frame has run), refuse them for
        # good and convert the frame again with those statements as written.
        def converting(self, frame, *args, **kwargs):
            while True:
                claimed_before = len(claimed())
                sizes_before = dynamic_shapes.sizes_made()
                try:
                    return convert(self, frame, *args, **kwargs)
                except failure as error:
                    failed = claimed()[claimed_before:]
                    if not failed or not made_by_claims(sizes_before):
                        raise
                    reason = claims.error_headline(error)
                    for site in failed:
                        claims.refuse_for_good(site, f"{why}: {reason}")
                    del claimed()[claimed_before:]

        return converting

    # A branch graphmend let into the graph as ``torch.cond`` that cond cannot capture
    # (an effect in it, a module updating its state) fails the conversion, where the
    # original broke the graph at the branch.
    convert_without_failed_merges = again_without_failed_claims(
        convert, UncapturedHigherOrderOpError, dynamic_shapes.merges_claimed,
        "torch.cond could not capture the branch",
    )
    # A size a captured call made that tracing then needs on the host (``.tolist()`` of
    # the positions) fails the conversion, where the original broke the graph at the
    # call: traced again, the frame's graphs are the original's (running the whole frame
    # eagerly compiled its callees alone instead, and AOTAutograd gave an input written
    # in place a zero gradient where eager gives none).
    convert_without_sizes_needed_on_the_host = again_without_failed_claims(
        convert_without_failed_merges, GuardOnDataDependentSymNode, dynamic_shapes.captures_claimed,
        "tracing needed a size it made on the host",
        made_by_claims=lambda sizes_before: dynamic_shapes.sizes_made() != sizes_before,
    )

    def wrapped(self, frame, *args, **kwargs):
        if nonrecursively_disabled_caller(sys._getframe(1)):
            return ConvertFrameReturn(
                apply_to_code=False, skip_reason="tracing is non-recursively disabled for this frame"
            )
        sizes_before = dynamic_shapes.sizes_made()
        converting_before = getattr(store.converting, "rewritten", False)
        store.converting.rewritten = _is_rewritten(frame)
        try:
            return convert_without_sizes_needed_on_the_host(self, frame, *args, **kwargs)
        except Exception as error:  # only the internal errors below are handled
            internal = isinstance(error, (AssertionError, InternalTorchDynamoError, GuardOnDataDependentSymNode))
            if not (internal or _failed_explaining_a_recompilation(error)):
                raise
            if isinstance(error, GuardOnDataDependentSymNode) and dynamic_shapes.sizes_made() == sizes_before:
                raise  # not a size graphmend made: the original would fail the same way
            inner = getattr(self, "_inner_convert", None)
            box = getattr(inner, "_box", None)
            if not _is_rewritten(frame) or getattr(box, "error_on_graph_break", True) is not False:
                raise
            code = frame.f_code
            store.frames_run_eagerly[(code.co_filename, code.co_firstlineno, code.co_name)] = f"{type(error).__name__}: {error}"
            log.debug("graphmend: TorchDynamo failed on rewritten %s; it runs eagerly", code.co_name, exc_info=True)
            return ConvertFrameReturn(skip_reason="graphmend: TorchDynamo failed on the rewritten frame")
        finally:
            store.converting.rewritten = converting_before

    wrapped._graphmend_wrapped = True
    return wrapped


# Whether this thread is converting a frame whose code graphmend rewrote.


def _offsets_of_replaced_extended_args(compute_exception_table, update_offsets):
    """Wrap TorchDynamo's ``compute_exception_table``. Assembling a code object, it gives
    instructions their offsets, then replaces each ``EXTENDED_ARG`` prefix by a new one;
    when the count of prefixes is unchanged it does not give offsets again, and an
    exception table entry starting at a prefixed jump finds the new prefix without one
    (``AssertionError: exception table entry start instruction has no offset``). The
    replacement changes no size, so giving every instruction its offset again is what
    the assembled bytecode holds. Only when converting a rewritten frame, and only when
    the table could not be computed: other frames fail as they would without graphmend."""

    def wrapped(instructions):
        try:
            return compute_exception_table(instructions)
        except AssertionError:
            if not getattr(store.converting, "rewritten", False):
                raise
            update_offsets(instructions)
            return compute_exception_table(instructions)

    wrapped._graphmend_wrapped = True
    return wrapped
