"""The remediation's `Target` on a Slurm cluster: the nodes of the login node's `slurm:` entry
(its partition, and its `nodes:` when it names some), reached through the scheduler on the
login node's engine session, as `validate` reaches them (remote/scheduler/slurm/).

What each step is on Slurm:
- out for remediation: drained with a remediation reason of gpuprov's (`gpuprov <run>:
  remediate: ...`: being remediated, or left out by a remediation), or held in a gpuprov
  reservation (a `validate --resume-passed` or a re-validation); the pool is the entry's
  nodes;
- someone else's: drained or down with a reason gpuprov did not write (nodes.GPUPROV_REASON;
  Slurm's own "Not responding" is no one's): never touched;
- take out: a drain with the reason (gate.drain_command keeps its rule: a node someone else
  drained meanwhile is left alone);
- evidence: NOT gathered through Slurm. nvidia-bug-report.sh refuses to run unless root
  (validate/evidence.py cites it) and a job step runs as the invoking user (srun(1) 22.05,
  --uid: a job runs "as user instead of the invoking user id" only when asked, by root);
  the answer says so and names the way that works, the node's SSH host (`gpuprov evidence`);
- reset the GPU: refused with `escalate`: `nvidia-smi -r` needs root on the node (nvidia-smi(1)
  "-r, --gpu-reset", as gpureset.py cites it), which a job step of gpuprov's is not given,
  and a drained idle node loses nothing more to the reboot Slurm does itself (RebootProgram):
  the next step follows at once. A decision, not a limit of Slurm's: a site whose login user
  is root could reset through a step, and does not need to;
- reboot: `scontrol reboot reason=...` (remote/scheduler/slurm/reboot.py: why neither ASAP
  nor nextstate), then waiting until Slurm says each node rebooted, at least until Slurm's own
  verdict at ResumeTimeout (reboot.wait_limit); one Slurm set DOWN then is drained again (Slurm
  cleared its drain); one whose reboot is only requested at the limit (it still runs jobs) has
  it cancelled (it stays drained), one whose reboot is under way cannot (the answer says so);
- validate again: as `validate --resume-passed` takes a node back (gate.py): hold the nodes in
  a reservation, resume them inside it, validate them as one job with the login node's
  profile into logs/<node>/<run>/ (the route's SlurmCluster does each part), then drain each
  again, with its finding or "passed", before the reservation goes: a node is back in service
  only at `put_back`;
- put back: resume, only when the node is still drained with gpuprov's reason;
- leave out: the drain's reason replaced with the escalation, only when it is gpuprov's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.inventory import Host
from ..engine.jobs.validate import Attempt, Validate
from ..engine.session import HostSession
from ..ground.errors import CommandTimeout, HostError, InputError
from ..report.collect import read_results
from ..scheduler.base import NodeRecord, RouteFailed, RunContext, natural_order
from ..scheduler.slurm import gate, reboot
from ..scheduler.slurm.cluster import GATE_TIMEOUT_S, SlurmCluster
from ..scheduler.slurm.hostlist import last_line
from ..scheduler.slurm.job import with_conf
from ..scheduler.slurm.nodes import GPUPROV_REASON, NODE_NAME, Node
from ..scheduler.slurm.settings import SlurmSettings
from .plan import action_of, finding_of
from .reasons import OURS, reason
from .routes import RouteContext
from .target import Outcome, OutNow, Revalidation, missing

# The word after `gpuprov <run>: ` that marks a drain as a remediation's, counted by the
# breaker (a node left out too, as over SSH: docs/how-to/remediation.md), the shape the loop's
# reasons have (remediation/run.py).
PASSED = "passed its validation again, to be resumed"
# Slurm's own reason for a node it set down (gate._SLURMS_OWN_GLOB): no one's note
SLURMS_OWN = "Not responding"
EVIDENCE_NOT_GATHERED = ("evidence not gathered through Slurm: nvidia-bug-report.sh needs root "
                         "and a job step runs as the user who submits it; select the node's SSH "
                         "host (gpuprov evidence) to gather it")
RESET_REFUSED = ("a GPU reset needs root on the node (nvidia-smi -r), which a Slurm job step is "
                 "not given; through Slurm the next step is a reboot")
# `scontrol show reservation -o`: one line per reservation, `ReservationName=... Nodes=...`;
# the nodes of gpuprov's (gate.run_name), expanded by Slurm.
RESERVED_SCRIPT = ("scontrol show reservation -o 2>/dev/null | "
                   "sed -n 's/^ReservationName=gpuprov-[^ ]* .* Nodes=\\([^ ]*\\) .*/\\1/p' | "
                   'while read -r n; do scontrol show hostnames "$n"; done')


class _Context(RunContext):
    """The route's RunContext for a run id the remediation gives (its own run's)."""

    def __init__(self, session: HostSession, validate: Validate, record: dict[str, Any],
                 run_id: str):
        super().__init__(session, validate, record)
        self._run_id = run_id

    @property
    def run_id(self) -> str:
        return self._run_id


class SlurmTarget:
    """One remediation run's nodes behind a Slurm login node (`target.Target`)."""

    name = "slurm"

    def __init__(self, session: HostSession, settings: SlurmSettings, validate: Validate):
        self.session, self.settings, self.validate = session, settings, validate
        self.run_id = session.options.run_id
        self.open: list[SlurmCluster] = []  # the route's clusters this run opened (close)
        self.records: list[dict[str, Any]] = []  # each re-validation's record (the route's)
        self.owns_session = False  # opened by `route`: closed by `close`

    # ------------------------------------------------------------------ the login node
    def _run(self, script: str, admin: bool = False,
             timeout: float = GATE_TIMEOUT_S) -> tuple[int, str, str]:
        """Run `script` (SLURM_CONF exported) on the login node, with its `become` when
        `admin`; (exit status, stdout, stderr), exit status -1 when it timed out."""
        try:
            res = self.session.conn.run(with_conf(self.settings, script), timeout=timeout,
                                        become=admin and self.session.host.become,
                                        cancellable=False)
        except CommandTimeout as exc:
            self.session.log.event(f"slurm remediation: {exc}")
            return -1, "", str(exc)
        self.session.log.command("slurm", script, res.rc, res.elapsed_s, res.out, res.err)
        return res.rc, res.out, res.err

    def _each(self, commands: dict[str, str]) -> dict[str, Outcome]:
        """Each node's command as root/SlurmUser (gate.each_node_command): its Outcome."""
        if not commands:
            return {}
        rc, out, err = self._run(gate.each_node_command(commands), admin=True)
        answers = gate.parse_each_node(out)
        said = last_line(err) or f"exit {rc}"
        result = {}
        for node in commands:
            code, text = answers.get(node, (1, said))
            result[node] = Outcome(code == 0, "" if code == 0 else text or f"scontrol exit {code}")
        return result

    def _nodes(self) -> dict[str, Node]:
        """The entry's nodes now (its partition; its `nodes:` when it names some)."""
        cluster = SlurmCluster(self.settings, _Context(self.session, self.validate, {},
                                                       self.run_id))
        _, nodes, wanted = cluster.survey()
        keep = set(wanted) if wanted is not None else None
        return {name: node for name, node in nodes.items()
                if self.settings.partition in node.partitions and (keep is None or name in keep)}

    def _listing(self) -> str:
        rc, out, _ = self._run(reboot.LISTING, timeout=GATE_TIMEOUT_S)
        return out if rc == 0 else ""

    # ------------------------------------------------------------------ the breaker's view
    def out_now(self) -> OutNow:
        nodes = self._nodes()
        out = {name for name, node in nodes.items()
               if node.drained_by_gpuprov and OURS.match(node.reason)}
        rc, held, _ = self._run(RESERVED_SCRIPT)
        out |= {name for name in held.split() if name in nodes} if rc == 0 else set()
        return OutNow(frozenset(out), len(nodes))

    def taken_by_someone_else(self, nodes: list[str]) -> dict[str, str]:
        listed = self._nodes()
        taken = {}
        for name in nodes:
            node = listed.get(name)
            if node is None:
                taken[name] = "not a node of this cluster's partition"
            elif (node.drained or "DOWN" in node.states) and node.reason and \
                    not GPUPROV_REASON.match(node.reason) and not node.reason.startswith(SLURMS_OWN):
                taken[name] = f"{node.state}: {node.reason}"
        return taken

    # ------------------------------------------------------------------ the steps
    def take_out(self, reasons: dict[str, str]) -> dict[str, Outcome]:
        return missing(self._each({n: gate.drain_command(n, reason(self.run_id, r))
                                   for n, r in reasons.items()}), list(reasons))

    def evidence(self, nodes: list[str]) -> dict[str, Outcome]:
        return {n: Outcome(False, EVIDENCE_NOT_GATHERED) for n in nodes}

    def reset_gpu(self, nodes: list[str]) -> dict[str, Outcome]:
        return {n: Outcome(False, RESET_REFUSED, escalate=True) for n in nodes}

    def reboot(self, nodes: list[str], reasons: dict[str, str],
               timeout_s: float) -> dict[str, Outcome]:
        """`scontrol reboot` each node (drained already), then wait until Slurm says it
        rebooted (reboot.wait_back), at most `timeout_s`."""
        before = reboot.boot_times(self._listing())
        said = {n: reason(self.run_id, reasons.get(n, "reboot the node")) for n in nodes}
        asked = self._each({n: reboot.reboot_command([n], said[n]) for n in nodes})
        started = [n for n in nodes if asked[n].ok]
        limit = self._wait_limit(timeout_s)
        for node in started:
            self.session.reporter.running(node, f"rebooting through Slurm (up to {limit})")
        back = reboot.wait_back(self._listing, started, before, limit.seconds,
                                sleep=self.session.sleep) if started else {}
        result = dict(asked)
        result.update({node: Outcome(ok, why) for node, (ok, why) in back.items()})
        result.update(self._late(back))
        result.update(self._drain_again(back, said))
        return missing(result, nodes)

    def _wait_limit(self, timeout_s: float) -> "_Limit":
        """How long to wait for the reboots: `timeout_s`, or until Slurm's verdict at the
        cluster's ResumeTimeout (reboot.wait_limit) when that comes later."""
        rc, out, _ = self._run(reboot.CONFIG)
        resume_s = reboot.resume_timeout(out) if rc == 0 else None
        seconds = reboot.wait_limit(timeout_s, resume_s)
        return _Limit(seconds, "" if seconds <= timeout_s else
                      f"the cluster's ResumeTimeout {resume_s} s and Slurm's check after it")

    def _drain_again(self, back: dict[str, tuple[bool, str]],
                     reasons: dict[str, str]) -> dict[str, Outcome]:
        """Drain again the nodes Slurm set DOWN at ResumeTimeout: Slurm cleared their drain,
        and a node that registers later would take jobs (reboot.py)."""
        down = [n for n, (ok, why) in back.items() if not ok and reboot.TIMED_OUT in why]
        drained = self._each({n: gate.drain_command(n, reasons[n]) for n in down})
        return {n: Outcome(False, f"{back[n][1]}; " + (
            reboot.DRAINED_AGAIN if drained[n].ok else
            f"could not be drained again ({drained[n].detail}): it takes jobs when it registers"))
            for n in down}

    def _late(self, back: dict[str, tuple[bool, str]]) -> dict[str, Outcome]:
        """The nodes still rebooting at the limit: a reboot only requested is cancelled (the
        node stays drained); an issued one cannot be (reboot.cancel_command), and says so."""
        late = {n: why for n, (ok, why) in back.items() if not ok and why.startswith("did not come back")}
        requested = [n for n, why in late.items() if "REBOOT_REQUESTED" in why]
        cancelled = self._each({n: reboot.cancel_command(n) for n in requested})
        answers = {}
        for node, why in late.items():
            if node not in cancelled:
                answers[node] = Outcome(False, f"{why}; {reboot.ISSUED_TOO_LATE}")
            elif cancelled[node].ok:
                answers[node] = Outcome(False, f"{why}; its reboot request cancelled")
            else:
                answers[node] = Outcome(False, f"{why}; its reboot request could not be "
                                               f"cancelled: {cancelled[node].detail}")
        return answers

    def revalidate(self, nodes: list[str], run_id: str) -> dict[str, Revalidation]:
        """Hold `nodes` in a reservation, resume them inside it, validate them as one job
        (the route's SlurmCluster, as `validate --resume-passed`), drain each again (its
        finding, or PASSED), then release the reservation."""
        record: dict[str, Any] = {"remediation": run_id}
        self.records.append(record)
        cluster = SlurmCluster(self.settings, _Context(self.session, self.validate, record, run_id))
        self.open.append(cluster)
        try:
            listed = {n.name: n for n in cluster.list_nodes()}
        except (RouteFailed, InputError) as exc:
            return {n: Revalidation(False, run_id, f"not validated: {exc}") for n in nodes}
        answers: dict[str, Revalidation] = {}
        records: dict[str, NodeRecord] = {}
        for name in nodes:
            node = listed.get(name)
            if node is None or not NODE_NAME.fullmatch(name):
                answers[name] = Revalidation(False, run_id, "not validated: not listed by Slurm")
            elif node.unavailable:
                answers[name] = Revalidation(False, run_id, f"not validated: {node.state}")
            else:
                records[name] = NodeRecord(node, resumed=node.drained)
        try:
            if records:
                self._validate(cluster, records, run_id)
        finally:
            self._drain_after(records, run_id)
            self._release(cluster)
        for name, rec in records.items():
            answers[name] = _revalidation(rec, run_id)
        return answers

    def _validate(self, cluster: SlurmCluster, records: dict[str, NodeRecord],
                  run_id: str) -> None:
        """The route's steps 3 and 4 for `records`: reserve, resume, validate, each node's
        validation.json before and after (engine.jobs.validate.Attempt)."""
        views = [r.node for r in records.values()]
        attempts: dict[str, Attempt] = {}
        try:
            cluster.resume([v for v in views if isinstance(v, Node) and v.drained], views)
            attempts = {name: Attempt(cluster.context.node_folder(name)) for name in records}
            cluster.validate(records)
        except RouteFailed as exc:
            for rec in records.values():
                if not rec.judged:
                    rec.verdict = f"not validated: {exc}"
        finally:
            for name, attempt in attempts.items():
                rec = records[name]
                attempt.end(rec.verdict, "" if rec.results else
                            rec.verdict.removeprefix("not validated: "), counts=rec.judged,
                            rc=rec.rc)

    def _drain_after(self, records: dict[str, NodeRecord], run_id: str) -> None:
        """Every re-validated node drained again before its reservation goes: with its
        finding, or PASSED (`put_back` resumes it)."""
        reasons = {name: reason(run_id, PASSED if rec.ok else
                                            _finding(rec)[0] or rec.verdict)
                   for name, rec in records.items()}
        done = self._each({n: gate.drain_command(n, r) for n, r in reasons.items()})
        for name, outcome in done.items():
            if outcome.ok:
                records[name].drained = reasons[name]
            else:
                records[name].gate_error = outcome.detail

    def put_back(self, nodes: list[str]) -> dict[str, Outcome]:
        return missing(self._each({n: gate.resume_ours_command(n) for n in nodes}), nodes)

    def leave_out(self, reasons: dict[str, str]) -> dict[str, Outcome]:
        return missing(self._each({n: gate.drain_command(n, reason(self.run_id, r))
                                   for n, r in reasons.items()}), list(reasons))

    def _release(self, cluster: SlurmCluster) -> None:
        """Delete the reservation `cluster` holds, once."""
        cluster.release()
        cluster.reservation = None
        if cluster in self.open:
            self.open.remove(cluster)

    def close(self) -> None:
        try:
            for cluster in list(self.open):
                self._release(cluster)
        finally:
            if self.owns_session:
                self.session.close()
                self.session.log.close()


