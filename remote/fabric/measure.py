"""`gpuprov fabric`'s pairwise work, from the command's assembled Run to the exit status
(`remote.commands.fabric` checks the options, the inventory and the settings, then hands over
here): the nodes, the rounds, the verdict, the drain; the exports are the command's
(`remote.commands.exports`).

Exit status (remote.ground.exitcodes): 0 no suspect, 3 a suspect node or link was found, or the two
ends of a pair disagree (as a failed validation), 4 a node could not be reached (it is a
suspect too, with why), 1 a pair could not be measured (every port tried was taken on its
server's node, or its server reached by someone else), 130 interrupted.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

from ..config.inventory import Host
from ..engine.results import HostResult
from ..engine.run import Run
from ..engine.varlayers import layered_vars
from ..ground.errors import GpuprovError, HostError, InputError
from ..ground.exitcodes import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STEP_FAILED,
    EXIT_UNREACHABLE,
    EXIT_VALIDATION_FAILED,
)
from ..output.term import printable, printable_line
from ..scheduler import SCHEDULERS
from ..scheduler.base import list_until_answered
from ..transport.connection import BaseConnection
from .output import host_results, matrix_text, write_node_records
from .run import ClusterLink, FabricRun, Node, Settings, node_for
from .tools import TOOLS
from .verdict import PairResult, judge

DRAIN_TIMEOUT_S = 120.0  # as the Slurm route's gate commands (slurm/cluster.py GATE_TIMEOUT_S)


@dataclass(frozen=True)
class Judged:
    """What the exports read of a judged run besides each node's result: the verdict, the
    nodes in order, and how long each round took."""

    verdict: Any
    names: list[str]
    round_seconds: list[float]


Export = Callable[[dict[str, HostResult], Judged], None]


def profile_floors(settings: Settings, profiles: list[Any]) -> None:
    """Without `fabric_floor`, the floors of the nodes' `node_profile` `fabric:` (issue 32's
    profile, checked before the run by validate/profile.py): per tool, the lowest any node's
    profile names, since a pair is held to the floor both of its nodes can do."""
    if settings.floors:
        return
    lowest: dict[str, float] = {}
    for prof in profiles:
        floors = prof.get("fabric") if isinstance(prof, dict) else None
        for tool, value in (floors or {}).items() if isinstance(floors, dict) else ():
            if tool not in TOOLS or isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise InputError(f"node_profile: fabric: {tool!r}: {value!r} is not a tool of "
                                 f"{', '.join(TOOLS)} with a positive figure")
            lowest[tool] = min(float(value), lowest.get(tool, math.inf))
    if lowest:
        settings.floors = lowest
        settings.floors_from = "node_profile fabric, the lowest of the nodes'"


def job_name(run_id: str) -> str:
    """The run's jobs' name in the scheduler: letters, digits, '-' and '_'."""
    return "gpuprov-fabric-" + "".join(c if c.isalnum() else "_" for c in run_id)


def _cancel_jobs(conn: BaseConnection, login: Host, run_id: str) -> None:
    assert login.scheduler is not None
    scheduler = SCHEDULERS[login.scheduler.key]
    try:
        conn.run(scheduler.cancel_script(login.scheduler.settings, job_name(run_id)),
                 timeout=DRAIN_TIMEOUT_S, cancellable=False)
    except GpuprovError:
        pass  # the login node is gone: nothing more can be done from here


def cluster_nodes(engine: Run, login: Host, vars_: dict[str, Any], run_id: str,
                  opened: list[BaseConnection]) -> list[Node]:
    """The usable nodes of `login`'s cluster (its partition, only the nodes its entry names
    when it names some, none drained or down, a late one waited for as the scheduler says),
    held in one allocation for the run, each reached through the login node's connection
    (appended to `opened`) as steps of that allocation."""
    assert login.scheduler is not None
    scheduler, settings = SCHEDULERS[login.scheduler.key], login.scheduler.settings
    conn = engine.connect(login)
    opened.append(conn)

    def listing() -> str:
        """The login node's listing; `HostError` with its reason when the scheduler gave none
        (its controller down: an empty listing would read as a cluster without the nodes
        the inventory names, and blame its line)."""
        res = conn.run(scheduler.nodes_script(settings), timeout=DRAIN_TIMEOUT_S)
        if res.rc != 0:
            said = [line for line in res.err.splitlines() if line.strip()]
            raise HostError(f"{scheduler.noun} did not list its nodes (exit {res.rc}: "
                            f"{printable_line(said[-1])[:300] if said else 'no output'})")
        return res.out

    def wait() -> tuple[float, str]:
        """How long the scheduler says to wait for its late nodes (Slurm: SlurmdTimeout)."""
        try:
            res = conn.run(scheduler.late_wait_script(settings), timeout=DRAIN_TIMEOUT_S)
        except GpuprovError:
            return scheduler.late_wait("")
        return scheduler.late_wait(res.out if res.rc == 0 else "")

    listed = list_until_answered(
        listing, lambda out: scheduler.late_nodes(settings, out),
        lambda text: engine.reporter.running(login.name, text), scheduler.noun, wait=wait)
    found = scheduler.usable_nodes(settings, listed)
    if len(found) < 2:
        raise InputError(f"{scheduler.noun} lists {len(found)} usable node(s) in the "
                         "partition: fabric needs 2 to pair")
    allocation = _allocate(conn, login, [name for name, _ in found], run_id)
    hcas = [str(h) for h in vars_.get("fabric_hcas") or []]
    return [Node(Host(name, address, login.where), address, hcas,
                 ClusterLink(conn, functools.partial(scheduler.on_node, settings, name,
                                                     allocation=allocation)))
            for name, address in found]


def _allocate(conn: BaseConnection, login: Host, nodes: list[str], run_id: str) -> str:
    """One allocation of `nodes` for the whole run (its id): every command is a step of it,
    so a busy partition queues the run once, not each command. A failure cancels what may
    have been granted and raises `HostError` with the scheduler's last word."""
    assert login.scheduler is not None
    scheduler, settings = SCHEDULERS[login.scheduler.key], login.scheduler.settings
    try:
        res = conn.run(scheduler.allocate_script(settings, nodes, job_name(run_id)),
                       timeout=DRAIN_TIMEOUT_S)
    except GpuprovError:
        _cancel_jobs(conn, login, run_id)
        raise
    allocation = scheduler.allocated(res.out)
    if allocation is None:
        _cancel_jobs(conn, login, run_id)
        said = [line for line in res.out.splitlines() if line.strip()]
        raise HostError(f"{scheduler.noun} did not allocate the nodes (exit {res.rc}: "
                        f"{printable_line(said[-1])[:300] if said else 'no output'})")
    return allocation


