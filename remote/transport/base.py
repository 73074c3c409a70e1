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

What a command prints is untrusted and may be endless: each stream is kept, and passed to
`on_output`, up to `OutputLimit` bytes (its first and last halves with a marker between), and a
stdout streamed into a file (`stdout_to`, a pulled archive) stops at its own cap. Memory stays
bounded whatever the host sends. Time too: besides the deadline, a command run with
`idle_timeout` fails ("no output line for N s") once that long passes without a complete output
line (or, for `stdout_to`, without a byte), and is stopped on the host, so a host that dribbles
a byte at a time cannot hold the run for the whole deadline.

As in Invoke, whose `Runner` holds the loop while `Local` and Fabric's `Remote` supply
read/write/close/finished primitives (invoke/runners.py, fabric/runners.py), the loop lives once
here, in `BaseConnection._pump`; a transport starts a command and returns its `RunningCommand`.
"""
from __future__ import annotations

import abc
import functools
import io
import secrets
import select
import shlex
import threading
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable, Literal, Optional, TypeVar, Union

from ..config.inventory import Host, Timeouts
from ..ground.envvars import env_number
from ..ground.errors import BecomeError, CommandTimeout, HostError, Interrupted, OutputTooLarge

OutputCallback = Callable[[str, str], None]  # (stream name "stdout"|"stderr", text)
Stdin = Union[bytes, BinaryIO]  # a command's input: its bytes, or a file to stream from
Stream = Literal["stdout", "stderr"]

KILL_GRACE_S = 5  # after SIGTERM, `timeout -k` sends SIGKILL this much later
CLIENT_GRACE_S = KILL_GRACE_S + 5  # the client waits this long past the remote timeout
STOP_TIMEOUT_S = 3  # for the `kill` that stops a cancelled command
CANCEL_PID_WAIT_S = 2  # a command cancelled before its PID line arrived waits this long for it
POLL_S = 1.0  # the loop looks at cancel, the deadline and the link at least this often
# A command's stdin goes in pieces of this size, the output read between them: a file of any
# size is streamed, never read whole; and paramiko's sendall keeps what is left to send as
# `s = s[sent:]`, a copy of the rest after each send of at most a window's worth, so one 114 MB
# write (a bundle) copied gigabytes and took minutes (measured, unsourced).
STDIN_PIECE = 256 * 1024
# What coreutils `timeout` exits with when it stopped the command (TERM, then KILL after grace).
TIMEOUT_EXIT_CODES = (124, 137)


# What is kept of each output stream of a command, and shown of it, by default. Far above what
# a provisioning step or a validation run prints (apt installing the CUDA toolkit: ~100 KiB;
# chosen, unsourced), small enough that 64 hosts at once stay well under 1 GiB.
OUTPUT_MAX_BYTES = 1 << 20
OUTPUT_MAX_VARIABLE = "GPUPROV_OUTPUT_MAX_BYTES"


def wait_readable(fds: list[int], wait: float) -> list[int]:
    """The file descriptors of `fds` that are readable within `wait` seconds. poll(2), not
    select(2): select cannot watch a descriptor of FD_SETSIZE (1024) or more ("filedescriptor
    out of range in select()"), and a process carrying many forwarded channels has such fds."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(max(0, int(wait * 1000)))]


def output_max_bytes() -> int:
    """`OUTPUT_MAX_BYTES`, or the whole number in GPUPROV_OUTPUT_MAX_BYTES (at least 2)."""
    return int(env_number(OUTPUT_MAX_VARIABLE, OUTPUT_MAX_BYTES, 2, whole=True))


