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
from remote.scheduler.slurm.job import NODE_TEXT_MAX, JobOutput, launch_step
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
    out.stdout("@@gpuprov-t step \u00b2")
    n1 = out.by_node["n1"]
    assert n1.job_id == "" and n1.rc == 0 and n1.in_results and n1.validate_s is None
    assert "n2" not in out.by_node and out.step_rc is None
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


def test_a_task_speaks_for_its_own_node_only():
    """Task i is node i: its lines and its words never land on another node, and only the
    login-node script's unlabelled lines give the step's exit status; srun's own lines about
    a node (its failure, its lost slurmstepd by index, its task's exit) are that node's."""
    lost, shown = [], []
    out = JobOutput("t", ["n1", "n2", "n3"], 1 << 20, lambda n, j: None,
                    lambda n, t: shown.append((n, t)), lambda t: lost.append(t))
    out.stdout("1: @@gpuprov-t step 0")        # forged by node n2: only its own progress
    out.stdout("@@gpuprov-t step 3")            # the script's own line
    out.stdout("7: hello")                      # no such task: not a node's line
    out.stderr("1: srun: error: Node failure on n1")  # n2's task cannot fail n1
    out.stderr("srun: error: step_launch_notify_io_failure: aborting, io error with "
               "slurmstepd on node 2")
    out.stderr("srun: error: n2: task 1: Exited with exit code 3")
    assert out.step_rc == 3
    assert out.failed_nodes == {"n3"}
    assert out.node_messages["n2"] == ["srun: error: Node failure on n1",
                                       "srun: error: n2: task 1: Exited with exit code 3"]
    assert lost[0] == "7: hello"


def test_the_nodes_line_sets_which_task_is_which_node():
    """The login-node script says the allocation's nodes in Slurm's order before the step:
    task 0 is then n10; a list that is not the run's nodes is ignored, as is one after the
    first task spoke."""
    started = []
    out = JobOutput("t", ["n2", "n10"], 1 << 20, lambda n, j: started.append(n),
                    lambda n, t: None, lambda t: None)
    out.stdout("@@gpuprov-t nodes n10 n3")
    assert out.nodes == ["n2", "n10"]
    out.stdout("@@gpuprov-t nodes n10 n2")
    out.stdout(" 0: @@gpuprov-t start n10 5")
    out.stdout(" 1: @@gpuprov-t start n10 5")   # task 1 claiming n10 too: not heard
    out.stdout("@@gpuprov-t nodes n2 n10")
    assert out.nodes == ["n10", "n2"] and started == ["n10"]


def test_the_job_script_quotes_every_value_and_keeps_gpuprovs_own_options(tmp_path):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  hpc1:\n    slurm:\n      partition: gpu\n"
                         "      account: ops\n      time: 30\n      gpus_per_node: h100:8\n"
                         "      extra_args: ['--constraint=a b']\n")
    settings = load_inventory(inventory, SCHEDULERS).hosts["hpc1"].scheduler.settings
    line = launch_step(settings, ["g1", "g2"], "echo $HOME; rm -rf /", "gpuprov-RUN", "t0k",
                       "resv")
    assert "--nodelist=g1,g2" in line and "--gpus-per-node=h100:8" in line
    assert "--time=30" in line and "--reservation=resv" in line and "--account=ops" in line
    assert "'--constraint=a b'" in line


# Stand-ins for Slurm's clients, to run the login-node script without a cluster: salloc
# logs its arguments and runs its command with SLURM_JOB_NODELIST set from --nodelist; srun
# logs its arguments and its stdin's mode, then runs the task once per node (--nodes=N), each
# with the whole of its stdin, labelled "i: " as srun --label does; scontrol expands a
# comma-separated list.
SALLOC = """#!/bin/sh
echo "salloc $*" | tr "\\n" "~" >> {log}; echo >> {log}
ls "$TMPDIR" | grep -c gpuprov-package > {log}.left
for a do case "$a" in --nodelist=*) SLURM_JOB_NODELIST=${{a#--nodelist=}};; esac; done
export SLURM_JOB_NODELIST
while [ "$1" != /bin/sh ]; do shift; done
exec "$@"
"""
SRUN = """#!/bin/sh
echo "srun $*" | tr "\\n" "~" >> {log}; echo >> {log}
stat -L -c '%a' /dev/stdin >> {log}
for a do case "$a" in --nodes=*) n=${{a#--nodes=}};; esac; done
while [ "$1" != /bin/sh ]; do shift; done
f=$(mktemp); cat > "$f"
i=0; while [ $i -lt $n ]; do "$@" < "$f" | sed "s/^/$i: /"; i=$((i + 1)); done
rm -f "$f"
"""
SCONTROL = """#!/bin/sh
[ "$1 $2" = "show hostnames" ] && echo "$3" | tr ',' '\\n'
"""


