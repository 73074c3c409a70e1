"""`validate --distributed --prometheus PATH`: each node's part in the job, from its
`distributed.json`, as gauges for node_exporter's textfile collector by the one Prometheus
writer (remote/output/prometheus.py). Names follow https://prometheus.io/docs/practices/naming/
(base units: bytes per second, not GB/s)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ..ground.runfolder import DISTRIBUTED_RECORD, run_dir
from ..output.prometheus import Metric, write_metrics


def read_records(logs: Path, nodes: list[str], run_id: str) -> dict[str, dict[str, Any]]:
    """The records this run wrote (the control side's own files), by node; a node without one
    (not in the job) is left out."""
    out = {}
    for node in nodes:
        path = run_dir(logs, node, run_id) / DISTRIBUTED_RECORD
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            out[node] = doc
    return out


def _busbw(record: dict[str, Any]) -> Optional[float]:
    sizes = record.get("sizes") or []
    return float(max(sizes, key=lambda r: r["bytes"])["busbw_gbs"]) * 1e9 if sizes else None


def prometheus_metrics(records: dict[str, dict[str, Any]], run_id: str) -> list[Metric]:
    ok = Metric("gpuprov_distributed_ok", "1 when the node's multi-node job passed (validate "
                "--distributed), else 0", ("node", "run"))
    named = Metric("gpuprov_distributed_node_named", "1 when the job failed and named this node "
                   "(never joined, never answered, version skew)", ("node", "run"))
    busbw = Metric("gpuprov_distributed_busbw_bytes_per_second", "the job's all-reduce bus "
                   "bandwidth at its largest size", ("node", "run", "backend"))
    train = Metric("gpuprov_distributed_train_match", "1 when the training step matched the "
                   "one-process reference", ("node", "run"))
    for node, rec in records.items():
        ok.set((node, run_id), 1.0 if rec.get("ok") else 0.0)
        named.set((node, run_id), 1.0 if rec.get("this_node") else 0.0)
        value = _busbw(rec)
        if value is not None:
            busbw.set((node, run_id, str(rec.get("backend"))), value)
        if isinstance(rec.get("train"), dict):
            train.set((node, run_id), 1.0 if rec["train"].get("match") else 0.0)
    return [ok, named, busbw, train]


def write_prometheus(path: Path, logs: Path, nodes: list[str], run_id: str) -> None:
    write_metrics(path, prometheus_metrics(read_records(logs, nodes, run_id), run_id))
