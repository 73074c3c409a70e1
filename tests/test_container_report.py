"""The report's containers table: the stack inside beside the host's own, from results.json's
`host.container` as validate/incontainer.py writes it (what a host sends: untrusted)."""
from __future__ import annotations

import json

from remote.report import run_report
from tests.test_report_common import printed, recording_terminal, results_json, write_run

DIGEST = "sha256:" + "1f" * 32


def _results(torch: str | None, container: dict | None) -> str:
    doc = json.loads(results_json(None))
    doc["host"].update(python="3.11.2", torch=torch, cuda=None)
    if container is not None:
        doc["host"]["container"] = container
    return json.dumps(doc)


def _table(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index("Containers (latest validation in one per host): the stack inside beside "
                        "the host's own")
    end = lines.index("", start)
    return lines[start + 3:end]


def test_each_hosts_latest_container_run_beside_its_own_stack(tmp_path):
    logs = tmp_path / "logs"
    ssh = {"image": "localhost/pytorch:old", "digest": DIGEST, "id": None, "runtime": "podman",
           "gpus": "none", "host_stack": {"python": "3.11.2", "torch": None, "cuda": None}}
    write_run(logs, "gpu1", "20261129T070000.000Z-aaaa", results=_results("2.13.0+cpu", ssh))
    write_run(logs, "gpu1", "20261129T080000.000Z-bbbb",
              results=_results("2.14.1", dict(ssh, image="localhost/pytorch:new")))
    write_run(logs, "gpu1", "20261129T090000.000Z-cccc", results=_results("2.14.1", None))
    # on Slurm the task runs inside: the host's own stack is not known, nothing is marked
    write_run(logs, "n1", "20261129T080000.000Z-dddd",
              results=_results("2.13.0+cpu", {"image": "/srv/bundles/pt", "digest": None,
                                              "runtime": "slurm-oci", "host_stack": None}))
    write_run(logs, "plain", "20261129T080000.000Z-eeee", results=_results("2.14.1", None))
    terminal = recording_terminal(width=200)
    assert run_report(logs, tmp_path / "out", terminal=terminal) == 0
    rows = [line.split() for line in _table(printed(terminal))]
    assert rows == [
        ["gpu1", "localhost/pytorch:new", "podman", "sha256:1f1f1f1f1f1f...",
         "3.11.2", "|", "3.11.2", "2.14.1", "!=", "-", "-", "|", "-"],
        ["n1", "/srv/bundles/pt", "slurm-oci", "-", "3.11.2", "|", "-", "2.13.0+cpu", "|", "-",
         "-", "|", "-"],
    ]


def test_a_hosts_hostile_container_fields_are_cut_and_never_reach_the_terminal(tmp_path):
    logs = tmp_path / "logs"
    hostile = {"image": "\x1b[2J" + "x" * 500, "digest": ["not", "text"], "runtime": "\x07podman",
               "host_stack": {"python": "\x1b]0;owned\x07", "torch": 3}}
    write_run(logs, "gpu1", "20261129T070000.000Z-aaaa", results=_results("2.14.1", hostile))
    terminal = recording_terminal(width=300)
    assert run_report(logs, tmp_path / "out", terminal=terminal) == 0
    text = printed(terminal)
    assert "\x1b" not in text and "\x07" not in text
    [row] = _table(text)
    assert "x" * 500 not in row and "..." in row
    assert (tmp_path / "out" / "report.txt").read_text().count("\x1b") == 0
