"""The evidence collector (validate/evidence.py) run on this machine as gpuprov runs it on a host,
and the control side's check of an archive's manifest (remote/evidence/archive.py), without SSH.

`nvidia-bug-report.sh` and `nvidia-smi` here are STAND-INS written by the test (first on PATH):
NVIDIA's script needs a GPU, its driver and root; `nvidia-smi -q` prints a real H100's capture
(tests/fixtures/validate/h100_590_smi_q.txt). tests/test_evidence.py runs the same over SSH.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from remote.commands import evidence as evidence_cmd
from remote.evidence.archive import check_manifest, check_name
from remote.ground.errors import PullError
from tests.conftest import REPO, write_yaml
from validate.evidence import archive_stem

SMI_Q = REPO / "tests" / "fixtures" / "validate" / "h100_590_smi_q.txt"


@pytest.fixture
def standins(tmp_path):
    """A folder of stand-ins: nvidia-smi (-q prints the real capture) and a bug report script
    that writes a report of `size` bytes of noise."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(f"#!/bin/sh\n[ \"$1\" = -q ] && exec cat {SMI_Q}\nexit 9\n")
    (tools / "nvidia-bug-report.sh").write_text(
        "#!/bin/sh\n# STAND-IN for NVIDIA's nvidia-bug-report.sh\n"
        "[ \"$1\" = --output-file ] && head -c 65536 /dev/urandom > \"$2.gz\"\n")
    for tool in tools.iterdir():
        os.chmod(tool, 0o755)
    return tools


def collect(tmp_path: Path, tools: Path, *args: str) -> dict:
    tmp_path.mkdir(exist_ok=True)
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus\n")
    env = dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "validate.evidence", "--out", str(tmp_path / "out"),
                           "--host", "gpu1", "--kernel-log", str(kernel_log), *args],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    [archive] = (tmp_path / "out").glob("evidence-*.tar.gz")
    with tarfile.open(archive) as tar:
        return json.loads(tar.extractfile(f"{archive.name[:-7]}/manifest.json").read())


def test_the_cap_leaves_the_largest_file_out_and_says_so(tmp_path, standins):
    """Past --max-bytes the bug report (64 KiB here) is left out; the rest is kept and the
    manifest names what is missing and why."""
    manifest = collect(tmp_path, standins, "--max-bytes", "40000")
    assert [f["name"] for f in manifest["files"]] == ["nvidia-smi-q.txt", "xid.log"]
    [missing] = [m for m in manifest["missing"] if m["name"] == "nvidia-bug-report.log.gz"]
    assert "over the archive's cap of 40000 bytes" in missing["why"]
    assert collect(tmp_path / "2", standins)["files"][0]["name"] == "nvidia-bug-report.log.gz"


def test_the_archives_name_carries_safe_serials_only():
    """The serials come from the host: only letters, digits, '.' and '-' reach the file name,
    and a long list is cut with the count left out."""
    assert archive_stem("gpu1", [{"serial": "1320221012345"}, {"serial": "../../etc/x y"}]) == \
        "evidence-gpu1-1320221012345_etc_x_y"
    assert archive_stem("a/b", []) == "evidence-a_b-no-serial"
    long = archive_stem("h", [{"serial": "%013d" % i} for i in range(16)])
    assert len(long) < 160 and long.endswith("_+8"), long


