"""The distributed job on a Slurm cluster: inside the validation's allocation, a short step that
prints every node's stack (the skew check before anything starts), then the job as one step,
`srun` running torchrun on every node (one task per node; torchrun starts one process per GPU).

srun's options (slurm.schedmd.com/srun.html, Slurm 22.05 as Debian 12 ships it):
`--nodes=N --ntasks-per-node=1` one task on each of the allocation's N nodes; `--label`
("Prepend task number to lines of stdout/err"): each line is said to come from its task, and
task i runs on the node of SLURM_NODEID i; `--kill-on-bad-exit=0`: a node whose torchrun fails
does not end the others' tasks (each says its own end, so the node to blame is named);
`--time=M` the step's own time limit in minutes, past which Slurm stops it (after KillWait).
The task's environment (srun.html, "OUTPUT ENVIRONMENT VARIABLES"): SLURM_NODEID (the node's
index in the step, 0 first), SLURM_NNODES, SLURMD_NODENAME, SLURM_JOB_NODELIST; the first node's
address is its NodeAddr (`scontrol show node`: the address slurmctld itself reaches it at), and
each node's own is its NodeAddr too.
"""
from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from . import parse, plan
from .verdict import NodeRun, Outcome, Verdict, judge, node_sku, skew, table_bytes

_LABEL = re.compile(r"^\s*([0-9]{1,6}): ?(.*)$")


@dataclass(frozen=True)
class Step:
    """Where the job runs on the nodes: validate/ unpacked at `package` (a folder every node
    reads, or the same path on each), with `python`; the nodes of the allocation, counted."""

    package: str  # '' : the package comes on the step's stdin, unpacked by each task
    python: str
    nodes: int
    run_id: str
    nodelist: tuple[str, ...] = ()  # the allocation's nodes the step runs on (all: empty)
    extra: tuple[str, ...] = ()     # srun's options for the node's resources (--gpus-per-node)


def _srun(step: Step, minutes: int) -> str:
    """srun as the module says; with `nodelist`, only those nodes of the allocation
    (`--nodelist`); with the package on stdin, to every task (`--input=all`: "stdin will be
    redirected from the standard input of srun to all remote tasks", srun.html)."""
    words = [f"--nodes={step.nodes}", "--ntasks-per-node=1", "--label", "--kill-on-bad-exit=0",
             f"--time={minutes}", *step.extra]
    if step.nodelist:
        words.append(f"--nodelist={','.join(step.nodelist)}")
    if not step.package:
        words.append("--input=all")
    return "srun " + " ".join(shlex.quote(w) for w in words)


def _cd(step: Step) -> str:
    """Shell lines that go to the package: its folder, or (package on stdin) a fresh folder
    of the node's TMPDIR it is unpacked into, removed when the task ends."""
    if step.package:
        return f"cd {shlex.quote(step.package)} || exit {plan.PACKAGE_MISSING}\n"
    return ('D=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-dist-XXXXXX") || exit '
            f'{plan.PACKAGE_MISSING}\n'
            "trap 'cd /; rm -rf \"$D\"' EXIT\n"
            f'tar -xzf - -C "$D" && cd "$D" || exit {plan.PACKAGE_MISSING}\n')


def _node_lines() -> str:
    """Shell lines that set NODE (this node's name), HEAD and ME (the first node's and this
    node's NodeAddr) and say NODE."""
    addr = ("scontrol show node \"$1\" 2>/dev/null | tr ' ' '\\n' | "
            "sed -n 's/^NodeAddr=//p' | head -n 1")
    return ("NODE=${SLURMD_NODENAME:-$(hostname)}\n"
            f"addr() {{ a=$({addr}); echo \"${{a:-$1}}\"; }}\n"
            # the step's first node (SLURM_STEP_NODELIST: "List of nodes allocated to the
            # step", srun.html), a part of the job's when the step runs on some of its nodes
            'HEAD=$(addr "$(scontrol show hostnames "${SLURM_STEP_NODELIST:-$SLURM_JOB_NODELIST}"'
            ' | head -n 1)")\n'
            'ME=$(addr "$NODE")\n'
            'echo "@@node $NODE"\n')


def stack_command(step: Step) -> str:
    """The step that prints every node's stack (`@@node`, then `@@stack`)."""
    script = (_node_lines() + _cd(step) +
              f'PYTHONDONTWRITEBYTECODE=1 {shlex.quote(step.python)} -m validate.dist_job --stack'
              " </dev/null")
    minutes = math.ceil(plan.STACK_TIMEOUT_S / 60)
    return f"{_srun(step, minutes)} sh -c {shlex.quote(script)}"


def job_command(step: Step, settings: plan.Settings, backend: str, nproc: int, nbytes: int,
                token: str) -> str:
    """The job's step: torchrun on every node (plan.torchrun_words), bounded by `timeout` as
    over SSH, what outlives it stopped by PID (plan.kill_token), then `@@rc N`."""
    words = plan.torchrun_words(str(step.nodes), str(nproc), '"$HEAD:$PORT"',
                                shlex.quote(f"gpuprov-{step.run_id}"), '"$IS_HOST"', '"$ME"',
                                '"$NODE"', '"$a$b"', backend, nbytes, settings)
    script = (_node_lines() + plan.halves(token) + f"PORT={settings.port}\n"
              'IS_HOST=false; [ "${SLURM_NODEID:-0}" = 0 ] && IS_HOST=true\n'
              + _cd(step) +
              f"PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 timeout -k {plan.KILL_AFTER_S} "
              f"{settings.limit_s:g} {shlex.quote(step.python)} {' '.join(words)} </dev/null\n"
              f'rc=$?\n{plan.kill_token(chr(34) + "$NODE" + chr(34), token)}echo "@@rc $rc"\n'
              "exit $rc")
    minutes = math.ceil((settings.limit_s + plan.KILL_AFTER_S + 30) / 60)
    return f"{_srun(step, minutes)} sh -c {shlex.quote(script)}"


