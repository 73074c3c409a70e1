"""A scheduler is a route chosen by a table, not a field of the command line: a scheduler
defined here, which the command line has never heard of, is registered at test time (one row
in `remote.scheduler.SCHEDULERS`) and `gpuprov validate --drain-failed` runs through it, as
tests/test_command_types.py does for kinds.

Its "cluster" is real shells on this machine: each node a folder holding its state (`idle`, or
`drain REASON`) and its kernel log; the login node is `connection: local`; each node is
validated by the real package (`python3 -m validate --checks xid` of its own kernel log), its
results brought home by the route's own `NodeRecord.store`.
"""
from __future__ import annotations

import base64
import io
import json
import shlex
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pytest
import yaml

from remote.commands import validate as validate_cmd
from remote.engine.jobs.validate import suite_args
from remote.ground.errors import Where
from remote.ground.exitcodes import EXIT_VALIDATION_FAILED
from remote.scheduler import SCHEDULERS, NodeRecord, Plan, RunContext
from tests.conftest import REPO

XID_79 = "NVRM: Xid (PCI:0000:44:00): 79, pid=1, GPU has fallen off the bus.\n"


@dataclass(frozen=True)
class FarmNode:
    name: str
    state: str
    reason: str = ""


class FarmCluster:
    """The `base.Cluster` of a folder of node folders, every action a command on the login
    node's connection (a real shell)."""

    def __init__(self, folder: str, context: RunContext):
        self.folder, self.context = folder, context
        self.conn = context.session.conn

    def _node(self, name: str) -> str:
        return shlex.quote(f"{self.folder}/{name}")

    def list_nodes(self) -> list[FarmNode]:
        out = self.conn.run(f"cd {shlex.quote(self.folder)} && for n in *; do "
                            "echo \"$n $(cat \"$n/state\")\"; done", timeout=30).out
        nodes = []
        for line in out.splitlines():
            name, state, *reason = line.split()
            nodes.append(FarmNode(name, state, " ".join(reason)))
        return nodes

    def plan(self, nodes: Sequence[Any], resume_passed: bool) -> Plan:
        plan = Plan([], [], [], [])
        for node in nodes:
            if node.state == "idle":
                plan.validate.append(node)
            elif node.reason.startswith("gpuprov ") and resume_passed:
                plan.validate.append(node)
                plan.resume.append(node)
            else:
                plan.skipped.append((node, f"drained by someone else ({node.reason})"))
        return plan

    def resume(self, nodes: list[Any], hold: list[Any]) -> None:
        for node in nodes:
            self.conn.run(f"echo idle > {self._node(node.name)}/state", timeout=30)

    def validate(self, records: dict[str, NodeRecord]) -> None:
        session = self.context.session
        args = " ".join(shlex.quote(a) for a in suite_args(self.context.validate.suite,
                                                             session.context))
        for name, record in records.items():
            script = ('D=$(mktemp -d) && tar -xzf - -C "$D" && cd "$D" && python3 -m validate '
                      f'--out "$D/out" {args} --kernel-log {self._node(name)}/kernel.log '
                      '>/dev/null 2>&1; rc=$?; (cd "$D/out" && tar -czf - .) | base64; '
                      'rm -rf "$D"; exit $rc')
            res = self.conn.run(script, stdin=self.context.validate.package, timeout=300)
            with tempfile.TemporaryFile() as archive:
                archive.write(base64.b64decode(res.out))
                archive.seek(0)
                record.store(archive, res.rc, self.context.node_folder(name))

    def drain(self, records: dict[str, NodeRecord]) -> None:
        for name, record in records.items():
            reason = f"gpuprov {self.context.run_id}: {record.verdict}"
            self.conn.run(f"echo drain {shlex.quote(reason)} > {self._node(name)}/state",
                          timeout=30)
            record.drained = reason

    def release(self) -> None:
        pass


