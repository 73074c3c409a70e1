"""`validate --distributed` on the real test Slurm cluster (tests/slurm_cluster.py: munged,
slurmctld and three `slurmd -N nX` from Debian's packages, on 127.0.0.1): in one allocation, the
stack step and the job as one `srun` step (remote/distributed/slurm.py), torchrun on every node
with gloo on the CPU (the cluster's GPUs are fake: torch sees none).

The nodes share this machine's filesystem, so validate/ is copied once into a folder every node
reads, and the nodes run this machine's python (the tasks run as root, as slurmd does here).
A node is made different by its python: a wrapper that reads SLURMD_NODENAME (Slurm's own
variable in each task):
- "another torch": on n3 the wrapper puts first on PYTHONPATH a folder holding only
  `torch-2.13.0.dist-info/METADATA`, so the installed torch's metadata reads 2.13.0 there;
- "cut off": on n2 the wrapper runs python in a network namespace of its own (`unshare
  --net`, lo down): the node cannot reach the rendezvous on n1's address. The nodes share one
  loopback here, so an nftables rule could not drop one node's packets and not the others'.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.distributed import plan, slurm
from remote.ground.exitcodes import EXIT_VALIDATION_FAILED
from tests.slurm_cluster import SlurmCluster, missing_reason

pytestmark = [pytest.mark.root, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster():
    why = missing_reason()
    if why:
        pytest.fail(why)
    started = SlurmCluster(3)
    yield started
    started.stop()


@pytest.fixture
def work(tmp_path):
    shutil.copytree(REPO / "validate", tmp_path / "validate")
    fake = tmp_path / "fake" / "torch-2.13.0.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n")
    return tmp_path


def _python(work: Path, body: str) -> str:
    path = work / "python"
    path.write_text(f"#!/bin/sh\n{body}\nexec {sys.executable} \"$@\"\n")
    os.chmod(path, 0o755)
    return str(path)


def _allocation(cluster: SlurmCluster):
    """A 3-node allocation (`salloc --no-shell`, srun.html "--jobid" to run steps in it)."""
    out = cluster.run("salloc", "--nodes=3", "--time=10", "--no-shell", "--job-name=gpuprov-dist",
                      timeout=60)
    text = (out.stdout + out.stderr).decode()
    job = next(w for w in text.replace(",", " ").split() if w.isdigit())

    def runner(command: str, timeout: float) -> tuple[int, str, str]:
        done = subprocess.run(["sh", "-c", command], env=dict(cluster.env, SLURM_JOB_ID=job),
                              capture_output=True, timeout=timeout, text=True)
        return done.returncode, done.stdout, done.stderr

    return job, runner


def _job(cluster, work, python, settings=None):
    settings = settings or plan.Settings()
    job, runner = _allocation(cluster)
    steps_before = time.monotonic()
    try:
        outcome = slurm.run_job(runner, slurm.Step(str(work), python, 3, "r1"), settings)
        return outcome, time.monotonic() - steps_before
    finally:
        cluster.run("scancel", job, check=False)


def _torch_left() -> list[str]:
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "validate.dist_job" in text and "--run-token" in text:
            left.append(text)
    return left


def test_the_job_is_one_srun_step_and_matches_the_reference(cluster, work):
    outcome, _ = _job(cluster, work, _python(work, ""))
    assert outcome.verdict.ok, outcome.verdict.reason
    assert outcome.nodes == ["n1", "n2", "n3"] and outcome.backend == "gloo"
    assert outcome.result is not None and outcome.result.world == 3
    assert outcome.result.train["match"] and outcome.result.train["global_batch"] == 24
    assert all(r.joined and r.rc == 0 for r in outcome.runs.values())
    assert outcome.left == {"n1": 0, "n2": 0, "n3": 0}
    assert _torch_left() == []


def test_a_node_cut_off_from_the_rendezvous_is_named_in_time(cluster, work):
    settings = plan.Settings(join_timeout=15, collective_timeout=20)
    python = _python(work, '[ "$SLURMD_NODENAME" = n2 ] && exec unshare --net '
                           f'{sys.executable} "$@"')
    outcome, took = _job(cluster, work, python, settings)
    assert not outcome.verdict.ok
    assert list(outcome.verdict.named) == ["n2"], outcome.verdict.reason
    assert outcome.verdict.named["n2"].startswith("never joined: could not reach the rendezvous")
    assert took < settings.limit_s + plan.STACK_TIMEOUT_S
    assert _torch_left() == []


def test_a_node_with_another_torch_is_named_before_the_step(cluster, work):
    python = _python(work, f'[ "$SLURMD_NODENAME" = n3 ] && export PYTHONPATH={work}/fake')
    outcome, _ = _job(cluster, work, python)
    assert outcome.verdict.named == {"n3": "version skew: torch 2.13.0 (the others: 2.14.1)"}
    assert outcome.runs == {} and outcome.result is None  # the job's step never ran
    assert outcome.stacks["n3"]["torch"] == "2.13.0"


# ---------------------------------------------------------------- through the Slurm route
def _route(cluster: SlurmCluster, work: Path, python: str, capsys) -> tuple[int, str, dict, Path]:
    """`gpuprov validate --host hpc1 --distributed`, hpc1 the cluster's login node reached with
    `connection: local` (as tests/test_slurm_cluster.py drives it); the nodes pass their own
    validation with the Xid scan of an empty kernel log; `python` is their validate_python."""
    import json

    import yaml

    from remote.commands import validate as validate_cmd

    log = work / "kernel.log"
    log.touch()
    inventory = work / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {"hpc1": {
        "connection": "local",
        "slurm": {"partition": "debug", "conf": str(cluster.conf), "gpus_per_node": 2},
        "vars": {"validate_args": f"--checks xid --kernel-log {log}",
                 "validate_python": python}}}}, sort_keys=False))
    logs = work / "logs"
    rc = validate_cmd.run(host="hpc1", inventory=str(inventory), json_path=str(work / "r.json"),
                          logs_dir=str(logs), distributed=True)
    out = capsys.readouterr()
    path = work / "r.json"
    return rc, out.out + out.err, json.loads(path.read_text()) if path.exists() else {}, logs


def _calls(work: Path) -> list[list[str]]:
    """What the nodes' python was asked to run: [node, job id, step id, its arguments...]."""
    return [line.split() for line in (work / "calls").read_text().splitlines()]


