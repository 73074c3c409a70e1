"""The validation job: what each task runs on its node, the login-node script that starts one
job step per node, and the split of the steps' labelled output back into one stream per node.

One allocation, one step per node. `salloc` takes the nodes (exclusive, their GPUs, `--no-kill`:
"Do not automatically terminate a job if one of the nodes it has been allocated fails ... The
job allocation will not be revoked so the user may launch new job steps on the remaining nodes",
salloc(1), Slurm 22.05) and runs a script on the login node that starts one `srun -N1 -n1
--nodelist=NODE` per node, at most `fanout` at once (each srun is a client process on the
shared login node: a window keeps their number, and the login node's memory, flat in the
node count), and waits for them; when it ends salloc "relinquishes
the job allocation" (salloc(1) DESCRIPTION), so nothing outlives the run. A node that dies costs
only its own step: with one step for all nodes, srun aborted the whole step when slurmctld had
marked the dead node missing before srun saw its I/O fail (step_launch_notify_io_failure,
"aborting, io error with slurmstepd on node 1", seen under load).

No filesystem is assumed shared between the login node and the nodes: the package is written
once to a login-node temporary file (mktemp(1): "Files are created u+rw"), opened on fd 5 and
removed at once, before the job starts: a run killed hard (SIGKILL after Ctrl-C) leaves no
copy behind. Each step opens it anew through /dev/fd/5 (Linux: opening a /proc/PID/fd link
opens the file itself, deleted or not, with an offset of its own, proc(5); tried here, and
salloc passes fd 5 on to its command) and reads it on stdin ("stdin will be redirected from the standard input
of srun to all remote tasks", srun(1) "IO Redirection"); each task unpacks it into a fresh
folder in the node's own TMPDIR, runs it, and prints its output folder back as a base64 tarball
between marker lines. Each step's stdout and stderr go through awk, which puts the step's
number before every line ("%d: ", as srun --label did) and writes each line whole in one write
of at most PIPE_BUF bytes (long lines are cut into several), so the steps' lines never mix; the
step's srun exit status comes as an unlabelled marker line, which no node can forge. What a
node prints is untrusted, as any host's output.
"""
from __future__ import annotations

import base64
import binascii
import re
import shlex
import tempfile
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable, Optional, Sequence

from .settings import SlurmSettings

UNPACK_FAILED = 90  # a task's exit status when the package did not unpack
PACKAGE_FAILED = 70  # the login-node script's exit status when the package was not stored
# What a node sends is read with ASCII grammars only: str.isdigit() and re's \d accept
# digits int() refuses ("²", U+00B2), and no node's line may raise past its own verdict.
# the step's number before each line, as srun --label's "%d: " (tolerated: leading blanks)
LABEL = re.compile(r"[ \t]*([0-9]{1,6}): ?(.*)", re.ASCII)
NUMBER = re.compile(r"-?[0-9]{1,20}", re.ASCII)  # an exit status, a job id, a time in ns
# srun's words for a node lost mid-step: slurmctld's "Node failure on NODE"; srun's own when
# the node's slurmstepd went away ("io error with slurmstepd on node 0")
NODE_FAILURE = re.compile(r"Node failure on (\S+)")
STEPD_LOST = re.compile(r"io error with slurmstepd")
KEPT_MESSAGES = 50  # Slurm's own lines kept for the record (per node, and the job's)
# Each node's lines (its results apart: their own cap, PullLimits) are shown and logged up to
# this many bytes, as one host's stream is (transport.base.OUTPUT_MAX_BYTES); the job's output
# as a whole is not cut (the command runs `streamed`), so one node's flood costs that node only.
NODE_TEXT_MAX = 1 << 20
# One labelled line per write(2): Linux writes up to PIPE_BUF (4096 bytes) to a pipe whole
# ("POSIX.1 says that write(2)s of less than PIPE_BUF bytes must be atomic", pipe(7)); awk
# flushes after each line. A longer line is cut into pieces of LINE_PIECE bytes (LC_ALL=C: awk
# counts bytes), each with its label.
LINE_PIECE = 2000


