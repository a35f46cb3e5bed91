"""What Where's performed choice calls: a branch whose arms choose which existing
object an attribute holds, performed when the graph runs, at its place in the program.

    if seq_len > limit:
        if not hasattr(self, "long"):
            self.long = make_long(...)
        self.register_buffer("table", self.long, persistent=False)
    else:
        self.register_buffer("table", self.short, persistent=False)

``torch.where`` cannot make this choice: it returns a new tensor, and after the call
``self.table`` must be ``self.long`` or ``self.short`` itself. So the graph computes only
the condition, and ``graphmend::perform_choice`` (an ordered effect, like output in
``deferred``) runs the original arms, unchanged, in a function the rewrite made of them,
with the condition's value, when the graph runs: the memoized attribute is made exactly
when and as the original made it, and the attribute is written with the object the
original chose. The operator returns a copy of what the attribute then holds, and the
trace's view of the attribute is that copy (a stand-in), so the rest of the graph reads
the chosen values. TorchDynamo would write the stand-in back to the attribute after the
graph; ``keep_stand_ins_out_of_replay`` (run before TorchDynamo compiles the graph) drops
that write, so the operator's stays.

Conditions while tracing (``perform_choice``): W211, the values the arms read are
constants of the trace or objects it is guarded on by identity; W212, the attribute is a
plain tensor no autograd flows through (the stand-in's shape, dtype, device and strides
are its); W213, with grad mode on, the objects the arms read hold no tensor that
requires grad; W214, the trace wrote nothing the arms read before the branch (the
write would happen only after the graph). Whole trace (``keep_stand_ins_out_of_replay``): W301, the stand-in leaves the
graph only as the attribute the operator writes; W302, the trace reads none of the other
attributes the arms write (it sees them as they were before the branch).

W215, every object an arm may choose that exists while tracing has the attribute's
layout. Not exact: an object an arm makes the first time it runs (a memoized
``if not hasattr(...)``) with another shape, dtype, device or strides than the attribute
had while tracing (the graph was compiled for that layout) fails the operator with a
RuntimeError when the graph runs, where the original would have gone on.
"""

from __future__ import annotations

import inspect
import threading
import weakref

import torch

from graphmend.core.legality import failed
from graphmend.runtime import claims, operators
from graphmend.runtime.selection import PLAIN_TENSOR_TYPES
from graphmend.runtime.trace_decisions import decide_in_trace, user_site
from graphmend.torch_adapter.tracing import comptime, realized

# key -> (arms, owner, name, arguments, layout): what each compiled operator performs.
_CHOICES: dict[int, tuple] = {}
_CHOICES_LOCK = threading.Lock()
_NEXT_KEY = [0]


def _layout(tensor) -> tuple:
    return (tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, tensor.device)


class _Weakly:
    """An object the registry holds weakly: a compiled graph must not keep a model alive
    (the graph runs only while its identity guards hold, so while the object lives)."""

    __slots__ = ("reference",)

    def __init__(self, value):
        self.reference = weakref.ref(value)


def _hold(value):
    try:
        return _Weakly(value)
    except TypeError:  # no weak references to it: held as it is
        return value


def _release(value):
    if type(value) is not _Weakly:
        return value
    held = value.reference()
    if held is None:
        raise RuntimeError("graphmend: a compiled graph ran for an object that no longer exists")
    return held


def _perform(key: int, taken: torch.Tensor, template: torch.Tensor) -> torch.Tensor:
    arms, owner, name, arguments, layout = _CHOICES[key]
    owner = _release(owner)
    arms(bool(taken), *[_release(argument) for argument in arguments])
    chosen = getattr(owner, name)
    if not isinstance(chosen, torch.Tensor) or _layout(chosen) != layout:
        raise RuntimeError(
            f"graphmend: the branch left `{name}` with another shape, dtype, device or strides than the graph "
            "was compiled for; run the program without graphmend"
        )
    # An operator's result may not alias its operands: the graph reads a copy, and the
    # attribute holds the chosen object itself.
    return chosen.clone()


