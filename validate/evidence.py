"""Evidence for a GPU replacement, gathered on the host into one archive:
``python3 -m validate.evidence --out DIR --host NAME [--results FILE] [--stack FILE]``.

What a provider asks for when a GPU is to be replaced (issue 34; NVSentinel#122, #1494;
gpu-operator#23; Azure/azhpc-diagnostics#30), in ``DIR/evidence-<host>-<serials>.tar.gz``
whose one folder holds:

    manifest.json             every other file with its size and sha256, each GPU's serial
                              number, UUID, board part number and VBIOS, and what is missing
                              and why (written first in the archive)
    nvidia-bug-report.log.gz  NVIDIA's ``nvidia-bug-report.sh --output-file``: the full run,
                              bounded in time; when it hangs, killed and run again with
                              ``--safe-mode``, bounded too
    nvidia-smi-q.txt          ``nvidia-smi -q``, where the GPUs' identities are read from
    xid.log                   the Xid and SXid lines of the kernel log (validate/checks/xid.py
                              reads it, validate/driver_errors.py knows the lines)
    results.json, stack.json  the last validation's results and the stack manifest, when given

The options of ``nvidia-bug-report.sh`` (NVIDIA's script, installed with the driver as
/usr/bin/nvidia-bug-report.sh): ``--output-file <file>`` "Write output to <file>. If gzip is
available, the output file will be automatically compressed, and ".gz" will be appended";
``--safe-mode`` "Disable some parts of the script that may hang the system"; it refuses to run
unless root ("ERROR: Please run nvidia-bug-report.sh as root.") (the script's usage() and
argument loop, as shipped with driver 440: github.com/akshaybaviskar/NVIDIA_driver_440,
nvidia-bug-report.sh; the same options in driver 390's copy, sakjain92/Fractional-GPUs,
driver/NVIDIA-Linux-x86_64-390.48/nvidia-bug-report.sh).

The keys read from ``nvidia-smi -q`` ("Serial Number", "GPU UUID", "Board Part Number",
"VBIOS Version", "Product Name") are as a real H100 with driver 590.48.01 prints them
(tests/fixtures/validate/h100_590_smi_q.txt, lines 26-33; its SOURCES.md names the capture).

A host without ``nvidia-bug-report.sh`` (or ``nvidia-smi``, or a readable kernel log) still
gives the rest; the manifest's ``missing`` says what and why. The files are capped in size
together (``--max-bytes``); one that would pass the cap is left out and listed as missing.
Standard library only (the host's python3, 3.8 or newer).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from typing import Any

from . import driver_errors, host
from .checks.xid import read_kernel_log
from .shared import (
    BUG_REPORT_FULL_TIMEOUT_S,
    BUG_REPORT_SAFE_TIMEOUT_S,
    EVIDENCE_MANIFEST,
    EVIDENCE_PREFIX,
    EVIDENCE_SUFFIX,
    RESULTS,
    STACK_MANIFEST,
)
from .smi import is_missing, parse_smi_q

SCHEMA = 1
MANIFEST = EVIDENCE_MANIFEST
STACK = STACK_MANIFEST
BUG_REPORT = "nvidia-bug-report.log"  # --output-file's name; the script appends .gz
BUG_REPORT_PATHS = ("/usr/bin/nvidia-bug-report.sh",)  # where the driver installs it, if not on PATH
SMI_Q = "nvidia-smi-q.txt"
XID_LOG = "xid.log"
FULL_TIMEOUT_S = BUG_REPORT_FULL_TIMEOUT_S  # validate/shared.py: the control side's too
SAFE_TIMEOUT_S = BUG_REPORT_SAFE_TIMEOUT_S
SMI_TIMEOUT_S = 60.0
# Ours (unsourced): under the control side's pull cap (256 MiB, remote/transport/transfer.py
# PullLimits.archive_bytes), so an archive that fits is never refused for its size.
MAX_BYTES = 192 << 20
XID_MAX_LINES = 20000  # the newest are kept (ours, unsourced)
# Each GPU's identity: the manifest's key -> nvidia-smi -q's key.
IDENTITY = (("serial", "Serial Number"), ("uuid", "GPU UUID"),
            ("board_part_number", "Board Part Number"), ("vbios", "VBIOS Version"),
            ("product", "Product Name"))
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")
NAME_MAX = 120  # the serials part of the archive's name, cut past this (ours)


def archive_stem(host_name: str, gpus: list[dict[str, Any]]) -> str:
    """``evidence-<host>-<serials>``: serials joined with ``_``, each only letters, digits,
    ``.`` and ``-``; ``no-serial`` when none was read; long lists cut with ``+N``."""
    name = _UNSAFE.sub("_", host_name).strip("._") or "host"
    serials = [_UNSAFE.sub("_", g["serial"]).strip("._") for g in gpus if g.get("serial")]
    serials = [s for s in serials if s]
    text = "_".join(serials) if serials else "no-serial"
    if len(text) > NAME_MAX:
        kept: list[str] = []
        for s in serials:
            if len("_".join(kept + [s])) > NAME_MAX - 8:
                break
            kept.append(s)
        text = "_".join(kept) + "_+%d" % (len(serials) - len(kept))
    return "%s%s-%s" % (EVIDENCE_PREFIX, name[:64], text)


def gpu_identities(smi_q_text: str) -> list[dict[str, Any]]:
    """Each GPU's bus id, serial, UUID, board part number, VBIOS and product from ``-q``."""
    out = []
    for index, gpu in enumerate(parse_smi_q(smi_q_text)["gpus"]):
        entry: dict[str, Any] = {"index": index, "bus_id": gpu.get("_bus_id")}
        for key, label in IDENTITY:
            value = gpu.get(label)
            entry[key] = None if not isinstance(value, str) or is_missing(value) else value
        out.append(entry)
    return out