def run_pairs(engine: Run, hosts: list[Host], settings: Settings, out: TextIO, export: Export,
              logs_dir: str, drain_failed: bool = False) -> int:
    """Measure the pairs of `hosts` on `engine` (the command's assembled Run; a scheduler host
    among them is the cluster whose nodes are paired, and the suspects drained on with
    `drain_failed`), show the matrix on `out`, hand the results to `export` (the command's
    exports), return the exit status."""
    logins = [h for h in hosts if h.scheduler is not None]
    opened: list[BaseConnection] = []
    nodes = _nodes(engine, hosts, settings, opened)
    names = [n.host.name for n in nodes]
    reporter = engine.reporter
    reporter.set_hosts(names)

    def said(pair: PairResult) -> None:
        figure = f"{pair.value:.4g} {pair.unit}" if pair.value is not None else pair.error
        reporter.note(printable(f"round {pair.round}: {pair.client} -> {pair.server} "
                                f"({pair.tool}): {figure}"))

    fabric = FabricRun(engine, nodes, settings, on_pair=said)
    rounds = fabric.rounds()
    run_id = engine.options.run_id
    reporter.note(f"fabric: {len(nodes)} node(s), {len(rounds)} round(s) of "
                  f"{', '.join(str(len(r)) for r in rounds)} pair(s), {settings.seconds:g} s a "
                  f"test, run {run_id}")
    try:
        fabric.open_all(reporter.note)
        pairs = fabric.execute()
    except KeyboardInterrupt:
        reporter.note("interrupted: the servers started were stopped; nothing judged")
        return EXIT_INTERRUPTED
    finally:
        fabric.close_all()
        if opened:  # a cluster: its jobs go, whatever stopped their clients
            _cancel_jobs(opened[0], logins[0], run_id)
        for conn in opened:
            conn.close()
        reporter.close()
    for pair in pairs:  # what a node said may echo a secret of the run: masked everywhere
        pair.error = engine.redact(pair.error)
    verdict = judge(pairs, names, settings.floors, settings.relative, settings.floors_from)
    results = host_results(verdict, names)
    for node in nodes:
        if node.error:
            results[node.host.name].unreachable = True
            results[node.host.name].message = node.error
    write_node_records(verdict, names, Path(logs_dir), run_id)
    reporter.recap(results, extra_column="fabric")
    out.write(matrix_text(verdict, names))
    out.write(f"rounds took {', '.join(f'{s:.2f} s' for s in fabric.round_seconds)}; "
              f"logs: {logs_dir}/<node>/{run_id}/fabric.json\n")
    if drain_failed and verdict.suspect_nodes:
        _drain(engine, logins, verdict.suspect_nodes, verdict.reasons, run_id, out)
    export(results, Judged(verdict, names, fabric.round_seconds))
    return exit_status(pairs, nodes, verdict)


