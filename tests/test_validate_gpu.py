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


def test_quick_suite_on_the_gpu(tmp_path):
    proc = _run(tmp_path / "quick", "--quick")
    doc = json.loads((tmp_path / "quick" / "results.json").read_text())
    checks = dict((c["name"], c) for c in doc["checks"])
    assert doc["host"]["device"] == "cuda"
    for name in ("torch_cuda", "stress"):
        assert checks[name]["status"] == "pass", (name, checks[name]["reason"])
    stress = checks["stress"]["figures"]["per_gpu"]
    assert all(g["mismatches"] == 0 and g["tflops"] > 0 for g in stress)
    assert proc.returncode == (0 if doc["ok"] else 1)


def test_full_suite_on_the_gpu(tmp_path):
    out = tmp_path / "full"
    proc = _run(out, "--models", "resnet50,resnet18", "--stress-seconds", "30")
    doc = json.loads((out / "results.json").read_text())
    checks = dict((c["name"], c) for c in doc["checks"])
    for name in ("matmul", "bandwidth", "memory"):
        assert checks[name]["status"] in ("pass", "skip"), (name, checks[name]["reason"])
    for g in checks["matmul"]["figures"]["per_gpu"]:
        for mode in ("fp32", "tf32", "bf16"):
            assert g[mode + "_check_error"] < 1.0  # the timed product verified
    assert (out / "validate.log").exists() and (out / "bench_torch.log").exists()
    assert proc.returncode in (0, 1)
