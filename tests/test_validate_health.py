"""The checks that catch sick GPUs (issue 12 items 5-8): xid on real kernel
lines, stress and memory on the CPU with real torch, nccl's orchestration
with gloo and two real processes.  Sources: tests/fixtures/validate/SOURCES.md."""

import os
import re
import shutil

import pytest

from validate import driver_errors, smi, topology
from validate.checks import memory, stress
from validate.checks import xid as xid_check

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "validate")


def _ctx(tmp_path, *args):
    from validate import cli, core

    opts = cli.parse_args(["--out", str(tmp_path), "--device", "cpu", "--iters", "3", "--warmup", "1"] + list(args))
    cli.resolve_defaults(opts)
    return core.Context(opts, str(tmp_path), stream=open(os.devnull, "w"))


def _run(ctx, name):
    from validate import core

    return core.run_check(ctx, core.SPECS[name], True)


# --------------------------------------------------------------------------
# item 7: Xid


def test_real_xid_lines_are_parsed_named_and_judged():
    events = driver_errors.parse(open(os.path.join(FIX, "kernel_xid_lines.txt")).read())
    assert [(e["xid"], e["pci"]) for e in events] == [
        (13, "0000:cb:00"), (79, "0000:44:00"), (94, "0000:9b:00"), (149, "0019:01:00"), (145, "0018:01:00")]
    assert events[2]["pid"] == "1234" and events[2]["process"] == "python3"
    assert [e["severity"] for e in events] == [None, None, None, "fatal", "nonfatal"]
    findings = driver_errors.judge(events)
    assert [(f["xid"], f["action"], f["sick"]) for f in findings] == [
        (13, "restart the job", False), (79, "reboot the node", True), (94, "restart the job", False),
        (149, "reset the GPU", True), (145, "none", False)]
    assert findings[1]["what"].startswith("GPU PCI:0000:44:00: Xid 79 (GPU has fallen off the bus), 1 time(s) "
                                          "[catalog: RESTART_BM]; last: NVRM: Xid (PCI:0000:44:00): 79")
    assert "process python3 (pid 1234)" in findings[2]["what"]


