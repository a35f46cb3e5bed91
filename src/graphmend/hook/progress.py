"""What a run that rewrites modules shows on a terminal.

A first ``graphmend run --package transformers`` rewrites hundreds of modules, for tens
of seconds, before the program prints anything. On a terminal (stderr a tty) it says
once where the rewritten modules are cached, keeps one line updated with how many it
has rewritten and of which package, and ends that line with the totals. Anywhere else
(a pipe, a file, CI logs) it writes nothing: the program's stderr stays its own.
"""

from __future__ import annotations

import sys
import time
from collections import Counter

# The progress line is redrawn at most this often (seconds).
_REDRAW_INTERVAL = 0.1
_CLEAR_LINE = "\r\x1b[K"


class Progress:
    """Counts the modules rewritten (not read from the cache) and shows them on
    ``stream`` (default: ``sys.stderr`` as it is when something is shown).

    A line is ended when the outermost import that rewrote modules returns
    (``import_started``/``import_ended``), before the program goes on to print its own."""

    def __init__(self, cache_location: str, stream=None):
        self.cache_location = cache_location
        self._stream = stream
        self.rewritten: Counter[str] = Counter()
        self._shown: Counter[str] = Counter()
        self._announced = False
        self._line_open = False
        self._last_drawn = 0.0
        self._depth = 0

    @property
    def stream(self):
        return self._stream if self._stream is not None else sys.stderr

    def on_terminal(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError, OSError):  # closed or replaced stderr
            return False

    def import_started(self) -> None:
        self._depth += 1

    def import_ended(self) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth == 0:
            self.finish()

    def rewrote(self, module_name: str) -> None:
        package = module_name.partition(".")[0]
        self.rewritten[package] += 1
        if not self.on_terminal():
            return
        self._shown[package] += 1
        if not self._announced:
            self._announced = True
            self._write(f"graphmend: rewriting modules as they are imported; {self.cache_location}\n")
        now = time.monotonic()
        if self._line_open and now - self._last_drawn < _REDRAW_INTERVAL:
            return
        self._last_drawn = now
        self._write(f"{_CLEAR_LINE}graphmend: rewriting {package}: {_modules(sum(self._shown.values()))}")
        self._line_open = True

    def finish(self) -> None:
        """End the progress line with what it counted (nothing when no line is open)."""
        if not self._line_open:
            return
        self._line_open = False
        by_package = ", ".join(f"{name} {count}" for name, count in self._shown.most_common())
        self._write(f"{_CLEAR_LINE}graphmend: rewrote {_modules(sum(self._shown.values()))} ({by_package})\n")
        self._shown.clear()

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (AttributeError, ValueError, OSError):
            pass


def _modules(count: int) -> str:
    return f"{count} module{'s' if count != 1 else ''}"


def describe_cache(use_cache: bool, cache_folder: str | None) -> str:
    """Where rewritten modules are cached, in words (``cache_folder`` None: next to each
    module)."""
    if not use_cache:
        return "not cached (--no-cache)"
    if cache_folder is None:
        if sys.pycache_prefix:
            return f"cached under {sys.pycache_prefix}"
        return "cached in each module's __pycache__ folder"
    return f"cached in {cache_folder}"
