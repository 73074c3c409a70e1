"""The machine-readable outputs: ``merged.csv`` (row per model, column per host/run),
``drift.csv`` (every stack item flagged, row per host and item) and ``flags.json`` (what was
flagged, and everything it was decided from; of each host's drift, the first
`DRIFT_DETAIL` items; each host's history, and the hosts to quarantine; each node's repairs).
"""
from __future__ import annotations

import csv
import io
import math
import time
from dataclasses import asdict
from json.encoder import encode_basestring_ascii as _json_string
from typing import Any

from .analyse import ModelRatio, Report, Table
from .collect import MISSING
from .drift import DRIFT_CSV, Drift
from .history import FLAP_CHANGES, FLAP_WINDOW, HostHistory
from .repairs import NodeRepairs, Repairs

# Drift items per host in flags.json: every item of an ordinary drift (a torch upgrade by hand
# changes a few dozen wheels) and a bound on a host whose whole stack differs (5,000 packages
# and 5,000 apt packages at most, remote/stack/manifest.py); drift.csv holds them all.
DRIFT_DETAIL = 100


def _csv_value(value: float | None) -> str:
    if value is None:
        return MISSING
    return f"{value:.6f}".rstrip("0").rstrip(".")


# A cell starting with one of these is a formula to a spreadsheet (=HYPERLINK(...), =cmd|...);
# a leading single quote makes it text (OWASP, https://owasp.org/www-community/attacks/CSV_Injection;
# ASVS 5.0 requirement 1.2.10 adds NUL; CWE-1236).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\0")


def csv_text(text: str) -> str:
    """A name from a log as a CSV cell that a spreadsheet shows and never evaluates."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def table_csv(table: Table) -> str:
    """Model names and host/run columns come from the logs, so they are neutralised; the
    values are numbers this code formats, and MISSING is its own marker."""
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=";", lineterminator="\n")
    writer.writerow(["model"] + [csv_text(c.name) for c in table.columns])
    for model in table.models:
        writer.writerow([csv_text(model)] + [_csv_value(table.cell(model, c)) for c in table.columns])
    return buf.getvalue()


def drift_csv(drift: Drift) -> str:
    """Every drift item, row per host and item; what comes from a manifest is neutralised."""
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=";", lineterminator="\n")
    writer.writerow(["host", "run", "what", "name", "value", "majority", "hosts with majority",
                     "hosts"])
    for f in drift.flags:
        writer.writerow([csv_text(f.host), csv_text(f.run_id), f.what, csv_text(f.name),
                         csv_text(f.value), csv_text(f.majority), f.with_majority, f.hosts])
    return buf.getvalue()


def _drift_json(drift: Drift) -> dict[str, Any]:
    """flags.json's `drift` (each host's first DRIFT_DETAIL items) and `drift_hosts` (how many
    items each host has, how many are listed, where all of them are)."""
    listed, hosts = [], []
    for host, mine in drift.by_host().items():
        listed += [{"kind": "drift", **asdict(f)} for f in mine[:DRIFT_DETAIL]]
        hosts.append({"host": host, "run": mine[0].run_id, "items": len(mine),
                      "listed": min(len(mine), DRIFT_DETAIL), "all_in": DRIFT_CSV})
    return {"drift": listed, "drift_hosts": hosts}


def history_json(history: HostHistory, now: float | None = None) -> dict[str, Any]:
    """One host's history: its counts, streak, flapping, quarantine, last validation (its age
    counted to `now`, the report's time) and timeline."""
    verdict, count = history.streak
    last = history.last_validated
    age = history.age_s(now) if now is not None else None
    return {"host": history.host, "runs": history.runs, "passes": history.passes,
            "failures": len(history.failures), "first_failure": history.first_failure,
            "last_failure": history.last_failure,
            "streak": {"verdict": verdict, "runs": count},
            "flapping": history.flapping, "flap_changes": history.flap_changes,
            "quarantined": history.quarantined,
            "without_verdict": len(history.without_verdict),
            "last_validated": None if last is None else {
                "run": last.run_id, "verdict": last.verdict,
                "started": None if last.at is None else _utc(last.at),
                "age_s": None if age is None else round(age)},
            "timeline": [{"run": m.run_id, "verdict": m.verdict,
                          "stack_change": m.stack_change or None,
                          "no_verdict": m.no_verdict or None} for m in history.timeline]}


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def node_repairs_json(node: NodeRepairs) -> dict[str, Any]:
    """One node's repairs: counts by action and outcome, time to repair, the last one, those
    that did not hold, and every record in short (oldest first)."""
    return {"host": node.node, "repairs": len(node.repairs), "by_action": node.by_action(),
            "outcomes": node.outcomes(),
            "time_to_repair_s": {"median": _seconds(node.median_s),
                                 "latest": _seconds(node.latest_s)},
            "did_not_hold": [{"run": d.repair.run_id, "action": d.repair.trigger.action,
                              "failed_run": d.failed_run, "runs_after": d.after}
                             for d in node.did_not_hold],
            "records": [{"run": r.run_id, "trigger_run": r.trigger.run_id,
                         "action": r.trigger.action, "finding": r.trigger.finding,
                         "outcome": r.outcome, "reason": r.reason, "started": _utc(r.started_at),
                         "duration_s": _seconds(r.duration_s),
                         "steps": [s.action for s in r.steps]} for r in node.repairs]}


