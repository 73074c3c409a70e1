"""The printed report (terminal and ``report.txt``): flags first, then bad logs, notes, the
fleet, health, and the merged table split into parts that fit the width.

`render` returns lines of styled segments and `paint` turns them into text: colours only when
asked for (a terminal), and every string made printable on the way, so a name or a message
from a host's log can never drive the terminal or forge lines of the report.
"""
from __future__ import annotations

from typing import List, Tuple

from validate.shared import NOTHING_COUNTED

from ..ground.repairs import LEFT_OUT
from ..output.term import cells, printable_line
from ..output.term import paint as paint_text
from .analyse import SPEC_KEYS, CheckRow, Column, HostHealth, Report, SpecFigure, has_label
from .collect import MISSING, fmt_ms, problems_shown
from .containers import STACK, ContainerRow, container_rows
from .history import FAIL, PASS, HostHistory, Mark, format_age
from .repairs import Repairs, hold_line, shown

Segment = Tuple[str, str]  # (text, style); style "" or a style of remote.output.term
Line = List[Segment]

LATENCY_TITLE = "Batch-1 latency, ms (row per model, column per host/run)"
TIMELINE_RUNS = 30  # a failing host's latest runs drawn on its detail line
TIMELINE_SIGNS = {PASS: "P", FAIL: "F"}  # any other verdict: "." (no verdict)
NO_VERDICT_SIGN = "X"  # a validation started that gave no verdict: a failure (history.Mark)
NO_VERDICT_LEGEND = f"{NO_VERDICT_SIGN} fail: started, no verdict, "  # shown where one is


def timeline_sign(mark: Mark) -> str:
    if mark.verdict == FAIL and mark.no_verdict:
        return NO_VERDICT_SIGN
    return TIMELINE_SIGNS.get(mark.verdict, ".")


def paint(lines: list[Line], color: bool) -> str:
    """The lines as text, each segment made printable (one line each) and coloured if asked."""
    return "".join("".join(paint_text(_one_line(text), style, color) for text, style in line)
                   .rstrip(" ") + "\n" for line in lines)


def _one_line(text: str) -> str:
    """`printable_line(text)`; a text str.isprintable() finds nothing to hide in (no control,
    format, surrogate or separator character but the space: a superset of what printable_line
    replaces) is itself, found at C speed: a 1,000-node report paints 400,000 segments."""
    return text if text.isprintable() else printable_line(text)


# The terminal's merged table in at most this many parts; a wider one (1,000 runs made 500
# parts, 4,500 lines) is named with where to read it: report.txt, merged.csv, report.html.
TERMINAL_TABLE_PARTS = 4


def render(report: Report, width: int, max_table_parts: int | None = None,
           sections: list[Line] | None = None) -> list[Line]:
    """The report as lines: flags first, then bad logs, fleet, health, the merged table (in at
    most ``max_table_parts`` parts, else a line that says where the whole table is).
    ``sections``: `report_sections(report)` made already (they do not depend on the width: the
    terminal and report.txt share them)."""
    lines = _head(report, width) + (report_sections(report) if sections is None else sections)
    lines.append([])
    return lines + _latency(report, width, max_table_parts)


def _head(report: Report, width: int) -> list[Line]:
    """The title, what is compared, the flags, the bad logs and the notes."""
    n_hosts = len({r.host for r in report.runs})
    lines: list[Line] = [_rule(f"gpuprov report: {report.logs_dir}", width), [(
        f"{_plural(len(report.runs), 'run')} on {_plural(n_hosts, 'host')}; "
        f"slow host: > {report.outlier_pct:g}% vs GPU-group peers; regression: > "
        f"{report.regression_pct:g}% vs "
        + (f"baseline {report.baseline}" if report.baseline else "previous run"), "")], []]
    flags = report.flag_lines()
    if flags:
        lines.append([(f"FLAGS ({len(flags)})", "bold red")])
        lines += [[("  " + flag, "red")] for flag in flags]
    else:
        lines.append([("FLAGS: none (no slow host, no regression)", "bold green")])
    if report.problems:
        lines += [[], [(f"SKIPPED / BAD LOGS ({len(report.problems)})", "bold yellow")]]
        lines += [[(f"  {p}", "yellow")] for p in problems_shown(report.problems)]
    if report.notes:
        lines.append([])
        lines += [[(f"note: {note}", "dim")] for note in report.notes]
    return lines


