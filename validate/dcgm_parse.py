"""The JSON ``dcgmi diag -r LEVEL -j`` prints, read into one list of results, whatever DCGM wrote it.

What a host's DCGM prints is untrusted: it goes through jsonread (size, depth, digits), every
field is checked for its type, text is cut and made printable, and a shape we do not know is a
``BadOutput`` naming what is missing, never a pass.

The shapes, from DCGM's own writer (NVIDIA/DCGM dcgmi/Diag.cpp, nvvs/include/NvvsJsonStrings.h):

- 4.x (Diag.cpp at 72fa3fe, DCGM 4.6.0; first in d2a3091, DCGM 4.0): ``{"DCGM Diagnostic":
  {"test_categories": [{"category", "tests": [{"name", "results": [{"entity_group": "GPU",
  "entity_group_id": 1, "entity_id": 0, "status", "warnings": [{"warning", "error_id",
  "error_category", "error_severity"}], "info": [...]}], "test_summary": {"status", "warnings",
  "info"}}]}]}, "entity_groups": [...], "metadata": {"version", "Driver Version Detected"}}``.
  A result's status is "Pass", "Skip" or "Fail" (HelperDisplayDiagResult: a warning is written
  "Fail" unless asked otherwise; "Not Run" results are left out); ``test_summary`` carries every
  error of the test, those of no entity too.
- 3.3.x (Diag.cpp at b0ec3c6, DCGM 3.3.9): ``{"DCGM GPU Diagnostic": {"test_categories": [...],
  ...}, "version", "Driver Version Detected", "GPU Device IDs"}``; a plugin's result is
  ``{"gpu_id": "0", "status", "warnings": [{"warning", "error_id", "error_category",
  "error_severity"}], "info": "text"}``; a Deployment test's one result has no GPU, or the
  ``gpu_id`` (a number) of its error, and its errors' text under ``"warnings"``; the CPU EUD test
  has ``cpu_id``.  Statuses "Pass", "Skip", "Fail" (a warning is "Fail").
- 2.x to 3.2 (Diag.cpp at a4e74cc, DCGM 3.2.6): ``{"gpu_ids": "0", "status", "warnings":
  "text", "error_id": N}``.
- nvvs's own JSON (nvvs/include/JsonResult.hpp at b0ec3c6): ``"gpu_ids": "0,1,2"`` or a number,
  statuses "PASS", "FAIL", "WARN", "SKIP", ``null`` entries in lists, a line of text before the
  document ("JsonResult: Deserialize real output", nvvs/src/tests/JsonResultTests.cpp).
- Any of them under ``{"iterations": [...], "Overall Result"}`` (``dcgmi diag --iterations``),
  or ``{"DCGM ...": {"version", "runtime_error": "message"}}`` when the run could not happen
  (HelperDisplayFailureMessage).

Standard library only (runs on the hosts' python3).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from . import jsonread

PASS, FAIL, WARN, SKIP, NOT_RUN = "pass", "fail", "warn", "skip", "not run"
STATUS_WORDS = {"pass": PASS, "passed": PASS, "fail": FAIL, "failed": FAIL, "warn": WARN,
                "warning": WARN, "skip": SKIP, "skipped": SKIP, "not run": NOT_RUN, "notrun": NOT_RUN}
ROOTS = (("DCGM Diagnostic", "4.x"), ("DCGM GPU Diagnostic", "3.x"))
# dcgm_field_entity_group_t (NVIDIA/DCGM dcgmlib/dcgm_fields.h): DCGM_FE_GPU = 1, DCGM_FE_VGPU,
# DCGM_FE_SWITCH, DCGM_FE_GPU_I, DCGM_FE_GPU_CI, DCGM_FE_LINK, DCGM_FE_CPU, DCGM_FE_CPU_CORE
ENTITY_GROUPS = {1: "GPU", 2: "vGPU", 3: "Switch", 4: "GPU_I", 5: "GPU_CI", 6: "Link", 7: "CPU",
                 8: "CPU_Core"}
# Chosen (unsourced): a level-4 run on 8 GPUs with every info line is well under 1 MiB
# (issue 215's 8-GPU level-3 output: about 40 KiB); 8 MiB is room, and bounded.
MAX_BYTES = 8 << 20
TEXT_MAX = 400  # chosen: a DCGM message is one sentence or two; the rest is cut
ALL = "all"  # a result of no GPU: a Deployment test of 3.x, a test summary's error of no entity


class BadOutput(ValueError):
    """Not a document ``dcgmi diag -j`` writes: the message says why, in a few words."""


def clean(value: Any) -> str:
    """Printable, one line, cut: what DCGM wrote is untrusted."""
    s = value if isinstance(value, str) else ("" if value is None else str(value))
    s = "".join(c if c.isprintable() else " " for c in s.replace("\t", " ").replace("\n", " "))
    s = " ".join(s.split())
    return s if len(s) <= TEXT_MAX else s[:TEXT_MAX - 3] + "..."


def _int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def status_of(word: Any) -> str:
    """DCGM's status word as ours; a word we do not know is kept ("unknown: <word>"), never a pass."""
    key = " ".join(str(word).strip().lower().replace("_", " ").split()) if word is not None else ""
    return STATUS_WORDS.get(key) or STATUS_WORDS.get(key.replace(" ", "")) or "unknown: %s" % clean(word)


