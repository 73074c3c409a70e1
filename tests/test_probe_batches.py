"""Probe batches come back in one piece: `in_one_write` (real sh, dd and pipes on this machine)."""
from __future__ import annotations

from pathlib import Path

from remote.config.inventory import Host, Timeouts
from remote.engine.probes import batch_script, in_one_write, parse_batch
from remote.ground.errors import Where
from remote.transport.local import LocalConnection

# Three writes with pauses between them: each would reach the reader on its own.
PIECES = "printf 'one\\n'; sleep 0.2; printf 'two\\n'; sleep 0.2; printf 'three'"


def local() -> LocalConnection:
    return LocalConnection(Host("localhost", "localhost", Where("inv", 1), connection="local"),
                           Timeouts())


def chunks_of(script: str) -> tuple[list[str], bytes]:
    chunks: list[str] = []
    result = local().run(script, on_output=lambda stream, text: chunks.append(text)
                         if stream == "stdout" else None)
    return chunks, result.stdout


def test_the_answer_arrives_in_one_write():
    chunks, out = chunks_of(in_one_write(PIECES))
    assert out == b"one\ntwo\nthree"
    assert chunks == ["one\ntwo\nthree"]


def test_without_it_the_pieces_arrive_apart():
    """What `in_one_write` saves: the same script sent as is reaches the reader in pieces."""
    chunks, out = chunks_of(PIECES)
    assert out == b"one\ntwo\nthree"
    assert len(chunks) == 3


def test_a_dd_without_fullblock_passes_the_output_on_whole(tmp_path: Path):
    """A host whose dd refuses `iflag=fullblock` still answers, through cat."""
    (tmp_path / "dd").write_text("#!/bin/sh\necho 'dd: invalid input flag' >&2\nexit 1\n")
    (tmp_path / "dd").chmod(0o755)
    _, out = chunks_of(f"PATH={tmp_path}:$PATH\n" + in_one_write(PIECES))
    assert out == b"one\ntwo\nthree"


def test_a_probe_batch_reads_the_same_in_one_write():
    script, token = batch_script([(0, "printf 'file 644\\n'"), (1, "false"), (2, "echo x; exit 3")])
    def answers(text: str) -> dict:
        return {k: (p.rc, p.out) for k, p in parse_batch(local().run(text).out, token).items()}
    assert answers(in_one_write(script)) == answers(script) == {
        0: (0, "file 644"), 1: (1, ""), 2: (3, "x")}
