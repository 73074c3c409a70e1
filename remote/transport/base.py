"""What every connection shares: the command wrapper, the one I/O loop, the result.

Every command is POSIX sh, wrapped the same way for SSH and local hosts:
  exec [sudo -H -S -p TOKEN --] /bin/sh -c 'printf READY$$ >&2; exec [timeout -k 5 N] /bin/sh -c SCRIPT'
The remote `timeout` kills the command's whole process group when a step overruns; the client
side has its own deadline too, so a dead link cannot hang the run. A sudo password is sent on
stdin only when sudo prints our prompt token, and never appears in a command line or a log.

The READY line on stderr (stripped from the output) carries the PID that becomes the `timeout`
process, which leads the command's process group. When the run is cancelled (Ctrl-C, SIGTERM:
the engine sets `cancel`), the command is stopped on the host with `kill -TERM -- -PGID` sent on
a fresh channel (through sudo when the command used it); `timeout -k` follows with SIGKILL if
the group outlives the grace period. Then `Interrupted` is raised.

As in Invoke, whose `Runner` holds the loop while `Local` and Fabric's `Remote` supply
read/write/close/finished primitives (invoke/runners.py, fabric/runners.py), the loop lives once
here, in `BaseConnection._pump`; a transport starts a command and returns its `RunningCommand`.
"""
from __future__ import annotations

import abc
import secrets
import shlex
import threading
import time
from dataclasses import dataclass
from typing import Callable, Literal, Optional

from ..config.inventory import Host, Timeouts
from ..errors import BecomeError, CommandTimeout, Interrupted

OutputCallback = Callable[[str, str], None]  # (stream name "stdout"|"stderr", text)
Stream = Literal["stdout", "stderr"]

KILL_GRACE_S = 5  # after SIGTERM, `timeout -k` sends SIGKILL this much later
CLIENT_GRACE_S = KILL_GRACE_S + 5  # the client waits this long past the remote timeout
STOP_TIMEOUT_S = 3  # for the `kill` that stops a cancelled command
CANCEL_PID_WAIT_S = 2  # a command cancelled before its PID line arrived waits this long for it
POLL_S = 1.0  # the loop looks at cancel, the deadline and the link at least this often
# What coreutils `timeout` exits with when it stopped the command (TERM, then KILL after grace).
TIMEOUT_EXIT_CODES = (124, 137)


@dataclass
class CommandResult:
    rc: int
    stdout: bytes
    stderr: bytes
    elapsed_s: float

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")


def wrap_command(script: str, *, become: bool, is_root: bool, timeout: Optional[float],
                 prompt: str, ready: str, password: Optional[str],
                 shell: str = "/bin/sh") -> str:
    """The command line that runs `script`, with sudo and a remote timeout as asked."""
    inner = f"{shell} -c {shlex.quote(script)}"
    if timeout:
        inner = f"timeout -k {KILL_GRACE_S} {max(1, int(round(timeout)))} {inner}"
    # The ready marker carries the PID of the process that execs `timeout` (its process group
    # leader), so a cancelled run can stop the command; under sudo it also tells the client
    # that sudo is satisfied, so stdin now belongs to the command.
    announce = f"printf '%s%s\\n' {shlex.quote(ready)} \"$$\" >&2; exec {inner}"
    # `exec`: the login shell sshd starts becomes our /bin/sh instead of forking it (any login
    # shell, sh to fish, knows `exec`); one process less per command.
    if not become or is_root:
        return f"exec /bin/sh -c {shlex.quote(announce)}"
    mode = f"-S -p {shlex.quote(prompt)}" if password is not None else "-n"
    return f"exec sudo -H {mode} -- /bin/sh -c {shlex.quote(announce)}"


