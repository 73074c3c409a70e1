"""The dcgm check (validate/checks/dcgm.py) over real `dcgmi diag -j` outputs (issue 45).

DCGM cannot run on this machine (no GPU, no DCGM): `dcgmi` is a stand-in script on PATH that
prints one of the public outputs in tests/fixtures/dcgm/ (their sources: SOURCES.md) and exits
as the real one did, and records its command line. Everything else is the real
`python3 -m validate` in a subprocess: its exit status, results.json, validate.log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote.engine.jobs.logs import summarize
from validate import dcgm_judge, dcgm_parse, health
from validate.core import SPECS

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "dcgm"
RESET, NONE, RMA, REBOOT = "reset the GPU", "none", "drain and replace (RMA)", "reboot the node"

STAND_IN = """#!/bin/sh
printf '%s\\n' "$*" >> "$DCGMI_ARGV"
[ -n "$DCGMI_SLEEP" ] && sleep "$DCGMI_SLEEP"
cat "$DCGMI_OUTPUT"
exit "${DCGMI_RC:-0}"
"""


def run_validate(tmp_path, *args, output=None, rc=0, env=None):
    """`python3 -m validate --out DIR ARGS` with the stand-in dcgmi on PATH when `output` names
    a fixture: (exit status, results.json, stderr, the stand-in's command lines)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    argv_log = tmp_path / "dcgmi.argv"
    if output is not None:
        script = bindir / "dcgmi"
        script.write_text(STAND_IN)
        script.chmod(0o755)
    out = tmp_path / "out"
    run_env = {k: v for k, v in os.environ.items() if k != "GPUPROV_DCGM_LEVEL"}
    run_env.update({"PATH": "%s:/bin" % bindir, "PYTHONPATH": str(ROOT), "DCGMI_ARGV": str(argv_log),
                    "DCGMI_OUTPUT": str(FIXTURES / output) if output else "", "DCGMI_RC": str(rc)})
    run_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "validate", "--out", str(out)] + list(args),
                          cwd=str(tmp_path), env=run_env, capture_output=True, text=True, timeout=120)
    doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    argv = argv_log.read_text().splitlines() if argv_log.exists() else []
    return proc.returncode, doc, proc.stderr, argv


def dcgm(doc):
    return next(c for c in doc["checks"] if c["name"] == "dcgm")


# (fixture, dcgmi's exit status, validate's exit status, each GPU's action: the worst action of
# its failing findings, None when it has none)
TABLE = [
    # DCGM 4.2.3 on a GB10, level 1: software fails for persistence mode (DCGM_FR_PERSISTENCE_MODE,
    # severity CONFIG): fails, and names no action on the GPU; dcgmi exited 226 for it
    ("v4_gb10_r1_software_fail.json", 226, 1, {"0": NONE}),
    # DCGM 4.x, eight GPUs pass the diagnostic test
    ("v4_issue215_r3_diagnostic_pass.json", 0, 0, dict((str(i), None) for i in range(8))),
    # DCGM 3.3.1, level 3 on a T400: every test skipped: checked nothing, so not validated
    ("v3_issue139_r3_skip.json", 0, 1, {"0": None}),
    # nvvs 3.1.0's own JSON: a banner line first, "PASS", nulls in lists, gpu_ids "0,1,..." and numbers
    ("v3_1_nvvs_real_output.txt", 0, 0, dict((str(i), None) for i in range(8))),
    # DCGM 3.x level 1: Deployment tests without a GPU (all GPUs)
    ("v3_gcm_r1_pass.json", 0, 0, {"all": None}),
    # Persistence Mode fails (no code: the software plugin's code for it, CONFIG), Environment
    # Variables warns: not validated, no action on the GPU
    ("v3_gcm_r1_fail_warn.json", 0, 1, {"all": NONE}),
    # a warning alone: validated, with the warning
    ("v3_gcm_r1_warn.json", 0, 0, {"all": None}),
    # DCGM 4.x writer: GPUs 0 and 1 detached (DCGM_FR_INTERNAL, TRIAGE): DCGM could not test them
    ("v4_writer_detached_gpus.json", 226, 1, {"0": RESET, "1": RESET, "2": None}),
    # DCGM 4.x writer: the diagnostic could not run at all (runtime_error)
    ("v4_writer_runtime_error.json", 226, 1, {}),
]


@pytest.mark.parametrize("fixture, dcgmi_rc, rc, actions", TABLE)
def test_dcgm_table_real_outputs(tmp_path, fixture, dcgmi_rc, rc, actions):
    """Each public output through the whole run: the exit status, and each GPU's action."""
    got_rc, doc, err, argv = run_validate(tmp_path, "--checks", "dcgm", output=fixture, rc=dcgmi_rc)
    assert got_rc == rc, err
    assert argv == ["diag -r 1 -j"]  # level 1 unless asked
    c = dcgm(doc)
    assert {g: row["action"] for g, row in c["figures"]["gpus"].items()} == actions
    assert c["status"] == ("pass" if rc == 0 else "skip" if "skip" in fixture else "fail")
    # every result is a finding naming its GPU; the raw output is kept beside results.json
    assert all(f["what"].startswith(("GPU ", "all GPUs: ")) for f in c["findings"])
    assert (tmp_path / "out" / "dcgm_diag.json").read_bytes() == (FIXTURES / fixture).read_bytes()