def report_sections(report: Report) -> list[Line]:
    """Each section the report has something for: fleet, history, health, containers,
    fabric, distributed jobs."""
    lines: list[Line] = []
    if report.fleet:
        lines += [[], [("Fleet: latest run vs GPU-group peers", "")]] + _fleet_table(report)
    if report.history:
        lines += [[], [("History (every run per host; hosts with failures in detail)", "")]]
        lines += _history_table(report.history, report.now)
    if report.repairs.nodes:
        lines += [[], [(f"Repairs (gpuprov remediate, per node; did not hold: a failed run within "
                        f"its next {report.repairs.window} runs)", "")]]
        lines += repairs_table(report.repairs)
    if report.health:
        lines += [[], [("Health (latest results.json per host)", "")]] + _health_table(report)
    containers = container_rows(report.runs)
    if containers:
        lines += [[], [("Containers (latest validation in one per host): the stack inside beside "
                        "the host's own", "")]]
        lines += container_table(containers)
    if report.fabric.nodes:
        lines += [[], [(f"Fabric (newest gpuprov fabric run, {report.fabric.run_id})", "")]]
        lines += plain_table(["node", "verdict", "why"], [
            [[(n.host, "")], [(n.verdict, "bold red" if n.verdict == "suspect" else "")],
             [(n.reason or "-", "")]] for n in report.fabric.nodes], right=set())
    if report.distributed:
        lines += [[], [("Distributed jobs (validate --distributed), newest first", "")]]
        lines += plain_table(["run", "nodes", "verdict", "backend", "busbw (largest size)",
                              "training step", "nodes named"],
                             [[[(cell, "bold red" if cell == "FAILED" else "")]
                               for cell in job.row()] for job in report.distributed],
                             right={1})
    return lines


def _latency(report: Report, width: int, max_table_parts: int | None) -> list[Line]:
    """The merged latency table in parts that fit `width`, or the line that says where it is."""
    chunks = _column_chunks(report, width)
    if max_table_parts is not None and len(chunks) > max_table_parts:
        return [[(f"{LATENCY_TITLE}: {_plural(len(report.table.columns), 'column')} x "
                  f"{_plural(len(report.table.models), 'model')}, {len(chunks)} parts at this "
                  "width: the whole table is in report.txt, merged.csv and report.html", "")]]
    lines: list[Line] = []
    for title, table in latency_tables(report, width, chunks):
        lines.append([(title, "")])
        lines += table
    lines.append([("red column: slow host; red value: regression", "dim")])
    return lines


def container_table(rows: list[ContainerRow]) -> list[Line]:
    """Host, image, runtime, digest, then each stack part as `container | host`; a part that
    differs is marked (yellow, with `!=`)."""
    def part(row: ContainerRow, key: str) -> Line:
        differs = row.differs(key)
        return [(f"{row.inside[key]} {'!=' if differs else '|'} {row.outside[key]}",
                 "yellow" if differs else "")]
    return plain_table(["host", "image", "runtime", "digest"] + [f"{k}\ncontainer | host" for k in STACK],
                       [[[(r.host, "")], [(r.image, "")], [(r.runtime, "")], [(r.digest, "dim")]]
                        + [part(r, k) for k in STACK] for r in rows], right=set())


