"""Reading log folders: every ``<logs>/<host>/<run>/`` with its ``bench_torch.log`` (the seed's
format) and ``results.json`` (the validation package's, schema 1 or 2, read by
`remote.ground.resultsfile`), into `Run`s and the `Problem`s found on the way. A bad file is a problem
and is skipped, never an error.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from ..ground import resultsfile
from ..ground.resultsfile import MAX_FILE_BYTES as MAX_FILE_BYTES  # noqa: F401  (re-exported: report docs cite it)
from ..ground.resultsfile import UnusableFile, read_capped
from ..ground.runfolder import BENCH_LOG, NO_VERDICT_RECORDED, RESULTS, VALIDATION_ATTEMPT, cluster_record_in
from .tree import LogsTree

MISSING = "-"
# The latencies a run may contribute: below a nanosecond (one clock cycle at 1 GHz) or above
# a day (86.4e6 ms) a value is not a batch-1 timing but a broken or hostile log. The bounds
# also keep every ratio between two values, and so every figure in flags.json, finite.
MIN_MS = 1e-6
MAX_MS = 86.4e6
# MAX_FILE_BYTES (remote.ground.resultsfile) caps bench_torch.log too: a log of 20,000 models is
# under 1 MiB. Anything larger is not read at all.

# head label (None: values before any #head line) -> model -> batch-1 latency in ms
Latency = Dict[Optional[str], Dict[str, float]]
Results = Dict[str, Any]  # a parsed results.json


@dataclass
class Problem:
    """A file (or line) that could not be used; it was skipped."""

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


# A reader sees each file's first few problems; flags.json keeps every one. A bench_torch.log of
# 20,000 bad lines printed 20,000 problem lines, burying every other host's (issue 31, item 8's
# rule for DRIFT, applied to bad logs).
PROBLEMS_SHOWN_PER_FILE = 5


def problems_shown(problems: list[Problem], per_file: int = PROBLEMS_SHOWN_PER_FILE) -> list[str]:
    """The problems as a reader's lines: each file's first `per_file`, then one line with how
    many more that file had."""
    total: dict[str, int] = {}
    for p in problems:
        total[p.path] = total.get(p.path, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for p in problems:
        seen[p.path] = n = seen.get(p.path, 0) + 1
        if n <= per_file:
            out.append(str(p))
        elif n == per_file + 1:
            out.append(f"{p.path}: {total[p.path] - per_file} more problems in this file "
                       "(every one in flags.json)")
    return out


@dataclass
class Run:
    host: str
    run_id: str
    path: Path
    latency: Latency = field(default_factory=dict)
    source: str | None = None  # BENCH_LOG or RESULTS: where `latency` came from
    results: Results | None = None  # parsed results.json, None when absent or bad

    @property
    def key(self) -> str:
        return f"{self.host}/{self.run_id}"

    @property
    def gpu_name(self) -> str | None:
        host = (self.results or {}).get("host")
        name = host.get("gpu_name") if isinstance(host, dict) else None
        return name.strip() if isinstance(name, str) and name.strip() else None

    @property
    def group(self) -> str | None:
        """Fleet group: the GPU model; for a run on CPU (device "cpu", no GPU name)
        "CPU only" plus the CPU model when known; None when results.json does not say."""
        if self.gpu_name:
            return self.gpu_name
        host = (self.results or {}).get("host")
        if isinstance(host, dict) and host.get("device") == "cpu":
            cpu = host.get("cpu")
            return f"CPU only ({cpu.strip()})" if isinstance(cpu, str) and cpu.strip() else "CPU only"
        return None

    def column_name(self, label: str | None) -> str:
        if len(self.latency) > 1:
            return f"{self.key}/{label if label is not None else MISSING}"
        return self.key


def fmt_ms(value: float | None) -> str:
    if value is None:
        return MISSING
    if value >= 100:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"



_LINE = re.compile(r"^#([^;]*);(.*)$")


def parse_bench_log(text: str, path: str = BENCH_LOG) -> tuple[Latency, list[Problem]]:
    """Parse the seed's format. Returns ({label: {model: ms}}, problems).

    ``#head;LABEL`` starts a column, ``#model;ms`` records a value (a positive number).
    Lines not starting with ``#`` or without ``;`` are ignored (program output, comments,
    ``#!/bin/bash``). A ``#...;...`` line that does not parse is a problem and is skipped;
    a repeated model within a column keeps the last value (reported).
    """
    columns: Latency = {}
    problems: list[Problem] = []
    label: str | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _LINE.match(line)
        if not m:
            continue
        name, rest = m.group(1).strip(), m.group(2).strip()
        shown = line if len(line) <= 60 else line[:57] + "..."
        if name == "head":
            if not rest or ";" in rest:
                problems.append(Problem(path, f"malformed head line {shown!r}: skipped", lineno))
                continue
            label = rest
            columns.setdefault(label, {})
            continue
        if not name or any(ch.isspace() for ch in name):
            problems.append(
                Problem(path, f"malformed line {shown!r}: no model name: skipped", lineno)
            )
            continue
        try:
            value = float(rest)
        except ValueError:
            problems.append(
                Problem(path, f"malformed line {shown!r}: {rest!r} is not a number: skipped",
                        lineno)
            )
            continue
        if not math.isfinite(value) or value <= 0:
            problems.append(
                Problem(path, f"malformed line {shown!r}: latency must be > 0 ms: skipped",
                        lineno)
            )
            continue
        if not MIN_MS <= value <= MAX_MS:
            problems.append(Problem(path, f"malformed line {shown!r}: {_out_of_range(value)}",
                                    lineno))
            continue
        column = columns.setdefault(label, {})
        if name in column:
            problems.append(
                Problem(path, f"{name} appears again (was {fmt_ms(column[name])} ms); "
                        "keeping the later value", lineno)
            )
        column[name] = value
    return {k: v for k, v in columns.items() if v}, problems


def read_log_file(path: Path, shown: str) -> tuple[bytes | None, list[Problem]]:
    """The bytes of a regular file of at most MAX_FILE_BYTES; None and why otherwise. Never
    reads more than the limit (a sparse 1 GiB results.json costs nothing), never blocks on a
    FIFO."""
    try:
        return read_capped(path), []
    except UnusableFile as exc:
        return None, [Problem(shown, exc.message, exc.line)]


def read_bench_log(path: Path, shown: str) -> tuple[Latency, list[Problem]]:
    data, problems = read_log_file(path, shown)
    if data is None:
        return {}, problems
    if not data.strip():
        return {}, [Problem(shown, "empty file: skipped")]
    columns, problems = parse_bench_log(data.decode("utf-8", errors="replace"), shown)
    if not columns:
        problems.append(Problem(shown, "no benchmark values (no '#model;ms' lines): skipped"))
    return columns, problems


def read_results(path: Path, shown: str) -> tuple[Results | None, list[Problem]]:
    """A results.json through the one reader (`remote.ground.resultsfile`), plus the report's own
    needs: a `host` object, and at least one check."""
    try:
        results = resultsfile.read_results(path)
    except UnusableFile as exc:
        return None, [Problem(shown, exc.message, exc.line)]
    data, problems = results.data, [Problem(shown, text) for text in results.warnings]
    host = data.get("host", {})
    if not isinstance(host, dict):
        return None, [Problem(shown, f"'host' is not an object (a {type(host).__name__}): skipped")]
    if not data.get("checks"):
        problems.append(Problem(shown, "no checks ran: not a pass"))
    return data, problems


def _out_of_range(value: float) -> str:
    return f"latency {value!r} ms is outside {MIN_MS:g}..{MAX_MS:g} ms: skipped"


def num(value: Any) -> float | None:
    """`value` as a finite float; None for anything else (text, booleans, inf, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def get(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...`` through nested dicts; None where a level is missing or not a dict."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def check(results: Results | None, name: str) -> dict[str, Any] | None:
    """The first check called ``name`` in results.json, or None."""
    checks = (results or {}).get("checks")
    if not isinstance(checks, list):
        return None
    for item in checks:
        if isinstance(item, dict) and item.get("name") == name:
            return item
    return None


def bench_from_results(results: Results | None, shown: str) -> tuple[dict[str, float], list[Problem]]:
    """Batch-1 median latency per model from the ``bench`` check's figures; a median out of
    the plausible range is a problem (an entry that holds no number is ignored)."""
    models = get(check(results, "bench"), "figures", "models")
    out: dict[str, float] = {}
    problems: list[Problem] = []
    if isinstance(models, dict):
        for model, figs in models.items():
            value = num(get(figs, "latency_ms", "median"))
            if not isinstance(model, str) or not model or value is None or value <= 0:
                continue
            if MIN_MS <= value <= MAX_MS:
                out[model] = value
            else:
                problems.append(Problem(shown, f"bench {model}: {_out_of_range(value)}"))
    return out, problems


NO_RESULTS = f"neither {RESULTS} nor {BENCH_LOG}: skipped"
NO_USABLE_RESULTS = f"no usable {RESULTS}"
WHY_MAX = 160  # characters of the control side's outcome kept for a run without a verdict


@dataclass
class Attempt:
    """The control side's record that it started a validation of the host in this run
    (runfolder.VALIDATION_ATTEMPT): `why` its run has no verdict when it has none, and whether
    that `counts` as the host's failure."""

    why: str
    counts: bool = True
    started: str = ""  # when the control side started it (UTC, `%Y-%m-%dT%H:%M:%SZ`), as recorded


def read_attempt(folder: Path) -> tuple[Attempt | None, list[Problem]]:
    """The record of a validation started in run folder `folder`; None when there is none (a
    run that only provisioned, or one recorded before the record existed). The record is the
    control side's (no pull may bring one), but the logs folder is read with care all the same:
    one that cannot be read still says a validation was started."""
    path = Path(folder) / VALIDATION_ATTEMPT
    if not (path.exists() or path.is_symlink()):
        return None, []
    try:
        data = json.loads(read_capped(path).decode("utf-8", errors="replace"))
    except (UnusableFile, ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        return Attempt("its validation record is unreadable"), [
            Problem(str(path), "unreadable validation record: counted as a validation without a verdict")]
    outcome, no_verdict, rc = data.get("outcome"), data.get("no_verdict"), data.get("validate_exit")
    if not data.get("ended"):
        why = NO_VERDICT_RECORDED
    elif isinstance(no_verdict, str) and no_verdict:
        why = no_verdict
    else:  # the results came home: only an unusable results.json leaves it without a verdict
        exit_status = rc if isinstance(rc, int) and not isinstance(rc, bool) and -1000 < rc < 1000 else None
        why = NO_USABLE_RESULTS + (f" (validate exit {exit_status})" if exit_status is not None else "")
    said = outcome.removeprefix("not validated: ") if isinstance(outcome, str) else ""
    if said and said != why:
        why += f" ({said})"
    why = " ".join(why.split())
    started = data.get("started")
    return Attempt(why if len(why) <= WHY_MAX else why[:WHY_MAX - 3] + "...",
                   data.get("counts") is not False,
                   started if isinstance(started, str) else ""), []


def collect(logs: LogsTree | Path) -> tuple[list[Run], list[Problem]]:
    """Read every ``logs/<host>/<run>/`` (a LogsTree, or its folder). Runs sorted by host,
    then run id."""
    tree = LogsTree.of(logs)
    runs: list[Run] = []
    problems: list[Problem] = []

    hosts = tree.hosts()
    problems += _unlisted(tree, tree.root)
    for host in hosts:
        run_ids = tree.runs(host) or []
        problems += _unlisted(tree, tree.root / host)
        if not run_ids:
            problems.append(Problem(str(tree.root / host), "no run folders: skipped"))
        for run_id in run_ids:
            run_dir = tree.folder(host, run_id)
            run = Run(host=host, run_id=run_id, path=run_dir)
            res_path, log_path = run_dir / RESULTS, run_dir / BENCH_LOG
            # listed first, then a stat only for what is there (exists() follows a link)
            has_results = tree.has(host, run_id, RESULTS) and res_path.exists()
            has_log = tree.has(host, run_id, BENCH_LOG) and log_path.exists()
            if not has_results and not has_log:
                # a cluster's record (any scheduler's, as its row names it) is no host's run:
                # its nodes' runs are read by their names
                if cluster_record_in(run_dir) is None:
                    problems.append(Problem(str(run_dir), NO_RESULTS))
                continue
            if has_results:
                run.results, probs = read_results(res_path, str(res_path))
                problems += probs
            if has_log:
                columns, probs = read_bench_log(log_path, str(log_path))
                problems += probs
                if columns:
                    run.latency, run.source = columns, BENCH_LOG
            if not run.latency:
                values, probs = bench_from_results(run.results, str(res_path))
                problems += probs
                if values:
                    run.latency, run.source = {None: values}, RESULTS
            if run.results is None and not run.latency:
                continue  # nothing usable; the problems above say why
            runs.append(run)
    runs.sort(key=lambda r: (r.host, r.run_id))
    return runs, problems


def _unlisted(tree: LogsTree, path: Path) -> list[Problem]:
    """The problem of folder `path` when the tree could not list it."""
    exc = tree.errors.get(path)
    return [] if exc is None else [
        Problem(str(path), f"unreadable folder ({exc.strerror or exc}): skipped")]


def load_record(path: Path, max_bytes: int) -> dict[str, Any]:
    """A node's JSON record in its run folder (fabric.json, distributed.json), read as
    untrusted: a regular file of at most `max_bytes`, one JSON object; ValueError (the reason)
    when it is not."""
    if path.is_symlink() or not path.is_file():
        raise ValueError("not a regular file")
    with open(path, "rb") as f:
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise ValueError(f"over {max_bytes} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError("not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def short_text(value: Any, what: str, limit: int) -> str:
    """A record's text field ("" when absent): a string of at most `limit` characters with no
    control character; ValueError naming `what` when it is not."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit or \
            any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{what} is not a short line of text")
    return value
