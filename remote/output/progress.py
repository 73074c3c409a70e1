"""Signs of life while steps run: one thread per run, whatever the number of hosts.

A step still running after a second is announced (`running` line). Then, when the output is a
terminal, one live line at the bottom shows each running step's elapsed time, redrawn every
second; when it is piped (a CI log, `| tee`), a `running` line with the elapsed time comes every
`GPUPROV_PROGRESS_EVERY` seconds (default 60), so a log never goes quiet for longer: a
multi-gigabyte torch install is minutes of one step. One thread for the run, not a timer per
step: a `threading.Timer` per step cost about 0.5 ms of control CPU per converged host
(bench/compare.py --fleet 1,64).
"""
from __future__ import annotations

import itertools
import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

ANNOUNCE_AFTER_S = 1.0
DEFAULT_EVERY_S = 60.0


def every_s() -> float:
    """Seconds between `running` lines when piped: GPUPROV_PROGRESS_EVERY, default 60."""
    try:
        value = float(os.environ.get("GPUPROV_PROGRESS_EVERY", DEFAULT_EVERY_S))
    except ValueError:
        return DEFAULT_EVERY_S
    return value if value > 0 else DEFAULT_EVERY_S


def elapsed_text(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass
class Running:
    """A step in progress: `stop()` when it ends. `on_output` (with -v) gets its output as
    the transport streams it, `(stream_name, text)`, and shows it line by line."""

    host: str
    name: str
    started: float
    show_line: Optional[Callable[[str, str], None]] = None
    announced: bool = False
    last_line: float = 0.0
    stopped: bool = False
    _pending: dict[str, str] = field(default_factory=dict)
    _key: int = 0

    def on_output(self, stream: str, text: str) -> None:
        if self.show_line is None:
            return
        lines = (self._pending.pop(stream, "") + text).split("\n")
        self._pending[stream] = lines.pop()
        for line in lines:
            self.show_line(self.host, line.rstrip("\r"))

    def flush(self) -> None:
        if self.show_line is None:
            return
        for rest in self._pending.values():
            if rest:
                self.show_line(self.host, rest)
        self._pending.clear()


class Progress:
    """The running steps of one run and the thread that reports on them. `announce(step)`
    prints a step's `running` line, `still(step, elapsed)` a piped reminder, and `live(text)`
    redraws the terminal's status line ("" clears it); each is called with no lock held."""

    def __init__(self, announce: Callable[[Running], None],
                 still: Callable[[Running, float], None],
                 live: Optional[Callable[[str], None]] = None):
        self._announce, self._still, self._live = announce, still, live
        self._every = every_s()
        self._steps: dict[int, Running] = {}
        self._keys = itertools.count()
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self._wake_at = math.inf  # when the thread wakes next (0: it is awake)
        self._last_tick = 0.0  # when the live line was last drawn

    def start(self, host: str, name: str,
              show_line: Optional[Callable[[str, str], None]] = None) -> Running:
        step = Running(host, name, time.monotonic(), show_line)
        step.last_line = step.started
        with self._cond:
            step._key = next(self._keys)
            self._steps[step._key] = step
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
                self._thread.start()
            elif step.started + ANNOUNCE_AFTER_S < self._wake_at:
                self._cond.notify()  # due before the thread's next wake-up
        return step

    def stop(self, step: Running) -> None:
        step.flush()
        with self._cond:
            step.stopped = True
            self._steps.pop(step._key, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._steps.clear()
            self._cond.notify()
        if self._live is not None:
            self._live("")

    def _next_due(self, now: float) -> float:
        """When something is next to show: a step's announcement, the live line's next
        second, or a piped reminder."""
        due = math.inf
        for step in self._steps.values():
            if not step.announced:
                due = min(due, step.started + ANNOUNCE_AFTER_S)
            elif self._live is not None:
                due = min(due, self._last_tick + ANNOUNCE_AFTER_S)
            else:
                due = min(due, step.last_line + self._every)
        return due

    def _loop(self) -> None:
        shown = False
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    now = time.monotonic()
                    self._wake_at = self._next_due(now)
                    if self._wake_at <= now:
                        break
                    if shown and not self._steps and self._live is not None:
                        break  # clear the live line once nothing runs
                    self._cond.wait(None if self._wake_at == math.inf else self._wake_at - now)
                self._wake_at = 0.0
                steps = [s for s in self._steps.values() if now - s.started >= ANNOUNCE_AFTER_S]
            self._last_tick = now
            try:
                self._report(steps, now)
                shown = bool(steps)
            except Exception:  # noqa: BLE001 - a failed status line must not stop the run
                pass

    def _report(self, steps: list[Running], now: float) -> None:
        for step in steps:
            if step.stopped:
                continue
            if not step.announced:
                step.announced = True
                self._announce(step)
            elif self._live is None and now - step.last_line >= self._every:
                step.last_line = now
                self._still(step, now - step.started)
        if self._live is not None:
            self._live("; ".join(f"{s.host} {s.name} {elapsed_text(now - s.started)}"
                                 for s in steps if not s.stopped))
