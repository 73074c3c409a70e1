"""The one strict tar reader (remote/transport/tarstream.py, issue 41), on real archives: made by
GNU tar from real folders, by Python's tarfile, and crafted block by block (tests/tarcraft.py)
where an attacker would. Where a crafted archive is refused, GNU tar is asked what it makes of
the same bytes: the refusals here are of archives GNU tar would read differently from a reader
that gave up silently, or read at all."""
from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from remote.transport.tarstream import CHUNK, EXTENDED_MAX, TRAILER_MAX, GzipStream, TarReader, TarRefused
from tests import tarcraft
from tests.tarcraft import BLOCK, bad_uid, checksummed, header, member, tar_of


class CountingStream:
    """A stream that counts what is read from it (the reader's reads are what it allocates)."""

    def __init__(self, data: bytes):
        self.f = io.BytesIO(data)
        self.largest = 0
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        self.largest = max(self.largest, len(data))
        self.read_bytes += len(data)
        return data


def read_all(data: bytes, gz: bool = False) -> dict:
    """name -> bytes (None for a folder), as the reader gives them."""
    stream = GzipStream(io.BytesIO(data)) if gz else io.BytesIO(data)
    reader = TarReader(stream)
    out = {}
    for m in reader.members():
        out[m.name] = None if m.isdir else b"".join(reader.data())
    return out


def refused(data: bytes, gz: bool = False) -> TarRefused:
    with pytest.raises(TarRefused) as exc:
        read_all(data, gz)
    return exc.value


def gnu_tar_lists(archive: bytes, tmp_path: Path) -> list[str]:
    """The names GNU tar reads from `archive` (it warns, and reads on)."""
    path = tmp_path / "crafted.tar"
    path.write_bytes(archive)
    return subprocess.run(["tar", "-tf", str(path)], capture_output=True, text=True).stdout.split()


@pytest.fixture
def folder(tmp_path) -> Path:
    """An ordinary folder: files, an empty one, a subfolder, a name of 150 bytes, UTF-8."""
    root = tmp_path / "run"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "results.json").write_text('{"ok": true}\n')
    (root / "empty.log").write_bytes(b"")
    (root / "sub" / "deeper" / ("n" * 150 + ".txt")).write_bytes(os.urandom(3000))
    (root / "sub" / "été.log").write_text("x\n")
    (root / "big.bin").write_bytes(os.urandom(3 * CHUNK + 17))
    return root


def expected(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in root.rglob("*")}


@pytest.mark.parametrize("fmt", ["gnu", "posix", "ustar", "oldgnu"])
def test_gnu_tar_archives_of_an_ordinary_folder_read_whole(folder, fmt):
    """`tar -czf - -C DIR .` (what a host answers a pull with) in each of GNU tar's formats;
    long names (GNU 'L', PAX `path`, the ustar prefix), UTF-8 names, big and empty files."""
    if fmt in ("ustar",):   # ustar has no long names past 255 bytes in all; this one fits the prefix
        (folder / "sub" / "deeper" / ("n" * 150 + ".txt")).rename(folder / "sub" / "deeper" / "short.txt")
    archive = subprocess.run(["tar", f"--format={fmt}", "-czf", "-", "-C", str(folder), "."],
                             capture_output=True, check=True).stdout
    got = read_all(archive, gz=True)
    assert got.pop("") is None  # the folder itself, `./`
    assert got == expected(folder)


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_tarfile_archives_read_whole(folder, fmt):
    """What validate/evidence.py and the bundle writer make (Python's tarfile), each format."""
    if fmt == tarfile.USTAR_FORMAT:
        (folder / "sub" / "deeper" / ("n" * 150 + ".txt")).rename(folder / "sub" / "deeper" / "short.txt")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=fmt) as tar:
        tar.add(str(folder), arcname="stem")
    got = read_all(buffer.getvalue(), gz=True)
    assert got == {"stem": None, **{f"stem/{k}": v for k, v in expected(folder).items()}}


def test_data_comes_in_bounded_pieces_and_headers_in_blocks():
    """Memory is the same whatever a header claims: no read of more than CHUNK bytes."""
    stream = CountingStream(tar_of([member("big", bytes(5 * CHUNK + 3))]))
    reader = TarReader(stream)
    sizes = [len(piece) for m in reader.members() for piece in reader.data()]
    assert sizes == [CHUNK] * 5 + [3]
    assert stream.largest <= CHUNK


