"""A progress line with tokens per second and the time left, like the a2farm
binary's: redrawn in place on a terminal, a line every ``every`` seconds
otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def clock(seconds: float) -> str:
    s = int(round(max(seconds, 0)))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    def __init__(self, what: str, total_steps: int, *, done: int = 0, out: TextIO | None = None,
                 every: float = 10.0, enabled: bool = True) -> None:
        self.what = what
        self.total = total_steps
        self.done = done
        self.start_done = done
        self.out = out or sys.stderr
        self.tty = self.out.isatty()
        self.every = every
        self.enabled = enabled
        self.started = time.monotonic()
        self.last_print = 0.0
        self.tokens = 0

    def line(self, loss: float | None) -> str:
        elapsed = time.monotonic() - self.started
        rate = self.tokens / elapsed if elapsed > 0 else 0.0
        steps_run = self.done - self.start_done
        eta = elapsed / steps_run * (self.total - self.done) if steps_run else 0.0
        pct = 100 * self.done / self.total if self.total else 100
        width = 24
        filled = int(width * self.done / self.total) if self.total else width
        bar = "█" * filled + "·" * (width - filled)
        text = f"{self.what} {bar} {self.done}/{self.total} steps {pct:3.0f}%  {rate:,.0f} tok/s"
        if loss is not None:
            text += f"  loss {loss:.4f}"
        text += f"  ETA {clock(eta)}" if self.done < self.total else f"  {clock(elapsed)}"
        return text

    def update(self, steps: int, tokens: int, loss: float | None) -> None:
        self.done += steps
        self.tokens += tokens
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            self.out.write("\r" + self.line(loss) + "\033[K")
            if self.done >= self.total:
                self.out.write("\n")
            self.out.flush()
        elif now - self.last_print >= self.every or self.done >= self.total:
            self.out.write(self.line(loss) + "\n")
            self.out.flush()
            self.last_print = now

    def finish(self) -> None:
        if self.enabled and self.tty and self.done < self.total:
            self.out.write("\n")
            self.out.flush()