def run_bounded(argv: list[str], cwd: str, timeout: float, log_path: str) -> tuple[int | None, float]:
    """Run `argv` in a session of its own, output to `log_path`; past `timeout` seconds the
    whole process group is killed (the script's children too: a hung ``nvidia-smi`` under it
    would otherwise keep running). (exit status or None when killed, seconds taken)."""
    start = time.monotonic()
    rc: int | None = None
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            # Past the bound, or this process stopped (SIGTERM from the transport's kill of
            # our process group, Ctrl-C: `main`): the group is out of that group's reach.
            if rc is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                try:  # bounded too: a script stuck in the kernel (state D) is left behind
                    proc.wait(timeout=host.KILL_WAIT_S)
                except subprocess.TimeoutExpired:
                    pass
    return rc, time.monotonic() - start


def find_bug_report() -> str | None:
    path = shutil.which("nvidia-bug-report.sh")
    if path:
        return path
    for cand in BUG_REPORT_PATHS:
        if os.access(cand, os.X_OK):
            return cand
    return None


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    lines = [line for line in lines if line]
    return lines[-1][:200] if lines else ""


def collect_bug_report(stage: str, missing: list[dict[str, str]], full_timeout: float,
                       safe_timeout: float) -> dict[str, Any]:
    """Run nvidia-bug-report.sh into `stage`: full, else ``--safe-mode`` when the full run
    hung. What happened, for the manifest; a missing report is added to `missing`."""
    script = find_bug_report()
    record: dict[str, Any] = {"script": script, "mode": None, "runs": []}
    if script is None:
        # seen on a lent H200 VM (2026-11-27): a driver with nvidia-smi but without the script,
        # as container-style driver images ship it; no driver at all is the other case
        why = ("not installed with this driver (nvidia-smi is there; driver images without the "
               "NVIDIA utilities lack it)" if host.find_nvidia_smi() else
               "not found, nor nvidia-smi: it ships with the NVIDIA driver (no driver installed?)")
        missing.append({"name": BUG_REPORT + ".gz", "why": "nvidia-bug-report.sh " + why})
        return record
    output = os.path.join(stage, BUG_REPORT)
    log = os.path.join(stage, ".bug-report.out")
    for mode, extra, bound in (("full", [], full_timeout), ("safe-mode", ["--safe-mode"], safe_timeout)):
        for stale in (output, output + ".gz"):
            if os.path.exists(stale):
                os.remove(stale)
        rc, took = run_bounded([script, "--output-file", output] + extra, stage, bound, log)
        run = {"mode": mode, "rc": rc, "seconds": round(took, 1)}
        record["runs"].append(run)
        if rc is None:
            run["why"] = "hung: killed after %g s" % bound
            continue  # the full run hung: safe mode next
        made = output + ".gz" if os.path.exists(output + ".gz") else output
        if rc == 0 and os.path.isfile(made):  # without gzip on the host: not compressed
            record["mode"] = mode
            break
        run["why"] = "exit %s: %s" % (rc, _last_line(log) or "no output")
        break  # it ran and refused (not root, ...): safe mode would refuse the same way
    if os.path.exists(log):
        os.remove(log)
    if record["mode"] is None:
        missing.append({"name": BUG_REPORT + ".gz", "why": "nvidia-bug-report.sh " + "; ".join(
            "%s run %s" % (r["mode"], r["why"]) for r in record["runs"])})
    return record


