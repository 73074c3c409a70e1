"""Pulling result folders: complete or nothing, earlier runs untouched, and an archive a hostile
host crafted (names, sizes, members) refused before anything is written."""
from __future__ import annotations

import gzip
import io
import os
import shlex
import subprocess
import tarfile

import pytest

from remote.config.inventory import Host, Timeouts
from remote.ground.errors import Where
from remote.ground.runfolder import STACK_MANIFEST
from remote.scheduler.slurm import CLUSTER_RECORD
from remote.transport.local import LocalConnection
from remote.transport.transfer import PullError, PullLimits, pack, publish_pull, pull
from tests.conftest import REPO

# Run ids as the control side makes them (remote/ground/runid.py new_run_id).
RUN1 = "20261122T055742.123Z-14af"
RUN2 = "20261122T060001.000Z-beef"


def _results_tarball(tmp_path, size=200_000) -> bytes:
    src = tmp_path / "src"
    src.mkdir()
    (src / "validate.log").write_text("system pass\n")
    (src / "bench_torch.log").write_bytes(os.urandom(size))  # incompressible, so it is large
    (src / "results.json").write_text('{"checks": []}')
    return subprocess.run(["tar", "-czf", "-", "-C", str(src), "."], capture_output=True,
                          check=True).stdout


def test_pull_publishes_every_file(tmp_path):
    dest = tmp_path / "logs" / "h1" / RUN2
    names = publish_pull(_results_tarball(tmp_path), dest)
    assert names == ["bench_torch.log", "results.json", "validate.log"]
    assert (dest / "results.json").read_text() == '{"checks": []}'
    assert [p.name for p in dest.parent.iterdir()] == [RUN2], "no temporary folder left"


