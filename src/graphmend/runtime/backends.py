"""Which backend compiles a trace's graph, as the whole-trace checks need to know it:
one that runs the graph as written (TorchDynamo's ``eager``, a backend that returns its
graph unchanged, one marked ``runs_the_graph_as_written``), one that keeps its ops in
order (``aot_eager``, or marked ``keeps_graph_order``), or another.
"""

from __future__ import annotations


def backend_is(output, names: tuple[str, ...], marker: str | None) -> bool:
    """Whether the backend compiling ``output`` is one of TorchDynamo's registered
    ``names`` (through the wrappers torch puts around it), one marked with ``marker`` =
    True, or one that runs its graph as given (``returns_its_graph_unchanged``: as
    TorchDynamo's ``eager`` does, which each of ``names`` covers)."""
    try:
        from graphmend.torch_adapter.tracing import backends_named, is_torch_compiles_inductor

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
        if "inductor" in names and is_torch_compiles_inductor(backend):
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


def backend_runs_the_graph_as_written(output) -> bool:
    """Whether the backend compiling ``output`` runs the graph's ops as traced, one by one
    on the real tensors, with no tracing of its own (TorchDynamo's ``eager``)."""
    return backend_is(output, ("eager",), "runs_the_graph_as_written")


def backend_keeps_graph_order(output) -> bool:
    """Whether the backend compiling ``output`` runs the graph's ops in their order."""
    return backend_is(output, ("eager", "aot_eager"), "keeps_graph_order")


def backend_keeps_effects_in_order(output) -> bool:
    """Whether the backend compiling ``output`` runs the graph's ordered-effect operators
    (graphmend's output) in their order: one that keeps all its ops in order, or inductor,
    which schedules other operators freely but threads AOTAutograd's effect tokens
    through the ordered ones, each waiting for the one before."""
    return backend_keeps_graph_order(output) or backend_is(output, ("inductor",), None)