def task_script(token: str, python: str, args: list[str]) -> str:
    """The sh script every task runs (its stdin: the package tarball)."""
    marker = shlex.quote(f"@@gpuprov-{token}")
    quoted = " ".join(shlex.quote(a) for a in args)
    return (f'M={marker}\n'
            'exec 2>&1\n'  # the step's stderr carries Slurm's own words only
            'echo "$M start $SLURMD_NODENAME $SLURM_JOB_ID"\n'
            'D=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-XXXXXX") || '
            f'{{ echo "$M unpacked {UNPACK_FAILED}"; exit {UNPACK_FAILED}; }}\n'
            "trap 'cd /; rm -rf \"$D\"' EXIT\n"
            f'tar -xzf - -C "$D" || {{ echo "$M unpacked {UNPACK_FAILED}"; exit {UNPACK_FAILED}; }}\n'
            # the validation's own wall time on the node, in ns (GNU date; elsewhere the
            # words are not numbers and are ignored)
            's=$(date +%s%N)\n'
            f'cd "$D" && PYTHONUNBUFFERED=1 {shlex.quote(python)} -m validate --out "$D/out" '
            f'{quoted} </dev/null 2>&1\n'
            'rc=$?\n'
            'echo "$M results $rc $s $(date +%s%N)"\n'
            '[ -d "$D/out" ] && (cd "$D/out" && tar -czf - .) | base64\n'
            'echo "$M end"\n'
            'exit $rc\n')


def salloc_options(settings: SlurmSettings, nodes: list[str], job_name: str,
                   reservation: Optional[str] = None) -> list[str]:
    """The allocation: exactly `nodes`, each to itself (`--exclusive`) with its GPUs, kept
    whole when one of them fails (`--no-kill`, salloc(1) 22.05)."""
    args = ["salloc", f"--job-name={job_name}", f"--partition={settings.partition}",
            f"--nodes={len(nodes)}", "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}",
            "--exclusive", "--no-kill"]
    for option, value in (("account", settings.account), ("qos", settings.qos),
                          ("time", settings.time), ("gpus-per-node", settings.gpus_per_node),
                          ("reservation", reservation)):
        if value:
            args.append(f"--{option}={value}")
    return args + list(settings.extra_args)


def step_options(settings: SlurmSettings, extra: Sequence[str] = ()) -> list[str]:
    """One step on one node of the allocation (the node given after): one task, the node's
    GPUs (asked again: "By default, a job step is allocated all of the generic resources that
    have been requested by the job, except those implicitly requested when a job is
    exclusive", srun(1) --gres), every CPU and all memory of the node ("By default, all
    non-GRES resources on each node in the step allocation will be used", srun(1) --exact),
    the package on its stdin (`--input=all`), the login node's environment with SLURM_CONF
    (`--export=ALL`). Sources: the man pages of Slurm 22.05.8 (Debian 12's slurm-client)."""
    args = ["srun", "--nodes=1", "--ntasks=1", "--input=all", "--export=ALL"]
    if settings.gpus_per_node:
        args.append(f"--gpus-per-node={settings.gpus_per_node}")
    return args + list(extra)  # `extra`: the container's (remote/container/slurm.py)


# awk: the step's number before each line, each line (or piece) written whole
LABELLER = ("LC_ALL=C awk -v p=\"$1: \" '{ s = $0; while (length(s) > %d) { print p "
            "substr(s, 1, %d); fflush(); s = substr(s, %d) } print p s; fflush() }'"
            % (LINE_PIECE, LINE_PIECE, LINE_PIECE + 1))


