"""A mistake in `node_profile` or a waiver var (`ignore_xids`, `acknowledged_before`,
`warn_only`) is bad input on the control side, found by validate/profile.py's own checker before
any host is contacted: one line naming the file and the line of the offending key, exit 2.

The only host is 127.0.0.99 port 1, where nobody listens: a contact gives exit 4 (unreachable)
and a run folder under logs/, so exit 2 with no logs/ is the proof that none was tried (the
last tests show the same inventories, mistake removed, do contact it)."""
from __future__ import annotations

import pytest

from tests.conftest import invoke

HOST = "hosts:\n  h1:\n    address: 127.0.0.99\n    port: 1\n"
RECIPE = "steps:\n  - shell: echo hi\n"

YAML_CASES = [
    ("unknown profile key",
     HOST + "    vars:\n      node_profile:\n        gpu: {count: 8}\n", 7,
     "node_profile: unknown key 'gpu' (known: gpus, pcie, ib"),
    ("tolerance not a fraction",
     "vars:\n  node_profile:\n    gpus: {count: 8}\n    tolerance: 5\n" + HOST, 4,
     "node_profile: tolerance: 5.0 is not below 1 (a fraction: 0.05 = 5 %)"),
    ("nested key in a list",
     HOST + "groups:\n  gpus:\n    hosts: [h1]\n    vars:\n      node_profile:\n        ib:\n"
     "          - ports: 8\n            rate_gbps: fast\n", 12,
     "node_profile: ib[0].rate_gbps: not a non-negative number: 'fast'"),
    ("infinite floor",
     "vars:\n  node_profile:\n    host: {memory_gib: .inf}\n" + HOST, 3,
     "node_profile: host.memory_gib: not a non-negative number: inf"),
    ("unknown check in warn_only",
     HOST + "groups:\n  gpus:\n    hosts: [h1]\n    vars:\n      warn_only:\n        - p2p\n"
     "        - p2pp\n", 11, "warn_only: unknown check 'p2pp' (known: system,"),
    ("acknowledged_before not a time",
     HOST + "    vars:\n      acknowledged_before: yesterday\n", 6,
     "acknowledged_before: not an ISO 8601 time: 'yesterday'"),
    ("ignore_xids not numbers",
     "vars:\n  ignore_xids: 13, lots\n" + HOST, 2, "ignore_xids[1]: not an integer >= 1: 'lots'"),
    ("superscript Xid",
     "vars:\n  ignore_xids: ['\u00b2']\n" + HOST, 2, "ignore_xids[0]: not an integer >= 1: '\u00b2'"),
    ("node_profile not a mapping",
     "vars:\n  node_profile: h100\n" + HOST, 2, "node_profile: not a mapping (got str)"),
]


def _assert_refused(result, work, where, text):
    assert result.rc == 2, (result.rc, result.out, result.err)
    assert "Traceback" not in result.err + result.out
    lines = result.err.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith(f"error: {where}"), result.err
    assert text in lines[0], lines[0]
    assert not (work / "logs").exists()  # no run folder: no host was tried


@pytest.mark.parametrize("case,text,line,expected", YAML_CASES, ids=[c[0] for c in YAML_CASES])
def test_validate_refuses_a_bad_profile_var_at_its_line(work, case, text, line, expected):
    inv = work / "inventory.yaml"
    inv.write_text(text)
    result = invoke("validate", "--host", "all", "--inventory", str(inv), cwd=work)
    _assert_refused(result, work, f"{inv}:{line}: ", expected)


def test_provision_with_validation_refuses_it_too(work):
    inv = work / "inventory.yaml"
    inv.write_text(HOST + "    vars:\n      node_profile: {tolerance: 5}\n")
    (work / "recipe.yaml").write_text(RECIPE)
    result = invoke("provision", "--host", "all", "--inventory", str(inv), "--recipe",
                    str(work / "recipe.yaml"), cwd=work)
    _assert_refused(result, work, f"{inv}:6: ", "node_profile: tolerance: 5.0 is not below 1")