def test_xid_check_fails_on_a_sick_log_passes_a_clean_one_and_never_passes_unread(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(open(os.path.join(FIX, "kernel_xid_lines.txt")).read())
    res = _run(_ctx(tmp_path, "--kernel-log", str(log)), "xid")
    assert res.status == "fail" and "Xid 79 (GPU has fallen off the bus)" in res.reason
    assert "[action: reboot the node]" in res.reason and res.to_json()["action"] == "reboot the node"
    assert res.figures["sick"] == [79, 149] and res.figures["xids"] == [13, 79, 94, 145, 149]
    clean = tmp_path / "clean.log"
    clean.write_text("[    0.000000] Linux version 6.1.0\n")
    res = _run(_ctx(tmp_path, "--kernel-log", str(clean)), "xid")
    assert res.status == "pass" and res.summary.startswith("0 Xid event(s)")
    ctx = _ctx(tmp_path, "--kernel-log", str(clean))
    clean.unlink()  # gone after the command line was checked
    res = _run(ctx, "xid")
    # the user's own file: skipped and still required (not validated), never waived
    assert res.status == "skip" and res.reason.startswith("kernel log not readable")
    assert res.required is True and res.waived is None


def test_a_wrapped_dmesg_is_named():
    # this machine's dmesg, first and last line (SOURCES.md): a whole buffer starts at boot;
    # one that starts later has lost the lines before it
    first, last = open(os.path.join(FIX, "dmesg_first_and_last_line.txt")).read().splitlines()
    assert driver_errors.dmesg_start(first + "\n" + last) == 0.0
    assert driver_errors.dmesg_start(last) == 3689.690026
    # journalctl's and --kernel-log's own formats carry no such timestamp: not judged
    assert driver_errors.dmesg_start(open(os.path.join(FIX, "kernel_xid_lines.txt")).read()) is None


def test_why_the_kernel_log_is_unreadable():
    # kernel.dmesg_restrict=1: "users must have CAP_SYSLOG to use dmesg(8)" (kernel
    # Documentation/admin-guide/sysctl/kernel.rst); journalctl(1): "Members of the groups
    # systemd-journal, adm, and wheel can read all journal files".  Debian's default user:
    assert xid_check.why_unreadable(1000, ["debian", "sudo"], 1) == (
        "running as uid 1000, not root, kernel.dmesg_restrict=1 (dmesg needs CAP_SYSLOG), "
        "not in group adm or systemd-journal or wheel (journalctl -k needs one); run validate as root, "
        "add the user to group adm or systemd-journal, or pass --kernel-log FILE")
    # Ubuntu's default user is in adm: only the missing journal (a container, no journald) is left
    assert xid_check.why_unreadable(1000, ["ubuntu", "adm", "sudo"], 1).startswith(
        "running as uid 1000, not root, kernel.dmesg_restrict=1 (dmesg needs CAP_SYSLOG); run validate")
    assert "container without CAP_SYSLOG" in xid_check.why_unreadable(0, ["root"], 1)


def _system_python():
    """A python any user can run (this one may live under /root)."""
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(cand) and os.stat(cand).st_mode & 0o001:
            return cand
    return None


def _dmesg_restrict():
    try:
        return open("/proc/sys/kernel/dmesg_restrict").read().strip()
    except OSError:
        return None


@pytest.mark.skipif(os.geteuid() != 0 or _dmesg_restrict() != "1" or _system_python() is None
                    or shutil.which("setpriv") is None,
                    reason="needs root (to drop to nobody), kernel.dmesg_restrict=1, setpriv and a "
                           "world-runnable python")
def test_xid_as_an_unprivileged_user_is_waived_with_the_reason_not_failed():
    """The real restriction: validate run as nobody (the control side runs it as the SSH
    user).  xid is waived with a warning that says why, and does not make the run "not
    validated"; named in --checks it does."""
    import json
    import subprocess
    import tempfile

    base = tempfile.mkdtemp(prefix="validate-nobody-")  # pytest's tmp_path is root-only
    try:
        os.chmod(base, 0o755)
        shutil.copytree(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "validate"),
                        os.path.join(base, "validate"))

        def as_nobody(name, *args):
            out = os.path.join(base, name)
            os.mkdir(out)
            os.chmod(out, 0o777)
            proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", _system_python(),
                                   "-m", "validate", "--out", out, "--device", "cpu"] + list(args),
                                  cwd=base, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"}, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
            doc = json.loads(open(os.path.join(out, "results.json")).read())
            return proc, doc, dict((x["name"], x) for x in doc["checks"])["xid"]

        proc, doc, c = as_nobody("quick", "--quick", "--skip", "cudnn_compile,cudnn_sample,torch_import,"
                                 "torch_cuda,bench,stress")
        assert c["status"] == "skip" and c["required"] is False, c
        assert c["waived"].startswith("kernel log not readable, Xid errors NOT checked (")
        assert "running as uid 65534, not root, kernel.dmesg_restrict=1" in c["waived"]
        assert c["warnings"] == [c["waived"]]
        assert doc["ok"] is True and proc.returncode == 0, proc.stderr
        log = open(os.path.join(base, "quick", "validate.log")).read()
        # the host checks the profile names nothing for are waived too (not applicable)
        assert re.match(r"gpuprov-validate 0\.1\.0: VALIDATED \(exit 0\); waived: node, xid, fabric, "
                        r"infiniband(, host_[a-z]+)*; 1 warning\(s\)\n", log), log.splitlines()[0]
        assert re.search(r"^required checks waived \(not applicable here\): .*xid: kernel log not readable", log, re.M)
        assert re.search(r"^xid\s+SKIP\s+waived ", log, re.M)
        proc, doc, c = as_nobody("named", "--checks", "xid")
        assert c["status"] == "skip" and c["required"] is True and c["waived"] is None
        assert proc.returncode == 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------
# item 5: stress


def test_stress_judge_on_sampled_values():
    # H100 idle reading (h100_590_query_gpu.csv): event reasons 0x1 = idle
    rows = smi.typed_gpu_rows(smi.parse_query_csv(open(os.path.join(FIX, "h100_590_query_gpu.csv")).read()))
    mask = rows[0]["clocks_event_reasons.active"]
    assert smi.decode_throttle(mask) == ["gpu_idle"]
    ok = {"label": "GPU 0", "name": "NVIDIA H100 80GB HBM3", "tflops": 700.0, "iterations": 100, "mismatches": 0,
          "samples": [{"throttle": smi.decode_throttle(mask)}, {"throttle": ["sw_power_cap"]}]}
    assert stress.judge([ok, dict(ok, label="GPU 1", tflops=690.0)]) == []
    # NVML bits as Azure's azure_gpu_clock_throttling.nhc lists them: 0x40 HW thermal, 0x80 power brake
    hot = dict(ok, label="GPU 1", samples=[{"throttle": smi.decode_throttle(0x40 | 0x80)}])
    slow = dict(ok, label="GPU 2", tflops=0.3 * 700)
    flaky = dict(ok, label="GPU 3", mismatches=2)
    problems = stress.judge([ok, hot, slow, flaky])
    assert problems == [
        "GPU 1: clocks held back under load by hw_power_brake_slowdown, hw_thermal_slowdown",
        "GPU 2: 210.0 TFLOPS under load, below 80% of its peers' median 700.0 (4 x NVIDIA H100 80GB HBM3)",
        "GPU 3: 2 of 100 results differ from the verified first product",
    ]