def _logging(work: Path, body: str = "") -> str:
    return _python(work, f'echo "$SLURMD_NODENAME $SLURM_JOB_ID $SLURM_STEP_ID $*" >>{work}/calls'
                         f"\n{body}")


def test_the_route_runs_the_job_as_a_step_of_the_validations_own_job(cluster, work, capsys):
    import json

    rc, out, data, logs = _route(cluster, work, _logging(work), capsys)
    assert rc == 0, out
    for node in cluster.nodes:
        assert data["hosts"][node]["validation"].endswith("; distributed: passed"), out
    run_id = next((logs / "hpc1").iterdir()).name
    for node in cluster.nodes:
        record = json.loads((logs / node / run_id / "distributed.json").read_text())
        assert record["ok"] and record["backend"] == "gloo" and record["world"] == 3
        assert record["train"]["match"] and record["nodes"] == cluster.nodes
    assert "distributed: passed" in out
    calls = _calls(work)
    # one job: the validation (step 0), the stack probe, then torchrun as one step on all
    assert {c[1] for c in calls} == {json.loads(
        (logs / "hpc1" / run_id / "slurm.json").read_text())["job_id"]}
    torchrun = {(c[0], c[2]) for c in calls if "torch.distributed.run" in c}
    assert {node for node, _ in torchrun} == set(cluster.nodes)
    # three steps in all: the validation, the stack probe, and torchrun's one on every node
    assert len({step for _, step in torchrun}) == 1 and len({c[2] for c in calls}) == 3, calls
    assert _torch_left() == []


def test_the_route_names_a_node_with_another_torch_before_the_step(cluster, work, capsys):
    python = _logging(work, f'[ "$SLURMD_NODENAME" = n3 ] && export PYTHONPATH={work}/fake')
    rc, out, data, logs = _route(cluster, work, python, capsys)
    assert rc == EXIT_VALIDATION_FAILED, out
    assert data["hosts"]["n3"]["validation"].endswith(
        "; distributed: version skew: torch 2.13.0 (the others: 2.14.1)"), out
    assert "distributed job failed (not this node)" in data["hosts"]["n1"]["validation"]
    assert [c for c in _calls(work) if "--stack" in c] and not [
        c for c in _calls(work) if "torch.distributed.run" in c]  # the job's step never ran
