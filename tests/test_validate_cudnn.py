"""The cuDNN sample for real: found, compiled against the nvidia-cudnn wheel
and the CUDA toolkit, run.  Without a GPU its run must fail with the CUDA/cuDNN
error text; with one it must match the CPU reference.

Needs: g++, the CUDA toolkit (cuda_runtime.h + libcudart, /usr/local/cuda) and
`pip install nvidia-cudnn-cu13` (or a system cuDNN)."""

import argparse
import json
import os
import shutil
import subprocess
import sys

import pytest

from validate import softmax_sample
from validate.checks import cudnn
from validate.core import CheckFailed, Context, Result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _have_toolchain():
    try:
        cudnn.find_cudnn()
        cudnn.find_cuda()
        cudnn.find_compiler()
    except CheckFailed as exc:
        return str(exc)
    return None


MISSING = _have_toolchain()
pytestmark = pytest.mark.skipif(MISSING is not None, reason="toolchain missing: %s" % MISSING)


def _gpu_present():
    return shutil.which("nvidia-smi") is not None and os.path.exists("/dev/nvidia0")


def _ctx(tmp_path):
    opts = argparse.Namespace(device="auto", expect_gpus=None, iters=1, warmup=0, batch=[1], amp=False)
    return Context(opts, str(tmp_path), stream=open(os.devnull, "w"))


def test_compile_and_run_through_the_cli(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "validate", "--out", str(out),
                           "--checks", "cudnn_compile,cudnn_sample"],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=600)
    assert "Traceback" not in proc.stderr
    doc = json.loads((out / "results.json").read_text())
    checks = dict((c["name"], c) for c in doc["checks"])
    comp, sample = checks["cudnn_compile"], checks["cudnn_sample"]
    assert comp["status"] == "pass", comp["reason"]
    found = cudnn.find_cudnn()
    assert comp["figures"]["cudnn"]["version"] == found["version"]["version"]
    assert comp["figures"]["cudnn"]["encoded"] == found["version"]["encoded"]
    assert comp["figures"]["compiler"]["kind"] in ("g++", "c++", "clang++", "nvcc")
    if found["origin"].startswith("wheel"):
        # the wheel ships only the soname: linked as -l:libcudnn.so.N with an rpath
        assert comp["figures"]["cudnn"]["link"].startswith("-l:libcudnn.so.")
    binary = out / "cudnn_softmax"
    assert binary.exists() and "cudnn_softmax" in comp["artefacts"]
    assert (out / "cudnn_compile.log").read_text().startswith("$ ")
    # the program runs without LD_LIBRARY_PATH: rpath finds cuDNN and cudart
    ldd = subprocess.run(["ldd", str(binary)], stdout=subprocess.PIPE, universal_newlines=True).stdout
    assert "libcudnn.so" in ldd and "not found" not in ldd

    fig = sample["figures"]
    assert fig["cudnn_header"] == found["version"]["encoded"]
    assert abs(fig["input_sum"] - sum(softmax_sample.sample_input())) < 1e-6
    assert "cudnn_sample.txt" in sample["artefacts"]
    if _gpu_present():
        assert sample["status"] == "pass", sample["reason"]
        assert abs(fig["sum"] - 1.0) < 1e-5
        assert [p for p, _ in fig["gpu_top5"]] == [754, 814, 961, 938, 717]
        assert proc.returncode == 0
    else:
        assert sample["status"] == "fail"
        assert any(s in sample["reason"] for s in (
            "cudaErrorInsufficientDriver", "CUDNN_STATUS_NOT_INITIALIZED", "cudaErrorNoDevice"))
        assert fig["exit_code"] not in (0, None)
        assert fig["errors"] and fig["errors"][0]["api"] in ("cuda", "cudnn")
        assert proc.returncode == 1
        assert doc["ok"] is False


def test_sample_alone_builds_it_itself(tmp_path):
    ctx = _ctx(tmp_path)
    res = Result("cudnn_sample", True)
    try:
        cudnn.run_sample(ctx, res)
    except CheckFailed as exc:
        res.problem(str(exc))
    assert (tmp_path / "cudnn_softmax").exists()
    assert res.figures["input_sum"] is not None
    if not _gpu_present():
        assert res.problems and "cuda" in res.problems[0].lower()


def test_cudnn_home_overrides_the_search(tmp_path, monkeypatch):
    found = cudnn.find_cudnn()
    root = os.path.dirname(found["include"])
    monkeypatch.setenv("CUDNN_HOME", root)
    again = cudnn.find_cudnn()
    if os.path.isdir(os.path.join(root, "lib")) or os.path.isdir(os.path.join(root, "lib64")):
        assert again["origin"] == "$CUDNN_HOME"
    assert again["version"] == found["version"]


def test_compile_error_is_reported_with_the_compiler_message(tmp_path, monkeypatch):
    broken = tmp_path / "broken.cpp"
    broken.write_text("int main() { this is not C++; }\n")
    monkeypatch.setattr(cudnn, "SOURCE_NAME", str(broken))  # an absolute name: that file
    ctx = _ctx(tmp_path)
    res = Result("cudnn_compile", True)
    with pytest.raises(CheckFailed) as info:
        cudnn.run_compile(ctx, res)
    assert "compilation failed" in str(info.value)
    assert "error" in (tmp_path / "cudnn_compile.log").read_text()
    assert ctx.shared["cudnn_binary"] is None
    res2 = Result("cudnn_sample", True)
    with pytest.raises(CheckFailed) as info:
        cudnn.run_sample(ctx, res2)
    assert "cudnn_compile failed" in str(info.value)