class _Exchange:
    """Collects a command's output and handles the sudo prompt / ready markers on stderr."""

    def __init__(self, prompt: str, ready: str, password: Optional[str], stdin: Optional[bytes],
                 wait_ready: bool, on_output: Optional[OutputCallback]):
        self.prompt = prompt.encode()
        self.ready = ready.encode()  # followed by the PID and a newline
        self.pid: Optional[int] = None  # from the ready line: the command's process group
        self.announced = False
        self.password = password
        self.stdin = stdin
        self.waiting = wait_ready
        self.on_output = on_output
        self.stdout = bytearray()
        self.stderr = bytearray()
        self._pending_err = bytearray()
        self.to_send: list[bytes] = []
        self.close_stdin = False
        self.wrong_password = False
        self.prompts = 0
        if not wait_ready:
            self._release_stdin()

    def _release_stdin(self) -> None:
        if self.stdin:
            self.to_send.append(self.stdin)
        self.close_stdin = True

    def feed_stdout(self, data: bytes) -> None:
        self.stdout += data
        if self.on_output:
            self.on_output("stdout", data.decode("utf-8", "replace"))

    def feed_stderr(self, data: bytes) -> None:
        if self.announced:
            self._emit_err(data)
            return
        self._pending_err += data
        if self.waiting and self.prompt in self._pending_err:
            self.prompts += 1
            self._pending_err = self._pending_err.replace(self.prompt, b"", 1)
            if self.prompts > 1 or self.password is None:
                self.wrong_password = True
                self.close_stdin = True
            else:
                self.to_send.append(self.password.encode() + b"\n")
        found = self._ready_line()
        if found:
            pending = bytes(self._pending_err)
            start, end, self.pid = found
            before, after = pending[:start], pending[end:]
            self._pending_err = bytearray()
            self.announced = True
            if self.waiting:
                self.waiting = False
                self._release_stdin()
            if before.strip():
                self._emit_err(before)
            if after:
                self._emit_err(after)

    def _ready_line(self) -> Optional[tuple[int, int, int]]:
        """(start, end, pid) of a complete ready line in the pending stderr, else None.
        (A plain search: a regex per command would be compiled anew for every random token.)"""
        start = self._pending_err.find(self.ready)
        while start >= 0:
            # An earlier copy of the token may be a shell's trace of our own command line
            # (`set -x` in a login rc file): only "TOKEN<digits>\n" is the ready line.
            digits_at = start + len(self.ready)
            newline = self._pending_err.find(b"\n", digits_at)
            digits = bytes(self._pending_err[digits_at:newline])
            if newline >= 0 and digits.isdigit():
                return start, newline + 1, int(digits)
            start = self._pending_err.find(self.ready, start + 1)
        return None

    def finish(self) -> None:
        if self._pending_err:
            self._emit_err(bytes(self._pending_err))
            self._pending_err = bytearray()

    def _emit_err(self, data: bytes) -> None:
        self.stderr += data
        if self.on_output:
            self.on_output("stderr", data.decode("utf-8", "replace"))


class RunningCommand(abc.ABC):
    """A command started on a host: the primitives a transport supplies to the one I/O loop
    (`BaseConnection._pump`)."""

    @abc.abstractmethod
    def write_stdin(self, data: bytes) -> None:
        """Send `data` to the command's stdin (dropped once the command stopped reading)."""

    @abc.abstractmethod
    def close_stdin(self) -> None:
        """Signal end of input."""

    @abc.abstractmethod
    def read(self, wait: float) -> list[tuple[Stream, bytes]]:
        """Wait up to `wait` seconds for output; return what came, in order (empty if none)."""

    @abc.abstractmethod
    def exit_status(self) -> Optional[int]:
        """The exit status once the command ended and all its output was read, else None."""

    @abc.abstractmethod
    def check_alive(self, heard: bool) -> None:
        """Raise `ConnectionLost` when the link to the host is judged dead (`heard`: output
        came in this round)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the command (its channel, or its process group if it still runs)."""


