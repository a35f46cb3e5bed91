"""Deciding inside TorchDynamo's trace, and finding the user's statement in it.

A runtime function that TorchDynamo traces asks, through ``comptime``, about the values
it holds at that point (``decide_in_trace``); the answer is a constant of the trace.
``Numbering`` gives hashable values met while tracing (a message, a template) the
number a graph names them by. The user's statement being traced is the first frame
outside graphmend's runtime (``user_translator``, ``user_site``).
"""

from __future__ import annotations

import os
import threading

_RUNTIME_DIRECTORY = os.path.dirname(os.path.abspath(__file__))


def current_translator():
    """TorchDynamo's innermost instruction translator, or None when not tracing."""
    from graphmend.torch_adapter.tracing import root_translator

    root = root_translator()
    if root is None:
        return None
    return root.output.current_tx


def _python_constant(variable):
    return variable.as_python_constant()


def decide_in_trace(context, result_name: str, argument_names: tuple, decide, read=_python_constant) -> None:
    """Run by TorchDynamo (``comptime``) inside a runtime function it traces: call
    ``decide(translator, *arguments)`` with that function's arguments as Python
    constants (or as ``read`` makes them from TorchDynamo's variables) and bind its local
    ``result_name`` to the answer. The answer is a constant of the trace: no guard, and,
    unlike ``assume_constant_result``, no global written into the user's module.
    Anything unexpected leaves the local as it was (the statement keeps its break)."""
    try:
        from graphmend.torch_adapter.tracing import constant_variable, translator_of

        translator = translator_of(context)
        arguments = [read(translator.symbolic_locals[name]) for name in argument_names]
        answer = decide(translator, *arguments)
        translator.symbolic_locals[result_name] = constant_variable(answer)
    except Exception:  # noqa: BLE001 - TorchDynamo internals changed, or a value is not constant
        pass


class Numbering:
    """Numbers for hashable values met while tracing (a message, a template), so that a
    graph names the value by a constant int; the values, by number, for the operators
    that run the graph."""

    def __init__(self):
        self._lock = threading.Lock()
        self.values: list = []
        self._numbers: dict = {}

    def number(self, value) -> int:
        with self._lock:
            known = self._numbers.get(value)
            if known is None:
                known = self._numbers[value] = len(self.values)
                self.values.append(value)
            return known

    def decide(self, context, argument_name: str) -> None:
        """``comptime`` body: bind the traced function's local ``number`` to the number
        of its argument ``argument_name``."""
        decide_in_trace(context, "number", (argument_name,), lambda _tracer, value: self.number(value))


def is_runtime_file(filename: str) -> bool:
    """Whether ``filename`` is one of graphmend's runtime modules."""
    return os.path.dirname(os.path.abspath(filename)) == _RUNTIME_DIRECTORY


def user_site(translator) -> tuple[str, int] | None:
    """(file, line) of the user's statement being traced, or None."""
    translator = user_translator(translator)
    return None if translator is None else (translator.f_code.co_filename, translator.lineno)


def user_translator(translator):
    """The translator of the first traced frame outside graphmend's runtime, from
    ``translator`` outwards (the user's statement that called into the runtime)."""
    while translator is not None:
        if not is_runtime_file(translator.f_code.co_filename):
            return translator
        translator = getattr(translator, "parent", None)
    return None
