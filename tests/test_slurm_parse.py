"""The Slurm route's readers, without a cluster: node listings of 22.05, 23.02 and 24.11
(tests/fixtures/slurm/SOURCES.md), srun's labelled output split per node, drain reasons, and the
inventory's `slurm:` key with its one-line errors."""
from __future__ import annotations

import base64
import io
import json
import tarfile
from pathlib import Path

import pytest

from remote.cluster import gate
from remote.cluster.job import JobOutput, srun_command
from remote.cluster.nodes import parse_nodes, plan_nodes
from remote.config.inventory import load_inventory
from remote.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def test_22_05_sinfo_json_is_read_and_planned():
    nodes = parse_nodes((FIXTURES / "sinfo-22.05.8.json").read_text())
    assert sorted(nodes) == ["n1", "n2", "n3"]
    assert nodes["n1"].states == {"IDLE"} and nodes["n1"].partitions == ("debug", "gpu")
    assert nodes["n2"].drained and not nodes["n2"].drained_by_gpuprov
    assert nodes["n3"].drained_by_gpuprov
    plan = plan_nodes(nodes, "debug", None, resume_passed=False)
    assert [n.name for n in plan.validate] == ["n1"]
    assert [(n.name, why) for n, why in plan.skipped] == [
        ("n2", "DRAIN+IDLE, drained by someone else (admin: fan): left alone"),
        ("n3", "drained by gpuprov (gpuprov 20261125T092000.000Z-ab12: system: nvidia-smi not "
               "found; action: reboot the node); --resume-passed validates it again")]
    again = plan_nodes(nodes, "debug", None, resume_passed=True)
    assert [n.name for n in again.validate] == ["n1", "n3"]
    assert [n.name for n in again.resume] == ["n3"]


def test_23_02_grouped_sinfo_records_are_read():
    nodes = parse_nodes((FIXTURES / "sinfo-23.02.5-dataparser.json").read_text())
    assert nodes["localhost"].states == {"ALLOCATED"}
    assert nodes["gpu02"].drained_by_gpuprov
    assert nodes["gpu02"].reason.startswith("gpuprov 20261125T092000.000Z-ab12: stress")
    assert nodes["gpu02"].partitions == ("debug",)


def test_24_11_scontrol_nodes_down_are_reported_as_down():
    nodes = parse_nodes((FIXTURES / "scontrol-nodes-24.11.5.json").read_text())
    plan = plan_nodes(nodes, "defq", None, resume_passed=True)
    assert plan.validate == []
    assert [(n.name, why) for n, why in plan.down] == [
        ("node010-wont-show", "DOWN+NOT_RESPONDING (Not responding)"),
        ("renamed-node007", "DOWN+NOT_RESPONDING (Not responding)")]


@pytest.mark.parametrize("text", ["", "[]", "{}", '{"nodes": 3}', '{"errors": ["boom"]}'])
def test_an_answer_that_is_no_node_list_is_refused(text):
    from remote.cluster.nodes import NodeListError
    with pytest.raises(NodeListError):
        parse_nodes(text)


def test_odd_fields_count_as_absent_and_odd_names_are_not_validated():
    text = json.dumps({"nodes": [
        {"name": "ok1", "state": 7, "state_flags": "DRAIN", "partitions": "p,q", "reason": 5},
        {"name": "../etc", "state": "idle", "partitions": ["p"]},
        {"name": 12}, "junk"]})
    nodes = parse_nodes(text)
    assert sorted(nodes) == ["../etc", "ok1"]
    assert nodes["ok1"].partitions == ("p", "q") and nodes["ok1"].drained
    plan = plan_nodes(nodes, "p", None, resume_passed=False)
    assert [(n.name, why) for n, why in plan.skipped][0] == (
        "../etc", "its name cannot be a folder name")


def b64_tarball(files: dict) -> list[str]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    text = base64.b64encode(buffer.getvalue()).decode()
    return [text[i:i + 76] for i in range(0, len(text), 76)]


def test_labelled_output_is_split_per_node_and_foreign_claims_are_ignored():
    seen, started = [], []
    out = JobOutput("t0k", ["n1", "n2"], 1 << 20, on_start=lambda n, j: started.append((n, j)),
                    on_line=lambda n, t: seen.append((n, t)), on_srun=lambda t: None)
    lines = ["0: @@gpuprov-t0k start n1 42", "1: @@gpuprov-t0k start n1 42",  # n1 twice
             " 1: @@gpuprov-t0k start n2 42", "0: [system] FAIL", "1: hello",
             "0: @@gpuprov-t0k results 1"] + [f"0: {c}" for c in b64_tarball(
                 {"./results.json": b"{}"})] + ["0: @@gpuprov-t0k end",
                                                "1: @@gpuprov-t0k results 0", "1: QUJD"]
    for line in lines:
        out.stdout(line)
    out.stderr("srun: error: Node failure on n2")
    assert started == [("n1", "42"), ("n2", "42")]
    assert seen == [("n1", "[system] FAIL"), ("n2", "hello")]
    n1, n2 = out.by_node["n1"], out.by_node["n2"]
    assert n1.rc == 1 and tarfile.open(fileobj=n1.archive()).getnames()
    assert n2.archive() is None  # no end marker: cut short, never taken as whole
    assert out.failed_nodes == {"n2"}


