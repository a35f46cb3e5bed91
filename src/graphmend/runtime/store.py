"""What the runtime keeps for the whole process, in one place, and how to forget it.

Every table the runtime fills while programs run lives on ``store`` (one
``RuntimeStore``); no runtime module keeps a mutable table of its own. Some of it is
what the process *learned* about the programs it ran (which claims were refused and
why, which frames ran eagerly): ``reset()`` forgets that, so that a test, or a tool
that compiles many programs under one file name, starts from nothing. A refusal is
keyed by file and line, so a program compiled later from the same file name would
otherwise inherit the refusals of an earlier one.

The rest must outlive ``reset()``, and says why beside it: tables that graphs already
compiled read by number (an effect's key, a trap's site, a check's template), where
forgetting an entry would make such a graph fail when it runs; code objects kept by
identity (a compiled call's boundary, the frames that restore a user's exception),
which TorchDynamo and the frames already running hold; and what was installed into
TorchDynamo (which hooks, who listens to abandoned traces), which stays installed.

State that belongs to one trace or one conversion is thread-local, because TorchDynamo
converts frames in whatever thread calls them; each such object is reachable here and
is never reset, since a reset from another thread could not reach it anyway.
"""

from __future__ import annotations

import itertools
import threading
import weakref

from graphmend.runtime.trace_decisions import Numbering


class RuntimeStore:
    """The runtime's process-wide state (see the module's docstring)."""

    def __init__(self) -> None:
        # --- forgotten by ``reset()``: what the process learned ---------------------------

        # The latest reason a claim was refused while tracing, by (file, line): `graphmend
        # check` cannot report these statically, so ``graphmend explain``, tests and users
        # look here.
        self.trace_time_declines: dict[tuple[str, int], str] = {}
        # Sites refused for good (``claims.ALWAYS``) or only while grad mode is on
        # (``claims.UNDER_GRAD``).
        self.refused: dict[tuple[str, int], set[str]] = {}
        # Sites refused only in the frames whose code is listed (a frame TorchDynamo gave
        # up on: other frames that reach the statement are not given up for it).
        self.refused_in_frames: dict[tuple[str, int], set] = {}
        # (file, first line, function name) -> TorchDynamo's error, for each rewritten
        # frame run eagerly because TorchDynamo failed to convert it (``conversion_failures``).
        self.frames_run_eagerly: dict[tuple[str, int, str], str] = {}
        # TorchDynamo's graph-break counters as they were when the compilation of the frame
        # being traced began, keyed by its frame and compile ids (``trace_restarts``).
        self.break_counts_at_compile_start: dict = {}
        # (module class, its ``forward``) -> what reading the forward's source found
        # (``expert_calls``): a cache, which holds the class, so its key stays its own.
        self.forward_analyses: dict[object, tuple[str | None, frozenset[str]]] = {}
        # What the decisions from fixed tensors read (``fixed_values``, W218): each
        # module's fixed tensors' values, by attribute name; by (file, line) of a
        # decided statement and the code of the frame traced, each value with the
        # numbers of the traces that read it; the statements decided no more; by
        # the code of a frame traced, the statements it decided; and, by the number of a
        # trace, the static sizes of its graph inputs when it first decided.
        self.fixed_values_read: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.fixed_values_read_at: dict[tuple[str, int], dict] = {}
        self.fixed_values_varying_sites: set[tuple[str, int]] = set()
        self.fixed_values_sites_read_in: dict[object, set[tuple[str, int]]] = {}
        self.fixed_values_trace_sizes: dict[object, dict[str, tuple[int, ...]]] = {}

        # --- kept by ``reset()`` ---------------------------------------------------------

        # Which of TorchDynamo's functions ``graphmend.torch_adapter`` wrapped for the
        # whole-trace checks (``claims.trace_checks_unavailable``): installed, so kept.
        self.hooks_installed: dict[str, bool] = {
            "restart_on_failed_op": False,
            "restart_on_given_up_frame": False,
            "check_before_compiling": False,
            "check_the_compiled_graph": False,
            "refuse_captures_whose_sizes_are_needed": False,
            "note_the_calls_inference_mode": False,
            "note_inlined_call_spans": False,
        }
        # Called with TorchDynamo's output graph of a trace attempt that graphmend abandons
        # (``graphmend.dynamo_records`` registers one while it records): installed, so kept.
        self.abandoned_trace_listeners: list = []
        # The output effects found while tracing, by the key a compiled graph passes to
        # ``graphmend::emit_effect`` (``output_effects``): compiled graphs read them.
        self.output_effects: dict[int, tuple] = {}
        self.output_effects_lock = threading.Lock()
        self.output_effect_keys = itertools.count()
        # The lowered guards' sites, by the number a compiled graph passes to
        # ``graphmend::fail_unless``, and their messages and the check calls' message
        # templates, by number (``traps``, ``checks``): compiled graphs read them.
        self.trap_sites: list = []
        self.trap_site_numbers: dict = {}
        self.trap_sites_lock = threading.Lock()
        self.trap_messages = Numbering()
        self.check_templates = Numbering()
        # Code objects made or kept by identity: the code ``torch.compile``'s functions
        # run (``compiled_calls``: how a boundary frame is told from others), the code
        # that raises a user's exception from its own place (``traps``), the handler
        # ranges read from a code object, by its id (``traps``), and the frames that
        # restore a user's exception (``restored_frames``). Running frames and
        # TorchDynamo's caches hold these objects; making them again would make others.
        self.compile_boundary_codes: dict = {}
        self.raise_codes: dict = {}
        self.handler_ranges: dict = {}
        self.restored_frame_codes: dict = {}
        self.restored_frame_codes_lock = threading.Lock()

        # --- per thread, never reset -----------------------------------------------------

        # Whether the call TorchDynamo is converting was made inside
        # ``torch.inference_mode()``, which TorchDynamo turns off while it traces
        # (``conversion.inference_mode``; None: not known).
        self.conversion = threading.local()
        # Whether the frame TorchDynamo is converting is rewritten code
        # (``converting.rewritten``, ``conversion_failures``).
        self.converting = threading.local()
        # Capture's sizes made, captures and merges of the trace in progress (``dynamic_shapes``).
        self.captures = threading.local()
        # The message of a lowered guard that failed, rendered for the exception (``traps``).
        self.rendered = threading.local()

    def reset(self) -> None:
        """Forget what this process learned (refusals and their reasons, frames run
        eagerly, break counts, analyses); keep what compiled graphs, running frames and
        TorchDynamo's installed hooks still use. The tables are emptied in place."""
        self.trace_time_declines.clear()
        self.refused.clear()
        self.refused_in_frames.clear()
        self.frames_run_eagerly.clear()
        self.break_counts_at_compile_start.clear()
        self.forward_analyses.clear()
        self.fixed_values_read.clear()
        self.fixed_values_read_at.clear()
        self.fixed_values_varying_sites.clear()
        self.fixed_values_sites_read_in.clear()
        self.fixed_values_trace_sizes.clear()


store = RuntimeStore()


def reset() -> None:
    """Forget everything this process learned while running mended code (``RuntimeStore.reset``)."""
    store.reset()
