"""The one reader of every archive gpuprov takes from outside: a pulled run folder
(`transfer.publish_pull`), a bundle (remote/bundle/archive.py) and an evidence archive
(remote/evidence/archive.py).

Why not Python's tarfile: `TarFile.next` takes a header it cannot parse after the first one as
the end of the archive and stops without an error, while GNU tar (which unpacks the same bytes
on a host) reads on, so members could hide behind a malformed numeric field (a uid of
`0 00000`); and it reads a PAX extended header or a GNU long name whole (`fileobj.read(size)`)
before any limit, so a header's size field alone decided the control process's memory. Here:

- Each 512-byte header is parsed strictly (POSIX.1-2017 pax(1), "ustar Interchange Format",
  https://pubs.opengroup.org/onlinepubs/9699919799/utilities/pax.html; GNU's own layout in the
  GNU tar manual, "Basic Tar Format", https://www.gnu.org/software/tar/manual/html_node/Standard.html):
  its checksum verified (the unsigned sum, which GNU tar and tarfile both write); a numeric
  field only octal digits, then only NUL or space to its end (base-256 and leading spaces
  refused); the prefix field used only with the POSIX magic "ustar\\0" "00" (the old GNU magic
  "ustar  \\0" keeps other things there, and GNU tar reads it so); every text field padded
  with NULs after its text, the link name empty.
- Only regular files ('0') and directories ('5'), each preceded by at most one PAX extended
  header ('x', keys in PAX_KEYS only, the POSIX magic) or GNU long name ('L', GNU's magic).
  Links, devices, fifos, sparse files ('S' or GNU.sparse.* keys), multi-volume parts, global
  headers ('g') and every other type are refused. An extended header's size is checked
  against EXTENDED_MAX before a byte of it is read; member data is handed out in pieces of at
  most CHUNK bytes: the memory this takes is the same whatever a header claims.
- Names: UTF-8, no control characters, not absolute, no `..` or empty part, at most NAME_MAX
  bytes, each once. A leading `./` is dropped (GNU tar's `-C dir .`); a directory's trailing
  `/` too; a file's name never ends in `/`.
- The archive ends with zero blocks (at least two, pax(1)), and everything after them, up to
  TRAILER_MAX bytes, is zero: GNU tar pads to its record size (20 blocks by default, GNU tar
  manual, "Blocking Factor"). Trailing data, a header refused, or a stream that ends early is a
  refusal (`TarRefused`), never a silent end.

What this reader accepts, GNU tar reads the same way: the member list a caller checked is the
list GNU tar extracts from those bytes. GNU tar's own reading (src/list.c, `read_header` and
`from_header`; read in the copy of GNU tar, copyright 1988-2017, at github.com/utsaslab/SplitFS
tar/src/list.c) is wider, never narrower, on each point: it accepts a signed checksum too, skips a leading NUL
or spaces in a number and stops one at a space (how `0 00000` reads as 0), reads base-256,
takes 'x' and 'L' whatever the magic, uses the prefix whenever the magic is "ustar\0", and
treats an unknown type as a file; each of those is refused here.
"""
from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator, Optional, Protocol

BLOCK = 512
CHUNK = 1 << 20
# Chosen (unsourced): a PAX header of a few records, or a GNU long name, is a few hundred
# bytes; Linux's PATH_MAX is 4096 (linux/limits.h).
EXTENDED_MAX = 64 << 10
NAME_MAX = 4096
PART_MAX = 255  # a file name's length on Linux, NAME_MAX of linux/limits.h
OWNER_MAX = 256  # a PAX uname or gname (chosen: ustar's fields hold 31 bytes)
# Chosen: GNU tar's default record is 20 blocks (10240 bytes) and tarfile's RECORDSIZE the
# same; a larger blocking factor (`-b`) still pads with far less than this.
TRAILER_MAX = 1 << 20
# The PAX keys accepted (pax(1), "pax Extended Header Keywords"): those GNU tar and tarfile
# write for a plain file or folder. `linkpath`, `hdrcharset`, `GNU.sparse.*`, `SCHILY.*` and
# every other key are refused.
PAX_KEYS = frozenset({"path", "size", "mtime", "atime", "ctime", "uid", "gid", "uname", "gname"})
POSIX_MAGIC = b"ustar\x0000"
GNU_MAGIC = b"ustar  \x00"
REGULAR, DIRECTORY, PAX, LONGNAME = b"0", b"5", b"x", b"L"
_DECIMAL = re.compile(r"[0-9]{1,20}")
_TIME = re.compile(r"-?[0-9]{1,20}(\.[0-9]{1,20})?")
_TYPES = {b"1": "a hard link", b"2": "a symbolic link", b"3": "a character device",
          b"4": "a block device", b"6": "a fifo", b"7": "a contiguous file", b"S": "a sparse file",
          b"M": "a multi-volume part", b"V": "a volume label", b"g": "a global header",
          b"K": "a long link name", b"D": "a dump directory", b"N": "an old long name"}


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class TarRefused(ValueError):
    """The archive is not one this reader takes: `where` (the member's name as the archive
    has it, quoted, or a place in the archive) and `why` (a phrase: "a sparse file");
    `damaged` when the stream is cut or its compression broken; `not_plain` for a member
    that is neither a plain file nor a folder (`name`: its name)."""

    def __init__(self, where: str, why: str, damaged: bool = False, name: str = "",
                 not_plain: bool = False):
        super().__init__(f"{why}: {where}")
        self.where = where
        self.why = why
        self.damaged = damaged
        self.name = name
        self.not_plain = not_plain


