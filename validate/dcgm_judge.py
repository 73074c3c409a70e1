"""DCGM's results (dcgm_parse) as findings: one per test and GPU, with the operator's action.

- "Fail": the finding fails the check; its action is the worst that DCGM's error codes name
  (dcgm_errors.action), else dcgm_errors.FALLBACK.  An error whose code or severity names
  ``none`` (persistence mode off: DCGM_ERROR_CONFIG) still fails: DCGM failed the test, and
  dcgmi exits non-zero for it; the line says what to set.
- "Warn" (nvvs's own word; dcgmi writes a warning as "Fail"): a note with the code's action,
  a warning of the check; an action of reset or worse is deferred (actions.deferred).
- "Skip": a note (action none); a run where every test skipped checked nothing.
- "Pass": a note (action none).
- A status word we do not know fails, with no action named: never read as a pass.

Standard library only.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from . import actions
from . import dcgm_errors as errors
from . import dcgm_parse as parse

ERRORS_SHOWN = 3  # chosen: a finding names at most this many of DCGM's errors, and counts the rest


def where(r: Dict[str, Any]) -> str:
    gpu = r["gpu"]
    who = "all GPUs" if gpu == parse.ALL else ("GPU %s" % gpu if gpu[:1].isdigit() or gpu == "?" else gpu)
    it = " (iteration %d)" % r["iteration"] if r.get("iteration") and r["iteration"] > 1 else ""
    return "%s: %s%s" % (who, r["test"], it)


def _error_text(e: Dict[str, Any]) -> str:
    code = "" if e["code"] is None else " [%s]" % errors.name(e["code"])
    return "%s%s" % (e["text"] or "no message", code)


def action_of(r: Dict[str, Any]) -> Optional[str]:
    """The worst action DCGM's errors of one result name; without a code, the code of the test's
    name (errors.BY_TEST_NAME); None when none names one."""
    found = actions.worst(errors.action(e["code"], e["severity"]) for e in r["errors"])
    if found is None and not any(e["code"] is not None for e in r["errors"]):
        code = errors.BY_TEST_NAME.get(r["test"].strip().lower())
        found = errors.action(code) if code is not None else None
    return found


def finding(r: Dict[str, Any]) -> Dict[str, Any]:
    """{"what", "action", "fails", "gpu", "test", "status"} of one parsed result."""
    status = r["status"]
    shown = "; ".join(_error_text(e) for e in r["errors"][:ERRORS_SHOWN])
    more = len(r["errors"]) - ERRORS_SHOWN
    if more > 0:
        shown += "; %d more" % more
    what = "%s: %s%s" % (where(r), status if not status.startswith("unknown") else "status " + status,
                         ": " + shown if shown else "")
    if status == parse.FAIL:
        act: Optional[str] = action_of(r) or errors.FALLBACK
        fails = True
    elif status == parse.WARN:
        act, fails = action_of(r) or actions.NONE, False
    elif status in (parse.PASS, parse.SKIP):
        act, fails = actions.NONE, False
    else:
        act, fails = None, True
    return {"what": what, "action": act, "fails": fails, "gpu": r["gpu"], "test": r["test"], "status": status}


def per_gpu(found: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """{gpu: {"action": the worst failing action or None, "fail", "warn", "skip", "pass"}}."""
    out: Dict[str, Dict[str, Any]] = {}
    for f in found:
        row = out.setdefault(f["gpu"], {"action": None, "fail": 0, "warn": 0, "skip": 0, "pass": 0})
        key = f["status"] if f["status"] in ("fail", "warn", "skip", "pass") else "fail"
        row[key] += 1
        if f["fails"]:
            row["action"] = actions.worst([row["action"], f["action"]])
    return out


def unreached(doc: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A GPU 4.x lists among its entities (``entity_groups``) with no result at all while other
    GPUs have some: DCGM did not test it.  A failing result of that GPU, with no error code (so
    FALLBACK's action).  3.x's "GPU Device IDs" are not GPU ids (one device id per GPU of the
    run, Diag.cpp at b0ec3c6), so only 4.x's list is held against the results."""
    if doc["format"] != "4.x":
        return []
    tested = set(r["gpu"] for r in doc["results"])
    if not tested - {parse.ALL}:
        return []
    return [{"test": "no result from DCGM for a GPU it lists", "category": "", "gpu": gpu,
             "status": parse.FAIL, "errors": [], "info": [], "iteration": None}
            for gpu in doc["gpus"] if gpu not in tested]


def judge(doc: Dict[str, Any]) -> Dict[str, Any]:
    """{"findings", "gpus", "counts", "checked"} of a parsed document; ``checked``: some test
    ran (passed, failed or warned) rather than every one skipped."""
    found = [finding(r) for r in doc["results"] + unreached(doc)]
    counts = dict((s, sum(1 for f in found if f["status"] == s)) for s in ("pass", "fail", "warn", "skip"))
    counts["unknown"] = len(found) - sum(counts.values())
    checked = any(f["status"] != parse.SKIP for f in found)
    return {"findings": found, "gpus": per_gpu(found), "counts": counts, "checked": checked}