def job_command(settings: SlurmSettings, nodes: list[str], script: str, job_name: str,
                token: str, reservation: Optional[str] = None, step_extra: Sequence[str] = ()) -> str:
    """The login-node script (its stdin: the package): store the package, take the
    allocation, run `script` as one step per node, at most `settings.fanout` at once (a
    sliding window: the next node's step starts as soon as one ends), and wait for them. Step
    i's lines come labelled "i: " (stdout and stderr apart); `@@gpuprov-TOKEN srun i RC` (not
    labelled) gives step i's srun exit status."""
    marker = shlex.quote(f"@@gpuprov-{token}")
    step = " ".join(shlex.quote(a) for a in step_options(settings, step_extra))
    window = max(1, min(settings.fanout, len(nodes)))
    # fd 3: the stdout labeller; fd 4: the script's own stdout (unlabelled: the rc line);
    # fd 5: the package; fd 6: the window, a pipe holding one byte per free turn: a step
    # takes one before it starts and gives it back when its srun has ended
    steps = (f"M={marker}; S={shlex.quote(script)}\n"
             f"lab() {{ {LABELLER}; }}\n"
             'W=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-window-XXXXXX") && mkfifo "$W/turns" && '
             f'exec 6<>"$W/turns" && rm -rf "$W" || exit {PACKAGE_FAILED}\n'
             f"i=0; while [ $i -lt {window} ]; do echo; i=$((i + 1)); done >&6\n"
             "i=0\n"
             "for n do\n"
             "  read t <&6\n"
             f'  {{ ( {{ {{ {step} --nodelist="$n" /bin/sh -c "$S" </dev/fd/5 5<&- 6>&- 2>&1 >&3 3>&- 4>&-; '
             'echo "$M srun $i $?" >&4; } | lab "$i" >&2; } 3>&1 | lab "$i" ) 4>&1 6>&-; '
             "echo >&6; } &\n"
             "  i=$((i + 1))\n"
             "done\n"
             "wait\n")
    alloc = " ".join(shlex.quote(a) for a in salloc_options(settings, nodes, job_name,
                                                              reservation))
    names = " ".join(shlex.quote(n) for n in nodes)
    return ('T=$(mktemp "${TMPDIR:-/tmp}/gpuprov-package-XXXXXX") || '
            f'exit {PACKAGE_FAILED}\n'
            "trap 'rm -f \"$T\"' EXIT\n"
            "trap 'exit 130' INT TERM HUP\n"
            f'cat >"$T" && exec 5<"$T" && rm -f "$T" || exit {PACKAGE_FAILED}\n'
            # salloc in the background of a shell: "set its standard input to some file"
            # (salloc(1) NOTE)
            f'{alloc} /bin/sh -c {shlex.quote(steps)} sh {names} </dev/null\n')


def with_conf(settings: SlurmSettings, script: str) -> str:
    """`script` with SLURM_CONF exported when the inventory gives `conf`."""
    if settings.conf:
        return f"SLURM_CONF={shlex.quote(settings.conf)}; export SLURM_CONF\n{script}"
    return script


@dataclass
class Task:
    """One task of the job, as its output tells it."""

    number: int
    node: str = ""
    job_id: str = ""
    started: float = 0.0
    ended: float = 0.0
    rc: Optional[int] = None
    validate_s: Optional[float] = None  # `python -m validate`'s wall time, as the node timed it
    unpack_failed: bool = False
    in_results: bool = False
    complete: bool = False      # the end marker came: the results tarball is whole
    # the tarball, decoded line by line into an unnamed file: never whole in memory (a node
    # may send up to the pull cap, and 16 nodes at once)
    file: Optional[BinaryIO] = None
    size: int = 0
    refused: str = ""           # why its results were refused

    def add(self, line: bytes, cap: int) -> None:
        if self.refused:
            return
        try:
            data = base64.b64decode(line, validate=True)  # `base64` wraps at 76: whole quanta
        except (binascii.Error, ValueError):
            self.drop("its results were not valid base64")
            return
        self.size += len(data)
        if self.size > cap:
            self.drop(f"its results are over {cap >> 20} MiB")
            return
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix="gpuprov-slurm-")
        self.file.write(data)

    def drop(self, why: str) -> None:
        self.refused = why
        if self.file is not None:
            self.file.close()
            self.file = None

    def archive(self) -> Optional[BinaryIO]:
        """The whole tarball at its start (an empty file when none was sent), or None when
        it was cut short or refused."""
        if not self.complete or self.refused:
            return None
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix="gpuprov-slurm-")
        self.file.seek(0)
        return self.file