@dataclass(frozen=True)
class Member:
    """One member as read: `name` normalised (no `./`, no trailing `/`), `raw` as the
    archive has it; the header's fields, `pax` the PAX keys that applied to it."""

    name: str
    raw: str
    isdir: bool
    size: int
    mode: int
    uid: int
    gid: int
    mtime: int
    uname: str
    gname: str
    posix: bool          # the POSIX magic ("ustar\0" "00"); else GNU's
    prefixed: bool       # the name took the ustar prefix field
    long_name: bool      # the name came from a GNU 'L' header
    pax: dict[str, str] = field(default_factory=dict)


class TarReader:
    """An uncompressed tar stream (`read(n)` only), read once front to back: `members()`
    yields each member; `data()` gives the current member's bytes, a piece at a time (what
    is left unread is read past before the next header). `offset` is the bytes read."""

    def __init__(self, stream: Readable):
        self.stream = stream
        self.offset = 0
        self._left = 0          # data of the current member not yet read
        self._pad = 0           # its padding to the next block
        self._current = ""
        self._names: set[str] = set()

    def _read(self, size: int, what: str) -> bytes:
        parts = []
        while size:
            data = self.stream.read(size)
            if not data:
                raise TarRefused(what, "the archive ends early, inside", damaged=True)
            parts.append(data)
            size -= len(data)
            self.offset += len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def data(self) -> Iterator[bytes]:
        """The current member's data, in pieces of at most CHUNK bytes."""
        while self._left:
            data = self._read(min(CHUNK, self._left), self._current)
            self._left -= len(data)
            yield data
        self._skip_pad()

    def _skip_pad(self) -> None:
        if self._pad:
            if self._read(self._pad, self._current).strip(b"\0"):
                raise TarRefused(self._current, "data in the padding after")
            self._pad = 0

    def members(self) -> Iterator[Member]:
        """Every member, then the end checked (see the module docstring)."""
        while True:
            for _ in self.data():
                pass
            member = self._next()
            if member is None:
                return
            self._current = repr(member.raw)
            self._left = member.size
            self._pad = -member.size % BLOCK
            yield member

    def _next(self) -> Optional[Member]:
        pax: Optional[dict[str, str]] = None
        long_name: Optional[str] = None
        while True:
            where = f"the header at byte {self.offset}"
            block = self._read(BLOCK, where)
            if not block.strip(b"\0"):
                if pax is not None or long_name is not None:
                    raise TarRefused(where, "an extended header with no member after it")
                self._end()
                return None
            header = _Header(block, where)
            kind = header.typeflag
            # each as its writers make it (GNU tar, tarfile): a PAX header with the POSIX
            # magic, a GNU long name with GNU's; another reader could take the other for data
            if kind == PAX and not header.posix or kind == LONGNAME and header.posix:
                raise TarRefused(where, f"an extended header {kind!r} with the other format's magic")
            if kind == PAX and pax is None and long_name is None:
                pax = _pax_records(self._extended(header), where)
            elif kind == LONGNAME and long_name is None and pax is None:
                long_name = _long_name(self._extended(header), where)
            elif kind in (PAX, LONGNAME):
                raise TarRefused(where, "a second extended header for one member")
            else:
                return self._member(header, pax or {}, long_name)

    def _extended(self, header: _Header) -> bytes:
        size = header.number("size")
        if size > EXTENDED_MAX:
            raise TarRefused(header.where, f"an extended header of {size} bytes, over the "
                             f"{EXTENDED_MAX} allowed")
        data = self._read(size, header.where)
        if self._read(-size % BLOCK, header.where).strip(b"\0"):
            raise TarRefused(header.where, "data in the padding after")
        return data

    def _member(self, header: _Header, pax: dict[str, str], long_name: Optional[str]) -> Member:
        raw = header.name()
        if long_name is not None:
            raw = long_name
        if "path" in pax:
            if long_name is not None:
                raise TarRefused(repr(raw), "both a PAX path and a GNU long name for")
            raw = pax["path"]
        kind = header.typeflag
        if kind not in (REGULAR, DIRECTORY):
            raise TarRefused(repr(raw), _TYPES.get(kind, f"an unknown member type {kind!r}"),
                             name=raw, not_plain=True)
        if any(key.startswith("GNU.sparse.") for key in pax):
            name = pax.get("GNU.sparse.name", raw)
            raise TarRefused(repr(name), "a sparse file", name=name, not_plain=True)
        if header.block[157:257].strip(b"\0"):
            raise TarRefused(repr(raw), "a link name in the header of")
        if set(pax) - PAX_KEYS:
            raise TarRefused(repr(raw), f"the PAX key {sorted(set(pax) - PAX_KEYS)[0][:40]!r} for")
        if not header.posix and header.block[345:500].strip(b"\0"):
            raise TarRefused(repr(raw), "GNU's old fields (times, offsets, sparse map) in the header of")
        size = header.number("size")
        if "size" in pax and int(pax["size"]) != size:
            raise TarRefused(repr(raw), "a PAX size that is not its header's, for")
        if kind == DIRECTORY and size:
            raise TarRefused(repr(raw), "a folder with data")
        name = _normal(raw, kind == DIRECTORY)
        if name in self._names:
            raise TarRefused(repr(raw), "a name twice in the archive")
        self._names.add(name)
        return Member(name=name, raw=raw, isdir=kind == DIRECTORY, size=size,
                      mode=header.number("mode"), uid=header.number("uid"),
                      gid=header.number("gid"), mtime=header.number("mtime"),
                      uname=header.text("uname"), gname=header.text("gname"),
                      posix=header.posix, prefixed=bool(header.posix and header.text("prefix")),
                      long_name=long_name is not None, pax=pax)

    def _end(self) -> None:
        """After the first zero block: another, then only zeros, then the stream's end."""
        where = f"the end of the archive (byte {self.offset})"
        if self._read(BLOCK, where).strip(b"\0"):
            raise TarRefused(where, "a lone zero block, then data, at")
        trailer = 0
        while True:
            data = self.stream.read(CHUNK)
            if not data:
                return
            trailer += len(data)
            self.offset += len(data)
            if data.strip(b"\0") or trailer > TRAILER_MAX:
                raise TarRefused(where, "data after the end of the archive, at")


