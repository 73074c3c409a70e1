"""A real Slurm cluster for the tests and the bench: munged, slurmctld and N `slurmd -N nX`
as plain processes from Debian's packages (`.ci/setup --dev` installs slurmctld, slurmd,
slurm-client and munge), all on 127.0.0.1 ports of their own, stopped by PID.

The configuration is the one measured in shared/research/slurm.md (Debian 12, Slurm 22.05.8):
multiple-slurmd nodes on one machine, fake GPUs (`Gres=gpu:2` backed by character devices made
with mknod), no cgroups, no accounting. Every client command needs `SLURM_CONF`: `env` holds it.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

# a zombie counts as gone: PID 1 here reaps late (slurm.md gotcha 4)
from tests.procs import alive

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sinfo", "srun", "scontrol")
# slurm.md, "Timings": all nodes idle 0.3 to 0.5 s after start; a loaded 2-core machine
# shared with other test runs needs far more.
START_TIMEOUT_S = 60.0
# Preemption without an accounting database (preempt/qos needs QOS from slurmdbd): by partition
# tier. "preempt/partition_prio: Job preemption is based upon partition PriorityTier. Jobs in
# higher PriorityTier partitions may preempt jobs from lower PriorityTier partitions. This is
# not compatible with PreemptMode=OFF"; the cluster-wide PreemptMode is the default a partition
# may override, and "a valid default PreemptMode value must be specified for the cluster as a
# whole when preemption is enabled"; "CANCEL: The preempted job will be cancelled"
# (slurm.conf(5), Slurm 22.05.8: PreemptType, PreemptMode, and the partition's PriorityTier and
# PreemptMode). The other partitions keep the default tier (1) and so preempt nothing.
PREEMPT_CONF = """\
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=sweep Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL
PartitionName=real Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10
"""
# Slurm's native OCI containers (`srun --container BUNDLE`) through runc: containers.html's
# "oci.conf example for runc using run (suggested)" (https://slurm.schedmd.com/containers.html),
# without its EnvExclude lines: oci.conf(5) of that era lists ContainerPath, CreateEnvFile and the
# RunTime* patterns only (https://manpath.be/f36/5/oci.conf), and on Debian's 22.05.8 an
# unknown-to-it DisableCleanup=true failed every step ("Unspecified error", measured). `{dir}` is
# the cluster's folder: runc's state goes there, not into /run/user.
OCI_RUNC = """\
RunTimeQuery="runc --rootless=true --root={dir}/runc state %n.%u.%j.%s.%t"
RunTimeKill="runc --rootless=true --root={dir}/runc kill -a %n.%u.%j.%s.%t"
RunTimeDelete="runc --rootless=true --root={dir}/runc delete --force %n.%u.%j.%s.%t"
RunTimeRun="runc --rootless=true --root={dir}/runc run %n.%u.%j.%s.%t -b %b"
"""


# A RebootProgram for the fake nodes (`SlurmCluster(reboot_delay=...)`): it "reboots" the one
# node whose slurmd ran it. slurmd runs the program with system(3) and expects it to reboot the
# machine (src/slurmd/slurmd/req.c, _rpc_reboot, 22.05.8); here the program finds its slurmd
# among its ancestors (`slurmd ... -N NODE`), returns at once (system() waits for it), and in
# the background stops that slurmd by PID, waits `delay` seconds, empties the node's own
# `run/` folder (what a reboot clears, as /run; then copies in the node's `boot/` files: a
# fault that comes back at every boot) and starts the slurmd again with the same arguments.
# slurmctld takes a node for rebooted only when the boot time it registers with is after the
# reboot request: `waiting_for_node_boot` ignores its registrations while
# `boot_time < boot_req_time`, boot_time = now - up_time (src/slurmctld/node_mgr.c and
# job_mgr.c, 22.05.8), up_time from sysinfo(2) (src/slurmd/slurmd/get_mach_stat.c,
# get_up_time). All the fake nodes share one machine and its uptime, so the new slurmd runs in
# a time namespace whose CLOCK_BOOTTIME is moved back by the machine's uptime (unshare(1)
# --time --boottime=-SECONDS, util-linux 2.38; time_namespaces(7): the offset applies to
# CLOCK_BOOTTIME, which sysinfo's uptime follows, measured here; /proc/PID/timens_offsets
# says a namespace's own): its uptime is under a second.
# unshare execs the slurmd in place, which writes its PID to SlurmdPidFile.
REBOOT_PROGRAM = """\
#!{python}
import os, shutil, signal, sys, time

