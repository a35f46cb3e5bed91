"""Which locals a resume function of mended code takes: TorchDynamo's liveness, made exact.

At a graph break TorchDynamo passes the resume function each local that may be read
later (``bytecode_analysis.livevars_analysis``). Its walk is path-insensitive past the
first jump: a local written after a jump and read after that write counts as read. The
branches graphmend writes (``if not __graphmend__.is_compiling(): ... else: ...``) put
such a jump before code that the original ran straight through, so a local the original
left dead (``h = ...`` on one arm, rebound before any read) became live in mended code.
A resume function's identity includes the names it takes: where a call had bound the
local and another had not, the mended frame compiled two resume functions where the
original compiled one (fuzz 840628: a graph and a break more).

For code that calls graphmend's runtime, the live set is intersected with the exact one:
the usual backward dataflow over the instructions, where a read counts only if some path
reaches it from the place without a write before it. An exception handler sees every
local as it was before the raising instruction, so what the handler reads counts as
read at every instruction it covers. TorchDynamo's own set is never widened.
"""

from __future__ import annotations

from graphmend.rewrite.templates import RUNTIME_NAME


def _calls_the_runtime(instructions) -> bool:
    return any(instruction.argval == RUNTIME_NAME and instruction.opname == "LOAD_GLOBAL" for instruction in instructions)


def exact_live_names(instructions, place) -> set[str]:
    """The locals some path from ``place`` reads before writing them. Raises
    NotImplementedError for an instruction on locals it does not know."""
    index = next(index for index, instruction in enumerate(instructions) if instruction is place)
    return set(live_sets(instructions)[index])


def live_sets(instructions) -> list[frozenset[str]]:
    """``exact_live_names`` at each instruction, in order."""
    from torch._dynamo.bytecode_analysis import HASFREE, HASLOCAL, JUMP_OPCODES, TERMINAL_OPCODES

    index_of = {id(instruction): index for index, instruction in enumerate(instructions)}
    count = len(instructions)
    reads: list[str | None] = [None] * count
    writes: list[str | None] = [None] * count
    following: list[tuple[int, ...]] = [()] * count
    handlers: list[int | None] = [None] * count
    for index, instruction in enumerate(instructions):
        if instruction.opcode in HASLOCAL or instruction.opcode in HASFREE:
            if "LOAD" in instruction.opname or "DELETE" in instruction.opname:
                reads[index] = instruction.argval
            elif "STORE" in instruction.opname:
                writes[index] = instruction.argval
            elif instruction.opname != "MAKE_CELL":
                raise NotImplementedError(instruction.opname)
        after = []
        if instruction.opcode in JUMP_OPCODES:
            after.append(index_of[id(instruction.target)])
        if instruction.opcode not in TERMINAL_OPCODES and index + 1 < count:
            after.append(index + 1)
        following[index] = tuple(after)
        entry = getattr(instruction, "exn_tab_entry", None)
        if entry is not None:
            handlers[index] = index_of[id(entry.target)]
    live: list[frozenset[str]] = [frozenset()] * count
    changed = True
    while changed:
        changed = False
        for index in range(count - 1, -1, -1):
            names: set[str] = set()
            for successor in following[index]:
                names |= live[successor]
            if writes[index] is not None:
                names.discard(writes[index])
            if reads[index] is not None:
                names.add(reads[index])
            if handlers[index] is not None:
                names |= live[handlers[index]]
            if names != live[index]:
                live[index] = frozenset(names)
                changed = True
    return live


def exact_for_mended_code(livevars_analysis):
    """Wrap TorchDynamo's ``livevars_analysis``: for code that calls graphmend's runtime,
    its set less the locals no path reads."""

    def analysed(instructions, instruction):
        live = livevars_analysis(instructions, instruction)
        if not _calls_the_runtime(instructions):
            return live
        try:
            return live & exact_live_names(instructions, instruction)
        except (NotImplementedError, KeyError, AttributeError, StopIteration):  # an instruction this analysis does not know
            return live

    analysed._graphmend_wrapped = True
    return analysed
