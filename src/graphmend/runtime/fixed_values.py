"""Where's tests and paddings computed from a module's fixed tensors
(``rules/where/fixed_values.py``).

A module may keep numbers it never changes as one-element tensors: a convolution's
stride and kernel size registered as non-persistent buffers (``nn.Buffer(torch.tensor(2),
persistent=False)``), or set as plain attributes. A branch on a value computed from
them and from static sizes (``if length <= max_pad:``), or a padding made of such values
(``F.pad(x, (self.padding_total, extra_padding))``), makes TorchDynamo break the graph: it
does not read tensor values while tracing. Every call computes the same value, from the
same tensors, as the original does eagerly.

While traced, ``truth(value)`` and ``numbers(value)`` compute that value from the real
tensors, with the operators the graph recorded, and answer with the Python bool (or the
Python ints) the original reads at the break; each tensor read is guarded on its value
(``tensor.item() == v`` before every call), so a call where one differs traces again.
Otherwise, and not tracing, they answer with ``value`` itself, and the original test or
call runs with its break. A decided value is a DECIDED claim on the original's break
(``graphmend.runtime.claims``), which the checks of the whole trace may refuse.

Decided only when (each registered in ``graphmend.core.legality``):

- ``W216 value_computed_from_fixed_tensors``: the value is a one-element tensor the graph
  computed only from constants, static sizes and tensors the frame reads as a module's
  non-persistent buffer or plain attribute: one element of an integer or bool dtype,
  requiring no gradient, on a device that holds values. Parameters, persistent buffers
  (a step counter saved with the model) and the frame's inputs change between calls.
- ``W217 computed_by_pure_operators``: every operator between those tensors and the value
  is arithmetic, a comparison, a rounding or a conversion that writes nothing and draws
  no random number, so computing it again gives the graph's value.
- ``W218 fixed_tensors_not_written``: no fixed tensor was written in place in the trace so
  far, through a view of it or a tensor it is a view of too, and none has changed value
  since an earlier trace of this program read it, nor holds a value no earlier trace
  of the same frame read at the same statement (a tensor the program updates between
  calls, or modules with different values passed to one function, would make every
  call trace again; such a statement is decided no more, in any frame), unless a trace
  read the value there at the same static sizes, or every earlier trace that read
  another value there had a graph input of other static sizes (the layers of an
  encoder, each compiled as a frame of its own): that trace's size guard fails the
  call, so the original traces again for it too. Where the module is the frame's own
  argument (a ``forward`` compiled as a frame of its own), no other live module of its
  class with the same parameters and buffers holds another value: the original's one
  trace would serve it, which the first trace cannot tell from a later one at other
  sizes. And no method of the module's class but ``__init__`` writes the tensor (a step
  counter its ``forward`` bumps before TorchDynamo's break, read after it, would fail
  the next call's guard).

And, once the trace is complete (``graphmend.runtime.whole_trace_conditions``):

- ``W303 fixed_tensors_not_written_later``: the graph writes none of the fixed tensors a
  decision read after it (a counter the forward bumps, ``self.k += 1``): the next call's
  guard on its value would fail and trace again, where the original's one trace serves.
"""

from __future__ import annotations

import builtins
import dis
import functools
import itertools
import operator

import torch

from graphmend.core.legality import failed
from graphmend.runtime import claims, trace_decisions
from graphmend.runtime.graph_inspection import ancestors
from graphmend.runtime.store import store
from graphmend.torch_adapter.tracing import (
    comptime,
    graph_input_of,
    modules_the_trace_may_serve,
    realized,
    static_input_sizes,
    tensor_attribute_owner,
)

