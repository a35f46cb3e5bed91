"""What graphmend's runtime reads of TorchDynamo while TorchDynamo traces it.

The runtime functions rewritten code calls decide, while traced, from TorchDynamo's own
view of the frame (``comptime``): its instruction translator, the variables it holds for
the function's locals, its configuration. Every such read goes through here.

Importing this module imports ``torch._dynamo`` (``comptime`` must be the object
TorchDynamo recognises by identity); only the runtime, which needs it anyway, imports it.
TorchDynamo's variable classes are read from torch when first asked for
(``from graphmend.torch_adapter.tracing import TensorVariable``), so a torch without one
fails where it is used, as importing it from torch there would.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import functools

import torch._dynamo
from torch._dynamo.comptime import comptime

from graphmend.torch_adapter._lazy import lazy_names

__all__ = [
    "autocast_in_trace",
    "backends_named",
    "comptime",
    "constant_variable",
    "disable_wrapper_code",
    "eval_frame_callback",
    "frame_callback_unset",
    "frame_code_of",
    "graph_breaks_nest",
    "graph_input_of",
    "nonrecursively_disabled_caller",
    "read_attribute",
    "realized",
    "reorders_logging_calls",
    "resume_function_line",
    "resume_function_origins",
    "resumed_at",
    "root_translator",
    "run_outside_dynamo",
    "tensor_attribute_owner",
    "translator_of",
]

# TorchDynamo's variables (what it holds for a traced value), as the runtime tells them apart.
_VARIABLES = (
    "BaseListVariable",
    "ConstDictVariable",
    "ConstantVariable",
    "SymNodeVariable",
    "TensorVariable",
    "TupleVariable",
    "UserDefinedObjectVariable",
)
__getattr__ = lazy_names(__name__, dict.fromkeys(_VARIABLES, "torch._dynamo.variables"))


def translator_of(context):
    """The instruction translator of the frame a ``comptime`` callback runs in (its
    ``context``): the symbolic locals, the output graph, the parent translators."""
    return context._ComptimeContext__tx


def root_translator():
    """TorchDynamo's translator of the frame it is tracing now (None when not tracing,
    or where this torch keeps it elsewhere)."""
    try:
        from torch._dynamo.symbolic_convert import tls
    except ImportError:  # pragma: no cover - another torch
        return None
    return getattr(tls, "current_tx", None)


def realized(variable):
    """TorchDynamo's variable itself, built where it is still lazy (a module's attribute, a
    graph input not built yet): its guard is then installed, so a call with another
    value traces again."""
    realize = getattr(variable, "realize", None)
    return realize() if realize is not None else variable


def holds_unread_items(variable) -> bool:
    """Whether a list or tuple TorchDynamo traces holds an element the trace has not read
    yet (still lazy) that is not a tensor: reading a number or a string installs a guard
    on its value (a tensor's guard is on its shape and kind)."""
    for item in getattr(realized(variable), "items", None) or ():
        if getattr(item, "is_realized", lambda: True)():
            continue
        peek_type = getattr(item, "peek_type", None)
        kind = peek_type() if peek_type is not None else None
        if not (isinstance(kind, type) and issubclass(kind, torch.Tensor)):
            return True
    return False


def holds_no_items(variable) -> bool:
    """Whether a list or tuple TorchDynamo traces is empty."""
    items = getattr(realized(variable), "items", None)
    return items is not None and len(items) == 0


def first_compilation_of_the_frame(translator) -> bool:
    """Whether TorchDynamo holds no compiled version of the frame being compiled yet
    (True where this torch offers no such query)."""
    root = getattr(translator.output, "root_tx", None)
    try:
        return root is None or compiled_versions(root.f_code) == 0
    except (ImportError, AttributeError):
        return True


def frame_code_of(translator):
    """The code of the frame TorchDynamo is tracing (the outermost, where ``translator``
    traces an inlined call): a trace of it again is a recompile of that code."""
    return translator.output.root_tx.f_code


def read_attribute(translator, variable, name: str):
    """TorchDynamo's variable for ``variable.name`` read in the frame, built as the
    frame's own read builds it: its guards (a tensor's type, device, dtype) are
    installed, so a call where the attribute holds another kind of value traces again."""
    variable = realized(variable)
    read = getattr(variable, "var_getattr", None)
    if read is not None:
        return realized(read(translator, name))
    # torch 2.15 reads attributes through its object protocol instead.
    from torch._dynamo.variables.object_protocol import generic_getattr

    return realized(generic_getattr(translator, variable, name))


def constant_variable(value):
    """TorchDynamo's variable for the Python constant ``value``."""
    from torch._dynamo.variables import ConstantVariable

    return ConstantVariable.create(value)


def graph_input_of(node):
    """(source, the real tensor) of a graph input ``node`` (a placeholder TorchDynamo made
    for a tensor the frame reads), or None for any other node."""
    if node.op != "placeholder":
        return None
    argument = node.meta.get("grapharg")
    if argument is None or argument.source is None or not argument.is_tensor:
        return None
    example = argument.example
    return (argument.source, example) if isinstance(example, torch.Tensor) else None


def static_input_sizes(graph) -> dict[str, tuple[int, ...]]:
    """The static sizes of ``graph``'s tensor inputs so far, by the name of their source."""
    from graphmend.torch_adapter.guards import source_name

    sizes = {}
    for node in graph.nodes:
        found = graph_input_of(node)
        fake = node.meta.get("example_value") if found is not None else None
        if isinstance(fake, torch.Tensor) and all(type(size) is int for size in fake.shape):
            sizes[source_name(node.meta["grapharg"])] = tuple(fake.shape)
    return sizes


def tensor_attribute_owner(translator, source):
    """(module, attribute name, whether it is a registered buffer) where ``source`` names
    a buffer or a plain attribute of an ``nn.Module`` the frame reads
    (``L['self']._buffers['stride']``, ``L['self'].padding``); else None."""
    found = _attribute_of_a_module(source)
    if found is None:
        return None
    owner_source, name, is_buffer = found
    owner = _value_of_source(translator, owner_source.name)
    return (owner, name, is_buffer) if isinstance(owner, torch.nn.Module) else None


def _attribute_of_a_module(source):
    """(the owner's source, attribute name, whether a registered buffer) or None."""
    from torch._dynamo.source import (
        AttrSource,
        DictGetItemSource,
        NNModuleSource,
        UnspecializedParamBufferSource,
    )

    if isinstance(source, DictGetItemSource) and isinstance(source.base, UnspecializedParamBufferSource):
        if source.base.member != "_buffers" or not isinstance(source.index, str):
            return None
        return source.base.base, source.index, True
    if type(source) is AttrSource and isinstance(source.base, NNModuleSource):
        return source.base.base, source.member, False
    return None


_NOT_FOUND = object()


def _value_of_source(translator, name: str, argument_values: dict | None = None):
    """The value a source's own name reads in the root frame (``L`` its locals, with
    ``argument_values`` in place of some), or ``_NOT_FOUND``."""
    root = translator.output.root_tx
    local_values = {**root.f_locals, **(argument_values or {})}
    try:
        return eval(name, {"L": local_values, "G": root.f_globals})  # noqa: S307 - a source's own name
    except Exception:  # noqa: BLE001 - a source this lookup cannot evaluate
        return _NOT_FOUND


def modules_the_trace_may_serve(translator, source) -> list:
    """Other live modules of the class of the module whose attribute ``source`` names,
    where that module is an argument of the frame being compiled (``L['self']``, a
    module's own ``forward`` compiled as a frame of its own): one compiled for it serves
    another called there in its place, as far as the tensors the trace read from the
    module so far, and all its parameters and buffers, have the same sizes in the other.
    Empty where the module is reached otherwise (a global, an attribute of an argument)."""
    from torch._dynamo.source import LocalSource, NNModuleSource

    found = _attribute_of_a_module(source)
    owner_source = found[0] if found is not None else None
    while isinstance(owner_source, NNModuleSource):
        owner_source = owner_source.base
    if type(owner_source) is not LocalSource:
        return []
    owner = _value_of_source(translator, owner_source.name)
    if not isinstance(owner, torch.nn.Module):
        return []
    others = [other for other in _live_modules_of_the_class(translator, type(owner)) if other is not owner]
    read_from_owner = []
    prefix = owner_source.name
    for node in translator.output.graph.nodes:
        found_input = graph_input_of(node)
        if found_input is not None and found_input[0].name.startswith(prefix) and found_input[0].name != prefix:
            read_from_owner.append(found_input)
    layout = _tensor_layout(owner)
    served = []
    for other in others:
        values = {owner_source.local_name: other}
        if _tensor_layout(other) == layout and all(
            isinstance(value := _value_of_source(translator, read_source.name, values), torch.Tensor)
            and _layout_of(value) == _layout_of(tensor)
            for read_source, tensor in read_from_owner
        ):
            served.append(other)
    return served


_LIVE_MODULES = "_graphmend_live_modules_of_class"


def _live_modules_of_the_class(translator, module_class) -> list:
    """The live instances of ``module_class`` and its subclasses, found once per trace
    (a scan of every object the garbage collector tracks, tens of milliseconds in a
    process holding a model); held weakly, so the trace keeps none alive."""
    import gc
    import weakref

    found = getattr(translator.output, _LIVE_MODULES, None)
    if found is None:
        found = {}
        setattr(translator.output, _LIVE_MODULES, found)
    if module_class not in found:
        classes, pending = set(), [module_class]
        while pending:
            current = pending.pop()
            if current not in classes:
                classes.add(current)
                pending.extend(current.__subclasses__())
        found[module_class] = [weakref.ref(other) for other in gc.get_referrers(*classes) if type(other) in classes]
    return [module for module in (reference() for reference in found[module_class]) if module is not None]


def _layout_of(tensor) -> tuple:
    return tuple(tensor.shape), tensor.dtype, tensor.device


def _tensor_layout(module) -> dict:
    """The sizes, dtype and device of each of a module's parameters and buffers: where a
    module differs from another in one, the code after the break is compiled for each
    in the original too (its weights are read there)."""
    layout = {("parameter", name): _layout_of(value) for name, value in module.named_parameters()}
    layout.update((("buffer", name), _layout_of(value)) for name, value in module.named_buffers())
    return layout


def graph_breaks_nest() -> bool:
    """Whether TorchDynamo breaks the graph in the innermost traced frame
    (``config.nested_graph_breaks``), rather than in the outermost one."""
    from torch._dynamo import config

    return bool(config.nested_graph_breaks)


def captures_data_dependent_output_sizes() -> bool:
    """Whether TorchDynamo captures operators whose output size depends on tensor data
    (``nonzero``, boolean-mask indexing) itself (``config.capture_dynamic_output_shape_ops``)."""
    from torch._dynamo import config

    return bool(config.capture_dynamic_output_shape_ops)


_TRACING_STATE_NAMES = frozenset({"is_compiling", "is_dynamo_compiling", "is_exporting", "_is_in_optimized_module"})
_LOADS_OF_A_NAME = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_LOADS_OF_AN_ATTRIBUTE = frozenset({"LOAD_ATTR", "LOAD_METHOD", "IMPORT_FROM"})
_NOT_AN_OPERATION = frozenset({"CACHE", "EXTENDED_ARG", "NOP"})


def asks_whether_compiling_only_through(code, module_globals: dict, runtime_name: str) -> bool:
    """Whether every question ``code`` asks TorchDynamo about compiling
    (``torch.compiler.is_compiling()`` and the functions it treats alike, which keep a
    frame with no op from being skipped) is ``runtime_name.is_compiling()``: no other
    attribute load of those names, and no global or import bound to one of them."""
    from torch._dynamo.variables.torch import tracing_state_functions

    asking = {function for function, answer in tracing_state_functions().items() if answer}
    asking.add(torch._dynamo.eval_frame._is_in_optimized_module)
    previous = None
    for instruction in dis.get_instructions(code):
        if instruction.opname in _NOT_AN_OPERATION:
            continue
        name = instruction.argval
        if instruction.opname in _LOADS_OF_A_NAME and isinstance(name, str):
            value = module_globals.get(name, getattr(builtins, name, None))
            if any(value is function for function in asking):
                return False
        elif instruction.opname in _LOADS_OF_AN_ATTRIBUTE and name in _TRACING_STATE_NAMES:
            if not (previous is not None and previous.opname == "LOAD_GLOBAL" and previous.argval == runtime_name):
                return False
        previous = instruction
    return True


def reads_tensor_numbers(translator) -> bool:
    """Whether the trace of ``translator`` reads a tensor's numbers into Python values
    itself (``.item()``, ``.tolist()``): under ``config.capture_scalar_outputs`` or
    ``fullgraph=True``, its ShapeEnv allows unbacked numbers."""
    return bool(getattr(translator.output.shape_env, "allow_scalar_outputs", True))


@contextlib.contextmanager
def tensor_numbers_allowed(output):
    """While the backend compiles ``output``'s graph: its fake tensors may give unbacked
    numbers, as while tracing the statements that read them (AOTAutograd traces the
    graph again, with the trace's fake mode, and meets each ``.item()`` again)."""
    fake_mode = output.fake_mode
    before = fake_mode.allow_scalar_outputs
    fake_mode.allow_scalar_outputs = True
    try:
        yield
    finally:
        fake_mode.allow_scalar_outputs = before


def allow_tensor_numbers(translator, allowed: bool) -> bool:
    """Let the fake tensors of ``translator``'s trace give ``.item()`` an unbacked number
    (``allowed``) or not, for the operators traced until it is set back; returns what it
    was. The flag is the fake mode's own, read with the ShapeEnv's at each such operator."""
    fake_mode = translator.output.fake_mode
    before = bool(fake_mode.allow_scalar_outputs)
    fake_mode.allow_scalar_outputs = allowed
    return before


def reorders_logging_calls() -> bool:
    """Whether TorchDynamo is told to move some output calls to the end of the graph
    (``config.reorderable_logging_functions``)."""
    return bool(torch._dynamo.config.reorderable_logging_functions)


def run_outside_dynamo(function):
    """``function`` as TorchDynamo never traces it (``torch._dynamo.disable``): a call
    of it in traced code breaks the graph and runs eagerly."""
    return torch._dynamo.disable(function)


def _nothing() -> None:
    return None


@functools.cache
def disable_wrapper_code():
    """The code of every wrapper ``torch._dynamo.disable`` makes (None where this torch
    makes them otherwise)."""
    code = getattr(torch._dynamo.disable(_nothing), "__code__", None)
    return code if code is not getattr(_nothing, "__code__", None) else None


@contextlib.contextmanager
def frame_callback_unset():
    """TorchDynamo's frame callback unset in this thread while the block runs: what
    ``torch._dynamo.disable``'s wrapper does around its call, without the wrapper's frame
    in the tracebacks of what the block raises."""
    from torch._C._dynamo.eval_frame import set_eval_frame

    prior = set_eval_frame(None)
    try:
        yield
    finally:
        set_eval_frame(prior)


def eval_frame_callback():
    """TorchDynamo's frame callback in this thread: set (not None, not False) inside a
    compiled call, also in the frames it runs eagerly. Raises where torch no longer
    offers the query."""
    return torch._C._dynamo.eval_frame.get_eval_frame_callback()


def resume_function_origins() -> dict:
    """TorchDynamo's record of the resume functions it generated: code -> metadata
    whose ``code`` is the code it resumes. Raises ImportError or AttributeError where
    this torch keeps no such record."""
    from torch._dynamo.resume_execution import ContinueExecutionCache

    return ContinueExecutionCache.generated_code_metadata


def compiled_versions(code) -> int:
    """How many compiled versions of ``code`` TorchDynamo holds (its cache entries): more
    than none where it compiles the frame again, a guard of each having failed. Raises
    ImportError or AttributeError where this torch offers no such query."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    return len(_debug_get_cache_entry_list(code))


def resume_argument_orders(translator) -> list[tuple[str, ...]]:
    """The order of the frame's live names each resume function of TorchDynamo's for a
    break at the instruction ``translator`` stands at would take, as
    ``create_call_resume_at`` reads them: the frame's locals, in their order, read at or
    after the place it resumes at (the next instruction; for a jump, its target too).
    Raises ImportError or AttributeError where this torch has no such analysis."""
    from torch._dynamo.symbolic_convert import livevars_analysis  # as patched (``liveness``)

    instruction = translator.current_instruction
    places = [translator.next_instruction]
    if getattr(instruction, "target", None) is not None:
        places.append(instruction.target)
    shared = set(translator.cell_and_freevars())
    orders = []
    for place in places:
        if place is None:
            continue
        reads = livevars_analysis(translator.instructions, place)
        orders.append(tuple(name for name in translator.symbolic_locals if name in reads and name not in shared))
    return orders


def earlier_resume_argument_orders(code, line: int) -> list[tuple[str, ...]]:
    """For each resume function TorchDynamo has made at ``line`` of the function ``code``
    runs (a resume function's code stands for the function it resumes), the order of
    the frame's names it takes after the values of the stack. Raises ImportError or
    AttributeError where this torch keeps no such cache."""
    from torch._dynamo.resume_execution import TORCH_DYNAMO_RESUME_IN_PREFIX, ContinueExecutionCache

    origins = resume_function_origins()
    while code in origins:
        code = origins[code].code
    made = ContinueExecutionCache.cache.get(code, {})
    orders = []
    for resume in list(made.values()):
        if not resume.co_name.startswith(TORCH_DYNAMO_RESUME_IN_PREFIX) or not resume.co_name.endswith(f"_at_{line}"):
            continue
        names = resume.co_varnames[: resume.co_argcount]
        orders.append(tuple(name for name in names if not name.startswith("__") and not name.startswith("___stack")))
    return orders


def nonrecursively_disabled_caller(frame) -> bool:
    """Whether ``frame`` (a frame of the callback TorchDynamo runs on a frame about to
    run) is called, past TorchDynamo's own frames that convert it, by the wrapper of
    ``torch._dynamo.disable(recursive=False)``: TorchDynamo then leaves the frame
    uncompiled. It finds that caller by walking up from its own frames past those of
    ``convert_frame.py``; a frame of graphmend's on the way (the wrapper of
    ``ConvertFrame.__call__``) hid the caller from it."""
    from torch._dynamo import decorators

    code = getattr(decorators, "_nonrecursive_disable_wrapper_code", None)
    if code is None:
        return False
    while frame is not None and "torch/_dynamo/convert_frame.py" in frame.f_code.co_filename.replace("\\", "/"):
        frame = frame.f_back
    return frame is not None and frame.f_code is code


def resume_function_line(code) -> int | None:
    """The line of the code it resumes that a resume function of TorchDynamo's resumes
    at (its name ends ``_at_<line>``), or None for other code."""
    from torch._dynamo.resume_execution import TORCH_DYNAMO_RESUME_IN_PREFIX

    name = code.co_name
    if not name.startswith(TORCH_DYNAMO_RESUME_IN_PREFIX):
        return None
    _, _, line = name.rpartition("_at_")
    return int(line) if line.isdigit() else None


def resumed_at(code) -> tuple | None:
    """(the code a resume function of TorchDynamo's resumes, the offset in it where it
    resumes), or None for other code, a resume function of a resume function, or a
    layout this torch does not make. The resume function is a copy of the code it
    resumes, after a prologue that ends in the one jump to the place resumed at; the
    copy is read alongside the original instruction by instruction (``_copied_length``:
    a function that tests ``x is None`` has a longer copy)."""
    import dis

    if resume_function_line(code) is None:
        return None
    try:
        metadata = resume_function_origins().get(code)
    except (ImportError, AttributeError):
        return None
    resumed = getattr(metadata, "code", None)
    if resumed is None or resume_function_line(resumed) is not None:
        return None
    copy = list(dis.get_instructions(code))
    prologue_end = next((index for index, i in enumerate(copy) if "JUMP" in i.opname and "_IF_" not in i.opname), None)
    if prologue_end is None or prologue_end + 1 >= len(copy):
        return None
    target = copy[prologue_end].argval
    copied = [i for i in copy[prologue_end + 1:] if i.opname != "EXTENDED_ARG"]
    originals = [i for i in dis.get_instructions(resumed) if i.opname != "EXTENDED_ARG"]
    position = 0
    for index, original in enumerate(originals):
        if position >= len(copied):
            return None
        length = _copied_length(resumed, originals, index)
        if length == 1 and copied[position].opname != original.opname:
            return None  # a layout this reading does not know
        if copied[position].offset == target:
            return (resumed, original.offset) if copied[position].opname == original.opname else None
        position += length
    return None


def _copied_length(code, instructions: list, index: int) -> int:
    """How many instructions TorchDynamo's copy of ``code`` has for its instruction at
    ``index`` (``bytecode_transformation.cleaned_instructions``): a jump on ``None`` is
    copied as a comparison and a jump (``LOAD_CONST None``, ``IS_OP``,
    ``POP_JUMP_IF_TRUE``), a zero-argument ``super()`` before Python 3.12 with its class
    and first argument loaded after it, a slice operation and a fused load or store as two."""
    import sys

    instruction = instructions[index]
    opname = instruction.opname
    if "JUMP" in opname and "_NONE" in opname:
        return 3
    if (
        sys.version_info < (3, 12) and opname == "LOAD_GLOBAL" and instruction.argval == "super"
        and code.co_varnames and index + 1 < len(instructions)
        and instructions[index + 1].opname in ("PRECALL", "CALL_FUNCTION") and instructions[index + 1].arg == 0
    ):
        return 3
    if sys.version_info >= (3, 12) and opname in ("BINARY_SLICE", "STORE_SLICE"):
        return 2
    if sys.version_info >= (3, 13) and opname in ("LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"):
        return 2
    return 1


def backends_named(names) -> tuple:
    """The compiler functions TorchDynamo's registry holds under ``names``."""
    from torch._dynamo.backends.registry import lookup_backend

    return tuple(lookup_backend(name) for name in names)


def is_torch_compiles_inductor(backend) -> bool:
    """Whether ``backend`` is the object ``torch.compile(backend="inductor")`` (its default)
    hands TorchDynamo in place of the registered ``inductor`` function."""
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    return wrapper is not None and isinstance(backend, wrapper)


def rng_ops_are_functionalized() -> bool:
    """Whether AOTAutograd turns random ops into ops that take the generator's state as an
    input (``functionalize_rng_ops``): they then no longer draw as eager does, in order."""
    try:
        from torch._functorch import config
    except ImportError:  # another torch: assume it might
        return True
    return bool(getattr(config, "functionalize_rng_ops", True))


_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu")


def autocast_in_trace(graph) -> bool:
    """Whether autocast applies to some op of ``graph``: it was on, for a device, when
    TorchDynamo traced the frame (TorchDynamo guards on that state), or the graph enters
    it (``with torch.autocast(...)`` inside the frame)."""
    for device in _AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(device):
                return True
        except RuntimeError:  # a device type this build does not know
            continue
    enter = getattr(getattr(torch.amp, "autocast_mode", None), "_enter_autocast", None)
    return any(node.op == "call_function" and node.target is enter for node in graph.nodes)
