"""Tar archives as an attacker writes them, block by block (issue 41): headers built by Python's
tarfile and then changed where the attack needs it, with their checksum made right again, so
that GNU tar reads them (each test that uses one shows what GNU tar makes of it).

- `bad_uid(header)`: the uid field `0 00000`: GNU tar reads it as 0 (it stops a number at a
  space, src/list.c from_header), Python's tarfile refuses it and, past the first header, took
  the archive as ended there without an error (tarfile.py TarFile.next), so every member after
  it was hidden from gpuprov's checks.
- `huge_extended(kind, size)`: a PAX ('x') or GNU long name ('L') header of `size` bytes of
  one repeated letter: tarfile read it whole (`fileobj.read(size)`) before any limit.
"""
from __future__ import annotations

import gzip
import io
import tarfile
import zlib
from typing import Iterable, Iterator, Optional

BLOCK = 512


def checksummed(block: bytes) -> bytes:
    """`block` (a 512-byte header) with its checksum field made right (pax(1): the unsigned
    sum of the header, its checksum field taken as spaces; "%06o\\0 " as GNU tar writes it)."""
    block = block[:148] + b" " * 8 + block[156:]
    return block[:148] + b"%06o\0 " % sum(block) + block[156:]


def header(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE, fmt: int = tarfile.GNU_FORMAT,
           linkname: str = "", mode: int = 0o644) -> bytes:
    """One ustar header block (no extended header: `name` under 100 bytes) as tarfile writes it."""
    info = tarfile.TarInfo(name)
    info.size, info.type, info.linkname, info.mode, info.mtime = size, kind, linkname, mode, 1_700_000_000
    data = info.tobuf(format=fmt)
    assert len(data) == BLOCK, "a name that needs an extended header"
    return data


def bad_uid(block: bytes) -> bytes:
    """`block` with the uid field `0 00000` (see the module docstring)."""
    return checksummed(block[:108] + b"0 00000\0" + block[116:])


def member(name: str, data: bytes, head: Optional[bytes] = None) -> bytes:
    """A regular file member: its header (`head`, or tarfile's GNU one), data, padding."""
    head = head if head is not None else header(name, len(data))
    return head + data + bytes(-len(data) % BLOCK)


def end(record: int = 20 * BLOCK, written: int = 0) -> bytes:
    """The two zero blocks, padded to `record` bytes counted from `written` (GNU tar's 20 blocks)."""
    total = written + 2 * BLOCK
    return bytes(2 * BLOCK + -total % record)


def tar_of(parts: Iterable[bytes]) -> bytes:
    body = b"".join(parts)
    return body + end(written=len(body))


def members_of(archive: bytes) -> bytes:
    """An archive's bytes without its end blocks (what tarfile wrote before them)."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        last = tar.getmembers()[-1]
    return archive[:last.offset_data + last.size + -last.size % BLOCK]


def huge_extended(kind: bytes, size: int) -> Iterator[bytes]:
    """The header of a `kind` ('x' or 'L') extended header of `size` bytes, then its data, in
    1 MiB pieces (a PAX one is one record `path=aaa...`)."""
    name = "././@PaxHeader" if kind == tarfile.XHDTYPE else "././@LongLink"
    yield header(name, size, kind, tarfile.USTAR_FORMAT if kind == tarfile.XHDTYPE else tarfile.GNU_FORMAT)
    if kind == tarfile.XHDTYPE:
        digits = len(str(size))
        first = f"{size} path=".encode()
        assert len(first) == digits + 6
        yield first
        left = size - len(first) - 1
    else:
        left = size - 1
    while left:
        piece = min(left, 1 << 20)
        yield b"a" * piece
        left -= piece
    yield b"\n" if kind == tarfile.XHDTYPE else b"\0"
    yield bytes(-size % BLOCK)


def gzipped(pieces: Iterable[bytes]) -> bytes:
    """One gzip member of `pieces`, compressed as they come (never all in memory uncompressed)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0) as gz:
        for piece in pieces:
            gz.write(piece)
    return out.getvalue()


def gunzip_size(data: bytes) -> int:
    """How many bytes `data` (one gzip member) unpacks to, counted piece by piece."""
    inflate, total = zlib.decompressobj(31), 0
    while data:
        total += len(inflate.decompress(data, 1 << 20))
        data = inflate.unconsumed_tail
    return total
