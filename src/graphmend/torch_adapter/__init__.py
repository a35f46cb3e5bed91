"""Where graphmend touches torch's private API: here and in this package's modules only.

This module holds the patches graphmend makes to torch, in one table, applied only when
asked, and TorchDynamo's counters as graphmend's counting reads them. The submodules
hold the rest, by job (``tests/test_torch_adapter_boundary.py`` keeps every other module
of graphmend off torch's private names):

* ``tracing``: what the runtime reads of TorchDynamo while traced (``comptime``, the
  instruction translator, its variable classes, its configuration, ``disable``);
* ``guards``: the guards the runtime adds to a trace, and the sources they name;
* ``errors``: TorchDynamo's exceptions, as the runtime raises and tells them apart;
* ``records``: where ``graphmend.dynamo_records`` listens to TorchDynamo;
* ``ops``: torch's private operator, shape, autograd and module internals.

Importing this package imports no torch. ``tracing`` (which imports ``torch._dynamo``)
and ``ops`` (torch alone) are imported by the runtime when it is imported; ``guards``,
``errors`` and ``records`` where they are used.

The patches:

Mended code needs TorchDynamo to behave a little differently (to restart a trace whose
claims a later check refuses, to run a rewritten frame eagerly when TorchDynamo fails
on it, ...). Each such change is one row of ``PATCHES``: where the attribute lives, and
the runtime function that wraps the original. ``activate()`` applies every row whose
target this torch has (a feature test, not a version comparison) and ``deactivate()``
puts back exactly what was there; both are idempotent.

Importing ``graphmend`` activates nothing. The ways in that run mended code do:
``graphmend.install()`` and ``graphmend run`` (through the hook), ``graphmend.mend``,
and mended source when it runs (its ``import graphmend.runtime``).
``graphmend.uninstall()`` deactivates.

A torch outside ``SUPPORTED`` gets one warning and no patch, and the ways in leave
programs unmended (``unsupported_torch()``).
"""

from __future__ import annotations

import functools
import importlib
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass

# The torch releases graphmend is written and tested against: [first, end).
SUPPORTED = ((2, 13), (2, 16))
_SUPPORTED_TEXT = "2.13 to 2.15"


@dataclass(frozen=True)
class Patch:
    """Replace ``module.owner.attribute`` (``module.attribute`` without an owner) with
    ``wrapper(original)``. ``name`` is what ``graphmend.runtime.store`` calls the
    hook in ``store.hooks_installed`` (where ``claims_hook``: a hook the whole-trace
    checks depend on)."""

    name: str
    module: str
    owner: str | None
    attribute: str
    wrapper: Callable[[object], object]
    claims_hook: bool = False
    # (module, attribute) features of the torch that make this patch needed at all: a
    # torch without one behaves as the patch would make it (``needed``).
    only_where: tuple[tuple[str, str], ...] = ()


def _runtime(name: str):
    return importlib.import_module(f"graphmend.runtime.{name}")


def _compile_boundary(original):
    compiled_calls = _runtime("compiled_calls")

    def compile_with_boundary(model=None, **options):
        return compiled_calls._compile_with_boundary(original, model, **options)

    functools.update_wrapper(compile_with_boundary, original)
    _traced_as_torch_compile(compile_with_boundary, original)
    return compile_with_boundary


def _traced_as_torch_compile(wrapper, original) -> None:
    """TorchDynamo, tracing a compiled function that calls ``torch.compile`` itself,
    finds its rule for the call by the function's identity (the call is then the
    function it is given, uncompiled); the wrapper gets the rule of the function it
    wraps, else TorchDynamo traced into the wrapper and failed where the original
    compiled. Both tables are built once, whichever of the two ``torch.compile`` was then."""
    try:
        from torch._dynamo import trace_rules
        from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

        tables = (trace_rules.get_torch_obj_rule_map(), TorchInGraphFunctionVariable._get_handlers())
    except (ImportError, AttributeError):  # pragma: no cover - another torch: no such tables
        return
    for table in tables:
        known = table.get(original, table.get(wrapper))
        if known is not None:
            table.setdefault(wrapper, known)
            table.setdefault(original, known)


def _run_eagerly_on_internal_error(original):
    return _runtime("conversion_failures")._run_eagerly_on_internal_error(original)


def _offsets_of_replaced_extended_args(original):
    from torch._dynamo import bytecode_transformation

    return _runtime("conversion_failures")._offsets_of_replaced_extended_args(
        original, bytecode_transformation.update_offsets
    )


def _count_only_the_programs_calls(original):
    return _runtime("resumable_states")._count_only_the_programs_calls(original)


def _user_stacks_begin_at_the_script(original):
    return _runtime("restored_frames")._user_stacks_begin_at_the_script(original)


