"""`--junit PATH`: a run as JUnit XML, which CI systems (Jenkins, GitLab, GitHub actions that
read test reports) render: one testsuite per host, one testcase per step and one per validation
check, a failure carrying the reason. The format is the one Jenkins' JUnit plugin and
junitparser read (https://github.com/testmoapp/junitxml); written with the standard library's
ElementTree, text from hosts made printable first (XML 1.0 cannot hold most control
characters).
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from ..ground import runfolder
from ..ground.fileio import write_atomic
from .term import printable

RESULTS_MAX_BYTES = 16 * 1024 * 1024  # as the pull's own cap on results.json (docs/how-to/own-gpu-host.md)


def _text(redact: Callable[[str], str], value: Any) -> str:
    return printable(redact(str(value)))


def _checks(run_dir: Optional[Path]) -> list[dict[str, Any]]:
    """The validation's checks from a pulled results.json; [] when none or not readable
    (it came from the host: anything not a list of named checks is left out)."""
    if run_dir is None:
        return []
    path = run_dir / runfolder.RESULTS
    try:
        if path.stat().st_size > RESULTS_MAX_BYTES:
            return []
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested 100,000 deep
        return []
    checks = data.get("checks") if isinstance(data, dict) else None
    if not isinstance(checks, list):
        return []
    return [c for c in checks if isinstance(c, dict) and isinstance(c.get("name"), str)]


_COUNTED = {"failure": "failures", "error": "errors", "skipped": "skipped"}


class _Suite:
    """One host's <testsuite> and its counts."""

    def __init__(self, root: ET.Element, host: str, title: str, redact: Callable[[str], str]):
        self.redact = redact
        self.element = ET.SubElement(root, "testsuite", name=_text(redact, host))
        self.classname = _text(redact, f"gpuprov.{title}.{host}")
        self.counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}

    def case(self, name: str, seconds: float, kind: str = "", message: str = "") -> None:
        """A testcase; `kind` failure, error or skipped ("" : passed) with `message` why."""
        self.counts["tests"] += 1
        element = ET.SubElement(self.element, "testcase", name=_text(self.redact, name),
                                classname=self.classname, time=f"{max(seconds, 0.0):.3f}")
        if kind:
            self.counts[_COUNTED[kind]] += 1
            child = ET.SubElement(element, kind, message=_text(self.redact, message)[:1000])
            if kind != "skipped":
                child.text = _text(self.redact, message)


def _seconds(value: Any) -> float:
    try:
        return float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0


def _steps(suite: _Suite, result: Any) -> None:
    """The host's own cases: not started, unreachable, each step."""
    if result.not_started:  # a canary rollout stopped before its batch
        suite.case("not started", 0.0, "skipped", f"not started: {result.not_started}")
    if result.unreachable:
        suite.case("connect", result.elapsed_s, "error", result.message or "unreachable")
    for step in result.steps:
        kind = {"failed": "failure", "skipped": "skipped"}.get(str(step.status), "")
        suite.case(step.name, step.elapsed_s, kind, step.message)


def _validation(suite: _Suite, outcome: Any, run_dir: Optional[Path]) -> None:
    """A case per check of the pulled results.json, and the outcome's own when it did not
    count, or failed without a failing check to say why."""
    checks = _checks(run_dir) if outcome is not None else []
    for check in checks:
        status = str(check.get("status", ""))
        kind = {"fail": "failure", "skip": "skipped"}.get(status, "")
        suite.case(f"validate: {check['name']}", _seconds(check.get("elapsed_s")), kind,
                   str(check.get("reason") or status))
    if outcome is not None and outcome.skipped:
        suite.case(outcome.name, 0.0, "skipped", outcome.text)  # it did not count
    elif outcome is not None and not outcome.ok and not any(
            str(c.get("status")) == "fail" for c in checks):
        suite.case(outcome.name, 0.0, "failure", outcome.text)  # not validated: say why


def build(title: str, results: Mapping[str, Any], redact: Callable[[str], str],
          logs_dir: Optional[Path], run_id: str) -> ET.Element:
    """The <testsuites> element of a run; `results` maps host names to the engine's
    HostResult."""
    root = ET.Element("testsuites", name=f"gpuprov {title}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    elapsed = 0.0
    for host, result in results.items():
        suite = _Suite(root, host, title, redact)
        _steps(suite, result)
        run_dir = runfolder.run_dir(logs_dir, host, run_id) if logs_dir is not None else None
        _validation(suite, result.outcome, run_dir)
        log = run_dir / runfolder.PROVISION_LOG if run_dir is not None else None
        if log is not None and log.exists():
            ET.SubElement(suite.element, "system-out").text = f"log: {log}"
        suite.element.set("time", f"{result.elapsed_s:.3f}")
        for key, value in suite.counts.items():
            suite.element.set(key, str(value))
            totals[key] += value
        elapsed = max(elapsed, result.elapsed_s)
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{elapsed:.3f}")
    return root


def write_junit(path: Path, title: str, results: Mapping[str, Any],
                redact: Callable[[str], str], logs_dir: Optional[Path], run_id: str) -> None:
    """Write the run's JUnit XML to `path` atomically."""
    root = build(title, results, redact, logs_dir, run_id)
    ET.indent(root)
    write_atomic(path, '<?xml version="1.0" encoding="utf-8"?>\n'
                 + ET.tostring(root, encoding="unicode") + "\n")
