"""The recap's validation column is judged from a results.json the host wrote: untrusted input.
Each case is a file a broken or hostile host could send back (issue: a compromised host cannot
forge the evidence)."""
import json

import pytest

from remote.engine.jobs.logs import MAX_RESULTS_BYTES, summarize

PASS = {"name": "system", "status": "pass", "required": True}


def _write(tmp_path, content) -> object:
    path = tmp_path / "results.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.mark.parametrize("content, expected", [
    ({"checks": [], "ok": True}, "not validated: results.json lists no checks"),
    ({"checks": [1], "ok": True}, "not validated: results.json has no list of named checks"),
    ({"checks": {"system": "pass"}, "ok": True}, "not validated: results.json has no list of named checks"),
    ({"checks": [{"status": "pass"}], "ok": True}, "not validated: results.json has no list of named checks"),
    ("[" * 100_000, "not validated: no readable results.json (validate exit 0)"),
    ("{not json", "not validated: no readable results.json (validate exit 0)"),
    ({"checks": [PASS], "ok": "yes"}, "failed (validate exit 0)"),
    ({"checks": [PASS], "ok": True}, "passed (1 checks)"),
    # a pending row remap (issue 30): passes, and the recap names the action owed
    ({"checks": [PASS], "ok": True, "deferred_action": "reset the GPU"},
     "passed (1 checks) [action: reset the GPU, deferred]"),
    ({"checks": [PASS], "ok": True, "deferred_action": None}, "passed (1 checks)"),
    ({"checks": [PASS], "ok": True, "deferred_action": ["reset"]}, "passed (1 checks)"),
    ({"checks": [PASS], "ok": True, "deferred_action": "x\nsandbox2 passed" + "y" * 200},
     "passed (1 checks) [action: x?sandbox2 passed" + "y" * 63 + ", deferred]"),
])
def test_what_the_host_wrote_decides_only_when_it_is_well_formed(tmp_path, content, expected):
    text, ok = summarize(_write(tmp_path, content), 0)
    assert (text, ok) == (expected, expected.startswith("passed"))


def test_a_check_name_cannot_add_lines_to_the_recap(tmp_path):
    forged = {"name": "gpu\nsandbox2   1  0  0  0  no  1.00s  passed (9 checks)",
              "status": "fail", "required": True}
    text, ok = summarize(_write(tmp_path, {"checks": [PASS, forged], "ok": False}), 1)
    assert not ok and "\n" not in text and text.startswith("failed: gpu?sandbox2")


def test_an_oversized_results_file_is_not_read(tmp_path):
    path = tmp_path / "results.json"
    with open(path, "wb") as handle:  # sparse: costs no disk, would cost memory if read
        handle.truncate(MAX_RESULTS_BYTES + 1)
    assert summarize(path, 0) == ("not validated: results.json is larger than 16 MiB", False)


def test_a_fifo_for_results_is_refused_without_waiting_for_a_writer(tmp_path):
    """The recap and the report read results.json through one reader (remote/ground/resultsfile.py):
    a FIFO in its place (a pulled archive cannot hold one, a hand-copied folder can) is
    refused at once, as the report already refused it, instead of blocking the recap."""
    import os
    import threading

    path = tmp_path / "results.json"
    os.mkfifo(path)
    answer: list = []
    reader = threading.Thread(target=lambda: answer.append(summarize(path, 0)), daemon=True)
    reader.start()
    reader.join(30)  # a guard against a hang, not a timing: the answer comes at once or never
    if not answer:  # unblock the reader of the old code so the test run can end
        with open(os.open(path, os.O_WRONLY | os.O_NONBLOCK), "w"):
            pass
    assert answer == [("not validated: no readable results.json (validate exit 0)", False)]