def stubbed_slurm(tmp_path: Path, slurm: str):
    """(bin folder of salloc, srun and scontrol stubs, their calls' log, the settings of
    `slurm:`)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name, text in (("salloc", SALLOC), ("srun", SRUN), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(text.format(log=log))
        (bin_dir / name).chmod(0o755)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"hosts:\n  hpc1:\n    slurm: {slurm}\n")
    return bin_dir, log, load_inventory(inventory, SCHEDULERS).hosts["hpc1"].scheduler.settings


def test_the_job_script_runs_every_node_as_a_task_of_one_step_with_the_package(tmp_path):
    """The login-node script for real, with salloc, srun and scontrol stubs: one srun for all
    the nodes, with the options that keep a node's failure its own, every value one argument;
    each task gets the whole package in its arguments (base64, from a 0600 file removed before
    the job started), its stdin closed; the nodes' order and the step's exit status come as
    unlabelled lines."""
    bin_dir, log, settings = stubbed_slurm(tmp_path, "{partition: gpu, gpus_per_node: 2}")
    script = "printf '%s\\n' \"it's $SLURM_CONF\"; printf %s \"$@\" | base64 -d; cat"
    nodes = [f"g{i}" for i in range(5)]
    res = subprocess.run(["sh", "-c", launch_step(settings, nodes, script, "job", "t0k")],
                         input=b"PKG\n", capture_output=True, check=True, env={
                             "PATH": f"{bin_dir}:/usr/bin:/bin", "TMPDIR": str(tmp_path),
                             "SLURM_CONF": "/x y"})
    lines = res.stdout.decode().splitlines()
    assert lines[0] == "@@gpuprov-t0k nodes g0 g1 g2 g3 g4 " and lines[-1] == "@@gpuprov-t0k step 0"
    assert sorted(lines[1:-1]) == sorted([f"{i}: PKG" for i in range(5)] +
                                         [f"{i}: it's /x y" for i in range(5)]), res
    calls = log.read_text().splitlines()
    assert calls[0].startswith("salloc --job-name=job --partition=gpu --nodes=5 "
                               "--ntasks-per-node=1 --nodelist=g0,g1,g2,g3,g4 --exclusive --no-kill")
    steps = [c for c in calls if c.startswith("srun")]
    assert [s.split(" /bin/sh")[0] for s in steps] == [
        "srun --nodes=5 --ntasks-per-node=1 --kill-on-bad-exit=0 --no-kill --label --input=none "
        "--export=ALL --gpus-per-node=2"]
    assert calls.count("666") == 1  # srun's stdin: /dev/null, not the package
    assert "gpuprov-task UEtHCg==~" in steps[0]  # base64 of "PKG\n", one argument
    assert (tmp_path / "calls.log.left").read_text() == "0\n"  # gone before salloc
    assert not list(tmp_path.glob("gpuprov-package-*"))


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


def test_the_package_fits_what_srun_holds_for_a_dead_node():
    """srun runs without its abort on a lost slurmstepd (job.NO_ABORT), so a dead node's share
    of the package waits in srun's stdin buffers: a package over job.STDIN_HELD_MAX (1 MiB)
    would stall every other node's stdin too. The validate package must stay under it."""
    from remote.engine.jobs.validate import package_bytes
    from remote.scheduler.slurm.job import STDIN_HELD_MAX

    assert len(package_bytes()) < STDIN_HELD_MAX // 2  # room to grow, a warning before the edge


def test_srun_runs_without_its_whole_step_abort_and_the_task_without_the_variable(tmp_path):
    """The step's srun gets SLURM_PTY_PORT (srun 22.05 aborts every task when one node's
    slurmstepd is lost unless it is set); the task script drops it again."""
    from remote.scheduler.slurm.job import step_lines, task_script

    bin_dir, log, settings = stubbed_slurm(tmp_path, "{partition: gpu}")
    lines = step_lines(settings, 3, "echo", "t0k")
    assert "SLURM_PTY_PORT=0 srun --nodes=3" in lines
    assert task_script("t0k", "python3", [], 1).splitlines()[1] == "unset SLURM_PTY_PORT"
