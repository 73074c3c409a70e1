"""`python3 -m validate` end to end, for real, as it runs on an instance: the
validate/ folder copied on its own into a scratch folder (what the tarball
holds) and run from there with a subprocess.

On this (GPU-less) machine the CUDA checks must fail with their reasons and
the run must come out "not validated" (exit 1), while the CPU benchmarks still
run.  A bare python3 (a venv without torch) must give a clean report.  Tiny
model lists and few iterations keep it quick; no timing is asserted."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from validate import output
from validate.core import CHECK_NAMES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["resnet18", "mobilenet_v3_small"]
RESULT_KEYS = {"schema", "tool", "version", "started", "elapsed_s", "ok", "action", "deferred_action", "options",
               "host", "checks", "no_reference", "waivers"}
HOST_KEYS = {"hostname", "os", "kernel", "arch", "python", "cpu", "cpus", "memory_gib", "gpu_name",
             "gpu_count", "driver", "torch", "torchvision", "cuda", "device"}
CHECK_KEYS = {"name", "status", "required", "reason", "elapsed_s", "figures", "artefacts", "action", "findings",
              "deferred_action", "waivers"}
GPU_PRESENT = shutil.which("nvidia-smi") is not None and os.path.exists("/dev/nvidia0")
no_gpu_only = pytest.mark.skipif(GPU_PRESENT, reason="asserts the behaviour without a GPU")
# host_clock applies where a time daemon can be asked (validate/checks/host_clock.py)
CLOCK_APPLIES = bool(shutil.which("chronyc") or (shutil.which("timedatectl") and os.path.isdir("/run/systemd/system")))


def ship(dest):
    """Copy validate/ alone, as the tarball carries it."""
    pkg = dest / "payload"
    shutil.copytree(os.path.join(ROOT, "validate"), str(pkg / "validate"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return pkg


def run_validate(python, cwd, args, env=None, timeout=900):
    full_env = dict(os.environ)
    full_env.pop("PYTHONPATH", None)
    if env:
        full_env.update(env)
    return subprocess.run([python, "-m", "validate"] + args, cwd=str(cwd), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout, env=full_env)


def load(out):
    with open(os.path.join(str(out), "results.json")) as f:
        return json.load(f)


def by_name(doc):
    return dict((c["name"], c) for c in doc["checks"])


def assert_schema(doc):
    assert set(doc) == RESULT_KEYS
    assert doc["schema"] == 2 and doc["tool"] == "gpuprov-validate"
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", doc["started"])
    assert isinstance(doc["elapsed_s"], float) and isinstance(doc["ok"], bool)
    assert set(doc["host"]) == HOST_KEYS
    assert doc["host"]["device"] in ("cuda", "cpu")
    assert isinstance(doc["host"]["cpus"], int) and isinstance(doc["host"]["gpu_count"], int)
    assert [c["name"] for c in doc["checks"]] == CHECK_NAMES
    for c in doc["checks"]:
        assert CHECK_KEYS <= set(c)
        assert c["status"] in ("pass", "fail", "skip")
        assert isinstance(c["required"], bool) and isinstance(c["elapsed_s"], float)
        assert (c["reason"] == "") == (c["status"] == "pass"), c
        assert isinstance(c["figures"], dict) and isinstance(c["artefacts"], list)


# --------------------------------------------------------------------------
# the whole suite, default (auto) device


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("full")
    pkg = ship(base)
    out = base / "out"
    proc = run_validate(sys.executable, pkg, ["--out", str(out), "--models", ",".join(MODELS),
                                              "--iters", "2", "--warmup", "1", "--batch", "1,2"])
    return proc, out


def test_full_run_schema_and_files(full_run):
    proc, out = full_run
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    doc = load(out)
    assert_schema(doc)
    assert doc["options"]["model_list"] == MODELS
    assert doc["options"]["iters"] == 2 and doc["options"]["batch"] == [1, 2]
    assert proc.returncode == (0 if doc["ok"] else 1)
    for c in doc["checks"]:
        for a in c["artefacts"]:
            assert (out / a).exists(), a
    # progress lines are prefixed with the check name
    for name in CHECK_NAMES:
        assert "[%s] start:" % name in proc.stderr
    # validate.log: verdict, one table line per check, details
    log = (out / "validate.log").read_text()
    assert log.splitlines()[0].startswith("gpuprov-validate ")
    for c in doc["checks"]:
        req = "yes" if c["required"] else ("waived" if c["waived"] else "no ")
        assert re.search(r"^%s\s+%s\s+%s " % (c["name"], c["status"].upper(), req), log, re.M), c["name"]


def test_full_run_bench_figures_and_log(full_run):
    proc, out = full_run
    doc = load(out)
    bench = by_name(doc)["bench"]
    fig = bench["figures"]
    assert fig["device"] == doc["host"]["device"]
    assert sorted(fig["models"]) == sorted(MODELS)
    for m in MODELS:
        rec = fig["models"][m]
        assert "error" not in rec, rec
        lat = rec["latency_ms"]
        assert set(["median", "p10", "p90", "iqr_rel", "iters"]) <= set(lat)
        assert lat["iters"] == 2 and lat["p10"] <= lat["median"] <= lat["p90"]
        thr = rec["throughput_ips"]
        assert thr["batch"] == 2 and thr["fp32"] > 0
        if fig["device"] == "cpu":
            assert thr["amp"] is None  # CPU AMP only with --amp
    assert fig["crosscheck"]["model"] == "resnet18"  # resnet50 not listed: the first model
    assert fig["crosscheck"]["torch_benchmark_median_ms"] > 0
    cols = output.parse_bench_log((out / "bench_torch.log").read_text())
    assert len(cols) == 1
    assert cols[0]["label"].startswith("PyTorch %s %s" % (doc["host"]["torch"], fig["device"]))
    assert list(cols[0]["models"]) == MODELS
    for m in MODELS:
        assert cols[0]["models"][m] == pytest.approx(fig["models"][m]["latency_ms"]["median"], abs=1e-6)


@no_gpu_only
def test_full_run_without_gpu_is_not_validated_with_reasons(full_run):
    proc, out = full_run
    doc = load(out)
    assert proc.returncode == 1 and doc["ok"] is False
    assert doc["host"]["device"] == "cpu" and doc["host"]["gpu_count"] == 0
    c = by_name(doc)
    required = dict((n, c[n]["required"]) for n in CHECK_NAMES)
    assert required == {"system": True, "cudnn_compile": True, "cudnn_sample": True, "torch_import": True,
                        "torch_cuda": True, "inference": True, "bench": True, "matmul": True,
                        "bandwidth": True, "stress": True, "memory": True, "xid": True,
                        "fabric": False,  # waived: no NVSwitch here
                        "node": False, "infiniband": False,  # waived: no profile, no HCA here
                        "p2p": True,
                        "nccl": True, "profile": False, "fusion": False, "precision": False,
                        "kernel": False,
                        # the host checks: only the fill of / applies without a profile's host section
                        "host_mounts": False, "host_fill": True, "host_scratch": False, "host_memory": False,
                        "host_cpu": False, "host_clock": CLOCK_APPLIES, "host_services": False,
                        "dcgm": False}  # waived: no DCGM here
    assert c["torch_import"]["status"] == "pass"
    assert c["torch_cuda"]["status"] == "fail"
    assert c["torch_cuda"]["reason"].startswith("CUDA not available: ")
    assert c["torch_cuda"]["figures"]["available"] is False
    assert c["system"]["status"] == "fail" and "nvidia-smi" in c["system"]["reason"]
    for name in ("bench", "matmul", "bandwidth", "stress", "memory", "nccl", "p2p", "profile", "fusion",
                 "precision"):
        assert c[name]["status"] == "fail", name
        assert "CUDA not available" in c[name]["reason"] and "CPU" in c[name]["reason"], name
    # ...but the CPU measurements are there
    assert c["matmul"]["figures"]["fp32_tflops"] > 0 and c["matmul"]["figures"]["spec"] == {}
    assert c["matmul"]["figures"]["tf32_tflops"] is None
    assert c["bandwidth"]["figures"]["d2d_gbs"] > 0 and c["bandwidth"]["figures"]["h2d_gbs"] is None
    # the new checks ran their CPU stand-ins: stress loop, memory patterns, gloo all-reduce
    assert c["stress"]["figures"]["per_gpu"][0]["mismatches"] == 0
    assert c["memory"]["figures"]["per_gpu"][0]["bytes_tested"] > 0
    assert c["nccl"]["figures"]["backend"] == "gloo" and c["nccl"]["figures"]["wrong_elements"] == 0
    assert c["xid"]["status"] in ("pass", "skip")  # this VM may not let us read its kernel log
    assert c["inference"]["status"] == "fail" and "agreement not checked" in c["inference"]["reason"]
    prof = c["profile"]["figures"]
    assert prof["devices"] == ["cpu"]
    for tag in ("resnet20_cifar10", "resnet50"):
        assert prof[tag]["cpu"]["layers"] > 10
        assert (out / prof[tag]["cpu"]["trace"]).exists()
        assert json.loads((out / prof[tag]["cpu"]["trace"]).read_text())["traceEvents"]
    assert prof["resnet20_cifar10"]["params_m"] == pytest.approx(0.27, abs=0.01)
    fus = c["fusion"]["figures"]
    assert fus["softmax"]["naive"]["allclose"] and fus["daxpy"]["naive"]["allclose"]
    assert "skipped" in fus["softmax"]["compiled"]
    pre = c["precision"]["figures"]
    assert pre["int8_qdq"]["max_abs_error"] <= pre["int8_qdq"]["error_bound"]
    assert c["kernel"]["status"] in ("skip", "fail")
    log = (out / "validate.log").read_text()
    assert "NOT VALIDATED" in log.splitlines()[0]
    assert "required checks not passed:" in log


# --------------------------------------------------------------------------
# --device cpu --quick: a CPU-only validation can pass


def test_cpu_quick_run_passes_on_cpu(tmp_path):
    pkg = ship(tmp_path)
    out = tmp_path / "out"
    proc = run_validate(sys.executable, pkg, ["--out", str(out), "--device", "cpu", "--quick",
                                              "--models", "resnet18", "--iters", "2", "--warmup", "0",
                                              "--batch", "1"])
    assert "Traceback" not in proc.stderr
    doc = load(out)
    assert_schema(doc)
    c = by_name(doc)
    quick = ["system", "node", "cudnn_compile", "cudnn_sample", "torch_import", "torch_cuda", "bench", "stress",
             "xid", "fabric", "infiniband", "host_mounts", "host_fill", "host_memory", "host_cpu", "host_clock",
             "host_services"]
    for name in CHECK_NAMES:
        if name not in quick:
            assert c[name]["status"] == "skip" and c[name]["reason"] == "not part of --quick"
            assert c[name]["required"] is False
    counted = ["system", "torch_import", "bench", "host_fill"] + (["host_clock"] if CLOCK_APPLIES else [])
    assert [n for n in CHECK_NAMES if c[n]["required"]] == counted
    for n in counted:
        assert c[n]["status"] == "pass", (n, c[n]["reason"])
    assert c["bench"]["figures"]["device"] == "cpu"
    assert c["bench"]["figures"]["models"]["resnet18"]["throughput_ips"]["batch"] == 1
    assert doc["ok"] is True and proc.returncode == 0
    assert (out / "validate.log").read_text().startswith("gpuprov-validate 0.1.0: VALIDATED (exit 0)")


# --------------------------------------------------------------------------
# a bare python3


def _bare_python():
    for cand in ("/root/.pyenv/versions/3.8.18/bin/python3", shutil.which("python3.8")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return sys.executable


def test_bare_python_without_torch_gives_a_clean_report(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([_bare_python(), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    probe = subprocess.run([py, "-c", "import torch"], stderr=subprocess.PIPE)
    assert probe.returncode != 0  # really bare
    pkg = ship(tmp_path)
    out = tmp_path / "out"
    proc = run_validate(py, pkg, ["--out", str(out), "--quick"])
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    doc = load(out)
    assert_schema(doc)
    c = by_name(doc)
    for name in ("torch_import", "torch_cuda", "bench"):
        assert c[name]["status"] == "fail"
        assert c[name]["reason"].startswith("torch not installed"), c[name]["reason"]
    assert doc["host"]["torch"] is None and doc["host"]["torchvision"] is None
    log = (out / "validate.log").read_text()
    assert "Traceback" not in log and "NOT VALIDATED" in log
    # a bench without torch writes no bench log
    assert not (out / "bench_torch.log").exists()


# --------------------------------------------------------------------------
# a selection with no torch check never imports torch


def test_a_selection_without_torch_checks_never_imports_torch(tmp_path):
    """`--checks xid` (a Slurm prolog's health check) on a node whose torch is broken: a
    torch whose import kills the interpreter, as a torch built against missing CUDA
    libraries can (a real package on PYTHONPATH ahead of the installed one; nothing
    validate/ calls is replaced). The run never imports it, passes, and records torch as
    not examined (null) rather than a version or "cpu"."""
    broken = tmp_path / "broken" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("import os\nos.abort()  # a broken install\n")
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("[    1.000000] Linux version 6.1.0 (gcc)\n")
    pkg = ship(tmp_path)
    env = {"PYTHONPATH": str(broken.parent)}
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=dict(os.environ, **env),
                           stderr=subprocess.PIPE, timeout=60)
    assert probe.returncode < 0  # really broken: the interpreter dies on `import torch`
    out = tmp_path / "out"
    proc = run_validate(sys.executable, pkg, ["--out", str(out), "--quick", "--checks", "xid",
                                              "--kernel-log", str(kernel_log)], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = load(out)
    assert by_name(doc)["xid"]["status"] == "pass"
    assert {k: doc["host"][k] for k in ("torch", "torchvision", "cuda", "device")} == \
        {"torch": None, "torchvision": None, "cuda": None, "device": None}
    # options only torch checks use stay unset: nothing ran with them
    assert [doc["options"][k] for k in ("warmup", "iters", "batch", "stress_seconds")] == [None] * 4
    assert "torch -, torchvision -, CUDA (torch build) -" in (out / "validate.log").read_text()


def test_the_gpu_count_is_null_unless_a_check_counted_the_gpus(tmp_path):
    """`--checks xid` asks nvidia-smi nothing for the record (the system check does): the
    record said `gpu_count: 0`, "no GPUs" on a node it never counted; now null (not examined),
    as torch's fields are, and the log says "GPUs -". With the system check the count is what
    nvidia-smi said (0 here, with no nvidia-smi: counted, none)."""
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("[    1.000000] Linux version 6.1.0 (gcc)\n")
    pkg = ship(tmp_path)
    found = {}
    for checks in ("xid", "system,xid"):
        out = tmp_path / checks
        proc = run_validate(sys.executable, pkg, ["--out", str(out), "--checks", checks,
                                                  "--kernel-log", str(kernel_log)], timeout=120)
        assert proc.returncode in (0, 1), proc.stderr
        doc = load(out)
        found[checks] = {k: doc["host"][k] for k in ("gpu_count", "gpu_name", "driver")}
        if checks == "xid":
            assert "driver -, GPUs -, device" in (out / "validate.log").read_text()
    assert found["xid"] == {"gpu_count": None, "gpu_name": None, "driver": None}
    smi = shutil.which("nvidia-smi")
    counted = found["system,xid"]["gpu_count"]
    assert isinstance(counted, int) and (smi is not None or counted == 0), found


# --------------------------------------------------------------------------
# bad command lines: exit 2, one line, nothing written


@pytest.mark.parametrize("args,fragment", [
    ([], "--out"),
    (["--iters", "0"], "--iters"),
    (["--warmup", "-1"], "--warmup"),
    (["--checks", "system,nosuch"], "unknown check 'nosuch'"),
    (["--skip", ""], "--skip"),
    (["--batch", "1,x"], "--batch"),
    (["--batch", "0"], "--batch"),
    (["--device", "tpu"], "--device"),
    (["--models", "resnet18,not_a_model"], "not_a_model"),
    (["--models", "res-net"], "res-net"),
    (["--weights", "/nonexistent/weights"], "--weights"),
    (["--image", "/nonexistent.jpg"], "--image"),
    (["--floor", "2"], "--floor"),
    (["--iters", "many"], "--iters"),
])
def test_bad_command_line(tmp_path, args, fragment):
    out = tmp_path / "out"
    full = (["--out", str(out)] if args and args != [] else []) + args
    proc = run_validate(sys.executable, ROOT, full, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("validate: error: ") and fragment in lines[0]
    assert not (out / "results.json").exists()


def test_out_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    proc = run_validate(sys.executable, ROOT, ["--out", str(f), "--checks", "system"], timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("validate: error: --out")


# --------------------------------------------------------------------------
# inference with weights from a folder (offline)


def test_inference_with_weights_dir_and_without(tmp_path):
    import torch
    import torchvision

    weights = tmp_path / "weights"
    weights.mkdir()
    torch.manual_seed(0)
    # torchvision's file name for IMAGENET1K_V2; random values (no download here)
    torch.save(torchvision.models.resnet50(weights=None).state_dict(), str(weights / "resnet50-11ad3fa6.pth"))
    empty_hub = tmp_path / "torch_home"
    env = {"TORCH_HOME": str(empty_hub)}
    out = tmp_path / "out"
    proc = run_validate(sys.executable, ROOT, ["--out", str(out), "--checks", "inference", "--device", "cpu",
                                               "--weights", str(weights), "--iters", "1"], env=env)
    doc = load(out)
    inf = by_name(doc)["inference"]
    assert inf["required"] is True  # named in --checks
    assert inf["status"] == "pass", inf["reason"]
    cls = inf["figures"]["classification"]
    assert cls["status"] == "done" and cls["weights_tag"] == "IMAGENET1K_V2"
    cats = torchvision.models.ResNet50_Weights.IMAGENET1K_V2.meta["categories"]
    assert len(cls["top5"]) == 5
    for t in cls["top5"]:
        assert cats[t["index"]] == t["class"]
    assert sum(t["prob"] for t in cls["top5"]) <= 1.0 + 1e-6
    top5_text = (out / "inference_top5.txt").read_text()
    assert cls["top5"][0]["class"] in top5_text and "grace_hopper.jpg" in top5_text
    assert proc.returncode == 0

    out2 = tmp_path / "out2"
    proc = run_validate(sys.executable, ROOT, ["--out", str(out2), "--checks", "inference", "--device", "cpu"],
                        env=env)
    inf = by_name(load(out2))["inference"]
    assert inf["status"] == "skip"
    assert "no ResNet50 weights" in inf["reason"] and "--weights" in inf["reason"]
    assert proc.returncode == 1  # a skipped required check is not a pass


# --------------------------------------------------------------------------
# a run stopped from outside (dropped SSH session, timeout) still reports


def test_sigterm_writes_what_was_done(tmp_path):
    import signal

    out = tmp_path / "out"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen([sys.executable, "-m", "validate", "--out", str(out), "--device", "cpu",
                             "--checks", "system,bench,matmul", "--models", "seed", "--iters", "50"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                            env=env)
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("[bench] 1/31 alexnet"):
                proc.send_signal(signal.SIGTERM)
                break
        rest = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, "".join(seen) + rest
    assert "Traceback" not in rest
    doc = load(out)
    c = by_name(doc)
    assert c["system"]["status"] == "pass"
    assert c["bench"]["status"] == "fail" and c["bench"]["reason"] == "interrupted"
    assert c["matmul"]["status"] == "skip" and c["matmul"]["reason"] == "not run: interrupted"
    assert doc["ok"] is False
    assert "NOT VALIDATED" in (out / "validate.log").read_text()


def test_the_package_parses_as_python_3_8():
    """validate/ runs on the host's python, 3.8 or newer: its syntax must be 3.8's (the
    grammar check of ast.parse(feature_version=(3, 8)); a real 3.8 run is in the README)."""
    import ast
    import glob

    files = glob.glob(os.path.join(ROOT, "validate", "**", "*.py"), recursive=True)
    assert len(files) > 20
    for path in files:
        ast.parse(open(path).read(), path, feature_version=(3, 8))
    with pytest.raises(SyntaxError):  # the check does reject newer syntax
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=(3, 8))