# (offset, length) of each field of the ustar header (pax(1), "ustar Header Block")
_FIELDS = {"name": (0, 100), "mode": (100, 8), "uid": (108, 8), "gid": (116, 8),
           "size": (124, 12), "mtime": (136, 12), "chksum": (148, 8), "linkname": (157, 100),
           "magic": (257, 8), "uname": (265, 32), "gname": (297, 32), "devmajor": (329, 8),
           "devminor": (337, 8), "prefix": (345, 155)}


class _Header:
    """One header block, checked on creation: magic, checksum, numeric and text fields."""

    def __init__(self, block: bytes, where: str):
        self.block = block
        self.where = where
        magic = self._raw("magic")
        if magic not in (POSIX_MAGIC, GNU_MAGIC):
            raise TarRefused(where, "no ustar or GNU magic (not a tar archive, or damaged)")
        self.posix = magic == POSIX_MAGIC
        self.typeflag = block[156:157]
        # the unsigned sum of the header's bytes, its checksum field taken as spaces (pax(1))
        if self.number("chksum") != sum(block[:148]) + 8 * 0x20 + sum(block[156:]):
            raise TarRefused(where, "a header whose checksum is wrong")
        try:
            self.where = f"{self.name()!r} (the header at byte {where.rsplit(' ', 1)[-1]})"
        except TarRefused:
            pass
        for name in ("mode", "uid", "gid", "size", "mtime"):
            self.number(name)
        for name in ("devmajor", "devminor"):
            if self._raw(name).strip(b"\0"):
                self.number(name)
        for name in ("uname", "gname"):
            self.text(name)
        if self.block[500:].strip(b"\0"):
            raise TarRefused(self.where, "data in the header's padding, for")

    def _raw(self, name: str) -> bytes:
        start, length = _FIELDS[name]
        return self.block[start:start + length]

    def number(self, name: str) -> int:
        """An octal field: digits, then NUL or space to its end; anything else refused."""
        raw = self._raw(name)
        if raw[:1] in (b"\x80", b"\xff"):
            raise TarRefused(self.where, f"a base-256 {name} field (GNU tar's form for a number too big "
                             "for octal) in the header of")
        digits = raw.rstrip(b"\0 ")
        if not digits or not all(0x30 <= c <= 0x37 for c in digits):
            raise TarRefused(self.where, f"a malformed {name} field {raw!r} in the header of")
        return int(digits, 8)

    def text(self, name: str) -> str:
        """A text field: its text, then only NULs; UTF-8."""
        raw = self._raw(name)
        text, _, rest = raw.partition(b"\0")
        if rest.strip(b"\0"):
            raise TarRefused(self.where, f"data after the {name} field's end in the header of")
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError:
            raise TarRefused(self.where, f"a {name} field that is not UTF-8 in the header of") from None

    def name(self) -> str:
        name = self.text("name")
        if self.posix:
            prefix = self.text("prefix")
            if prefix:
                return f"{prefix}/{name}"
        return name