_ARITHMETIC = (
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
    operator.neg, operator.pos, operator.abs, operator.lt, operator.le, operator.gt, operator.ge,
    operator.eq, operator.ne, operator.and_, operator.or_, operator.xor, operator.invert, operator.not_,
    operator.truth, builtins.max, builtins.min, builtins.abs,
)
_TORCH_FUNCTIONS = (
    torch.add, torch.sub, torch.mul, torch.div, torch.true_divide, torch.floor_divide, torch.remainder,
    torch.neg, torch.abs, torch.ceil, torch.floor, torch.round, torch.trunc, torch.maximum, torch.minimum,
    torch.clamp, torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge, torch.logical_and,
    torch.logical_or, torch.logical_not,
)
_PURE_FUNCTIONS = frozenset(_ARITHMETIC + _TORCH_FUNCTIONS)
_PURE_METHODS = frozenset({
    "to", "long", "int", "float", "double", "bool", "ceil", "floor", "round", "trunc", "clamp", "abs",
    "neg", "add", "sub", "mul", "div", "floor_divide", "remainder", "maximum", "minimum",
    "__add__", "__sub__", "__mul__", "__truediv__", "__floordiv__", "__mod__", "__neg__",
    "__radd__", "__rsub__", "__rmul__", "__rtruediv__", "__rfloordiv__",
    "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__and__", "__or__", "__invert__",
})
_MADE_FROM_CONSTANTS = frozenset({torch.tensor, torch.as_tensor, torch.scalar_tensor})
_FIXED_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
})

# The number of a trace, on its output graph, and where the numbers come from (W218).
_TRACE_NUMBER = "_graphmend_fixed_values_trace"
_trace_numbers = itertools.count()


def truth(value):
    """While traced: ``bool(value)`` where ``value`` is computed from fixed tensors, else
    ``value``. Not tracing: ``value``."""
    answer = value
    if torch.compiler.is_compiling():
        comptime(_decide_truth)
    return answer


def numbers(value):
    """While traced: the tuple or list ``value`` with each tensor computed from fixed
    tensors replaced by its Python int, where every tensor item is; else ``value``. Not
    tracing: ``value``."""
    answer = value
    if torch.compiler.is_compiling():
        comptime(_decide_numbers)
    return answer


def _decide_truth(context) -> None:
    trace_decisions.decide_in_trace(context, "answer", ("value",), _truth_of, read=realized)


def _decide_numbers(context) -> None:
    trace_decisions.decide_in_trace(context, "answer", ("value",), _numbers_of, read=realized)


class _Keep(Exception):
    """The value is not decided: the local keeps the traced value."""


def _truth_of(translator, value):
    from graphmend.torch_adapter.tracing import TensorVariable

    if type(value) is not TensorVariable:
        raise _Keep  # a Python value: no break to remove, nothing to record
    folded, guarded = _fold_or_decline(translator, value)
    if not claims.claim_break_at_user_site(translator, claims.DECIDED):
        raise _Keep
    _guard(guarded)
    _note_read(translator, guarded)
    return bool(folded)


def _numbers_of(translator, value):
    from graphmend.torch_adapter.tracing import (
        BaseListVariable,
        ConstantVariable,
        SymNodeVariable,
        TensorVariable,
    )

    if not isinstance(value, BaseListVariable) or type(value).__name__ not in ("TupleVariable", "ListVariable"):
        raise _Keep
    items = [realized(item) for item in value.items]
    if not any(type(item) is TensorVariable for item in items) or any(
        type(item) is not TensorVariable and (type(item) is SymNodeVariable or type(item) is not ConstantVariable)
        for item in items
    ):
        raise _Keep
    answer, guarded = [], []
    for item in items:
        if type(item) is ConstantVariable:
            answer.append(item.as_python_constant())
            continue
        folded, reads = _fold_or_decline(translator, item)
        if folded.dtype not in _FIXED_DTYPES or folded.dtype is torch.bool:
            claims.decline_at_user_site(
                translator, failed("W216", "value_computed_from_fixed_tensors: a padding is not an integer tensor")
            )
            raise _Keep
        answer.append(int(folded))
        guarded.extend(reads)
    if not claims.claim_break_at_user_site(translator, claims.DECIDED):
        raise _Keep
    _guard(guarded)
    _note_read(translator, guarded)
    return tuple(answer) if type(value).__name__ == "TupleVariable" else answer


def _fold_or_decline(translator, variable):
    """(the value computed again from the real tensors, the fixed tensors read) or, with
    the reason recorded where the user's statement is, ``_Keep``."""
    folded = _fold(translator, variable)
    if isinstance(folded, str):
        claims.decline_at_user_site(translator, folded)
        raise _Keep
    return folded