@dataclass
class CommandResult:
    rc: int
    stdout: bytes  # at most the output limit: first and last halves around a marker
    stderr: bytes
    elapsed_s: float
    # Bytes the host sent on stdout (into `stdout_to` when the command was run with one), and
    # the bytes of each stream kept nowhere (past the output limit).
    stdout_bytes: int = 0
    stdout_dropped: int = 0
    stderr_dropped: int = 0

    @property
    def complete(self) -> bool:
        """True when `stdout` and `stderr` are the whole output."""
        return not (self.stdout_dropped or self.stderr_dropped)

    def require_complete(self, what: str) -> None:
        """Raise `HostError` naming `what` when part of the output was not kept: an answer
        that must be read whole (facts, probes) was larger than any honest host sends."""
        if not self.complete:
            raise HostError(f"{what}: the host's answer is over the {output_max_bytes()} bytes "
                            f"kept ({OUTPUT_MAX_VARIABLE}); "
                            f"{self.stdout_dropped + self.stderr_dropped} bytes not kept")

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")


def wrap_command(script: str, *, become: bool, is_root: bool, timeout: Optional[float],
                 prompt: str, ready: str, password: Optional[str],
                 shell: str = "/bin/sh", become_user: Optional[str] = None) -> str:
    """The command line that runs `script`, with sudo (as root, or `-u become_user`) and a
    remote timeout as asked."""
    inner = f"{shell} -c {shlex.quote(script)}"
    if timeout:
        inner = f"timeout -k {KILL_GRACE_S} {max(1, int(round(timeout)))} {inner}"
    # The ready marker carries the PID of the process that execs `timeout` (its process group
    # leader), so a cancelled run can stop the command; under sudo it also tells the client
    # that sudo is satisfied, so stdin now belongs to the command.
    announce = f"printf '%s%s\\n' {shlex.quote(ready)} \"$$\" >&2; exec {inner}"
    # `exec`: the login shell sshd starts becomes our /bin/sh instead of forking it (any login
    # shell, sh to fish, knows `exec`); one process less per command.
    if not needs_sudo(become, is_root, become_user):
        return f"exec /bin/sh -c {shlex.quote(announce)}"
    mode = f"-S -p {shlex.quote(prompt)}" if password is not None else "-n"
    user = f" -u {shlex.quote(become_user)}" if become_user else ""
    return f"exec sudo -H {mode}{user} -- /bin/sh -c {shlex.quote(announce)}"


def needs_sudo(become: bool, is_root: bool, become_user: Optional[str]) -> bool:
    """Whether a command goes through sudo: to become root unless the login is root, and to
    become any other user always (root too runs `sudo -u USER`, which asks root no password)."""
    return become and (bool(become_user) or not is_root)


class BoundedStream:
    """One output stream of a command, kept and passed to `on_output` up to `limit` bytes.

    Within the limit every byte is kept and shown. The first half is shown as it comes; past
    it the bytes are held (and shown when the command ends, with a note saying so at once) in a
    tail that keeps only the last half; what falls out between the two halves is counted and
    replaced by one marker line, in the result and in what `on_output` gets. So a host printing
    1 GiB costs one limit of memory, the terminal and the run log get one limit of text, and the
    work stays linear."""

    def __init__(self, name: Stream, limit: int, on_output: Optional[OutputCallback]):
        self.name = name
        self.head_max = limit - limit // 2
        self.tail_max = limit // 2
        self.on_output = on_output
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0  # bytes the host sent on this stream

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += data[:room]
            self._show(data[:room])
            data = data[room:]
            if data:
                self._show(f"\n[... gpuprov: more than {_amount(self.head_max)} of {self.name}; "
                           f"the rest is shown when the command ends ...]\n".encode())
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_max:  # trimmed in halves: linear, not per chunk
                del self.tail[:len(self.tail) - self.tail_max]

    @property
    def dropped(self) -> int:
        """Bytes sent but kept in neither half."""
        return self.total - len(self.head) - min(len(self.tail), self.tail_max)

    def finish(self) -> None:
        """Show what was held: the marker (if bytes were dropped) and the tail."""
        if self.tail:
            self._show(self._marker() + self._tail())

    def kept(self) -> bytes:
        """The stream as kept: all of it, or its two halves around the marker."""
        return bytes(self.head) + self._marker() + self._tail()

    def _tail(self) -> bytes:
        return bytes(self.tail[-self.tail_max:]) if self.tail_max else b""

    def _marker(self) -> bytes:
        if not self.dropped:
            return b""
        return (f"\n[... gpuprov: {self.dropped} bytes of {self.name} not kept (over "
                f"{OUTPUT_MAX_VARIABLE}: first and last {_amount(self.tail_max)} kept) ...]\n"
                ).encode()

    def _show(self, data: bytes) -> None:
        if self.on_output and data:
            self.on_output(self.name, data.decode("utf-8", "replace"))


