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

A scheduler's drain hook (validate/drain.py, a row per scheduler), e.g.
``--slurm-drain``: when the scheduler names this node (``SLURMD_NODENAME``,
which Slurm's HealthCheckProgram and Prolog/Epilog run with), drain it with the
finding and its action as the reason when the verdict is sick or
could-not-check, and resume it when healthy again, by LBNL NHC's rule: a node
drained for a reason it did not set is left alone (validate/slurm_node.py).

A healthy node may still need an action that can wait for its GPUs to be idle
(a pending row remap: reset the GPU): its line says so, ``healthy [action: reset
the GPU, deferred]: ...``, exit 0, and results.json has it as
``deferred_action``.
"""

import datetime
import os
import shutil
import sys
import tempfile
import time

from . import actions, drain, host, output
from .core import FAIL, SKIP, SPECS, Context, run_check
from .shared import HEALTH_PREFIX

HEALTHY, SICK, UNCHECKED = 0, 1, 3
USAGE = 2
HEALTH_CHECKS = ("system", "xid", "fabric")
PREFIX = HEALTH_PREFIX  # the line's, and its drains' reasons' (validate/shared.py)
DRIVER_PROC = "/proc/driver/nvidia/version"
# how the checks word a finding that does not fail (system's notices, xid's): not repeated in the line
NOTE_WORDS = ("warning: ", "reported, not failed: ")

DESCRIPTION = ("Fast GPU node health: GPU count, driver, nvidia-smi health, Xid/SXid since boot, "
               "Fabric Manager. Exit 0 healthy, 1 sick, 3 could not check.")
# Its options (argparse rows, in --help order), then the drain hooks' (validate/drain.py):
# validate/cli.py MODES reads them with its one parser.
OPTIONS = (
    (("--health",), dict(action="store_true", required=True)),
    (("--out",), dict(metavar="DIR", help="write results.json (and nvidia-smi artefacts) there")),
    (("--expect-gpus",), dict(type=int, metavar="N", dest="expect_gpus",
                              help="sick unless exactly N GPUs are visible (0: a node without GPUs is healthy)")),
    (("--kernel-log",), dict(metavar="PATH", dest="kernel_log",
                             help="kernel log to scan for Xid/SXid (default: journalctl -k -b, else dmesg)")),
    (("--profile",), dict(metavar="FILE|JSON",
                          help="the node's profile (validate/profile.py): its ignore_xids and acknowledged_before "
                               "apply")),
)


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


def _smi(by):
    return (by["system"].figures.get("nvidia_smi") or {}).get("path")


def _kernel_outranks_tool(by, opts, driver_line):
    """The kernel's own words outrank a missing tool: Xid 79 ("GPU has fallen off the bus") in
    the log and no nvidia-smi is a sick node, not one that could not be checked."""
    if _smi(by) is not None or by["xid"].status != FAIL:
        return None
    kernel = [f for f in by["xid"].findings if f["fails"]]
    return _sick(kernel) if kernel else None


def _no_driver(by, opts, driver_line):
    """No nvidia-smi and no driver: healthy, unchecked or sick as --expect-gpus says."""
    if _smi(by) is not None or driver_line is not None:
        return None
    if opts.expect_gpus == 0:
        return HEALTHY, "healthy: no NVIDIA GPU or driver, as --expect-gpus 0 says", None
    if opts.expect_gpus is None:
        return UNCHECKED, "could not check: no NVIDIA driver (nvidia-smi not found, %s absent)" % DRIVER_PROC, None
    return SICK, ("sick: no NVIDIA driver (nvidia-smi not found, %s absent), expected %d GPUs [action: %s]"
                  % (DRIVER_PROC, opts.expect_gpus, actions.REBOOT_NODE)), actions.REBOOT_NODE


def _no_tool(by, opts, driver_line):
    """A driver loaded and no nvidia-smi to ask it."""
    if _smi(by) is not None:
        return None
    return UNCHECKED, "could not check: the driver is loaded (%s) but nvidia-smi is not found" % driver_line, None


def _failed(by, opts, driver_line):
    """A failed check: sick, named by its worst failing finding (else by its reason)."""
    failed = [r for r in by.values() if r.status == FAIL]
    if not failed:
        return None
    findings = [f for r in failed for f in r.findings if f["fails"]]
    if findings:
        return _sick(findings)
    return SICK, "sick: %s: %s" % (failed[0].name, failed[0].reason), None


def _left_unchecked(by, opts, driver_line):
    """A skip that leaves something unchecked (the kernel log not readable) has a warning or
    stays required; "no NVSwitch on this board" has neither."""
    unchecked = [r for r in by.values() if r.status == SKIP and (r.required or r.warnings)]
    if not unchecked:
        return None
    return UNCHECKED, "could not check: %s: %s" % (unchecked[0].name, unchecked[0].reason), None


def _summary(by):
    """What a healthy line says: the GPUs, the driver, the kernel log's lines, the fabric, and
    the inventory's waivers that made it healthy."""
    gpus = by["system"].figures.get("gpus") or []
    names = sorted(set(g.get("name") or "?" for g in gpus))
    xid = by["xid"].figures
    fab = by["fabric"]
    summary = "%d GPU(s) %s, driver %s; %d Xid, %d SXid line(s) since boot%s" % (
        len(gpus), "/".join(names), gpus[0].get("driver_version") if gpus else "-",
        len(xid.get("events") or []), len(xid.get("sxids") or []),
        "; " + fab.summary if fab.status != SKIP else "")
    waived = [w["waiver"] for r in by.values() for w in r.waivers]
    if waived:
        summary += "; waived: " + ", ".join(sorted(set(waived)))
    return summary


def _healthy(by, opts, driver_line):
    """Healthy; one that needs an action once its GPUs are idle (a pending row remap) names it
    up front."""
    summary = _summary(by)
    findings = [f for r in by.values() for f in r.findings]
    later = actions.deferred(findings)
    if later is None:
        return HEALTHY, "healthy: " + summary, None
    what = next(f for f in findings if not f["fails"] and f["action"] == later)["what"]
    for note in NOTE_WORDS:
        if what.startswith(note):
            what = what[len(note):]
    return HEALTHY, "healthy [action: %s, deferred]: %s; %s" % (later, what, summary), later


# The verdict's rules, in order: the first that speaks decides.  Each gets the results by check
# name, the options and the driver's version line (None: not loaded).
VERDICT_RULES = (_kernel_outranks_tool, _no_driver, _no_tool, _failed, _left_unchecked, _healthy)


def verdict(results, opts, driver_line):
    """(exit code, one line without the prefix, action or None)."""
    by = dict((r.name, r) for r in results)
    for rule in VERDICT_RULES:
        said = rule(by, opts, driver_line)
        if said is not None:
            return said
    raise AssertionError("_healthy always speaks")


def _host_document(results):
    doc = host.basic_facts()
    system = dict((r.name, r) for r in results)["system"]
    gpus = system.figures.get("gpus") or []
    doc.update({"gpu_name": gpus[0].get("name") if gpus else None, "gpu_count": len(gpus),
                "driver": gpus[0].get("driver_version") if gpus else None,
                "torch": None, "torchvision": None, "cuda": None, "device": "cuda" if gpus else None})
    return doc


def _results_document(opts, started, t0, code, line, results):
    options = {"health": True, "out": opts.out, "expect_gpus": opts.expect_gpus, "kernel_log": opts.kernel_log}
    options.update(drain.asked(opts))
    options.update({"device": "auto", "checks": list(HEALTH_CHECKS)})
    doc = output.results_document(started, time.perf_counter() - t0, code == HEALTHY, options,
                                  _host_document(results), results)
    doc["health"] = {"exit": code, "line": PREFIX + line}
    return doc


def run(opts, stdout=None, stderr=None):
    """The health checks, the one line, and the drain hooks asked for: the exit status."""
    stdout = stdout if stdout is not None else sys.stdout
    stderr = stderr if stderr is not None else sys.stderr
    opts.device = "auto"
    opts.checks = list(HEALTH_CHECKS)
    opts.health = True
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    t0 = time.perf_counter()
    out_dir = os.path.abspath(opts.out) if opts.out else tempfile.mkdtemp(prefix="gpuprov-health-")
    try:
        ctx = Context(opts, out_dir, stream=_Quiet())
        results = [run_check(ctx, SPECS[name], True, named=False) for name in HEALTH_CHECKS]
        code, line, act = verdict(results, opts, driver_loaded())
        if opts.out:
            output.write_json_atomic(os.path.join(out_dir, output.RESULTS),
                                     _results_document(opts, started, t0, code, line, results))
    finally:
        if not opts.out:
            shutil.rmtree(out_dir, ignore_errors=True)
    stdout.write(PREFIX + line + "\n")
    stdout.flush()
    drain.run(opts, code == HEALTHY, line, stderr, act)
    return code


class _Quiet(object):
    """Progress lines of the checks are dropped: --health prints one line."""

    def write(self, text):
        pass

    def flush(self):
        pass
