"""The distributed job over the engine's connections: every node's stack first (a node that
differs is named and nothing starts), then torchrun on every node at once, each bounded, then
the cleanup on every node whatever happened (no process of the job is left)."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

from ..config.inventory import Host
from ..ground.errors import CommandTimeout, GpuprovError, Interrupted
from ..transport.connection import BaseConnection
from . import parse, plan
from .verdict import NodeRun, Outcome, Verdict, judge, node_sku, skew, table_bytes

T = TypeVar("T")
Note = Callable[[str], None]


@dataclass
class Member:
    """A node of the job: its inventory host, how to connect to it, the address the others
    reach its rendezvous at."""

    host: Host
    connect: Callable[[Host], BaseConnection]
    address: str
    python: str  # the node's `validate_python`, else its inventory `python`


def _each(members: list[Member], work: Callable[[Member], T],
          cancel: Optional[threading.Event] = None) -> dict[str, T]:
    """`work` on every member at once; {name: what it returned}. Ctrl-C sets `cancel` (the
    run's: the nodes' commands stop) before the workers are waited for."""
    with ThreadPoolExecutor(max_workers=max(1, len(members)),
                            thread_name_prefix="distributed") as pool:
        futures = {m.host.name: pool.submit(work, m) for m in members}
        try:
            return {name: future.result() for name, future in futures.items()}
        except BaseException:
            if cancel is not None:
                cancel.set()
            raise


class Job:
    """One distributed job over `members` (in order: the first hosts the rendezvous)."""

    def __init__(self, members: list[Member], settings: plan.Settings, run_id: str,
                 package: bytes, note: Note, cancel: threading.Event):
        self.members, self.settings, self.run_id = members, settings, run_id
        self.cancel = cancel
        self.package, self.note = package, note
        self.token = plan.new_token()
        self.conns: dict[str, BaseConnection] = {}
        self.endpoint = f"{members[0].address}:{settings.port}"

    def run(self) -> Outcome:
        started = time.monotonic()
        names = [m.host.name for m in self.members]
        try:
            out = self._run(names)
        finally:
            left = self._cleanup()
            for conn in self.conns.values():
                conn.close()
        out.left = left
        out.elapsed_s = time.monotonic() - started
        return out

    def _run(self, names: list[str]) -> Outcome:
        stacks, failed = self._stacks()
        if failed:
            return Outcome(Verdict(False, _joined(failed), failed), names, self.endpoint)
        odd = skew(stacks)
        if odd:
            odd = {name: f"version skew: {why}" for name, why in odd.items()}
            return Outcome(Verdict(False, _joined(odd) + "; nothing started", odd), names,
                           self.endpoint, stacks=stacks)
        gpus = stacks[names[0]]["gpus"]
        backend = "nccl" if gpus > 0 else "gloo"
        self.note(f"distributed: {len(names)} nodes, {backend}, {max(gpus, 1)} process(es) "
                  f"each, rendezvous at {self.endpoint} (c10d), "
                  f"{self.settings.limit_s:g} s at most")
        runs, texts = self._launch(backend, max(gpus, 1),
                                   plan.max_bytes(gpus, table_bytes(node_sku(stacks))))
        result = None
        try:
            result, _ = parse.first_result(texts)
        except parse.BadAnswer as exc:
            runs[names[0]].said = f"bad result: {exc}"
        verdict = judge(result, runs, self.endpoint, self.settings.limit_s, self.settings.floor_gbs,
                        node_sku(stacks))
        return Outcome(verdict, names, self.endpoint, backend, stacks, runs, result)

    def _stacks(self) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        def probe(m: Member) -> Any:
            try:
                conn = m.connect(m.host)
                self.conns[m.host.name] = conn
                res = conn.run(plan.stack_script(m.host.name, m.python, self.run_id),
                               stdin=self.package, timeout=plan.STACK_TIMEOUT_S)
                if res.rc != 0:
                    return f"stack probe failed (exit {res.rc}): {parse.last_line(res.err)}"
                found = parse.stack(res.out)
                if found["torch"] is None:
                    return "no torch in its python"
                return found
            except (GpuprovError, parse.BadAnswer) as exc:
                return f"stack probe failed: {exc}"

        said = _each(self.members, probe, self.cancel)
        return ({n: s for n, s in said.items() if isinstance(s, dict)},
                {n: s for n, s in said.items() if isinstance(s, str)})

    def _launch(self, backend: str, nproc: int, nbytes: int) -> tuple[dict[str, NodeRun], dict[str, str]]:
        texts: dict[str, str] = {}

        def one(m: Member) -> NodeRun:
            rank = next(i for i, o in enumerate(self.members) if o is m)
            launch = plan.Launch(m.host.name, m.python, self.run_id, len(self.members), nproc,
                                 rank, self.endpoint, m.address, backend, nbytes, self.token)
            try:
                res = self.conns[m.host.name].run(plan.launch_script(launch, self.settings),
                                                  timeout=self.settings.limit_s + plan.KILL_AFTER_S + 10)
            except CommandTimeout:
                return NodeRun(None, False, "timeout", "its command did not come back")
            except Interrupted:
                return NodeRun(None, False, "", "interrupted")
            except GpuprovError as exc:
                return NodeRun(None, False, "", str(exc))
            texts[m.host.name] = res.out
            failure = "timeout" if res.rc in plan.TIMED_OUT else parse.torchrun_failure(res.err)
            started = bool(parse.started(res.out))
            if started and failure == "connect":  # it reached the rendezvous: a later failure
                failure = ""
            return NodeRun(res.rc, bool(parse.joined(res.out)), failure, parse.last_line(res.err),
                           started=started, tail=parse.tail(res.err))

        return _each(self.members, one, self.cancel), texts

    def _cleanup(self) -> dict[str, Optional[int]]:
        """Every node's leftover processes of the job stopped by PID, its package removed;
        how many each had left (None: the node could not be asked)."""
        def clean(m: Member) -> Optional[int]:
            conn = self.conns.get(m.host.name)
            if conn is None:
                return None
            try:
                res = conn.run(plan.cleanup_script(m.host.name, self.run_id, self.token),
                               timeout=plan.CLEANUP_TIMEOUT_S, cancellable=False)
            except GpuprovError:
                return None
            return parse.left(res.out)

        return _each(self.members, clean)


def _joined(named: dict[str, str]) -> str:
    return "; ".join(f"{name}: {why}" for name, why in named.items())
