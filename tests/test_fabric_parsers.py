"""The tools' parsers on real outputs: ib_write_bw and all_reduce_perf captured from public
reports (each fixture's first line names its source), iperf3 3.12 from Debian run on this
machine's loopback (tests/fixtures/fabric/iperf3_*.json); and what a hostile node could print
instead."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from remote.fabric.tools import (
    OUTPUT_MAX,
    TOOLS,
    PairSpec,
    Probe,
    ToolOutputError,
    parse_all_reduce,
    parse_probe,
    pick_tool,
)

FIXTURES = Path(__file__).parent / "fixtures" / "fabric"
SPEC = PairSpec("127.0.0.1", "127.0.0.1", 52011, 1.0)


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_ib_write_bw_average_column_in_gbits():
    value, detail = TOOLS["ib_write_bw"].parse(text("ib_write_bw_gbits.txt"), SPEC)
    assert value == 0.48
    assert detail == {"per_hca_gbps": {"default": 0.48}}


def test_ib_write_bw_in_megabytes_is_refused_not_misread():
    with pytest.raises(ToolOutputError, match="0 result line"):
        TOOLS["ib_write_bw"].parse(text("ib_write_bw_mbytes.txt"), SPEC)


def test_ib_write_bw_one_figure_per_hca_the_slowest_counts():
    two = text("ib_write_bw_gbits.txt") + text("ib_write_bw_gbits.txt").replace(" 0.48 ", " 0.97 ")
    spec = PairSpec("a", "b", 50000, 1.0, hcas=["mlx5_0", "mlx5_1"])
    value, detail = TOOLS["ib_write_bw"].parse(two, spec)
    assert value == 0.48 and detail["per_hca_gbps"] == {"mlx5_0": 0.48, "mlx5_1": 0.97}


def test_all_reduce_perf_avg_bus_bandwidth():
    assert parse_all_reduce(text("all_reduce_perf_nvl72.txt")) == 745.53
    value, _ = TOOLS["all_reduce_perf"].parse(text("all_reduce_perf_nvl72.txt"), SPEC)
    assert value == 745.53


def test_all_reduce_perf_wrong_values_are_not_a_figure():
    bad = text("all_reduce_perf_nvl72.txt").replace("Out of bounds values : 0 OK",
                                                    "Out of bounds values : 12 FAILED")
    with pytest.raises(ToolOutputError, match="12 wrong values"):
        parse_all_reduce(bad)


def test_iperf3_each_end_gives_its_own_figure():
    """One real test (iperf 3.12, loopback): the client's own figure is its `sum_sent` (what
    it wrote), the server's its `sum_received` (what it read); the client's `sum_received`
    is only what the server told it, and is not taken."""
    client, server = json.loads(text("iperf3_client.json")), json.loads(text("iperf3_server.json"))
    value, detail = TOOLS["iperf3"].parse(text("iperf3_client.json"), SPEC)
    assert value == pytest.approx(client["end"]["sum_sent"]["bits_per_second"] / 1e9)
    assert "retransmits" in detail
    received, more = TOOLS["iperf3"].check_server(text("iperf3_server.json"),
                                                  text("iperf3_client.json"), SPEC)
    assert received == pytest.approx(server["end"]["sum_received"]["bits_per_second"] / 1e9)
    assert more == {}
    assert TOOLS["iperf3"].interference(text("iperf3_server.json"), text("iperf3_client.json"),
                                        SPEC) is None  # served 127.0.0.1, the same cookie


def test_iperf3_a_server_that_served_a_stranger_is_interference():
    """Real outputs (iperf 3.12): a stranger from 127.0.0.9 reached the server first; the
    partner 127.0.0.2 was told "the server is busy running a test" (IEACCESSDENIED)."""
    partner = PairSpec("127.0.0.2", "127.0.0.3", 52113, 1.0)
    why = TOOLS["iperf3"].interference(text("iperf3_server_stranger.json"),
                                       text("iperf3_client_busy.json"), partner)
    assert why == "its server was reached from '127.0.0.9', not from the partner 127.0.0.2"
    # the busy answer alone (the stranger's test still running when the server was read)
    why = TOOLS["iperf3"].interference("", text("iperf3_client_busy.json"), partner)
    assert why == "the partner was told the server was busy with another test"
    # the partner's address, another test's cookie (another program on the partner's node)
    why = TOOLS["iperf3"].interference(text("iperf3_server_auth_refused.json"),
                                       text("iperf3_client.json"), partner)
    assert why == "its server served another test than the partner's (another cookie)"


def test_iperf3_strangers_refused_by_authentication_then_the_partner_served():
    """Real outputs (iperf 3.12 with this run's key and user): the server refused two
    connections ("test authorization failed": one without credentials, one with a wrong
    password), went on waiting, then served the partner; each printed its own JSON."""
    partner = PairSpec("127.0.0.2", "127.0.0.3", 52013, 1.0)
    server_out, client_out = text("iperf3_server_auth_refused.json"), text("iperf3_client_auth.json")
    assert TOOLS["iperf3"].interference(server_out, client_out, partner) is None
    received, more = TOOLS["iperf3"].check_server(server_out, client_out, partner)
    assert received == pytest.approx(21.321293994452484) and more == {"refused": 2}
    with pytest.raises(ToolOutputError, match="test authorization failed .*clocks"):
        TOOLS["iperf3"].parse(text("iperf3_client_auth_refused.json"), partner)


def test_iperf3_commands_carry_no_secret():
    """With authentication the commands name the files of the node's private folder and the
    user; the password is never on a command line (it is IPERF3_PASSWORD, from stdin)."""
    spec = PairSpec("10.0.0.1", "10.0.0.2", 50000, 1.0, auth_user="gpuprov-abc")
    assert TOOLS["iperf3"].server(spec).endswith(
        '--rsa-private-key-path "$GPUPROV_AUTH/key.pem" --authorized-users-path '
        '"$GPUPROV_AUTH/users.csv"')
    assert TOOLS["iperf3"].client(spec).endswith(
        '--username gpuprov-abc --rsa-public-key-path "$GPUPROV_AUTH/pub.pem"')
    assert "--username" not in TOOLS["iperf3"].client(SPEC)
    assert parse_probe("have iperf3\nauth iperf3\nauth rm\n").auth == {"iperf3"}


def test_ib_write_bw_server_side_prints_the_clients_report():
    """perftest's server side of a write test prints the client's report as the client sent
    it (src/write_bw.c: `print_full_bw_report(..., &rem_bw_rep, ...)`), in the client's own
    format: here the captured client output stands for it (no RDMA device here). A client
    that rewrites what it prints then disagrees with it."""
    received, _ = TOOLS["ib_write_bw"].check_server(text("ib_write_bw_gbits.txt"), "", SPEC)
    assert received == 0.48
    assert TOOLS["ib_write_bw"].check_server("Couldn't connect", "", SPEC) == (None, {})


@pytest.mark.parametrize("hostile", [
    '{"end": {"sum_sent": {"bits_per_second": 1e300}}}',
    '{"end": {"sum_sent": {"bits_per_second": NaN}}}',
    '{"end": {"sum_sent": {"bits_per_second": -5}}}',
    '{"end": {"sum_sent": {"bits_per_second": "fast"}}}',
    '{"error": "unable to connect to server: Connection refused"}',
    "[" * 100000,
    "{" + " " * (OUTPUT_MAX + 1) + "}",
    "not json at all",
])
def test_iperf3_untrusted_output_is_refused(hostile):
    with pytest.raises(ToolOutputError):
        TOOLS["iperf3"].parse(hostile, SPEC)


def test_figures_out_of_range_are_refused():
    lie = text("all_reduce_perf_nvl72.txt").replace("745.53", "99999999")
    with pytest.raises(ToolOutputError, match="out of range"):
        parse_all_reduce(lie)
    lie = text("ib_write_bw_gbits.txt").replace(" 0.48 ", " inf ")
    with pytest.raises(ToolOutputError):
        TOOLS["ib_write_bw"].parse(lie, SPEC)


def test_probe_keeps_only_known_words_and_checked_names():
    probe = parse_probe("have iperf3\nhave rm\nhca mlx5_0\nhca ../../etc\nhca mlx5_0\n"
                        "gpus 8\ngpus 99999\nnoise line here\n")
    assert probe.tools == {"iperf3"} and probe.hcas == ["mlx5_0"] and probe.gpus == 8


def test_best_tool_both_nodes_have():
    ib = Probe({"ib_write_bw", "iperf3"}, ["mlx5_0"], 0)
    gpu = Probe({"all_reduce_perf", "iperf3"}, [], 8)
    plain = Probe({"iperf3"})
    assert pick_tool(ib, ib).name == "ib_write_bw"
    assert pick_tool(gpu, gpu).name == "all_reduce_perf"
    assert pick_tool(ib, gpu).name == "iperf3"
    assert pick_tool(ib, ib, "iperf3").name == "iperf3"
    assert pick_tool(Probe(), plain) is None


def test_usable_slurm_nodes_from_scontrol_one_liners():
    """`scontrol show nodes -o` of the test cluster (tests/slurm_cluster.py, Slurm 22.05.8 of
    Debian 12), n2 drained by an admin: only n1 and n3 can run the pairs."""
    from remote.scheduler.slurm.nodes import usable_nodes

    text = (FIXTURES / "scontrol_show_nodes_o.txt").read_text()
    assert usable_nodes(text, "debug") == [("n1", "127.0.0.1"), ("n3", "127.0.0.1")]
    assert usable_nodes(text, "other") == []
    hostile = (text.replace("NodeName=n1 ", "NodeName=n1;reboot ")
               .replace("NodeAddr=127.0.0.1 NodeHostName=localhost Port=29110",
                        "NodeAddr=$(id) NodeHostName=localhost Port=29110")
               + "NodeName=n4 NodeAddr=10.0.0.4 State=IDLE* Partitions=debug\n"
               + "NodeName=n5 NodeAddr=10.0.0.5 State=MIXED Partitions=debug Reason=a Partitions=x\n")
    assert usable_nodes(hostile, "debug") == [("n5", "10.0.0.5")]


def test_slurm_nodes_that_only_missed_a_ping_are_late_not_usable():
    """`scontrol show nodes -o` of the test cluster with n1's and n3's slurmd killed a moment
    before (SlurmdTimeout 60: IDLE+NOT_RESPONDING, not yet DOWN), n2 drained by an admin:
    n1 and n3 are worth asking about again (`late`), n2 is not; a DOWN node never is."""
    from remote.scheduler.slurm.nodes import late_nodes, usable_nodes

    text = (FIXTURES / "scontrol_show_nodes_o_late.txt").read_text()
    assert usable_nodes(text, "debug") == []
    assert late_nodes(text, "debug") == ["n1", "n3"]
    down = text.replace("State=IDLE+NOT_RESPONDING", "State=DOWN+NOT_RESPONDING", 1)
    assert late_nodes(down, "debug") == ["n3"]
    sinfo_style = "NodeName=n7 NodeAddr=10.0.0.7 State=IDLE* Partitions=debug\n"
    assert late_nodes(sinfo_style, "debug") == ["n7"]
    assert late_nodes(sinfo_style.replace("IDLE*", "IDLE+DRAIN*"), "debug") == []


def test_a_taken_port_is_told_from_each_servers_own_message():
    """What each server prints when its port is taken. iperf3's is captured (abridged) from
    iperf 3.12 beside a real listener (tests/test_fabric_ssh.py runs it for real); perftest's server
    cannot run here (it opens an RDMA device before its socket, and this machine has none), so
    its line is the format string of linux-rdma/perftest src/perftest_communication.c
    (ethernet_server_connect: "Couldn't listen to port %d"), printed as it prints it."""
    iperf3_out = ('{"start": {"connected": []}, "intervals": [], "end": {}, "error": "error - '
                  'unable to start listener for connections: Address already in use"}\n')
    assert TOOLS["iperf3"].port_in_use(iperf3_out)
    assert not TOOLS["iperf3"].port_in_use(text("iperf3_server.json"))
    perftest_out = ("\n************************************\n* Waiting for client to connect... *\n"
                    "************************************\nCouldn't listen to port 52011\n"
                    " Unable to init the socket connection\n")
    assert TOOLS["ib_write_bw"].port_in_use(perftest_out)
    assert not TOOLS["ib_write_bw"].port_in_use(text("ib_write_bw_gbits.txt"))
    assert not TOOLS["all_reduce_perf"].port_in_use("Couldn't listen to port 1")


def test_the_slurm_rows_listing_keeps_to_the_nodes_hostlist():
    """The Slurm row reads `nodes_script`'s answer: with `nodes: n[1-2]` expanded by Slurm,
    only n1 and n2 count, for the nodes paired and for those worth waiting for (n3 only missed
    a ping, but is not asked for); no names at all is Slurm's own reason, at the key's line."""
    from remote.ground.errors import InputError, Where
    from remote.scheduler.slurm.row import Slurm
    from remote.scheduler.slurm.settings import SlurmSettings

    settings = SlurmSettings("debug", Where("inventory.yaml", 4), {"nodes": Where("inventory.yaml", 6)},
                             nodes="n[1-2]", host="hpc1")
    late = (FIXTURES / "scontrol_show_nodes_o_late.txt").read_text()
    assert Slurm().late_nodes(settings, f"@@hostnames\nn1\nn2\n@@nodes\n{late}") == ["n1"]
    usable = (FIXTURES / "scontrol_show_nodes_o.txt").read_text()
    assert Slurm().usable_nodes(settings, f"@@hostnames\nn1\nn2\n@@nodes\n{usable}") == [
        ("n1", "127.0.0.1")]
    with pytest.raises(InputError, match=r"inventory.yaml:6: host 'hpc1': slurm.nodes 'n\[1-2\]' "
                                         r"is not a hostlist Slurm reads \(Invalid hostlist: x\)"):
        Slurm().usable_nodes(settings, f"@@hostnames\n@@said Invalid hostlist: x\n@@nodes\n{usable}")