def test_a_member_behind_a_malformed_uid_is_refused_where_tarfile_stopped(tmp_path):
    """The uid field `0 00000`: tarfile took it as the archive's end (no error, the hidden
    member unseen), GNU tar reads on and lists it. Here: refused, naming that header."""
    archive = tar_of([member("./results.json", b"{}"),
                      member("./hidden.sh", b"#!/bin/sh\n", bad_uid(header("./hidden.sh", 10))),
                      member("./planted", b"x")])
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert tar.getnames() == ["./results.json"], "tarfile stops silently"
    assert gnu_tar_lists(archive, tmp_path) == ["./results.json", "./hidden.sh", "./planted"]
    exc = refused(archive)
    assert "a malformed uid field b'0 00000\\x00'" in str(exc) and "'./hidden.sh'" in str(exc), exc


@pytest.mark.parametrize("field, value", [
    ("mode", b" 000644\0"),        # a leading space
    ("size", b"0000000001x\0"),    # not octal
    ("mtime", b"\x80" + bytes(10) + b"\1"),   # base-256 (GNU's for big numbers)
    ("gid", b"00000008\0"[:8]),    # 8 is no octal digit
    ("uid", bytes(8)),             # empty
])
def test_malformed_numeric_fields_are_refused(field, value):
    offsets = {"mode": 100, "uid": 108, "gid": 116, "size": 124, "mtime": 136}
    start = offsets[field]
    block = header("./f", 1)
    block = checksummed(block[:start] + value + block[start + len(value):])
    exc = refused(tar_of([block + b"x" + bytes(511)]))
    assert f"a malformed {field} field" in str(exc) or f"a base-256 {field} field" in str(exc), exc


def test_a_wrong_checksum_is_refused():
    block = header("./f", 1)
    block = block[:100] + b"0000755\0" + block[108:]     # the mode changed, the checksum not
    exc = refused(tar_of([member("./a", b"a"), block + b"x" + bytes(511)]))
    assert "checksum is wrong" in str(exc) and "byte 1024" in str(exc), exc


@pytest.mark.parametrize("kind, what", [
    (tarfile.SYMTYPE, "a symbolic link"), (tarfile.LNKTYPE, "a hard link"),
    (tarfile.CHRTYPE, "a character device"), (tarfile.BLKTYPE, "a block device"),
    (tarfile.FIFOTYPE, "a fifo"), (tarfile.CONTTYPE, "a contiguous file"),
    (tarfile.GNUTYPE_SPARSE, "a sparse file"), (b"M", "a multi-volume part"),
    (b"V", "a volume label"), (tarfile.XGLTYPE, "a global header"), (b"Z", "an unknown member type"),
])
def test_only_plain_files_and_folders(kind, what):
    link = "/etc/shadow" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
    exc = refused(tar_of([member("./ok", b"1"), header("./x", 0, kind, linkname=link)]))
    assert what in str(exc) and exc.not_plain, exc


def test_a_symlink_made_by_gnu_tar_is_refused(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "results.json").write_text("{}")
    (src / "shadow").symlink_to("/etc/shadow")
    archive = subprocess.run(["tar", "-czf", "-", "-C", str(src), "."], capture_output=True,
                             check=True).stdout
    exc = refused(archive, gz=True)
    assert str(exc) == "a symbolic link: './shadow'", exc


def test_gnu_tars_sparse_formats_are_refused(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "holes", "wb") as f:
        f.truncate(1 << 30)
    for fmt in ("gnu", "posix"):
        archive = subprocess.run(["tar", "--sparse", f"--format={fmt}", "-czf", "-", "-C", str(src), "."],
                                 capture_output=True, check=True).stdout
        assert str(refused(archive, gz=True)) == "a sparse file: './holes'"


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME])
def test_a_huge_extended_header_is_refused_from_its_size_field(kind):
    """A PAX header or GNU long name of 1 GiB: refused before a byte of it is read (the
    reader read its header block only; tarfile read it whole)."""
    pieces = tarcraft.huge_extended(kind, 1 << 30)
    head = next(pieces)
    stream = CountingStream(head + b"a" * (1 << 16))  # the rest never read
    with pytest.raises(TarRefused, match=f"an extended header of {1 << 30} bytes, over the {EXTENDED_MAX}"):
        list(TarReader(stream).members())
    assert stream.read_bytes == BLOCK


def test_an_extended_header_just_under_the_cap_is_read():
    name = "d/" * 1000 + "f"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        tar.addfile(info, io.BytesIO(b""))
    assert read_all(buffer.getvalue()) == {name: b""}


@pytest.mark.parametrize("key", ["linkpath", "hdrcharset", "SCHILY.xattr.security.capability",
                                 "GNU.sparse.size", "comment"])
def test_pax_keys_outside_the_allow_list_are_refused(key):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("./f")
        info.pax_headers = {key: "1"}
        tar.addfile(info, io.BytesIO(b""))
    exc = refused(buffer.getvalue())
    assert key[:20] in str(exc) or "sparse" in str(exc), exc


