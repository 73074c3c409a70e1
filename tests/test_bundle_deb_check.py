"""The recipe's .debs are read once after `apt-get download`: hashed as they are copied into the
archive, and refused there unless that hash is the SHA256 apt's index lists for them (the
index whose Release apt checked against the archive's key).

Real parts: this machine's apt (Debian 12, its mirror through its configured proxy) for
debian-archive-keyring (178 kB, no dependencies), pip and uv for a lock of two small wheels
(tests/test_bundle_distro.py), the archive's writer and reader. The reads are counted with
Python's own audit hook ("open" events, https://docs.python.org/3/library/audit_events.html):
nothing is replaced."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from remote.bundle import build, read_bundle
from remote.bundle.archive import ArchiveWriter, BundleError
from tests.conftest import write_yaml
from tests.test_bundle_distro import small_locks

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(build.this_distro() != "debian12",
                                 reason="reads this machine's apt for Debian 12's packages")]

PACKAGE = "debian-archive-keyring"
_opened: list[str] = []
_listening: list[bool] = []


def _audit(event: str, args: tuple) -> None:
    if _listening and event == "open" and isinstance(args[0], (str, Path)) \
            and str(args[0]).endswith(".deb") and "r" in str(args[1] or "r"):
        _opened.append(str(args[0]))


sys.addaudithook(_audit)   # stays for the process (audit hooks cannot be removed); idle unless listening


def _index_sha256(package: str) -> str:
    shown = build.index_stanzas([package])
    return next(line.split(": ", 1)[1] for line in shown.splitlines() if line.startswith("SHA256: "))


def test_each_deb_is_read_once_and_carried_with_the_sha256_of_apt_s_index(tmp_path):
    locks = small_locks(tmp_path)
    recipe = write_yaml(tmp_path / "r.yaml", {"name": "one small .deb", "steps": [
        {"apt": {"packages": [PACKAGE]}, "become": True}]})
    out = tmp_path / "b.tar"
    _opened.clear()
    _listening.append(True)
    try:
        build.build_bundle(build.BundleOptions("13.0", str(out), recipe=str(recipe), locks=str(locks)),
                           progress=lambda line: None)
    finally:
        _listening.clear()
    bundle = read_bundle(out, locks_dir=locks)
    debs = {path: entry for path, entry in bundle.files.items() if path.endswith(".deb")}
    assert [Path(p).name.split("_")[0] for p in debs] == [PACKAGE]
    (path, entry), = debs.items()
    assert entry["sha256"] == _index_sha256(PACKAGE)
    reads = [p for p in _opened if Path(p).name == Path(path).name]
    assert len(reads) == 1, reads     # hashed while copied in, not in a pass of its own before


def test_a_deb_changed_after_its_download_is_refused_as_it_is_copied_in(tmp_path):
    """What `fetch_debs` hands on is the index's SHA256, not the file's: a file changed between
    the download and the archive (the one read left) is refused there, naming it."""
    dest = tmp_path / "apt"
    dest.mkdir()
    versions, digests = build.fetch_debs([PACKAGE], dest)
    (name, digest), = digests.items()
    assert digest == _index_sha256(PACKAGE) and PACKAGE in versions
    with open(dest / name, "ab") as f:
        f.write(b"\0")
    writer = ArchiveWriter(tmp_path / "b.tar")
    try:
        with pytest.raises(BundleError, match=re.escape(f"apt/{name}: sha256 ") + ".* is not the "
                           "one its lock or index names: the download was changed"):
            writer.add(f"apt/{name}", dest / name, "this machine's apt sources", {digest})
    finally:
        writer.close()