def test_dcgm_fail_names_gpu_code_and_action(tmp_path):
    """A failing GPU's line names the GPU, the test, DCGM's words and code, and the action."""
    rc, doc, err, _ = run_validate(tmp_path, "--checks", "dcgm", output="v4_writer_detached_gpus.json", rc=226)
    assert rc == 1
    reason = dcgm(doc)["reason"]
    assert "GPU 0: memory: fail: GPU 0 is detached. [DCGM_FR_INTERNAL] [action: reset the GPU]" in reason
    assert doc["action"] == RESET
    log = (tmp_path / "out" / "validate.log").read_text()
    assert "GPU 2: memory: pass [action: none]" in log


def test_dcgm_runtime_error_is_a_failure_with_dcgm_words(tmp_path):
    rc, doc, err, _ = run_validate(tmp_path, "--checks", "dcgm", output="v4_writer_runtime_error.json", rc=226)
    assert rc == 1
    assert "DCGM could not run the diagnostic: Error: Unable to complete diagnostic for group 2147483647. " \
           "Return: (-30) : DCGM GPU Diagnostic returned an error" in dcgm(doc)["reason"]


def test_dcgm_all_skipped_checks_nothing(tmp_path):
    """Every test skipped (DCGM 3.3.1 on a T400): the check did not check, so a named dcgm is
    not validated, and says why."""
    rc, doc, err, _ = run_validate(tmp_path, "--checks", "dcgm", output="v3_issue139_r3_skip.json")
    assert rc == 1
    assert dcgm(doc)["reason"] == "DCGM ran no test here: every test was skipped (5)"


@pytest.mark.parametrize("env, want", [
    ({"GPUPROV_DCGM_LEVEL": "3"}, "diag -r 3 -j"),
    ({"GPUPROV_DCGM_LEVEL": "2"}, "diag -r 2 -j"),
])
def test_dcgm_level_from_the_variable(tmp_path, env, want):
    rc, doc, err, argv = run_validate(tmp_path, "--checks", "dcgm", output="v3_gcm_r1_pass.json", env=env)
    assert (rc, argv) == (0, [want]), err
    assert dcgm(doc)["figures"]["limit_s"] == {"2": 1800, "3": 7200}[want[8]]


def test_dcgm_level_from_the_profile_and_a_wrong_one(tmp_path):
    prof = json.dumps({"dcgm": {"level": 4}})
    rc, doc, err, argv = run_validate(tmp_path, "--checks", "dcgm", "--profile", prof, output="v3_gcm_r1_pass.json")
    assert (rc, argv) == (0, ["diag -r 4 -j"]), err
    rc, doc, err, argv = run_validate(tmp_path, "--checks", "dcgm", output="v3_gcm_r1_pass.json",
                                      env={"GPUPROV_DCGM_LEVEL": "5"})
    assert rc == 1 and argv == ["diag -r 4 -j"]  # not run again
    assert dcgm(doc)["reason"] == "GPUPROV_DCGM_LEVEL: '5' is not a DCGM run level (1, 2, 3 or 4)"


def test_dcgm_output_that_is_not_dcgm_json(tmp_path):
    """dcgmi that prints something else (an old dcgmi's text, an error): a failure quoting it."""
    (tmp_path / "text.txt").write_text("Error: unable to establish a connection to the specified host: localhost\n")
    rc, doc, err, _ = run_validate(tmp_path, "--checks", "dcgm", output=str(tmp_path / "text.txt"), rc=255)
    assert rc == 1
    assert dcgm(doc)["reason"] == ("dcgmi diag -r 1 exited 255 without a DCGM result (no JSON object in the "
                                   "output): Error: unable to establish a connection to the specified host: "
                                   "localhost")


def test_dcgm_missing_is_na_and_nothing_counted(tmp_path):
    """`--checks dcgm` without DCGM: not applicable, with how to install it; nothing counted:
    exit 3, and the recap, the log and results.json say so."""
    rc, doc, err, argv = run_validate(tmp_path, "--checks", "dcgm")
    assert rc == 3 and argv == []
    c = dcgm(doc)
    assert (c["status"], c["required"]) == ("skip", False)
    assert c["waived"].startswith("not applicable: DCGM is not installed (no dcgmi in PATH")
    assert "datacenter-gpu-manager-4-cuda" in c["waived"] and "stack-recipes.md" in c["waived"]
    assert "[validate] NOT VALIDATED: nothing counted; not counted: dcgm n/a (" in err
    assert doc["ok"] is False
    log = (tmp_path / "out" / "validate.log").read_text()
    assert log.splitlines()[0].endswith("NOT VALIDATED: nothing counted (exit 3); waived: dcgm")
    text, ok = summarize(tmp_path / "out" / "results.json", rc)
    assert (text, ok) == ("not validated: nothing counted (dcgm n/a)", False)