class JobOutput:
    """Splits the job's output into its steps, step i being node `nodes[i]`. `on_start(node,
    job_id)` when a task names its node, `on_line(node, text)` for each progress line and each
    of Slurm's lines about a node, `on_srun(text)` for Slurm's lines about the job."""

    def __init__(self, token: str, nodes: list[str], max_bytes: int,
                 on_start: Callable[[str, str], None], on_line: Callable[[str, str], None],
                 on_srun: Callable[[str], None]):
        self.marker = f"@@gpuprov-{token} "
        self.nodes = list(nodes)
        self.max_bytes = max_bytes
        self.tasks: dict[int, Task] = {}
        self.by_node: dict[str, Task] = {}
        self.failed_nodes: set[str] = set()
        self.messages: list[str] = []                 # salloc's (the job's)
        self.node_messages: dict[str, list[str]] = {}  # each step's srun's
        self.step_rc: dict[str, int] = {}              # each step's srun exit status
        self.shown: dict[str, int] = {}                # bytes of each node's lines shown
        self.on_start, self.on_line, self.on_srun = on_start, on_line, on_srun

    def _step(self, line: str) -> Optional[tuple[int, str]]:
        match = LABEL.fullmatch(line)
        if match is None or int(match.group(1)) >= len(self.nodes):
            return None
        return int(match.group(1)), match.group(2)

    def stdout(self, line: str) -> None:
        step = self._step(line)
        if step is None:
            self._unlabelled(line)
            return
        number, text = step
        task = self.tasks.setdefault(number, Task(number))
        try:
            if text.startswith(self.marker):
                self._marker(task, text[len(self.marker):].split())
            elif task.in_results:
                self._chunk(task, text)
            elif task.node:
                self._show(task.node, text)
        except ValueError as exc:  # a line no grammar here foresaw: its node's verdict only
            task.drop(f"its output could not be read ({exc})")

    def stderr(self, line: str) -> None:
        step = self._step(line)
        if step is None:
            self._srun(line)
            return
        node, text = self.nodes[step[0]], step[1]
        failure = NODE_FAILURE.search(text)
        # a step's words count for its own node only
        if (failure and failure.group(1) == node) or STEPD_LOST.search(text):
            self.failed_nodes.add(node)
        kept = self.node_messages.setdefault(node, [])
        if len(kept) < KEPT_MESSAGES:
            kept.append(text)
        self._show(node, text)

    def _show(self, node: str, text: str) -> None:
        """Pass a node's line on while the node is within NODE_TEXT_MAX; past it, one note."""
        used = self.shown.get(node, 0)
        if used > NODE_TEXT_MAX:
            return
        self.shown[node] = used + len(text) + 1
        if self.shown[node] <= NODE_TEXT_MAX:
            self.on_line(node, text)
        else:
            self.on_line(node, f"[gpuprov: more than {NODE_TEXT_MAX >> 10} KiB of lines from "
                               f"{node}; the rest is not shown]")

    def _unlabelled(self, line: str) -> None:
        """The login-node script's own line: a step's srun exit status, else salloc's."""
        words = line[len(self.marker):].split() if line.startswith(self.marker) else []
        step, rc = (_number(words[1]), _number(words[2])) if len(words) == 3 else (None, None)
        if words and words[0] == "srun" and step is not None and 0 <= step < len(self.nodes) \
                and rc is not None:
            self.step_rc[self.nodes[step]] = rc
        else:
            self._srun(line)

    def _srun(self, line: str) -> None:
        failure = NODE_FAILURE.search(line)
        if failure and failure.group(1) in self.nodes:
            self.failed_nodes.add(failure.group(1))
        if len(self.messages) < KEPT_MESSAGES:
            self.messages.append(line)
        self.on_srun(line)

    def _marker(self, task: Task, words: list[str]) -> None:
        kind = words[0] if words else ""
        if kind == "start" and len(words) >= 2 and not task.node:
            node = words[1]
            # step i runs on nodes[i] (srun --nodelist): a task claiming another is not heard
            if node == self.nodes[task.number] and node not in self.by_node:
                task.node, task.started = node, time.monotonic()
                task.job_id = words[2] if len(words) > 2 and _number(words[2]) is not None else ""
                self.by_node[node] = task
                self.on_start(node, task.job_id)
        elif not task.node:
            return  # a task that never named a node of this run: nothing it says is kept
        elif kind == "unpacked":
            task.unpack_failed = True
        elif kind == "results" and len(words) >= 2 and _number(words[1]) is not None:
            task.rc, task.in_results = _number(words[1]), True
            times = [_number(w) for w in words[2:]]
            if len(times) == 2 and times[0] is not None and times[1] is not None:
                task.validate_s = max(0, times[1] - times[0]) / 1e9
        elif kind == "end" and task.in_results:
            task.in_results, task.complete, task.ended = False, True, time.monotonic()

    def _chunk(self, task: Task, text: str) -> None:
        task.add(text.strip().encode("ascii", "replace"), self.max_bytes)

    def close(self) -> None:
        """Release every task's file (after the results were stored)."""
        for task in self.tasks.values():
            if task.file is not None:
                task.file.close()
                task.file = None


def _number(word: str) -> Optional[int]:
    """`word` as a whole number when it is one in ASCII digits, else None."""
    return int(word) if NUMBER.fullmatch(word) else None
