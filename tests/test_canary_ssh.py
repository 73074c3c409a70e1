"""Canary rollouts against real OpenSSH servers on loopback (issue 34, item 4): a recipe that
fails on the second host, `--serial 1`: the third and fourth hosts are never touched, and the
recap, --json, JUnit and their run logs say they were not started, and why."""
from __future__ import annotations

import json
import signal
import sys
import threading
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor

import pytest

from remote.report import build_report
from tests.conftest import write_yaml
from tests.procs import wait_for_file, wait_until

# SIGINT's disposition as this process got it: ignored when the suite runs as a background job.
INHERITED_SIGINT = signal.getsignal(signal.SIGINT)


def canary_recipe(work, **top):
    """Each host notes its start and end in one shared file, drops a file of its own, and the
    assert fails on the host named by `bad_host` (h2 unless -e says otherwise)."""
    order = work / "order"
    return write_yaml(work / "canary.yaml", {
        "name": "canary", **top, "vars": {"bad_host": "h2"},
        "steps": [
            {"name": "start", "shell": f"echo start {{{{ host }}}} >> {order}",
             "changed_when": False},
            {"name": "touch", "file": {"path": f"{work}/touched-{{{{ host }}}}", "content": "x\n"}},
            {"name": "the new driver works", "assert": {"that": ["host != bad_host"],
                                                        "msg": "broken on this host"}},
            {"name": "end", "shell": f"echo end {{{{ host }}}} >> {order}", "changed_when": False},
        ]})


def test_serial_1_stops_at_the_failing_host_and_never_touches_the_rest(farm, work, inventory,
                                                                        provision):
    rec, inv, junit = canary_recipe(work), inventory(), work / "junit.xml"
    result = provision("all", rec, inv, serial="1", junit_path=str(junit))

    assert result.rc == 1, result.out  # a step failed (remote/ground/exitcodes.py)
    # one batch after the other: h1 ended before h2 started; h3 and h4 never ran anything
    assert (work / "order").read_text().split("\n")[:-1] == ["start h1", "end h1", "start h2"]
    assert (work / "touched-h1").exists() and (work / "touched-h2").exists()
    assert not (work / "touched-h3").exists() and not (work / "touched-h4").exists()

    why = "batch 2 of 4 failed: 1 of 1 host (h2), 100%, more than the 0% max_fail_percentage"
    # the recap: a row each, and the reason under it
    recap = result.out[result.out.index("RECAP"):]
    for name in ("h3", "h4"):
        row = next(line for line in recap.splitlines() if line.startswith(name + " "))
        assert row.split()[1:] == ["-"] * 5 + ["not", "started"], row
        assert f"{name}: {why}" in recap
    assert "NOT STARTED" in recap and "rollout stopped: " + why in result.out
    assert "FAILED\nh2: step 'the new driver works' failed" in recap

    # --json: each host, and the batches with where the rollout stopped
    assert result.host("h1")["failed"] == 0 and result.host("h2")["failed"] == 1
    for name in ("h3", "h4"):
        host = result.host(name)
        assert host["not_started"] == why and host["steps"] == [] and host["ok"] == 0
    assert result.json["rollout"] == {"batches": [["h1"], ["h2"], ["h3"], ["h4"]],
                                      "stopped_after_batch": 2, "reason": why}

    # JUnit: the never-started hosts' suites hold one skipped case that says why
    suites = {s.get("name"): s for s in ET.parse(junit).getroot()}
    for name in ("h3", "h4"):
        skipped = suites[name].find("testcase/skipped")
        assert skipped is not None and skipped.get("message") == f"not started: {why}"
    assert suites["h2"].find("testcase/failure") is not None

    # the run logs: h3's says it was never contacted, and why
    log = next((work / "logs" / "h3").iterdir()) / "provision.log"
    text = log.read_text()
    assert f"not started, never contacted: {why}" in text and "connected" not in text.replace(
        "never contacted", "")

    # the report: the folders of h3 and h4 are no runs of theirs (no history, no "without
    # validation results"), only a note that the rollout stopped before them
    report = build_report(work / "logs")
    assert "2 host run(s) not started: a rollout stopped before them (h3, h4)" in report.notes
    assert "2 run(s) without validation results (provisioning only, e.g. --no-validate): " \
        "nothing to compare" in report.notes  # h1 and h2: provisioned, not validated
    assert {h.host: len(h.timeline) for h in report.history}.get("h3", 0) == 0

    # a re-run with the host fixed continues: the done host converges as ok, the rest run
    again = provision("all", rec, inv, serial="1", var=["bad_host=none"])
    assert again.rc == 0, again.out
    assert again.host("h1")["changed"] == 0 and again.host("h1")["failed"] == 0
    assert again.host("h3")["changed"] == 1 and (work / "touched-h4").exists()
    assert again.json["rollout"] == {"batches": [["h1"], ["h2"], ["h3"], ["h4"]]}