def _perform_fake(key: int, taken: torch.Tensor, template: torch.Tensor) -> torch.Tensor:
    return template.new_empty_strided(template.shape, template.stride())


PERFORM_CHOICE = operators.define(
    "perform_choice(int key, Tensor taken, Tensor template) -> Tensor", _perform, _perform_fake, ordered=True
)


def perform_choice(
    taken, arms, owner, name: str, arguments: tuple, also_written: tuple = (), chosen: tuple = ()
) -> None:
    """Traced in place of the branch: the choice is performed by the graph (see the
    module's docstring). ``arms(taken, *arguments)`` runs the original arms;
    ``also_written``: the other attributes of ``owner`` they write, which the trace
    must not read (W302); ``chosen``: the attributes whose objects the arms write to
    ``name`` (W215)."""
    template = getattr(owner, name)
    key = -1
    comptime(_decide_register)
    if key < 0:  # the number of the reason it cannot be performed
        comptime(_refuse)
        arms(bool(taken), *arguments)
        return
    stand_in = PERFORM_CHOICE(key, taken, template)
    setattr(owner, name, stand_in)


_UNKNOWN = failed("W211", "the branch's choice cannot be performed by the graph: what its arms read is unknown")


# Why a choice could not be performed, by the negative number the trace binds: a
# reason is no constant TorchDynamo keeps.
_REFUSALS: dict[int, str] = {-1: _UNKNOWN}


def _refuse(context) -> None:
    def refuse(translator, number) -> None:
        claims.refuse_claim_at_user_site(translator, _REFUSALS.get(number, _UNKNOWN))

    decide_in_trace(context, "_refused", ("key",), refuse)


def _refusal_number(reason: str) -> int:
    with _CHOICES_LOCK:
        number = -len(_REFUSALS) - 1
        for known, text in _REFUSALS.items():
            if text == reason and getattr(text, "condition", None) == getattr(reason, "condition", None):
                return known
        _REFUSALS[number] = reason
    return number


def _decide_register(context) -> None:
    decide_in_trace(
        context, "key", ("arms", "owner", "name", "arguments", "template", "also_written", "chosen"), _register,
        read=lambda variable: variable,
    )


def _register(translator, arms, owner, name, arguments, template, also_written, chosen) -> int:
    """The key the graph passes to the operator, or the negative number of the reason
    (W211, W212) it cannot be performed."""
    from graphmend.torch_adapter import guards
    from graphmend.torch_adapter.tracing import TensorVariable

    reason = why_not_fixed_in_trace(arms, owner, arguments) or why_not_a_plain_buffer(template)
    if reason is not None:
        return _refusal_number(reason)
    function = arms.as_python_constant()
    owner_value = _guarded_object(owner)
    values, constants = [], []
    for item in arguments.items:
        constant = item.is_python_constant()
        constants.append(constant)
        values.append(item.as_python_constant() if constant else _guarded_object(item))
    reason = why_arms_may_record_autograd([owner_value, *values]) or arms_read_nothing_the_trace_wrote(
        translator, [owner, *arguments.items]
    )
    if reason is not None:
        return _refusal_number(reason)
    example = template.as_proxy().node.meta["example_value"] if isinstance(template, TensorVariable) else None
    if example is None:
        return -1
    reason = chosen_objects_share_the_layout(owner_value, chosen.as_python_constant(), _layout(example))
    if reason is not None:
        return _refusal_number(reason)
    guards.install_guards(*((source, guards.IDENTITY) for source in _identity_sources(owner, arguments)))
    site = user_site(translator)
    owner_name = guards.source_name(realized(owner))
    if site is None or owner_name is None:
        return -1
    sites = getattr(translator.output, STAND_IN_SITES_ATTRIBUTE, None)
    if sites is None:
        sites = []
        setattr(translator.output, STAND_IN_SITES_ATTRIBUTE, sites)
    sites.append((site, owner_name, tuple(also_written.as_python_constant())))
    with _CHOICES_LOCK:
        key = _NEXT_KEY[0]
        _NEXT_KEY[0] += 1
        _CHOICES[key] = (
            function, _hold(owner_value), name.as_python_constant(),
            tuple(value if constant else _hold(value) for value, constant in zip(values, constants)), _layout(example),
        )
    # The graph reads a copy of a tensor no autograd flows through (W212, W213), made by
    # an operator with no gradient: the branch puts nothing differentiable in the graph,
    # and may join one that records autograd on the terms of a selection of values
    # without grad (``whole_trace_conditions.joins_under_grad``).
    claims.note_selection(translator)
    return key