def opened(tmp_path: Path, files: dict, listed: dict) -> Path:
    folder = tmp_path / "opened" / "evidence-h-1"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "manifest.json").write_text(json.dumps({"files": [
        {"name": n, "bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in listed.items()]}))
    return folder.parent


@pytest.mark.parametrize("files, listed, reason", [
    ({"a": b"1"}, {"a": b"1"}, None),
    ({"a": b"1"}, {"a": b"2"}, "size or sha256 differ"),
    ({"a": b"1", "b": b"2"}, {"a": b"1"}, "not listed: ['b']"),
    ({"a": b"1"}, {"a": b"1", "c": b"3"}, "listed, not there: ['c']"),
], ids=["matches", "changed", "unlisted", "absent"])
def test_the_manifest_must_list_exactly_the_files_with_their_sha256(tmp_path, files, listed, reason):
    where = opened(tmp_path, files, listed)
    if reason is None:
        assert [f["name"] for f in check_manifest(where, "evidence-h-1")["files"]] == list(listed)
        return
    with pytest.raises(PullError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        check_manifest(where, "evidence-h-1")


def test_a_script_that_refuses_is_not_run_again_and_its_words_are_kept(tmp_path, standins):
    """NVIDIA's script exits 1 with "ERROR: Please run nvidia-bug-report.sh as root." for
    anyone else (validate/evidence.py cites it); the stand-in says the same. Safe mode would
    refuse alike, so it is not tried; the manifest keeps the script's words."""
    (standins / "nvidia-bug-report.sh").write_text(
        "#!/bin/sh\necho\necho \"ERROR: Please run $(basename $0) as root.\"\nexit 1\n")
    manifest = collect(tmp_path, standins)
    assert [r["mode"] for r in manifest["bug_report"]["runs"]] == ["full"]
    [missing] = [m for m in manifest["missing"] if m["name"] == "nvidia-bug-report.log.gz"]
    assert missing["why"] == "nvidia-bug-report.sh full run exit 1: ERROR: Please run nvidia-bug-report.sh as root."


def test_the_real_h200_archive_opens_as_the_control_side_opens_it(tmp_path):
    """The archive the collector made on a lent H200 VM (bench/gpu/evidence_local.sh,
    2026-11-27; tests/fixtures/evidence/h200): pulled and checked as gpuprov checks a host's,
    its identities those nvidia-smi printed there, the missing bug report said."""
    from remote.transport.connection import publish_pull

    fixture = Path(REPO) / "tests" / "fixtures" / "evidence" / "h200"
    [archive] = fixture.glob("evidence-*.tar.gz")
    dest = tmp_path / "20261127T041346.000Z-0000"
    with archive.open("rb") as f:
        publish_pull(f, dest)
    manifest = check_manifest(dest, archive.name[:-len(".tar.gz")])
    assert manifest == json.loads((fixture / "manifest.json").read_text())
    [gpu] = manifest["gpus"]
    smi = (fixture / "machine.txt").read_text()
    assert f"0, {gpu['serial']}, {gpu['uuid']}, {gpu['vbios']}, NVIDIA H200" in smi
    assert archive.name == f"evidence-vm-{gpu['serial']}.tar.gz"
    assert [m["name"] for m in manifest["missing"]] == ["nvidia-bug-report.log.gz", "results.json",
                                                        "stack.json"]


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its reaper is not running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_stopped_collector_takes_the_running_bug_report_with_it(tmp_path, standins):
    """Ctrl-C or the control side's time limit stops the collector as the transport stops any
    command: SIGTERM to the command's process group (remote/transport/base.py). The bug report
    script runs in a session of its own (so that its own time limit can kill its children), out
    of that group: the collector must take it down as it goes, or a hung script (the case the
    time limit is for) keeps running as root on the host after the run has stopped."""
    pid_file = tmp_path / "script.pid"
    (standins / "nvidia-bug-report.sh").write_text(
        f"#!/bin/sh\n# STAND-IN for NVIDIA's nvidia-bug-report.sh: a full run that hangs\n"
        f"sleep 600 &\necho \"$$ $!\" > {pid_file}.part && mv {pid_file}.part {pid_file}\nwait\n")
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("")
    env = dict(os.environ, PATH=f"{standins}:{os.environ['PATH']}", PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "validate.evidence", "--out", str(tmp_path / "out"),
                             "--host", "gpu1", "--kernel-log", str(kernel_log)],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        for _ in range(300):
            if pid_file.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert pid_file.exists(), proc.stderr.read() if proc.poll() is not None else "no script"
        script, sleeper = (int(p) for p in pid_file.read_text().split())
        os.killpg(proc.pid, signal.SIGTERM)  # as `kill -TERM -- -PGID` does
        proc.wait(timeout=30)
        for _ in range(100):
            if not _alive(script) and not _alive(sleeper):
                break
            time.sleep(0.1)
        left = [pid for pid in (script, sleeper) if _alive(pid)]
        for pid in left:  # the test's own processes: never leave them behind
            os.kill(pid, signal.SIGKILL)
        assert not left, "the bug report script outlived the collector"
        assert proc.returncode == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# Not tested here, and why: the collector's tools (`nvidia-smi -q` through validate/host.py
# run_tool, the bug report script through run_bounded) are killed past their time limit and then
# waited for at most validate/host.py KILL_WAIT_S; one that is still there is left behind, and
# the manifest's `missing` says so. The case that bound is for is a process in uninterruptible
# sleep (state D: nvidia-smi stuck in the driver on a sick GPU), which SIGKILL cannot end until
# its kernel call returns. A test cannot make one honestly: an unprivileged process cannot
# ignore SIGKILL, and the sleeps a test could reach (a FUSE request, an NFS hard mount, vfork,
# the cgroup v2 freezer) are all killable on the kernels this runs on; a cgroup v1 freezer or a
# sick driver would be the real thing, and neither belongs on a shared test machine. A stand-in
# that "does not die" would be a mock of the kernel, so there is none; the time-limit path that
# comes before the bound (kill, reap) is what the other tests here and tests/test_evidence.py
# run.


@pytest.mark.parametrize("value", ["inf", "1e400", "nan", "0", "-5", "soon"])
def test_a_bug_report_timeout_that_bounds_nothing_is_bad_input(tmp_path, capsys, value):
    """`--bug-report-timeout` is a bound: infinity (or a number that overflows to it) is no
    bound, and the host command's own limit is twice it plus a margin, so it must be a finite
    number of seconds. Exit 2, one line, no host contacted (the inventory's host is a closed
    port on loopback, never dialled)."""
    inventory = write_yaml(tmp_path / "inventory.yaml", {
        "hosts": {"gpu1": {"address": "127.0.0.1", "port": 9, "user": "nobody"}}})
    rc = evidence_cmd.run(host="gpu1", inventory=str(inventory), logs_dir=str(tmp_path / "logs"),
                      bug_report_timeout=value)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "--bug-report-timeout" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "logs").exists()


def test_the_control_sides_limit_outlasts_the_collectors_own_bounds():
    """The host command's limit (remote/evidence/job.py) is the bug report's two runs plus a
    margin; the collector also waits up to SMI_TIMEOUT_S for `nvidia-smi -q` and, without
    --kernel-log, up to KERNEL_LOG_TIMEOUT_S for each kernel log command in turn. The margin
    must hold all of them and a minute to pack (ours, unsourced), or a host whose journalctl
    hangs loses its whole archive, bug report included, to the control side's limit."""
    from remote.evidence import job
    from validate import evidence
    from validate.checks import xid

    host_side = evidence.SMI_TIMEOUT_S + len(xid.KERNEL_LOG_COMMANDS) * xid.KERNEL_LOG_TIMEOUT_S
    assert job.MARGIN_S >= host_side + 60, (job.MARGIN_S, host_side)


@pytest.mark.parametrize("name", ["gpu1", "a/b", "..", "rack 3/gpu_7.", "x" * 100, "héte.-host"])
def test_the_control_side_expects_the_name_the_collector_writes(name):
    """The control side takes the archive's name from the collector's own function
    (validate/evidence.py archive_stem), for this host and the manifest's GPUs, and nothing
    else: not a name that merely begins with the host's part (issue 41, attack 8)."""
    gpus = [{"serial": "1654922006536"}, {"serial": None}]
    check_name(name, archive_stem(name, gpus), {"host": name, "gpus": gpus})
    check_name(name, archive_stem(name, []), {"host": name, "gpus": []})
    for stem in (archive_stem(name, gpus).replace("-1654", "-a-1654"), archive_stem("z" + name, gpus),
                 archive_stem(name, [])):
        with pytest.raises(PullError, match="not one evidence-<host>-<serials>.tar.gz of"):
            check_name(name, stem, {"host": name, "gpus": gpus})
    with pytest.raises(PullError, match="names the host 'gpu2'"):
        check_name(name, archive_stem(name, gpus), {"host": "gpu2", "gpus": gpus})