def repairs_json(repairs: Repairs) -> dict[str, Any]:
    """flags.json's `repairs`: the fleet's figures, then each remediated node's."""
    return {"nodes_remediated": len(repairs.nodes), "nodes_repaired": len(repairs.repaired_nodes),
            "repairs": repairs.count, "median_time_to_repair_s": _seconds(repairs.median_s),
            "coming_back": [n.node for n in repairs.coming_back],
            "nodes": [node_repairs_json(n) for n in repairs.nodes]}


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _ratio(r: ModelRatio, ref_name: str) -> dict[str, Any]:
    """One model's figure against its reference, the reference under `ref_name`."""
    return {"model": r.model, "label": r.label, "ms": r.value, ref_name: r.reference,
            "pct": round(r.pct, 3)}


def _rules_json(report: Report) -> dict[str, Any]:
    """What the report was decided with: its thresholds, history rules and baseline."""
    return {
        "thresholds": {"outlier_pct": report.outlier_pct,
                       "regression_pct": report.regression_pct},
        "history_rules": {"quarantine": {"failed": report.quarantine[0],
                                         "of_last_runs": report.quarantine[1]},
                          "flapping": {"changes": FLAP_CHANGES, "of_last_runs": FLAP_WINDOW},
                          "repair_held": {"of_next_runs": report.repairs.window}},
        "baseline": report.baseline,
    }


def _fleet_json(report: Report) -> dict[str, Any]:
    """The hosts against their peers: the outliers, then every host."""
    return {
        "outliers": [
            {"host": h.host, "run": h.run_id, "gpu": h.gpu, "peers": h.peers,
             "typical_pct": round(h.typical_pct or 0.0, 3), "models": len(h.ratios),
             "worst": _ratio(h.worst, "peers_median_ms") if h.worst else None}
            for h in report.outliers
        ],
        "regressions": [
            {"host": c.host, "run": c.run_id, "baseline": c.base_key,
             **_ratio(r, "baseline_ms")}
            for c, r in report.regressions
        ],
        # every host's peers counted, not named: named, a fleet of N hosts in one GPU group
        # wrote N x (N - 1) names (25 MB of a 1,000-host report); an outlier names them above
        "fleet": [
            {"host": h.host, "run": h.run_id, "gpu": h.gpu, "peers_count": len(h.peers),
             "typical_pct": None if h.typical_pct is None else round(h.typical_pct, 3),
             "slow": h.slow, "models": [_ratio(r, "peers_median_ms") for r in h.ratios]}
            for h in report.fleet
        ],
        "comparisons": [
            {"host": c.host, "run": c.run_id, "baseline": c.base_key,
             "changes": [_ratio(r, "baseline_ms") for r in c.changes]}
            for c in report.comparisons
        ],
    }


def _health_json(report: Report) -> list[dict[str, Any]]:
    """Each host's latest validation: its fields, its failed, skipped and passed checks."""
    return [
        {**{k: v for k, v in asdict(h).items() if k not in ("checks",)},
         "failed": [asdict(c) for c in h.failed],
         "skipped": [asdict(c) for c in h.skipped],
         "passed": [c.name for c in h.passed]}
        for h in report.health
    ]


