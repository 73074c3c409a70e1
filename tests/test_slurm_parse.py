"""The Slurm route's readers, without a cluster: node listings of 22.05, 23.02 and 24.11
(tests/fixtures/slurm/SOURCES.md), the steps' labelled output split per node, drain reasons, and the
inventory's `slurm:` key with its one-line errors."""
from __future__ import annotations

import base64
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from remote.config.inventory import load_inventory
from remote.ground.errors import InputError
from remote.scheduler import SCHEDULERS
from remote.scheduler.slurm import gate
from remote.scheduler.slurm.job import LABELLER, LINE_PIECE, NODE_TEXT_MAX, JobOutput, job_command
from remote.scheduler.slurm.nodes import parse_nodes, plan_nodes
from tests.conftest import invoke

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
    from remote.scheduler.slurm.nodes import NodeListError
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
    lines = ["0: @@gpuprov-t0k start n1 42", "1: @@gpuprov-t0k start n1 42",  # step 1 is n2
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


def test_digits_int_refuses_are_no_number_of_any_grammar():
    """`²` (str.isdigit() takes it, int() refuses it) in a node's marker lines, in a step
    number and in the script's exit-status line: no exception, and nothing read as a number;
    the node's real results marker still counts."""
    out = JobOutput("t", ["n1", "n2"], 1 << 20, lambda n, j: None, lambda n, t: None,
                    lambda t: None)
    for line in ["0: @@gpuprov-t start n1 \u00b2", "0: @@gpuprov-t results \u00b2 1 2",
                 "\u00b9: @@gpuprov-t start n2 1", "0: @@gpuprov-t results 0 \u00b2 2"]:
        out.stdout(line)
    out.stdout("@@gpuprov-t srun \u00b2 0")
    out.stdout("@@gpuprov-t srun 0 \u00b2")
    n1 = out.by_node["n1"]
    assert n1.job_id == "" and n1.rc == 0 and n1.in_results and n1.validate_s is None
    assert "n2" not in out.by_node and out.step_rc == {}
    assert gate.parse_each_node("@@rc n1 \u00b2\n@@rc n2 0\n") == {"n2": (0, "@@rc n1 \u00b2")}


def test_one_nodes_lines_are_capped_on_their_own():
    """A node's lines past NODE_TEXT_MAX are not passed on (one note instead); another node's
    lines and results are untouched."""
    seen: dict[str, int] = {}
    notes = []

    def on_line(node, text):
        seen[node] = seen.get(node, 0) + len(text) + 1
        if text.startswith("[gpuprov:"):
            notes.append((node, text))
    out = JobOutput("t", ["n1", "n2"], 1 << 20, lambda n, j: None, on_line, lambda t: None)
    out.stdout("0: @@gpuprov-t start n1 1")
    out.stdout("1: @@gpuprov-t start n2 1")
    flood = "x" * 1999
    for _ in range(1400):  # 2.7 MiB
        out.stdout(f"0: {flood}")
    out.stdout("1: hello")
    assert NODE_TEXT_MAX - 2000 < seen["n1"] < NODE_TEXT_MAX + 200 and seen["n2"] == 6
    assert notes == [("n1", "[gpuprov: more than 1024 KiB of lines from n1; the rest is not "
                            "shown]")]


def test_a_step_speaks_for_its_own_node_only():
    """Step i is node i: its lines, its srun's words and its exit status never land on another
    node, and only the login-node script's unlabelled line gives a step's exit status."""
    lost, shown = [], []
    out = JobOutput("t", ["n1", "n2"], 1 << 20, lambda n, j: None,
                    lambda n, t: shown.append((n, t)), lambda t: lost.append(t))
    out.stdout("1: @@gpuprov-t srun 0 0")      # forged by node n2: only its own progress
    out.stdout("@@gpuprov-t srun 1 3")          # the script's own line
    out.stdout("7: hello")                      # no such step: not a node's line
    out.stderr("1: srun: error: Node failure on n1")  # n2's step cannot fail n1
    out.stderr("0: srun: error: step_launch_notify_io_failure: aborting, io error with "
               "slurmstepd on node 0")
    assert out.step_rc == {"n2": 3}
    assert out.failed_nodes == {"n1"} and out.node_messages["n2"] == [
        "srun: error: Node failure on n1"]
    assert lost == ["7: hello"]


def test_the_labeller_writes_each_piece_of_a_long_line_with_its_label():
    text = "x" * (2 * LINE_PIECE + 5)
    res = subprocess.run(["sh", "-c", f"lab() {{ {LABELLER}; }}; printf '%s\\nshort' "
                          f"'{text}' | lab 12"], capture_output=True, text=True, check=True)
    lines = res.stdout.splitlines()
    assert lines == [f"12: {'x' * LINE_PIECE}"] * 2 + ["12: xxxxx", "12: short"]


def test_the_job_script_quotes_every_value_and_keeps_gpuprovs_own_options(tmp_path):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  hpc1:\n    slurm:\n      partition: gpu\n"
                         "      account: ops\n      time: 30\n      gpus_per_node: h100:8\n"
                         "      extra_args: ['--constraint=a b']\n")
    settings = load_inventory(inventory, SCHEDULERS).hosts["hpc1"].scheduler.settings
    line = job_command(settings, ["g1", "g2"], "echo $HOME; rm -rf /", "gpuprov-RUN", "t0k",
                       "resv")
    assert "--nodelist=g1,g2" in line and "--gpus-per-node=h100:8" in line
    assert "--time=30" in line and "--reservation=resv" in line and "--account=ops" in line
    assert "'--constraint=a b'" in line


