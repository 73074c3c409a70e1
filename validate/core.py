"""Check registry, results, and the context every check receives.

Required checks ("required" in results.json) decide the exit status:

=============  ======================  ==============
check          --device auto / cuda    --device cpu
=============  ======================  ==============
system         required                required
node           required                optional
cudnn_compile  required                optional
cudnn_sample   required                optional
torch_import   required                required
torch_cuda     required                optional
inference      required                optional
bench          required                required
matmul         required                optional
bandwidth      required                optional
stress         required                optional
memory         required                optional
xid            required                optional
fabric         required                optional
p2p            required                optional
nccl           required                optional
infiniband     required                optional
profile        optional                optional
fusion         optional                optional
precision      optional                optional
kernel         optional                optional
host_*         required                required
=============  ======================  ==============

The tool validates GPU instances, so in the default ``auto`` mode every check
that needs the GPU is required and a machine without one comes out "not
validated".  ``--device cpu`` asks for a CPU-only validation: GPU checks still
run and report the truth (they fail without a GPU) but do not count.  A check
that is not selected (``--checks``/``--skip``/``--quick``) is recorded as
``skip`` with ``required: false``; a selected required check that skips or
fails makes the run "not validated" (exit 1).

Two things a check may say besides pass/fail/skip:

* a **warning** (``Result.warn``): something measured but not judged (a GPU
  nobody published a reference for) or a part that could not be checked.
  Warnings are listed per check in results.json and on top of validate.log;
  they never turn a failure into a pass.
* a **waiver** (``Result.waive``): the check cannot apply to this machine for
  a reason that is not the machine's fault (``p2p``/``nccl`` on one GPU; ``xid``
  when the user running validate may not read the kernel log).  The check is
  recorded as ``skip`` with ``required: false`` and ``waived: <reason>`` (and,
  for an unchecked part, a warning), so the run can still be validated and
  says what it did not check.  A check named in ``--checks`` that could not
  check a part (``xid`` with an unreadable log) is not waived: the user asked
  for it, so its skip is "not validated".  One that cannot apply here (``p2p``
  on one GPU or under ``--device cpu``, ``fabric`` without NVSwitch, ``node``
  without a profile) is n/a even when named: waived with its reason, never a
  failure nor a pass.  Whether a check applies is the check's own call: one
  that has something to run under ``--device cpu`` (``torch_cuda`` reports
  CUDA's state, ``inference`` classifies on the CPU) runs and counts when named.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
import traceback
import warnings

from . import actions, torchenv

PASS = "pass"
FAIL = "fail"
SKIP = "skip"


class CheckFailed(Exception):
    """Raise inside a check to end it as failed with this reason."""


class CheckSkipped(Exception):
    """Raise inside a check to end it as skipped with this reason."""


class Spec(object):
    def __init__(self, name, target, requirement, quick, about, torch=True):
        self.name = name
        self.target = target  # "module:function" under validate.checks
        self.requirement = requirement  # "always" | "gpu" | "never"
        self.quick = quick
        self.about = about
        # the check imports torch (validate/torchenv.py); a run whose checks all say False never
        # does: a Slurm prolog's `--checks xid` costs no torch import, and a broken torch cannot stop it
        self.torch = torch

    def required(self, device_mode):
        if self.requirement == "always":
            return True
        if self.requirement == "gpu":
            return device_mode != "cpu"
        return False


CHECKS = [
    Spec("system", "system:run", "always", True,
         "OS, CPU, memory, nvidia-smi (driver, GPUs, ECC, remapped rows, PCIe, clocks, throttling), nvcc",
         torch=False),
    Spec("node", "node:run", "gpu", True,
         "the node against its inventory profile (--profile): GPU count and model, PCIe generation and width",
         torch=False),
    Spec("cudnn_compile", "cudnn:run_compile", "gpu", True,
         "find cuDNN and the CUDA toolkit, build the C++ softmax sample",
         torch=False),
    Spec("cudnn_sample", "cudnn:run_sample", "gpu", True,
         "run the sample; softmax sums to 1 and top-5 equals the CPU reference",
         torch=False),
    Spec("torch_import", "torch_checks:run_import", "always", True,
         "torch/torchvision import, versions, build CUDA, TF32 flags"),
    Spec("torch_cuda", "torch_checks:run_cuda", "gpu", True,
         "CUDA available, device count/names/capability/memory, cuDNN, an op on every GPU vs CPU"),
    Spec("inference", "inference:run", "gpu", False,
         "ResNet50 top-5 with class names (weights from --weights or hub cache); GPU vs CPU agreement"),
    Spec("bench", "bench:run", "always", True,
         "torchvision models: batch-1 latency, batch-N throughput fp32/AMP; bench_torch.log"),
    Spec("matmul", "gpu_health:run_matmul", "gpu", False,
         "fp32/TF32/bf16 matmul TFLOPS vs the GPU's spec"),
    Spec("bandwidth", "gpu_health:run_bandwidth", "gpu", False,
         "device-to-device, host-to-device, device-to-host copy GB/s vs spec"),
    Spec("stress", "stress:run", "gpu", True,
         "GEMMs on every GPU at once, every result checked; clocks, power, temperature, throttling"),
    Spec("memory", "memory:run", "gpu", False,
         "write/verify patterns over most of each GPU's free memory"),
    Spec("xid", "xid:run", "gpu", True,
         "NVIDIA Xid errors in the kernel log since boot (journalctl -k, dmesg or --kernel-log)",
         torch=False),
    Spec("fabric", "fabric:run", "gpu", True,
         "NVSwitch boards: Fabric Manager running, every GPU in the NVLink fabric",
         torch=False),
    Spec("p2p", "multigpu:run_p2p", "gpu", False,
         "GPU-to-GPU copy bandwidth matrix vs the topology (nvidia-smi topo -m)"),
    Spec("nccl", "multigpu:run_nccl", "gpu", False,
         "all-reduce bus bandwidth over all GPUs (torch.distributed, one process per GPU)"),
    Spec("infiniband", "ib:run", "gpu", True,
         "InfiniBand/RoCE ports (sysfs): state, rate, link layer vs the profile; error counters grown during the run",
         torch=False),
    Spec("profile", "profiling:run", "never", False,
         "layer-wise time of ResNet20 (CIFAR-10) and ResNet50, CPU vs GPU; top ops; chrome traces"),
    Spec("fusion", "fusion:run", "never", False,
         "naive vs scripted/compiled softmax and daxpy (torch.utils.benchmark), allclose"),
    Spec("precision", "precision:run", "never", False,
         "fp32 vs AMP vs int8 quantize/dequantize: error and speed"),
    Spec("kernel", "kernel:run", "never", False,
         "custom element-wise CUDA kernel (Numba or CuPy) vs NumPy"),
    # the host around the GPU (issue 45; floors and sources: validate/checks/host_floors.py)
    Spec("host_mounts", "host_mounts:run", "always", True,
         "the profile's mounts (host.mounts) are mounted and take a write; read-only: remount or repair",
         torch=False),
    Spec("host_fill", "host_fill:run", "always", True,
         "/, scratch and host.fill_paths below the fill threshold (default 90 %, Verda)",
         torch=False),
    Spec("host_scratch", "host_scratch:run", "always", False,
         "fio sequential write and read on host.scratch (bounded in size and time) vs its floors",
         torch=False),
    Spec("host_memory", "host_memory:run", "always", True,
         "MemTotal vs host.memory_gib; EDAC corrected / uncorrected memory errors since boot",
         torch=False),
    Spec("host_cpu", "host_cpu:run", "always", True,
         "online CPUs vs host.cpus; every CPU's cpufreq governor vs host.governor",
         torch=False),
    Spec("host_clock", "host_clock:run", "always", True,
         "the clock synchronised (chronyc tracking, or timedatectl for systemd-timesyncd)",
         torch=False),
    Spec("host_services", "host_services:run", "always", True,
         "the profile's services (host.services) running (systemctl is-active, else a process)",
         torch=False),
    Spec("dcgm", "dcgm:run", "gpu", False,
         "NVIDIA DCGM's diagnostic (dcgmi diag -r LEVEL -j, level 1 unless asked): every test per GPU, with its action",
         torch=False),
]
CHECK_NAMES = [s.name for s in CHECKS]
SPECS = dict((s.name, s) for s in CHECKS)


class Result(object):
    def __init__(self, name, required):
        self.name = name
        self.required = required
        self.status = None
        self.reason = ""
        self.elapsed_s = 0.0
        self.figures = {}
        self.artefacts = []
        self.summary = ""
        self.details = []
        self.problems = []
        self.warnings = []
        self.python_warnings = []
        self.skip_reason = None
        self.waived = None
        self.unchecked = False
        self.findings = []
        self.waivers = []

    # used by checks
    def problem(self, message, action=None):
        """Record a reason to fail; the check carries on collecting figures.
        ``action``: the operator's action (validate/actions.py), shown in the
        reason and kept in results.json ``findings``."""
        if action is not None:
            self.findings.append({"what": message, "action": action, "fails": True})
            message = "%s [action: %s]" % (message, action)
        self.problems.append(message)

    def notice(self, message, action):
        """A health finding that does not fail the check (action none or
        restart the job): a detail line and a ``findings`` entry."""
        self.findings.append({"what": message, "action": action, "fails": False})
        self.note("%s [action: %s]" % (message, action))

    def action(self):
        """The most disruptive action among the findings that fail the check."""
        return actions.worst(f["action"] for f in self.findings if f["fails"])

    def deferred_action(self):
        """The action a finding that does not fail still needs (a pending row remap: reset the
        GPU), or None."""
        return actions.deferred(self.findings)

    def note(self, line):
        """A line for the details section of validate.log."""
        self.details.append(line)

    def skip(self, reason):
        """End as skipped (unless a problem was recorded) with this reason."""
        self.skip_reason = reason

    def warn(self, message):
        """A warning: measured but not judged, or a part not checked."""
        if message not in self.warnings:
            self.warnings.append(message)
        self.note("warning: " + message)

    def waive(self, reason, warning=True):
        """End as skipped and not required (unless a problem was recorded): it does not
        apply to this machine.  ``warning``: the skip leaves something unchecked (say so
        on top), and a check named in --checks that could not check it stays required;
        without, the check cannot apply here (p2p on one GPU) and is n/a even when named."""
        self.skip_reason = reason
        self.waived = reason
        self.unchecked = warning
        if warning:
            self.warn(reason)

    def to_json(self):
        return {
            "name": self.name,
            "status": self.status,
            "required": self.required,
            "reason": self.reason,
            "elapsed_s": round(self.elapsed_s, 3),
            "summary": self.summary,
            "figures": self.figures,
            "artefacts": list(self.artefacts),
            "warnings": list(self.warnings),
            "waived": self.waived if self.status == SKIP and not self.required else None,
            "action": self.action(),
            "deferred_action": self.deferred_action(),
            "findings": list(self.findings),
            "waivers": list(self.waivers),
        }


class Context(object):
    """What a check gets besides its Result: options, output folder, progress,
    the device to use, and a place to share state between checks."""

    def __init__(self, opts, out_dir, stream=None):
        self.opts = opts
        self.out_dir = out_dir
        self.device_mode = opts.device
        self.shared = {}
        self.stream = stream if stream is not None else sys.stderr
        self.current = None
        self.device_used = None
        # the node profile (validate/profile.py), or None
        self.profile = getattr(opts, "profile_doc", None)

    # progress -----------------------------------------------------------
    def progress(self, message, check=None):
        """One flushed line on stderr, prefixed with the check name (the
        control side streams these over SSH)."""
        name = check or (self.current.name if self.current else "validate")
        try:
            self.stream.write("[%s] %s\n" % (name, message))
            self.stream.flush()
        except (OSError, ValueError):
            pass

    # files --------------------------------------------------------------
    def artefact(self, res, filename):
        """Absolute path for an artefact file, recorded (relative) on ``res``."""
        if filename not in res.artefacts:
            res.artefacts.append(filename)
        return os.path.join(self.out_dir, filename)

    # torch and the device -------------------------------------------------
    def torch(self):
        try:
            return torchenv.torch()
        except torchenv.Missing as exc:
            raise CheckFailed(str(exc)) from None

    def torchvision(self):
        try:
            return torchenv.torchvision()
        except torchenv.Missing as exc:
            raise CheckFailed(str(exc)) from None

    def device(self, res):
        """The torch device this check runs on, per --device.

        auto: "cuda" when available, else "cpu" plus a recorded problem, so the
        check still measures the CPU but cannot pass; cuda: "cuda" or fail now;
        cpu: "cpu".
        """
        self.torch()
        if self.device_mode == "cpu":
            self.device_used = self.device_used or "cpu"
            return "cpu"
        state = torchenv.cuda_state()
        if state["available"]:
            self.device_used = "cuda"
            return "cuda"
        if self.device_mode == "cuda":
            raise CheckFailed("CUDA requested (--device cuda) but not available: %s" % state["reason"])
        res.problem("CUDA not available (%s): measured on the CPU instead" % state["reason"])
        res.figures["gpu_missing"] = state["reason"]
        self.device_used = self.device_used or "cpu"
        return "cpu"

    def gpu_unavailable_reason(self):
        state = torchenv.cuda_state()
        return None if state["available"] else state["reason"]


def _resolve(target):
    module_name, func_name = target.split(":")
    module = importlib.import_module("validate.checks." + module_name)
    return getattr(module, func_name)


def run_check(ctx, spec, required, named=False):
    """Run one check in isolation; any exception becomes a failed result.
    ``named``: the check was named in --checks, so a waiver for a part it could not
    check does not release it (one that cannot apply here does: n/a, with its reason)."""
    res = Result(spec.name, required)
    ctx.current = res
    ctx.progress("start: %s" % spec.about)
    t0 = time.perf_counter()
    saved_showwarning = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        text = "%s: %s" % (category.__name__, str(message).strip().splitlines()[0] if str(message).strip() else "")
        if text not in res.python_warnings:
            res.python_warnings.append(text)
            res.note("python warning: " + text)
            ctx.progress("warning: " + text)

    warnings.showwarning = showwarning
    try:
        func = _resolve(spec.target)
        func(ctx, res)
    except CheckFailed as exc:
        res.problems.append(str(exc))
    except CheckSkipped as exc:
        res.skip_reason = str(exc)
    except torchenv.Missing as exc:
        res.problems.append(str(exc))
    except KeyboardInterrupt:
        res.problems.append("interrupted")
        res.elapsed_s = time.perf_counter() - t0
        _finish(res)
        ctx.current = None
        raise
    except Exception as exc:  # a bug or an unexpected environment: record, go on
        res.problems.append("internal error: %s: %s" % (type(exc).__name__, exc))
        for line in traceback.format_exc().rstrip().splitlines():
            res.note(line)
    finally:
        warnings.showwarning = saved_showwarning
    res.elapsed_s = time.perf_counter() - t0
    _finish(res)
    if res.status == SKIP and res.waived and not (named and res.unchecked):
        res.required = False
    ctx.current = None
    word = {PASS: "PASS", FAIL: "FAIL", SKIP: "SKIP"}[str(res.status)]
    ctx.progress("%s (%.1fs) %s" % (word, res.elapsed_s, res.reason or res.summary), check=spec.name)
    return res


def _finish(res):
    if res.problems:
        res.status = FAIL
        # keep order, drop duplicates
        seen = []
        for p in res.problems:
            if p not in seen:
                seen.append(p)
        res.reason = "; ".join(seen)
    elif res.skip_reason is not None:
        res.status = SKIP
        res.reason = res.skip_reason or "skipped"
    else:
        res.status = PASS
        res.reason = ""


def apply_warn_only(res, warn_only):
    """A required check the inventory lets only warn (``warn_only``) that failed:
    not required, and the waiver named on the check (results.json, validate.log)."""
    if res.name not in (warn_only or ()) or res.status != FAIL or not res.required:
        return
    res.required = False
    what = "warn_only (inventory): %s failed, reported as a warning: %s" % (res.name, res.reason)
    res.waivers.append({"waiver": "warn_only", "what": what})
    res.warn(what)


def not_selected(spec, why):
    res = Result(spec.name, False)
    res.status = SKIP
    res.reason = why
    return res
