"""What a fabric run leaves: `fabric.json` in each node's run folder, the matrix of pairs as
text and as an HTML heat map (suspects named), a row per node for the recap, `--json` and
`--junit` (the engine's `HostResult`, so the same writers serve), and the Prometheus textfile.

Names and figures come from the run itself (the inventory's names, the parsed figures); a
tool's error text came from a node and is shown escaped.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from jinja2 import Environment

from ..engine.results import HostResult, Outcome, StepResult, StepStatus
from ..ground.fileio import write_atomic
from ..ground.runfolder import FABRIC_RECORD, run_dir
from ..output.prometheus import Metric, write_metrics
from ..output.term import escaped, printable
from .verdict import PairResult, Verdict


def _cell(pair: Optional[PairResult]) -> str:
    if pair is None:
        return "."
    if not pair.measured:
        return "?"
    if pair.value is None:
        return "FAIL"
    return f"{pair.value:.3g}{'*' if pair.slow else ''}"


def _matrix(verdict: Verdict) -> dict[tuple[str, str], PairResult]:
    return {(p.client, p.server): p for p in verdict.pairs}


def matrix_text(verdict: Verdict, nodes: list[str]) -> str:
    """Rows send, columns receive; `*` a slow pair, FAIL a failed one, `?` one not measured,
    `.` not paired."""
    cells = _matrix(verdict)
    units = sorted({f"{p.tool} in {p.unit}" for p in verdict.pairs if p.tool != "-"})
    width = max([len(n) for n in nodes] + [7])  # "0.0901*"
    lines = [f"fabric matrix ({'; '.join(units) or 'no tool'}): row sends, column receives; "
             "* slow, FAIL failed, ? not measured, . not paired",
             " " * width + " " + " ".join(n.rjust(width) for n in nodes)]
    for row in nodes:
        lines.append(row.ljust(width) + " " + " ".join(
            ("-" if row == col else _cell(cells.get((row, col)))).rjust(width) for col in nodes))
    for tool, how in verdict.references.items():
        lines.append(f"{tool}: slow when {how}")
    for node in verdict.suspect_nodes:
        lines.append(f"SUSPECT NODE {node}: {verdict.reasons.get(node, '')}")
    for a, b in verdict.suspect_links:
        lines.append(f"SUSPECT LINK {a} <-> {b}: slow or failed while both nodes are fast "
                     "with other partners")
    if not verdict.suspect_nodes and not verdict.suspect_links:
        lines.append("no suspect: every pair within its bound")
    for node, why in verdict.disagreeing.items():
        lines.append(printable(f"FIGURES DISAGREE {node}: {why}; its pairs are judged by the "
                               "lower figure"))
    for said in verdict.disagreements:
        lines.append(printable(f"FIGURES DISAGREE: {said}; the pair is judged by the lower"))
    for pair in verdict.pairs:
        if not pair.measured:
            lines.append(printable(f"{pair.client} -> {pair.server}: {pair.error}"))
        elif pair.value is None:
            lines.append(printable(f"failed {pair.client} -> {pair.server}: {pair.error}"))
    return "\n".join(lines) + "\n"


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gpuprov fabric {{ run_id }}</title>
<style>
body { font-family: DejaVu Sans, Arial, sans-serif; margin: 24px; color: #222; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f0f0f0; } td.none { background: #fafafa; color: #aaa; text-align: center; }
td.fail { background: #b00; color: #fff; font-weight: bold; text-align: center; }
.suspect { color: #b00; font-weight: bold; } .small { font-size: 12px; color: #555; }
</style></head><body>
<h1>gpuprov fabric, run {{ run_id }}</h1>
<p class="small">Row sends, column receives. Colour: the pair's figure against the bound below
which its tool's pairs are slow (red below it, yellow at it, green at twice it or more); a slow
pair is marked *.</p>
{% if suspects or links %}<ul>
{% for node, why in suspects %}<li class="suspect">suspect node {{ node }}: {{ why }}</li>{% endfor %}
{% for a, b in links %}<li class="suspect">suspect link {{ a }} &harr; {{ b }}</li>{% endfor %}
</ul>{% else %}<p>No suspect: every pair within its bound.</p>{% endif %}
{% if disagree %}<ul>{% for line in disagree %}
<li class="suspect">figures disagree: {{ line }}</li>{% endfor %}</ul>{% endif %}
<table><tr><th></th>{% for col in nodes %}
<th{% if col in suspect_names %} class="suspect"{% endif %}>{{ col }}</th>{% endfor %}</tr>
{% for row in rows %}<tr><th{% if row.name in suspect_names %} class="suspect"{% endif %}>{{ row.name }}</th>
{% for cell in row.cells %}{% if cell.kind == "none" %}<td class="none">{{ cell.text }}</td>
{% elif cell.kind == "fail" %}<td class="fail" title="{{ cell.title }}">FAIL</td>
{% else %}<td style="background: {{ cell.colour }}" title="{{ cell.title }}">{{ cell.text }}</td>{% endif %}
{% endfor %}</tr>
{% endfor %}</table>
<ul class="small">{% for tool, how in references %}<li>{{ tool }}: slow when {{ how }}</li>{% endfor %}</ul>
</body></html>
"""


def _colour(ratio: float) -> str:
    """Red (far below the reference) through yellow to green (at or above it)."""
    ratio = max(0.0, min(1.0, ratio))
    red = 255 if ratio < 0.5 else int(255 * (1 - ratio) * 2)
    green = int(255 * min(1.0, ratio * 2))
    return f"rgb({red}, {green}, 80)"