def _guarded_object(variable):
    return realized(variable).value


def _identity_sources(owner, arguments) -> list:
    sources = []
    for item in map(realized, [owner, *arguments.items]):
        if not item.is_python_constant():
            sources.append(item.source)
    return sources


def why_not_fixed_in_trace(arms, owner, arguments) -> str | None:
    """W211: the arms' function has no closure, and each value the arms read (the
    receiver and the arguments) is a constant of the trace or an object with a source
    the trace can be guarded on by identity: the operator runs the arms with exactly
    these objects on every call the graph serves. A tensor is neither: its value would
    have to travel through the graph."""
    from graphmend.torch_adapter.tracing import TensorVariable

    try:
        function = arms.as_python_constant()
    except Exception:  # noqa: BLE001 - not a function TorchDynamo can hand over
        return failed("W211", "the arms' function is not a constant of the trace")
    if getattr(function, "__closure__", None):
        return failed("W211", "the arms' function reads an enclosing function's names")
    for item in [owner, *getattr(arguments, "items", [None])]:
        if item is None:
            return failed("W211", "the arms' arguments are not a tuple of the trace")
        item = realized(item)
        if isinstance(item, TensorVariable):
            return failed("W211", "the arms read a tensor, whose value only the graph has")
        if item.is_python_constant():
            continue
        if getattr(item, "source", None) is None or not hasattr(item, "value"):
            return failed("W211", "the arms read an object the trace cannot be guarded on")
    return None


def _tensors_held(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, torch.nn.Module):
        return [*value.parameters(), *value.buffers(), *_tensors_held(dict(vars(value)))]
    if isinstance(value, dict):
        return [item for item in value.values() if isinstance(item, torch.Tensor)]
    held = getattr(value, "__dict__", None)
    return _tensors_held(dict(held)) if isinstance(held, dict) else []


def why_arms_may_record_autograd(objects: list) -> str | None:
    """W213: with grad mode on while tracing, the objects the arms read (the receiver
    and the arguments) hold no tensor that requires grad (a module's parameters and
    buffers, an object's tensor attributes). When the graph runs under autograd, its
    operators run without it (AOTAutograd's forward): a memoized tensor the arms compute
    from one that requires grad would record no autograd, where the original's does."""
    if not torch.is_grad_enabled():
        return None
    for value in objects:
        if any(tensor.requires_grad for tensor in _tensors_held(value)):
            return failed("W213", "grad mode is on and the arms read an object holding a tensor that requires grad")
    return None


def arms_read_nothing_the_trace_wrote(translator, variables) -> str | None:
    """W214: the trace has changed nothing of the receiver or an argument, nor of an
    object reached through one, before the branch. TorchDynamo makes those writes only
    after the graph has run, and the arms run inside it: they would read the objects as
    they were before the trace, where the original reads what the code before the
    branch wrote."""
    from graphmend import torch_adapter
    from graphmend.torch_adapter import guards

    for variable in variables:
        variable = realized(variable)
        if variable.is_python_constant():
            continue
        root = guards.source_name(variable)
        if root is None:
            return failed("W214", "the arms read an object the trace cannot name")
        if torch_adapter.pending_write_under(translator.output, root):
            return failed("W214", "the trace wrote to an object the arms read before the branch; the write "
                          "happens only after the graph")
    return None