STUB = """#!/bin/sh
echo "$(basename "$0") $*" >> {log}
[ "$(basename "$0")" = srun ] && stat -L -c '%a' /dev/stdin >> {log}
[ "$(basename "$0")" = salloc ] && ls "$TMPDIR" | grep -c gpuprov-package > {log}.left
while [ "$1" != /bin/sh ]; do shift; done
exec "$@"
"""


def stubbed_slurm(tmp_path: Path, slurm: str):
    """(bin folder of salloc and srun stubs, their calls' log, the settings of `slurm:`)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name in ("salloc", "srun"):
        (bin_dir / name).write_text(STUB.format(log=log))
        (bin_dir / name).chmod(0o755)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"hosts:\n  hpc1:\n    slurm: {slurm}\n")
    return bin_dir, log, load_inventory(inventory, SCHEDULERS).hosts["hpc1"].scheduler.settings


def test_the_job_script_runs_one_step_per_node_each_labelled_with_the_package(tmp_path):
    """The login-node script for real, with salloc and srun stubs that log their arguments
    and run the command they were given: every value arrives as one argument, each node's
    step reads the whole package from a 0600 file that was removed before the job started."""
    bin_dir, log, settings = stubbed_slurm(tmp_path, "{partition: gpu, gpus_per_node: 2}")
    script = "printf '%s\\n' \"it's $SLURM_CONF\"; cat"
    res = subprocess.run(["sh", "-c", job_command(settings, ["g1", "g 2"], script, "job", "t0k")],
                         input=b"PKG\n", capture_output=True, check=True, env={
                             "PATH": f"{bin_dir}:/usr/bin:/bin", "TMPDIR": str(tmp_path),
                             "SLURM_CONF": "/x y"})
    lines = sorted(res.stdout.decode().splitlines())
    assert lines == ["0: PKG", "0: it's /x y", "1: PKG", "1: it's /x y",
                     "@@gpuprov-t0k srun 0 0", "@@gpuprov-t0k srun 1 0"], res
    calls = log.read_text().splitlines()
    assert calls[0].startswith("salloc --job-name=job --partition=gpu --nodes=2 "
                               "--ntasks-per-node=1 --nodelist=g1,g 2 --exclusive --no-kill")
    steps = sorted(c for c in calls if c.startswith("srun"))
    assert [s.split(" /bin/sh")[0] for s in steps] == [
        f"srun --nodes=1 --ntasks=1 --input=all --export=ALL --gpus-per-node=2 --nodelist={n}"
        for n in ("g 2", "g1")]
    assert calls.count("600") == 2
    assert (tmp_path / "calls.log.left").read_text() == "0\n"  # gone before salloc
    assert not list(tmp_path.glob("gpuprov-package-*"))


def test_the_job_script_runs_at_most_fanout_steps_at_once(tmp_path):
    """`fanout: 2` over five nodes: every node's step runs and says its exit status, never
    more than two at once (each step logs when it starts and ends), so the login node holds
    two srun clients, not five."""
    bin_dir, log, settings = stubbed_slurm(tmp_path, "{partition: gpu, fanout: 2}")
    steps = tmp_path / "steps.log"
    script = f"echo start >> {steps}; sleep 0.3; echo end >> {steps}"
    nodes = [f"g{i}" for i in range(5)]
    res = subprocess.run(["sh", "-c", job_command(settings, nodes, script, "job", "t0k")],
                         input=b"PKG\n", capture_output=True, check=True, timeout=60, env={
                             "PATH": f"{bin_dir}:/usr/bin:/bin", "TMPDIR": str(tmp_path)})
    assert sorted(res.stdout.decode().splitlines()) == [
        f"@@gpuprov-t0k srun {i} 0" for i in range(5)], res
    depth, deepest = 0, 0
    for line in steps.read_text().split():
        depth += 1 if line == "start" else -1
        deepest = max(deepest, depth)
    assert steps.read_text().split().count("start") == 5 and deepest == 2
    assert not list(tmp_path.glob("gpuprov-window-*"))  # the window's pipe is unlinked at once


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
    ("{partition: p, extra_args: 'hostname'}", "'hostname' is not a salloc option"),
    ("{partition: p, conf: etc/slurm.conf}", "slurm.conf must be an absolute path"),
    ("{partition: p, queue: x}", "slurm: unknown key 'queue'"),
    ("{partition: p, fanout: 0}", "slurm.fanout must be a whole number from 1 to 4096"),
    ("[p]", "slurm must be a mapping"),
])
def test_a_bad_slurm_key_is_one_line_naming_the_file_and_line(tmp_path, slurm, message):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"hosts:\n  ok: {{}}\n  hpc1:\n    connection: local\n"
                         f"    slurm: {slurm}\n")
    with pytest.raises(InputError) as caught:
        load_inventory(inventory, SCHEDULERS)
    text = str(caught.value)
    assert message in text and text.startswith(f"{inventory}:5: "), text
    assert "\n" not in text


def test_logs_of_a_cluster_says_where_its_nodes_logs_are(tmp_path):
    """`gpuprov logs --host hpc1`: the login node has nothing to pull (each validate run brings
    the nodes' results home), so it is not contacted (nothing listens at its address), and
    says where they are."""
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  hpc1:\n    address: 127.0.0.9\n    port: 9\n"
                         "    slurm: {partition: gpu}\n")
    result = invoke("logs", "--host", "hpc1", "--inventory", str(inventory), cwd=tmp_path)
    assert result.rc == 0, result.out + result.err
    assert result.out.strip() == (
        "hpc1: a Slurm cluster: each `gpuprov validate --host hpc1` brings its nodes' results "
        "home (logs/<node>/<run>/); nothing to pull from the login node")


# Issue 30/31 (an admin's drain is never undone): a drain is gpuprov's own only when its
# reason has the shape gpuprov writes, not when it merely starts with the word.
OWN_REASONS = [
    ("gpuprov 20261125T092000.000Z-ab12: system: nvidia-smi not found", True),
    ("gpuprov health: sick [action: reboot the node]: Xid 79", True),
    ("gpuprov found fan 3 bad, do not resume", False),
    ("gpuprov: maintenance", False),
    ("gpuprov 2026: old", False),
    ("admin: gpuprov 20261125T092000.000Z-ab12: system", False),
]


@pytest.mark.parametrize("reason, ours", OWN_REASONS)
def test_only_a_reason_of_gpuprovs_own_shape_makes_the_drain_its_own(reason, ours):
    listing = {"nodes": [{"name": "n1", "state": "IDLE", "state_flags": ["DRAIN"],
                          "reason": reason, "partitions": ["debug"]}]}
    node = parse_nodes(json.dumps(listing))["n1"]
    assert node.drained and node.drained_by_gpuprov is ours
    plan = plan_nodes({"n1": node}, "debug", None, resume_passed=True)
    assert [n.name for n in plan.resume] == (["n1"] if ours else [])


# Slurm's own "Not responding" (a DOWN node that missed its pings) is no one's note: drained
# over, or the node would come back to service by itself (gate._SLURMS_OWN_GLOB).
DRAINED_OVER = OWN_REASONS + [("", True), ("Not responding", True),
                              ("Not responding, admin checking cables", False)]


@pytest.mark.parametrize("reason, ours", DRAINED_OVER)
def test_the_drain_command_overwrites_only_gpuprovs_own_reasons(tmp_path, reason, ours):
    """The drain command's shell rule agrees with the Python one (and takes Slurm's own "Not
    responding" as no one's): run by a real sh, with `scontrol` a function that shows the held
    reason as 22.05 does and records an update."""
    record = tmp_path / "updated"
    stub = (f"scontrol() {{ if [ \"$1\" = show ]; then printf '   Reason=%s [root@2026-11-27T00:00:00]\\n' "
            f"'{reason}'; else echo \"$@\" > {record}; fi; }}\n")
    if not reason:
        stub = f"scontrol() {{ if [ \"$1\" = show ]; then :; else echo \"$@\" > {record}; fi; }}\n"
    done = subprocess.run(["sh", "-c", stub + gate.drain_command("n1", "gpuprov 20261127T000000.000Z-0000: x")],
                          capture_output=True, text=True)
    assert (done.returncode == 0) is ours, done.stdout + done.stderr
    assert record.exists() is ours
    if not ours:
        assert done.stdout.startswith("left alone, drained by someone else meanwhile: ")


def test_a_node_listing_nested_too_deeply_is_refused_not_a_traceback():
    """The login node's answer is untrusted: 100,000 "[" from its `scontrol show nodes --json`
    ended the route in a RecursionError (issue 41, attack 7's hole on the Slurm side); it is a
    listing that cannot be read, the route's one-line failure."""
    from remote.scheduler.slurm.nodes import NodeListError

    with pytest.raises(NodeListError, match=r"^not JSON \(nested too deeply\)$"):
        parse_nodes("[" * 100_000)
