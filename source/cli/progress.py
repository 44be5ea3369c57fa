"""Progress of long commands on stderr: one redrawn line on a terminal, a few plain lines otherwise.

    with Progress("run", total=100, quiet=args.quiet) as bar:
        for _ in range(100):
            work()
            bar.step()

On a TTY the line is redrawn in place (``\\r``) at most ten times a second; off a TTY (a log, a pipe,
CI) a plain line is written at each tenth of the work and at the end, so logs stay short. ``quiet``
writes nothing. Progress never touches stdout: the command's results stay machine-readable there.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30
REDRAW_SECONDS = 0.1
PLAIN_LINES = 10


class Progress:
    """A counter of ``total`` steps labelled ``label``; ``detail`` adds text after the count."""

    def __init__(self, label: str, total: int, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.label, self.total, self.quiet = label, max(int(total), 0), quiet
        self.stream = stream if stream is not None else sys.stderr
        self.tty = not quiet and bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = 0
        self.start = time.perf_counter()
        self._drawn = 0.0
        self._next_plain = 1
        self._open = False

    def step(self, n: int = 1, detail: str = "") -> None:
        """``n`` more steps done; draw when it is time to."""
        self.done = min(self.done + n, self.total) if self.total else self.done + n
        if self.quiet:
            return
        if self.tty:
            now = time.perf_counter()
            if now - self._drawn >= REDRAW_SECONDS or self.done == self.total:
                self._drawn = now
                self.stream.write("\r" + self._line(detail) + "\x1b[K")
                self.stream.flush()
                self._open = True
            return
        # NOTE: off a terminal a line at each tenth: a 10,000-case run writes 10 lines, not 10,000
        tenth = self.done * PLAIN_LINES // self.total if self.total else self.done
        if tenth >= self._next_plain or self.done == self.total:
            self._next_plain = tenth + 1
            self.stream.write(self._line(detail) + "\n")
            self.stream.flush()

    def _line(self, detail: str) -> str:
        elapsed = time.perf_counter() - self.start
        if self.total:
            filled = WIDTH * self.done // self.total
            count = f"[{'#' * filled}{'.' * (WIDTH - filled)}] {self.done}/{self.total}"
        else:
            count = f"{self.done}"
        return f"{self.label} {count} {elapsed:.1f}s" + (f" {detail}" if detail else "")

    def close(self) -> None:
        """End the redrawn line (a TTY) so what follows starts on its own line."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