def _fold(translator, variable):
    from graphmend.torch_adapter.tracing import TensorVariable

    if type(variable) is not TensorVariable:
        return failed("W216", "value_computed_from_fixed_tensors: the value is not a tensor of the graph")
    node = variable.as_proxy().node
    fake = node.meta.get("example_value")
    if not isinstance(fake, torch.Tensor) or not all(type(size) is int for size in fake.shape) or fake.numel() != 1:
        return failed("W216", "value_computed_from_fixed_tensors: the value does not have one element by a static size")
    values: dict = {}
    reads: list = []
    order = ancestors(node)
    inputs = {}
    for current in order:
        if current.op == "placeholder":
            found = graph_input_of(current)
            inputs[current] = (found, tensor_attribute_owner(translator, found[0]) if found is not None else None)
    if not any(owner is not None for _found, owner in inputs.values()):
        # Computed from the frame's own inputs alone: a branch on data, not this rule's.
        raise _Keep
    for current in order:
        if current.op == "placeholder":
            reason = _fixed_input(translator, current, *inputs[current], values, reads)
        elif current.op not in ("call_function", "call_method"):
            reason = failed("W217", f"computed_by_pure_operators: the value reads a `{current.op}` node of the graph")
        else:
            reason = why_not_computed_again(current, values)
        if reason is not None:
            return reason
    result = values[node]
    if not isinstance(result, torch.Tensor) or result.numel() != 1:
        return failed("W216", "value_computed_from_fixed_tensors: the value does not have one element")
    return result, reads


def _fixed_input(translator, node, found, owner, values, reads) -> str | None:
    reason = why_not_a_fixed_tensor(found, owner) or why_written_or_changed(node, owner, found, translator)
    if reason is not None:
        return reason
    source, tensor = found
    values[node] = tensor
    reads.append((source, tensor.item(), tensor))
    return None


def why_not_a_fixed_tensor(found, owner) -> str | None:
    """W216: the graph input is a module's non-persistent buffer or plain tensor
    attribute (not a parameter, requiring no grad, a plain tensor) of one integer or
    bool element, on a device that holds values."""
    if found is None:
        return failed("W216", "value_computed_from_fixed_tensors: the value reads a graph input that is not a tensor")
    if owner is None:
        return failed(
            "W216", "value_computed_from_fixed_tensors: the value reads a tensor that is not a module's buffer or "
            "attribute (the frame's input: its values, or a size of it that is not static)"
        )
    _source, tensor = found
    module, name, is_buffer = owner
    if is_buffer and name not in module._non_persistent_buffers_set:
        return failed("W216", f"value_computed_from_fixed_tensors: `{name}` is a persistent buffer, which may change")
    if isinstance(tensor, torch.nn.Parameter) or tensor.requires_grad or type(tensor) is not torch.Tensor:
        return failed("W216", f"value_computed_from_fixed_tensors: `{name}` is a parameter or requires grad")
    if tensor.dtype not in _FIXED_DTYPES or tensor.numel() != 1 or tensor.device.type == "meta":
        return failed("W216", f"value_computed_from_fixed_tensors: `{name}` is not one integer or bool element")
    return None


def why_written_or_changed(node, owner, found, translator) -> str | None:
    """W218: the trace so far wrote no fixed tensor in place, and none changed value
    since an earlier trace read it, nor holds another value than an earlier trace of
    the same frame read at the same place (a module passed as an argument: each module
    with its own value would trace again, up to TorchDynamo's recompile limit, where the
    original's one trace serves them all). Values read at the statement within one trace
    (two convolutions with different strides, one code), or by different frames (an
    encoder's and a decoder's, compiled apart) are not told apart."""
    module, name, _is_buffer = owner
    writer = method_writing(type(module), name)
    if writer is not None:
        return failed(
            "W218", f"fixed_tensors_not_written: `{writer}` writes `{name}`, which a call may change before "
            "the next one reads it"
        )
    value = found[1].item()
    seen = store.fixed_values_read.setdefault(module, {})
    if seen.setdefault(name, value) != value:
        return failed("W218", f"fixed_tensors_not_written: `{name}` changed value since an earlier trace read it")
    if not _read_before_at_site(translator, value):
        return failed(
            "W218", f"fixed_tensors_not_written: `{name}` holds a value no earlier trace read at this statement"
        )
    if _another_module_holds_another(translator, found[0], name, value):
        return failed(
            "W218", f"fixed_tensors_not_written: another `{type(module).__name__}` the frame may be called with "
            f"holds another `{name}`"
        )
    if graph_writes_memory_of(node.graph, found[1]):
        return failed("W218", f"fixed_tensors_not_written: `{name}` is written in place in this trace")
    return None


