"""What the host checks share about file systems: the mount table (/proc/self/mountinfo), a
path's fill (statvfs), a write probe, and an ext4 file system's error count.

mountinfo's fields (proc(5), /proc/[pid]/mountinfo): mount id, parent id, major:minor, root,
mount point, per-mount options, optional fields ending in "-", then file system type, source and
super options; spaces and other characters in a path are written as octal escapes (\\040).
"""

import os
import re
import tempfile

MOUNTINFO = "/proc/self/mountinfo"
_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(text):
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text):
    """[{"point", "options", "fstype", "source", "super"}] of mountinfo's lines (a line it cannot
    read is left out)."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        if len(fields) < sep + 3 or len(fields) < 6:
            continue
        out.append({"point": _unescape(fields[4]), "options": fields[5].split(","),
                    "fstype": fields[sep + 1], "source": _unescape(fields[sep + 2]),
                    "super": fields[sep + 3].split(",") if len(fields) > sep + 3 else []})
    return out


def mounts(path=MOUNTINFO):
    try:
        with open(path) as f:
            return parse_mountinfo(f.read())
    except OSError:
        return []


def mount_of(path, table):
    """The mount a path lies on: the last-mounted entry whose point is the path's longest prefix."""
    real = os.path.realpath(path)
    best = None
    for m in table:
        p = m["point"]
        if real == p or real.startswith(p.rstrip("/") + "/"):
            if best is None or len(p) >= len(best["point"]):
                best = m
    return best


def fill_pct(path):
    """(used %, size bytes, free bytes for users) of the file system under path, as df counts:
    used / (used + available to users) (statvfs(3): f_blocks, f_bfree, f_bavail)."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    avail = st.f_bavail * st.f_frsize
    total = used + avail
    return (100.0 * used / total if total else 0.0), st.f_blocks * st.f_frsize, avail


def write_probe(folder):
    """None when a file can be created, written, synced and removed in folder; else the error."""
    try:
        fd, name = tempfile.mkstemp(prefix=".gpuprov-probe-", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        os.write(fd, b"gpuprov\n")
        os.fsync(fd)
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        os.close(fd)
        try:
            os.unlink(name)
        except OSError:
            pass


def ext4_errors(source, sysfs_root="/sys"):
    """An ext4 file system's error count since it was made (fs/ext4/sysfs.c ``errors_count``,
    the superblock's s_error_count), or None (not ext4, or not readable)."""
    name = os.path.basename(source or "")
    try:
        with open(os.path.join(sysfs_root, "fs", "ext4", name, "errors_count")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None
