"""`gpuprov evidence`: gather each selected host's evidence for a replacement into
`<logs>/<host>/<run>/evidence-<host>-<serials>.tar.gz` (remote/evidence/)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Union

from ..evidence import CollectEvidence
from ..ground.errors import InputError
from ..ground.exitcodes import EXIT_OK
from ..ground.runfolder import LOGS_DIR
from .assembly import fail_input, print_hosts
from .hostrun import HostRun, execute
from .inputs import check_profiles, load_for_run, seconds


def run(host: Optional[str], inventory: str, logs_dir: str = LOGS_DIR,
        limit: Optional[str] = None, list_hosts: bool = False,
        bug_report_timeout: Union[float, str, None] = None) -> int:
    """`gpuprov evidence` (module docstring)."""
    try:
        inv, hosts, _ = load_for_run(inventory, host, None, {}, limit)
        check_profiles(inv, hosts, {})  # the evidence runs validate with the host's profile
        full = seconds("--bug-report-timeout", bug_report_timeout)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, sys.stdout)
    for cluster in hosts:
        if cluster.scheduler is not None:
            print(f"{cluster.name}: a cluster's login node: select its nodes by name to gather "
                  "their evidence; left out")
    hosts = [h for h in hosts if not h.scheduler]
    if not hosts:
        return EXIT_OK
    job = CollectEvidence(Path(logs_dir), *(() if full is None else (full, full)))
    return execute(HostRun(inv, hosts, "evidence", job, logs_dir))
