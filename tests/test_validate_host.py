"""The host checks (validate/checks/host_*.py, issue 45) for real: `python3 -m validate --checks
host_...` run as on a node, inside a mount namespace this test makes (`unshare -m`), over real
mounts: tmpfs folders, a read-only bind mount, a tmpfs filled past the threshold, an ext4 file
system on a loop device that recorded an error (the kernel's own `trigger_fs_error`), fio on a
loop device throttled by the block cgroup (v2 `io.max`, or v1 `blkio.throttle.*` where the
io controller is v1's), a real process standing for a running service. Sandbox hosts cannot
make loop devices or throttle a block device, hence this machine's namespaces.

The EDAC counters and cpufreq governors are a folder given as `--sysfs-root` (this VM has no
EDAC driver and no cpufreq): real files in the kernel's layout. The readers and thresholds are
table-tested on the texts their sources document.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from validate import profile
from validate.checks import host_clock, host_cpu, host_fill, host_floors, host_fs, host_memory, host_scratch

ROOT = Path(__file__).resolve().parent.parent
HOST_CHECKS = "host_mounts,host_fill,host_scratch,host_memory,host_cpu,host_clock,host_services"
as_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                             reason="needs root and unshare(1) for a mount namespace")


# -- tables ------------------------------------------------------------------------------------

@pytest.mark.parametrize("pct,limit,fails", [
    (89.9, host_floors.FILL_MAX_PCT, False),   # Verda: "less than 90% disk usage"
    (90.0, host_floors.FILL_MAX_PCT, True),
    (97.0, host_floors.FILL_MAX_PCT, True),
    (94.0, 95.0, False),                        # the profile's host.fill_max_pct
    (95.0, 95.0, True),
])
def test_fill_threshold_table(pct, limit, fails):
    assert host_floors.FILL_MAX_PCT == 90.0  # docs.verda.com/clusters/instant-clusters/validation
    finding = host_fill.judge("/", pct, limit)
    assert (finding is not None) == fails
    if fails:
        assert finding.startswith("/ is %.1f%% full" % pct) and "%g%%" % limit in finding


@pytest.mark.parametrize("figures,floors,named", [
    ({"write": 40.0, "read": 900.0}, {"write": 50.0, "read": 500.0}, ["write"]),
    ({"write": 60.0, "read": 400.0}, {"write": 50.0, "read": 500.0}, ["read"]),
    ({"write": 60.0, "read": 600.0}, {"write": 50.0, "read": 500.0}, []),
    ({"write": 1.0, "read": 1.0}, {"write": None, "read": None}, []),  # no floor: not judged
])
def test_scratch_floor_table(figures, floors, named):
    found = host_scratch.judge("/scratch", "/dev/nvme1n1", figures, floors)
    assert [f.split()[3] for f in found] == named
    for f in found:
        assert f.startswith("scratch /scratch (/dev/nvme1n1) ") and "below its floor" in f


@pytest.mark.parametrize("mcs,ce_max,expect", [
    ([{"mc": "mc0", "ce": 0, "ue": 0}], None, []),
    ([{"mc": "mc0", "ce": 3, "ue": 0}], None, [("none", False)]),
    ([{"mc": "mc0", "ce": 3, "ue": 0}], 2, [("drain and replace (RMA)", True)]),
    ([{"mc": "mc1", "ce": 0, "ue": 1}], None, [("drain and replace (RMA)", True)]),
])
def test_edac_table(mcs, ce_max, expect):
    assert [(a, fails) for _, a, fails in host_memory.judge_edac(mcs, ce_max)] == expect


# chronyc(1), "tracking": the example output, its Leap status line; and the unsynchronised word
CHRONY_SYNCED = """Reference ID    : CB00710F (ntp1.example.net)
Stratum         : 3
Ref time (UTC)  : Fri Jan 27 09:49:17 2017
System time     : 0.000006523 seconds slow of NTP time
Leap status     : Normal
"""


@pytest.mark.parametrize("text,synced", [
    (CHRONY_SYNCED, True),
    (CHRONY_SYNCED.replace("Normal", "Not synchronised"), False),
    (CHRONY_SYNCED.replace("Normal", "Insert second"), True),
    ("506 Cannot talk to daemon\n", None),
])
def test_chrony_leap_status_table(text, synced):
    assert host_clock.chrony_synced(text) is synced


@pytest.mark.parametrize("text,synced", [("yes\n", True), ("no\n", False), ("", None)])
def test_timesyncd_table(text, synced):
    assert host_clock.timesyncd_synced(text) is synced


def test_readers_of_kernel_text():
    line = ("36 35 98:0 /mnt1 /mnt/my\\040disk rw,noatime master:1 - ext4 /dev/sda1 ro,errors=continue\n"
            "37 35 0:5 / /scratch rw - tmpfs tmpfs rw\n")
    table = host_fs.parse_mountinfo(line)  # proc(5): its own example line, with an escaped space
    assert table[0]["point"] == "/mnt/my disk" and table[0]["super"] == ["ro", "errors=continue"]
    assert table[1]["fstype"] == "tmpfs"
    assert host_cpu.parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    found = {"cpu0": "performance", "cpu1": "powersave"}
    assert "1 of 2 CPUs run the powersave governor" in host_cpu.judge_governors(found, "performance")


@pytest.mark.parametrize("doc,message", [
    ({"host": {"mounts": "/scratch"}}, "host.mounts: not a list of absolute paths"),
    ({"host": {"fill_max_pct": 0}}, "host.fill_max_pct: 0.0 is not a percentage above 0, at most 100"),
    ({"host": {"scratch": "scratch"}}, "host.scratch: not an absolute path: 'scratch'"),
    ({"host": {"cpus": 0}}, "host.cpus: not an integer >= 1: 0"),
    ({"host": {"service": ["slurmd"]}}, "host: unknown key 'service'"),
])
def test_bad_host_profile_is_one_line(doc, message):
    with pytest.raises(profile.BadProfile) as err:
        profile.from_document(doc)
    assert str(err.value).startswith(message)


def test_bad_profile_on_the_command_line_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "validate", "--out", str(tmp_path / "o"), "--checks",
                           "host_fill", "--profile", '{"host": {"fill_max_pct": 101}}'],
                          cwd=str(ROOT), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "host.fill_max_pct" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "o" / "results.json").exists()


# -- real mounts in a namespace ----------------------------------------------------------------

def _sysfs(root: Path, ue: int = 0, governor: str = "performance") -> Path:
    """A --sysfs-root in the kernel's layout: one EDAC controller, two CPUs with cpufreq."""
    mc = root / "devices/system/edac/mc/mc0"
    mc.mkdir(parents=True)
    (mc / "ce_count").write_text("0\n")
    (mc / "ue_count").write_text("%d\n" % ue)
    cpu = root / "devices/system/cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-1\n")
    for n in (0, 1):
        (cpu / ("cpu%d/cpufreq" % n)).mkdir(parents=True)
        (cpu / ("cpu%d/cpufreq/scaling_governor" % n)).write_text(governor + "\n")
    return root