class ShellFarm:
    """The table's row: `shellfarm: {folder: PATH}` on a host makes it a login node."""

    key = "shellfarm"
    noun = "ShellFarm"
    record = "shellfarm.json"

    def read_settings(self, spec: Any, where: Where, host: str) -> str:
        if not isinstance(spec, dict) or not isinstance(spec.get("folder"), str):
            raise where.error(f"host '{host}': shellfarm needs 'folder'")
        return str(spec["folder"])

    def open(self, settings: Any, context: RunContext) -> FarmCluster:
        return FarmCluster(settings, context)


@pytest.fixture
def farm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setitem(SCHEDULERS, ShellFarm.key, ShellFarm())
    folder = tmp_path / "nodes"
    for name, state, kernel_log in (("a", "idle", ""), ("b", "idle", XID_79),
                                    ("c", "drain admin: fan 3 failing", "")):
        (folder / name).mkdir(parents=True)
        (folder / name / "state").write_text(state + "\n")
        (folder / name / "kernel.log").write_text(kernel_log)
    return folder


@pytest.mark.slow
def test_a_scheduler_the_command_line_never_heard_of_validates_and_drains(farm, tmp_path, capsys):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {"login": {
        "connection": "local", "shellfarm": {"folder": str(farm)},
        "vars": {"validate_args": "--checks xid"}}}}))
    json_path, logs = tmp_path / "result.json", tmp_path / "logs"
    rc = validate_cmd.run(host="login", inventory=str(inventory), json_path=str(json_path),
                      logs_dir=str(logs), drain_failed=True)
    out = capsys.readouterr()
    assert rc == EXIT_VALIDATION_FAILED, out.out + out.err
    rows = json.loads(json_path.read_text())["hosts"]
    assert rows["a"]["validation"].startswith("passed"), rows
    assert rows["b"]["validation"] == "failed: xid (drained)", rows
    assert rows["c"]["validation"].startswith("skipped: drained by someone else"), rows
    assert "2 node(s) validated through ShellFarm: 1 passed, 1 not passed, 1 skipped" in out.out
    # b drained with what failed; a left idle; the admin's drain of c untouched
    assert (farm / "b" / "state").read_text().startswith("drain gpuprov ")
    assert "failed: xid" in (farm / "b" / "state").read_text()
    assert (farm / "a" / "state").read_text() == "idle\n"
    assert (farm / "c" / "state").read_text() == "drain admin: fan 3 failing\n"
    # each node's results where the SSH route puts a host's; the run's record beside the login's
    (run_id,) = [p.name for p in (logs / "login").iterdir()]
    checks = json.loads((logs / "a" / run_id / "results.json").read_text())["checks"]
    assert [c["status"] for c in checks if c["name"] == "xid"] == ["pass"]
    record = json.loads((logs / "login" / run_id / "shellfarm.json").read_text())
    assert record["scheduler"] == "shellfarm" and sorted(record["nodes"]) == ["a", "b"]


def test_the_command_line_names_no_scheduler():
    for path in (REPO / "remote" / "commands").glob("*.py"):
        assert "slurm" not in path.read_text().lower(), path


def test_a_plugged_scheduler_owns_its_record_a_pull_refuses_it_and_the_report_skips_it(
        farm, tmp_path):
    """The row names its record (`shellfarm.json`); the run folder knows it from the row alone:
    a host's archive carrying one is refused, and the report reads the folder holding one as
    the cluster's record, no host's run without results (issue 42)."""
    from remote.ground.errors import PullError
    from remote.report.collect import NO_RESULTS, collect
    from remote.transport.connection import publish_pull

    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for name, data in (("shellfarm.json", b"{}"), ("results.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive.seek(0)
    dest = tmp_path / "logs" / "h1" / "20261122T055742.123Z-14af"
    with pytest.raises(PullError, match="shellfarm.json, which only the control side writes"):
        publish_pull(archive, dest)
    assert not dest.exists()

    logs = tmp_path / "records"
    (logs / "login" / "20261122T055742.123Z-14af").mkdir(parents=True)
    (logs / "login" / "20261122T055742.123Z-14af" / "shellfarm.json").write_text("{}")
    (logs / "odd" / "20261122T055742.123Z-14af").mkdir(parents=True)
    _, problems = collect(logs)
    assert [(Path(p.path).parent.name, p.message) for p in problems] == [("odd", NO_RESULTS)]
