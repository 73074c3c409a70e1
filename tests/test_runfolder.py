"""The run folder `<logs>/<host>/<run id>/` has one owner, remote/ground/runfolder.py: a run writes
where the recap, `--junit` and the report read, the host's validation writes the names the
control side reads, and no other module spells the layout out by hand (issue 30)."""
from __future__ import annotations

import ast
import contextlib
import io
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from remote.commands import provision as provision_cmd
from remote.commands import report as report_cmd
from remote.ground import runfolder
from remote.scheduler.slurm import CLUSTER_RECORD
from tests.conftest import REPO, write_yaml

FILE_NAMES = (runfolder.PROVISION_LOG, runfolder.RESULTS, runfolder.BENCH_LOG,
              runfolder.STACK_MANIFEST, CLUSTER_RECORD, runfolder.VALIDATION_ATTEMPT)


@pytest.mark.slow  # the report draws its charts (matplotlib): several seconds
def test_a_run_writes_its_folder_where_the_recap_junit_and_report_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inventory = write_yaml(tmp_path / "inventory.yaml", {"hosts": {"a": {"connection": "local"}}})
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("steps:\n  - name: fail on purpose\n    shell: exit 3\n")
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown), contextlib.redirect_stderr(shown):
        rc = provision_cmd.run(host="a", inventory=str(inventory), recipe=str(recipe),
                           validate=False, junit_path=str(tmp_path / "junit.xml"))
    assert rc == 1, shown.getvalue()
    logs = tmp_path / runfolder.LOGS_DIR
    (run,) = (logs / "a").iterdir()
    folder = runfolder.run_dir(logs, "a", run.name)
    log = Path(runfolder.LOGS_DIR) / "a" / run.name / runfolder.PROVISION_LOG
    assert (folder / runfolder.PROVISION_LOG).is_file()
    assert f"log: {log}" in shown.getvalue()                       # the failed block
    assert f"logs: {Path(runfolder.LOGS_DIR) / '<host>' / run.name}/" in shown.getvalue()
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.findtext("system-out") == f"log: {log}"

    shown = io.StringIO()
    with contextlib.redirect_stdout(shown), contextlib.redirect_stderr(shown):
        rc = report_cmd.run(out=str(tmp_path / "report"))
    assert "note: 1 run(s) without validation results" in shown.getvalue(), shown.getvalue()


def _spelled_by_hand(path: Path) -> list[str]:
    """`path:line: 'name'` for each string in the code that is one of the run folder's file
    names, or a path ending in one (docstrings and comments may name them)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and any(
                node.value == name or node.value.endswith("/" + name) for name in FILE_NAMES):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    return found


def test_no_other_module_spells_the_run_folder_out():
    sources = [*sorted((REPO / "remote").rglob("*.py")), REPO / "tasks.py",
               *sorted((REPO / "bench").rglob("*.py"))]
    # the owners: the run folder's layout, and the Slurm row, which names its record
    owners = {REPO / "remote" / "ground" / "runfolder.py",
              REPO / "remote" / "scheduler" / "slurm" / "__init__.py"}
    found = [hit for path in sources if path not in owners for hit in _spelled_by_hand(path)]
    assert found == []
