"""``python3 -m validate --health``: the fast health subset for schedulers,
cron and prologs.  Standard library only; never imports torch, runs no
benchmark.

It runs three checks of the full suite, judged the same way: ``system``
(GPU count against ``--expect-gpus``, the driver answering, nvidia-smi
health: ECC, remapped rows, retired pages, throttling, PCIe link), ``xid``
(Xid and SXid lines since boot) and ``fabric`` (Fabric Manager on a board
with NVSwitches).  It prints one line on stdout and, with ``--out DIR``,
writes the same results.json as a full run (schema 2, ``options.health``
true).

Exit status: 0 healthy, 1 sick (a finding whose action the line names),
2 bad command line, 3 could not check (no NVIDIA driver and no
``--expect-gpus``, or a kernel log it may not read, and nothing sick).

``--slurm-drain``: when ``SLURMD_NODENAME`` is set (Slurm's
HealthCheckProgram and Prolog/Epilog run with it), drain that node with the
finding and its action as the reason when the verdict is sick or
could-not-check, and resume it when healthy again, by LBNL NHC's rule: a node
drained for a reason it did not set is left alone (validate/slurm_node.py).

A healthy node may still need an action that can wait for its GPUs to be idle
(a pending row remap: reset the GPU): its line says so, ``healthy [action: reset
the GPU, deferred]: ...``, exit 0, and results.json has it as
``deferred_action``.
"""

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time

from . import actions, host, output, profile, slurm_node
from .core import FAIL, SKIP, SPECS, Context, run_check

HEALTHY, SICK, UNCHECKED = 0, 1, 3
USAGE = 2
HEALTH_CHECKS = ("system", "xid", "fabric")
PREFIX = slurm_node.PREFIX
DRIVER_PROC = "/proc/driver/nvidia/version"
# how the checks word a finding that does not fail (system's notices, xid's): not repeated in the line
NOTE_WORDS = ("warning: ", "reported, not failed: ")

class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def build_parser():
    p = _Parser(prog="python3 -m validate --health",
                description="Fast GPU node health: GPU count, driver, nvidia-smi health, Xid/SXid since boot, "
                            "Fabric Manager. Exit 0 healthy, 1 sick, 3 could not check.")
    p.add_argument("--health", action="store_true", required=True)
    p.add_argument("--out", metavar="DIR", help="write results.json (and nvidia-smi artefacts) there")
    p.add_argument("--expect-gpus", type=int, metavar="N", dest="expect_gpus",
                   help="sick unless exactly N GPUs are visible (0: a node without GPUs is healthy)")
    p.add_argument("--kernel-log", metavar="PATH", dest="kernel_log",
                   help="kernel log to scan for Xid/SXid (default: journalctl -k -b, else dmesg)")
    p.add_argument("--profile", metavar="FILE|JSON",
                   help="the node's profile (validate/profile.py): its ignore_xids and acknowledged_before apply")
    p.add_argument("--slurm-drain", action="store_true", dest="slurm_drain",
                   help="under Slurm (SLURMD_NODENAME set), drain this node when sick or not checkable")
    return p


def parse_args(argv):
    opts = build_parser().parse_args(argv)
    if opts.expect_gpus is not None and opts.expect_gpus < 0:
        raise UsageError("--expect-gpus must be >= 0")
    if opts.kernel_log is not None and not os.path.isfile(opts.kernel_log):
        raise UsageError("--kernel-log %s: no such file" % opts.kernel_log)
    if opts.out is not None and os.path.exists(opts.out) and not os.path.isdir(opts.out):
        raise UsageError("--out %s: exists and is not a folder" % opts.out)
    opts.profile_doc = None
    if opts.profile is not None:
        try:
            opts.profile_doc = profile.load(opts.profile)
        except profile.BadProfile as exc:
            raise UsageError(str(exc)) from None
    opts.device = "auto"
    opts.checks = list(HEALTH_CHECKS)
    return opts


def driver_loaded(proc_version=DRIVER_PROC):
    """The kernel module's version line, or None when it is not loaded."""
    try:
        with open(proc_version) as f:
            return f.readline().strip() or None
    except OSError:
        return None


def _sick(findings):
    """(SICK, line, action) for failing findings: the first of the worst action names it."""
    act = actions.worst(f["action"] for f in findings)
    first = next(f for f in findings if f["action"] == act)
    return SICK, "sick: %s [action: %s]" % (first["what"], act), act


