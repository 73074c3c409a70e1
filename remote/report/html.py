"""The HTML page: ``write_html(report, path, images)`` writes one self-contained page (inline
CSS, the PNGs as base64 data: URIs, no script, no external reference) with the flags first,
then bad logs, each host's history (a timeline of its runs: a cell per run, coloured by its
verdict, the run id and any stack change on hover), the merged table, the pictures, the fleet
comparison and the health summary.
Every value is escaped by Jinja2's autoescape, and what would not show as itself (control
characters, bidirectional overrides and marks, lone surrogates) is shown as its escape
(``\\u202e``), so a version from a host cannot display as another.
"""
from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from jinja2 import Environment, Undefined

from ..ground.repairs import LEFT_OUT, OUTCOMES
from ..output.term import escaped
from .analyse import Report, SpecFigure, has_label
from .collect import MISSING, fmt_ms, problems_shown
from .history import FLAP_CHANGES, FLAP_WINDOW
from .repairs import format_duration, hold_line, shown

TIMELINE_CELLS = 200  # a host's latest runs drawn; the earlier ones counted


def data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>gpuprov report: {{ r.logs_dir }}</title>
<style>
body { font-family: DejaVu Sans, Arial, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 26px 0 8px; }
.meta { color: #555; font-size: 13px; }
.flags { border: 2px solid #d62728; background: #fdecea; padding: 8px 14px; }
.noflags { border: 2px solid #2ca02c; background: #eaf6ea; padding: 8px 14px; }
.flags li { color: #a01010; margin: 3px 0; font-family: DejaVu Sans Mono, monospace;
  font-size: 13px; }
.problems { border: 1px solid #c9a400; background: #fff8dc; padding: 6px 14px; }
.problems li { font-family: DejaVu Sans Mono, monospace; font-size: 12px; margin: 2px 0; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; }
th { background: #f0f0f0; vertical-align: bottom; }
td.num { text-align: right; font-family: DejaVu Sans Mono, monospace; }
td.missing { color: #999; text-align: center; }
td.bad { background: #f8c9c9; color: #900; font-weight: bold; }
th.slow { background: #f8c9c9; color: #900; }
td.slow { background: #fdecea; }
.tag { font-weight: bold; color: #fff; background: #d62728; padding: 0 5px; border-radius: 3px; }
.ok { color: #1a7f1a; font-weight: bold; } .fail { color: #c00; font-weight: bold; }
.small { font-size: 12px; color: #555; }
.scroll { overflow-x: auto; max-width: 100%; }
table.merged th { font-size: 12px; white-space: nowrap; }
table.merged th .small { font-size: 11px; font-weight: normal; }
td { vertical-align: top; } .nowrap { white-space: nowrap; }
.tl { display: inline-block; width: 9px; height: 16px; margin-right: 1px; vertical-align: middle; }
.tl.pass { background: #2ca02c; } .tl.fail { background: #d62728; } .tl.none { background: #ccc; }
.tl.fail.noverdict { background: repeating-linear-gradient(45deg, #d62728 0 3px, #7a1414 3px 6px); }
.tl.stack { border-left: 3px solid #1f4fd6; }
img { max-width: 100%; border: 1px solid #ddd; margin: 6px 0; }
</style></head><body>
<h1>gpuprov benchmark report</h1>
<div class="meta">{{ r.generated }} &middot; logs: {{ r.logs_dir }} &middot;
{{ r.runs|length }} run{{ '' if r.runs|length == 1 else 's' }} on {{ hosts }} host{{ '' if hosts == 1 else 's' }} &middot; slow host: &gt; {{ '%g' % r.outlier_pct }}%
vs GPU-group peers &middot; regression: &gt; {{ '%g' % r.regression_pct }}% vs
{{ ('baseline ' ~ r.baseline) if r.baseline else 'previous run' }}</div>

<h2 id="flags">Flags</h2>
{% if flags %}<div class="flags"><ul>
{% for line in flags %}<li>{{ line }}</li>
{% endfor %}</ul></div>
{% else %}<div class="noflags">No flags: no slow host, no regression.</div>{% endif %}

{% if r.problems %}<h2 id="problems">Skipped / bad logs ({{ r.problems|length }})</h2>
<div class="problems"><ul>
{% for p in problems %}<li>{{ p }}</li>
{% endfor %}</ul></div>{% endif %}

{% if r.history %}<h2 id="history">History</h2>
<div class="scroll"><table class="history"><thead><tr><th>host</th><th>runs</th><th>passed</th><th>failed</th>
<th>streak</th><th>first / last failure</th><th>state</th><th>timeline (oldest first)</th></tr></thead><tbody>
{% for h in r.history %}{% set streak = h.streak %}<tr><td class="nowrap">{{ h.host }}</td>
<td class="num">{{ h.runs }}</td><td class="num">{{ h.passes }}</td>
<td class="num{{ ' bad' if h.failures else '' }}">{{ h.failures|length }}</td>
<td class="nowrap">{% if streak[1] %}{{ streak[1] }} {{ streak[0] }}{% else %}-{% endif %}</td>
<td class="small nowrap">{% if h.failures %}{{ h.first_failure }}<br>{{ h.last_failure }}{% else %}-{% endif %}</td>
<td class="nowrap">{% if h.quarantined %}<span class="tag">QUARANTINE</span> {% endif %}{% if h.flapping %}<span class="tag">FLAPPING</span>{% endif %}{% if not h.quarantined and not h.flapping %}-{% endif %}</td>
<td class="nowrap">{% set shown = h.timeline[-cells:] %}{% if h.timeline|length > shown|length %}<span class="small">{{ h.timeline|length - shown|length }} earlier &hellip; </span>{% endif %}
{% for m in shown %}<span class="tl {{ m.verdict }}{{ ' noverdict' if m.no_verdict else '' }}{{ ' stack' if m.stack_change else '' }}" title="{{ m.run_id }}: {{ m.verdict }}{% if m.no_verdict %}: validation started, no verdict ({{ m.no_verdict }}){% endif %}{% if m.stack_change %}; stack changed: {{ m.stack_change }}{% endif %}"></span>{% endfor %}
{% if h.without_verdict %}<div class="small fail">{{ h.no_verdict_line() }}</div>{% endif %}
{% for m in shown if m.stack_change %}<div class="small">stack changed in {{ m.run_id }}: {{ m.stack_change }}</div>{% endfor %}</td></tr>
{% endfor %}</tbody></table></div>
<p class="small">A cell per run: green passed, red failed, striped red a validation started
that gave no verdict (timed out, crashed, archive refused: counted as failed), grey no verdict
(no readable results.json, no validation started); a blue left edge: the host's stack changed since its previous manifest.
Flapping: at least {{ flap[0] }} changes between pass and fail in its last {{ flap[1] }} runs;
quarantine: failed {{ r.quarantine[0] }} of its last {{ r.quarantine[1] }} runs.</p>{% endif %}

{% if r.repairs.nodes %}{% set rp = r.repairs %}<h2 id="repairs">Repairs</h2>
<p>{{ rp.nodes|length }} node{{ '' if rp.nodes|length == 1 else 's' }} remediated, {{ rp.repaired_nodes|length }} repaired, {{ rp.count }} repair{{ '' if rp.count == 1 else 's' }}; median time to repair {{ duration(rp.median_s) }}; repair did not hold on {{ rp.coming_back|length }} node{{ '' if rp.coming_back|length == 1 else 's' }}.</p>
<div class="scroll"><table class="repairs"><thead><tr><th>node</th><th>repairs</th><th>by action</th>{% for o in outcomes %}<th>{{ o }}</th>{% endfor %}
<th>time to repair<br>median / latest</th><th>did not hold</th><th>last</th></tr></thead><tbody>
{% for n in rp.nodes %}{% set counts = n.outcomes() %}<tr><td class="nowrap">{{ n.node }}</td><td class="num">{{ n.repairs|length }}</td>
<td class="small">{% for a, k in n.by_action().items() %}{{ a }} {{ k }}{% if not loop.last %}<br>{% endif %}{% endfor %}</td>
{% for o in outcomes %}<td class="num{{ ' bad' if counts[o] and o == left_out else '' }}">{{ counts[o] }}</td>{% endfor %}
<td class="nowrap">{{ duration(n.median_s) }} / {{ duration(n.latest_s) }}</td>
<td class="num{{ ' bad' if n.did_not_hold else '' }}">{{ n.did_not_hold|length }}</td>
<td class="small">{{ n.last.run_id }}: {{ n.last.trigger.action }}, {{ n.last.outcome }}{% if n.last.outcome == left_out and n.last.reason %}<div class="fail">{{ short(n.last.reason) }}</div>{% endif %}
{% if n.did_not_hold %}<div class="fail">{{ hold(n, rp.window) }}</div>{% endif %}</td></tr>
{% endfor %}</tbody></table></div>
<p class="small">Each node's remediation records (gpuprov remediate), by the action its verdict named and by outcome; time to repair: from the start to the end of the repaired ones; did not hold: a repair followed by a failed run within the node's next {{ rp.window }} runs with a verdict.</p>{% endif %}

<h2 id="table">Batch-1 latency, ms</h2>
{% if t.columns %}<div class="scroll"><table class="merged"><thead><tr><th>model</th>
{% for c in t.columns %}<th class="{{ 'slow' if slow.get(c.host) == c.run_id else '' }}">{{ c.host }}<br>
<span class="small">{{ c.run_id }}{% if labelled(c) %}<br>{{ c.label if c.label is not none else '-' }}{% endif %}</span>
{% if slow.get(c.host) == c.run_id %}<br><span class="tag">SLOW</span>{% endif %}</th>
{% endfor %}</tr></thead><tbody>
{% for m in t.models %}<tr><td>{{ m }}</td>
{% for c in t.columns %}{% set v = t.cell(m, c) %}{% set reg = regressed.get((c.host, c.run_id, c.label, m)) %}
{% if v is none %}<td class="missing">{{ missing }}</td>
{% elif reg %}<td class="num bad" title="{{ reg[1] }}">{{ ms(v) }} ({{ reg[0] }})</td>
{% else %}<td class="num {{ 'slow' if slow.get(c.host) == c.run_id else '' }}">{{ ms(v) }}</td>{% endif %}
{% endfor %}</tr>
{% endfor %}</tbody></table></div>
<p class="small">Column per host/run (and head label when a run has several); red header: slow
host; red cell: regression vs the earlier run. Also in merged.csv.</p>
{% else %}<p>No benchmark values found.</p>{% endif %}

<h2 id="plots">Pictures</h2>
{% for name, src, why in images %}{% if why %}<p class="small nochart">No {{ name }} chart: {{ why }}.</p>
{% else %}<div><img alt="{{ name }} chart" src="{{ src }}"></div>
{% endif %}{% endfor %}

{% if r.fleet %}<h2 id="fleet">Fleet: latest run vs GPU-group peers</h2>
<table><thead><tr><th>host</th><th>GPU group</th><th>run</th><th>peers</th><th>models</th>
<th>typical vs peers</th><th>worst model</th></tr></thead><tbody>
{% for h in r.fleet %}<tr><td>{{ h.host }}{% if h.slow %} <span class="tag">SLOW</span>{% endif %}</td>
<td>{{ h.gpu }}</td><td>{{ h.run_id }}</td><td class="num">{{ h.peers|length }}</td>
<td class="num">{{ h.ratios|length }}</td>
<td class="num{{ ' bad' if h.slow else '' }}">{{ missing if h.typical_pct is none else '%+.1f%%' % h.typical_pct }}</td>
<td>{% if h.worst %}{{ h.worst.name }} {{ '%+.1f%%' % h.worst.pct }}{% else %}{{ missing }}{% endif %}</td></tr>
{% endfor %}</tbody></table>{% endif %}

{% if r.health %}<h2 id="health">Health (latest results.json per host)</h2>
<div class="scroll"><table><thead><tr><th>host</th><th>run</th><th>result</th><th>device / GPU</th><th>versions</th>
<th>passed</th><th style="min-width:150px">failed</th><th style="min-width:150px">skipped</th><th>matmul TFLOPS<br>measured / spec</th><th>bandwidth GB/s<br>measured / spec</th>
</tr></thead><tbody>
{% for h in r.health %}<tr><td class="nowrap">{{ h.host }}</td><td>{{ h.run_id }}</td>
<td>{% if h.ok %}<span class="ok">ok</span>{% elif h.ok is sameas false %}<span class="fail">FAIL</span>{% else %}?{% endif %}</td>
<td class="nowrap">{% if h.gpu %}{{ h.gpu_count or '?' }}&times; {{ h.gpu }}{% else %}{{ h.device or '?' }}{% endif %}</td>
<td class="small nowrap">{% for k, v in h.versions.items() %}{{ k }} {{ v }}{% if not loop.last %}<br>{% endif %}{% endfor %}</td>
<td class="num">{{ h.passed|length }}</td>
<td>{% if h.no_verdict %}<div class="fail">validation started, no verdict: {{ h.no_verdict }}; counted as failed</div>{% endif %}{% if h.nothing_counted %}<div class="fail">not validated: nothing counted</div>{% endif %}{% for c in h.failed %}<div class="fail">{{ c.name }}{% if not c.required %} (optional){% endif %}</div><div class="small">{{ c.reason }}</div>{% else %}{% if not h.no_verdict and not h.nothing_counted %}-{% endif %}{% endfor %}</td>
<td>{% for req, reason, names in h.skipped_groups() %}<div>{{ names|join(', ') }}{% if req %} <b>(required: not validated)</b>{% endif %}</div><div class="small">{{ reason }}</div>{% else %}-{% endfor %}</td>
<td class="nowrap">{% for f in h.matmul %}{{ spec(f) }}{% if not loop.last %}<br>{% endif %}{% else %}-{% endfor %}</td>
<td class="nowrap">{% for f in h.bandwidth %}{{ spec(f) }}{% if not loop.last %}<br>{% endif %}{% else %}-{% endfor %}</td></tr>
{% endfor %}</tbody></table></div>{% endif %}

{% if r.notes %}<h2 id="notes">Notes</h2><ul class="small">
{% for n in r.notes %}<li>{{ n }}</li>
{% endfor %}</ul>{% endif %}
</body></html>
"""


def _spec(f: SpecFigure) -> str:
    """'bf16 231 / 312 (74%)': measured / spec (ratio); the unit is in the column head."""
    name = f.name.rsplit("_", 1)[0]
    text = f"{name} {MISSING if f.value is None else f'{f.value:.4g}'}"
    if f.spec is not None:
        text += f" / {f.spec:.4g}"
    if f.ratio is not None:
        text += f" ({f.ratio * 100:.0f}%)"
    return text


def _shown(value: Any) -> Any:
    """What a `{{ ... }}` shows: numbers as they are, anything else (text, a `Problem`) as text
    with its unshown characters escaped."""
    if value is None or isinstance(value, (int, float, Undefined)):
        return value
    text = str(value)
    # str.isprintable(): none of the characters `escaped` shows (controls, format characters,
    # surrogates), found at C speed; a 1,000-node page has 100,000 values
    return text if text.isprintable() else escaped(text)


def write_html(report: Report, path: Path, images: dict[str, Path],
               empty: dict[str, str] | None = None) -> Path:
    """The page; a chart named in ``empty`` (chart: why it has nothing to draw) is that one
    line, not its picture: an empty box of 800 pixels says less and pushes the rest down."""
    empty = empty or {}
    env = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, finalize=_shown)
    regressed = {
        (c.host, c.run_id, r.label, r.model): (f"{r.pct:+.0f}%",
                                                f"{r.pct:+.1f}% vs {c.base_key}")
        for c, r in report.regressions
    }
    html = env.from_string(_TEMPLATE).render(
        r=report, t=report.table, flags=report.flag_lines(), problems=problems_shown(report.problems),
        hosts=len({run.host for run in report.runs}),
        slow={h.host: h.run_id for h in report.outliers},
        regressed=regressed, missing=MISSING, cells=TIMELINE_CELLS,
        flap=(FLAP_CHANGES, FLAP_WINDOW), ms=fmt_ms, spec=_spec, labelled=has_label,
        images=[(name, None if name in empty else data_uri(p), empty.get(name))
                for name, p in images.items()],
        outcomes=OUTCOMES, left_out=LEFT_OUT, hold=hold_line, short=shown,
        duration=lambda s: MISSING if s is None else format_duration(s),
    )
    Path(path).write_text(html, encoding="utf-8")
    return Path(path)