def test_a_pax_size_other_than_the_headers_is_refused():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("./f")
        info.pax_headers = {"size": "5"}
        tar.addfile(info, io.BytesIO(b""))
    assert "a PAX size that is not its header's" in str(refused(buffer.getvalue()))


@pytest.mark.parametrize("name", ["/etc/cron.d/x", "../x", "a/../../x", "a//b", "a/./b", "", "a\nb",
                                  "./"])
def test_unsafe_names_are_refused(name):
    assert "an unsafe path" in str(refused(tar_of([member(name, b"x")])))


def test_a_name_twice_is_refused():
    """GNU tar would write the second over the first: the checked one is not the one kept."""
    exc = refused(tar_of([member("./results.json", b"{}"), member("results.json", b"[]")]))
    assert "a name twice in the archive: 'results.json'" == str(exc)


def test_the_prefix_field_counts_only_with_the_posix_magic():
    """ustar's prefix is part of the name; in GNU's old format those bytes are other fields
    (GNU tar ignores them for the name): such a header is refused, not guessed at."""
    posix = header("f", 1, fmt=tarfile.USTAR_FORMAT)
    posix = checksummed(posix[:345] + b"dir".ljust(155, b"\0") + posix[500:])
    assert read_all(tar_of([posix + b"x" + bytes(511)])) == {"dir/f": b"x"}
    gnu = header("f", 1, fmt=tarfile.GNU_FORMAT)
    gnu = checksummed(gnu[:345] + b"dir".ljust(155, b"\0") + gnu[500:])
    assert "GNU's old fields" in str(refused(tar_of([gnu + b"x" + bytes(511)])))


def test_trailing_data_after_the_end_blocks_is_refused(tmp_path):
    """GNU tar stops at the end blocks; anything after them but zeros is refused, and so is a
    lone zero block with a header after it (GNU tar stops there too, with a warning)."""
    honest = tar_of([member("./results.json", b"{}")])
    assert read_all(honest) == {"results.json": b"{}"}
    assert read_all(honest + bytes(64 * BLOCK)) == {"results.json": b"{}"}   # a bigger record
    trailing = honest + member("./planted", b"x")
    with tarfile.open(fileobj=io.BytesIO(trailing)) as tar:
        assert tar.getnames() == ["./results.json"], "tarfile stops silently"
    assert "data after the end of the archive" in str(refused(trailing))
    lone = member("./results.json", b"{}") + bytes(BLOCK) + member("./planted", b"x") + bytes(2 * BLOCK)
    assert "a lone zero block, then data" in str(refused(lone))
    assert "data after the end" in str(refused(honest + bytes(TRAILER_MAX + BLOCK)))


def test_a_cut_or_damaged_stream_is_refused():
    honest = tar_of([member("./results.json", b"{}" * 1000)])
    assert refused(honest[:700]).damaged
    assert refused(honest[:BLOCK]).damaged  # no end blocks at all
    gz = gzip.compress(honest)
    assert refused(gz[:-9], gz=True).damaged
    assert "Not a gzipped file" in str(refused(gz + b"garbage", gz=True))
    # gzip members back to back (RFC 1952, 2.2) are one stream, as for gzip -d
    split = gzip.compress(honest[:1024]) + gzip.compress(honest[1024:])
    assert read_all(split, gz=True) == {"results.json": b"{}" * 1000}
    assert "data after the end" in str(refused(gz + gz, gz=True))


def test_an_extended_header_with_the_other_formats_magic_is_refused():
    """GNU tar and tarfile write a PAX header with the POSIX magic and a GNU long name with
    GNU's; the other way round is not what either writes, and is refused."""
    record = b"16 path=planted\n"
    pax = header("././@PaxHeader", len(record), tarfile.XHDTYPE, tarfile.GNU_FORMAT)
    exc = refused(tar_of([member("./ok", b"1"), pax + record + bytes(-len(record) % BLOCK) + member("./f", b"x")]))
    assert "an extended header b'x' with the other format's magic" in str(exc), exc
    name = b"planted\0"
    long = header("././@LongLink", len(name), tarfile.GNUTYPE_LONGNAME, tarfile.USTAR_FORMAT)
    exc = refused(tar_of([long + name + bytes(-len(name) % BLOCK) + member("./f", b"x")]))
    assert "an extended header b'L' with the other format's magic" in str(exc), exc


def test_a_path_part_longer_than_a_file_name_is_refused():
    """Linux takes no file name over 255 bytes: such a member is the archive's fault, refused
    as read, not a write this machine failed ("File name too long"), which does not count
    against the host."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("./" + "a" * 256)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    assert "a path part over 255 bytes in" in str(refused(buffer.getvalue()))