def test_health_stays_fast_without_dcgm():
    """`--health` runs system, xid and fabric only; the dcgm check is not a quick one."""
    assert "dcgm" not in health.HEALTH_CHECKS and SPECS["dcgm"].quick is False and SPECS["dcgm"].torch is False


# ---------------------------------------------------------------------------
# the parser on shapes DCGM's writer produces, and on what it must refuse


def test_parse_pre_3_3_string_warning_with_error_id():
    """DCGM 2.x-3.2 (Diag.cpp at a4e74cc): `gpu_ids`, a string warning, `error_id` beside it."""
    doc = dcgm_parse.parse(json.dumps({"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "GPU Memory", "results": [
            {"gpu_ids": "0", "status": "Fail", "warnings": "Error using CUDA API cudaMemcpy", "error_id": 52},
            {"gpu_ids": "1", "status": "Pass"}]}]}], "version": "2.4.7"}}))
    v = dcgm_judge.judge(doc)
    assert {g: r["action"] for g, r in v["gpus"].items()} == {"0": RMA, "1": None}


def test_parse_3_3_deployment_error_with_gpu_and_iterations():
    """3.3.x Deployment errors carry `gpu_id` (a number) and their text under "warnings";
    `--iterations` wraps documents in "iterations"; a code that names reboot wins."""
    one = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
        {"name": "Page Retirement/Row Remap", "results": [{"status": "Fail", "gpu_id": 3, "warnings": [
            {"warnings": "GPU 3 has fallen off the bus", "error_id": 120, "error_category": 15,
             "error_severity": 2}]}]}]}]}}
    doc = dcgm_parse.parse(json.dumps({"iterations": [one, one], "Overall Result": "Fail"}))
    v = dcgm_judge.judge(doc)
    assert v["gpus"] == {"3": {"action": REBOOT, "fail": 2, "warn": 0, "skip": 0, "pass": 0}}
    assert v["findings"][1]["what"].startswith("GPU 3: Page Retirement/Row Remap (iteration 2): fail: GPU 3 has")


@pytest.mark.parametrize("word, fails", [("Pass", False), ("PASS", False), ("Skip", False), ("SKIPPED", False),
                                         ("Warn", False), ("Fail", True), ("FAILED", True),
                                         ("Inconclusive", True), ("", True)])
def test_status_words_unknown_is_never_a_pass(word, fails):
    doc = dcgm_parse.parse(json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [
        {"name": "t", "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0,
                                   "status": word}]}]}]}}))
    assert dcgm_judge.judge(doc)["findings"][0]["fails"] is fails


def test_not_run_results_are_left_out_and_a_failing_summary_of_no_gpu_counts():
    doc = dcgm_parse.parse(json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [
        {"name": "pcie", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Not Run"}],
         "test_summary": {"status": "Fail",
                          "warnings": [{"warning": "x", "error_id": 125, "error_severity": 6}]}}]}]}}))
    assert [(r["gpu"], r["status"]) for r in doc["results"]] == [("all", "fail")]
    assert dcgm_judge.judge(doc)["gpus"]["all"]["action"] == RESET


@pytest.mark.parametrize("text, why", [
    ("", "no JSON object in the output"),
    ('{"DCGM Diagnostic": {"test_categories": [', "no JSON object in the output"),
    ('{"something": 1}', 'no "DCGM Diagnostic" or "DCGM GPU Diagnostic" object'),
    ('{"DCGM Diagnostic": {}}', "no test_categories and no runtime_error"),
    ('{"a": ' + "[" * 100 + "]" * 100 + "}", "nested more than 64 deep"),
    ('{"DCGM Diagnostic": {"version": ' + "9" * 60 + "}}", "an integer of 60 digits, more than 40"),
])
def test_parse_refuses_what_dcgm_does_not_write(text, why):
    with pytest.raises(dcgm_parse.BadOutput) as exc:
        dcgm_parse.parse(text)
    assert str(exc.value) == why


def test_text_from_the_host_is_one_printable_cut_line():
    doc = dcgm_parse.parse(json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [
        {"name": "m\x1b[31m", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Fail",
                                          "warnings": [{"warning": "a\nb" + "c" * 1000, "error_id": 4}]}]}]}]}}))
    what = dcgm_judge.judge(doc)["findings"][0]["what"]
    assert "\x1b" not in what and "\n" not in what and len(what) < 500


def test_a_gpu_dcgm_lists_but_did_not_test_fails():
    """4.x lists GPUs 0-2 among its entities, results come for 0 and 1 only: GPU 2 was not
    reached; it fails, named, with the fallback action."""
    doc = json.loads((FIXTURES / "v4_writer_detached_gpus.json").read_text())
    results = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"]
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"] = [r for r in results if r["entity_id"] != 2]
    v = dcgm_judge.judge(dcgm_parse.parse(json.dumps(doc)))
    assert v["gpus"]["2"]["action"] == RESET
    assert [f["what"] for f in v["findings"] if f["gpu"] == "2"] == [
        "GPU 2: no result from DCGM for a GPU it lists: fail"]