def test_recipe_serial_and_a_limit_that_is_equaled_not_exceeded(farm, work, inventory, provision):
    # serial: 2 from the recipe; 1 failed of 2 is 50%, which does not exceed 50: every batch runs
    rec = canary_recipe(work, serial=2, max_fail_percentage=50)
    result = provision("all", rec, inventory())
    assert result.rc == 1, result.out
    assert result.json["rollout"] == {"batches": [["h1", "h2"], ["h3", "h4"]]}
    assert all((work / f"touched-{h}").exists() for h in ("h1", "h2", "h3", "h4"))
    # --max-fail-percentage given on the command line wins over the recipe's 50: 49 stops
    (work / "touched-h3").unlink()
    stopped = provision("all", rec, inventory(), max_fail_percentage="49")
    assert stopped.json["rollout"]["stopped_after_batch"] == 1, stopped.out
    assert stopped.host("h3")["not_started"].startswith("batch 1 of 2 failed: 1 of 2 hosts")
    assert not (work / "touched-h3").exists()


def test_a_failed_validation_stops_the_rollout_before_the_next_batch(farm, work, inventory,
                                                                     provision):
    # The loopback hosts have no NVIDIA driver: the system check fails on h1, the first batch.
    inv = inventory(vars={"validate_args": "--checks system"})
    result = provision("all", canary_recipe(work), inv, serial="1", validate=True)
    assert result.rc == 3, result.out  # validation failed (its steps succeeded)
    assert result.host("h1")["validation"].startswith("failed"), result.host("h1")
    assert list((work / "logs" / "h1").glob("*/results.json")), "h1 was validated"
    assert (work / "order").read_text() == "start h1\nend h1\n"  # h2 never started
    for name in ("h2", "h3", "h4"):
        assert result.host(name)["not_started"].startswith("batch 1 of 4 failed: 1 of 1 host (h1)")
        assert not (work / f"touched-{name}").exists()


def test_an_unreachable_host_counts_as_failed(farm, work, inventory, provision):
    hosts = {"h1": farm.host_entry(farm.addresses[0]), "h2": {"address": "127.0.0.99", "port": 1},
             "h3": farm.host_entry(farm.addresses[2])}
    result = provision("all", canary_recipe(work, serial=1), inventory(hosts=hosts))
    assert result.rc == 4, result.out  # unreachable, and no step failed (remote/ground/exitcodes.py)
    assert result.host("h2")["unreachable"] is True
    assert result.host("h3")["not_started"].startswith("batch 2 of 3 failed: 1 of 1 host (h2)")
    assert not (work / "touched-h3").exists()


def test_an_interrupted_rollout_lists_the_batches_not_begun(farm, work, inventory):
    """SIGTERM while the first batch runs: exit 130, and the later batches' hosts are listed
    as not started (never contacted), in --json and in the recap."""
    from tests.test_faults import _start_invoke, _stop_run

    rec = write_yaml(work / "slow.yaml", {"steps": [
        {"name": "touch", "file": {"path": f"{work}/touched-{{{{ host }}}}", "content": "x\n"}},
        {"name": "long", "shell": f"echo $$ > {work}/{{{{ host }}}}.pid; exec sleep 60"}]})
    out_json = work / "out.json"
    proc = _start_invoke("provision", "--host", "all", "--inventory", str(inventory()),
                         "--recipe", str(rec), "--no-validate", "--serial", "2", "--json",
                         str(out_json), cwd=work)
    try:
        assert wait_for_file(work / "h1.pid", 30) and wait_for_file(work / "h2.pid", 30)
        out, err, _ = _stop_run(proc, signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (out, err)
    hosts = json.loads(out_json.read_text())["hosts"]
    assert hosts["h1"]["interrupted"] is True and hosts["h2"]["interrupted"] is True
    for name in ("h3", "h4"):
        assert hosts[name]["not_started"] == "the run was interrupted in batch 1 of 2"
        assert not (work / f"touched-{name}").exists()
        assert f"{name}: the run was interrupted in batch 1 of 2" in out.split("NOT STARTED")[1]


# Ctrl-C outside the batch's wait for results: as hosts are handed to the pool, and as the pool
# is closed. A real SIGINT, raised in this process's main thread by `signal.raise_signal` from a
# trace hook on the pool's own method, so it lands in that window every time (no mock: the run,
# its sshd hosts and the signal are real; only the moment is chosen by the test).
def _sigint_on_call(method, nth: int = 1, before=lambda: None) -> None:
    """SIGINT in this thread on the `nth` call of `method` (after `before()`), with SIGINT's
    disposition a terminal's foreground job has (tests/procs.py, `sigint_as_in_a_terminal`):
    a suite started as a background job inherits it ignored, and gpuprov then keeps it so
    (`_interrupted_provision` puts the inherited one back)."""
    calls = 0
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def tracer(frame, event, arg):
        nonlocal calls
        if event == "call" and frame.f_code is method.__code__:
            calls += 1
            if calls == nth:
                sys.settrace(None)
                before()
                signal.raise_signal(signal.SIGINT)  # its handler raises KeyboardInterrupt here
        return None
    sys.settrace(tracer)


def _host_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("host")]


