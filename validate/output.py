"""Writers for results.json, validate.log and bench_torch.log (and the reader
for bench_torch.log, so tests and tooling parse what we write)."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from . import SCHEMA, TOOL, __version__, actions
from .core import FAIL, PASS, SKIP
from .shared import BENCH_LOG as BENCH_LOG  # the control side reads them too
from .shared import NOTHING_COUNTED, NOTHING_COUNTED_EXIT, counted
from .shared import RESULTS as RESULTS

LOG = "validate.log"


# The fields of results.json (schema SCHEMA), of each entry of its "checks" and of each
# check's "findings", with what they mean: results_document and core.Result.to_json write
# them, docs/gen_reference.py documents them (docs/reference/results-json.md), and
# tests/test_docs.py checks a written document has exactly these keys.
RESULTS_FIELDS = (
    ("schema", "int", "the document's version: 2 (1 had no `action`, `findings`)"),
    ("tool", "str", "`gpuprov-validate`"),
    ("version", "str", "the validate package's version"),
    ("started", "str", "when the run started, UTC, ISO 8601"),
    ("elapsed_s", "number", "the run's duration in seconds"),
    ("ok", "bool", "true when every required check passed, and at least one counted (false when "
                   "nothing counted)"),
    ("action", "str or null", "the worst action among the checks that failed (see the Xid actions)"),
    ("deferred_action", "str or null",
     "what a node that passes still needs once idle (a pending row remap: reset the GPU)"),
    ("options", "object", "the options the run was given, defaults filled in"),
    ("host", "object", "what the run saw: hostname, os, kernel, arch, python, cpu, cpus, memory_gib, "
                       "gpu_name, gpu_count, driver, torch, torchvision, cuda, device; torch, "
                       "torchvision, cuda and device are null when no selected check uses torch "
                       "(torch not examined; device stays `cpu` under `--device cpu`); gpu_count "
                       "is null (not examined, never 0) when neither the system check (nvidia-smi) "
                       "nor torch counted the GPUs; `container` (only under `gpuprov validate "
                       "--container`): image, digest, id, runtime, gpus and host_stack (python, "
                       "torch, cuda outside the container), the rest being the container's"),
    ("checks", "list", "one object per check, in the order they ran (below)"),
    ("no_reference", "list", "the GPU models no floor judges (table or profile): measured, said "
                             "on top of validate.log, never a pass or a failure"),
    ("waivers", "list", "every waiver the run used: each check's `waivers`, with its `check`"),
)
CHECK_FIELDS = (
    ("name", "str", "the check's name (`system`, `cudnn_sample`, `bench`, `xid`...)"),
    ("status", "str", "`pass`, `fail` or `skip`"),
    ("required", "bool", "whether the verdict needs it to pass"),
    ("reason", "str", "why it failed or was skipped (empty when it passed)"),
    ("elapsed_s", "number", "the check's duration in seconds"),
    ("summary", "str", "one line of what it found"),
    ("figures", "object", "its measurements, by name (TFLOPS, GB/s, ms, images/s...)"),
    ("artefacts", "list", "files it wrote into the output folder"),
    ("warnings", "list", "warning lines"),
    ("waived", "str or null", "for a check skipped without being required: why that is no failure"),
    ("action", "str or null", "the worst action among its findings that fail it"),
    ("deferred_action", "str or null", "the worst action among its findings that do not fail it"),
    ("findings", "list", "health findings: objects of the fields below"),
    ("waivers", "list", "the operator's waivers this check used: `waiver` (`ignore_xids`, "
                        "`acknowledged_before`, `warn_only`) and `what` it waived"),
)
FINDING_FIELDS = (
    ("what", "str", "the finding, as the check's line says it"),
    ("action", "str", "the operator's action: none, restart the job, reset the GPU, reboot the node, "
                      "drain and replace (RMA)"),
    ("fails", "bool", "whether it fails the check (false: a note, or a deferred action)"),
)


def _json_default(obj):
    # numpy / torch scalars and anything else odd end up as plain values
    for attr in ("item", "tolist"):
        if hasattr(obj, attr):
            try:
                return getattr(obj, attr)()
            except Exception:
                pass
    return str(obj)


def _finite(obj):
    """JSON has no NaN/Infinity: turn them into null."""
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            return None
        return obj
    if isinstance(obj, dict):
        return dict((k, _finite(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def results_document(started, elapsed_s, ok, options, host, results, no_reference=()):
    """results.json; ``no_reference``: the GPU models no floor judges (said on top)."""
    return {
        "schema": SCHEMA,
        "tool": TOOL,
        "version": __version__,
        "started": started,
        "elapsed_s": round(elapsed_s, 3),
        "ok": ok,
        "action": actions.worst(r.action() for r in results if r.status == FAIL),
        # what a node that passes still needs, its work going on meanwhile (a pending row remap)
        "deferred_action": actions.worst(r.deferred_action() for r in results),
        "options": options,
        "host": host,
        "checks": [r.to_json() for r in results],
        "no_reference": list(no_reference),
        # every waiver of the inventory the run used (validate/profile.py), with its check
        "waivers": [dict(w, check=r.name) for r in results for w in r.waivers],
    }


def write_json_atomic(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(_finite(json.loads(json.dumps(doc, default=_json_default))), f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


# --------------------------------------------------------------------------
# validate.log

_WORD = {PASS: "PASS", FAIL: "FAIL", SKIP: "SKIP"}


def _fmt(v, unit=""):
    if v is None:
        return "-"
    return "%s%s" % (v, unit)


def _requirement(r):
    if r.required:
        return "yes"
    return "waived" if r.waived and r.status == SKIP else "no"


def _reference_and_waivers(doc):
    """The models judged by no floor, and every waiver of the inventory used."""
    lines = []
    if doc.get("no_reference"):
        lines.append("no reference (measured, not judged): %s" % ", ".join(doc["no_reference"]))
    for w in doc.get("waivers") or []:
        lines.append("waiver used: %s: %s" % (w["check"], w["what"]))
    return lines


def _waived_names(results):
    return [r.name for r in results if r.waived and not r.required and r.status == SKIP]


def _log_verdict(doc, results):
    """The verdict line, with the waived checks and the count of warnings."""
    waived_names = _waived_names(results)
    warning_count = sum(len(r.warnings) for r in results)
    nothing = not counted([r.to_json() for r in results])
    return ["%s %s: %s (exit %d)%s%s" % (
        TOOL, __version__, "NOT VALIDATED: " + NOTHING_COUNTED if nothing else
        ("VALIDATED" if doc["ok"] else "NOT VALIDATED"),
        NOTHING_COUNTED_EXIT if nothing else (0 if doc["ok"] else 1),
        "; waived: %s" % ", ".join(waived_names) if waived_names else "",
        "; %d warning(s)" % warning_count if warning_count else "")]


def _log_run(doc, results):
    """When, on which host, with which software and options."""
    host = doc["host"]
    opts = doc["options"]
    return [
        "started %s UTC, took %.1f s" % (doc["started"], doc["elapsed_s"]),
        "host %s: %s, kernel %s, %s, %s x %s, %s GiB RAM"
        % (host.get("hostname"), host.get("os"), host.get("kernel"), host.get("arch"),
           host.get("cpus"), host.get("cpu"), host.get("memory_gib")),
        "python %s, torch %s, torchvision %s, CUDA (torch build) %s, driver %s, GPUs %s%s, device %s"
        % (host.get("python"), _fmt(host.get("torch")), _fmt(host.get("torchvision")),
           _fmt(host.get("cuda")), _fmt(host.get("driver")), _fmt(host.get("gpu_count")),
           (" (%s)" % host["gpu_name"]) if host.get("gpu_name") else "", host.get("device")),
        "options: device=%s models=%s warmup=%s iters=%s batch=%s amp=%s quick=%s weights=%s expect_gpus=%s"
        % (opts.get("device"), opts.get("models"), opts.get("warmup"), opts.get("iters"),
           ",".join(str(b) for b in opts.get("batch") or []), opts.get("amp"), opts.get("quick"),
           opts.get("weights") or "-", _fmt(opts.get("expect_gpus"))),
    ]


def _log_actions(doc, results):
    """The required checks not passed, and the operator's actions, now and when idle."""
    lines = []
    failed_req = [r.name for r in results if r.required and r.status != PASS]
    if failed_req:
        lines.append("required checks not passed: %s" % ", ".join(failed_req))
    if doc.get("action"):
        lines.append("operator's action: %s" % doc["action"])
    if doc.get("deferred_action"):
        lines.append("operator's action, when the GPUs are idle (new work may start meanwhile): %s"
                     % doc["deferred_action"])
    return lines