_IN_PLACE_FOLLOWERS = frozenset({"LOAD_METHOD", "LOAD_ATTR"})
_INDEX_LOADS = frozenset({"LOAD_CONST", "LOAD_FAST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF"})


@functools.cache
def method_writing(module_class: type, name: str) -> str | None:
    """The qualified name of a function of ``module_class`` (its own or inherited, not
    ``nn.Module``'s, not ``__init__``) whose code writes an attribute ``name``: stores
    it (``self.step += 1``), calls an in-place method on it (``self.step.add_(1)``) or
    assigns an item of it; else None. Such a module changes the tensor between calls
    (a step counter), and each call would trace again where the original's one trace
    serves every call."""
    for klass in module_class.__mro__:
        if klass in (torch.nn.Module, object):
            continue
        for attribute, member in vars(klass).items():
            if attribute == "__init__":
                continue
            function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            code = getattr(function, "__code__", None)
            if code is not None and _code_writes(code, name):
                return f"{klass.__name__}.{attribute}"
    return None


def _code_writes(code, name: str) -> bool:
    instructions = list(dis.get_instructions(code))
    for index, instruction in enumerate(instructions):
        if instruction.opname == "STORE_ATTR" and instruction.argval == name:
            return True
        if instruction.opname in _IN_PLACE_FOLLOWERS and instruction.argval == name:
            following = instructions[index + 1:index + 3]
            if following and following[0].opname in _IN_PLACE_FOLLOWERS and _in_place(following[0].argval):
                return True
            if len(following) == 2 and following[0].opname in _INDEX_LOADS and following[1].opname == "STORE_SUBSCR":
                return True
    return any(_code_writes(constant, name) for constant in code.co_consts if hasattr(constant, "co_code"))


def _in_place(method: str) -> bool:
    return isinstance(method, str) and method.endswith("_") and not method.endswith("__")


def _another_module_holds_another(translator, source, name: str, value) -> bool:
    """Whether a module the frame's one trace would serve in the original, in place of
    the one traced, holds another value in ``name``: each would trace again, where the
    original traces once for both (two padders of one class, each ``forward`` compiled
    as a frame of its own from a loop TorchDynamo gives up)."""
    for other in modules_the_trace_may_serve(translator, source):
        held = getattr(other, name, None)
        if not isinstance(held, torch.Tensor) or held.numel() != 1 or held.item() != value:
            return True
    return False


def _read_before_at_site(translator, value) -> bool:
    """Whether ``value`` may be read at the user's statement being traced: an earlier
    trace of this frame's code read it there with the same static sizes, or every
    earlier trace that read another value there had a graph input of other static sizes
    (its guards fail this call in the original too, which would otherwise reuse its
    graph); and no frame traced again met another value there. The value is noted for
    this trace."""
    from graphmend.torch_adapter import current_compile_key
    from graphmend.torch_adapter.tracing import frame_code_of

    site = trace_decisions.user_site(translator)
    if site in store.fixed_values_varying_sites:
        return False
    output = translator.output
    trace = getattr(output, _TRACE_NUMBER, None)
    if trace is None:
        # The restarts of one frame conversion are one trace: values the first attempt
        # read are no other trace's.
        trace = current_compile_key() or next(_trace_numbers)
        setattr(output, _TRACE_NUMBER, trace)
    code = frame_code_of(translator)
    known = store.fixed_values_read_at.setdefault(site, {}).setdefault(code, {})
    sizes = store.fixed_values_trace_sizes.setdefault(trace, static_input_sizes(output.graph))

    def same_sizes(reader) -> bool:
        return not _sizes_differ(store.fixed_values_trace_sizes.get(reader, {}), sizes)

    read_at_these_sizes = any(same_sizes(reader) for reader in known.get(value, ()))
    if not read_at_these_sizes and any(
        reader != trace and same_sizes(reader) for other, readers in known.items() if other != value for reader in readers
    ):
        # The other statements this frame decided read the same modules: in the frames
        # that resume after this break, they would meet the other values for the first
        # time, and trace once more each.
        store.fixed_values_varying_sites.update(store.fixed_values_sites_read_in.get(code, ()), (site,))
        return False
    known.setdefault(value, set()).add(trace)
    store.fixed_values_sites_read_in.setdefault(code, set()).add(site)
    return True