def _pax_records(data: bytes, where: str) -> dict[str, str]:
    """PAX records "LEN KEY=VALUE\\n" (pax(1), "pax Extended Header"), keys in PAX_KEYS, each once."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        length_text, space, _ = data[pos:pos + 21].partition(b" ")
        if not space or not _DECIMAL.fullmatch(length_text.decode("ascii", "replace")):
            raise TarRefused(where, "a malformed PAX record in")
        end = pos + int(length_text)
        record = data[pos + len(length_text) + 1:end]
        if end > len(data) or not record.endswith(b"\n") or b"=" not in record:
            raise TarRefused(where, "a malformed PAX record in")
        key_bytes, _, value_bytes = record[:-1].partition(b"=")
        try:
            key, value = key_bytes.decode("utf-8"), value_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise TarRefused(where, "a PAX record that is not UTF-8 in") from None
        if key in records:
            raise TarRefused(where, f"the PAX key {key[:40]!r} twice in")
        if key in ("size", "uid", "gid") and not _DECIMAL.fullmatch(value) or \
                key.endswith("time") and not _TIME.fullmatch(value) or \
                key in ("uname", "gname") and len(value) > OWNER_MAX:
            raise TarRefused(where, f"a malformed PAX {key} in")
        records[key] = value
        pos = end
    return records


def _long_name(data: bytes, where: str) -> str:
    """A GNU 'L' header's name: its text, then NULs (at least one)."""
    text, nul, rest = data.partition(b"\0")
    if not nul or rest.strip(b"\0"):
        raise TarRefused(where, "a malformed GNU long name in")
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError:
        raise TarRefused(where, "a GNU long name that is not UTF-8 in") from None


def _normal(raw: str, isdir: bool) -> str:
    """`raw` without a leading `./` (and a folder's trailing `/`); refused unless plain."""
    if len(raw.encode()) > NAME_MAX or any(ord(c) < 0x20 or ord(c) == 0x7f for c in raw):
        raise TarRefused(repr(raw), "an unsafe path")
    name = raw
    while name.startswith("./"):
        name = name[2:]
    if isdir:
        name = name[:-1] if name.endswith("/") else name
        if name == ".":
            name = ""
    parts = name.split("/")
    if raw.startswith("/") or any(p in ("", ".", "..") for p in parts) and name != "":
        raise TarRefused(repr(raw), "an unsafe path")
    if any(len(p.encode()) > PART_MAX for p in parts):
        raise TarRefused(repr(raw), f"a path part over {PART_MAX} bytes in")
    if not isdir and name == "":
        raise TarRefused(repr(raw), "an unsafe path")
    return name


class GzipStream:
    """A gzip stream's uncompressed bytes (`read(n)`), its end checked: members back to back
    (RFC 1952, 2.2), then only zero bytes; a cut or damaged stream is TarRefused."""

    def __init__(self, raw: BinaryIO):
        self.gz = gzip.GzipFile(fileobj=raw, mode="rb")

    def read(self, size: int = -1) -> bytes:
        try:
            return self.gz.read(size if 0 <= size <= CHUNK else CHUNK)
        except (OSError, EOFError, zlib.error) as exc:
            raise TarRefused("the gzip stream", f"{exc}", damaged=True) from None
