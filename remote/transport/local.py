"""This machine as a host (`connection: local`): commands run with /bin/sh here."""
from __future__ import annotations

import os
import signal
import subprocess
from typing import IO, Optional

from ..config.inventory import Host, Timeouts
from .base import BaseConnection, RunningCommand, Stream, wait_readable


class LocalConnection(BaseConnection):
    """This machine, through /bin/sh; used for `connection: local` hosts."""

    def __init__(self, host: Host, timeouts: Timeouts, become_password: Optional[str] = None):
        super().__init__(host, timeouts, become_password)
        self.is_root = os.geteuid() == 0

    def open(self) -> LocalConnection:
        return self

    def describe(self) -> str:
        return "local (no SSH)"

    def _start(self, command: str) -> RunningCommand:
        return _LocalCommand(command)


class _LocalCommand(RunningCommand):
    """A /bin/sh child in its own session, so that its whole process group can be stopped."""

    def __init__(self, command: str):
        self.proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self.stdin: IO[bytes] = _pipe(self.proc.stdin)
        # The output pipes still open, by file descriptor.
        self.streams: dict[int, Stream] = {_pipe(self.proc.stdout).fileno(): "stdout",
                                           _pipe(self.proc.stderr).fileno(): "stderr"}
        self.stdin_gone = False

    def write_stdin(self, data: bytes) -> None:
        if self.stdin_gone:
            return
        try:
            self.stdin.write(data)
            self.stdin.flush()
        except BrokenPipeError:  # the command exited or closed its stdin: it reads no more
            self.stdin_gone = True

    def close_stdin(self) -> None:
        try:
            self.stdin.close()
        except BrokenPipeError:  # closing flushes what a gone reader left unwritten
            pass

    def read(self, wait: float) -> list[tuple[Stream, bytes]]:
        readable = wait_readable(list(self.streams), wait)
        chunks: list[tuple[Stream, bytes]] = []
        for fd in readable:
            data = os.read(fd, 65536)
            if data:
                chunks.append((self.streams[fd], data))
            else:
                del self.streams[fd]
        return chunks

    def exit_status(self) -> Optional[int]:
        if self.streams:
            return None
        return self.proc.wait()

    def check_alive(self, heard: bool) -> None:
        """A local command has no link that could die."""

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe and not pipe.closed:
                pipe.close()


def _pipe(stream: Optional[IO[bytes]]) -> IO[bytes]:
    """A pipe Popen was asked for (typed Optional because others are not)."""
    assert stream is not None
    return stream