def _log_waivers_and_warnings(doc, results):
    """What was measured without a reference, what was waived and why, and each warning."""
    lines = list(_reference_and_waivers(doc))
    waived_names = _waived_names(results)
    waived = [r for r in results if r.name in waived_names]
    if waived:
        lines.append("required checks waived (not applicable here): %s"
                     % "; ".join("%s: %s" % (r.name, r.waived) for r in waived))
    lines.extend("warning: %s: %s" % (r.name, w) for r in results for w in r.warnings
                 if w != r.waived)  # a waiver is already on the waived line
    return lines


def _log_table(doc, results):
    """One row per check: state, requirement, time and its summary (or reason)."""
    lines = ["", "%-14s %-5s %-6s %8s  %s" % ("check", "state", "req", "time", "result")]
    for r in results:
        text = r.summary if r.status == PASS else r.reason
        if r.status != PASS and r.summary:
            text = "%s [%s]" % (r.reason, r.summary)
        lines.append("%-14s %-5s %-6s %7.1fs  %s" % (
            r.name, _WORD.get(r.status, r.status), _requirement(r), r.elapsed_s, text))
    return lines


def _log_details(doc, results):
    """Each check's details and artefacts (a skipped check without any: nothing)."""
    lines = []
    for r in results:
        if not r.details and not r.artefacts and r.status == SKIP:
            continue
        lines += ["", "== %s: %s ==" % (r.name, _WORD.get(r.status, r.status))]
        if r.status != PASS:
            lines.append("  reason: %s" % r.reason)
        lines.extend("  " + d for d in r.details)
        if r.artefacts:
            lines.append("  artefacts: %s" % ", ".join(r.artefacts))
    return lines