class BaseConnection:
    """What the engine needs of a connection; subclasses implement `_start`."""

    host: Host
    is_root: bool = False
    cancel: Optional[threading.Event] = None  # set by the engine: stop commands when it is set

    def __init__(self, host: Host, timeouts: Timeouts, become_password: Optional[str] = None):
        self.host = host
        self.timeouts = timeouts
        self.become_password = become_password

    def run(self, script: str, *, become: bool = False, timeout: Optional[float] = None,
            stdin: Optional[bytes] = None, on_output: Optional[OutputCallback] = None,
            shell: str = "/bin/sh", cancellable: bool = True) -> CommandResult:
        """Run a POSIX sh script on the host; return its exit status and output.

        Raises `Interrupted` (after stopping the command on the host) when `cancel` is set."""
        token = secrets.token_hex(8)
        prompt, ready = f"[gpuprov-sudo-{token}]", f"[gpuprov-ready-{token}]"
        use_sudo = become and not self.is_root
        command = wrap_command(script, become=become, is_root=self.is_root, timeout=timeout,
                               prompt=prompt, ready=ready, password=self.become_password,
                               shell=shell)
        exchange = _Exchange(prompt, ready, self.become_password if use_sudo else None, stdin,
                             use_sudo, on_output)
        started = time.monotonic()
        deadline = started + timeout + CLIENT_GRACE_S if timeout else None
        try:
            running = self._start(command)
            try:
                rc = self._pump(running, exchange, deadline, timeout,
                                self.cancel if cancellable else None)
            finally:
                running.close()
        except Interrupted:
            self._stop(exchange.pid, become)
            raise
        exchange.finish()
        if timeout and rc in TIMEOUT_EXIT_CODES:
            raise CommandTimeout(f"timed out after {timeout:g} s")
        if use_sudo and exchange.waiting:
            if exchange.wrong_password:
                raise BecomeError(f"sudo on {self.host.name} rejected the become password")
            if self.become_password is None and b"password is required" in exchange.stderr:
                raise BecomeError(
                    f"sudo on {self.host.name} needs a password: set GPUPROV_BECOME_PASSWORD or "
                    "pass --ask-become-pass")
            raise BecomeError(f"sudo failed on {self.host.name}: "
                              f"{exchange.stderr.decode('utf-8', 'replace').strip()[:300]}")
        return CommandResult(rc, bytes(exchange.stdout), bytes(exchange.stderr),
                             time.monotonic() - started)

    def _start(self, command: str) -> RunningCommand:
        """Start `command` (a full sh command line) on the host."""
        raise NotImplementedError

    @staticmethod
    def _pump(running: RunningCommand, exchange: _Exchange, deadline: Optional[float],
              timeout: Optional[float], cancel: Optional[threading.Event]) -> int:
        """The one I/O loop: feed stdin as the exchange allows, pass output to it, watch the
        cancel event, the client deadline and the link; return the exit status."""
        stdin_closed = False
        cancelled_at = None
        while True:
            cancelled_at = _check_cancel(cancel, exchange, cancelled_at)
            while exchange.to_send:
                running.write_stdin(exchange.to_send.pop(0))
            if exchange.close_stdin and not stdin_closed:
                running.close_stdin()
                stdin_closed = True
            now = time.monotonic()
            if deadline and now > deadline:
                raise CommandTimeout(f"timed out after {timeout:g} s")
            wait = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - now))
            chunks = running.read(wait)
            for stream, data in chunks:
                if stream == "stdout":
                    exchange.feed_stdout(data)
                else:
                    exchange.feed_stderr(data)
            rc = running.exit_status()
            if rc is not None:
                return rc
            running.check_alive(heard=bool(chunks))

    def _stop(self, pid: Optional[int], become: bool) -> None:
        """Stop a cancelled command's process group on the host (best effort, bounded)."""
        if pid is None:
            return
        script = f"kill -TERM -- -{pid} 2>/dev/null || kill -TERM {pid} 2>/dev/null; true"
        try:
            self.run(script, become=become, timeout=STOP_TIMEOUT_S, cancellable=False)
        except Exception:  # noqa: BLE001 - the host may be gone too; the run stops regardless
            pass

    def open(self) -> BaseConnection:
        """Connect (and log in); return self. Raises `Unreachable` with the reason."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the connection (commands are over)."""

    def abort(self) -> None:
        """Stop an `open` in progress in another thread (opening a local one is instant)."""

    def describe(self) -> str:
        """What the run log records about the connection."""
        raise NotImplementedError


def _check_cancel(cancel: Optional[threading.Event], exchange: _Exchange,
                  cancelled_at: Optional[float]) -> Optional[float]:
    """Raise `Interrupted` once `cancel` is set and the command's PID is known (or it did not
    come within CANCEL_PID_WAIT_S); return when the cancel was first seen."""
    if cancel is None or not cancel.is_set():
        return None
    now = time.monotonic()
    if cancelled_at is None:
        cancelled_at = now
    if exchange.pid is not None or now - cancelled_at >= CANCEL_PID_WAIT_S:
        raise Interrupted("interrupted")
    return cancelled_at
