"""`gpuprov validate --distributed` end to end on 4 hosts in network namespaces
(tests/distributed_net.py): real sshd in each host's namespace, real torch on the CPU with gloo,
a rendezvous port blocked for real with nftables in one host's namespace, a host whose python
sees another torch's metadata. Each scenario runs as PID 1 of fresh namespaces
(tests/netns.py)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.netns import have_tools, run_scenario

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture(autouse=True)
def tools():
    import shutil

    missing = have_tools() or ("" if shutil.which("torchrun") or _torch() else "no torch here")
    if missing:
        pytest.fail(missing)


def _torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def test_four_hosts_pass_and_the_training_step_matches_the_reference():
    result = run_scenario("dist_pass", timeout=420)
    out, doc, records = result["output"], result["json"], result["records"]
    assert result["rc"] == 0, out
    assert "distributed: 4 nodes, gloo, 1 process(es) each, rendezvous at 198.18.0.10:29431" in out
    assert "distributed: passed: gloo, 4 ranks" in out and "(not judged)" in out
    assert sorted(records) == ["n0", "n1", "n2", "n3"]
    rec = records["n2"]
    assert rec["ok"] and rec["named"] == {} and rec["backend"] == "gloo" and rec["world"] == 4
    assert rec["joined"] == ["n0", "n1", "n2", "n3"]
    assert [s["bytes"] for s in rec["sizes"]] == [4096, 16384, 65536, 262144, 1048576, 4194304]
    assert rec["wrong_elements"] == 0
    assert rec["busbw"]["verdict"] == "no reference" and "not judged" in rec["busbw"]["why"]
    train = rec["train"]
    assert train["match"] is True and train["global_batch"] == 32
    assert train["grad_max_abs_diff"] <= 1e-12 and train["loss_diff"] <= 1e-12
    assert abs(train["loss"] - train["reference_loss"]) <= train["rtol"] * train["reference_loss"]
    for name in ("n0", "n1", "n2", "n3"):  # --json: the step on every host
        steps = doc["hosts"][name]["steps"]
        assert [s["name"] for s in steps] == ["distributed"] and steps[0]["status"] == "ok"
    cases = [c.get("name") for c in ET.fromstring(result["junit"]).iter("testcase")]
    assert cases.count("distributed") == 4
    assert rec["left_processes"] == {"n0": 0, "n1": 0, "n2": 0, "n3": 0}
    assert result["torch_left"] == []
    prom = result["prom"]  # --prometheus: each node's part
    assert 'gpuprov_distributed_ok{node="n2",run="' in prom and "gpuprov_distributed_train_match" in prom
    assert 'gpuprov_distributed_busbw_bytes_per_second{backend="gloo",node="n0",run=' in prom


def test_a_host_whose_rendezvous_port_is_blocked_is_named_in_time():
    result = run_scenario("dist_blocked", timeout=420)
    out, records = result["output"], result["records"]
    assert result["rc"] == 3, out  # a failed validation
    why = "never joined: could not reach the rendezvous at 198.18.0.10:29431"
    assert f"distributed: FAILED: n2: {why}" in out
    assert records["n0"]["named"] == {"n2": why}
    assert records["n2"]["this_node"] == why and records["n0"]["this_node"] == ""
    assert records["n0"]["elapsed_s"] < result["limit_s"]  # named within the time limit
    assert f"n2: validation: passed (1 checks); distributed: {why}" in out
    assert result["json"]["hosts"]["n2"]["validation"].endswith(why)
    assert result["json"]["hosts"]["n0"]["warnings"] == [f"distributed job failed: n2: {why}"]
    assert result["torch_left"] == []  # no torch process left on any host
    assert 'gpuprov_distributed_node_named{node="n2",run=' in result["prom"]
    assert all(v == 0 or v is None for v in records["n0"]["left_processes"].values())


def test_a_host_with_another_torch_is_named_before_any_collective():
    result = run_scenario("dist_skew", timeout=420)
    out, records = result["output"], result["records"]
    assert result["rc"] == 3, out
    assert records["n0"]["named"] == {"n3": "version skew: torch 2.13.0 (the others: 2.14.1)"}
    assert records["n3"]["stacks"]["n3"]["torch"] == "2.13.0"
    # nothing started: no node ran torchrun, no collective, no step
    assert all(r["torchrun"] is None and r["sizes"] == [] and r["train"] is None
               for r in records.values())
    assert "nothing started" in out
    assert result["torch_left"] == []


def test_ctrl_c_during_the_job_stops_every_torch_process():
    result = run_scenario("dist_interrupt", timeout=420)
    out = result["output"]
    assert result["running"], out  # the workers ran when Ctrl-C came
    assert result["rc"] == 130, out
    assert "interrupted: the distributed job's processes were stopped" in out
    assert result["stopped_s"] < 60, out  # not the 120 s rendezvous limit
    assert result["torch_left"] == []