def test_stress_compares_a_gpu_with_peers_of_its_own_model():
    # A mixed node: torch.mm bf16 n=8192 as measured on healthy GPUs (zzc0721/torch-performance-test-data:
    # H100 797.51, A100-PCIE-40GB 215.26 TFLOPS).  The A100 is not slow, it is an A100.
    h100 = {"name": "NVIDIA H100 80GB HBM3", "tflops": 797.51, "iterations": 100, "mismatches": 0, "samples": []}
    a100 = dict(h100, label="GPU 2", name="NVIDIA A100-PCIE-40GB", tflops=215.26)
    node = [dict(h100, label="GPU 0"), dict(h100, label="GPU 1"), a100]
    assert stress.judge(node) == []
    # one of two H100s at 30 % still fails against its own kind
    node[1] = dict(node[1], tflops=0.3 * 797.51)
    assert stress.judge(node) == ["GPU 1: 239.3 TFLOPS under load, below 80% of its peers' median 518.4 "
                                  "(2 x NVIDIA H100 80GB HBM3)"]
    # a single GPU has no peers: judged by matmul against its SKU, not here
    assert stress.judge([a100]) == []


def test_stress_holds_a_lone_or_uniformly_slow_gpu_against_its_sku():
    # peers cannot see a single GPU, nor 8 GPUs all at 30 %: the model's floor can (half of
    # the lowest public bf16 8192 figure, Napkin 711 TFLOPS: validate/expectations.py)
    e = stress.expected_tflops("H100 SXM", None, "bf16")
    assert e["floor"] == pytest.approx(355.5) and e["source"].startswith("Napkin")
    healthy = {"label": "GPU 0", "name": "NVIDIA H100 80GB HBM3", "tflops": 0.8 * 797.51, "iterations": 100,
               "mismatches": 0, "samples": [], "expected": e}
    assert stress.judge([healthy]) == []
    slow = [dict(healthy, label="GPU %d" % i, tflops=0.3 * 797.51) for i in range(8)]
    assert stress.judge(slow)[0] == ("GPU 0: 239.3 TFLOPS under load, below 355.5 (0.50 x 711 measured on a "
                                     "healthy NVIDIA H100 80GB HBM3: " + e["source"] + ")")
    # a MIG 1g.10gb slice (16 of 132 SMs) by its share; fp16 (T4) and unknown SKUs: no figure
    assert stress.expected_tflops("H100 SXM", 16 / 132.0, "bf16")["floor"] == pytest.approx(355.5 * 16 / 132)
    assert stress.expected_tflops("T4", None, "fp16") is None
    assert stress.expected_tflops(None, None, "bf16") is None


def test_stress_uses_the_tensor_core_format_each_gpu_has():
    # compute capabilities (CUDA programming guide): P100 6.0, V100 7.0, T4 7.5, A100 8.0, L4 8.9,
    # H100 9.0, B200 10.0.  bf16 GEMMs need 8.x (torch.cuda.is_bf16_supported: major >= 8);
    # before, a bf16 stress would error out and call a healthy T4 "not validated".
    caps = {"Tesla P100-PCIE-16GB": 6, "Tesla V100-SXM2-16GB": 7, "Tesla T4": 7, "NVIDIA A100-SXM4-80GB": 8,
            "NVIDIA L4": 8, "NVIDIA H100 80GB HBM3": 9, "NVIDIA B200": 10}
    assert dict((n, stress.gemm_mode(m)) for n, m in caps.items()) == {
        "Tesla P100-PCIE-16GB": "fp32", "Tesla V100-SXM2-16GB": "fp16", "Tesla T4": "fp16",
        "NVIDIA A100-SXM4-80GB": "bf16", "NVIDIA L4": "bf16", "NVIDIA H100 80GB HBM3": "bf16", "NVIDIA B200": "bf16"}


def test_stress_runs_on_the_cpu_and_catches_a_wrong_result(tmp_path, monkeypatch):
    import torch

    res = _run(_ctx(tmp_path, "--stress-seconds", "0.5"), "stress")
    assert res.status == "pass", res.reason
    g = res.figures["per_gpu"][0]
    assert g["iterations"] >= 10 and g["mismatches"] == 0 and g["tflops"] > 0
    real_mm = torch.mm
    calls = []

    def mm_that_flips_later(x, y, out=None):  # right first, wrong from the 5th call on
        r = real_mm(x, y, out=out)
        calls.append(1)
        if len(calls) > 5:
            r[3, 3] = float("nan")
        return r

    monkeypatch.setattr(torch, "mm", mm_that_flips_later)
    res = _run(_ctx(tmp_path, "--stress-seconds", "0.3"), "stress")
    assert res.status == "fail" and "results differ from the verified first product" in res.reason


