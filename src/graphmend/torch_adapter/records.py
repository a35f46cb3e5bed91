"""Where ``graphmend.dynamo_records`` listens to TorchDynamo: the graph-break messages
it formats, the breaks it logs, its structured trace, and the user stack of a break.

Each hook returns what puts TorchDynamo back as it was. Imported only while recording.
"""

from __future__ import annotations

from collections.abc import Callable


def wrap_break_message_formatting(wrap: Callable) -> Callable[[], None]:
    """Replace ``torch._dynamo.exc.format_graph_break_message`` (``gb_type, context,
    explanation, hints`` -> the message) with ``wrap(original)``; returns the undo."""
    import torch._dynamo.exc as dynamo_exc

    format_message = dynamo_exc.format_graph_break_message
    dynamo_exc.format_graph_break_message = wrap(format_message)
    return lambda: setattr(dynamo_exc, "format_graph_break_message", format_message)


def wrap_break_logging(wrap: Callable) -> Callable[[], None]:
    """Replace the translators' ``log_graph_break(self, code_options, reason, exc)``,
    which TorchDynamo calls at each graph break, with ``wrap(original)``; returns the
    undo."""
    from torch._dynamo.symbolic_convert import InstructionTranslatorBase

    log_graph_break = InstructionTranslatorBase.log_graph_break
    InstructionTranslatorBase.log_graph_break = wrap(log_graph_break)
    return lambda: setattr(InstructionTranslatorBase, "log_graph_break", log_graph_break)


def structured_trace_log():
    """The logger of TorchDynamo's structured trace (graphs, recompilations), whose
    records carry each event's name and metadata."""
    import torch._logging._internal as logging_internal

    return logging_internal.trace_log


def traced_user_stack():
    """The user frames TorchDynamo is tracing now, outermost first (frame summaries)."""
    import torch

    return torch._guards.TracingContext.extract_stack()


def graph_break_documentation_links() -> Callable[[str], str]:
    """TorchDynamo's function from a graph-break type to its documentation page (which
    raises for a type it has none for)."""
    from torch._dynamo.exc import get_gbid_documentation_link

    return get_gbid_documentation_link