class Loop:
    """An ext4 file system on a loop device over a file in `where`; detached at the end."""

    def __init__(self, where: Path, mib: int = 48) -> None:
        img = where / "disk.img"
        subprocess.run(["truncate", "-s", "%dM" % mib, str(img)], check=True)
        self.dev = subprocess.run(["losetup", "-f", "--show", str(img)], check=True, capture_output=True,
                                  text=True).stdout.strip()
        subprocess.run(["mkfs.ext4", "-q", self.dev], check=True)
        st = os.stat(self.dev)
        self.majmin = "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))

    def close(self) -> None:
        for _ in range(20):  # the namespace's mount goes when its last process does
            if subprocess.run(["losetup", "-d", self.dev], capture_output=True).returncode == 0:
                return
            time.sleep(0.25)


def _throttle(majmin: str, bps: int) -> tuple[str, Path] | None:
    """A cgroup whose block I/O to majmin is limited to bps bytes/s: (the shell line that joins
    it, its folder); None when this kernel has no block throttling we can use."""
    v2 = Path("/sys/fs/cgroup")
    if "io" in (v2 / "cgroup.controllers").read_text().split() if (v2 / "cgroup.controllers").exists() else False:
        group = v2 / ("gpuprov-test-io-%d" % os.getpid())
        (v2 / "cgroup.subtree_control").write_text("+io")
        group.mkdir()
        (group / "io.max").write_text("%s rbps=%d wbps=%d\n" % (majmin, bps, bps))  # cgroup-v2.rst io.max
    elif (Path("/sys/fs/cgroup/blkio") / "blkio.throttle.read_bps_device").exists():
        group = Path("/sys/fs/cgroup/blkio") / ("gpuprov-test-io-%d" % os.getpid())
        group.mkdir()
        # Documentation/admin-guide/cgroup-v1/blkio-controller.rst, "Throttling/Upper limit policy"
        (group / "blkio.throttle.read_bps_device").write_text("%s %d\n" % (majmin, bps))
        (group / "blkio.throttle.write_bps_device").write_text("%s %d\n" % (majmin, bps))
    else:
        return None
    return "echo $$ > %s/cgroup.procs" % shlex.quote(str(group)), group


