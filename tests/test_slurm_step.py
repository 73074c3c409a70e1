"""`gpuprov validate` on a real Slurm cluster of 16 nodes (tests/slurm_cluster.py: munged,
slurmctld, 16 `slurmd -N nX`, all on this machine), every node a task of ONE job step: a node
killed mid-step, or flooding its output, costs only itself, and the login node never runs more
than 2 srun processes (it ran one per node, up to 32 at once, before)."""
from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from remote.ground.exitcodes import EXIT_VALIDATION_FAILED
from tests.procs import wait_until
from tests.slurm_cluster import SlurmCluster, alive, missing_reason
from tests.test_slurm_cluster import FLOOD, hostile_run, node_tasks, parent, passing, start_validate

pytestmark = pytest.mark.root  # runs slurmd as root: the slow layer

NODES = 16
SRUN_MAX = 2  # issue 43: at most 2 srun processes on the login node at any time


@pytest.fixture(scope="module")
def slurm16():
    why = missing_reason()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(NODES, name="gpuprovstep")
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster(slurm16):
    yield slurm16
    slurm16.resume_all()


class SrunCount:
    """The most srun processes of this cluster (SLURM_CONF in their environment) seen at once,
    sampled from /proc every 20 ms while the block runs."""

    def __init__(self, cluster: SlurmCluster):
        self.marker = f"SLURM_CONF={cluster.conf}".encode()
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "SrunCount":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _count(self) -> int:
        found = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() != "srun":
                    continue
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            found += self.marker in environ
        return found

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._count())


def record_of(logs: Path) -> dict:
    (folder,) = list((logs / "hpc1").iterdir())
    return json.loads((folder / "slurm.json").read_text())


def test_one_node_of_16_killed_mid_step_fails_only_itself(cluster, tmp_path):
    """n7's slurmd, slurmstepd and task are killed (a power cut) while the one step runs: n7
    is "not validated: the node failed", the 15 others pass, and the login node ran one srun."""
    logs = tmp_path / "logs"
    with SrunCount(cluster) as sruns:
        proc = start_validate(cluster, tmp_path, {"validate_args": passing(cluster)},
                              "--json", str(tmp_path / "r.json"))
        try:
            assert wait_until(lambda: node_tasks(cluster, "n7"), 120), "n7's task never started"
            tasks = node_tasks(cluster, "n7")
            steps = {parent(t) for t in tasks} - set(tasks)
            for pid in [cluster.slurmd_pid("n7"), *steps, *tasks]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            out, _ = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert not alive(cluster.slurmd_pid("n7"))
    data = json.loads((tmp_path / "r.json").read_text())
    assert proc.returncode == EXIT_VALIDATION_FAILED, out
    assert data["hosts"]["n7"]["validation"].startswith("not validated: the node failed"), out
    passed = [n for n in cluster.nodes if data["hosts"][n]["validation"].startswith("passed")]
    assert passed == [n for n in cluster.nodes if n != "n7"], out
    assert f"--nodes={NODES}" in record_of(logs)["srun"]
    assert 1 <= sruns.peak <= SRUN_MAX, sruns.peak


def test_one_node_of_16_flooding_its_output_costs_only_itself(cluster, tmp_path, capsys):
    """n1 prints 1.5 MiB of lines through the one step (half before its validation, half
    after n2 and n3 sent their results): its lines are cut at 1 MiB with one note, and all 16
    nodes' results come home; the login node ran one srun."""
    import yaml

    from remote.commands import validate as validate_cmd

    vars_ = hostile_run(cluster, tmp_path, before=FLOOD,
                        after=f'i=0; while [ $i -lt 300 ] && ! [ -e "$d/done-n2" -a -e '
                              f'"$d/done-n3" ]; do sleep 0.2; i=$((i + 1)); done; sleep 3; {FLOOD}')
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {"hpc1": {
        "connection": "local", "slurm": {"partition": "debug", "conf": str(cluster.conf)},
        "vars": vars_}}}))
    logs = tmp_path / "logs"
    with SrunCount(cluster) as sruns:
        rc = validate_cmd.run(host="hpc1", inventory=str(inventory), logs_dir=str(logs),
                              json_path=str(tmp_path / "r.json"))
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "r.json").read_text())
    assert rc == 0, out[-3000:]
    assert all(data["hosts"][n]["validation"].startswith("passed") for n in cluster.nodes), data
    assert "more than 1024 KiB of lines from n1; the rest is not shown" in out
    assert sum(1 for line in out.splitlines() if "xxxxxxxxxx" in line) * 66 < 1.1 * (1 << 20)
    assert f"--nodes={NODES}" in record_of(logs)["srun"]
    assert 1 <= sruns.peak <= SRUN_MAX, sruns.peak