@dataclass(frozen=True)
class _Limit:
    """The reboot wait, and why it is longer than asked ("" when it is not)."""

    seconds: float
    why: str = ""

    def __str__(self) -> str:
        return f"{self.seconds:.0f} s" + (f": {self.why}" if self.why else "")


def _finding(record: NodeRecord) -> tuple[str, str]:
    """(`check: finding`, action) of a node's results.json, as the SSH route reads its own
    (plan.finding_of, plan.action_of, through the report's capped reader of untrusted
    results); ('', '') when none can be read."""
    path = record.results
    results, _ = read_results(path, str(path)) if path is not None and path.is_file() else (None, [])
    if results is None:
        return "", ""
    return finding_of(results), action_of(results) or ""


def _revalidation(record: NodeRecord, run_id: str) -> Revalidation:
    if record.ok:
        return Revalidation(True, run_id)
    finding, action = _finding(record)
    return Revalidation(False, run_id, finding or " ".join(record.verdict.split()), action)


def open_target(session: HostSession, settings: Any, validate: Validate) -> SlurmTarget:
    """The Target of a login node whose inventory entry has `slurm:`, on its open session."""
    assert isinstance(settings, SlurmSettings)
    return SlurmTarget(session, settings, validate)


def route(context: RouteContext, hosts: list[Host]) -> tuple[SlurmTarget, list[str]]:
    """routes.TARGETS' "slurm" row: one login node's session (its vars are the profile the
    nodes are validated again with), the Target on it, and the entry's nodes. `InputError`
    when several login nodes are selected (one cluster a run) or the entry names a node or
    partition the cluster has not; `HostError` (`Unreachable` among them) when the login node
    cannot be reached or Slurm does not list its nodes: the command says so in one line, with
    the exit status of an unreachable host, and runs nothing for a cluster it cannot see."""
    if len(hosts) != 1:
        raise InputError(f"remediate through Slurm: select one cluster's login node a run "
                         f"(selected: {', '.join(h.name for h in hosts)})")
    host = hosts[0]
    assert host.scheduler is not None
    session = context.run.session(host)
    try:
        session.open()
        if session.var_facts != set():  # the login node's facts, only when a var reads one
            session.gather_facts(session.var_facts)
        session.build_context()
        target = open_target(session, host.scheduler.settings,
                             Validate(context.suite, context.logs_dir))
        target.owns_session = True
        nodes = sorted(target._nodes(), key=natural_order)  # noqa: SLF001
    except HostError:
        session.close()
        raise
    except RouteFailed as exc:
        session.close()
        raise HostError(str(exc)) from None
    except BaseException:
        session.close()
        raise
    return target, nodes


__all__ = ["SlurmTarget", "open_target", "route"]
