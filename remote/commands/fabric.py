"""`gpuprov fabric`: pair the selected nodes in rounds, measure each pair, name the suspect
node or link (remote/fabric/). The options and settings are checked here, the Run comes from
the one run assembly (its redactor also masks this run's iperf3 password), and the pairwise
work is remote/fabric/measure.py's.

Exit status (remote.ground.exitcodes): 0 no suspect, 3 a suspect node or link was found, or the
two ends of a pair disagree (as a failed validation), 4 a node could not be reached (it is a
suspect too, with why), 1 a pair could not be measured (every port tried was taken on its
server's node, or its server reached by someone else), 130 interrupted.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..engine.results import HostResult
from ..fabric.auth import new_credentials
from ..fabric.measure import Judged, run_pairs
from ..ground.errors import InputError
from ..ground.runfolder import LOGS_DIR
from .assembly import Outputs, assemble, become_password, fail_input, print_hosts, sigterm_as_interrupt
from .exports import Finished
from .fabric_settings import read_settings
from .inputs import run_inputs


def run(host: Optional[str], inventory: str, json_path: Optional[str] = None,
        junit_path: Optional[str] = None, prometheus: Optional[str] = None,
        html: Optional[str] = None, var: Optional[list[str]] = None,
        logs_dir: str = LOGS_DIR, limit: Optional[str] = None, list_hosts: bool = False,
        drain_failed: bool = False, ask_become_pass: bool = False, **exports: Optional[str]) -> int:
    """`gpuprov fabric` (module docstring); `exports`: the paths of the other exports it offers
    (`remote.commands.exports`), by their keyword."""
    from ..scheduler import SCHEDULERS

    outputs = Outputs.of("fabric", dict(json_path=json_path, junit_path=junit_path,
                                        prometheus=prometheus, html=html, **exports),
                         0, False, list_hosts)
    try:
        extra_vars, _, _, (inv, hosts, _) = run_inputs(inventory, host, limit, None, var, None,
                                                       "quick", outputs)
        if drain_failed and not any(h.scheduler for h in hosts):
            keys = " or ".join(f"{key}:" for key in SCHEDULERS)
            raise InputError(f"--drain-failed drains a cluster's nodes: select its login node "
                             f"(a host with {keys}) with the nodes", inv.path)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, outputs.stream)
    try:
        settings = read_settings(inv, extra_vars)
        if len([h for h in hosts if h.scheduler is None]) < 2 and not any(h.scheduler for h in hosts):
            raise InputError("fabric needs at least 2 nodes to pair (hosts, or a cluster's login "
                             "node with a scheduler key)", inv.path)
        settings.auth = new_credentials()  # iperf3's, for this run: a secret of the run
        built = assemble(inv, hosts, outputs, extra_vars=extra_vars,
                         password=become_password(ask_become_pass),
                         secrets=(settings.auth.password,), forks=len(hosts), logs_dir=Path(logs_dir))
        run_id = built.options.run_id

        def export(results: dict[str, HostResult], judged: Judged) -> None:
            outputs.write(Finished("fabric", "fabric", results, built.redact, run_id,
                                   Path(logs_dir), judged))

        with sigterm_as_interrupt():  # SIGTERM stops the servers as Ctrl-C does
            return run_pairs(built.run, hosts, settings, outputs.stream, export, logs_dir,
                             drain_failed)
    except InputError as exc:
        return fail_input(exc)