class PassedOn(BoundedStream):
    """A stream passed whole to `on_output` as it comes and kept nowhere (`run(streamed=True)`):
    the caller bounds what it keeps. The Slurm job's output is every node's at once, so a cut of
    the whole would let one node's flood erase the others' results; it is cut per node there."""

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self._show(data)

    @property
    def dropped(self) -> int:
        return self.total

    def kept(self) -> bytes:
        return b""


class FileSink:
    """A stdout written into a file as it comes (`run(stdout_to=...)`), refused past `limit`
    bytes: the command is stopped and `OutputTooLarge` raised, with at most `limit` bytes on
    disk."""

    def __init__(self, file: BinaryIO, limit: int):
        self.file = file
        self.limit = limit
        self.total = 0
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if self.total > self.limit:
            raise OutputTooLarge(f"the host sent more than {self.limit} bytes on stdout")
        self.file.write(data)

    def finish(self) -> None:
        self.file.flush()

    def kept(self) -> bytes:
        return b""


def _amount(count: int) -> str:
    """`count` bytes for a message: in KiB when it is a whole number of them."""
    return f"{count >> 10} KiB" if count and count % 1024 == 0 else f"{count} bytes"


class LineSplitter:
    """An `OutputCallback` that passes whole lines to `emit` (blank ones skipped, a trailing
    CR dropped); `flush` passes what is left once the command ended.

    Linear in the output: a chunk without a newline is only set aside, and the parts of a
    line are joined once, when its newline comes. (Appending each chunk to the pending text and
    splitting all of it again made 64 MiB without newlines take 69 s, against 4.3 s with.)"""

    def __init__(self, emit: Callable[[str], None]):
        self.emit = emit
        self.pending: dict[str, list[str]] = {"stdout": [], "stderr": []}

    def __call__(self, stream: str, text: str) -> None:
        pending = self.pending[stream]
        end = text.rfind("\n")
        if end < 0:
            pending.append(text)
            return
        pending.append(text[:end])
        lines = "".join(pending).split("\n")
        self.pending[stream] = [text[end + 1:]]
        for line in lines:
            if line.strip():
                self.emit(line.rstrip("\r"))

    def flush(self) -> None:
        for stream, pending in self.pending.items():
            rest = "".join(pending)
            if rest.strip():
                self.emit(rest)
            self.pending[stream] = []