def _sizes_differ(earlier: dict[str, tuple[int, ...]], current: dict[str, tuple[int, ...]]) -> bool:
    """Whether a graph input both traces read has other static sizes in each: the earlier
    trace's size guard fails the current call, so the original traces again for it too."""
    return any(name in current and current[name] != shape for name, shape in earlier.items())


_WRITING_OPERATORS = (operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv)


def graph_writes_memory_of(graph, tensor) -> bool:
    """Whether a node of ``graph`` writes in place (an in-place method or function, an
    item assignment, an ``out=`` argument) a tensor computed from a graph input that
    shares its memory with ``tensor``: the fixed tensor itself, a view of it
    (``self.k.view(1).add_(1)``), or the tensor it is a view of, another input. A
    written tensor computed from such an input is taken as written through it."""
    memory = _memory_of(tensor)
    for node in graph.nodes:
        for written in _written_by(node):
            for ancestor in ancestors(written):
                found = graph_input_of(ancestor)
                if found is not None and (memory is None or _memory_of(found[1]) in (memory, None)):
                    return True
    return False


def _written_by(node) -> list:
    """The graph nodes ``node`` writes in place."""
    from torch.fx import Node

    if node.op not in ("call_function", "call_method"):
        return []
    out = node.kwargs.get("out")
    if out is not None:
        return [item for item in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(item, Node)]
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if ((name.endswith("_") and not name.endswith("__")) or target in _WRITING_OPERATORS) and node.args:
        return [node.args[0]] if isinstance(node.args[0], Node) else []
    return []


def _memory_of(tensor):
    """Where ``tensor``'s elements are kept, or None where that cannot be told."""
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - a tensor with no storage of its own (sparse, a subclass)
        return None


def why_not_computed_again(node, values) -> str | None:
    """W217: ``node`` is a pure operator; computed again on the real values."""
    if "out" in node.kwargs:
        return failed("W217", "computed_by_pure_operators: an operator writes into `out=`")
    if node.op == "call_function":
        if node.target in _MADE_FROM_CONSTANTS:
            if node.all_input_nodes:
                return failed("W217", "computed_by_pure_operators: a tensor is made from values of the graph")
        elif node.target not in _PURE_FUNCTIONS:
            return failed("W217", f"computed_by_pure_operators: `{getattr(node.target, '__name__', node.target)}` is not known to be pure")
        function = node.target
    else:
        if node.target not in _PURE_METHODS:
            return failed("W217", f"computed_by_pure_operators: `.{node.target}()` is not known to be pure")

        def function(receiver, *arguments, **keywords):
            return getattr(receiver, node.target)(*arguments, **keywords)

    arguments, keywords = _real(node.args, values), _real(node.kwargs, values)
    if _symbolic(arguments) or _symbolic(keywords):
        return failed("W216", "value_computed_from_fixed_tensors: the value reads a size that is not static")
    try:
        with torch.no_grad():
            values[node] = function(*arguments, **keywords)
    except Exception as error:  # noqa: BLE001 - the original raises it at its break, eagerly
        return failed("W217", f"computed_by_pure_operators: computing it again raised {type(error).__name__}")
    return None


def _real(argument, values):
    from torch.fx import Node

    if isinstance(argument, Node):
        return values[argument]
    if isinstance(argument, (tuple, list)):
        return type(argument)(_real(item, values) for item in argument)
    if isinstance(argument, dict):
        return {key: _real(item, values) for key, item in argument.items()}
    return argument


def _symbolic(argument) -> bool:
    if isinstance(argument, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(argument, (tuple, list)):
        return any(_symbolic(item) for item in argument)
    if isinstance(argument, dict):
        return any(_symbolic(item) for item in argument.values())
    return False


def _note_read(translator, reads) -> None:
    """Keep, by the claim just made, the fixed tensors read: the whole trace refuses the
    claim where the graph writes one later
    (``whole_trace_conditions.fixed_tensors_not_written_later``)."""
    site = claims.latest_claim_site(translator.output)
    if site is not None:
        noted = claims.fixed_reads_in_trace(translator.output).setdefault(site, [])
        noted.extend(tensor for _source, _value, tensor in reads)


def _guard(reads) -> None:
    from graphmend.torch_adapter import guards

    if reads:
        guards.install_guards(*[(guards.item_source(source), guards.EQUAL) for source, _value, _tensor in reads])
