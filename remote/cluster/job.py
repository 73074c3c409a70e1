"""The validation job: what each task runs on its node, the srun line that starts one task per
node from the login node, and the split of srun's labelled output back into one stream per node.

No filesystem is assumed shared between the login node and the nodes: the package travels as a
gzip tarball on srun's stdin, which srun broadcasts to every task ("stdin will be redirected
from the standard input of srun to all remote tasks", srun(1) "IO Redirection"; `--input=all`
asks for it explicitly), each task unpacks it into a fresh folder in the node's own TMPDIR,
runs it, and prints its output folder back as a base64 tarball between marker lines. srun's
`--label` puts the task number before every line; the task's first line names its node.
What a node prints is untrusted, as any host's output.
"""
from __future__ import annotations

import base64
import binascii
import re
import shlex
import tempfile
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable, Optional

from ..config.slurm import SlurmSettings

UNPACK_FAILED = 90  # a task's exit status when the package did not unpack
# srun --label: "%d: " before each line, the number right-aligned to the widest task number
LABEL = re.compile(r"\s*(\d+): ?(.*)")
NODE_FAILURE = re.compile(r"Node failure on (\S+)")
KEPT_MESSAGES = 50  # srun's own lines kept for the record


def task_script(token: str, python: str, args: list[str]) -> str:
    """The sh script every task runs (its stdin: the package tarball)."""
    marker = shlex.quote(f"@@gpuprov-{token}")
    quoted = " ".join(shlex.quote(a) for a in args)
    return (f'M={marker}\n'
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


def srun_command(settings: SlurmSettings, nodes: list[str], script: str, job_name: str,
                 reservation: Optional[str] = None) -> str:
    """srun from the login node: one task per node on exactly `nodes`, each with the node to
    itself (`--exclusive`) and its GPUs, output labelled by task; a task failing or a node
    dying never stops the others (`--kill-on-bad-exit=0`, `--no-kill`)."""
    args = ["srun", f"--job-name={job_name}", f"--partition={settings.partition}",
            f"--nodes={len(nodes)}", "--ntasks-per-node=1", f"--ntasks={len(nodes)}",
            f"--nodelist={','.join(nodes)}", "--exclusive", "--no-kill",
            "--kill-on-bad-exit=0", "--input=all", "--label", "--export=ALL"]
    for option, value in (("account", settings.account), ("qos", settings.qos),
                          ("time", settings.time), ("gpus-per-node", settings.gpus_per_node),
                          ("reservation", reservation)):
        if value:
            args.append(f"--{option}={value}")
    args += list(settings.extra_args)
    args += ["/bin/sh", "-c", script]
    return " ".join(shlex.quote(a) for a in args)


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
    """Splits srun's labelled output into tasks. `on_start(node, job_id)` when a task names its
    node, `on_line(node, text)` for each progress line, `on_srun(text)` for srun's own lines."""

    def __init__(self, token: str, nodes: list[str], max_bytes: int,
                 on_start: Callable[[str, str], None], on_line: Callable[[str, str], None],
                 on_srun: Callable[[str], None]):
        self.marker = f"@@gpuprov-{token} "
        self.expected = set(nodes)
        self.max_bytes = max_bytes
        self.tasks: dict[int, Task] = {}
        self.by_node: dict[str, Task] = {}
        self.failed_nodes: set[str] = set()
        self.messages: list[str] = []
        self.on_start, self.on_line, self.on_srun = on_start, on_line, on_srun

    def stdout(self, line: str) -> None:
        match = LABEL.fullmatch(line)
        if match is None:
            self._srun(line)
            return
        number, text = int(match.group(1)), match.group(2)
        task = self.tasks.setdefault(number, Task(number))
        if text.startswith(self.marker):
            self._marker(task, text[len(self.marker):].split())
        elif task.in_results:
            self._chunk(task, text)
        elif task.node:
            self.on_line(task.node, text)

    def stderr(self, line: str) -> None:
        match = LABEL.fullmatch(line)
        task = self.tasks.get(int(match.group(1))) if match else None
        if match and task is not None and task.node:
            self.on_line(task.node, match.group(2))
        else:
            self._srun(line)

    def _srun(self, line: str) -> None:
        failure = NODE_FAILURE.search(line)
        if failure:
            self.failed_nodes.add(failure.group(1))
        if len(self.messages) < KEPT_MESSAGES:
            self.messages.append(line)
        self.on_srun(line)

    def _marker(self, task: Task, words: list[str]) -> None:
        kind = words[0] if words else ""
        if kind == "start" and len(words) >= 2 and not task.node:
            node = words[1]
            if node in self.expected and node not in self.by_node:
                task.node, task.started = node, time.monotonic()
                task.job_id = words[2] if len(words) > 2 and words[2].isdigit() else ""
                self.by_node[node] = task
                self.on_start(node, task.job_id)
        elif not task.node:
            return  # a task that never named a node of this run: nothing it says is kept
        elif kind == "unpacked":
            task.unpack_failed = True
        elif kind == "results" and len(words) >= 2 and words[1].lstrip("-").isdigit():
            task.rc, task.in_results = int(words[1]), True
            if len(words) == 4 and words[2].isdigit() and words[3].isdigit():
                task.validate_s = max(0, int(words[3]) - int(words[2])) / 1e9
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