def _run_in_namespace(setup: list[str], prof: dict, out: Path, sysfs: Path, checks: str = HOST_CHECKS):
    """`python3 -m validate` in a new mount namespace after the `setup` shell lines; its results."""
    argv = [sys.executable, "-m", "validate", "--out", str(out), "--device", "cpu", "--checks", checks,
            "--sysfs-root", str(sysfs), "--profile", json.dumps(prof)]
    script = " && ".join(setup + ["exec " + " ".join(shlex.quote(a) for a in argv)])
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], cwd=str(ROOT),
                          capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads((out / "results.json").read_text())
    return proc, {c["name"]: c for c in doc["checks"]}


@pytest.fixture
def service():
    """A real process standing for a running daemon: a copy of sleep(1) under a daemon's name."""
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    exe = folder / ("gpuprovd%d" % os.getpid())
    shutil.copy(shutil.which("sleep"), exe)
    proc = subprocess.Popen([str(exe), "300"])
    try:
        yield exe.name
    finally:
        proc.kill()
        proc.wait()
        exe.unlink()


@as_root
def test_healthy_host_passes(tmp_path, service):
    t = tmp_path
    (t / "data").mkdir()
    (t / "scratch").mkdir()
    loop = Loop(t)
    try:
        prof = {"host": {"mounts": [str(t / "data"), str(t / "scratch")], "scratch": str(t / "scratch"),
                         "scratch_write_mbs": 1, "scratch_read_mbs": 1, "fio_size_mib": 8, "fio_seconds": 2,
                         "memory_gib": 0.5, "cpus": 1, "governor": "performance", "services": [service]}}
        proc, c = _run_in_namespace(["mount -t tmpfs -o size=16m tmpfs %s" % (t / "data"),
                                     "mount %s %s" % (loop.dev, t / "scratch")], prof, t / "out", _sysfs(t / "sys"))
    finally:
        loop.close()
    for name in HOST_CHECKS.split(","):
        if name == "host_clock":  # this machine may have no time daemon to ask: n/a, never a failure
            assert c[name]["status"] in ("pass", "skip") and c[name]["status"] != "fail"
            continue
        assert c[name]["status"] == "pass", (name, c[name]["reason"])
    assert c["host_scratch"]["figures"]["device"] == loop.dev
    assert c["host_scratch"]["figures"]["write_mbs"] > 1
    assert proc.returncode == 0 and "VALIDATED" in proc.stderr.strip().splitlines()[-1]