def chosen_objects_share_the_layout(owner, chosen: tuple, layout: tuple) -> str | None:
    """W215: each attribute an arm may write to the chosen one that holds an object while
    tracing holds a tensor of the layout the graph is compiled for: the operator's copy
    has that layout, so an arm choosing another would fail the operator where the
    original went on. (An object an arm makes the first time it runs, as a memoized
    ``if not hasattr(...)``, is not there to be checked: the operator then compares its
    layout when the graph runs.)"""
    for attribute in chosen:
        if isinstance(inspect.getattr_static(type(owner), attribute, None), property):
            return failed("W215", f"`{attribute}`, which an arm may choose, is a property")
        value = getattr(owner, attribute, None)
        if value is None:
            continue
        try:
            same = isinstance(value, torch.Tensor) and _layout(value) == layout
        except Exception:  # noqa: BLE001 - a symbolic size that cannot be compared now
            same = False
        if not same:
            return failed(
                "W215", f"`{attribute}`, which an arm may choose, has another shape, strides, dtype or device"
            )
    return None


def why_not_a_plain_buffer(template) -> str | None:
    """W212: the attribute is, while tracing, a plain tensor that no autograd flows
    through: the operator's copy has its shape, dtype, device and strides, and needs no
    gradient (the operator has none)."""
    from graphmend.torch_adapter.tracing import TensorVariable

    if not isinstance(template, TensorVariable):
        return failed("W212", "the attribute the branch writes is not a tensor while tracing")
    example = template.as_proxy().node.meta.get("example_value")
    if example is None or example.requires_grad or example.layout != torch.strided:
        return failed("W212", "the attribute the branch writes requires grad or is not strided")
    if template.python_type() not in PLAIN_TENSOR_TYPES:
        return failed("W212", "the attribute the branch writes is a tensor subclass")
    return None


def is_stand_in(variable) -> bool:
    """Whether a TorchDynamo variable is the copy ``graphmend::perform_choice`` returns."""
    proxy = getattr(variable, "proxy", None)
    node = getattr(proxy, "node", None)
    return node is not None and node.target in (PERFORM_CHOICE, PERFORM_CHOICE.default)


STAND_IN_SITES_ATTRIBUTE = "_graphmend_stand_in_sites"


def keep_stand_ins_out_of_replay(output, graph_break: bool) -> list[tuple[tuple, str]]:
    """Before TorchDynamo compiles a graph: drop its write of each stand-in back to the
    attribute it stands for (the operator wrote the chosen object there already). When a
    stand-in leaves the graph some other way: the sites of the trace's performed choices,
    each with the W301 reason, to refuse."""
    from graphmend import torch_adapter

    choices = getattr(output, STAND_IN_SITES_ATTRIBUTE, None)
    if not choices:
        return []
    sites = sorted({site for site, _, _ in choices})
    reason = failed("W302", trace_reads_nothing_else_written(output, choices))
    if reason is None:
        reason = failed("W301", torch_adapter.drop_stand_in_writes(output, is_stand_in, graph_break))
    return [] if reason is None else [(site, reason) for site in sites]


def trace_reads_nothing_else_written(output, choices) -> str | None:
    """W302: the trace read none of the other attributes the arms write (a memoized
    ``self.long``, ``self.short = self.short.to(d)``). The arms run only when the graph
    runs; a read of one of them in the trace saw it as it was before the branch, where
    the original, after the branch, sees what the arms left. (Conservative: a read
    before the branch counts too.)"""
    from graphmend.torch_adapter import guards

    read = guards.guarded_names(output)
    for _site, owner_name, also_written in choices:
        for attribute in also_written:
            prefix = f"{owner_name}.{attribute}"
            if any(name == prefix or name.startswith((prefix + ".", prefix + "[")) for name in read):
                return f"the trace reads `{attribute}`, which the branch's arms write when the graph runs"
    return None
