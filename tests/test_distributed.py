"""remote/distributed/ without hosts: what a node says, read as untrusted (the stack, rank 0's
result on gloo and, as the worker prints it on GPUs, on NCCL: unrun on a GPU, no GPU was lent),
torchrun's failures told apart (stderr captured from the runs of tests/test_distributed_netns.py),
version skew, the verdict, the commands each node runs, the Slurm step's output read, and the
option's bad input (exit 2, one line, before any host is contacted)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from remote.distributed import parse, plan, slurm, verdict
from remote.ground.errors import InputError
from tests.conftest import invoke, write_yaml

GIB = 1 << 30


def _rows(sizes, busbw):
    return "".join("@@size " + json.dumps({"bytes": n, "median_s": 0.01, "algbw_gbs": busbw / 2,
                                           "busbw_gbs": busbw}) + "\n" for n in sizes)


TRAIN = {"match": True, "loss": 0.95, "reference_loss": 0.95, "loss_diff": 0.0,
         "grad_max_abs_diff": 2.8e-17, "grad_max_rel_diff": 3e-16, "rtol": 1e-9, "atol": 1e-12,
         "global_batch": 32, "dtype": "float64", "seed": 1234}


def _answer(backend="gloo", world=4, sizes=(4096, 4 << 20), busbw=0.2, train=None, wrong=0):
    return ("@@started {\"node\": \"n0\", \"rank\": 0}\n@@joined {\"node\": \"n0\", \"rank\": 0}\n"
            + _rows(sizes, busbw) + "@@train " + json.dumps(train or TRAIN) + "\n"
            + "@@result " + json.dumps({"backend": backend, "world": world, "sizes": len(sizes),
                                        "wrong_elements": wrong}) + "\n")


def test_a_gloo_result_is_read_and_not_judged():
    res = parse.result("torch noise\n" + _answer())
    assert res.backend == "gloo" and res.world == 4 and [r["bytes"] for r in res.sizes] == [4096, 4 << 20]
    judged = verdict.judge(res, {"n0": verdict.NodeRun(0, True)}, "a:1", 100, None)
    assert judged.ok and "not judged" in judged.reason and "training step matches" in judged.reason
    assert judged.busbw["verdict"] == "no reference" and "gloo on CPUs" in judged.busbw["why"]


NCCL_SIZES = [4096 * 4 ** k for k in range(10)] + [8 * GIB]


def test_an_nccl_result_of_two_8_gpu_nodes_has_no_table_floor():
    """As validate/dist_job.py prints it on 2 nodes of 8 H100s (written from the worker's code,
    not captured: no GPU was lent this session). The table's floor is one node's 8 GPUs."""
    res = parse.result(_answer("nccl", 16, NCCL_SIZES, 41.5))
    assert res.backend == "nccl" and res.world == 16 and res.sizes[-1]["bytes"] == 8 * GIB
    judged = verdict.judge_busbw(res, None, verdict.node_sku(
        {"a": {"gpu_names": ["NVIDIA H100 80GB HBM3"] * 8}, "b": {"gpu_names": ["NVIDIA H100 80GB HBM3"] * 8}}))
    assert judged["verdict"] == "no reference" and "the floor is for 8 GPUs, not 16" in judged["why"]


@pytest.mark.parametrize("busbw,ok", [(41.5, True), (12.0, False)])
def test_an_nccl_result_is_judged_against_the_inventory_floor(busbw, ok):
    res = parse.result(_answer("nccl", 16, NCCL_SIZES, busbw))
    judged = verdict.judge(res, {"n0": verdict.NodeRun(0, True), "n1": verdict.NodeRun(0, True)},
                           "a:1", 100, 40.0, "H100 SXM")
    assert judged.ok is ok
    if not ok:
        assert judged.reason == ("busbw 12 GB/s below 40 (inventory distributed_busbw_floor)")


def test_a_training_step_that_differs_fails_with_its_figures():
    train = dict(TRAIN, match=False, reference_loss=0.96, loss_diff=0.01, grad_max_abs_diff=0.003)
    res = parse.result(_answer(train=train))
    judged = verdict.judge(res, {"n0": verdict.NodeRun(0, True)}, "a:1", 100, None)
    assert not judged.ok and judged.named == {}
    assert "training step differs from the one-process reference" in judged.reason
    assert "gradients up to 0.003 apart (rtol 1e-09, atol 1e-12)" in judged.reason


@pytest.mark.parametrize("text,why", [
    (_answer().replace('"backend": "gloo"', '"backend": "mpi"'), "backend"),
    (_answer().replace('"busbw_gbs": 0.2', '"busbw_gbs": NaN', 1), "busbw_gbs"),
    (_answer().replace('"busbw_gbs": 0.2', '"busbw_gbs": -1', 1), "busbw_gbs"),
    (_answer().replace('"sizes": 2', '"sizes": 3'), "size lines"),
    (_answer().replace('"match": true', '"match": "yes"'), "train"),
    (_answer() + "@@train {}\n", "training step lines"),
    ("@@result " + "x" * (parse.MAX_LINE + 1), "characters"),
    ("@@result [1]\n", "not a JSON object"),
])
def test_a_forged_result_is_refused(text, why):
    with pytest.raises(parse.BadAnswer, match=why):
        parse.result(text)


def test_the_stack_is_read_and_a_bad_one_refused():
    line = '@@stack {"torch": "2.14.1", "cuda": "13.0", "nccl": "2.27.7", "driver": "580.95.05", ' \
           '"python": "3.11.2", "gpus": 8, "gpu_names": ["NVIDIA H100 80GB HBM3"]}'
    found = parse.stack("noise\n" + line + "\n")
    assert found["torch"] == "2.14.1" and found["gpus"] == 8 and found["nccl"] == "2.27.7"
    for bad in (line.replace("2.14.1", "2.14\\u001b[31m"), line.replace('"gpus": 8', '"gpus": -1'),
                line + "\n" + line, "nothing"):
        with pytest.raises(parse.BadAnswer):
            parse.stack(bad)


def test_skew_names_the_node_that_differs():
    base = {"torch": "2.14.1", "cuda": "12.8", "nccl": "2.27.7", "driver": "580.95.05", "gpus": 8}
    stacks = {"n0": base, "n1": dict(base), "n2": dict(base, nccl="2.26.2", driver="570.1"),
              "n3": dict(base)}
    assert verdict.skew(stacks) == {
        "n2": "nccl 2.26.2 (the others: 2.27.7), driver 570.1 (the others: 580.95.05)"}
    assert verdict.skew({"a": base, "b": dict(base, torch="2.13.0")}) == {
        "b": "torch 2.13.0 (the others: 2.14.1)"}  # a tie: the first node's is the reference
    assert verdict.skew({"a": base, "b": dict(base, gpus=7)}) == {"b": "gpus 7 (the others: 8)"}


# torchrun's stderr on the node that could not reach the store, on one that reached it and saw
# the host close the round, and on one whose store went away (tests/test_distributed_netns.py's
# blocked port and the first runs of the job; torch 2.14.1), paths and frames cut
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "distributed"
CONNECT, CLOSED, SHUTDOWN = ((FIXTURES / f"torchrun_{name}.txt").read_text()
                            for name in ("connect", "closed", "shutdown"))


def test_torchrun_failures_are_told_apart():
    assert parse.torchrun_failure(CONNECT) == "connect"
    assert parse.torchrun_failure(CLOSED) == "rendezvous"
    assert parse.torchrun_failure(SHUTDOWN) == "rendezvous"
    assert parse.torchrun_failure("ValueError: x") == ""
    assert parse.last_line(CONNECT + "\n" + "=" * 60) .startswith(
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError")


def test_who_never_joined_is_named():
    runs = {"n0": verdict.NodeRun(1, False, "rendezvous"), "n1": verdict.NodeRun(1, False, "connect"),
            "n2": verdict.NodeRun(None, False, "timeout"), "n3": verdict.NodeRun(1, False, "rendezvous")}
    judged = verdict.judge(None, runs, "h:29431", 85, None)
    assert judged.named == {"n1": "never joined: could not reach the rendezvous at h:29431",
                            "n2": "never answered within 85 s"}
    hung = {"n0": verdict.NodeRun(0, True), "n1": verdict.NodeRun(None, True, "timeout")}
    assert verdict.judge(None, hung, "h:1", 85, None).named == {"n1": "never answered within 85 s"}
    late = {"n0": verdict.NodeRun(1, False, "", "RuntimeError: Gloo connectFullMesh failed",
                                  started=True), "n1": verdict.NodeRun(1, True)}
    assert verdict.judge(None, late, "h:1", 85, None).named["n0"].startswith(
        "reached the rendezvous, but its processes never joined the process group")


def test_the_node_script_stops_only_its_own_processes():
    launch = plan.Launch("n1", "/opt/py", "R1", 4, 8, 1, "10.0.0.1:29431", "10.0.0.2", "nccl",
                         8 * GIB, "0123456789abcdef")
    script = plan.launch_script(launch, plan.Settings())
    assert "0123456789abcdef" not in script  # its own shell never matches the pattern
    assert ("--nnodes=4 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29431 "
            "--rdzv-id=gpuprov-R1 --rdzv-conf=is_host=false,join_timeout=60,read_timeout=60 "
            "--local-addr=10.0.0.2 --max-restarts=0 -m validate.dist_job --host-name n1 "
            '--run-token "$a$b" --backend nccl --max-bytes 8589934592') in script
    assert "timeout -k 5 210 " in script and 'pat="--host-name $h --run-token $a$b"' in script
    assert "GLOO_SOCKET_IFNAME" in script and "NCCL_SOCKET_IFNAME" in script
    subprocess.run(["sh", "-n", "-c", script], check=True)
    subprocess.run(["sh", "-n", "-c", plan.cleanup_script("n1", "R1", "0123456789abcdef")], check=True)


def test_the_cleanup_kills_by_pid_the_processes_holding_the_token(tmp_path):
    """A real process whose command line holds the node's name and the token, and one of
    another node with the same token: only the first is stopped."""
    token = plan.new_token()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    mine = subprocess.Popen(sleeper + ["--host-name", "n1", "--run-token", token])
    other = subprocess.Popen(sleeper + ["--host-name", "n2", "--run-token", token])
    try:
        script = plan.cleanup_script("n1", "R1", token).replace('"$HOME"', str(tmp_path))
        out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30).stdout
        assert parse.left(out) == 1
        assert mine.wait(10) == -9 and other.poll() is None
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()


def test_the_slurm_job_is_one_srun_step_and_its_output_is_read_per_node():
    step = slurm.Step("/shared/gpuprov", "/usr/bin/python3", 2, "R1")
    command = slurm.job_command(step, plan.Settings(), "nccl", 8, 8 * GIB, "0123456789abcdef")
    assert command.count("srun ") == 1 and "0123456789abcdef" not in command
    assert command.startswith("srun --nodes=2 --ntasks-per-node=1 --label --kill-on-bad-exit=0 --time=5 sh -c ")
    stdout = "\n".join(["0: @@node gpu-a", "1: @@node gpu-b", "1: @@started {\"rank\": 0}",
                        "1: @@joined {\"rank\": 0}", "0: @@started {\"rank\": 1}",
                        "0: @@joined {\"rank\": 1}"]
                       + [f"1: {line}" for line in _answer("nccl", 16, NCCL_SIZES, 41.5).splitlines()]
                       + ["0: @@left 0", "0: @@rc 0", "1: @@left 0", "1: @@rc 0", "srun: a line"])
    runs, texts = slurm.job_runs(stdout, "1: W socket noise\n", ["gpu-a", "gpu-b"])
    assert all(r.joined and r.rc == 0 for r in runs.values())
    res, where = parse.first_result(texts)
    assert where == "gpu-b" and res.world == 16  # rank 0 was on the second node
    silent, _ = slurm.job_runs("0: @@node gpu-a\n0: @@rc 1\n", "", ["gpu-a", "gpu-b"])
    assert silent["gpu-b"].failure == "timeout" and silent["gpu-a"].rc == 1


@pytest.mark.parametrize("vars_,said", [
    ({"distributed_port": 70000}, "distributed_port: 70000 is not a number from 1 to 65535"),
    ({"distributed_timeout": "soon"}, "distributed_timeout: 'soon' is not a number from 1 to 3600"),
    ({"distributed_busbw_floor": -3}, "distributed_busbw_floor: -3 is not a number"),
])
def test_bad_settings_are_refused(vars_, said):
    with pytest.raises(InputError, match=said.replace("(", r"\(").replace(")", r"\)")):
        plan.read_settings(vars_)


def test_distributed_with_one_host_or_a_bad_var_is_exit_2_before_any_host(tmp_path):
    inv = write_yaml(tmp_path / "inventory.yaml", {"hosts": {
        "a": {"address": "192.0.2.1"}, "b": {"address": "192.0.2.2"}}})
    one = invoke("validate", "--host", "a", "--inventory", str(inv), "--distributed", cwd=tmp_path)
    assert one.rc == 2 and one.err.strip().endswith(
        "--distributed runs one job across nodes: select at least 2 hosts, or a cluster's "
        "login node (1 selected)"), one.err
    assert len(one.err.strip().splitlines()) == 1 and "Traceback" not in one.err
    bad = invoke("validate", "--host", "all", "--inventory", str(inv), "--distributed",
                 "--var", "distributed_port=0", cwd=tmp_path)
    assert bad.rc == 2 and bad.err.strip().endswith(
        "distributed_port: '0' is not a number from 1 to 65535"), bad.err
    assert str(inv) in bad.err and len(bad.err.strip().splitlines()) == 1
    assert not (tmp_path / "logs").exists()  # nothing contacted, nothing written


def test_a_login_nodes_bad_distributed_var_is_exit_2_before_any_host(tmp_path):
    """A login node is a selection of its own for --distributed (its nodes run the job, as a
    step of the validation's allocation: tests/test_distributed_slurm.py); its settings are
    read before anything is contacted."""
    inv = write_yaml(tmp_path / "inventory.yaml", {"hosts": {
        "hpc1": {"address": "192.0.2.9", "slurm": {"partition": "gpu"},
                 "vars": {"distributed_port": 0}}}})
    res = invoke("validate", "--host", "hpc1", "--inventory", str(inv), "--distributed", cwd=tmp_path)
    assert res.rc == 2 and res.err.strip().endswith(
        "distributed_port: 0 is not a number from 1 to 65535"), res.err
    assert len(res.err.strip().splitlines()) == 1 and not (tmp_path / "logs").exists()


def test_prometheus_reads_each_nodes_record(tmp_path):
    from remote.distributed.output import write_prometheus

    for node, rec in {"n0": {"ok": False, "this_node": "", "backend": "gloo", "train": None,
                             "sizes": []},
                      "n2": {"ok": False, "this_node": "never joined", "sizes": []}}.items():
        (tmp_path / node / "R1").mkdir(parents=True)
        (tmp_path / node / "R1" / "distributed.json").write_text(json.dumps(rec))
    (tmp_path / "n1" / "R1").mkdir(parents=True)  # not in the job: no record
    write_prometheus(tmp_path / "d.prom", tmp_path, ["n0", "n1", "n2"], "R1")
    text = (tmp_path / "d.prom").read_text()
    assert 'gpuprov_distributed_node_named{node="n2",run="R1"} 1.0' in text
    assert 'gpuprov_distributed_node_named{node="n0",run="R1"} 0.0' in text
    assert 'node="n1"' not in text


def test_the_sweep_grows_to_the_tables_size_on_gpus_and_4_mib_on_cpus():
    assert plan.max_bytes(0, None) == 4 << 20  # gloo on CPUs: the nccl check's size
    assert plan.max_bytes(4, None) == 1 << 30 and plan.max_bytes(8, None) == 8 << 30
    assert plan.max_bytes(8, verdict.table_bytes("H100 SXM")) == 16 * GIB  # AzNHC's 16G
    assert verdict.table_bytes(None) is None
