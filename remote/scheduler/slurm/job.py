"""The validation job: what each task runs on its node, the login-node script that runs all
the nodes as the tasks of one job step, and the split of the step's labelled output back into
one stream per node.

One allocation, one step (Slurm 22.05.8's man pages, Debian 12's slurm-client). `salloc` takes
the nodes (exclusive, their GPUs, `--no-kill`: "Do not automatically terminate a job if one of
the nodes it has been allocated fails ... The job allocation will not be revoked so the user
may launch new job steps on the remaining nodes", salloc(1)) and runs a script on the login
node that starts ONE `srun --nodes=N --ntasks-per-node=1` over all of them (`launch_step`):
the login node holds one srun client (and its shell) whatever the node count, where a step per
node meant a client per node, or waves of them. A node that dies costs only its own task:
`--no-kill` ("Do not automatically terminate a job if one of the nodes it has been allocated
fails. This option applies to job and step allocations", srun(1)) and `--kill-on-bad-exit=0`
("An option argument of zero will not terminate the job", srun(1) -K) keep the other tasks
running; srun reports the dead node ("Node failure on NODE") and returns once Slurm has set it
down (after SlurmdTimeout). Measured with real daemons: tests/test_slurm_step.py.

No filesystem is assumed shared between the login node and the nodes: the package is written
once to a login-node temporary file (mktemp(1): "Files are created u+rw"), opened on fd 5 and
removed at once, before the job starts: a run killed hard (SIGKILL after Ctrl-C) leaves no
copy behind. The step gets it as its command's arguments (base64 in lines of ARG_CHUNK
characters), which reach every node in the step's launch message, and its tasks' stdin is
closed (`--input=none`); each task stores it as one zip in a fresh folder in the node's own
TMPDIR, runs it, and prints its output folder back as a base64 tarball between marker lines.
The package went to every task on srun's stdin before (`--input=all`): srun then relays the
bytes to each node from its own I/O thread, 1.2 s more than no stdin for a 128-node step on
this machine, against 0.8 s more for the same package as arguments (bench.slurm_overhead,
issue 43). srun puts the task's
number before every line (`--label`: "Prepend task number to lines of stdout/err", srun(1)),
and writes each line, label included, in one write(2) from its one I/O thread, a partial line
ending with a newline it adds (src/common/write_labelled_message.c, `_write_line`: "add
prefix/suffix to buffer before issuing write to avoid interleaved output"), so the nodes'
lines never mix. Task i runs on the i-th node of the allocation in Slurm's order (one task per
node, block distribution): the script says that order first, as an unlabelled marker line,
which no node can forge (every line a node prints comes labelled). What a node prints is
untrusted, as any host's output.
"""
from __future__ import annotations

import base64
import binascii
import math
import re
import shlex
import tempfile
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable, Optional, Sequence

from .settings import SlurmSettings

UNPACK_FAILED = 90  # a task's exit status when the package did not unpack
# The package's base64 goes to the step in arguments of this many characters: one argument
# may hold at most MAX_ARG_STRLEN, 32 pages (131,072 bytes with its NUL), and all of them with
# the environment at most ARG_MAX ("Limits on size of arguments and environment", execve(2);
# `getconf ARG_MAX` 2,097,152 on Debian 12): a package of about 1.4 MB at most.
ARG_CHUNK = 120_000
PACKAGE_FAILED = 70  # the login-node script's exit status when the package was not stored
# What a node sends is read with ASCII grammars only: str.isdigit() and re's \d accept
# digits int() refuses ("²", U+00B2), and no node's line may raise past its own verdict.
# the step's number before each line, as srun --label's "%d: " (tolerated: leading blanks)
LABEL = re.compile(r"[ \t]*([0-9]{1,6}): ?(.*)", re.ASCII)
NUMBER = re.compile(r"-?[0-9]{1,20}", re.ASCII)  # an exit status, a job id, a time in ns
# srun's words for a node lost mid-step: slurmctld's "Node failure on NODE"; srun's own when
# a node's slurmstepd went away ("io error with slurmstepd on node 1": the node's index in
# the step, src/api/step_launch.c step_launch_notify_io_failure); and its line for a task that
# ended badly ("srun: error: n2: task 1: Exited with exit code 3", src/srun/srun_job.c)
NODE_FAILURE = re.compile(r"Node failure on (\S+)")
STEPD_LOST = re.compile(r"io error (?:and missing step |with slurmstepd )on node ([0-9]{1,6})",
                        re.ASCII)