@as_root
def test_read_only_mounts_are_named_with_remount_or_repair(tmp_path):
    t = tmp_path
    for d in ("ro", "bad"):
        (t / d).mkdir()
    loop = Loop(t)
    ext4 = os.path.basename(loop.dev)
    try:
        prof = {"host": {"mounts": [str(t / "ro"), str(t / "bad"), str(t / "missing")]}}
        proc, c = _run_in_namespace([
            "mount -t tmpfs -o size=4m,ro tmpfs %s" % (t / "ro"),
            "mount -o errors=remount-ro %s %s" % (loop.dev, t / "bad"),
            # the kernel's own error path (fs/ext4/sysfs.c trigger_fs_error): errors_count 1, read-only
            "echo 1 > /sys/fs/ext4/%s/trigger_fs_error" % ext4], prof, t / "out", Path("/sys"),
            checks="host_mounts")
    finally:
        loop.close()
    m = c["host_mounts"]
    assert proc.returncode == 1 and m["status"] == "fail"
    whats = [f["what"] for f in m["findings"]]
    assert any(w.startswith("%s (tmpfs on tmpfs) is read-only" % (t / "ro")) and "remount it read-write" in w
               for w in whats), whats
    assert any(w.startswith("%s (ext4 on %s) is read-only" % (t / "bad", loop.dev)) and "repair it: fsck" in w
               for w in whats), whats
    assert any(w.startswith("%s is not mounted" % (t / "missing")) for w in whats), whats
    assert m["action"] == "reboot the node"


@as_root
def test_full_file_system_is_named(tmp_path):
    t = tmp_path
    (t / "scratch").mkdir()
    prof = {"host": {"fill_paths": [str(t / "scratch")]}}
    proc, c = _run_in_namespace(["mount -t tmpfs -o size=4m tmpfs %s" % (t / "scratch"),
                                 "head -c 3800000 /dev/zero > %s/fill" % (t / "scratch")],
                                prof, t / "out", Path("/sys"), checks="host_fill")
    f = c["host_fill"]
    assert proc.returncode == 1 and f["status"] == "fail"
    assert f["reason"].startswith("%s is 9" % (t / "scratch")) and "over the 90% threshold" in f["reason"]
    assert "/ is" not in f["reason"]  # the root file system is below it


@as_root
def test_throttled_scratch_is_below_its_floor(tmp_path):
    t = tmp_path
    (t / "scratch").mkdir()
    loop = Loop(t)
    throttle = _throttle(loop.majmin, 2 * 1024 * 1024)  # 2 MiB/s
    if throttle is None:
        loop.close()
        pytest.skip("no block I/O throttling on this kernel (cgroup v2 io.max or v1 blkio.throttle)")
    join, group = throttle
    try:
        prof = {"host": {"scratch": str(t / "scratch"), "scratch_write_mbs": 50, "scratch_read_mbs": 50,
                         "fio_size_mib": 8, "fio_seconds": 2}}
        proc, c = _run_in_namespace(["mount %s %s" % (loop.dev, t / "scratch"), join], prof, t / "out",
                                    Path("/sys"), checks="host_scratch")
    finally:
        loop.close()
        group.rmdir()
    s = c["host_scratch"]
    assert proc.returncode == 1 and s["status"] == "fail"
    assert s["figures"]["write_mbs"] < 5 and s["figures"]["read_mbs"] < 5
    for rw in ("write", "read"):
        assert "scratch %s (%s) %s " % (t / "scratch", loop.dev, rw) in s["reason"]
    assert s["action"] == "drain and replace (RMA)"


@as_root
def test_stopped_service_and_memory_errors_are_named(tmp_path, service):
    prof = {"host": {"services": [service, "gpuprov-nosuchd"], "cpus": 64}}
    proc, c = _run_in_namespace([], prof, tmp_path / "out", _sysfs(tmp_path / "sys", ue=2, governor="powersave"),
                                checks="host_services,host_memory,host_cpu")
    assert proc.returncode == 1
    assert c["host_services"]["reason"].startswith("service gpuprov-nosuchd is not running")
    assert service not in c["host_services"]["reason"]
    assert c["host_memory"]["reason"].startswith("memory controller mc0: 2 uncorrected error(s)")
    assert "2 CPUs online, the profile asks 64" in c["host_cpu"]["reason"]