def _nodes(engine: Run, hosts: list[Host], settings: Settings,
           opened: list[BaseConnection]) -> list[Node]:
    """The nodes to pair: the selected hosts, with the floors of their profiles when the
    settings name none; else a cluster's nodes, each command a job on its node through the
    login node (its connection appended to `opened`)."""
    inventory, extra_vars = engine.inventory, engine.options.extra_vars
    logins = [h for h in hosts if h.scheduler is not None]
    members = [h for h in hosts if h.scheduler is None]
    if len(members) >= 2:
        layers = [layered_vars(inventory, h, extra_vars)[0] for h in members]
        profile_floors(settings, [raw.get("node_profile") for raw in layers])
        return [node_for(h, raw) for h, raw in zip(members, layers)]
    try:
        return cluster_nodes(engine, logins[0], layered_vars(inventory, logins[0], extra_vars)[0],
                             engine.options.run_id, opened)
    except GpuprovError as exc:
        engine.reporter.close()
        if isinstance(exc, InputError) and exc.line:
            raise  # the inventory's own line (slurm.nodes naming a node it cannot have)
        raise InputError(f"{logins[0].name}: {exc}", inventory.path) from None


def exit_status(pairs: list[PairResult], nodes: list[Node], verdict: Any) -> int:
    """1 before 4 before 3 (remote.ground.exitcodes.ORDER): a pair not measured is a step that could
    not run, an unreachable node is 4, a suspect 3."""
    if any(not p.measured for p in pairs):
        return EXIT_STEP_FAILED
    if any(n.error for n in nodes):
        return EXIT_UNREACHABLE
    return EXIT_VALIDATION_FAILED if verdict.findings else EXIT_OK


def _drain(engine: Run, logins: list[Host], suspects: list[str], reasons: dict[str, str],
           run_id: str, out: TextIO) -> None:
    """Drain each suspect through each selected cluster's login node, with the reason
    (`gpuprov <run>: fabric: <why>`), by the scheduler's own command: a node drained by
    someone else is left alone, and the line says so."""
    wanted = {node: f"fabric: {reasons.get(node, 'suspect')}" for node in suspects}
    for login in logins:
        assert login.scheduler is not None
        scheduler = SCHEDULERS[login.scheduler.key]
        try:
            conn = engine.connect(login)
            try:
                result = conn.run(scheduler.drain_script(login.scheduler.settings, wanted, run_id),
                                  become=login.become, timeout=DRAIN_TIMEOUT_S,
                                  cancellable=False)
            finally:
                conn.close()
        except GpuprovError as exc:
            out.write(printable(f"drain through {login.name} failed: {exc}") + "\n")
            continue
        for node, (rc, said) in scheduler.drained(result.out).items():
            if node in wanted:
                state = "drained" if rc == 0 else f"not drained: {said[:200]}"
                out.write(printable(f"{node}: {state}, through {login.name}") + "\n")