def _runtime_questions_mark_nothing(original):
    return _runtime("resumable_states")._runtime_questions_mark_nothing(original)


def _logging_frames_hold_no_tensor(original):
    return _runtime("output_frames")._logging_frames_hold_no_tensor(original)


def _exact_liveness_for_mended_code(original):
    from graphmend.torch_adapter import liveness

    return liveness.exact_for_mended_code(original)


def _trace_hook(factory_name: str):
    def make(original):
        return getattr(_runtime("trace_hooks"), factory_name)(original)

    make.__name__ = factory_name
    return make


PATCHES: tuple[Patch, ...] = (
    # Every spelling of torch.compile goes through it: the boundary where a failed
    # lowered guard's exception becomes the user's (runtime.compiled_calls).
    Patch("compile_boundary", "torch", None, "compile", _compile_boundary),
    # A rewritten frame TorchDynamo fails to convert runs eagerly (runtime.conversion_failures).
    Patch("run_eagerly_on_internal_error", "torch._dynamo.convert_frame", "ConvertFrame", "__call__",
          _run_eagerly_on_internal_error),
    Patch("offsets_of_replaced_extended_args", "torch._dynamo.bytecode_transformation", None,
          "compute_exception_table", _offsets_of_replaced_extended_args),
    # Resumable states counted over the program's own calls (runtime.resumable_states).
    Patch("count_only_the_programs_calls", "torch._dynamo.symbolic_convert", "InstructionTranslatorBase",
          "is_non_empty_graph", _count_only_the_programs_calls),
    # A frame that traces no op is skipped as its original is, although rewritten code
    # asks whether it is being compiled (runtime.resumable_states).
    Patch("runtime_questions_mark_nothing", "torch._dynamo.symbolic_convert", "InstructionTranslatorBase",
          "mark_inconsistent_side_effects", _runtime_questions_mark_nothing),
    # The logging package's frames run eagerly, as the original's first log call left
    # them, whichever log calls Defer moved into graphs (runtime.output_frames).
    Patch("logging_frames_run_eagerly", "torch._dynamo.convert_frame", None, "has_tensor_in_frame",
          _logging_frames_hold_no_tensor),
    # The stacks TorchDynamo's logs show begin at the script, as without graphmend run
    # (runtime.restored_frames).
    Patch("user_stacks_begin_at_the_script", "torch._dynamo.exc", None, "filter_stack",
          _user_stacks_begin_at_the_script),
    # A resume function of mended code takes the locals some path reads, as the original's
    # took, although graphmend's branches stand before their writes (torch_adapter.liveness).
    Patch("exact_liveness_for_mended_code", "torch._dynamo.symbolic_convert", None, "livevars_analysis",
          _exact_liveness_for_mended_code),
    # The checks of the whole trace (runtime.trace_hooks); a torch lacking one of these gets
    # no rewrite that needs it (claims.trace_checks_unavailable).
    Patch("restart_on_given_up_frame", "torch._dynamo.symbolic_convert", "InstructionTranslator", "run",
          _trace_hook("_restart_given_up_frame_without_claims"), claims_hook=True),
    Patch("restart_on_failed_op", "torch._dynamo.utils", None, "_wrap_graph_break_with_torch_runtime_err",
          _trace_hook("_restart_trace_without_claims"), claims_hook=True),
    # Where a failed fake-tensor op becomes an exception of the traced program instead
    # (torch 2.14 on), the same restart from where that exception is handled.
    Patch("restart_on_observed_failed_op", "torch._dynamo.symbolic_convert", "InstructionTranslatorBase",
          "exception_handler", _trace_hook("_restart_on_observed_failed_op"), claims_hook=True,
          only_where=(("torch._dynamo.exc", "FakeTensorObservedException"),)),
    Patch("check_before_compiling", "torch._dynamo.output_graph", "OutputGraph", "compile_subgraph",
          _trace_hook("_check_before_compiling"), claims_hook=True),
    Patch("refuse_captures_whose_sizes_are_needed", "torch.fx.experimental.symbolic_shapes", "ShapeEnv",
          "_make_data_dependent_error", _trace_hook("_refuse_captures_whose_sizes_are_needed"), claims_hook=True),
    Patch("note_the_calls_inference_mode", "torch._dynamo.convert_frame", None, "maybe_disable_inference_mode",
          _trace_hook("_note_the_calls_inference_mode"), claims_hook=True),
    Patch("check_the_compiled_graph", "torch._dynamo.output_graph", "OutputGraph", "call_user_compiler",
          _trace_hook("_check_the_compiled_graph"), claims_hook=True),
    Patch("note_inlined_call_spans", "torch._dynamo.symbolic_convert", "InliningInstructionTranslator",
          "inline_call_", _trace_hook("_note_inlined_call_spans"), claims_hook=True),
)