def collect_gpus(stage: str, missing: list[dict[str, str]]) -> list[dict[str, Any]]:
    """``nvidia-smi -q`` into `stage` and the GPUs' identities read from it."""
    smi = host.find_nvidia_smi()
    if smi is None:
        missing.append({"name": SMI_Q, "why": "nvidia-smi not found"})
        return []
    res = host.run_tool([smi, "-q"], timeout=SMI_TIMEOUT_S)
    if res["error"] or res["rc"] != 0 or not res["stdout"].strip():
        why = res["error"] or "exit %s: %s" % (res["rc"], (res["stderr"] or res["stdout"]).strip()[:200])
        missing.append({"name": SMI_Q, "why": "nvidia-smi -q: " + why})
        return []
    with open(os.path.join(stage, SMI_Q), "w") as f:
        f.write(res["stdout"])
    return gpu_identities(res["stdout"])


def collect_xid(stage: str, missing: list[dict[str, str]], kernel_log: str | None) -> dict[str, Any]:
    """The Xid and SXid lines of the kernel log into `stage` (the newest XID_MAX_LINES)."""
    text, source, reasons = read_kernel_log(kernel_log)
    if text is None:
        missing.append({"name": XID_LOG, "why": "kernel log not readable: " + "; ".join(reasons)})
        return {"source": None, "lines": 0}
    lines = [line for line in text.splitlines()
             if driver_errors.parse(line) or driver_errors.parse_sxid(line)]
    kept = lines[-XID_MAX_LINES:]
    with open(os.path.join(stage, XID_LOG), "w") as f:
        f.write("".join(line + "\n" for line in kept))
    return {"source": source, "lines": len(lines), "kept": len(kept)}


def copy_given(stage: str, missing: list[dict[str, str]], name: str, path: str | None) -> None:
    if not path:
        missing.append({"name": name, "why": "not given (no validation run recorded for this host)"})
        return
    try:
        shutil.copyfile(path, os.path.join(stage, name))
    except OSError as exc:
        missing.append({"name": name, "why": "%s: %s" % (path, exc.strerror or exc)})


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cap(stage: str, missing: list[dict[str, str]], max_bytes: int) -> list[str]:
    """The files of `stage` kept under `max_bytes` together, smallest first; the others are
    removed and listed as missing."""
    names = sorted(os.listdir(stage), key=lambda n: (os.path.getsize(os.path.join(stage, n)), n))
    kept, total = [], 0
    for name in names:
        size = os.path.getsize(os.path.join(stage, name))
        if total + size > max_bytes:
            os.remove(os.path.join(stage, name))
            missing.append({"name": name, "why": "%d bytes: over the archive's cap of %d bytes "
                            "(--max-bytes)" % (size, max_bytes)})
            continue
        kept.append(name)
        total += size
    return sorted(kept)


