"""The stack manifest each provision leaves in logs/<host>/<run>/stack.json, against real sshd
hosts: what the host's python reports, and what happens when the host answers with something
that is not a manifest (the answer is untrusted)."""
from __future__ import annotations

import json
import platform

import pytest

from tests.test_provision_ssh import recipe

ONE_STEP = [{"name": "marker", "shell": "true", "changed_when": False}]


def _run_dir(work, host):
    runs = sorted((work / "logs" / host).iterdir())
    return runs[-1]


def test_provision_records_the_stack_of_the_recipes_python(farm, work, inventory, provision):
    """The farm's login shell sees the distribution's python3; the manifest reads its
    environment, and the host remembers it for a later validate."""
    rec = recipe(work, ONE_STEP)
    result = provision("h1", rec, inventory(), var=["validate_python=/usr/bin/python3"])
    assert result.rc == 0, result.out
    manifest = json.loads((_run_dir(work, "h1") / "stack.json").read_text())
    assert manifest["schema"] == 1 and manifest["environment"] == "/usr"
    assert manifest["kernel"] == platform.release()
    assert all(len(p["record_sha256"]) == 64 for p in manifest["packages"])
    log = (_run_dir(work, "h1") / "provision.log").read_text()
    assert "stack manifest: " in log


@pytest.mark.parametrize("answer, why", [
    ('{"schema": 1, "kernel": "6.1\\u001b[2J"}', "kernel is not a short line of text"),
    ('{"schema": 7}', "not a stack manifest of schema 1"),
    ('[1, 2]', "not a stack manifest of schema 1"),
    ('{"schema": 1, "packages": [{"name": "a;rm -rf /", "version": "1", "record_sha256": "'
     + "0" * 64 + '"}]}', "is not a valid name"),
    ("x" * (3 << 20), "answer over the output limit"),  # the transport keeps 1 MiB at most
], ids=["control-characters", "other-schema", "not-an-object", "hostile-name", "huge"])
def test_a_host_that_answers_with_no_manifest_gets_none_written(farm, work, inventory, provision,
                                                                answer, why):
    """A 'python' on the host that prints what a compromised host could: nothing is written,
    the run log says why, the host still succeeds."""
    fake = work / "fake-python"
    (work / "answer.json").write_text(answer)
    fake.write_text(f"#!/bin/sh\ncat > /dev/null\ncat {work}/answer.json\n")
    fake.chmod(0o755)
    result = provision("h1", recipe(work, ONE_STEP), inventory(), var=[f"validate_python={fake}"])
    assert result.rc == 0, result.out
    run = _run_dir(work, "h1")
    assert not (run / "stack.json").exists()
    log = (run / "provision.log").read_text()
    assert "stack manifest not recorded: " in log and why in log, log[-2000:]


def test_the_manifest_rides_with_the_facts_unless_the_run_changed_something(
        farm, work, inventory, provision):
    """Converged: the manifest read with the facts is the stack after the run (no extra round
    trip). A step that changed something: read again at the end."""
    inv = inventory()
    python = ["validate_python=/usr/bin/python3"]
    reads_facts = [dict(ONE_STEP[0], when="facts.cpus > 0")]  # facts: a round trip to ride
    assert provision("h2", recipe(work, reads_facts), inv, var=python).rc == 0
    log = (_run_dir(work, "h2") / "provision.log").read_text()
    assert "stack manifest: $" not in log, log  # no round trip of its own
    assert (_run_dir(work, "h2") / "stack.json").exists()
    changing = recipe(work, [{"name": "change", "shell": "true"}], name="c.yaml")
    assert provision("h2", changing, inv, var=python).rc == 0
    log = (_run_dir(work, "h2") / "provision.log").read_text()
    assert "stack manifest: $ python - (stack manifest)" in log
    assert (_run_dir(work, "h2") / "stack.json").exists()


def test_a_converged_host_sends_its_kept_manifest_until_its_stack_changes(
        farm, work, inventory, provision):
    """Issue 30, point 10: the host keeps its last manifest with a key of what it was read
    from; while that holds, a re-run starts no python there (the manifest's python start and
    package scan were most of a converged re-run's cost). A wheel installed since (a new
    dist-info folder in site-packages): read again, and the new manifest lists it."""
    import subprocess

    venv = work / "venv"  # of the python the farm's login user runs
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    starts = work / "starts"
    python = work / "stack-python"  # the venv's python, counting its starts
    python.write_text(f"#!/bin/sh\necho start >> {starts}\nexec {venv}/bin/python \"$@\"\n")
    python.chmod(0o755)
    rec, inv, var = recipe(work, ONE_STEP), inventory(), [f"validate_python={python}"]

    def run() -> dict:
        assert provision("h1", rec, inv, var=var).rc == 0
        return json.loads((_run_dir(work, "h1") / "stack.json").read_text())

    first, second, third = run(), run(), run()
    assert first == second == third
    assert starts.read_text().count("start") == 2  # the key is kept from the second on
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "newwheel-1.0.dist-info").mkdir()
    (site / "newwheel-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: newwheel\nVersion: 1.0\n")
    (site / "newwheel-1.0.dist-info" / "RECORD").write_text("newwheel/__init__.py,sha256=x,0\n")
    fourth = run()
    assert starts.read_text().count("start") == 3
    assert [p["name"] for p in fourth["packages"]] == ["newwheel"]
    assert fourth["environment"] == str(venv)


def test_validate_with_a_cluster_in_the_selection_records_each_hosts_stack(farm, work, inventory, capsys):
    """`validate --host h1,login1` where login1 is a cluster's login node (here unreachable: a
    closed port on loopback): h1 goes the SSH route as it does alone, and its run folder keeps
    the stack it was validated on, as when it is selected alone (before: a selection holding a
    cluster sent h1 down the bare SSH route, and its run had no stack.json)."""
    import os

    from remote.commands import validate as validate_cmd

    kernel_log = work / "kern.log"
    kernel_log.write_text("[    1.000000] Linux version 6.1.0\n")
    os.chmod(kernel_log, 0o644)
    hosts = {"h1": farm.host_entry(farm.addresses[0], vars={
                 "validate_args": f"--checks xid --kernel-log {kernel_log}",
                 "validate_python": "/usr/bin/python3"}),
             "login1": {"address": "127.0.0.1", "port": 9, "user": farm.user, "slurm": {"partition": "debug"}}}
    inv = inventory(hosts)
    for selection, rc in (("h1", 0), ("h1,login1", 4)):  # 4: the unreachable login node
        got = validate_cmd.run(host=selection, inventory=str(inv), logs_dir=str(work / "logs"),
                           json_path=str(work / "result.json"))
        out = capsys.readouterr().out
        assert got == rc, out
        run = _run_dir(work, "h1")
        assert json.loads((run / "results.json").read_text())["ok"] is True
        assert (run / "stack.json").is_file(), f"{selection}: no stack.json in {run}"
        manifest = json.loads((run / "stack.json").read_text())
        assert manifest["schema"] == 1 and manifest["environment"] == "/usr", selection
        assert "stack manifest: " in (run / "provision.log").read_text()