ABOUT_NODE = re.compile(r"error: ([A-Za-z0-9_.-]{1,64}): tasks? [0-9,-]{1,32}: ", re.ASCII)
# A node's slurmstepd that dies with bytes of the package still unread resets its connection,
# and srun 22.05 then aborts the WHOLE step, every node's task killed ("_server_read: fd 12
# error reading header: Connection reset by peer", "step_launch_notify_io_failure: aborting,
# io error with slurmstepd on node 1": seen here, a node of 4 killed while stdin was in
# flight), --no-kill or not. srun skips that abort only when SLURM_PTY_PORT is in its own
# environment (src/api/step_launch.c, step_launch_notify_io_failure: "FIXME If stepd dies or we
# see I/O error with stepd. Do not abort the whole job but collect all tasks on the node just
# like if they exited", then `if (getenv("SLURM_PTY_PORT") == NULL)` abort; the same test in
# src/api/step_io.c _server_read), which srun --pty sets; slurmstepd reads it only for a step
# launched with --pty (LAUNCH_PTY). So srun runs with it set: the dead node's tasks end when
# Slurm sets the node down ("Node failure on NODE"), the others finish. The dead node's share of
# the stdin then waits in srun's buffers, 1,024 of 1,024 bytes (STDIO_MAX_FREE_BUF in
# step_io.c, SLURM_IO_MAX_MSG_LEN in io_hdr.h): a package over STDIN_HELD_MAX would stall the
# others' stdin (seen with 8 MiB), so the package must stay under it (tests/test_slurm_step_late.py
# checks the validate package's size).
NO_ABORT = "SLURM_PTY_PORT"
STDIN_HELD_MAX = 1024 * 1024
KEPT_MESSAGES = 50  # Slurm's own lines kept for the record (per node, and the job's)
# Each node's lines (its results apart: their own cap, PullLimits) are shown and logged up to
# this many bytes, as one host's stream is (transport.base.OUTPUT_MAX_BYTES); the job's output
# as a whole is not cut (the command runs `streamed`), so one node's flood costs that node only.
NODE_TEXT_MAX = 1 << 20
HOLD = re.compile(r"/[A-Za-z0-9_./-]{1,200}/gpuprov-hold-[A-Za-z0-9]{6,20}", re.ASCII)