# Features a patch needs beyond its own target.
_NEEDS = {"offsets_of_replaced_extended_args": (("torch._dynamo.bytecode_transformation", "update_offsets"),)}

_MARK = "_graphmend_patch"
_lock = threading.RLock()
# patch name -> (owner object, whether the owner held the attribute itself, what it held)
_applied: dict[str, tuple[object, bool, object]] = {}
_active = False
_warned = False


def torch_version() -> tuple[int, int] | None:
    import torch

    try:
        major, minor = torch.__version__.split("+")[0].split(".")[:2]
        return int(major), int(minor)
    except (AttributeError, ValueError):
        return None


def unsupported_torch() -> str | None:
    """Why this torch is not one graphmend supports (None when it is)."""
    import torch

    version = torch_version()
    if version is None or not SUPPORTED[0] <= version < SUPPORTED[1]:
        return (
            f"graphmend supports torch {_SUPPORTED_TEXT}; this is torch {torch.__version__}, "
            "so programs run unmended"
        )
    return None


def warn_if_unsupported(stacklevel: int = 2) -> bool:
    """Warn once per process when this torch is unsupported; True when it is."""
    global _warned
    reason = unsupported_torch()
    if reason is None:
        return False
    if not _warned:
        _warned = True
        from graphmend.hook.loader import GraphmendWarning

        warnings.warn(reason, GraphmendWarning, stacklevel=stacklevel + 1)
    return True


def _owner(patch: Patch):
    try:
        target = importlib.import_module(patch.module)
    except ImportError:
        return None
    if patch.owner is not None:
        target = getattr(target, patch.owner, None)
    return target


def _has(module: str, attribute: str) -> bool:
    try:
        return getattr(importlib.import_module(module), attribute, None) is not None
    except ImportError:
        return False


def needed(patch: Patch) -> bool:
    """Whether this torch has the behaviour ``patch`` is for (``Patch.only_where``)."""
    return all(_has(module, attribute) for module, attribute in patch.only_where)


def available(patch: Patch) -> bool:
    """Whether this torch has what ``patch`` wraps (and what its wrapper needs)."""
    owner = _owner(patch)
    if owner is None or getattr(owner, patch.attribute, None) is None:
        return False
    return all(_has(module, attribute) for module, attribute in _NEEDS.get(patch.name, ()))


def _set_claims_hook(patch: Patch, installed: bool) -> None:
    if patch.claims_hook:
        _runtime("store").store.hooks_installed[patch.name] = installed


def active() -> bool:
    return _active


def activate() -> bool:
    """Apply every patch this torch has a target for. Idempotent. False (and nothing
    patched) under an unsupported torch."""
    global _active
    with _lock:
        if _active:
            return True
        if warn_if_unsupported(stacklevel=3):
            return False
        for patch in PATCHES:
            if patch.name in _applied or not needed(patch) or not available(patch):
                continue
            owner = _owner(patch)
            # An attribute a class inherits is given back by deleting the subclass's own.
            had_own = patch.attribute in vars(owner) if isinstance(owner, type) else True
            held = vars(owner)[patch.attribute] if isinstance(owner, type) and had_own else getattr(owner, patch.attribute)
            wrapper = patch.wrapper(getattr(owner, patch.attribute))
            setattr(wrapper, _MARK, patch.name)
            setattr(owner, patch.attribute, wrapper)
            _applied[patch.name] = (owner, had_own, held)
            _set_claims_hook(patch, True)
        _active = True
        return True


def deactivate() -> None:
    """Put back what every applied patch replaced. Idempotent. A patch someone else has
    since wrapped again is left in place (removing it would remove theirs)."""
    global _active
    with _lock:
        for patch in reversed(PATCHES):
            saved = _applied.pop(patch.name, None)
            if saved is None:
                continue
            owner, had_own, held = saved
            current = vars(owner).get(patch.attribute) if isinstance(owner, type) else getattr(owner, patch.attribute, None)
            if getattr(current, _MARK, None) != patch.name:
                continue
            if had_own:
                setattr(owner, patch.attribute, held)
            else:
                delattr(owner, patch.attribute)
            _set_claims_hook(patch, False)
        _active = False


# What the runtime reads of TorchDynamo's state, where torch releases differ.


def contents_modified(side_effects, variable) -> bool:
    """Whether the trace changed what an object of a ``dict``/``tuple``/... subclass
    holds as that container (not its attributes). torch 2.13 keeps that container in a
    variable of its own (``is_base_vt_modified``); later torches track it on the
    object's own variable, as a value mutation (``mutation_type.is_modified``)."""
    base_modified = getattr(variable, "is_base_vt_modified", None)
    if base_modified is not None:
        return bool(base_modified(side_effects))
    return bool(getattr(getattr(variable, "mutation_type", None), "is_modified", False))


