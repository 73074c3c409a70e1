"""`gpuprov logs`: pull what the last validation left on each selected host into
logs/<host>/<run>/ (a cluster's login node has nothing to pull: each validate run brings its
nodes' results home)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from ..engine.jobs.logs import PullLogs
from ..ground.errors import InputError
from ..ground.exitcodes import EXIT_OK
from ..ground.runfolder import LOGS_DIR
from .assembly import fail_input, print_hosts
from .hostrun import HostRun, execute
from .inputs import load_for_run


def run(host: Optional[str], inventory: str, logs_dir: str = LOGS_DIR,
        limit: Optional[str] = None, list_hosts: bool = False) -> int:
    """`gpuprov logs` (module docstring)."""
    try:
        inv, hosts, _ = load_for_run(inventory, host, None, {}, limit)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, sys.stdout)
    # A cluster's validation runs on its nodes, in a folder each task removes; every validate
    # run brings the nodes' results home itself: the login node has nothing to pull.
    for cluster in hosts:
        if cluster.scheduler is None:
            continue
        from ..scheduler import SCHEDULERS

        noun = SCHEDULERS[cluster.scheduler.key].noun
        print(f"{cluster.name}: a {noun} cluster: each `gpuprov validate --host {cluster.name}` "
              f"brings its nodes' results home ({logs_dir}/<node>/<run>/); nothing to pull "
              "from the login node")
    hosts = [h for h in hosts if not h.scheduler]
    if not hosts:
        return EXIT_OK
    return execute(HostRun(inv, hosts, "logs", PullLogs(Path(logs_dir)), logs_dir, write_logs=False,
                           mode=f"the latest validation run of each into {logs_dir}/<host>/<run>/"))