def _interrupted_provision(provision, *args, **kwargs):
    try:
        return provision(*args, **kwargs)
    except KeyboardInterrupt:  # escaped the run: it would have killed the command
        pytest.fail("Ctrl-C escaped the run as a KeyboardInterrupt")
    finally:
        sys.settrace(None)
        signal.signal(signal.SIGINT, INHERITED_SIGINT)


def test_ctrl_c_while_hosts_are_handed_to_the_pool(farm, work, inventory, provision):
    """Ctrl-C as the second host of a batch is handed to the pool, while the first one's
    connection waits for an SSH banner: the first host began, so it is interrupted (never
    "not started"), its run folder keeps its own log and gets no NOT_STARTED note, and no
    worker thread is left running when the command returns. Before, the host was labelled
    "never contacted", its folder hidden from the report, and its worker ran on."""
    from tests.procs import SilentServer
    from tests.test_faults import SILENT_ADDRESS

    silent = SilentServer(SILENT_ADDRESS, farm.port)
    try:
        hosts = {"h1": farm.host_entry(SILENT_ADDRESS), "h2": farm.host_entry(farm.addresses[1]),
                 "h3": farm.host_entry(farm.addresses[2])}
        inv = inventory(hosts=hosts, timeouts={"banner": 60})
        _sigint_on_call(ThreadPoolExecutor.submit, 2,
                        before=lambda: wait_until(lambda: silent.accepted, 30))
        result = _interrupted_provision(provision, "all", canary_recipe(work), inv, serial="2")
    finally:
        silent.close()
    assert result.rc == 130, result.out
    assert _host_threads() == [], "a worker went on running a host after the command returned"
    assert result.host("h1")["interrupted"] is True and "not_started" not in result.host("h1")
    for name in ("h2", "h3"):  # h2 never reached the pool, h3 is in the next batch
        assert result.host(name)["not_started"] == "the run was interrupted in batch 1 of 2"
        assert next((work / "logs" / name).iterdir()).joinpath("not-started.txt").is_file()
    h1 = next((work / "logs" / "h1").iterdir())
    assert not (h1 / "not-started.txt").exists()
    log = (h1 / "provision.log").read_text()
    assert "interrupted" in log and "never contacted" not in log, log
    assert "h1" not in "".join(build_report(work / "logs").notes), "h1's run hidden"


def test_ctrl_c_as_the_pool_is_closed_keeps_the_batch_it_ran(farm, work, inventory, provision):
    """Ctrl-C once both hosts of the first batch ended, as the pool is closed: they keep
    their results and run folders (no NOT_STARTED note: the report still shows their runs);
    only the next batch's host is not started. Before, the batch's two hosts were labelled
    "never contacted" and their real run folders hidden from the report."""
    _sigint_on_call(ThreadPoolExecutor.shutdown)
    result = _interrupted_provision(provision, "all", canary_recipe(work), inventory(),
                                    serial="2")
    assert result.rc == 130, result.out
    assert _host_threads() == []
    # the batch ran to its end (h2 fails its assert: no "end h2"), the next never began
    assert sorted((work / "order").read_text().split()[1::2]) == ["h1", "h1", "h2"]
    assert result.host("h1")["changed"] == 1 and result.host("h1")["failed"] == 0
    assert result.host("h2")["failed"] == 1 and "not_started" not in result.host("h2")
    for name in ("h1", "h2"):
        assert not next((work / "logs" / name).iterdir()).joinpath("not-started.txt").exists()
    for name in ("h3", "h4"):
        assert result.host(name)["not_started"] == "the run was interrupted in batch 1 of 2"
    report = build_report(work / "logs")
    assert "2 host run(s) not started: a rollout stopped before them (h3, h4)" in report.notes