def test_interrupted_pull_leaves_no_partial_folder_and_earlier_runs_intact(tmp_path):
    earlier = tmp_path / "logs" / "h1" / RUN1
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text("old")
    data = _results_tarball(tmp_path)
    with pytest.raises(PullError, match="damaged or incomplete"):
        publish_pull(data[: len(data) // 2], tmp_path / "logs" / "h1" / RUN2)
    assert sorted(p.name for p in (tmp_path / "logs" / "h1").iterdir()) == [RUN1]
    assert (earlier / "results.json").read_text() == "old"


@pytest.mark.root  # drops to nobody with setpriv
def test_unwritable_logs_folder_is_a_clear_error(tmp_path, work):
    parent = work / "logs" / "h1"
    parent.mkdir(parents=True)
    os.chmod(parent, 0o500)
    try:
        # root ignores permissions, so drop to nobody for the write attempt
        code = ("import sys; from pathlib import Path; from remote.transport.transfer import publish_pull, "
                "PullError\ntry:\n publish_pull(sys.stdin.buffer.read(), Path(sys.argv[1]))\n"
                "except PullError as e:\n print(type(e).__name__, e); sys.exit(3)")
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "python3", "-c", code, str(parent / RUN2)],
                              input=_results_tarball(tmp_path), capture_output=True,
                              cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    finally:
        os.chmod(parent, 0o755)
    assert proc.returncode == 3, proc.stderr.decode()
    assert proc.stdout.startswith(b"PullNotStored ")
    assert b"cannot write in" in proc.stdout and b"Permission denied" in proc.stdout
    assert list(parent.iterdir()) == []


def test_a_pull_this_machine_cannot_store_does_not_count_against_the_host(tmp_path, work):
    """A full disk or a folder this machine cannot write fails the pull as PullNotStored
    (above), which the validation's record keeps as "not stored here", not counted as the
    host's failure; a timed-out pull, a host with no output, a refused archive count."""
    from remote.engine.jobs.validate import pull_failure
    from remote.ground.errors import PullNoOutput, PullNotStored, PullTimedOut
    from remote.ground.runfolder import CRASHED, NOT_STORED, REFUSED, TIMED_OUT

    assert [pull_failure(e("x")) for e in (PullNotStored, PullTimedOut, PullNoOutput, PullError)] \
        == [NOT_STORED, TIMED_OUT, CRASHED, REFUSED]


def test_unsafe_archive_paths_are_refused(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(PullError, match="unsafe path"):
        publish_pull(buffer.getvalue(), tmp_path / "h1" / RUN1)
    assert not (tmp_path / "h1" / "escape").exists()


def test_pack_leaves_out_caches(tmp_path):
    pkg = tmp_path / "validate"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "__pycache__" / "x.pyc").write_bytes(b"")
    (pkg / "__main__.py").write_text("print(1)\n")
    with tarfile.open(fileobj=io.BytesIO(pack(pkg, "validate")), mode="r:gz") as tar:
        assert tar.getnames() == ["validate", "validate/__main__.py"]


# A hostile host crafts the archive it answers with (the `tar` it runs is its own). Each of
# these archives was stored before the checks: a run id of `..` replaced another host's run,
# a provision.log replaced the control side's own, and sizes went unchecked.

def _tarball(files: dict) -> bytes:
    """A gzip tarball of {name: content}, as a host's tar would write it (`./name`)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _zeros_bomb(name: str, size: int) -> bytes:
    """A tarball of one `size`-byte file of zeros, about size/1000 bytes long: the gzip stream
    repeats one compressed MiB of zeros (gzip allows members back to back)."""
    assert size % (1 << 20) == 0
    info = tarfile.TarInfo(f"./{name}")
    info.size = size
    mib = gzip.compress(bytes(1 << 20), compresslevel=9)
    return b"".join([gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT))]
                    + [mib] * (size >> 20) + [gzip.compress(bytes(1024))])


def _tree(root) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


def test_the_run_id_pattern_matches_the_control_sides_run_ids():
    from remote.ground.runid import RUN_ID, new_run_id

    assert all(RUN_ID.match(new_run_id()) for _ in range(50))


@pytest.mark.parametrize("run_id", ["..", ".", "latest", RUN1 + "\n", "x" + RUN1, RUN1.upper()])
def test_a_run_id_not_made_by_the_control_side_is_refused(tmp_path, run_id):
    """`invoke logs` reads the run id from the host (runs/latest): `..` made the destination
    logs/ itself, where the pull replaced another host's run with a forged one."""
    logs = tmp_path / "logs"
    (logs / "h2" / RUN1).mkdir(parents=True)
    (logs / "h2" / RUN1 / "results.json").write_text("innocent")
    (logs / "h1").mkdir()
    before = _tree(logs)
    forged = _tarball({f"h2/{RUN1}/results.json": b"forged", "results.json": b"{}"})
    with pytest.raises(PullError, match="is not one gpuprov makes"):
        publish_pull(forged, logs / "h1" / run_id)
    assert _tree(logs) == before


def test_a_pull_never_replaces_an_earlier_pull(tmp_path):
    dest = tmp_path / "logs" / "h1" / RUN1
    publish_pull(_tarball({"results.json": b"first", "validate.log": b"first"}), dest)
    with pytest.raises(PullError, match="already exists"):
        publish_pull(_tarball({"results.json": b"second", "validate.log": b"second"}), dest)
    assert _tree(dest) == {"results.json": b"first", "validate.log": b"first"}
    assert sorted(p.name for p in dest.parent.iterdir()) == [RUN1], "no temporary folder left"


@pytest.mark.parametrize("control_log_there", [True, False])
def test_a_pulled_provision_log_is_refused(tmp_path, control_log_there):
    """The control side writes logs/<host>/<run>/provision.log; a host's archive naming that
    file replaced it (and `invoke logs`, which writes none, would have stored the host's)."""
    dest = tmp_path / "logs" / "h1" / RUN1
    if control_log_there:
        dest.mkdir(parents=True)
        (dest / "provision.log").write_text("the control side's record\n")
    forged = _tarball({"provision.log": b"all steps ok\n", "results.json": b"{}"})
    with pytest.raises(PullError, match="provision.log, which only the control side writes"):
        publish_pull(forged, dest)
    kept = {RUN1: None, f"{RUN1}/provision.log": b"the control side's record\n"}
    assert _tree(dest.parent) == (kept if control_log_there else {})


@pytest.mark.parametrize("control_file", [STACK_MANIFEST, CLUSTER_RECORD])
def test_a_pulled_stack_manifest_or_cluster_record_is_refused(tmp_path, control_file):
    """The control side writes stack.json (the stack it gathered from the host, which `gpuprov
    report` compares across hosts) and a cluster run's slurm.json; a host's archive carrying
    one was stored as if the control side had written it."""
    dest = tmp_path / "logs" / "h1" / RUN1
    forged = _tarball({control_file: b"[" * 100_000, "results.json": b"{}"})
    with pytest.raises(PullError, match=f"{control_file}, which only the control side writes"):
        publish_pull(forged, dest)
    assert _tree(dest.parent) == {}


def test_default_caps_stop_a_decompression_bomb_before_writing(tmp_path):
    """1 MiB of archive that unpacks to 1 GiB of zeros (the issue's 10 MiB archive wrote
    10 GiB): refused at its header, over the 256 MiB per-file cap."""
    bomb = _zeros_bomb("bench_torch.log", 1 << 30)
    assert len(bomb) < 2 << 20
    dest = tmp_path / "logs" / "h1" / RUN1
    with pytest.raises(PullError, match="unpacks to 1024 MiB, over the 256 MiB allowed per file"):
        publish_pull(bomb, dest)
    assert list(dest.parent.iterdir()) == []


def test_the_unpacked_total_is_capped(tmp_path):
    archive = _tarball({f"part{i}.log": bytes(1000) for i in range(5)})
    dest = tmp_path / "logs" / "h1" / RUN1
    with pytest.raises(PullError, match="unpacks to more than 4000 bytes"):
        publish_pull(archive, dest, PullLimits(total_bytes=4000))
    assert list(dest.parent.iterdir()) == []
    assert publish_pull(archive, dest, PullLimits(total_bytes=5000))  # at the cap: stored


def test_the_member_count_is_capped(tmp_path):
    """200,000 empty members were stored one by one."""
    archive = _tarball({f"f{i}": b"" for i in range(50)})
    dest = tmp_path / "logs" / "h1" / RUN1
    with pytest.raises(PullError, match="more than 40 members"):
        publish_pull(archive, dest, PullLimits(members=40))
    assert list(dest.parent.iterdir()) == []


def test_the_limits_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROV_PULL_MAX_FILE_BYTES", "100")
    dest = tmp_path / "logs" / "h1" / RUN1
    with pytest.raises(PullError, match="unpacks to 101 bytes, over the 100 bytes allowed per file"):
        publish_pull(_tarball({"results.json": bytes(101)}), dest)
    monkeypatch.setenv("GPUPROV_PULL_MAX_FILE_BYTES", "lots")
    with pytest.raises(PullError, match="GPUPROV_PULL_MAX_FILE_BYTES must be a whole number"):
        publish_pull(_tarball({"results.json": b"{}"}), dest)


@pytest.mark.parametrize("tar_format", ["gnu", "posix"])
def test_sparse_members_are_refused(tmp_path, tar_format):
    """A 127-byte archive stored a 1 GiB sparse results.json that every later reader read
    whole. Made here by GNU tar from a real sparse file, in both of its sparse formats."""
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "results.json", "wb") as handle:
        handle.truncate(1 << 30)  # a hole: no disk used
    archive = subprocess.run(["tar", "--sparse", f"--format={tar_format}", "-czf", "-", "-C",
                              str(src), "."], capture_output=True, check=True).stdout
    assert len(archive) < 4096
    dest = tmp_path / "logs" / "h1" / RUN1
    with pytest.raises(PullError, match="sparse file: './results.json'"):
        publish_pull(archive, dest)
    assert list(dest.parent.iterdir()) == []