def _list(d: Dict[str, Any], key: str) -> List[Any]:
    value = d.get(key)
    return value if isinstance(value, list) else []


def _dict(d: Dict[str, Any], key: str) -> Dict[str, Any]:
    value = d.get(key)
    return value if isinstance(value, dict) else {}


def _document(text: str) -> Any:
    """The JSON value in dcgmi's output: from its first '{' to its last '}' (a banner line may
    come first, a newline after)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise BadOutput("no JSON object in the output")
    try:
        return jsonread.loads(text[start:end + 1], max_bytes=MAX_BYTES)
    except jsonread.BadJSON as exc:
        raise BadOutput(str(exc)) from None


def _entities(result: Dict[str, Any]) -> List[str]:
    """The GPUs (or other entities) a result is about: ["0"], ["0", "1"], ["cpu 0"], or [ALL]."""
    if "entity_id" in result or "entity_group" in result or "entity_group_id" in result:
        group = result.get("entity_group")
        if not isinstance(group, str):
            group = ENTITY_GROUPS.get(_int(result.get("entity_group_id")) or 0, "entity")
        eid = _int(result.get("entity_id"))
        label = "?" if eid is None else str(eid)
        return [label] if group.upper() == "GPU" else ["%s %s" % (clean(group).lower(), label)]
    for key in ("gpu_id", "gpu_ids"):
        value = result.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return [str(value)]
        if isinstance(value, str) and value.strip():
            ids = [clean(p.strip()) for p in value.split(",") if p.strip()]
            return [i[3:] if i.lower().startswith("gpu") and i[3:].isdigit() else i for i in ids] or [ALL]
    if result.get("cpu_id") is not None:
        return ["cpu %s" % clean(result["cpu_id"])]
    return [ALL]


def _errors(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    """[{code, severity, text}] of a result: a list of objects (3.3 on), a list of strings, or one
    string beside an ``error_id`` (before 3.3)."""
    raw = result.get("warnings")
    if isinstance(raw, str):
        raw = [{"warning": raw, "error_id": result.get("error_id")}]
    if not isinstance(raw, list):
        return []
    out = []
    for item in raw:
        if isinstance(item, str):
            item = {"warning": item}
        if not isinstance(item, dict):
            continue  # null: a gap Json::Value left in the array
        text = item.get("warning", item.get("warnings"))
        out.append({"code": _int(item.get("error_id")), "severity": _int(item.get("error_severity")),
                    "text": clean(text)})
    return out


def _info(result: Dict[str, Any]) -> List[str]:
    raw = result.get("info")
    if isinstance(raw, str):
        raw = [raw]
    return [clean(i) for i in raw if isinstance(i, str)] if isinstance(raw, list) else []


def _results_of(test: Dict[str, Any], category: str, iteration: Optional[int]) -> List[Dict[str, Any]]:
    """One entry per (test, entity), Not Run left out; a test summary that fails where no entity
    does becomes a result of ALL with the summary's errors."""
    name = clean(test.get("name")) or "?"
    out = []
    for r in _list(test, "results"):
        if not isinstance(r, dict):
            continue
        status = status_of(r.get("status"))
        if status == NOT_RUN:
            continue
        for gpu in _entities(r):
            out.append({"test": name, "category": category, "gpu": gpu, "status": status,
                        "errors": _errors(r), "info": _info(r), "iteration": iteration})
    summary = test.get("test_summary")
    if isinstance(summary, dict):
        status = status_of(summary.get("status"))
        if status not in (PASS, SKIP, NOT_RUN) and not any(o["status"] == status for o in out):
            out.append({"test": name, "category": category, "gpu": ALL, "status": status,
                        "errors": _errors(summary), "info": _info(summary), "iteration": iteration})
    return out