def task_script(token: str, python: str, args: list[str], size: int) -> str:
    """The sh script every task runs (its arguments: the package, a zip of `size` bytes, in
    base64; `step_lines`).

    The task stores the zip as one file and Python imports the package from it where it lies
    (`PYTHONPATH`, zipimport; validate/resources.py takes out the few data files a check
    hands to another program): unpacking a tarball made every node create each of the
    package's files, about 1.4 s of a 64-node step on this machine (bench.slurm_overhead,
    issue 43). A zip cut short "did not unpack": its size is checked first (wc(1) -c);
    printf is the shell's own, base64 -d the one process that writes it."""
    marker = shlex.quote(f"@@gpuprov-{token}")
    quoted = " ".join(shlex.quote(a) for a in args)
    failed = f'{{ echo "$M unpacked {UNPACK_FAILED}"; exit {UNPACK_FAILED}; }}'
    return (f'M={marker}\n'
            f'unset {NO_ABORT}\n'  # srun's own (NO_ABORT): not the validation's
            'exec 2>&1\n'  # the step's stderr carries Slurm's own words only
            # "-": a task that cannot name its node (in a container of Slurm's OCI support
            # SLURMD_NODENAME is not set): its srun label says which it is
            'echo "$M start ${SLURMD_NODENAME:--} $SLURM_JOB_ID"\n'
            f'D=$(mktemp -d "${{TMPDIR:-/tmp}}/gpuprov-XXXXXX") || {failed}\n'
            "trap 'cd /; rm -rf \"$D\"' EXIT\n"
            'printf %s "$@" | base64 -d > "$D/validate.zip" && '
            f'[ "$(wc -c < "$D/validate.zip")" -eq {int(size)} ] '
            f'|| {failed}\n'
            # the validation's own wall time on the node, in ns (GNU date; elsewhere the
            # words are not numbers and are ignored)
            's=$(date +%s%N)\n'
            f'cd "$D" && PYTHONPATH="$D/validate.zip" PYTHONUNBUFFERED=1 {shlex.quote(python)} '
            f'-m validate --out "$D/out" {quoted} </dev/null 2>&1\n'
            'rc=$?\n'
            'echo "$M results $rc $s $(date +%s%N)"\n'
            '[ -d "$D/out" ] && tar -czf - -C "$D/out" . | base64\n'
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


def step_options(settings: SlurmSettings, count: int, extra: Sequence[str] = ()) -> list[str]:
    """The one step over the `count` nodes of the allocation, each option as srun(1) of Slurm
    22.05.8 says it:
    - `--nodes=N --ntasks-per-node=1`: one task on every node of the allocation;
    - `--kill-on-bad-exit=0`: "An option argument of zero will not terminate the job" when a
      task exits non-zero (a node that fails its validation costs nothing to the others);
    - `--no-kill`: "Do not automatically terminate a job if one of the nodes it has been
      allocated fails. This option applies to job and step allocations";
    - `--label`: "Prepend task number to lines of stdout/err";
    - `--input=none`: "stdin is not sent to any task (stdin is closed)" ("IO Redirection":
      the package comes in the command's arguments, `step_lines`);
    - `--export=ALL`: the login node's environment, SLURM_CONF with it (slurm.md gotcha 17);
    - `--gpus-per-node`: the node's GPUs asked again ("By default, a job step is allocated
      all of the generic resources that have been requested by the job, except those
      implicitly requested when a job is exclusive", srun(1) --gres); every CPU and all memory
      of the node come by default ("all non-GRES resources on each node in the step
      allocation will be used", srun(1) --exact);
    - `extra`: the container's options (remote/container/slurm.py)."""
    args = ["srun", f"--nodes={count}", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
            "--no-kill", "--label", "--input=none", "--export=ALL"]
    if settings.gpus_per_node:
        args.append(f"--gpus-per-node={settings.gpus_per_node}")
    return args + list(extra)  # `extra`: the container's (remote/container/slurm.py)


def step_lines(settings: SlurmSettings, count: int, script: str, token: str,
               extra: Sequence[str] = (), hold_s: float = 0.0) -> str:
    """Shell lines, run inside an allocation of `count` nodes (salloc's command, or a batch
    script), that run `script` as one task per node in one step, its arguments the package
    on fd 5 in base64 lines of ARG_CHUNK characters (no glob character in base64's alphabet,
    and globbing off besides: each line one argument): first `@@gpuprov-TOKEN nodes N1 N2
    ...` (the allocation's nodes in Slurm's order: task i is node i), then the step's
    labelled lines, then `@@gpuprov-TOKEN step RC` (srun's exit status); the marker lines
    unlabelled, so no node can forge them."""
    marker = shlex.quote(f"@@gpuprov-{token}")
    step = " ".join(shlex.quote(a) for a in step_options(settings, count, extra))
    # SLURM_PTY_PORT set for srun alone: see NO_ABORT
    step = f"{NO_ABORT}=0 {step}"
    nodes = 'echo "$M nodes $(scontrol show hostnames "$SLURM_JOB_NODELIST" | tr "\\n" " ")"'
    return (f"M={marker}\n{nodes}\n"
            f"set -f; {step} /bin/sh -c {shlex.quote(script)} gpuprov-task "
            f"$(base64 -w {ARG_CHUNK} <&5) </dev/null 5<&-\n"
            'echo "$M step $?"\n' + hold_lines(hold_s))


def hold_lines(hold_s: float) -> str:
    """With `hold_s`: the allocation held after the validation step, for a second step
    (`AfterStep`), until the control side creates `go` in the folder the unlabelled line
    `@@gpuprov-TOKEN hold FOLDER` names, or `hold_s` seconds passed (mktemp(1): the folder
    is the run's own, u+rwx)."""
    if not hold_s:
        return ""
    return ('G=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-hold-XXXXXX") && echo "$M hold $G" && {\n'
            f'  i=0; while [ ! -e "$G/go" ] && [ "$i" -lt {math.ceil(hold_s)} ]; do '
            'sleep 1; i=$((i+1)); done; rm -rf "$G"; }\n')


def launch_step(settings: SlurmSettings, nodes: list[str], script: str, job_name: str,
                token: str, reservation: Optional[str] = None,
                step_extra: Sequence[str] = (), hold_s: float = 0.0) -> str:
    """The single entry point that validates `nodes` in one step: the login-node script (its
    stdin: the package) that stores the package, takes one allocation of exactly `nodes`
    (`salloc_options`), runs `script` on all of them as the tasks of one step (`step_lines`,
    with `step_extra`: a container's srun options) and gives the allocation back when the step
    ends. Its output is read by `JobOutput`."""
    alloc = " ".join(shlex.quote(a) for a in salloc_options(settings, nodes, job_name,
                                                              reservation))
    steps = step_lines(settings, len(nodes), script, token, step_extra, hold_s)
    return ('T=$(mktemp "${TMPDIR:-/tmp}/gpuprov-package-XXXXXX") || '
            f'exit {PACKAGE_FAILED}\n'
            "trap 'rm -f \"$T\"' EXIT\n"
            "trap 'exit 130' INT TERM HUP\n"
            f'cat >"$T" && exec 5<"$T" && rm -f "$T" || exit {PACKAGE_FAILED}\n'
            # salloc in the background of a shell: "set its standard input to some file"
            # (salloc(1) NOTE)
            f'{alloc} /bin/sh -c {shlex.quote(steps)} </dev/null\n')


# salloc's line once the allocation is granted (src/salloc/salloc.c: "Granted job allocation
# %u"); what the login node prints is untrusted: ASCII digits, one such line
GRANTED = re.compile(r"salloc: Granted job allocation ([0-9]{1,12})", re.ASCII)


def hold_options(settings: SlurmSettings, nodes: list[str], job_name: str) -> list[str]:
    """One allocation of `nodes` held until cancelled (`gpuprov fabric`: every command of the
    run a step of it, no job per command). salloc(1), Slurm 22.05.8:
    - `--no-shell`: "immediately exit after allocating resources, without running a command.
      However, the Slurm job will still be created and will remain active and will own the
      allocated resources as long as it is active ... You can submit srun commands against
      this resource allocation, if you specify the --jobid= option";
    - `--nodes=N --nodelist=... --ntasks-per-node=1`: exactly these nodes, one task each (one
      core: a node running other work, MIXED, can still be measured);
    - `--no-kill`: a node that fails does not revoke the allocation, the others' pairs go on.
    `account`, `qos`, `time` and `extra_args` of `slurm:` apply as for validate's salloc."""
    args = ["salloc", "--no-shell", f"--job-name={job_name}", f"--partition={settings.partition}",
            f"--nodes={len(nodes)}", "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}",
            "--no-kill"]
    for option, value in (("account", settings.account), ("qos", settings.qos),
                          ("time", settings.time)):
        if value:
            args.append(f"--{option}={value}")
    return args + list(settings.extra_args)


def granted_job(out: str) -> Optional[str]:
    """The job id of salloc's "Granted job allocation N" line, None unless exactly one."""
    found = {m.group(1) for m in (GRANTED.fullmatch(line.strip()) for line in out.splitlines())
             if m}
    return found.pop() if len(found) == 1 else None


def node_step_options(allocation: str, node: str) -> list[str]:
    """One command on `node` as a step of the held allocation. srun(1), Slurm 22.05.8:
    `--jobid`: "Initiate a job step under an already allocated job with job id id";
    `--overlap`: "allows steps to share all resources (CPUs, memory, and GRES) with all other
    steps" (a pair's server and client, and the commands that stop a server, run at once on
    one node's one core); `--nodes=1 --ntasks=1 --nodelist=NODE`: one task on that node;
    `--unbuffered`: its lines as they come (the server's PID before it is done)."""
    return ["srun", f"--jobid={allocation}", "--overlap", "--nodes=1", "--ntasks=1",
            f"--nodelist={node}", "--unbuffered"]


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
    """Splits the step's output into its tasks, task i being node `nodes[i]` (the order the
    login-node script says, Slurm's; until it does, the order given). `on_start(node,
    job_id)` when a task names its node, `on_line(node, text)` for each progress line and each
    of Slurm's lines about a node, `on_srun(text)` for Slurm's lines about the job,
    `on_whole(task)` (if given) when a task's results have come whole: no more is read into
    its file."""

    def __init__(self, token: str, nodes: list[str], max_bytes: int,
                 on_start: Callable[[str, str], None], on_line: Callable[[str, str], None],
                 on_srun: Callable[[str], None], on_whole: Optional[Callable[[Task], None]] = None,
                 on_hold: Optional[Callable[[str], None]] = None):
        self.marker = f"@@gpuprov-{token} "
        self.on_whole = on_whole  # a task whose results came whole (its end marker), at once
        self.on_hold = on_hold  # the allocation held after the step (hold_lines): its folder
        self.nodes = list(nodes)
        self.max_bytes = max_bytes
        self.tasks: dict[int, Task] = {}
        self.by_node: dict[str, Task] = {}
        self.failed_nodes: set[str] = set()
        self.messages: list[str] = []                 # salloc's and srun's (the job's)
        self.node_messages: dict[str, list[str]] = {}  # srun's about each node
        self.step_rc: Optional[int] = None             # the step's srun exit status
        self.shown: dict[str, int] = {}                # bytes of each node's lines shown
        self.on_start, self.on_line, self.on_srun = on_start, on_line, on_srun

    def _task(self, line: str) -> Optional[tuple[int, str]]:
        match = LABEL.fullmatch(line)
        if match is None or int(match.group(1)) >= len(self.nodes):
            return None
        return int(match.group(1)), match.group(2)

    def stdout(self, line: str) -> None:
        found = self._task(line)
        if found is None:
            self._unlabelled(line)
            return
        number, text = found
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
        """srun's own lines (unlabelled), and a task's stderr (labelled: the task script
        sends its stderr to its stdout, so only a node that reopened it writes here): a
        task's words count for its own node only."""
        found = self._task(line)
        if found is None:
            self._srun(line)
            return
        node, text = self.nodes[found[0]], found[1]
        failure = NODE_FAILURE.search(text)
        if failure and failure.group(1) == node:
            self.failed_nodes.add(node)
        self._keep(node, text)
        self._show(node, text)

    def _keep(self, node: str, text: str) -> None:
        kept = self.node_messages.setdefault(node, [])
        if len(kept) < KEPT_MESSAGES:
            kept.append(text)

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
        """The login-node script's own line (the allocation's nodes in order, the step's exit
        status), else Slurm's."""
        words = line[len(self.marker):].split() if line.startswith(self.marker) else []
        if words[:1] == ["nodes"] and not self.tasks and sorted(words[1:]) == sorted(self.nodes):
            self.nodes = words[1:]
        elif words[:1] == ["step"] and len(words) == 2 and _number(words[1]) is not None:
            self.step_rc = _number(words[1])
        elif words[:1] == ["hold"] and len(words) == 2 and self.on_hold is not None \
                and HOLD.fullmatch(words[1]):
            self.on_hold(words[1])
        else:
            self._srun(line)

    def _srun(self, line: str) -> None:
        """One of srun's (or salloc's) own lines: a node's failure, or a line about one task's
        node, is that node's; every line is the job's too."""
        failure = NODE_FAILURE.search(line)
        lost = STEPD_LOST.search(line)
        about = ABOUT_NODE.search(line)
        node = (failure.group(1) if failure else
                self.nodes[int(lost.group(1))] if lost and int(lost.group(1)) < len(self.nodes)
                else about.group(1) if about else None)
        if node in self.nodes:
            if failure or lost:
                self.failed_nodes.add(node)
            self._keep(node, line)
        if len(self.messages) < KEPT_MESSAGES:
            self.messages.append(line)
        self.on_srun(line)

    def _marker(self, task: Task, words: list[str]) -> None:
        kind = words[0] if words else ""
        if kind == "start" and len(words) >= 2 and not task.node:
            self._start(task, words)
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
            if self.on_whole is not None:
                self.on_whole(task)

    def _start(self, task: Task, words: list[str]) -> None:
        """`start NODE JOBID`: task i runs on nodes[i] (srun's label, the allocation's order);
        a task claiming another is not heard; "-" names none (task_script)."""
        node = self.nodes[task.number]
        if words[1] in (node, "-") and node not in self.by_node:
            task.node, task.started = node, time.monotonic()
            task.job_id = words[2] if len(words) > 2 and _number(words[2]) is not None else ""
            self.by_node[node] = task
            self.on_start(node, task.job_id)

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