# --------------------------------------------------------------------------
# item 6: memory


def test_memory_patterns_find_a_bad_word(tmp_path):
    import torch

    res = _run(_ctx(tmp_path), "memory")
    assert res.status == "pass" and res.figures["per_gpu"][0]["bytes_tested"] == memory.CPU_BYTES
    chunks = memory.allocate(torch, "cpu", memory.CPU_BYTES)

    def stuck_bit(i, chunk):  # bit 20 of word 1000 stuck at 1
        chunk[1000] = chunk[1000] | (1 << 20)

    errors = memory.scan(torch, chunks, stuck_bit)
    # ones and 0x55555555 have bit 20 set already: a stuck-at-1 bit shows under the others
    assert [e[0] for e in errors] == ["zeros", "0xAAAAAAAA", "address"]
    assert all(e[2] == 1 and e[3] == 4000 for e in errors)


# --------------------------------------------------------------------------
# item 8: topology, busbw, the collective for real


def test_topology_of_a_real_hgx_b200():
    links = topology.parse_topo(open(os.path.join(FIX, "topo_b200_nv18.txt")).read())
    assert len(links) == 56 and set(links.values()) == {"NV18"}
    assert topology.link_class(links[(0, 7)]) == "nvlink"
    assert topology.link_class("SYS") == "pcie" and topology.link_class("X") is None


def test_busbw_is_nccl_tests_formula():
    # nccl-tests doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n
    algbw, busbw = topology.busbw_allreduce(16 << 30, 0.065, 8)
    assert algbw == pytest.approx((16 << 30) / 0.065 / 1e9)
    assert busbw == pytest.approx(algbw * 14 / 8)


def test_nccl_orchestration_with_gloo_and_two_processes(tmp_path):
    res = _run(_ctx(tmp_path), "nccl")
    assert res.status == "pass", res.reason
    f = res.figures
    assert f["backend"] == "gloo" and f["world"] == 2 and f["wrong_elements"] == 0
    assert f["busbw_gbs"] == pytest.approx(f["algbw_gbs"])  # 2(n-1)/n = 1 for two ranks


def test_p2p_skips_with_the_reason_without_gpus(tmp_path):
    # --device cpu: p2p has nothing to run on, whatever the host: not applicable (n/a)
    res = _run(_ctx(tmp_path), "p2p")
    assert (res.status, res.reason, res.waived) == (
        "skip", "not applicable: --device cpu, no GPUs to copy between",
        "not applicable: --device cpu, no GPUs to copy between")
    if not os.path.exists("/dev/nvidia0"):
        # a GPU validation (--device auto) on a machine without one: the missing GPU is the failure
        from validate import cli, core

        opts = cli.parse_args(["--out", str(tmp_path), "--iters", "3", "--warmup", "1"])
        cli.resolve_defaults(opts)
        res = _run(core.Context(opts, str(tmp_path), stream=open(os.devnull, "w")), "p2p")
        assert res.status == "fail" and res.reason.startswith("CUDA not available (") and res.waived is None


def test_floors_apply_only_to_a_node_of_one_model():
    from validate.checks import multigpu

    # device names as torch reports them (tests/fixtures/validate/h100_590_*; A100 from zzc0721 #108)
    assert multigpu.node_sku(["NVIDIA H100 80GB HBM3"] * 8) == "H100 SXM"
    assert multigpu.node_sku(["NVIDIA H100 80GB HBM3"] * 7 + ["NVIDIA A100-PCIE-40GB"]) is None


def test_one_gpu_waives_p2p_and_nccl_and_names_it(tmp_path):
    """The waiver path as the checks take it on a one-GPU VM (stand-in result: no GPU here)."""
    from validate import core, output

    res = core.Result("p2p", True)
    res.waive("not applicable: one GPU, no peer to copy to", warning=False)
    core._finish(res)
    res.required = False
    assert res.to_json()["waived"] == "not applicable: one GPU, no peer to copy to"
    assert res.to_json()["warnings"] == []
    doc = {"host": {}, "options": {}, "ok": True, "started": "-", "elapsed_s": 1.0}
    text = output.render_log(doc, [res])
    assert "required checks waived (not applicable here): p2p: not applicable: one GPU" in text