def _rule(title: str, width: int) -> Line:
    """A horizontal line across `width` with `title` in its middle."""
    title = f" {title} "
    side = max(0, width - _width([(title, "")]))
    return [("─" * (side // 2) + title + "─" * (side - side // 2), "")]


def _width(cell: Line) -> int:
    return sum(_text_width(text) for text, _style in cell)


def _text_width(text: str) -> int:
    """`cells(printable_line(text))`: a printable ASCII text is as wide as it is long."""
    if text.isascii() and text.isprintable():
        return len(text)
    return cells(printable_line(text))


def _pad(cell: Line, width: int, right: bool) -> Line:
    fill = " " * (width - _width(cell))
    return [(fill, "")] + cell if right else cell + [(fill, "")]


def plain_table(header: list[str], rows: list[list[Line]], right: set[int]) -> list[Line]:
    """Columns two spaces apart, a header cell's lines aligned at the bottom, numbers (the
    columns in `right`) aligned on the right."""
    heads = [h.split("\n") for h in header]
    height = max(len(h) for h in heads)
    heads = [[""] * (height - len(h)) + h for h in heads]
    widths = [max([cells(line) for line in heads[i]] + [_width(row[i]) for row in rows])
              for i in range(len(header))]
    out: list[Line] = []
    for n in range(height):
        out.append(_joined([_pad([(heads[i][n], "")], w, i in right)
                            for i, w in enumerate(widths)], [("  ", "")]))
    for row in rows:
        out.append(_joined([_pad(cell, w, i in right) for i, (cell, w) in
                            enumerate(zip(row, widths))], [("  ", "")]))
    return out


def boxed_table(header: list[list[Line]], rows: list[list[Line]], right: set[int]) -> list[Line]:
    """A table in box-drawing characters, heavy above the header's rule: rows of models
    read across many columns of numbers. Header cells may hold several lines (bottom-aligned)."""
    height = max(len(h) for h in header)
    header = [[[] for _ in range(height - len(h))] + h for h in header]
    widths = [max([_width(line) for line in header[i]] + [_width(row[i]) for row in rows])
              for i in range(len(header))]

    def rule(left: str, mid: str, end: str, fill: str) -> Line:
        return [(left + mid.join(fill * (w + 2) for w in widths) + end, "")]

    def row_line(row: list[Line], bar: str) -> Line:
        padded = [[(" ", "")] + _pad(cell, w, i in right) + [(" ", "")]
                  for i, (cell, w) in enumerate(zip(row, widths))]
        return [(bar, "")] + _joined(padded, [(bar, "")]) + [(bar, "")]

    out = [rule("┏", "┳", "┓", "━")]
    out += [row_line([header[i][n] for i in range(len(header))], "┃") for n in range(height)]
    out.append(rule("┡", "╇", "┩", "━"))
    out += [row_line(row, "│") for row in rows]
    out.append(rule("└", "┴", "┘", "─"))
    return out


def _joined(parts: list[Line], separator: Line) -> Line:
    out: Line = []
    for i, part in enumerate(parts):
        out += (separator if i else []) + part
    return out


def _fleet_table(report: Report) -> list[Line]:
    rows: list[list[Line]] = []
    for h in report.fleet:
        worst = h.worst
        host: Line = [(h.host, "")] + ([(" SLOW", "bold red")] if h.slow else [])
        typical = MISSING if h.typical_pct is None else f"{h.typical_pct:+.1f}%"
        rows.append([host, [(h.gpu, "")], [(h.run_id, "")], [(str(len(h.peers)), "")],
                     [(str(len(h.ratios)), "")], [(typical, "bold red" if h.slow else "")],
                     [(f"{worst.name} {worst.pct:+.1f}%" if worst else MISSING, "")]])
    return plain_table(["host", "GPU group", "run", "peers", "models", "typical", "worst model"],
                       rows, right={3, 4, 5})


def _health_table(report: Report) -> list[Line]:
    rows: list[list[Line]] = []
    for h in report.health:
        result = "ok" if h.ok else ("FAIL" if h.ok is False else "?")
        counts: Line = [(f"{len(h.passed)}/", ""), (str(len(h.failed)), "bold red" if h.failed else ""),
                        (f"/{len(h.skipped)}", "yellow" if h.skipped else "")]
        rows.append([[(h.host, "")], [(h.run_id, "")], [(result, "green" if h.ok else "bold red")],
                     [(_device_text(h), "")], counts,
                     [(_spec_text(h.matmul, SPEC_KEYS["matmul"]), "")],
                     [(_spec_text(h.bandwidth, SPEC_KEYS["bandwidth"]), "")]])
    lines = plain_table(["host", "run", "result", "GPU", "checks\npass/fail/skip",
                         "matmul %spec\nfp32/tf32/bf16", "bandwidth %spec\nd2d/h2d/d2h"],
                        rows, right=set())
    for h in report.health:
        if h.no_verdict:
            lines.append([(f"  {h.host}: NO VERDICT in {h.run_id}: validation started, no verdict: "
                           f"{h.no_verdict}; counted as failed", "red")])
        if h.nothing_counted:
            lines.append([(f"  {h.host}: NOT VALIDATED: {NOTHING_COUNTED} (no check applied here)", "red")])
        lines += [[(f"  {h.host}: FAILED {_check_text(c)}", "red")] for c in h.failed]
        lines += [[(f"  {h.host}: WAIVED {check}: {what}", "yellow")] for check, what in h.waivers]
        for required, reason, names in h.skipped_groups():
            what = " (required: not validated)" if required else " (optional)"
            lines.append([(f"  {h.host}: SKIPPED {', '.join(names)}{what}"
                           + (f": {reason}" if reason else ""), "yellow" if required else "")])
    return lines


def _history_table(history: list[HostHistory], now: float) -> list[Line]:
    rows: list[list[Line]] = []
    for h in history:
        verdict, count = h.streak
        state = ("QUARANTINE " if h.quarantined else "") + ("FLAPPING" if h.flapping else "")
        age = h.age_s(now)
        rows.append([[(h.host, "")], [(str(h.runs), "")], [(str(h.passes), "")],
                     [(str(len(h.failures)), "bold red" if h.failures else "")],
                     [(f"{count} {verdict}" if count else MISSING, "")],
                     [(state.strip() or "-", "bold red" if state else "")],
                     [(MISSING if age is None else f"{format_age(age)} ago", "")]])
    # age: the time since the start of its latest validation with a verdict (history.py)
    lines = plain_table(["host", "runs", "passed", "failed", "streak", "state", "age"], rows,
                        right={1, 2, 3})
    for h in (h for h in history if h.failures):
        shown = h.timeline[-TIMELINE_RUNS:]
        signs = "".join(("|" if m.stack_change else "") + timeline_sign(m) for m in shown)
        earlier = len(h.timeline) - len(shown)
        lines.append([(f"  {h.host}: {h.summary()}", "red" if h.quarantined else "")])
        lines.append([(f"    timeline (oldest first{f', {earlier} earlier runs not shown' if earlier else ''};"
                       f" P pass, F fail, {NO_VERDICT_LEGEND if h.without_verdict else ''}"
                       f". no verdict, | stack changed): {signs}", "")])
        if h.without_verdict:
            lines.append([(f"    {h.no_verdict_line()}", "red")])
        lines += [[(f"    stack changed in {m.run_id}: {m.stack_change}", "dim")]
                  for m in shown if m.stack_change]
    return lines


def _duration(seconds: float | None) -> str:
    return MISSING if seconds is None else format_age(seconds)


def repairs_table(repairs: Repairs) -> list[Line]:
    """The fleet's line, a row per remediated node, then each repair that did not hold and
    each node left out, with why."""
    median = repairs.median_s
    lines: list[Line] = [[(
        f"{_plural(len(repairs.nodes), 'node')} remediated, {len(repairs.repaired_nodes)} "
        f"repaired, {_plural(repairs.count, 'repair')}; median time to repair "
        f"{_duration(median)}; repair did not hold on {_plural(len(repairs.coming_back), 'node')}",
        "")]]
    rows: list[list[Line]] = []
    for n in repairs.nodes:
        counts = n.outcomes()
        rows.append([[(n.node, "")], [(str(len(n.repairs)), "")]]
                    + [[(str(k), "bold red" if k and o == LEFT_OUT else "")] for o, k in counts.items()]
                    + [[(f"{_duration(n.median_s)} / {_duration(n.latest_s)}", "")],
                       [(str(len(n.did_not_hold)), "bold red" if n.did_not_hold else "")],
                       [(f"{n.last.run_id} {n.last.outcome}", "")],
                       [(", ".join(f"{a} {k}" for a, k in n.by_action().items()), "")]])
    lines += plain_table(["node", "repairs", "repaired", "left out", "waiting", "stopped",
                          "time to repair\nmedian / latest", "did not\nhold", "last", "by action"],
                         rows, right={1, 2, 3, 4, 5, 7})
    for n in repairs.nodes:
        if n.did_not_hold:
            lines.append([(f"  {hold_line(n, repairs.window)}", "red")])
        if n.last.outcome == LEFT_OUT:
            lines.append([(f"  {n.node}: LEFT OUT in {n.last.run_id} ({n.last.trigger.action})"
                           + (f": {shown(n.last.reason)}" if n.last.reason else ""), "yellow")])
    return lines


def _column_chunks(report: Report, width: int) -> list[list[Column]]:
    """The merged table's columns split into chunks that fit ``width`` beside the model column."""
    table = report.table
    model_w = max([len("model")] + [_width([(m, "")]) for m in table.models]) + 3
    chunks: list[list[Column]] = [[]]
    used = model_w + 1
    for col in table.columns:
        w = _column_width(col) + 3
        if chunks[-1] and used + w > width:
            chunks.append([])
            used = model_w + 1
        chunks[-1].append(col)
        used += w
    return chunks


def latency_tables(report: Report, width: int,
                   chunks: list[list[Column]] | None = None) -> list[tuple[str, list[Line]]]:
    """The merged table as (title, lines) parts, its columns split into chunks that fit
    ``width`` (the model column repeated), like a wide data frame in a narrow terminal."""
    table = report.table
    slow_hosts = {h.host: h.run_id for h in report.outliers}
    regressed = {(c.host, c.run_id, r.label, r.model) for c, r in report.regressions}
    chunks = chunks if chunks is not None else _column_chunks(report, width)
    out = []
    for i, cols in enumerate(chunks):
        title = LATENCY_TITLE + (f", part {i + 1} of {len(chunks)}" if len(chunks) > 1 else "")
        header: list[list[Line]] = [[[("model", "")]]]
        for col in cols:
            style = "bold red" if slow_hosts.get(col.host) == col.run_id else ""
            head = [col.host, col.run_id] + ([col.label or MISSING] if has_label(col) else [])
            header.append([[(text, style)] for text in head])
        rows: list[list[Line]] = []
        for model in table.models:
            row: list[Line] = [[(model, "")]]
            for col in cols:
                bad = (col.host, col.run_id, col.label, model) in regressed
                row.append([(fmt_ms(table.cell(model, col)), "bold red" if bad else "")])
            rows.append(row)
        out.append((title, boxed_table(header, rows, right=set(range(1, len(cols) + 1)))))
    return out


def _column_width(col: Column) -> int:
    texts = [col.host, col.run_id] + ([col.label or MISSING] if has_label(col) else [])
    return max([_width([(text, "")]) for text in texts] + [7])


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _check_text(c: CheckRow) -> str:
    if c.status == "skip" and c.required:
        req = " (required: not validated)"
    else:
        req = "" if c.required else " (optional)"
    return f"{c.name}{req}: {c.reason}" if c.reason else f"{c.name}{req}"


def _device_text(h: HostHealth) -> str:
    if h.gpu:
        name = h.gpu[len("NVIDIA "):] if h.gpu.startswith("NVIDIA ") else h.gpu
        return f"{h.gpu_count or '?'}x {name}"
    return f"({h.device or '?'})"


def _spec_text(figs: list[SpecFigure], keys: tuple[str, ...]) -> str:
    """Ratios vs spec in ``keys`` order, e.g. '93/76/74%'; '-' where unknown."""
    by_name = {f.name: f for f in figs}
    parts = []
    for key in keys:
        f = by_name.get(key)
        parts.append(f"{f.ratio * 100:.0f}" if f and f.ratio is not None else MISSING)
    return MISSING if all(p == MISSING for p in parts) else "/".join(parts) + "%"