def test_results_past_the_cap_are_refused():
    out = JobOutput("t", ["n1"], 100, lambda n, j: None, lambda n, t: None, lambda t: None)
    for line in ["0: @@gpuprov-t start n1 1", "0: @@gpuprov-t results 0"] + \
            ["0: " + "A" * 76] * 10 + ["0: @@gpuprov-t end"]:
        out.stdout(line)
    assert out.by_node["n1"].archive() is None
    assert "over" in out.by_node["n1"].refused


def test_results_that_are_not_base64_are_refused():
    out = JobOutput("t", ["n1"], 1 << 20, lambda n, j: None, lambda n, t: None, lambda t: None)
    for line in ["0: @@gpuprov-t start n1 1", "0: @@gpuprov-t results 0", "0: not*base64!",
                 "0: @@gpuprov-t end"]:
        out.stdout(line)
    assert out.by_node["n1"].archive() is None
    assert out.by_node["n1"].refused == "its results were not valid base64"


def test_srun_line_quotes_every_value_and_keeps_gpuprovs_own_options(tmp_path):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  hpc1:\n    slurm:\n      partition: gpu\n"
                         "      account: ops\n      time: 30\n      gpus_per_node: h100:8\n"
                         "      extra_args: ['--constraint=a b']\n")
    settings = load_inventory(inventory).hosts["hpc1"].slurm
    line = srun_command(settings, ["g1", "g2"], "echo $HOME; rm -rf /", "gpuprov-RUN", "resv")
    assert "--nodelist=g1,g2" in line and "--gpus-per-node=h100:8" in line
    assert "--time=30" in line and "--reservation=resv" in line and "--account=ops" in line
    assert "'--constraint=a b'" in line and "'echo $HOME; rm -rf /'" in line


def test_drain_reason_names_run_check_and_finding_and_is_cut(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"checks": [
        {"name": "system", "status": "pass", "required": True},
        {"name": "stress", "status": "fail", "required": True, "reason": "x\n" * 400,
         "findings": [{"what": "GPU 3 lost\tits link", "action": "reboot the node",
                       "fails": True}]}]}))
    reason = gate.drain_reason("RUN", results, "unused")
    assert reason == "gpuprov RUN: stress: GPU 3 lost?its link; action: reboot the node"
    results.write_text(json.dumps({"checks": [{"name": "system", "status": "fail",
                                               "required": True, "reason": "y" * 900}]}))
    cut = gate.drain_reason("RUN", results, "unused")
    assert len(cut) == gate.REASON_MAX and cut.endswith("...")
    assert gate.drain_reason("RUN", None, "not validated: the node failed mid-job") == \
        "gpuprov RUN: not validated: the node failed mid-job"


@pytest.mark.parametrize("slurm, message", [
    ("{}", "host 'hpc1': slurm needs 'partition'"),
    ("{partition: 'a b'}", "slurm.partition 'a b' is not a Slurm name"),
    ("{partition: p, time: 'soon'}", "slurm.time must be a Slurm time limit"),
    ("{partition: p, gpus_per_node: 0}", "slurm.gpus_per_node must be a count of 1 or more"),
    ("{partition: p, nodes: 'n[1-3'}", "slurm.nodes 'n[1-3' is not a Slurm hostlist"),
    ("{partition: p, extra_args: '--nodes=2'}", "--nodes is set by gpuprov"),
    ("{partition: p, extra_args: '-N2'}", "-N is set by gpuprov"),
    ("{partition: p, extra_args: 'hostname'}", "'hostname' is not an srun option"),
    ("{partition: p, conf: etc/slurm.conf}", "slurm.conf must be an absolute path"),
    ("{partition: p, queue: x}", "slurm: unknown key 'queue'"),
    ("[p]", "slurm must be a mapping"),
])
def test_a_bad_slurm_key_is_one_line_naming_the_file_and_line(tmp_path, slurm, message):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"hosts:\n  ok: {{}}\n  hpc1:\n    connection: local\n"
                         f"    slurm: {slurm}\n")
    with pytest.raises(InputError) as caught:
        load_inventory(inventory)
    text = str(caught.value)
    assert message in text and text.startswith(f"{inventory}:5: "), text
    assert "\n" not in text