def _one(doc: Any, iteration: Optional[int] = None) -> Dict[str, Any]:
    if not isinstance(doc, dict):
        raise BadOutput("not a JSON object")
    found = [(key, fmt) for key, fmt in ROOTS if isinstance(doc.get(key), dict)]
    if not found:
        raise BadOutput("no \"DCGM Diagnostic\" or \"DCGM GPU Diagnostic\" object")
    key, fmt = found[0]
    root = doc[key]
    meta = _dict(doc, "metadata")
    version = root.get("version", doc.get("version", meta.get("version")))
    driver = doc.get("Driver Version Detected", meta.get("Driver Version Detected"))
    results: List[Dict[str, Any]] = []
    out: Dict[str, Any] = {"format": fmt, "version": clean(version) or None, "driver": clean(driver) or None,
           "runtime_error": clean(root["runtime_error"]) if root.get("runtime_error") is not None else None,
           "gpus": _listed_gpus(doc), "results": results}
    categories = root.get("test_categories")
    if categories is None and out["runtime_error"] is None:
        raise BadOutput("no test_categories and no runtime_error")
    for cat in categories if isinstance(categories, list) else []:
        if not isinstance(cat, dict):
            continue
        for test in _list(cat, "tests"):
            if isinstance(test, dict):
                results.extend(_results_of(test, clean(cat.get("category")), iteration))
    return out


def _listed_gpus(doc: Dict[str, Any]) -> List[str]:
    """The GPUs the document lists: 4.x ``entity_groups`` of group GPU; 3.x "GPU Device IDs"
    (one device id per GPU, in GPU order)."""
    groups = doc.get("entity_groups")
    if isinstance(groups, list):
        ids = []
        for g in groups:
            if isinstance(g, dict) and (g.get("entity_group") == "GPU" or _int(g.get("entity_group_id")) == 1):
                for e in _list(g, "entities"):
                    if isinstance(e, dict) and _int(e.get("entity_id")) is not None:
                        ids.append(str(_int(e["entity_id"])))
        return ids
    devs = doc.get("GPU Device IDs")
    return [str(i) for i in range(len(devs))] if isinstance(devs, list) else []


def parse(text: str) -> Dict[str, Any]:
    """dcgmi's output as {"format", "version", "driver", "runtime_error", "gpus", "results",
    "iterations"}; ``BadOutput`` when it is not a document DCGM writes."""
    doc = _document(text)
    if isinstance(doc, dict) and isinstance(doc.get("iterations"), list):
        runs = [_one(d, i + 1) for i, d in enumerate(doc["iterations"]) if d is not None]
        if not runs:
            raise BadOutput("no iteration in \"iterations\"")
        first = dict(runs[0])
        first["results"] = [r for run in runs for r in run["results"]]
        errors = [run["runtime_error"] for run in runs if run["runtime_error"]]
        if doc.get("warning") is not None:
            errors.append(clean(doc["warning"]))
        first["runtime_error"] = "; ".join(errors) or None
        first["iterations"] = len(runs)
        return first
    one = _one(doc)
    one["iterations"] = 1
    return one
