"""Hostile JSON given to `python3 -m validate --judge FILE` and `--profile FILE|JSON`, and in a
host's results.json read by the control side (issue 41, attack 7): 100,000 nested ``[`` gave a
RecursionError traceback and a 401-digit integer an OverflowError one, exit 1 ("a figure
fails"). Bad input is one line naming the file, exit 2 (validate/jsonread.py)."""

import json
import os
import subprocess
import sys

import pytest

from remote.ground.resultsfile import UnusableFile, read_results
from remote.report import run_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100 = '{"gpus": [{"name": "NVIDIA H100 80GB HBM3", "bf16_tflops": %s}]}'
GOOD = H100 % "700.0"
DIGITS_401 = "9" * 401


def _validate(*args):
    p = subprocess.run([sys.executable, "-m", "validate", *args], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


# (file text, what the one line says after the file's name)
HOSTILE = {
    "100,000 nested [": ("[" * 100_000, "nested more than 64 deep"),
    "100,000 nested [ inside the figures": (
        '{"gpus": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested more than 64 deep"),
    "100,000 nested {": ('{"a":' * 100_000 + "1" + "}" * 100_000, "nested more than 64 deep"),
    "a 401-digit integer": (H100 % DIGITS_401, "an integer of 401 digits, more than 40"),
    "a 401-digit negative integer": (H100 % ("-" + DIGITS_401), "an integer of 401 digits, more than 40"),
    # Python 3.11's own limit (int_max_str_digits, 4300) raised a ValueError of its own
    "a 5,000-digit integer": (H100 % ("1" * 5000), "an integer of 5000 digits, more than 40"),
    "over the size cap": (GOOD + " " * (1 << 20),  # validate/jsonread.py MAX_BYTES
                           "more than 1048576 bytes"),
    "not UTF-8": (b'{"gpus": []}\xff', "not UTF-8 text (invalid start byte)"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_judge_file_is_one_line_and_exit_2(tmp_path, case):
    text, why = HOSTILE[case]
    path = tmp_path / "figures.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    rc, out, err = _validate("--judge", str(path))
    assert (rc, out) == (2, ""), err[-2000:]
    assert err == "validate: error: %s: %s\n" % (path, why)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_profile_file_is_one_line_and_exit_2(tmp_path, case):
    text, why = HOSTILE[case]
    figures, profile = tmp_path / "figures.json", tmp_path / "profile.json"
    figures.write_text(GOOD)
    profile.write_bytes(text if isinstance(text, bytes) else text.encode())
    rc, out, err = _validate("--judge", str(figures), "--profile", str(profile))
    assert (rc, out) == (2, ""), err[-2000:]
    assert err == "validate: error: --profile %s: %s\n" % (profile, why)


@pytest.mark.parametrize("inline, why", [
    ('{"tolerance": %s}' % DIGITS_401, "an integer of 401 digits, more than 40"),
    ('{"gpus": ' + "[" * 100_000 + "}", "nested more than 64 deep"),
], ids=["401 digits", "100,000 nested"])
def test_a_hostile_inline_profile_is_one_line_and_exit_2(tmp_path, inline, why):
    """--profile JSON as gpuprov passes it, on a validation run and with --judge."""
    figures = tmp_path / "figures.json"
    figures.write_text(GOOD)
    for args in (["--judge", str(figures), "--profile", inline],
                 ["--out", str(tmp_path / "out"), "--checks", "node", "--profile", inline]):
        rc, out, err = _validate(*args)
        assert rc == 2 and not (tmp_path / "out").exists(), err[-2000:]
        assert err == "validate: error: --profile: %s\n" % why


def test_brackets_and_digits_inside_strings_are_text():
    """A "[" or a long run of digits inside a string is neither nesting nor an integer."""
    from validate import jsonread  # here: the module is new

    doc = {"name": "[" * 1000 + "9" * 500, "n": 12345}
    assert jsonread.loads(json.dumps(doc)) == doc

    def nested(levels):  # `levels` deep: the object, then arrays
        return ('{"a": "\\\\", "b": "\\"[[[", "c": ' + "[" * (levels - 1) + "]" * (levels - 1)
                + "}")
    assert jsonread.loads(nested(64))["b"] == '"[[['
    with pytest.raises(jsonread.BadJSON, match="nested more than 64 deep"):
        jsonread.loads(nested(65))
    # brackets that never pair are json's to refuse, in its words, when they stay shallow
    with pytest.raises(jsonread.BadJSON, match="^not JSON: Expecting"):
        jsonread.loads('{"a": [}')


@pytest.mark.parametrize("text, why", [
    ('{"checks": [], "x": %s}' % DIGITS_401, "not valid JSON (an integer of 401 digits, more than 40): skipped"),
    ("[" * 100_000, "not valid JSON (nested more than 64 deep): skipped"),
], ids=["401 digits", "100,000 nested"])
def test_a_hosts_results_json_with_hostile_numbers_or_nesting_is_unusable(tmp_path, text, why):
    path = tmp_path / "results.json"
    path.write_text(text)
    with pytest.raises(UnusableFile) as caught:
        read_results(path)
    assert caught.value.reason == "not_json" and caught.value.message == why


def test_the_report_skips_a_results_json_with_a_401_digit_figure(tmp_path, capsys):
    """Before: the report read the 401-digit latency and ended in an OverflowError traceback
    (collect.num's float()); now the file is a bad log, named and skipped, and the rest of the
    fleet is reported."""
    logs = tmp_path / "logs"
    doc = {"schema": 2, "ok": True, "host": {"gpu_name": "X"}, "checks": [
        {"name": "bench", "status": "pass", "required": True,
         "figures": {"models": {"resnet50": {"latency_ms": {"median": 10 ** 401}}}}}]}
    bad = logs / "gpu1" / "20261126T100000Z" / "results.json"
    bad.parent.mkdir(parents=True)
    bad.write_text(json.dumps(doc))
    good = logs / "gpu2" / "20261126T100000Z" / "results.json"
    good.parent.mkdir(parents=True)
    doc["checks"][0]["figures"]["models"]["resnet50"]["latency_ms"]["median"] = 10.0
    good.write_text(json.dumps(doc))
    assert run_report(logs, tmp_path / "out", prometheus_path=tmp_path / "m.prom") == 0
    shown = capsys.readouterr()
    assert f"{bad}: not valid JSON (an integer of 402 digits, more than 40): skipped" in shown.out + shown.err
    assert 'gpuprov_validation_ok{host="gpu2"' in (tmp_path / "m.prom").read_text()


def test_an_inventory_profile_with_a_401_digit_number_is_one_line(tmp_path):
    """The control side checks the inventory's node_profile with validate's own checker before
    any host is contacted; a 401-digit tolerance ended there in an OverflowError traceback."""
    inv = tmp_path / "inventory.yaml"
    inv.write_text("hosts:\n  h1: {connection: local, vars: {node_profile: {tolerance: 1%s}}}\n"
                   % ("0" * 400))
    p = subprocess.run([sys.executable, "-m", "invoke", "validate", "--host", "h1", "-i", str(inv)],
                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr == f"error: {inv}:2: node_profile: tolerance: too large a number (1329 bits)\n"