def split_tasks(stdout: str, stderr: str) -> dict[int, tuple[str, str]]:
    """The step's output by task (`--label`): {task: (its stdout, its stderr)}; unlabelled
    lines (srun's own) are dropped."""
    out: dict[int, tuple[list[str], list[str]]] = {}
    for stream, text in ((0, stdout), (1, stderr)):
        for line in text.splitlines():
            match = _LABEL.match(line)
            if match:
                out.setdefault(int(match.group(1)), ([], []))[stream].append(match.group(2))
    return {task: ("\n".join(o), "\n".join(e)) for task, (o, e) in sorted(out.items())}


def node_of(text: str) -> str:
    """The node a task said it ran on (`@@node NAME`), '' when none or not a node name."""
    names = [line[7:].strip() for line in text.splitlines() if line.startswith("@@node ")]
    return names[0] if names and parse.valid_name(names[0]) else ""


def stacks(stdout: str, stderr: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The stack step's answer: {node: stack}, {node or task: why it gave none}."""
    found: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for task, (out, err) in split_tasks(stdout, stderr).items():
        node = node_of(out) or f"task {task}"
        try:
            found[node] = parse.stack(out)
        except parse.BadAnswer as exc:
            failed[node] = f"stack probe failed: {exc}" + (
                f": {parse.last_line(err)}" if err.strip() else "")
    return found, failed


def job_runs(stdout: str, stderr: str, nodes: list[str]) -> tuple[dict[str, NodeRun], dict[str, str]]:
    """The job step's answer per node (in `nodes`' order, the step's node order) and each
    node's stdout. A node that said nothing never answered."""
    tasks = split_tasks(stdout, stderr)
    runs: dict[str, NodeRun] = {}
    texts: dict[str, str] = {}
    for index, name in enumerate(nodes):
        out, err = tasks.get(index, ("", ""))
        texts[name] = out
        said = [line[5:] for line in out.splitlines() if line.startswith("@@rc ")]
        rc = int(said[-1]) if said and said[-1].isdigit() and len(said[-1]) < 4 else None
        failure = ("timeout" if rc is None or rc in plan.TIMED_OUT
                   else parse.torchrun_failure(err))
        started = bool(parse.started(out))
        if started and failure == "connect":
            failure = ""
        runs[name] = NodeRun(rc, bool(parse.joined(out)), failure, parse.last_line(err),
                             started=started, tail=parse.tail(err))
    return runs, texts


# What runs a command on the login node inside the allocation: (exit status, stdout, stderr).
Runner = Callable[[str, float], tuple[int, str, str]]


def run_job(runner: Runner, step: Step, settings: plan.Settings,
            note: Callable[[str], None] = lambda _: None) -> Outcome:
    """The job on the allocation's nodes through `runner` (the route's login connection, or
    the test's shell): the stack step, the skew check, the job's step; the outcome."""
    rc, out, err = runner(stack_command(step), plan.STACK_TIMEOUT_S + 30)
    found, failed = stacks(out, err)
    names = list(found) + [n for n in failed if n not in found]
    if failed or len(found) != step.nodes:
        failed = failed or {"allocation": f"{len(found)} of {step.nodes} nodes answered the "
                                          f"stack step (srun exit {rc})"}
        return Outcome(Verdict(False, "; ".join(f"{n}: {w}" for n, w in failed.items()),
                               failed), names)
    odd = {name: f"version skew: {why}" for name, why in skew(found).items()}
    if odd:
        return Outcome(Verdict(False, "; ".join(f"{n}: {w}" for n, w in odd.items())
                               + "; nothing started", odd), names, stacks=found)
    gpus = found[names[0]]["gpus"]
    backend = "nccl" if gpus > 0 else "gloo"
    note(f"distributed: {len(names)} nodes, {backend}, {max(gpus, 1)} process(es) each, one "
         f"srun step, rendezvous on {names[0]} port {settings.port} (c10d)")
    token = plan.new_token()
    rc, out, err = runner(job_command(step, settings, backend, max(gpus, 1),
                                      plan.max_bytes(gpus, table_bytes(node_sku(found))), token),
                          settings.limit_s + plan.KILL_AFTER_S + 90)
    runs, texts = job_runs(out, err, names)
    result = None
    try:
        result, _ = parse.first_result(texts)
    except parse.BadAnswer as exc:
        runs[names[0]].said = f"bad result: {exc}"
    endpoint = f"{names[0]}:{settings.port}"
    verdict = judge(result, runs, endpoint, settings.limit_s, settings.floor_gbs,
                    node_sku(found))
    left = {name: parse.left(split_tasks(out, err).get(i, ("", ""))[0])
            for i, name in enumerate(names)}
    return Outcome(verdict, names, endpoint, backend, found, runs, result, left=left)
