"""`gpuprov facts`: gather and print the facts of the selected hosts (a table, `--json`)."""
from __future__ import annotations

from typing import Optional

from ..engine.facts import FACTS
from ..engine.jobs.gather import GatherFacts
from ..engine.results import HostResult
from ..engine.run import RunInterrupted
from ..ground.errors import InputError
from ..ground.exitcodes import EXIT_INTERRUPTED, EXIT_OK, EXIT_STEP_FAILED, EXIT_UNREACHABLE
from ..output.recap import Reporter
from .assembly import Outputs, assemble, fail_input, print_hosts, sigterm_as_interrupt
from .exports import Finished
from .inputs import load_for_run


def run(host: Optional[str], inventory: str, json_path: Optional[str] = None,
        limit: Optional[str] = None, list_hosts: bool = False, **exports: Optional[str]) -> int:
    """`gpuprov facts` (module docstring); `exports`: the paths of the other exports it offers
    (`remote.commands.exports`), by their keyword."""
    outputs = Outputs.of("facts", dict(json_path=json_path, **exports))
    try:
        outputs.check()
        inv, hosts, _ = load_for_run(inventory, host, None, {}, limit)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, outputs.stream)
    built = assemble(inv, hosts, outputs)
    reporter = built.reporter
    reporter.set_hosts([h.name for h in hosts])
    interrupted = False
    try:
        with sigterm_as_interrupt():
            results = built.run.execute(GatherFacts())
    except RunInterrupted as exc:  # Ctrl-C or SIGTERM: what came back is still shown
        results, interrupted = exc.results, True
        reporter.note("interrupted: stopped the hosts; the facts that came back are below")
    finally:
        reporter.close()
    _show(reporter, results)
    # what a host sent may echo a secret of the run: the exports mask it as the table is
    outputs.write(Finished("facts", "facts", results, built.redact, built.options.run_id))
    if interrupted:
        return EXIT_INTERRUPTED
    if all(r.facts is not None for r in results.values()):
        return EXIT_OK
    return EXIT_UNREACHABLE if any(r.unreachable for r in results.values()) else EXIT_STEP_FAILED


def _show(reporter: Reporter, results: dict[str, HostResult]) -> None:
    """A row per fact, a column per host; then the hosts that could not be reached."""
    rows = []
    for fact in FACTS:
        row = [fact]
        for result in results.values():
            value = (result.facts or {}).get(fact, "")
            row.append(", ".join(value) if isinstance(value, list) else str(value))
        rows.append(row)
    reporter.table(["fact"] + list(results), rows)
    for name, result in results.items():
        if result.unreachable:
            reporter.unreachable(name, result.message)