def _local() -> LocalConnection:
    return LocalConnection(Host("localhost", "localhost", Where("inv", 1), connection="local"),
                           Timeouts())


def test_pull_streams_the_archive_through_a_file(tmp_path):
    """`pull` runs the pack command and publishes what it wrote; no temporary is left."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "results.json").write_text('{"checks": []}')
    dest = tmp_path / "logs" / "h1" / RUN1
    result, names = pull(_local(), shlex.quote(str(src)), dest)
    assert result.rc == 0 and result.stdout == b"" and result.stdout_bytes > 0
    assert names == ["results.json"] and (dest / "results.json").read_text() == '{"checks": []}'
    assert [p.name for p in dest.parent.iterdir()] == [RUN1]


def test_pull_refuses_an_archive_over_its_cap(tmp_path, monkeypatch):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bench.log").write_bytes(os.urandom(1 << 20))
    monkeypatch.setenv("GPUPROV_PULL_MAX_ARCHIVE_BYTES", str(512 << 10))
    dest = tmp_path / "logs" / "h1" / RUN1
    with pytest.raises(PullError, match=r"over the 524288 bytes allowed \(GPUPROV_PULL_MAX_ARCHIVE_BYTES\)"):
        pull(_local(), shlex.quote(str(tmp_path / "src")), dest)
    assert list(dest.parent.iterdir()) == []


def test_pull_refuses_a_run_id_before_making_anything(tmp_path):
    """`..` as a run id: refused before the logs folder of the host is even made."""
    with pytest.raises(PullError, match="is not one gpuprov makes"):
        pull(_local(), "/nonexistent", tmp_path / "logs" / "h1" / "..")
    assert not (tmp_path / "logs").exists()
