"""`gpuprov lock` against a hostile index on 127.0.0.x (issue 31, items 6 and 7): a gzip bomb, an
index past the stanza cap, and a server that sends one byte at a time, for `lock --apt`
(remote/lock/apt.py) and for uv's `--torch-index` (remote/lock/__init__.py). Each ends in one
line on stderr naming the URL or lock and the bound, exit 2, within bounded time and memory.
The bench (`python3 -m bench.hostile_lock`) measures the same cases at their full size."""
from __future__ import annotations

import os
import struct
import sys
import threading
import zlib
from typing import Iterator

import pytest

from remote.ground.errors import InputError
from remote.lock.apt import parse_index
from tests.conftest import REPO
from tests.http_stub import serve
from tests.procs import SilentServer, run_measured

MIB = 1 << 20
ADDRESS = "127.0.0.92"


def gzip_of_zeros(size: int) -> bytes:
    """`size` zero bytes (whole MiB) as one gzip member, built in a second: after a full flush
    deflate starts afresh, so each MiB of zeros compresses to the same block, sent
    `size / MiB` times (RFC 1951; the member's frame: RFC 1952)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = packer.compress(bytes(MIB)) + packer.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(size // MIB):
        crc = zlib.crc32(bytes(MIB), crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + block * (size // MIB) + packer.flush() + struct.pack("<II", crc, size & 0xFFFFFFFF)


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """726 KB of gzip that decompress to 700 MiB of zeros (the round-3 attack sent 713 KB)."""
    return gzip_of_zeros(700 * MIB)


@pytest.fixture
def hostile():
    """Serve `answer` on 127.0.0.92 (`hostile(answer)` gives the URL); `hostile.dribble()` is a
    body of one byte every 0.5 s, which stops at the end of the test."""
    servers, stop = [], threading.Event()

    def start(answer):
        server = serve(answer, address=ADDRESS)
        servers.append(server)
        return f"http://{ADDRESS}:{server.server_address[1]}"

    def dribble() -> Iterator[bytes]:
        while not stop.is_set():
            yield b"P"
            stop.wait(0.5)

    start.dribble = dribble
    yield start
    stop.set()
    for server in servers:
        server.shutdown()
        server.server_close()


def lock(work, *args, env=None, timeout=120.0):
    """`invoke lock ARGS --out WORK` as a user runs it: (rc, stderr, seconds, peak RSS MiB of the
    command and the children it waited for, uv included)."""
    full_env = dict(os.environ, PYTHONPATH=str(REPO), UV_CACHE_DIR=str(work / "uv-cache"), **(env or {}))
    rc, _, err, seconds, peak = run_measured(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "lock", *args,
         "--out", str(work / "locks")], env=full_env, cwd=work, timeout=timeout)
    return rc, err, seconds, peak


APT = ("--apt", "--cuda", "13.0", "--apt-repo", "debian12/x86_64", "--apt-base")


@pytest.mark.slow
def test_a_gzip_bomb_index_is_refused_at_the_cap_in_bounded_memory(hostile, work, bomb):
    """726 KB of Packages.gz that decompress to 700 MiB of zeros: before, the command
    decompressed it whole and took 1.4 GiB; now it stops at the 64 MiB cap on the
    decompressed index."""
    url = hostile(lambda path, _h: (200, "application/gzip", bomb))
    rc, err, _, peak = lock(work, *APT, url)
    assert rc == 2, err
    assert err.strip() == (f"lock: {url}/debian12/x86_64/Packages.gz: over 64 MiB once decompressed, "
                           "the cap on an index (GPUPROV_LOCK_MAX_INDEX_BYTES sets it)")
    # Never the bomb whole (700 MiB of text; the old code's peak was 1,436 MiB). The peak
    # itself varies with how much one read inflates before the cap is checked: 109 MiB alone
    # (bench.hostile_lock), 443 MiB once in the full suite under .ci/run. The figure belongs
    # to the bench; the test holds the line that matters to a user.
    assert peak < 700, f"{peak:.0f} MiB"
    assert not (work / "locks").exists()


def test_an_index_past_the_stanza_cap_is_refused(monkeypatch):
    """Tiny stanzas under the size cap: their number is bounded too, at one per KiB of the cap
    (here 1 MiB: 1024 stanzas), so that neither the parse's time nor its memory can grow past
    what the cap on its size allows for an index of real stanzas."""
    monkeypatch.setenv("GPUPROV_LOCK_MAX_INDEX_BYTES", str(1 << 20))
    stanza = b"Package: a\nVersion: 1\nDepends: a\n\n"
    assert parse_index(stanza * 1024, "http://m/Packages").packages["a"]     # the cap itself
    with pytest.raises(InputError) as caught:
        parse_index(stanza * 1025, "http://m/Packages")
    assert str(caught.value) == ("http://m/Packages: over 1024 stanzas, one per 1024 bytes of the "
                                 "cap on an index (GPUPROV_LOCK_MAX_INDEX_BYTES sets it)")


@pytest.mark.slow
def test_an_index_that_dribbles_is_given_up_at_the_deadline(hostile, work):
    """One byte every 0.5 s never trips a timeout per read (120 s): before, the command
    waited for as long as the server went on. Now the whole fetch has a deadline."""
    url = hostile(lambda path, _h: (200, "application/gzip", hostile.dribble()))
    rc, err, _, _ = lock(work, *APT, url, env={"GPUPROV_LOCK_DEADLINE": "3"}, timeout=60)
    assert rc == 2, err
    assert err.strip() == (f"lock: {url}/debian12/x86_64/Packages.gz: not read within 3 s, the "
                           "deadline of one fetch (GPUPROV_LOCK_DEADLINE sets it)")


# -- uv's `--torch-index`: uv reads it, under the bounds remote/lock/__init__.py puts on uv

@pytest.fixture
def no_pypi():
    """uv's environment sending PyPI's requests (https) to a proxy on 127.0.0.93 that accepts and
    never answers, so nothing leaves loopback and only the hostile index can end the run. uv
    reads HTTPS_PROXY (https://docs.astral.sh/uv/reference/environment/#https_proxy)."""
    proxy = SilentServer("127.0.0.93", 0)
    yield {"HTTPS_PROXY": f"http://127.0.0.93:{proxy.sock.getsockname()[1]}", "NO_PROXY": ADDRESS}
    proxy.close()


TORCH = ("--cuda", "13.0", "--torch-index")


@pytest.mark.slow
def test_a_torch_index_that_dribbles_is_given_up_at_the_deadline(hostile, work, no_pypi):
    """uv's UV_HTTP_TIMEOUT bounds each read: before, uv waited on a dribbling index for as
    long as it went on (still running after 300 s). Now uv's process group is killed at the
    deadline. Every index uv reads holds it here (the torch index dribbles, PyPI's route never
    answers), and uv's own timeout is set past the test, so only the deadline can end it."""
    url = hostile(lambda path, _h: (200, "text/html", hostile.dribble()))
    rc, err, _, _ = lock(work, *TORCH, f"{url}/whl", timeout=60,
                         env={**no_pypi, "UV_HTTP_TIMEOUT": "3600", "GPUPROV_LOCK_DEADLINE": "5"})
    assert rc == 2, err
    assert err.strip() == ("lock: uv pip compile for cuda-13.0-wheels-torch.txt did not finish "
                           "within 5 s, the deadline of one resolution (GPUPROV_LOCK_DEADLINE sets it)")


@pytest.mark.slow
def test_a_gzip_bomb_from_the_torch_index_stops_uv_at_its_memory_cap(hostile, work, no_pypi, bomb):
    """uv keeps a whole answer in memory: the 713 KB bomb took it to 4.3 GiB before. Now its
    data is capped (here at 512 MiB), it stops there, and the command says why in one line."""
    url = hostile(lambda path, _h: (200, "text/html", bomb, {"Content-Encoding": "gzip"}))
    rc, err, _, peak = lock(work, *TORCH, f"{url}/whl",
                            env={**no_pypi, "GPUPROV_LOCK_MAX_MEMORY_BYTES": str(512 * MIB)})
    assert rc == 2, err
    assert err.strip() == ("lock: uv pip compile for cuda-13.0-wheels-torch.txt stopped at 512 MiB of "
                           "memory, the cap on one resolution (GPUPROV_LOCK_MAX_MEMORY_BYTES sets it): "
                           "an index answered with more than a resolution takes")
    assert peak < 600, f"{peak:.0f} MiB"