def verdict(results, opts, driver_line):
    """(exit code, one line without the prefix, action or None)."""
    by = dict((r.name, r) for r in results)
    system = by["system"]
    smi = (system.figures.get("nvidia_smi") or {}).get("path")
    if smi is None:
        # the kernel's own words outrank a missing tool: Xid 79 ("GPU has fallen off the
        # bus") in the log and no nvidia-smi is a sick node, not one that could not be checked
        kernel = [f for f in by["xid"].findings if f["fails"]] if by["xid"].status == FAIL else []
        if kernel:
            return _sick(kernel)
    no_driver = smi is None and driver_line is None
    if no_driver:
        if opts.expect_gpus == 0:
            return HEALTHY, "healthy: no NVIDIA GPU or driver, as --expect-gpus 0 says", None
        if opts.expect_gpus is None:
            return UNCHECKED, "could not check: no NVIDIA driver (nvidia-smi not found, %s absent)" % DRIVER_PROC, None
        return SICK, ("sick: no NVIDIA driver (nvidia-smi not found, %s absent), expected %d GPUs [action: %s]"
                      % (DRIVER_PROC, opts.expect_gpus, actions.REBOOT_NODE)), actions.REBOOT_NODE
    if smi is None:
        return UNCHECKED, "could not check: the driver is loaded (%s) but nvidia-smi is not found" % driver_line, None
    failed = [r for r in results if r.status == FAIL]
    if failed:
        findings = [f for r in failed for f in r.findings if f["fails"]]
        if findings:
            return _sick(findings)
        r = failed[0]
        return SICK, "sick: %s: %s" % (r.name, r.reason), None
    # a skip that leaves something unchecked (the kernel log not readable) has a
    # warning or stays required; "no NVSwitch on this board" has neither
    unchecked = [r for r in results if r.status == SKIP and (r.required or r.warnings)]
    if unchecked:
        r = unchecked[0]
        return UNCHECKED, "could not check: %s: %s" % (r.name, r.reason), None
    gpus = system.figures.get("gpus") or []
    names = sorted(set(g.get("name") or "?" for g in gpus))
    xid = by["xid"].figures
    fab = by["fabric"]
    summary = "%d GPU(s) %s, driver %s; %d Xid, %d SXid line(s) since boot%s" % (
        len(gpus), "/".join(names), gpus[0].get("driver_version") if gpus else "-",
        len(xid.get("events") or []), len(xid.get("sxids") or []),
        "; " + fab.summary if fab.status != SKIP else "")
    waived = [w["waiver"] for r in results for w in r.waivers]
    if waived:  # the inventory's waivers that made it healthy, named
        summary += "; waived: " + ", ".join(sorted(set(waived)))
    later = actions.deferred(f for r in results for f in r.findings)
    if later is None:
        return HEALTHY, "healthy: " + summary, None
    # passes, yet needs an action once its GPUs are idle (a pending row remap): named up front
    first = next(f for r in results for f in r.findings if not f["fails"] and f["action"] == later)
    what = first["what"]
    for note in NOTE_WORDS:
        if what.startswith(note):
            what = what[len(note):]
    return HEALTHY, "healthy [action: %s, deferred]: %s; %s" % (later, what, summary), later


def _host_document(results):
    doc = host.basic_facts()
    system = dict((r.name, r) for r in results)["system"]
    gpus = system.figures.get("gpus") or []
    doc.update({"gpu_name": gpus[0].get("name") if gpus else None, "gpu_count": len(gpus),
                "driver": gpus[0].get("driver_version") if gpus else None,
                "torch": None, "torchvision": None, "cuda": None, "device": "cuda" if gpus else None})
    return doc


def main(argv, stdout=None, stderr=None):
    stdout = stdout if stdout is not None else sys.stdout
    stderr = stderr if stderr is not None else sys.stderr
    try:
        opts = parse_args(argv)
        if opts.out:
            os.makedirs(opts.out, exist_ok=True)
            if not os.access(opts.out, os.W_OK):
                raise UsageError("--out %s: not writable" % opts.out)
    except UsageError as exc:
        stderr.write("validate: error: %s\n" % exc)
        return USAGE
    except OSError as exc:
        stderr.write("validate: error: --out %s: %s\n" % (opts.out, exc.strerror or exc))
        return USAGE
    opts.health = True
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    t0 = time.perf_counter()
    out_dir = os.path.abspath(opts.out) if opts.out else tempfile.mkdtemp(prefix="gpuprov-health-")
    try:
        ctx = Context(opts, out_dir, stream=_Quiet())
        results = [run_check(ctx, SPECS[name], True, named=False) for name in HEALTH_CHECKS]
        code, line, act = verdict(results, opts, driver_loaded())
        if opts.out:
            doc = output.results_document(started, time.perf_counter() - t0, code == HEALTHY, {
                "health": True, "out": opts.out, "expect_gpus": opts.expect_gpus, "kernel_log": opts.kernel_log,
                "slurm_drain": opts.slurm_drain, "device": "auto", "checks": list(HEALTH_CHECKS)},
                _host_document(results), results)
            doc["health"] = {"exit": code, "line": PREFIX + line}
            output.write_json_atomic(os.path.join(out_dir, output.RESULTS), doc)
    finally:
        if not opts.out:
            shutil.rmtree(out_dir, ignore_errors=True)
    stdout.write(PREFIX + line + "\n")
    stdout.flush()
    node = os.environ.get("SLURMD_NODENAME")
    if opts.slurm_drain and node:
        slurm_node.gate(node, code == HEALTHY, line, stderr, act)
    return code


class _Quiet(object):
    """Progress lines of the checks are dropped: --health prints one line."""

    def write(self, text):
        pass

    def flush(self):
        pass

