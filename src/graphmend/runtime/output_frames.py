"""The logging module's own frames run eagerly, as the original's output calls left them.

TorchDynamo decides once per code object, on the first call it sees from eager code,
whether to compile a function's frames: one with no tensor among its locals it skips,
for good. The original program's logging calls break their graphs and run eagerly
under TorchDynamo, and the first usually carries no tensor, so ``Logger.warning``,
``Logger._log``, ``Logger.makeRecord`` and ``LogRecord.__init__`` are skipped for the rest
of the run. Defer moves such calls into the graph, where that first eager call is never
made; a later one that is (a call Defer refused, or one in a frame TorchDynamo gave
up), with a tensor among its arguments, then has logging compiled: every one of its
frames breaks, and ``LogRecord.__init__`` guards on the record's creation time, so it
compiles again on every call (a program of eight breaks made fifteen).

So while graphmend's patches are active, TorchDynamo takes a frame of the logging
package for one with no tensor, the decision it made for the original's first call,
and runs it eagerly, as eager code does. Whether the original's first call carried a
tensor or not, the mended program then compiles no more of logging than the original
did. Logging calls TorchDynamo handles inside a traced frame are not frames of their
own: they are traced (or break) exactly as before.
"""

from __future__ import annotations

import logging
import os

_LOGGING_DIRECTORY = os.path.dirname(os.path.abspath(logging.__file__)) + os.sep


def is_logging_code(code) -> bool:
    """Whether ``code`` is a function of the logging package (or a resume function
    TorchDynamo made from one, which keeps its file)."""
    filename = getattr(code, "co_filename", "") or ""
    return filename.startswith(_LOGGING_DIRECTORY)


def _logging_frames_hold_no_tensor(original):
    """Wraps TorchDynamo's ``has_tensor_in_frame``: false for a frame of logging."""

    def has_tensor_in_frame(frame) -> bool:
        if is_logging_code(frame.f_code):
            return False
        return original(frame)

    return has_tensor_in_frame
