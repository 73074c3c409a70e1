"""Helpers shared by tests/test_report*.py (no tests here): log trees, a recording terminal."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

from remote.output.term import Terminal

FIXTURES = Path(__file__).parent / "fixtures" / "report"
REPO = Path(__file__).resolve().parents[1]


def fleet_copy(tmp_path: Path) -> Path:
    """A private copy of the hand-made fleet tree (see fixtures/report/README.md)."""
    dest = tmp_path / "logs"
    shutil.copytree(FIXTURES / "fleet", dest)
    return dest


def seed_log(models: dict[str, float], label: str | None = "PyTorch") -> str:
    """A log as the original article's bench_all.sh prints it."""
    lines = [f"#head;{label}"] if label else []
    for model, ms in models.items():
        lines += [f"Start {model}", f"Model {model}: elapsed time {ms:.2f} ms",
                  f"#{model};{ms:f}", "Top-5 results", "  610 5.20%"]
    return "\n".join(lines) + "\n"


def results_json(gpu: str | None, models: dict[str, float] | None = None, **extra) -> str:
    checks = [{"name": "system", "status": "pass", "required": True, "reason": "",
               "elapsed_s": 0.1, "figures": {}}]
    if models:
        checks.append({"name": "bench", "status": "pass", "required": True, "reason": "",
                       "elapsed_s": 1.0, "figures": {"models": {
                           m: {"latency_ms": {"median": v}} for m, v in models.items()}}})
    data = {"schema": 1, "started": "2026-11-22T10:00:00Z", "ok": True,
            "host": {"hostname": "x", "gpu_name": gpu, "gpu_count": 1 if gpu else 0,
                     "device": "cuda" if gpu else "cpu"},
            "checks": checks}
    data.update(extra)
    return json.dumps(data)


def write_run(root: Path, host: str, run: str, log: str | None = None,
              results: str | None = None) -> Path:
    d = root / host / run
    d.mkdir(parents=True, exist_ok=True)
    if log is not None:
        (d / "bench_torch.log").write_text(log)
    if results is not None:
        (d / "results.json").write_text(results)
    return d


def recording_terminal(width: int = 160) -> Terminal:
    """A terminal of `width` columns, without colours, that keeps what is printed."""
    return Terminal(io.StringIO(), width=width, color=False)


def printed(terminal: Terminal) -> str:
    assert isinstance(terminal.stream, io.StringIO)
    return terminal.stream.getvalue()