def _quarantine_json(report: Report) -> list[dict[str, Any]]:
    return [{"kind": "quarantine", "host": h.host, "failed": h.recent_failures,
             "of_last_runs": min(report.quarantine[1], h.runs), "last_failure": h.last_failure}
            for h in report.quarantined]


# flags.json's shape: 2 since `fleet` entries count their peers (`peers_count`) where they
# named them (`peers`)
FLAGS_SCHEMA = 2


def flags_json(report: Report) -> dict[str, Any]:
    """flags.json's document (the module's text says what it holds)."""
    return {
        "schema": FLAGS_SCHEMA,
        "generated": report.generated,
        "logs_dir": str(report.logs_dir),
        **_rules_json(report),
        "flagged": report.flagged,
        "flags": report.flag_lines(),
        "fabric": report.fabric.to_json(),
        "quarantine": _quarantine_json(report),
        **_fleet_json(report),
        "health": _health_json(report),
        **_drift_json(report.drift),
        "stacks": {h: s.run_id for h, s in report.drift.stacks.items()},
        "problems": [asdict(p) for p in report.problems],
        "notes": report.notes,
        "history": [history_json(h, report.now) for h in report.history],
        "repairs": repairs_json(report.repairs),
        "runs": [{"host": r.host, "run": r.run_id, "source": r.source,
                  "gpu": r.gpu_name} for r in report.runs],
    }


# ---------------------------------------------------------------------------------------
# flags.json's text: json.dumps(doc, indent=2, allow_nan=False), byte for byte, faster. With an
# indent, CPython's json (3.11 to 3.13: Lib/json/encoder.py, `c_make_encoder` is used only when
# `indent is None`) encodes in pure Python, a generator per list and object: 1,000 hosts made a
# 25 MB document (each host's peers, one per line) and 2 s of a report's 5. Here the same text is
# joined from strings, a list of strings (the peers) in one `join`, every string by the same
# C function json uses (`encode_basestring_ascii`, ensure_ascii's), every number by its repr.


def indented_json(doc: Any) -> str:
    """`json.dumps(doc, indent=2, allow_nan=False)`: the same text, the same errors (ValueError
    for a float that is not finite, TypeError for what JSON has no form of)."""
    return _json_value(doc, "\n")


def _json_value(value: Any, newline: str) -> str:
    """`value` as JSON, its nested lines starting with `newline` plus two spaces."""
    kind = type(value)
    if kind is str:
        return _json_string(value)
    if kind is dict:
        return _json_object(value, newline)
    if kind is list or kind is tuple:
        return _json_array(value, newline)
    return _json_other(value, newline)


def _json_other(value: Any, newline: str) -> str:
    """What is not exactly a str, dict, list or tuple, in json's order of checks."""
    if isinstance(value, str):
        return _json_string(value)
    if value is None or value is True or value is False:
        return _JSON_CONSTANTS[value]
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _json_float(value)
    if isinstance(value, (list, tuple)):
        return _json_array(value, newline)
    if isinstance(value, dict):
        return _json_object(value, newline)
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


_JSON_CONSTANTS = {None: "null", True: "true", False: "false"}


def _json_float(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError("Out of range float values are not JSON compliant: " + repr(value))
    return float.__repr__(value)


def _json_array(items: Any, newline: str) -> str:
    if not items:
        return "[]"
    inner = newline + "  "
    if all(type(item) is str for item in items):
        parts: Any = map(_json_string, items)
    else:
        parts = [_json_value(item, inner) for item in items]
    return "[" + inner + ("," + inner).join(parts) + newline + "]"


def _json_object(obj: Any, newline: str) -> str:
    if not obj:
        return "{}"
    inner = newline + "  "
    return "{" + inner + ("," + inner).join([
        _json_string(key if type(key) is str else _json_key(key)) + ": " + _json_value(value, inner)
        for key, value in obj.items()]) + newline + "}"


def _json_key(key: Any) -> str:
    """A key that is not exactly a str, as json writes it (its order of checks)."""
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return _json_float(key)
    if key is None or key is True or key is False:
        return _JSON_CONSTANTS[key]
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {key.__class__.__name__}")