class _Exchange:
    """Collects a command's output and handles the sudo prompt / ready markers on stderr."""

    def __init__(self, prompt: str, ready: str, password: Optional[str], stdin: Optional[Stdin],
                 wait_ready: bool, on_output: Optional[OutputCallback],
                 limit: int = OUTPUT_MAX_BYTES, stdout_to: Optional[FileSink] = None,
                 streamed: bool = False):
        self.prompt = prompt.encode()
        self.ready = ready.encode()  # followed by the PID and a newline
        self.pid: Optional[int] = None  # from the ready line: the command's process group
        self.announced = False
        self.password = password
        self.stdin: Optional[BinaryIO] = io.BytesIO(stdin) if isinstance(stdin, bytes) else stdin
        self.feeding: Optional[BinaryIO] = None    # the stdin being sent, once sudo is satisfied
        self.waiting = wait_ready
        stream = PassedOn if streamed else BoundedStream
        self.stdout: BoundedStream | FileSink = (
            stdout_to if stdout_to is not None else stream("stdout", limit, on_output))
        self.stderr = stream("stderr", limit, on_output)
        self._pending_err = bytearray()
        # Before the ready line, only its possible start is held back from `stderr`.
        self._pending_max = max(len(self.prompt), len(self.ready) + 24)
        self.to_send: list[bytes] = []
        self.close_stdin = False
        self.wrong_password = False
        self.prompts = 0
        if not wait_ready:
            self._release_stdin()

    def _release_stdin(self) -> None:
        self.feeding = self.stdin
        self.close_stdin = True

    def stdin_piece(self) -> bytes:
        """The next piece of the command's stdin (b"" when none is due now, or none is left)."""
        if self.feeding is None:
            return b""
        piece = self.feeding.read(STDIN_PIECE)
        if not piece:
            self.feeding = None
        return piece

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
            if before.strip() or (before and self.stderr.total):  # blank alone: a login's noise
                self._emit_err(before)
            if after:
                self._emit_err(after)
        elif len(self._pending_err) > self._pending_max:
            # No ready line yet (a chatty login rc file, a hostile host): pass on all but what
            # could be the start of a prompt or ready line, so the search stays linear.
            cut = len(self._pending_err) - self._pending_max
            self._emit_err(bytes(self._pending_err[:cut]))
            del self._pending_err[:cut]

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
        self.stdout.finish()
        self.stderr.finish()

    def _emit_err(self, data: bytes) -> None:
        self.stderr.feed(data)


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
            stdin: Optional[Stdin] = None, on_output: Optional[OutputCallback] = None,
            shell: str = "/bin/sh", cancellable: bool = True,
            stdout_to: Optional[BinaryIO] = None,
            stdout_max_bytes: Optional[int] = None,
            idle_timeout: Optional[float] = None, streamed: bool = False,
            become_user: Optional[str] = None) -> CommandResult:
        """Run a POSIX sh script on the host; return its exit status and output, each stream
        kept up to `output_max_bytes()` (see `BoundedStream`); with `streamed`, both streams
        go whole to `on_output` and are kept nowhere (`PassedOn`).

        `stdin`: bytes, or a binary file read from where it stands, a piece at a time as the
        command takes it (a bundle of gigabytes is never in memory).
        With `stdout_to`, stdout is written into that file instead (a pulled archive: never
        in memory); past `stdout_max_bytes` (required then) the command is stopped and
        `OutputTooLarge` raised. With `idle_timeout`, `CommandTimeout` ("no output line for N
        s") once that long passes without a complete line (without a byte into `stdout_to`).
        With `become`, the script runs as root through sudo, or as `become_user` (`sudo -u`).
        Raises `Interrupted` (after stopping the command on the host) when `cancel` is set."""
        token = secrets.token_hex(8)
        prompt, ready = f"[gpuprov-sudo-{token}]", f"[gpuprov-ready-{token}]"
        use_sudo = needs_sudo(become, self.is_root, become_user)
        command = wrap_command(script, become=become, is_root=self.is_root, timeout=timeout,
                               prompt=prompt, ready=ready, password=self.become_password,
                               shell=shell, become_user=become_user)
        sink = None
        if stdout_to is not None:
            if stdout_max_bytes is None:
                raise ValueError("stdout_to needs stdout_max_bytes")
            sink = FileSink(stdout_to, stdout_max_bytes)
        exchange = _Exchange(prompt, ready, self.become_password if use_sudo else None, stdin,
                             use_sudo, on_output, output_max_bytes(), sink, streamed)
        started = time.monotonic()
        deadline = started + timeout + CLIENT_GRACE_S if timeout else None
        try:
            running = self._start(command)
            try:
                rc = self._pump(running, exchange, deadline, timeout,
                                self.cancel if cancellable else None, idle_timeout)
            finally:
                running.close()
        except (Interrupted, CommandTimeout):
            # A client-side timeout (the link, or silence the host's `timeout` cannot see)
            # stops the command on the host too, so nothing is left running there; not for the
            # stopping command itself (not cancellable), which would recurse.
            if cancellable:
                self._stop(exchange.pid, become, become_user)
            raise
        exchange.finish()
        if timeout and rc in TIMEOUT_EXIT_CODES:
            raise CommandTimeout(f"timed out after {timeout:g} s")
        if use_sudo and exchange.waiting:
            if exchange.wrong_password:
                raise BecomeError(f"sudo on {self.host.name} rejected the become password")
            if self.become_password is None and b"password is required" in exchange.stderr.kept():
                raise BecomeError(
                    f"sudo on {self.host.name} needs a password: set GPUPROV_BECOME_PASSWORD or "
                    "pass --ask-become-pass")
            raise BecomeError(f"sudo failed on {self.host.name}: "
                              f"{exchange.stderr.kept().decode('utf-8', 'replace').strip()[:300]}")
        return CommandResult(rc, exchange.stdout.kept(), exchange.stderr.kept(),
                             time.monotonic() - started, stdout_bytes=exchange.stdout.total,
                             stdout_dropped=exchange.stdout.dropped,
                             stderr_dropped=exchange.stderr.dropped)

    def _start(self, command: str) -> RunningCommand:
        """Start `command` (a full sh command line) on the host."""
        raise NotImplementedError

    @staticmethod
    def _pump(running: RunningCommand, exchange: _Exchange, deadline: Optional[float],
              timeout: Optional[float], cancel: Optional[threading.Event],
              idle_timeout: Optional[float] = None) -> int:
        """The one I/O loop: feed stdin as the exchange allows, pass output to it, watch the
        cancel event, the client deadline, the silence (`idle_timeout`) and the link; return
        the exit status."""
        stdin_closed = False
        cancelled_at = None
        to_file = isinstance(exchange.stdout, FileSink)
        progress_at = time.monotonic()  # when the last line (or byte into a file) came
        while True:
            cancelled_at = _check_cancel(cancel, exchange, cancelled_at)
            while exchange.to_send:
                running.write_stdin(exchange.to_send.pop(0))
            piece = exchange.stdin_piece()    # one piece a round: the output is read between
            if piece:
                running.write_stdin(piece)
            if exchange.close_stdin and exchange.feeding is None and not stdin_closed:
                running.close_stdin()
                stdin_closed = True
            now = time.monotonic()
            if deadline and now > deadline:
                raise CommandTimeout(f"timed out after {timeout:g} s")
            if idle_timeout and now - progress_at > idle_timeout:
                raise CommandTimeout(f"no output {'' if to_file else 'line '}for "
                                     f"{idle_timeout:g} s (timeouts.idle), stopped")
            wait = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - now))
            if exchange.feeding is not None:
                wait = 0.0    # more stdin to send: only look at what came
            chunks = running.read(wait)
            for stream, data in chunks:
                if stream == "stdout":
                    exchange.stdout.feed(data)
                else:
                    exchange.feed_stderr(data)
                if b"\n" in data or (to_file and stream == "stdout"):
                    progress_at = time.monotonic()
            rc = running.exit_status()
            if rc is not None:
                return rc
            running.check_alive(heard=bool(chunks))

    def _stop(self, pid: Optional[int], become: bool, become_user: Optional[str]) -> None:
        """Stop a cancelled command's process group on the host (best effort, bounded)."""
        if pid is None:
            return
        script = f"kill -TERM -- -{pid} 2>/dev/null || kill -TERM {pid} 2>/dev/null; true"
        try:
            self.run(script, become=become, timeout=STOP_TIMEOUT_S, cancellable=False,
                     become_user=become_user)
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


Made = TypeVar("Made")


def once_per_process(make: Callable[..., Made]) -> Callable[..., Made]:
    """`make`'s value for each argument, made once per process. `functools.lru_cache` alone
    lets every host thread that asks before the first answer make its own (4 hosts: 4 Fabric
    configs, 3 parsed keys, 2 parsed ssh_configs, each a few ms of CPU); the lock keeps the
    others waiting for the first."""
    cached = functools.lru_cache(maxsize=None)(make)
    lock = threading.Lock()

    @functools.wraps(make)
    def shared(*args: object) -> Made:
        with lock:
            return cached(*args)
    return shared
