"""What a fabric run writes, from a verdict (no host contacted): each node's fabric.json, the
matrix as text and as an HTML page that shows a node's error text without obeying it, and the
exit status and one-line errors of bad settings (no host contacted either)."""
from __future__ import annotations

import json

import yaml

from remote.fabric.output import matrix_html, matrix_text, write_node_records
from remote.fabric.verdict import PairResult, judge


def verdict():
    pairs = [PairResult("a", "b", "iperf3", 9.4), PairResult("b", "c", "iperf3", 0.2),
             PairResult("c", "a", "iperf3", None,
                        error="iperf3: <script>alert(1)</script>\x1b[2J")]
    return judge(pairs, ["a", "b", "c"])


def test_matrix_text_names_the_suspect_and_shows_errors_inert():
    text = matrix_text(verdict(), ["a", "b", "c"])
    assert "SUSPECT NODE c: slow or failed with every partner (a, b)" in text
    assert "  0.2*" in text and "FAIL" in text
    assert "\x1b" not in text  # a node's escape sequence is not passed to the terminal


def test_html_heat_map_escapes_what_a_node_said():
    page = matrix_html(verdict(), ["a", "b", "c"], "RUN")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "suspect node c" in page
    assert 'style="background: rgb(0, 255, 80)" title="iperf3: 9.4 Gb/s' in page  # fast: green
    assert 'style="background: rgb(255, 10, 80)" title="iperf3: 0.2 Gb/s' in page  # slow: red


def test_fabric_json_per_node(tmp_path):
    write_node_records(verdict(), ["a", "b", "c"], tmp_path, "RUN")
    record = json.loads((tmp_path / "c" / "RUN" / "fabric.json").read_text())
    assert record["verdict"] == "suspect" and len(record["pairs"]) == 2
    assert json.loads((tmp_path / "a" / "RUN" / "fabric.json").read_text())["verdict"] == "ok"


def write_inventory(tmp_path, vars_):
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"vars": vars_, "hosts": {
        "a": {"address": "127.0.0.2"}, "b": {"address": "127.0.0.3"}}}))
    return path


def test_bad_settings_are_one_line_and_exit_2(tmp_path, capsys):
    from remote.commands import fabric as fabric_cmd

    for vars_, message in (({"fabric_seconds": -1}, "fabric_seconds must be a number"),
                           ({"fabric_tool": "ping"}, "fabric_tool must be one of"),
                           ({"fabric_floor": {"iperf3": "fast"}}, "fabric_floor: 'iperf3'"),
                           ({"fabric_relative": 2}, "fabric_relative must be between"),
                           ({"fabric_ports": "80-90"}, "fabric_ports must be FIRST-LAST"),
                           ({"fabric_ports": "50010-50000"}, "fabric_ports must be FIRST-LAST"),
                           # not ASCII digits (int() refuses '²'), or half a range
                           ({"fabric_ports": "50000-5000²"}, "fabric_ports must be FIRST-LAST"),
                           ({"fabric_ports": "50000-"}, "fabric_ports must be FIRST-LAST")):
        inv = write_inventory(tmp_path, vars_)
        assert fabric_cmd.run(host="all", inventory=str(inv), logs_dir=str(tmp_path / "l")) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {inv}") and message in err and err.count("\n") == 1
    assert not (tmp_path / "l").exists()  # nothing half-written


def test_one_node_or_drain_without_a_cluster_is_refused(tmp_path, capsys):
    from remote.commands import fabric as fabric_cmd

    inv = write_inventory(tmp_path, {})
    assert fabric_cmd.run(host="a", inventory=str(inv)) == 2
    assert "at least 2 nodes" in capsys.readouterr().err
    assert fabric_cmd.run(host="all", inventory=str(inv), drain_failed=True) == 2
    assert "--drain-failed drains a cluster's nodes" in capsys.readouterr().err


def test_settings_given_with_var_are_read_as_numbers(tmp_path, capsys):
    from remote.commands import fabric as fabric_cmd

    inv = write_inventory(tmp_path, {})
    assert fabric_cmd.run(host="all", inventory=str(inv), var=["fabric_seconds=soon"]) == 2
    err = capsys.readouterr().err
    assert "fabric_seconds must be a number of seconds, 0 to 600, not 'soon'" in err
    # the value came from -e, not from the inventory: the error says so, as other -e errors do
    assert err.startswith("error: --var fabric_seconds: ") and str(inv) not in err, err
    from remote.commands.fabric_settings import read_settings
    from remote.config.inventory import load_inventory

    settings = read_settings(load_inventory(str(inv)), {"fabric_seconds": "2",
                                                        "fabric_relative": "0.25",
                                                        "fabric_floor": '{"iperf3": 20}',
                                                        "fabric_ports": "50000-50999"})
    assert (settings.seconds, settings.relative, settings.floors) == (2.0, 0.25, {"iperf3": 20.0})
    assert settings.ports == (50000, 50999)
