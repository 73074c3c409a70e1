"""The files a command writes besides the terminal are a table (remote/commands/exports.py,
`EXPORTS`; issue 42): an export defined here, which no other file names, is one row
registered at test time; the commands that offer it write it from their run's results, its
path is checked as `--json`'s and `--junit`'s are, and a command that does not offer it does
not take it. The hosts are real sshd servers on loopback (tests/sshd.py)."""
from __future__ import annotations

import json
import shutil

import pytest

from remote.commands import call
from remote.commands.exports import EXPORTS, CommandExport, Finished
from tests.conftest import write_yaml


def _hosts_txt(done: Finished, path: str) -> None:
    lines = [f"{done.command} {done.title} {name} {'unreachable' if r.unreachable else 'reached'}"
             for name, r in done.results.items()]
    with open(path, "w", encoding="utf-8") as out:
        out.write(done.redact("\n".join(lines)) + "\n")


ROW = CommandExport("--hosts-txt", "hosts_txt", "each host, and whether it was reached",
                    _hosts_txt, ("facts", "provision"))


@pytest.fixture
def plugged(monkeypatch):
    monkeypatch.setitem(EXPORTS, "hosts_txt", ROW)


def test_an_export_no_other_file_names_is_written_by_each_command_offering_it(
        plugged, inventory, work, capsys):
    inv = inventory()
    out = work / "hosts.txt"
    assert call("facts", host="h1,h2", inventory=str(inv), hosts_txt=str(out)) == 0
    assert out.read_text() == "facts facts h1 reached\nfacts facts h2 reached\n"

    recipe = write_yaml(work / "r.yaml", {"name": "noop", "steps": [{"name": "nothing",
                                                                     "shell": "true"}]})
    rc = call("provision", host="h1", recipe=str(recipe), inventory=str(inv), validate=False,
              logs_dir=str(work / "logs"), json_path=str(work / "out.json"), hosts_txt=str(out))
    assert rc == 0, capsys.readouterr()
    assert out.read_text() == "provision noop h1 reached\n"
    # beside the table's own exports, which are written as before
    steps = json.loads((work / "out.json").read_text())["hosts"]["h1"]["steps"]
    assert [s["status"] for s in steps] == ["changed"]


@pytest.mark.parametrize("given, said", [("-", "'-'"), ("", "''"), ("{work}", "'{work}'")])
def test_a_plugged_export_path_is_refused_in_one_line_before_any_host(
        plugged, inventory, work, capsys, given, said):
    inv = inventory()
    (work / "out.json").unlink(missing_ok=True)
    rc = call("facts", host="all", inventory=str(inv), json_path=str(work / "out.json"),
              hosts_txt=given.format(work=work))
    err = capsys.readouterr().err
    assert rc == 2
    assert err == f"error: --hosts-txt needs a file name, not {said.format(work=work)}\n"
    assert not (work / "out.json").exists()  # nothing half-written: no host was contacted


def test_a_command_that_does_not_offer_an_export_does_not_take_it(plugged, work):
    with pytest.raises(TypeError, match="hosts_txt"):
        call("validate", host="h1", inventory=str(work / "inventory.yaml"),
             hosts_txt=str(work / "hosts.txt"))


def _suspects(done: Finished, path: str) -> None:
    judged = done.detail  # fabric's judged run: its nodes and verdict
    with open(path, "w", encoding="utf-8") as out:
        out.write(f"{','.join(judged.names)}: {','.join(judged.verdict.suspect_nodes) or 'none'}\n")


def test_a_plugged_fabric_export_reads_the_judged_run(monkeypatch, inventory, farm, work, capsys):
    """Real iperf3 between two of the farm's nodes (as tests/test_fabric_ssh.py)."""
    if not shutil.which("iperf3"):
        pytest.fail("iperf3 is not installed (.ci/setup --dev installs it)")
    monkeypatch.setitem(EXPORTS, "suspects", CommandExport(
        "--suspects", "suspects", "the nodes and the suspects", _suspects, ("fabric",)))
    inv = inventory({"h1": farm.host_entry(farm.addresses[0]),
                     "h2": farm.host_entry(farm.addresses[1])}, vars={"fabric_seconds": 1})
    out = work / "suspects.txt"
    rc = call("fabric", host="all", inventory=str(inv), logs_dir=str(work / "logs"),
              html=str(work / "m.html"), suspects=str(out))
    assert rc == 0, capsys.readouterr()
    assert out.read_text() == "h1,h2: none\n"
    assert (work / "m.html").read_text().startswith("<!DOCTYPE html>")
