"""The files a command's run writes besides the terminal (`--json PATH`, `--junit PATH`,
`--prometheus FILE`, `--html FILE`), a row each in `EXPORTS`, written in the order they are
listed: the option, the keyword of the command's `run` that carries its path, what it writes
(for the reader; the options' help is tasks.py's), its writer (handed the run's `Finished`
results and the path), the commands that offer it, and whether '-' means stdout alone (the
step lines then go to stderr). One option has one row per command; several rows may share an
option (each command's `--json` is its own document).

Adding an export a command offers: a module with its writer, and its row here (and its
option in tasks.py). `remote.commands.assembly.Outputs` checks the paths given and writes
the rows. Writers import their part's modules only when called, so a command imports only
what it uses (a no-op provision imports no fabric).
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..ground.fileio import write_atomic

if TYPE_CHECKING:
    from ..engine.results import HostResult


@dataclass(frozen=True)
class Finished:
    """A run's results as the exports read them: the command, its title (a recipe's name for
    provision), each host's result (masked by `redact` when written), the run id, the logs
    folder (None: the run kept none), and what the command adds (`detail`: a rollout's record,
    fabric's judged pairs)."""

    command: str
    title: str
    results: dict[str, HostResult]
    redact: Callable[[str], str]
    run_id: str
    logs: Optional[Path] = None
    detail: Any = None


Writer = Callable[[Finished, str], None]


@dataclass(frozen=True)
class CommandExport:
    option: str
    param: str
    what: str
    write: Writer
    commands: tuple[str, ...]
    stdout: bool = False  # '-' writes to stdout alone
    dash: str = ""  # why '-' is refused, when another export takes it


def _put(path: str, text: str) -> None:
    """`text` to the file `path` (atomically), or to stdout alone for '-'."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_atomic(Path(path), text)


def _results_json(done: Finished, path: str) -> None:
    from ..engine.results import json_document

    text = json_document(done.results, done.redact, done.detail)
    _put(path, text)


def _junit(done: Finished, path: str) -> None:
    from ..output.junit import write_junit

    write_junit(Path(path), done.title, done.results, done.redact, done.logs, done.run_id)


def _facts_json(done: Finished, path: str) -> None:
    # what a host sent may echo a secret of the run: masked as the table is
    data = {"hosts": {name: ({"facts": r.facts} if r.facts is not None else
                             {"unreachable": True, "message": r.message})
                      for name, r in done.results.items()}}
    text = done.redact(json.dumps(data, indent=2)) + "\n"
    _put(path, text)


def _fabric_json(done: Finished, path: str) -> None:
    from ..fabric.output import json_document

    judged = done.detail
    document = json_document(judged.verdict, done.results, done.run_id, done.redact,
                             judged.round_seconds)
    text = json.dumps(document, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        write_atomic(Path(path), text)


def _fabric_prometheus(done: Finished, path: str) -> None:
    from ..fabric.output import write_prometheus

    write_prometheus(Path(path), done.detail.verdict, done.run_id)


def _fabric_html(done: Finished, path: str) -> None:
    from ..fabric.output import matrix_html

    write_atomic(Path(path), matrix_html(done.detail.verdict, done.detail.names, done.run_id))


def _distributed_prometheus(done: Finished, path: str) -> None:
    from ..distributed.output import write_prometheus

    if done.logs is not None:
        write_prometheus(Path(path), done.logs, list(done.results), done.run_id)


EXPORTS: dict[str, CommandExport] = {
    "json": CommandExport("--json", "json_path", "each host's steps, outcome and the rollout "
                          "(docs/how-to/own-gpu-host.md)", _results_json,
                          ("provision", "validate"), stdout=True),
    "facts_json": CommandExport("--json", "json_path", "each host's facts, or why none",
                                _facts_json, ("facts",), stdout=True),
    "fabric_json": CommandExport("--json", "json_path", "the pairs, their figures and the "
                                 "verdict", _fabric_json, ("fabric",), stdout=True),
    "junit": CommandExport("--junit", "junit_path", "JUnit XML: a testsuite per host, a "
                           "testcase per step and check (per pair for fabric)", _junit,
                           ("provision", "validate", "fabric"), dash="'-' is for --json"),
    "prometheus": CommandExport("--prometheus", "prometheus", "each pair's figure and each "
                                "node's verdict, Prometheus text format", _fabric_prometheus,
                                ("fabric",)),
    "html": CommandExport("--html", "html", "the matrix of pairs as an HTML heat map",
                          _fabric_html, ("fabric",)),
    "distributed_prometheus": CommandExport(
        "--prometheus", "prometheus", "with --distributed: each node's part in the multi-node "
        "job (passed, named, busbw, training step), Prometheus text format",
        _distributed_prometheus, ("validate",)),
}


def offered(command: str) -> list[CommandExport]:
    """The rows `command` offers, in the table's order (a keyword at most once)."""
    rows = [row for row in EXPORTS.values() if command in row.commands]
    params = [row.param for row in rows]
    if len(set(params)) != len(params):
        raise ValueError(f"{command}: two exports take the same keyword ({', '.join(params)})")
    return rows