def applied() -> dict[str, object]:
    """Patch name -> the object now at its target (for tests and ``graphmend explain``)."""
    return {name: getattr(owner, next(p.attribute for p in PATCHES if p.name == name)) for name, (owner, _, _) in _applied.items()}


def replaced(name: str):
    """What the patch called ``name`` replaced, while it is applied (else None)."""
    saved = _applied.get(name)
    return None if saved is None else saved[2]


def is_patched(value) -> bool:
    return getattr(value, _MARK, None) is not None


# TorchDynamo's counters and caches, as graphmend's counting reads and clears them.


def graph_break_counters():
    """``torch._dynamo.utils.counters``: TorchDynamo's event counters (graph breaks, ...)."""
    from torch._dynamo.utils import counters

    return counters


def current_compile_key() -> tuple | None:
    """TorchDynamo's (frame, compilation of that frame) being traced, the same over its
    restarted attempts; None when not compiling."""
    import torch

    compile_id = torch._guards.CompileContext.current_compile_id()
    if compile_id is None:
        return None
    return (compile_id.frame_id, compile_id.frame_compile_id)


def current_compile_attempt() -> int | None:
    """Which attempt at the compilation being traced this is (0 for the first; TorchDynamo
    counts its restarts), or None when not compiling or where this torch does not say."""
    import torch

    context = torch._guards.CompileContext.try_get()
    attempt = getattr(context, "attempt", None)
    return attempt if type(attempt) is int else None


def reset_dynamo() -> None:
    """``torch._dynamo.reset()``: drop TorchDynamo's caches so the next call compiles afresh."""
    import torch._dynamo

    torch._dynamo.reset()


def drop_stand_in_writes(output, is_stand_in, graph_break: bool) -> str | None:
    """Drop TorchDynamo's pending writes of a stand-in (``is_stand_in(variable)``) back
    to where the trace stored it: a ``dict`` item that held another value when the trace
    read the dict (a module's ``_buffers``) gets that value back, so the dict is not
    written after the graph; an attribute store is forgotten. Returns a reason when a
    stand-in is held anywhere else (another container, the stack, a local that a graph
    break hands on: ``graph_break``), where the program would see the copy instead of
    the object."""
    from torch._dynamo.variables import ConstDictVariable

    side_effects = output.side_effects
    for variable in list(side_effects._get_modified_vars()):
        if isinstance(variable, ConstDictVariable):
            for key, value in list(variable.items.items()):
                if not is_stand_in(value):
                    continue
                original = variable.original_items.get(key.vt)
                if original is None:
                    return "the trace stored the stand-in where no value was before"
                variable.items[key] = original
            continue
        stores = side_effects.store_attr_mutations.get(variable)
        if stores:
            for name, value in list(stores.items()):
                if is_stand_in(value):
                    del stores[name]
        for value in list(getattr(variable, "items", None) or []):
            if is_stand_in(value):
                return "the trace keeps the stand-in in a container"

    def holds(value, depth: int = 0) -> bool:
        if is_stand_in(value):
            return True
        items = getattr(value, "items", None)
        if depth > 8 or items is None or (isinstance(value, ConstDictVariable) and not isinstance(items, dict)):
            return False
        values = items.values() if isinstance(items, dict) else items if isinstance(items, (list, tuple)) else ()
        return any(holds(item, depth + 1) for item in values)

    translator = output.current_tx
    while translator is not None:
        held = list(translator.stack) + (list(translator.symbolic_locals.values()) if graph_break else [])
        if any(holds(value) for value in held):
            return "the stand-in is held by a local or the stack, which the program would read as the attribute's object"
        translator = getattr(translator, "parent", None)
    return None


def pending_write_sources(output) -> list[str]:
    """The sources of the objects the trace of ``output`` has changed so far (attributes
    stored, items set, a container's contents), which TorchDynamo writes only after the
    graph has run: until then the real objects hold their values from before the trace."""
    from graphmend.torch_adapter.guards import source_name

    side_effects = output.side_effects
    names = []
    for variable in side_effects._get_modified_vars():
        name = source_name(variable)
        if name is not None:
            names.append(name)
    return names


def pending_write_under(output, root: str) -> bool:
    """Whether the trace of ``output`` has changed, so far, the object named ``root`` (a
    source's name) or an object reached through it (``root.a``, ``root[0]``)."""
    return any(
        name == root or name.startswith((root + ".", root + "[")) for name in pending_write_sources(output)
    )
