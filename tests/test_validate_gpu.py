"""The whole suite on a real NVIDIA GPU.  Marked ``gpu``: skipped, with the
reason, where there is none (CI, this development machine).  When it runs,
its output folder is what tests/fixtures/validate/ should keep from an H100
(results.json, validate.log, bench_torch.log: see validate/README.md)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _gpu_reason():
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi: no NVIDIA driver on this machine"
    try:
        import torch
    except ImportError:
        return "torch not installed"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    return None


REASON = _gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=str(REASON))]


def _run(out, *args):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-m", "validate", "--out", str(out)] + list(args), cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=1500, env=env)


def _required_not_passed(doc):
    return ["%s: %s %s" % (c["name"], c["status"], c["reason"]) for c in doc["checks"]
            if c["required"] and c["status"] != "pass"]


def _check_stress(stress):
    """Every GPU loaded, every result equal, nvidia-smi sampled under the load."""
    assert stress["status"] == "pass", stress["reason"]
    for g in stress["figures"]["per_gpu"]:
        assert g["mismatches"] == 0 and g["tflops"] > 0 and g["iterations"] > 0, g
        assert g["dtype"] in ("bf16", "fp16", "fp32")
        assert g["sampled"]["samples"] > 0 and g["sampled"]["sm_clock_min_mhz"] > 0, g["sampled"]
        assert g["sampled"]["temperature_max_c"] > 0 and g["sampled"]["power_max_w"] > 0, g["sampled"]


def _check_xid(xid):
    """Read and judged, or waived with the reason (a user without the kernel log): never a
    silent pass, never 'not validated' for the user's rights."""
    if xid["status"] == "skip":
        assert xid["required"] is False and xid["waived"].startswith("kernel log not readable"), xid
        assert xid["warnings"] == [xid["waived"]]
    else:
        assert xid["status"] == "pass", xid["reason"]
        assert xid["figures"]["source"], xid["figures"]


def test_quick_suite_on_the_gpu(tmp_path):
    proc = _run(tmp_path / "quick", "--quick")
    doc = json.loads((tmp_path / "quick" / "results.json").read_text())
    checks = dict((c["name"], c) for c in doc["checks"])
    assert doc["host"]["device"] == "cuda"
    assert checks["torch_cuda"]["status"] == "pass", checks["torch_cuda"]["reason"]
    _check_stress(checks["stress"])
    _check_xid(checks["xid"])
    assert doc["ok"] is True, _required_not_passed(doc)
    assert proc.returncode == 0


def test_full_suite_on_the_gpu(tmp_path):
    import torch

    out = tmp_path / "full"
    proc = _run(out, "--models", "resnet50,resnet18", "--stress-seconds", "30")
    doc = json.loads((out / "results.json").read_text())
    checks = dict((c["name"], c) for c in doc["checks"])
    for g in checks["matmul"]["figures"]["per_gpu"]:
        for mode in ("fp32", "tf32", "bf16"):
            assert g[mode + "_check_error"] < 1.0  # the timed product verified
        for k, v in g["verdict"].items():  # judged where a public figure exists, and healthy
            assert v["verdict"] in ("pass", "no reference"), (g["name"], k, v)
        if g["sku"] == "H100 SXM" and not g["mig_share"]:
            assert set(v["verdict"] for v in g["verdict"].values()) == {"pass"}, g["verdict"]
    for g in checks["bandwidth"]["figures"]["per_gpu"]:
        if (g["sku"] or "").startswith("H100") and not g["mig_share"]:
            # host copies judged against the link nvidia-smi read under load
            assert g["pcie"] and g["pcie"]["gen_current"] and g["pcie"]["width_current"], g
            assert g["verdict"]["h2d_gbs"]["verdict"] in ("pass", "no reference"), g["verdict"]
    memory = checks["memory"]["figures"]["per_gpu"]
    assert all(m["errors"] == 0 and m["bytes_tested"] > 0.5 * m["requested"] for m in memory), memory
    _check_stress(checks["stress"])
    _check_xid(checks["xid"])
    for name in ("p2p", "nccl"):
        if torch.cuda.device_count() < 2:
            assert checks[name]["status"] == "skip" and checks[name]["required"] is False
            assert checks[name]["waived"].startswith("not applicable: one GPU")
        else:
            assert checks[name]["status"] == "pass", checks[name]["reason"]
    bench = checks["bench"]["figures"]["models"]
    assert bench["resnet50"]["latency_ms"]["median"] > 0 and bench["resnet50"]["throughput_ips"]["amp"] > 0
    assert (out / "validate.log").exists() and (out / "bench_torch.log").exists()
    assert doc["ok"] is True, _required_not_passed(doc)
    assert proc.returncode == 0