def test_slurm_login_node_profile_is_checked_before_salloc(work):
    inv = work / "inventory.yaml"
    inv.write_text(HOST + "    slurm: {partition: gpu}\n    vars:\n      warn_only: [nccl, xidd]\n")
    result = invoke("validate", "--host", "all", "--inventory", str(inv), cwd=work)
    _assert_refused(result, work, f"{inv}:7: ", "warn_only: unknown check 'xidd'")


def test_ansible_ini_inventory_names_the_var_line(work):
    inv = work / "hosts.ini"
    inv.write_text("[gpus]\nh1 ansible_host=127.0.0.99 ansible_port=1\n[gpus:vars]\n"
                   "ignore_xids=13\nnode_profile={'gpus': {'count': 8}, 'pcie': {'gen': 0}}\n")
    result = invoke("validate", "--host", "all", "--inventory", str(inv), cwd=work)
    _assert_refused(result, work, f"{inv}:5: ", "node_profile: pcie.gen: not an integer >= 1: 0")


@pytest.mark.parametrize("var,expected", [
    ("warn_only=p2p,p2pp", "error: --var warn_only: unknown check 'p2pp'"),
    ('{"node_profile": {"tolerance": 5}}', "error: --var node_profile: tolerance: 5.0 is not below 1"),
    ("acknowledged_before=last-tuesday", "error: --var acknowledged_before: not an ISO 8601 time"),
])
def test_var_on_the_command_line_is_named(work, var, expected):
    inv = work / "inventory.yaml"
    inv.write_text(HOST + "    vars:\n      warn_only: [p2p]\n")  # good; --var wins over it
    result = invoke("validate", "--host", "all", "--inventory", str(inv), "--var", var, cwd=work)
    _assert_refused(result, work, "--var ", expected)


def test_var_file_names_its_own_line(work):
    inv = work / "inventory.yaml"
    inv.write_text(HOST)
    extra = work / "extra.yaml"
    extra.write_text("node_profile:\n  gpus:\n    count: 8\n    model: 100\n")
    result = invoke("validate", "--host", "all", "--inventory", str(inv), "-e", f"@{extra}", cwd=work)
    _assert_refused(result, work, f"{extra}:4: ", "node_profile: gpus.model: not a string")


@pytest.mark.parametrize("vars_text", [
    "      node_profile: {gpus: {count: 8}, tolerance: 0.05}\n      warn_only: [p2p]\n",
    "      warn_only: '{{ my_checks }}'\n      my_checks: p2pp\n",  # a template: the host checks it
    "      acknowledged_before: 2026-11-20\n",  # YAML reads a date; the host gets it as text
], ids=["good profile", "templated", "unquoted date"])
def test_a_good_or_templated_profile_goes_on_to_the_host(work, vars_text):
    inv = work / "inventory.yaml"
    inv.write_text(HOST + "    vars:\n" + vars_text)
    result = invoke("validate", "--host", "all", "--inventory", str(inv), cwd=work)
    assert result.rc == 4, (result.rc, result.out, result.err)  # tried, and unreachable
    assert (work / "logs").exists()


def test_provision_without_validation_does_not_check_the_profile(work):
    inv = work / "inventory.yaml"
    inv.write_text(HOST + "    vars:\n      node_profile: {tolerance: 5}\n")
    (work / "recipe.yaml").write_text(RECIPE)
    result = invoke("provision", "--host", "all", "--inventory", str(inv), "--recipe",
                    str(work / "recipe.yaml"), "--no-validate", cwd=work)
    assert result.rc == 4, (result.rc, result.out, result.err)


def test_evidence_checks_the_profile_it_runs_validate_with(work):
    inv = work / "inventory.yaml"
    inv.write_text(HOST + "    vars:\n      acknowledged_before: '2026-11-31'\n")
    result = invoke("evidence", "--host", "all", "--inventory", str(inv), cwd=work)
    _assert_refused(result, work, f"{inv}:6: ", "acknowledged_before: not an ISO 8601 time")
