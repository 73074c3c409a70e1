"""The one Prometheus writer: gauges in the text format that node_exporter's textfile collector
reads (https://github.com/prometheus/node_exporter#textfile-collector), written with
prometheus_client's CollectorRegistry and write_to_textfile, which writes a temporary file and
renames it, so the collector never reads half a file. `gpuprov report --prometheus` and
`gpuprov fabric --prometheus` build their `Metric`s and hand them here. Label values are
whatever the text is (prometheus_client escapes them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable


@dataclass
class Metric:
    """One gauge: its name (https://prometheus.io/docs/practices/naming/), help text, label
    names, and a value per label tuple in the order first set."""

    name: str
    help: str
    labels: tuple[str, ...]
    samples: dict[tuple[str, ...], float] = field(default_factory=dict)

    def set(self, labels: tuple[str, ...], value: float) -> None:
        self.samples[labels] = value


def write_metrics(path: Path, metrics: Iterable[Metric]) -> None:
    """Write `metrics` to `path`, atomically (prometheus_client imported only here and now)."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    registry = CollectorRegistry()
    for metric in metrics:
        gauge = Gauge(metric.name, metric.help, list(metric.labels), registry=registry)
        for labels, value in metric.samples.items():
            gauge.labels(*labels).set(value)
    write_to_textfile(str(path), registry)