# validate.log's sections, top to bottom: each gets (results document, results), gives lines.
LOG_SECTIONS = (_log_verdict, _log_run, _log_actions, _log_waivers_and_warnings, _log_table, _log_details)


def render_log(doc, results):
    return "\n".join(line for section in LOG_SECTIONS for line in section(doc, results)) + "\n"


def write_log(path, doc, results):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(render_log(doc, results))
    os.replace(tmp, path)


# --------------------------------------------------------------------------
# bench_torch.log: the seed's format
#
#   #head;PyTorch <torch version> <device> [<gpu name>]
#   #<model>;<batch-1 median ms>
#
# Nothing else starts with '#'.  A further "#head;" line would start a new
# column (another run appended to the same file).


def bench_log_text(label, rows):
    """rows: [(model, ms)] in run order; models without a time are left out."""
    out = ["#head;%s" % label]
    for model, ms in rows:
        if ms is None:
            continue
        out.append("#%s;%f" % (model, ms))
    return "\n".join(out) + "\n"


_HEAD = re.compile(r"^#head;(.*)$")
_ROW = re.compile(r"^#([^;#\s]+);([-+0-9.eE]+)\s*$")


def parse_bench_log(text):
    """[{"label": str, "models": {model: ms}}] — one entry per #head column."""
    columns: list[Any] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("#"):
            continue
        m = _HEAD.match(line)
        if m:
            columns.append({"label": m.group(1), "models": {}})
            continue
        m = _ROW.match(line)
        if m and columns:
            columns[-1]["models"][m.group(1)] = float(m.group(2))
            continue
        raise ValueError("unexpected line in bench log: %r" % line)
    return columns