def matrix_html(verdict: Verdict, nodes: list[str], run_id: str) -> str:
    cells = _matrix(verdict)
    rows = []
    for row in nodes:
        out: list[dict[str, Any]] = []
        for col in nodes:
            pair = None if row == col else cells.get((row, col))
            if pair is None or not pair.measured:
                out.append({"kind": "none", "text": "-" if row == col else "?" if pair else "."})
            elif pair.value is None:
                out.append({"kind": "fail", "title": escaped(pair.error)})
            else:
                cut = verdict.cuts.get((pair.tool, pair.round))
                ratio = pair.value / cut / 2 if cut else 1.0  # 0.5 at the cut, 1 at twice it
                out.append({"kind": "value", "text": _cell(pair), "colour": _colour(ratio),
                            "title": f"{pair.tool}: {pair.value:.4g} {pair.unit}, round "
                                     f"{pair.round}"})
        rows.append({"name": row, "cells": out})
    env = Environment(autoescape=True)
    return env.from_string(_PAGE).render(
        run_id=run_id, nodes=nodes, rows=rows,
        suspects=[(n, escaped(verdict.reasons.get(n, ""))) for n in verdict.suspect_nodes],
        links=verdict.suspect_links, suspect_names=set(verdict.suspect_nodes),
        disagree=[f"{n}: {why}" for n, why in verdict.disagreeing.items()]
        + verdict.disagreements,
        references=sorted(verdict.references.items()))


def node_record(verdict: Verdict, node: str, run_id: str) -> dict[str, Any]:
    """A node's `fabric.json`: its pairs (sent and received), figures, tools, its verdict."""
    return {"node": node, "run": run_id, "verdict": verdict.nodes.get(node, "not measured"),
            "reason": verdict.reasons.get(node) or None,
            "disagrees": verdict.disagreeing.get(node),
            "suspect_links": [list(link) for link in verdict.suspect_links if node in link],
            "references": verdict.references,
            "pairs": [p.to_json() for p in verdict.pairs if node in p.nodes()]}


def write_node_records(verdict: Verdict, nodes: list[str], logs_dir: Path, run_id: str) -> None:
    for node in nodes:
        folder = run_dir(logs_dir, node, run_id)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / FABRIC_RECORD,
                     json.dumps(node_record(verdict, node, run_id), indent=2) + "\n")


def host_results(verdict: Verdict, nodes: list[str]) -> dict[str, HostResult]:
    """A row per node, a step per pair it sent in (its received pairs are its partners'
    steps), and the node's verdict as the outcome: what the recap, `--json` and `--junit`
    show."""
    results = {}
    for node in nodes:
        steps = []
        for pair in verdict.pairs:
            if pair.client != node:
                continue
            name = f"{pair.client} -> {pair.server} ({pair.tool})"
            if pair.value is None:
                steps.append(StepResult(name, StepStatus.FAILED, pair.elapsed_s, pair.error))
            else:
                text = f"{pair.value:.4g} {pair.unit}" + (f"; slow: {pair.judged_by}"
                                                           if pair.slow else "")
                status = StepStatus.FAILED if pair.slow else StepStatus.OK
                steps.append(StepResult(name, status, pair.elapsed_s, text))
        state = verdict.nodes.get(node, "not measured")
        text = state + (f": {verdict.reasons[node]}" if verdict.reasons.get(node) else "")
        if node in verdict.disagreeing:
            text += f"; figures disagree: {verdict.disagreeing[node]}"
        results[node] = HostResult(node, steps=steps, elapsed_s=sum(s.elapsed_s for s in steps),
                                   outcome=Outcome("fabric", text, state != "suspect"
                                                   and node not in verdict.disagreeing))
    return results


def json_document(verdict: Verdict, results: dict[str, HostResult], run_id: str,
                  redact: Any, round_seconds: list[float]) -> dict[str, Any]:
    rounds = [{"round": i, "pairs": sum(1 for p in verdict.pairs if p.round == i),
               "seconds": round(took, 3)} for i, took in enumerate(round_seconds, 1)]
    return {"hosts": {n: r.to_json(redact) for n, r in results.items()},
            "fabric": {"run": run_id, "rounds": rounds, **verdict.to_json()}}


def prometheus_metrics(verdict: Verdict, run_id: str) -> list[Metric]:
    """Each pair's figure and verdict, and each node's suspect flag."""
    value = Metric("gpuprov_fabric_pair_value", "the pair's figure in the tool's unit",
                   ("client", "server", "tool", "unit"))
    good = Metric("gpuprov_fabric_pair_ok", "1 when the pair was measured and not slow",
                  ("client", "server", "tool"))
    suspect = Metric("gpuprov_fabric_node_suspect", "1 when the node is a suspect of the run",
                     ("node", "run"))
    link = Metric("gpuprov_fabric_link_suspect", "1 for each suspect link of the run",
                  ("a", "b", "run"))
    disagree = Metric("gpuprov_fabric_node_disagrees", "1 when the node's figures disagree with "
                      "every partner's", ("node", "run"))
    for pair in verdict.pairs:
        if pair.value is not None:
            value.set((pair.client, pair.server, pair.tool, pair.unit), pair.value)
        good.set((pair.client, pair.server, pair.tool), 1 if pair.measured and not pair.bad else 0)
    for node, state in verdict.nodes.items():
        suspect.set((node, run_id), 1 if state == "suspect" else 0)
    for a, b in verdict.suspect_links:
        link.set((a, b, run_id), 1)
    for node in verdict.nodes:
        disagree.set((node, run_id), 1 if node in verdict.disagreeing else 0)
    return [value, good, suspect, link, disagree]


def write_prometheus(path: Path, verdict: Verdict, run_id: str) -> None:
    """`prometheus_metrics` for node_exporter's textfile collector, by the one Prometheus
    writer (remote/output/prometheus.py), as `gpuprov report --prometheus`."""
    write_metrics(path, prometheus_metrics(verdict, run_id))
