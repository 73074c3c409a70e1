"""The facts round trip of a host: the facts script (engine/facts.py), with the read-only probes
of the steps and the jobs' ride-along snippets sent in the same write, so a run that changes
nothing asks each host once (engine/probes.py batches them). A probe that hangs sends the facts
alone again; the probes are asked later, by their steps.
"""
from __future__ import annotations

from ..ground.errors import CommandTimeout
from ..kinds import Probe
from ..output.runlog import RunLog
from ..transport.connection import BaseConnection
from .probes import batch_script, in_one_write, parse_batch

# The facts script alone (a fraction of a second on a healthy host; nvidia-smi the slowest part)
# gets this long, or the inventory's timeouts.command when that is shorter.
FACTS_TIMEOUT_S = 60.0


def round_trip(conn: BaseConnection, script: str, early: list[str], ride_along: list[str],
               command_timeout: float, log: RunLog) -> tuple[str, dict[str, Probe]]:
    """Run the facts `script` on `conn`, the snippets `early` riding along (`ride_along`: those
    that are not steps' probes, left out of the log's count); (the facts' output, each
    snippet's answer: one that got none is absent). Logged as one command."""
    answers: dict[str, Probe] = {}
    result, label, fact_lines, probe_lines = None, "gather facts", "", ""
    if early:
        # The facts script in a subshell, so the probes see none of its functions or vars.
        batch, token = batch_script(list(enumerate(early)))
        try:
            # the probes' own bound; should slow facts need more, they go alone below
            result = conn.run(in_one_write(f"(\n{script})\n{batch}"), timeout=command_timeout)
        except CommandTimeout as exc:  # a hanging `unless`: facts alone, probes later
            log.event(f"facts + {len(early)} probes {exc}; gathering facts alone")
        else:
            steps = len([p for p in early if p not in ride_along])
            label = "gather facts" + (f" + {steps} probes" if steps else "")
            cut = result.out.find(token)
            cut = len(result.out) if cut < 0 else cut
            fact_lines, probe_lines = result.out[:cut], result.out[cut:]
            answers = {early[key]: answer for key, answer in parse_batch(probe_lines, token).items()}
    if result is None:
        result = conn.run(script, timeout=min(FACTS_TIMEOUT_S, command_timeout))
        fact_lines = result.out
    log.command("facts", label, result.rc, result.elapsed_s, probe_lines, result.err)
    result.require_complete("facts")  # a cut answer would parse as wrong facts
    return fact_lines, answers
