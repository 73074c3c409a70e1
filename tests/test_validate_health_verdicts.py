"""Health verdicts and the operator's action (issue 22): real Xid / SXid lines
from public trackers (tests/fixtures/validate/health_cases.json, each with its
source), NVIDIA's whole Xid catalog, ``python3 -m validate --health`` end to
end with a stand-in nvidia-smi serving a recorded H100 capture for 8 GPUs,
Fabric Manager found or missed through real files and a real process, and
--slurm-drain through the real scontrol binary and a stand-in one."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from validate import actions, driver_errors, health, slurm_node, xid_catalog
from validate.checks import fabric

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "validate")
SMI_NODE = os.path.join(FIX, "smi_node")
CASES = json.load(open(os.path.join(FIX, "health_cases.json")))["cases"]
NO_DRIVER_HERE = not os.path.exists(health.DRIVER_PROC) and shutil.which("nvidia-smi") is None


def judge_text(text):
    findings = driver_errors.judge(driver_errors.parse(text)) + driver_errors.judge_sxid(driver_errors.parse_sxid(text))
    worst = actions.worst(f["action"] for f in findings)
    return findings, worst


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_real_kernel_logs_get_their_verdict_and_action(case):
    findings, worst = judge_text("\n".join(case["lines"]) + "\n")
    assert findings, case["source"]
    assert worst == case["action"], [f["what"] for f in findings]
    assert ("sick" if any(f["sick"] for f in findings) else "healthy") == case["verdict"]


def test_the_three_cases_of_the_issue_in_their_quoted_forms():
    by = dict((c["name"], c) for c in CASES)
    f154, _ = judge_text("\n".join(by["xid154_gpu_reset_required"]["lines"]))
    assert [(f["xid"], f["action"]) for f in f154] == [(154, "reset the GPU")]
    assert "driver: recovery action now GPU Reset Required" in f154[0]["what"]
    f149, _ = judge_text("\n".join(by["xid149_netir_link_evt_fatal"]["lines"]))
    assert "(Fatal)" in f149[0]["what"] and f149[0]["sick"]
    f45, _ = judge_text("\n".join(by["xid45_caused_by_nvlink_149_145"]["lines"]))
    assert sorted(f["pci"] for f in f45) == ["0000:97:00", "0000:ba:00", "0000:dc:00", "0000:ed:00"]
    assert all(f["sick"] and f["action"] == "reset the GPU" for f in f45)
    assert "caused by previous Xid 149" in [f for f in f45 if f["pci"] == "0000:dc:00"][0]["what"]


def test_application_xids_stay_notes_that_name_the_process():
    by = dict((c["name"], c) for c in CASES)
    f, worst = judge_text("\n".join(by["xid31_page_fault_app"]["lines"]))
    assert worst == "restart the job" and not f[0]["sick"]
    assert "process UnrealEditor (pid 13705)" in f[0]["what"]
    # the same Xid 45 that an NVLink error caused is sick; caused by an application Xid it is a note
    line = "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 13"
    assert judge_text(line)[1] == "restart the job"


def test_every_xid_of_the_catalog_has_a_row_and_an_action():
    nums = [r[0] for r in xid_catalog.ROWS]
    assert nums == list(range(1, 177))  # 1-172 of the catalog copy, 173-176 from nverror.h 595.45.04
    assert "2025-10-29" in xid_catalog.CATALOG_VERSION
    buckets = set(r[3] for r in xid_catalog.ROWS)
    assert buckets - {""} <= set(driver_errors.BUCKET_ACTION)
    for r in xid_catalog.ROWS:
        act, why = driver_errors.catalog_action(r[0])
        assert act in actions.ORDER and why, r
    assert set(r[0] for r in xid_catalog.ROWS if not r[3]) <= set(driver_errors.UNBUCKETED_ACTION)
    # the catalog's own words for the Xids the old sick list missed
    assert driver_errors.catalog_action(95)[0] == driver_errors.catalog_action(140)[0] == "reset the GPU"
    assert driver_errors.catalog_action(63)[0] == "none"  # a remapping event: IGNORE in the catalog ...
    # ... but the driver's line says "reset gpu to activate": reset the GPU, deferred (issue 30)
    [f63] = driver_errors.judge(driver_errors.parse("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: "
                                                    "New row marked for remapping, reset gpu to activate."))
    assert (f63["action"], f63["sick"]) == ("reset the GPU", False)


def test_recovery_action_words_of_the_driver():
    assert [actions.of_recovery_text(t) for t in ("None", "GPU Reset Required", "Node Reboot Required",
                                                   "Drain P2P", "Drain and Reset", "Recover IMEX Domain")] == [
        "none", "reset the GPU", "reboot the node", "reset the GPU", "reset the GPU", "restart the job"]


# --------------------------------------------------------------------------
# python3 -m validate --health, end to end


def run_health(tmp_path, *args, env=None, path=SMI_NODE + os.pathsep + "/usr/bin:/bin"):
    e = {"PATH": path, "HOME": str(tmp_path), "PYTHONPATH": ROOT}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "validate", "--health"] + list(args), cwd=str(tmp_path), env=e,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)


def kernel_log(tmp_path, lines):
    p = tmp_path / "kern.log"
    p.write_text("".join(line + "\n" for line in lines))
    return str(p)


def test_health_on_a_healthy_8_gpu_node_and_its_results_json(tmp_path):
    from remote.engine.jobs.logs import summarize
    from remote.report.collect import read_results

    out = tmp_path / "out"
    clean = kernel_log(tmp_path, ["[    0.000000] Linux version 6.1.0"])
    p = run_health(tmp_path, "--out", str(out), "--expect-gpus", "8", "--kernel-log", clean)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout == ("gpuprov health: healthy: 8 GPU(s) NVIDIA H100 80GB HBM3, driver 590.48.01; 0 Xid, 0 SXid "
                        "line(s) since boot; no NVSwitch seen here, 8 of 8 GPU(s) in the NVLink fabric\n")
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema"] == 2 and doc["ok"] is True and doc["action"] is None and doc["options"]["health"] is True
    assert [c["name"] for c in doc["checks"]] == ["system", "xid", "fabric"]
    assert all(c["status"] == "pass" and c["findings"] == [] for c in doc["checks"])
    assert doc["health"] == {"exit": 0, "line": p.stdout.strip()}
    # the control side still reads it
    data, problems = read_results(out / "results.json", "results.json")
    assert data is not None and problems == []
    assert summarize(out / "results.json", 0) == ("passed (3 checks)", True)
    # an application's Xid on the same healthy node: still healthy, named in the notes
    app = kernel_log(tmp_path, [c for c in CASES if c["name"] == "xid31_page_fault_app"][0]["lines"])
    p = run_health(tmp_path, "--out", str(out), "--expect-gpus", "8", "--kernel-log", app)
    assert p.returncode == 0 and "1 Xid" in p.stdout, p.stdout
    xid = [c for c in json.loads((out / "results.json").read_text())["checks"] if c["name"] == "xid"][0]
    assert xid["findings"][0]["action"] == "restart the job" and "UnrealEditor" in xid["findings"][0]["what"]


@pytest.mark.parametrize("name", ["xid154_gpu_reset_required", "xid149_netir_link_evt_fatal",
                                  "xid45_caused_by_nvlink_149_145", "xid79_sxid20034_fatal_nvswitch"])
def test_health_fails_the_issue_cases_with_their_action(tmp_path, name):
    case = [c for c in CASES if c["name"] == name][0]
    p = run_health(tmp_path, "--expect-gpus", "8", "--kernel-log", kernel_log(tmp_path, case["lines"]))
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.startswith("gpuprov health: sick: ") and p.stdout.count("\n") == 1
    assert p.stdout.rstrip().endswith("[action: %s]" % case["action"]), p.stdout


H100_HEALTHY = ("8 GPU(s) NVIDIA H100 80GB HBM3, driver 590.48.01; %s since boot; no NVSwitch seen here, "
                "8 of 8 GPU(s) in the NVLink fabric")


@pytest.mark.parametrize("block", ["smi_q_remapped_rows_pending_gpud80.txt", "smi_q_remapped_rows_pending_stas00.txt"])
def test_a_pending_row_remap_passes_with_the_action_reset_the_gpu(tmp_path, block):
    """Issue 30, point 5: "Remapped Rows ... Pending: Yes" needs a reset, yet NVIDIA lets new work
    start meanwhile: exit 0, and the line and results.json name the action.  The H100 capture with
    its Remapped Rows block replaced by a real one (gpud PR 80; stas00's A100): nothing typed."""
    q = open(os.path.join(FIX, "h100_590_smi_q.txt")).read()
    old = ("    Remapped Rows\n        Correctable Error                              : 0\n"
           "        Uncorrectable Error                            : 0\n"
           "        Pending                                        : No\n")
    assert old in q
    (tmp_path / "q.txt").write_text(q.replace(old, open(os.path.join(FIX, block)).read()))
    out = tmp_path / "out"
    p = run_health(tmp_path, "--kernel-log", kernel_log(tmp_path, []), "--out", str(out),
                   env={"FAKE_SMI_Q": str(tmp_path / "q.txt"), "FAKE_SMI_GPUS": "8"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout == ("gpuprov health: healthy [action: reset the GPU, deferred]: GPU 0: row remapping pending, "
                        "a GPU reset activates it; " + H100_HEALTHY % "0 Xid, 0 SXid line(s)" + "\n")
    doc = json.loads((out / "results.json").read_text())
    assert (doc["ok"], doc["action"], doc["deferred_action"]) == (True, None, "reset the GPU")
    system = [c for c in doc["checks"] if c["name"] == "system"][0]
    assert (system["status"], system["action"], system["deferred_action"]) == ("pass", None, "reset the GPU")
    assert {"what": "warning: GPU 0: row remapping pending, a GPU reset activates it", "action": "reset the GPU",
            "fails": False} in system["findings"]


def test_xid_63_passes_with_the_action_reset_the_gpu_and_validate_log_says_so(tmp_path):
    """Issue 30, point 5: the driver's "reset gpu to activate" (a real A100 line) is a deferred
    reset, not "none" and not sick."""
    case = [c for c in CASES if c["name"] == "xid63_row_remap_pending"][0]
    out = tmp_path / "out"
    p = run_health(tmp_path, "--expect-gpus", "8", "--out", str(out),
                   "--kernel-log", kernel_log(tmp_path, case["lines"]))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("gpuprov health: healthy [action: reset the GPU, deferred]: GPU PCI:0000:10:1c: "
                               "Xid 63 (GPU memory remapping event), 1 time(s); process ? (pid 1896) "), p.stdout
    assert p.stdout.endswith("; " + H100_HEALTHY % "1 Xid, 0 SXid line(s)" + "\n"), p.stdout
    doc = json.loads((out / "results.json").read_text())
    assert (doc["ok"], doc["action"], doc["deferred_action"]) == (True, None, "reset the GPU")
    from validate import core, output
    results = []
    for c in doc["checks"]:
        r = core.Result(c["name"], c["required"])
        r.status, r.findings = c["status"], c["findings"]
        results.append(r)
    log = output.render_log(doc, results)
    assert "operator's action, when the GPUs are idle (new work may start meanwhile): reset the GPU" in log
    # and the control side's recap of such a run names it too
    from remote.engine.jobs.logs import summarize
    assert summarize(out / "results.json", 0) == ("passed (3 checks) [action: reset the GPU, deferred]", True)


@pytest.mark.skipif(not NO_DRIVER_HERE, reason="asserts the behaviour of a machine without an NVIDIA driver")
def test_xid_79_in_the_kernel_log_is_sick_even_with_no_nvidia_smi(tmp_path):
    """Issue 30, point 3: the GPU fell off the bus and nvidia-smi is gone: the kernel's words
    outrank the missing tool, the node is sick with the Xid's action (not "could not check")."""
    case = [c for c in CASES if c["name"] == "xid79_fallen_off_the_bus"][0]
    p = run_health(tmp_path, "--kernel-log", kernel_log(tmp_path, case["lines"]), path="/usr/bin:/bin")
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.startswith("gpuprov health: sick: GPU PCI:0000:44:00: Xid 79 (GPU has fallen off the bus)")
    assert p.stdout.endswith("[action: reboot the node]\n"), p.stdout


def test_health_reads_nvidia_smi_health_with_actions(tmp_path):
    clean = kernel_log(tmp_path, [])
    # a GPU missing: sick, reboot
    p = run_health(tmp_path, "--kernel-log", clean, "--expect-gpus", "8", env={"FAKE_SMI_GPUS": "7"})
    assert (p.returncode, p.stdout) == (1, "gpuprov health: sick: nvidia-smi lists 7 GPUs, expected 8 "
                                           "[action: reboot the node]\n")


@pytest.mark.skipif(not NO_DRIVER_HERE, reason="asserts the behaviour of a machine without an NVIDIA driver")
def test_health_on_a_gpu_less_machine(tmp_path):
    bare = "/usr/bin:/bin"  # no stand-in nvidia-smi
    p = run_health(tmp_path, path=bare)
    assert (p.returncode, p.stdout) == (3, "gpuprov health: could not check: no NVIDIA driver (nvidia-smi not "
                                           "found, /proc/driver/nvidia/version absent)\n")
    p = run_health(tmp_path, "--expect-gpus", "8", path=bare)
    assert p.returncode == 1 and p.stdout.rstrip().endswith("expected 8 GPUs [action: reboot the node]")
    p = run_health(tmp_path, "--expect-gpus", "0", path=bare)
    assert p.returncode == 0 and "healthy: no NVIDIA GPU" in p.stdout
    p = run_health(tmp_path, "--expect-gpus", "-1", path=bare)
    assert (p.returncode, p.stdout, p.stderr) == (2, "", "validate: error: --expect-gpus must be >= 0\n")


def test_health_never_imports_torch(tmp_path):
    code = ("import sys, validate.cli\n"
            "rc = validate.cli.main(['--health', '--kernel-log', %r])\n"
            "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision', 'numpy')))\n"
            % kernel_log(tmp_path, []))
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120,
                       env={"PATH": SMI_NODE + os.pathsep + "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert p.stdout.splitlines()[-1] == "0 []", p.stdout + p.stderr


# --------------------------------------------------------------------------
# Fabric Manager


def _pci_dev(sysfs, addr, vendor, cls):
    d = sysfs / "bus" / "pci" / "devices" / addr
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "class").write_text(cls + "\n")


def test_fabric_manager_missing_on_an_nvswitch_board_is_a_finding(tmp_path):
    sysfs = tmp_path / "sys"
    # an HGX A100 as lspci -nn shows it (gpud testdata lspci.nn.a100): GPUs 3D controller [0302],
    # NVSwitches "Bridge [0680]: NVIDIA Corporation Device [10de:1af1]"
    _pci_dev(sysfs, "0001:00:00.0", "0x10de", "0x030200")
    for i in range(5, 11):
        _pci_dev(sysfs, "000%x:00:00.0" % i, "0x10de", "0x068000")
    _pci_dev(sysfs, "0000:00:1f.0", "0x8086", "0x068000")  # not NVIDIA
    switches = fabric.nvswitches(str(sysfs))
    assert switches == ["0005:00:00.0", "0006:00:00.0", "0007:00:00.0", "0008:00:00.0", "0009:00:00.0",
                        "000a:00:00.0"]
    found = fabric.judge(switches, [], [])
    assert len(found) == 1 and found[0][1] == "reboot the node"
    assert found[0][0].startswith("6 NVSwitch(es) (0005:00:00.0, 0006:00:00.0, 0007:00:00.0, 0008:00:00.0, ...) "
                                  "but Fabric Manager (nv-fabricmanager) is not running")
    gpus = [{"index": 0, "bus_id": "00000000:18:00.0", "fabric": {"state": "In Progress", "status": None}}]
    assert [a for _, a in fabric.judge(switches, [1], gpus)] == ["reboot the node"]
    assert fabric.judge(switches, [1], [{"index": 0, "fabric": {"state": "Completed", "status": "Success"}}]) == []
    assert fabric.nvswitches(str(tmp_path / "none")) == []
    # one GPU and no switch (a single-GPU VM): its fabric state is not judged
    assert fabric.judge([], [], gpus) == []
    assert [a for _, a in fabric.judge([], [], gpus * 2)] == ["reboot the node"] * 2


def test_fabric_manager_is_found_by_its_process(tmp_path):
    exe = tmp_path / "nv-fabricmanager"
    shutil.copy("/bin/sleep", str(exe))
    proc = subprocess.Popen([str(exe), "60"])
    try:
        for _ in range(50):
            if proc.pid in fabric.fabric_manager_pids():
                break
            time.sleep(0.05)
        assert proc.pid in fabric.fabric_manager_pids()
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in fabric.fabric_manager_pids()


# --------------------------------------------------------------------------
# --slurm-drain


def test_slurm_reason_is_printable_prefixed_and_cut():
    r = slurm_node.slurm_reason("sick: GPU 0: row remapping pending\n\x1b[31m" + "x" * 400 + " [action: reset the GPU]")
    assert r.startswith("gpuprov health: sick: GPU 0: row remapping pending??[31mxxx")
    assert len(r) == slurm_node.SLURM_REASON_MAX and all(" " <= ch <= "~" for ch in r)
    # the action survives the cut: it moves up front
    r = slurm_node.slurm_reason("sick: GPU 0: " + "y" * 400 + " [action: reset the GPU]", "reset the GPU")
    assert r.startswith("gpuprov health: sick [action: reset the GPU]: GPU 0: yyy")


def test_scontrol_gets_the_configless_slurm_conf_when_it_has_no_other():
    only = {slurm_node.SLURM_CONF_CONFIGLESS}
    assert slurm_node.slurm_env({"SLURMD_NODENAME": "n1"}, only.__contains__) == {
        "SLURMD_NODENAME": "n1", "SLURM_CONF": "/run/slurm/conf/slurm.conf"}
    both = {slurm_node.SLURM_CONF_DEFAULT, slurm_node.SLURM_CONF_CONFIGLESS}
    assert "SLURM_CONF" not in slurm_node.slurm_env({}, both.__contains__)  # scontrol reads /etc/slurm itself
    assert slurm_node.slurm_env({"SLURM_CONF": "/x"}, only.__contains__)["SLURM_CONF"] == "/x"


# `scontrol show node n1` of Slurm 22.05.8 (tests/slurm_cluster.py's cluster): an idle node, and
# the same node after `scontrol update nodename=n1 state=drain reason="fan 3 failing, do not resume"`
IDLE_NODE = """NodeName=n1 Arch=x86_64 CoresPerSocket=1
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.87
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=gpu:2
   NodeAddr=127.0.0.1 NodeHostName=localhost Port=27110 Version=22.05.8
   RealMemory=1000 AllocMem=0 FreeMem=18414 Sockets=2 Boards=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug,gpu
   BootTime=2026-11-27T00:35:45 SlurmdStartTime=2026-11-27T00:42:12
   LastBusyTime=2026-11-27T00:42:12
   CfgTRES=cpu=2,mem=1000M,billing=2
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s

"""
ADMIN_DRAINED = IDLE_NODE.replace("State=IDLE ", "State=IDLE+DRAIN ").replace(
    "ExtSensorsTemp=n/s\n", "ExtSensorsTemp=n/s\n   Reason=fan 3 failing, do not resume [root@2026-11-27T00:42:12]\n")


def test_scontrol_show_node_is_read_for_state_and_reason():
    assert slurm_node.parse_show_node(IDLE_NODE) == (frozenset(["IDLE"]), "")
    assert slurm_node.parse_show_node(ADMIN_DRAINED) == (frozenset(["IDLE", "DRAIN"]), "fan 3 failing, do not resume")
    down = ADMIN_DRAINED.replace("State=IDLE+DRAIN", "State=DOWN*+DRAIN")
    assert slurm_node.parse_show_node(down)[0] == frozenset(["DOWN", "DRAIN"])
    assert slurm_node.parse_show_node("Node gpu-7 not found\n") is None


@pytest.mark.parametrize("healthy,state,reason,todo", [
    # NHC's rule (mej/nhc helpers/node-mark-offline, node-mark-online), with our prefix
    (False, "IDLE", "", "drain"),
    (False, "MIXED", "", "drain"),
    (False, "IDLE+DRAIN", "fan 3 failing, do not resume", None),      # an admin's drain: kept
    (False, "IDLE+DRAIN", "", None),                                  # offline with no note: NHC leaves it
    (False, "DOWN+NOT_RESPONDING", "Not responding", None),           # Slurm's own
    (False, "IDLE+DRAIN", "gpuprov 20261101T000000.000Z-0000: stress: GPU 0 slow", None),  # a full run's
    (False, "IDLE+DRAIN", "gpuprov health: could not check: no NVIDIA driver", "drain"),  # ours: updated
    (True, "IDLE+DRAIN", "gpuprov health: sick [action: reset the GPU]: GPU 0", "resume"),
    (True, "MIXED+DRAIN", "gpuprov health: could not check: xid", "resume"),
    (True, "IDLE+DRAIN", "fan 3 failing, do not resume", None),
    (True, "IDLE+DRAIN", "gpuprov 20261101T000000.000Z-0000: stress: GPU 0 slow", None),
    (True, "IDLE", "", None),
])
def test_drain_and_resume_follow_nhc_rule(healthy, state, reason, todo):
    assert slurm_node.plan(healthy, frozenset(state.split("+")), reason)[0] == todo


def test_slurm_drain_calls_scontrol_with_the_finding(tmp_path):
    # a stand-in scontrol that answers `show node` for an idle node (IDLE_NODE) and records the
    # argv of an update (no slurmctld here: tests/test_slurm_cluster.py has the real daemons);
    # found through PATH like on a login shell
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "idle.txt").write_text(IDLE_NODE)
    (bin_dir / "scontrol").write_text("#!/bin/sh\nif [ \"$1\" = show ]; then exec cat %s; fi\n"
                                      "printf '%%s\\n' \"$@\" > %s\n" % (tmp_path / "idle.txt", tmp_path / "argv"))
    (bin_dir / "scontrol").chmod(0o755)
    case = [c for c in CASES if c["name"] == "xid154_gpu_reset_required"][0]
    p = run_health(tmp_path, "--slurm-drain", "--kernel-log", kernel_log(tmp_path, case["lines"]),
                   env={"SLURMD_NODENAME": "gpu-7"}, path=SMI_NODE + os.pathsep + str(bin_dir) + ":/usr/bin:/bin")
    assert p.returncode == 1
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:3] == ["update", "nodename=gpu-7", "state=drain"]
    assert argv[3].startswith("reason=gpuprov health: sick [action: reset the GPU]: GPU PCI:0000:0b:00: Xid 154")
    assert len(argv[3]) == len("reason=") + slurm_node.SLURM_REASON_MAX
    assert "drained gpu-7" in p.stderr
    # healthy: no drain
    (tmp_path / "argv").unlink()
    p = run_health(tmp_path, "--slurm-drain", "--kernel-log", kernel_log(tmp_path, []),
                   env={"SLURMD_NODENAME": "gpu-7"}, path=SMI_NODE + os.pathsep + str(bin_dir) + ":/usr/bin:/bin")
    assert p.returncode == 0 and not (tmp_path / "argv").exists()


@pytest.mark.skipif(not os.access("/usr/bin/scontrol", os.X_OK), reason="Slurm's scontrol is not installed here")
def test_slurm_drain_finds_scontrol_without_path(tmp_path):
    """Slurm runs HealthCheckProgram with SLURMD_NODENAME and no PATH: scontrol is looked up in
    the usual directories.  No slurmctld runs here, so the real scontrol refuses; the verdict's
    exit status stays."""
    case = [c for c in CASES if c["name"] == "xid79_fallen_off_the_bus"][0]
    code = ("import sys; sys.path.insert(0, %r); import validate.cli; "
            "sys.exit(validate.cli.main(['--health', '--slurm-drain', '--kernel-log', %r]))"
            % (ROOT, kernel_log(tmp_path, case["lines"])))
    p = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env={"SLURMD_NODENAME": "gpu-7"},
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert p.returncode in (1, 3), p.stdout + p.stderr  # no nvidia-smi without PATH: could not check or sick
    assert "scontrol not found" not in p.stderr
    assert "reading the state of gpu-7 failed" in p.stderr, p.stderr


def _world_python():
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(cand) and os.stat(cand).st_mode & 0o001:
            return cand
    return None


def _dmesg_restricted():
    try:
        return open("/proc/sys/kernel/dmesg_restrict").read().strip() == "1"
    except OSError:
        return False


@pytest.mark.skipif(os.geteuid() != 0 or not _dmesg_restricted() or _world_python() is None
                    or shutil.which("setpriv") is None,
                    reason="needs root to run as nobody, kernel.dmesg_restrict=1 and a python nobody may run")
def test_health_as_a_user_who_may_not_read_the_kernel_log_could_not_check():
    """As nobody (no adm group, dmesg_restrict=1) the Xid scan cannot run: a healthy-looking
    node is 'could not check' (exit 3), never healthy."""
    import tempfile

    base = tempfile.mkdtemp(prefix="validate-health-nobody-")
    try:
        os.chmod(base, 0o755)
        shutil.copytree(os.path.join(ROOT, "validate"), os.path.join(base, "validate"))
        fix = os.path.join(base, "fix")
        shutil.copytree(SMI_NODE, os.path.join(fix, "smi_node"))
        for name in ("h100_590_smi_q.txt", "h100_590_query_gpu.csv"):
            shutil.copy(os.path.join(FIX, name), fix)
        for d, _, files in os.walk(base):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o755)
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", _world_python(), "-m",
                            "validate", "--health", "--expect-gpus", "8"], cwd=base, timeout=120,
                           env={"PATH": os.path.join(fix, "smi_node") + ":/usr/bin:/bin", "HOME": "/tmp"},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        assert p.returncode == 3, p.stdout + p.stderr
        assert p.stdout.startswith("gpuprov health: could not check: xid: kernel log not readable, Xid errors "
                                   "NOT checked"), p.stdout
        assert "running as uid 65534, not root" in p.stdout and p.stdout.count("\n") == 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
