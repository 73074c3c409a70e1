"""The gauges of the host checks (validate/checks/host_*.py, issue 45) and of every check's
findings, for `gpuprov report --prometheus` (remote/report/prometheus.py): the figures an alert
acts on, read from each host's latest results.json. What a host sends is untrusted: a figure of
the wrong type is left out, numbers that are not finite too, labels are whatever the text is
(prometheus_client escapes them). Names follow https://prometheus.io/docs/practices/naming/
(base units: bytes per second, a ratio for a fill).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

from ..output.prometheus import Metric
from .collect import num


def _finite(value: Any) -> Optional[float]:
    number = num(value)
    return number if number is not None and math.isfinite(number) else None


def _rows(value: Any) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


class HostMetrics:
    """Findings per check and action, and the host checks' own figures."""

    def __init__(self) -> None:
        self.findings = Metric("gpuprov_check_findings", "failing findings of the check in the host's latest "
                               "validation, per action (validate/actions.py)", ("host", "check", "action"))
        self.fill = Metric("gpuprov_host_filesystem_used_ratio", "used / (used + available) of a file "
                           "system the host_fill check read (its threshold: validate/checks/host_floors.py)",
                           ("host", "path"))
        self.scratch = Metric("gpuprov_host_scratch_bytes_per_second", "fio sequential throughput of the "
                              "scratch file system (host_scratch)", ("host", "path", "direction"))
        self.mount = Metric("gpuprov_host_mount_writable", "1 when a mount the profile names is mounted "
                            "and takes a write (host_mounts), else 0", ("host", "path"))
        self.edac = Metric("gpuprov_host_memory_errors", "EDAC memory errors since boot per controller "
                           "(host_memory)", ("host", "controller", "kind"))
        self.clock = Metric("gpuprov_host_clock_synchronized", "1 when the time daemon says the clock is "
                            "synchronised (host_clock), else 0", ("host", "daemon"))
        self.service = Metric("gpuprov_host_service_running", "1 when a service the profile names runs "
                              "(host_services), else 0", ("host", "service"))
        self.by_check: dict[str, Callable[[str, dict[str, Any]], None]] = {
            "host_fill": self._fill, "host_scratch": self._scratch, "host_mounts": self._mounts,
            "host_memory": self._memory, "host_clock": self._clock, "host_services": self._services}

    def metrics(self) -> list[Metric]:
        return [self.findings, self.fill, self.scratch, self.mount, self.edac, self.clock, self.service]

    def check(self, host: str, check: dict[str, Any]) -> None:
        name = check["name"]
        counts: dict[str, int] = {}
        for f in _rows(check.get("findings")):
            if f.get("fails") is True and isinstance(f.get("action"), str):
                counts[f["action"]] = counts.get(f["action"], 0) + 1
        for action, n in counts.items():
            self.findings.set((host, name, action), n)
        figures = check.get("figures")
        reader = self.by_check.get(name)
        if reader is not None and isinstance(figures, dict):
            reader(host, figures)

    def _fill(self, host: str, figures: dict[str, Any]) -> None:
        for fs in _rows(figures.get("filesystems")):
            pct = _finite(fs.get("used_pct"))
            if pct is not None and isinstance(fs.get("path"), str):
                self.fill.set((host, fs["path"]), pct / 100.0)

    def _scratch(self, host: str, figures: dict[str, Any]) -> None:
        path = figures.get("path")
        for direction in ("write", "read"):
            mbs = _finite(figures.get(direction + "_mbs"))
            if mbs is not None and isinstance(path, str):
                self.scratch.set((host, path, direction), mbs * 1e6)

    def _mounts(self, host: str, figures: dict[str, Any]) -> None:
        for m in _rows(figures.get("mounts")):
            if isinstance(m.get("path"), str):
                self.mount.set((host, m["path"]), 1 if m.get("writable") is True else 0)

    def _memory(self, host: str, figures: dict[str, Any]) -> None:
        for mc in _rows(figures.get("edac")):
            for kind, key in (("corrected", "ce"), ("uncorrected", "ue")):
                count = _finite(mc.get(key))
                if count is not None and isinstance(mc.get("mc"), str):
                    self.edac.set((host, mc["mc"], kind), count)

    def _clock(self, host: str, figures: dict[str, Any]) -> None:
        if isinstance(figures.get("daemon"), str) and isinstance(figures.get("synced"), bool):
            self.clock.set((host, figures["daemon"]), 1 if figures["synced"] else 0)

    def _services(self, host: str, figures: dict[str, Any]) -> None:
        states = figures.get("services")
        for name, state in (states.items() if isinstance(states, dict) else []):
            if isinstance(name, str):
                self.service.set((host, name), 1 if state in ("active", "running") else 0)