DIR, DELAY = {dir!r}, {delay!r}


def argv_of(pid):
    with open(f"/proc/{{pid}}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\\0") if a]


def parent(pid):
    with open(f"/proc/{{pid}}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def gone(pid):
    try:
        with open(f"/proc/{{pid}}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


pid = os.getppid()
while pid > 1:
    argv = argv_of(pid)
    if argv and os.path.basename(argv[0]) == "slurmd" and "-N" in argv:
        break
    pid = parent(pid)
else:
    sys.exit("reboot: no slurmd -N among my ancestors")
node = argv[argv.index("-N") + 1]
if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
log = os.open(f"{{DIR}}/log/reboot-{{node}}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
os.dup2(log, 1)
os.dup2(log, 2)
print(f"{{time.time():.3f}} reboot {{node}}: stopping slurmd {{pid}}", flush=True)
os.kill(pid, signal.SIGTERM)
deadline = time.monotonic() + 10
while not gone(pid) and time.monotonic() < deadline:
    time.sleep(0.05)
if not gone(pid):
    os.kill(pid, signal.SIGKILL)
time.sleep(DELAY)
run, boot = f"{{DIR}}/node/{{node}}/run", f"{{DIR}}/node/{{node}}/boot"
shutil.rmtree(run, ignore_errors=True)
shutil.copytree(boot, run) if os.path.isdir(boot) else os.makedirs(run)
# the machine's uptime: this namespace's, less its own offset (a node rebooted before runs in
# a time namespace already; offsets are from the machine's clock, time_namespaces(7))
with open("/proc/uptime") as f:
    up = float(f.read().split()[0])
with open("/proc/self/timens_offsets") as f:
    up -= sum(int(w[1]) for w in (line.split() for line in f) if w[0] == "boottime")
up = int(up)
print(f"{{time.time():.3f}} reboot {{node}}: starting slurmd, boot time moved back {{up}} s",
      flush=True)
null = os.open("/dev/null", os.O_RDONLY)
os.dup2(null, 0)
os.execvp("unshare", ["unshare", "--time", f"--boottime=-{{up}}", "--", *argv])
"""
# The TaskProlog of a cluster with a RebootProgram: every task's TMPDIR is its node's own
# `run/` folder ("TaskProlog ... standard output ... export NAME=value: Set an environment
# variable for the user's task", slurm.conf(5) 22.05, "Prolog and Epilog Scripts"), so a
# node's check can read a file only that node has, and that its reboot clears.
TASK_PROLOG = """\
#!/bin/sh
echo "export TMPDIR={dir}/node/$SLURMD_NODENAME/run"
"""


def missing_reason() -> Optional[str]:
    """Why a real cluster cannot start here (None when it can): the pytest skip reason."""
    if os.geteuid() != 0:
        return "a Slurm test cluster runs slurmd as root"
    absent = [b for b in BINARIES if shutil.which(b) is None
              and not Path("/usr/sbin", b).exists()]
    if absent:
        return (f"Slurm is not installed ({', '.join(absent)} missing): .ci/setup --dev installs "
                "slurmctld slurmd slurm-client munge")
    return None


def _which(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port_block(count: int) -> int:
    """A base port with `count` free ports from it, away from sshd's 2200-2500 and from the
    ephemeral range (32768+), picked at random so concurrent runs do not clash."""
    for _ in range(200):
        base = random.randrange(10000, 30000 - count)
        if all(_free(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no block of {count} free ports")


class SlurmCluster:
    """`nodes` fake nodes n1..nN in partition `debug` (and `gpu`, the same nodes), each with
    `gpus` fake GPUs. `conf_extra`: more slurm.conf lines; `scripts`: executable files written
    into the cluster's folder first (name -> text); `{dir}` in either is that folder.
    `wait_idle=False`: return once the daemons run (a health check may drain nodes at once).
    `preempt=True`: preemption by partition tier (PREEMPT_CONF) and two more partitions over
    the same nodes, `sweep` (the lowest tier, its jobs cancelled when preempted) and `real`
    (a higher tier: its jobs preempt `sweep`'s); off by default, the cluster is then as before.
    `oci_conf`: the text of etc/oci.conf (e.g. OCI_RUNC), which turns on `srun --container`;
    none by default.
    `reboot_delay`: seconds a node's "reboot" takes: turns on REBOOT_PROGRAM (`scontrol reboot`
    restarts that node's slurmd) and TASK_PROLOG (each task's TMPDIR is its node's `run/`,
    `node_dir`), with `resume_timeout` as ResumeTimeout; off by default."""

    def __init__(self, nodes: int = 3, gpus: int = 2, conf_extra: str = "",
                 name: str = "gpuprovtest", scripts: Optional[dict[str, str]] = None,
                 wait_idle: bool = True, slurmd_timeout: int = 10, preempt: bool = False,
                 oci_conf: str = "", reboot_delay: Optional[float] = None,
                 resume_timeout: int = 60):
        self.count = nodes
        self.reboot_delay = reboot_delay
        self.resume_timeout = resume_timeout
        self.preempt = preempt
        self.slurmd_timeout = slurmd_timeout
        self.gpus = gpus
        self.name = name
        self.nodes = [f"n{i}" for i in range(1, nodes + 1)]
        self.dir = Path(tempfile.mkdtemp(prefix="gpuprov-slurm-", dir="/tmp"))
        os.chmod(self.dir, 0o755)
        self.conf = self.dir / "etc" / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.pids: dict[str, int] = {}
        # controller, its unused SlurmdPort, one port per node, then srun's: 100, or 4 per
        # node with more (64 steps at once ran out of 100: "Address already in use")
        self.srun_ports = max(100, 4 * nodes)
        self.base = free_port_block(2 + nodes + self.srun_ports)
        self.conf_extra = conf_extra.replace("{dir}", str(self.dir))
        self.scripts = {k: v.replace("{dir}", str(self.dir)) for k, v in (scripts or {}).items()}
        self.oci_conf = oci_conf.replace("{dir}", str(self.dir))
        try:
            self._write()
            self._start(wait_idle)
        except BaseException:
            self.stop()
            raise

    # ------------------------------------------------------------------ files
    def _write(self) -> None:
        d = self.dir
        for sub in ("etc", "state", "spool", "run", "log", "munge/key", "dev"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d / "munge", 0o755)     # slurm.md gotcha 5: 755 or non-root clients fail
        os.chmod(d / "munge/key", 0o700)
        for script, text in self.scripts.items():
            (d / script).write_text(text)
            os.chmod(d / script, 0o755)
        for index in range(self.gpus):
            device = d / "dev" / f"gpu{index}"
            # slurm.md gotcha 2: a GPU needs File=; a clone of /dev/null is a clean char device
            os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))
        last = self.count
        ports = f"{self.base + 2}-{self.base + 1 + last}" if last > 1 else str(self.base + 2)
        srun_ports = f"{self.base + 2 + last}-{self.base + 1 + self.srun_ports + last}"
        nodes = f"n[1-{last}]" if last > 1 else "n1"
        node_line = (f"NodeName={nodes} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports} "
                     f"CPUs=2 RealMemory=1000 Gres=gpu:{self.gpus} State=UNKNOWN")
        self.conf.write_text(f"""\
ClusterName={self.name}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={self.base}
SlurmdPort={self.base + 1}
SrunPortRange={srun_ports}
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.sock
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={d}/log/jobcomp.txt
MinJobAge=3600
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerParameters=batch_sched_delay=0
SlurmdTimeout={self.slurmd_timeout}
GresTypes=gpu
{self.conf_extra}
{self._reboot_conf()}
{node_line}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL MaxTime=INFINITE State=UP
{PREEMPT_CONF if self.preempt else ""}""")
        gpu_files = f"{d}/dev/gpu[0-{self.gpus - 1}]" if self.gpus > 1 else f"{d}/dev/gpu0"
        (d / "etc" / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={nodes} Name=gpu File={gpu_files}\n")
        if self.oci_conf:  # "located in the same directory as the slurm.conf", oci.conf(5)
            (d / "etc" / "oci.conf").write_text(self.oci_conf)
        if self.reboot_delay is not None:
            self._write_reboot()

    def _write_reboot(self) -> None:
        """REBOOT_PROGRAM and TASK_PROLOG, and each node's `run/` and `boot/` folders."""
        d = self.dir
        (d / "reboot").write_text(REBOOT_PROGRAM.format(python=sys.executable, dir=str(d),
                                                       delay=float(self.reboot_delay or 0)))
        (d / "task_prolog").write_text(TASK_PROLOG.replace("{dir}", str(d)))
        for script in ("reboot", "task_prolog"):
            os.chmod(d / script, 0o755)
        for node in self.nodes:
            for sub in ("run", "boot"):
                (self.node_dir(node, sub)).mkdir(parents=True, exist_ok=True)
                os.chmod(self.node_dir(node, sub), 0o777)

    def _reboot_conf(self) -> str:
        """slurm.conf(5), Slurm 22.05.8: "RebootProgram: Program to be executed on each compute
        node to reboot it ... A node will be marked DOWN if it doesn't reboot within
        ResumeTimeout" (default 60 s); TaskProlog: see TASK_PROLOG."""
        if self.reboot_delay is None:
            return ""
        return (f"RebootProgram={self.dir}/reboot\nResumeTimeout={self.resume_timeout}\n"
                f"TaskProlog={self.dir}/task_prolog")

    def node_dir(self, node: str, sub: str = "run") -> Path:
        """A node's own folder (with `reboot_delay`): `run` (its tasks' TMPDIR, emptied by
        its reboot) or `boot` (copied into `run` at each reboot)."""
        return self.dir / "node" / node / sub

    # ------------------------------------------------------------------ daemons
    def _daemon(self, key: str, argv: list[str]) -> int:
        log = open(self.dir / "log" / f"{key}.out", "wb")
        # slurm.md gotcha 6: own session, no inherited stdout/stderr
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                env=self.env, start_new_session=True)
        log.close()
        self.pids[key] = proc.pid
        return proc.pid

    def _start(self, wait_idle: bool) -> None:
        d = self.dir
        key = d / "munge/key/munge.key"
        subprocess.run([_which("mungekey"), "--create", f"--keyfile={key}"], check=True,
                       capture_output=True)
        self._daemon("munged", [_which("munged"), "--foreground", "--force",
                                f"--socket={d}/munge/munge.sock", f"--key-file={key}",
                                f"--pid-file={d}/run/munged.pid",
                                f"--seed-file={d}/run/munged.seed",
                                f"--log-file={d}/log/munged.log"])
        self._wait(lambda: (d / "munge/munge.sock").exists(), "munged's socket")
        self._daemon("slurmctld", [_which("slurmctld"), "-D", "-f", str(self.conf)])
        self._wait(lambda: b"UP" in self.run("scontrol", "ping", check=False).stdout,
                   "slurmctld to answer ping")
        for node in self.nodes:
            self.start_node(node)
        if wait_idle:
            self.wait_idle(self.nodes)

    def start_node(self, node: str) -> int:
        return self._daemon(f"slurmd-{node}", [_which("slurmd"), "-D", "-N", node,
                                               "-f", str(self.conf)])

    def _wait(self, predicate, what: str, within: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if predicate():
                return
            dead = [k for k, pid in self.pids.items() if not alive(pid)]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited while waiting for {what}: "
                                   f"{self.log_tail()}")
            time.sleep(0.05)
        raise RuntimeError(f"timed out waiting for {what}: {self.log_tail()}")

    def log_tail(self) -> str:
        parts = []
        for path in sorted((self.dir / "log").glob("*")):
            try:
                parts.append(f"{path.name}: {path.read_text(errors='replace')[-600:]}")
            except OSError:
                pass
        return "\n".join(parts)

    # ------------------------------------------------------------------ client side
    def run(self, *argv: str, check: bool = True, timeout: float = 60.0,
            input: Optional[bytes] = None) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, check=check,
                              timeout=timeout, input=input)

    def node_info(self) -> dict[str, dict]:
        """Node name -> its `sinfo --json` record (22.05: every node; filters are ignored)."""
        data = json.loads(self.run("sinfo", "--json").stdout)
        return {n["name"]: n for n in data["nodes"]}

    def wait_idle(self, nodes: list[str], within: float = START_TIMEOUT_S) -> None:
        """Until every node in `nodes` is `idle` with no flags (slurm.md gotcha 10)."""
        def ready() -> bool:
            info = self.node_info()
            return all(info.get(n, {}).get("state") == "idle"
                       and not info[n].get("state_flags") for n in nodes)
        self._wait(ready, f"{', '.join(nodes)} idle", within)

    def drain(self, node: str, reason: str) -> None:
        self.run("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}")

    def resume_all(self) -> None:
        """Put every node back to idle (a test's finaliser): restart dead slurmd, resume."""
        self.reborn()
        for node in self.nodes:
            if not alive(self.pids.get(f"slurmd-{node}", 0)):
                self.start_node(node)
        for node in self.nodes:
            self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        for resv in self.reservations():
            self.run("scontrol", "delete", f"reservationname={resv}", check=False)
        self.wait_idle(self.nodes)

    def reservations(self) -> list[str]:
        out = self.run("scontrol", "show", "reservation", "-o", check=False).stdout.decode()
        return [word.split("=", 1)[1] for line in out.splitlines() for word in line.split()
                if word.startswith("ReservationName=")]

    def slurmd_pid(self, node: str) -> int:
        self.reborn()
        return self.pids[f"slurmd-{node}"]

    def reborn(self) -> None:
        """Record the slurmd a REBOOT_PROGRAM started for a node in place of the one started
        here: the one its SlurmdPidFile names, taken only while it runs as that node's slurmd
        (`slurmd ... -N NODE`) with this cluster's SLURM_CONF, so that it is stopped, and not
        started twice. Read every time: the PID of the slurmd it replaced may already belong
        to another process (PIDs wrap around quickly on a busy machine)."""
        marker = f"SLURM_CONF={self.conf}".encode()
        for node in self.nodes:
            try:
                pid = int((self.dir / "run" / f"slurmd-{node}.pid").read_text().split()[0])
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if (alive(pid) and marker in environ.split(b"\0") and b"-N" in argv
                    and argv[argv.index(b"-N") + 1:][:1] == [node.encode()]):
                self.pids[f"slurmd-{node}"] = pid

    # ------------------------------------------------------------------ stop
    def _job_processes(self) -> list[int]:
        """Processes started for this cluster's jobs (slurmstepd and the tasks): found by this
        cluster's SLURM_CONF in their environment (slurm.md gotcha 19), never by name alone."""
        marker = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if marker in environ.split(b"\0") and int(entry) not in self.pids.values():
                found.append(int(entry))
        return found

    def stop(self) -> None:
        """Stop the daemons and what runs for their jobs, by PID; remove the folder."""
        self.reborn()
        order = [k for k in self.pids if k.startswith("slurmd-")] + ["slurmctld", "munged"]
        for key in order:
            pid = self.pids.get(key)
            if pid is not None and alive(pid):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(p) for p in self.pids.values()):
            time.sleep(0.05)
        leftovers = [p for p in self.pids.values() if alive(p)] + self._job_processes()
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in self.pids.values():
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
