"""`gpuprov remediate`: for each selected node whose latest verdict names an action, take it out
of service, act (reset the GPU, reboot the node, or leave it out for an RMA), validate it again
with its profile and return it when it passes, else escalate; under a breaker (`--max-out`).
`--check` prints the plan and changes nothing. The work is remote/remediation/'s: the hosts
without a scheduler go over SSH, a cluster's login node through its scheduler's route (the
table remediation.routes.TARGETS).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from ..config.inventory import Host
from ..ground.errors import HostError, InputError
from ..ground.exitcodes import EXIT_INPUT, EXIT_OK, EXIT_UNREACHABLE
from ..ground.forks import DEFAULT_FORKS
from ..ground.runfolder import LOGS_DIR, run_dir
from ..remediation.breaker import MaxOut, parse_max_out
from ..remediation.ladder import REBOOT_TIMEOUT_S
from ..remediation.routes import SSH, TARGETS, RouteContext, route
from .assembly import Assembly, Outputs, assemble, fail_input, print_hosts, sigterm_as_interrupt
from .inputs import check_profiles, check_suite, parse_vars, run_inputs, seconds


def run(host: Optional[str], inventory: str, logs_dir: str = LOGS_DIR, limit: Optional[str] = None,
        check: bool = False, max_out: Optional[str] = None,
        reboot_timeout: Union[float, str, None] = None, suite: str = "quick",
        var: Optional[list[str]] = None, forks: Union[int, str, None] = DEFAULT_FORKS,
        verbose: int = 0, list_hosts: bool = False) -> int:
    """`gpuprov remediate` (module docstring)."""
    outputs = Outputs("remediate", verbose=verbose, list_hosts=list_hosts)
    try:
        breaker = parse_max_out(max_out)
        timeout = seconds("--reboot-timeout", reboot_timeout) or REBOOT_TIMEOUT_S
        extra_vars, forks_n, suite, (inv, hosts, _) = run_inputs(
            inventory, host, limit, None, var, forks, check_suite(suite), outputs)
        check_profiles(inv, hosts, extra_vars)
        groups = routes_of(hosts)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, outputs.stream)
    built = assemble(inv, hosts, outputs, extra_vars=extra_vars or parse_vars(None), forks=forks_n,
                     check=check, logs_dir=None if check else Path(logs_dir))
    built.reporter.set_hosts([h.name for h in hosts])
    built.reporter.note(f"remediate: {len(hosts)} host(s), "
                        + ("check: nothing is changed" if check else f"run {built.options.run_id}"))
    context = RouteContext(built.run, inv, Path(logs_dir), suite, extra_vars)
    status = EXIT_OK
    with sigterm_as_interrupt():
        try:
            for key, members in groups.items():
                status = max(status, _each_route(key, members, context, built, breaker, check,
                                                 timeout))
        finally:
            built.reporter.close()
    if not check:
        built.reporter.note(f"records: {run_dir(Path(logs_dir), '<node>', built.options.run_id)}/"
                            "remediation.json")
    return status


def routes_of(hosts: list[Host]) -> dict[str, list[Host]]:
    """The selected hosts by route: "ssh" for plain hosts, a scheduler's key for a login node;
    a key without a remediation route is bad input."""
    groups: dict[str, list[Host]] = {}
    for host in hosts:
        key = host.scheduler.key if host.scheduler else SSH
        if key not in TARGETS:
            raise InputError(f"host '{host.name}': {key}: no remediation route for its nodes yet")
        groups.setdefault(key, []).append(host)
    return groups


def _each_route(key: str, hosts: list[Host], context: RouteContext, built: Assembly,
                 breaker: MaxOut, check: bool, timeout: float) -> int:
    """One route's run; a route that cannot start (its login node unreachable, its scheduler
    not answering, a selection it cannot take) is that route's line and exit status, and the
    other routes go on (a failing host never stops the others)."""
    try:
        return _one_route(key, hosts, context, built, breaker, check, timeout)
    except InputError as exc:
        built.reporter.note(f"error: {exc}")
        return EXIT_INPUT
    except HostError as exc:
        built.reporter.unreachable(hosts[0].name, str(exc))
        return EXIT_UNREACHABLE


def _one_route(key: str, hosts: list[Host], context: RouteContext, built: Assembly,
               breaker: MaxOut, check: bool, timeout: float) -> int:
    from ..remediation.plan import plan
    from ..remediation.run import Loop, Settings, show_plan

    target, nodes = route(key, context, hosts)
    try:
        planned = plan(context.logs_dir, nodes)
        if check:
            return show_plan(target, planned, breaker, built.reporter)
        settings = Settings(built.options.run_id, context.logs_dir, breaker, timeout)
        return Loop(target, settings, built.reporter).run(planned)
    finally:
        target.close()