def pack(out_dir: str, stem: str, stage: str, names: list[str]) -> str:
    """``out_dir/<stem>.tar.gz``: the folder `stem` with manifest.json first, then `names`."""
    path = os.path.join(out_dir, stem + EVIDENCE_SUFFIX)
    tmp = path + ".part"

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755 if info.isdir() else 0o644
        return info

    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(stage, arcname=stem, recursive=False, filter=clean)
        for name in [MANIFEST] + names:
            tar.add(os.path.join(stage, name), arcname="%s/%s" % (stem, name), filter=clean)
    os.replace(tmp, path)
    return path


def collect(opts: argparse.Namespace) -> str:
    """Gather everything into a staging folder in ``--out``, pack it; the archive's path."""
    out = os.path.abspath(opts.out)
    os.makedirs(out, exist_ok=True)
    stage = os.path.join(out, ".collect")
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    missing: list[dict[str, str]] = []
    gpus = collect_gpus(stage, missing)
    xid = collect_xid(stage, missing, opts.kernel_log)
    bug_report = collect_bug_report(stage, missing, opts.bug_report_timeout, opts.safe_mode_timeout)
    copy_given(stage, missing, RESULTS, opts.results)
    copy_given(stage, missing, STACK, opts.stack)
    names = cap(stage, missing, opts.max_bytes)
    manifest = {
        "schema": SCHEMA,
        "tool": "gpuprov evidence",
        "host": opts.host,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpus": gpus,
        "bug_report": bug_report,
        "xid": xid,
        "files": [{"name": n, "bytes": os.path.getsize(os.path.join(stage, n)),
                   "sha256": sha256(os.path.join(stage, n))} for n in names],
        "missing": missing,
    }
    with open(os.path.join(stage, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    try:
        return pack(out, archive_stem(opts.host, gpus), stage, names)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m validate.evidence",
                                description="Gather the evidence for a GPU replacement into one archive.")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the archive (created)")
    p.add_argument("--host", required=True, help="the host's name, for the archive's name and manifest")
    p.add_argument("--results", metavar="FILE", help="the last validation's results.json")
    p.add_argument("--stack", metavar="FILE", help="the host's stack manifest (stack.json)")
    p.add_argument("--kernel-log", metavar="FILE", dest="kernel_log",
                   help="kernel log to take the Xid lines from (default: journalctl -k -b, else dmesg)")
    p.add_argument("--bug-report-timeout", type=float, default=FULL_TIMEOUT_S, metavar="S",
                   help="seconds for nvidia-bug-report.sh's full run (default %g)" % FULL_TIMEOUT_S)
    p.add_argument("--safe-mode-timeout", type=float, default=SAFE_TIMEOUT_S, metavar="S",
                   help="seconds for its --safe-mode run after a hung full run (default %g)" % SAFE_TIMEOUT_S)
    p.add_argument("--max-bytes", type=int, default=MAX_BYTES, metavar="N",
                   help="cap on the files together (default %d)" % MAX_BYTES)
    opts = p.parse_args(argv)
    for name in ("bug_report_timeout", "safe_mode_timeout", "max_bytes"):
        if not getattr(opts, name) > 0:
            p.error("--%s must be more than 0" % name.replace("_", "-"))
    return opts


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds: the running script's group is killed, the stage removed


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    # gpuprov stops a command with SIGTERM to its process group (Ctrl-C, its time limit); a
    # lost connection may bring SIGHUP. Either way the script runs in a session of its own.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)
    path = collect(opts)
    print("evidence: %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
