"""gpuprov's own command line, run as a user runs it (a subprocess, a HOME of its own, real
sshd on loopback where a host is needed): the top level (-h, -V, --list only; Invoke's core
options refused), Ansible's flags with Ansible's meaning, bad values in one line with exit 2,
and the exit statuses of a run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, Result, invoke, write_yaml

RECIPE = """\
name: tiny
vars: {greeting: nobody, other: "-"}
steps:
  - name: say hello
    shell: echo "hello {{ greeting }} {{ other }}"
    changed_when: false
    tags: [hello]
  - name: mark
    file: {path: "{{ mark_dir }}/mark-{{ host }}", content: "x\\n"}
    tags: [mark]
"""
INVOKE_OPTIONS = ["--dry", "--echo", "--hide", "--pty", "--warn-only", "--command-timeout",
                  "--prompt-for-sudo-password", "--write-pyc", "--config", "--debug",
                  "--collection", "--search-root", "--complete", "--list-format"]


def gpuprov(*args, cwd=None, home=None, env=None, timeout=180) -> Result:
    """Run the `gpuprov` console script's code in a subprocess, as a user would."""
    full = dict(os.environ, PYTHONPATH=str(REPO))
    full.update(env or {})
    if home is not None:
        full["HOME"] = str(home)
    proc = subprocess.run([sys.executable, "-c", "from remote.program import main; main()",
                           *args], cwd=cwd or "/", env=full, capture_output=True, text=True,
                          timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _local_setup(work: Path, recipe: str = RECIPE) -> tuple[Path, Path]:
    """An inventory of two local hosts and localhost, and the tiny recipe."""
    inv = write_yaml(work / "inv.yaml", {
        "vars": {"mark_dir": str(work)},
        "hosts": {"localhost": {"connection": "local"}, "a": {"connection": "local"},
                  "b": {"connection": "local"}},
        "groups": {"pair": {"hosts": ["a", "b"]}}})
    rec = work / "tiny.yaml"
    rec.write_text(recipe)
    return inv, rec


# 1. The top level is gpuprov's own.

def test_top_level_help_lists_tasks_and_only_options_that_work(work):
    result = gpuprov("--help", home=work)
    assert result.rc == 0, result.err
    assert "provision   Apply a recipe to hosts over SSH" in result.out
    assert "sandbox     Throwaway local Debian 12 hosts" in result.out
    for option in INVOKE_OPTIONS + ["--no-dedupe", "-T", "-w", "-R"]:
        assert f"{option} " not in result.out and f"{option}=" not in result.out, option
    for option in ("-h", "--help", "-V", "--version", "--list"):
        assert option in result.out
    assert "1 a step failed" in result.out and "4 a host was unreachable" in result.out
    assert gpuprov("-V", home=work).out.startswith("gpuprov ")


@pytest.mark.parametrize("option", INVOKE_OPTIONS + ["-d", "-e", "-f", "-w", "-T", "-R"])
def test_invoke_core_options_are_refused_in_one_line(work, option):
    inv, rec = _local_setup(work)
    result = gpuprov(option, "provision", "--host", "a", "-i", str(inv), "--recipe", str(rec),
                     "--no-validate", cwd=work, home=work)
    assert result.rc == 2, result.out + result.err
    assert result.err.strip().startswith(f"error: {option} is not a gpuprov option")
    assert len(result.err.strip().splitlines()) == 1 and result.out == ""
    assert not (work / "mark-a").exists()


def test_invoke_dry_under_plain_invoke_changes_nothing(work):
    """`invoke --dry provision` in a clone used to change the host (exit 0)."""
    inv, rec = _local_setup(work)
    for option in ("--dry", "--echo", "--pty", "--warn-only"):
        result = invoke(option, "provision", "--host", "a", "-i", str(inv), "--recipe",
                        str(rec), "--no-validate", cwd=work)
        assert result.rc == 2, result.out + result.err
        assert "does not apply to gpuprov" in result.err and option.split("-")[-1] in result.err
        assert not (work / "mark-a").exists()


def test_help_into_a_closed_pipe_is_quiet(work):
    proc = subprocess.run(f"{sys.executable} -c 'from remote.program import main; main()' "
                          "provision -h | head -3", shell=True, cwd=work, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(REPO), HOME=str(work)))
    assert len(proc.stdout.splitlines()) == 3 and "Usage: gpuprov provision" in proc.stdout
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args,message", [
    (["provision", "--host", "a", "--forks", "abc"], "error: --forks must be a whole number, not 'abc'"),
    (["provision", "--host", "a", "-f", "0"], "error: --forks must be 1 or more"),
    (["sandbox", "up", "--hosts", "x"], "error: --hosts must be a whole number of 1 or more, not 'x'"),
    (["sandbox", "down", "--hosts", "3"], "error: --hosts is for 'sandbox up' only, not 'down'"),
    (["provision", "--host", "a", "-e", "novalue"], "error: --extra-vars 'novalue' must look like NAME=VALUE"),
    (["provision", "--host", "a", "-e", "{bad json"], "error: --extra-vars '{bad json' is not valid JSON"),
    (["provision", "--host", "a", "-e", "@missing.yaml"], "missing.yaml"),
    (["provision", "--host", "a", "-l", "nosuch"], "--limit 'nosuch' matches no host or group"),
    (["provision", "--host", "a", "-l", "b"], "--host 'a' --limit 'b' selects no host"),
    (["provision", "--host", "a", "--junit", "-"], "error: --junit needs a file name"),
    (["frobnicate"], "error: 'frobnicate' is not a gpuprov task"),
])
def test_bad_values_are_one_line_and_exit_2(work, args, message):
    inv, rec = _local_setup(work)
    extra = ["-i", str(inv), "--recipe", str(rec), "--no-validate"] if args[0] == "provision" else []
    result = gpuprov(*args, *extra, cwd=work, home=work)
    assert result.rc == 2, result.out + result.err
    assert message in result.err and len(result.err.strip().splitlines()) == 1, result.err
    assert "Traceback" not in result.err
    assert not (work / "mark-a").exists()


# 2. Ansible's habits, with Ansible's meaning.

def test_list_hosts_with_limit_patterns(work):
    inv, rec = _local_setup(work)

    def listed(*args):
        result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--list-hosts",
                         *args, cwd=work, home=work)
        assert result.rc == 0, result.err
        return [line.strip() for line in result.out.splitlines()[1:]]

    assert listed("--host", "all") == ["a", "b"]  # localhost is outside all, as in Ansible
    assert listed("--host", "localhost") == ["localhost"]
    assert listed("--host", "all", "-l", "!b") == ["a"]
    assert listed("-l", "pair:!a") == ["b"]
    assert listed("--host", "pair", "--limit", "all:&b") == ["b"]
    assert listed("--host", "a,localhost") == ["localhost", "a"]
    assert not (work / "mark-a").exists()


def test_extra_vars_forms_tags_and_verbose(work):
    inv, rec = _local_setup(work)
    (work / "vars.yaml").write_text("other: fromfile\n")
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "-l", "a",
                     "-e", "greeting=there x=1", "-e", '{"other": "json"}',
                     "-e", "@vars.yaml", "-t", "hello", "-v", "--no-validate",
                     cwd=work, home=work)
    assert result.rc == 0, result.out + result.err
    assert "a | hello there fromfile" in " ".join(result.out.split())  # -v: the step's output, with the host
    assert not (work / "mark-a").exists()  # only the tagged step ran

    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "-l", "a",
                     "--skip-tags", "hello", "-t", "nosuchtag,mark", "--no-validate",
                     cwd=work, home=work)
    assert result.rc == 0, result.out + result.err
    assert ("warning: --tags nosuchtag matches no step of" in result.err
            and "(its tags: hello, mark)" in result.err)
    assert "say hello" not in result.out and (work / "mark-a").exists()


def test_check_and_diff_short_flags(work):
    inv, rec = _local_setup(work)
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "-l", "a", "-C",
                     cwd=work, home=work)
    assert result.rc == 0, result.out + result.err
    assert "check (nothing will change)" in result.out and "would change" in result.out
    assert not (work / "mark-a").exists()


def test_exit_status_of_a_failed_step_and_the_failed_block(work):
    inv, rec = _local_setup(work, RECIPE + "  - name: break\n    shell: echo broken >&2; exit 7\n")
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--host", "pair",
                     "-f", "1", "--no-validate", cwd=work, home=work)
    assert result.rc == 1, result.out + result.err
    failed = result.out.split("\nFAILED\n", 1)[1]
    for host in ("a", "b"):
        assert f"{host}: step 'break' failed: " in failed
        log = work / "logs" / host
        run = next(log.iterdir()).name
        assert f"log: logs/{host}/{run}/provision.log" in failed
        assert f"logs/{host}/{run}" in result.out.split("\nlogs: ")[1]


def test_json_dash_writes_only_the_json_to_stdout(work):
    inv, rec = _local_setup(work)
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--host", "pair",
                     "--json", "-", "--no-validate", cwd=work, home=work)
    assert result.rc == 0, result.err
    data = json.loads(result.out)  # nothing else on stdout
    assert set(data["hosts"]) == {"a", "b"} and data["hosts"]["a"]["changed"] == 1
    assert "RECAP" in result.err
    facts = gpuprov("facts", "-i", str(inv), "--host", "a", "--json", "-", cwd=work, home=work)
    assert facts.rc == 0 and "facts" in json.loads(facts.out)["hosts"]["a"]


def test_junit_has_a_suite_per_host_and_a_case_per_step(work):
    junitparser = pytest.importorskip("junitparser")
    inv, rec = _local_setup(work, RECIPE + "  - name: break\n    shell: echo broken; exit 7\n"
                                           "    when: host == 'b'\n")
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--host", "pair",
                     "--junit", "out/junit.xml", "--no-validate", cwd=work, home=work)
    assert result.rc == 1, result.out + result.err
    xml = junitparser.JUnitXml.fromfile(str(work / "out" / "junit.xml"))
    suites = {suite.name: suite for suite in xml}
    assert set(suites) == {"a", "b"}
    cases_a = {case.name: case for case in suites["a"]}
    assert list(cases_a) == ["say hello", "mark", "break"]
    assert cases_a["mark"].is_passed and cases_a["break"].is_skipped
    broken = {case.name: case for case in suites["b"]}["break"]
    assert not broken.is_passed and "rc=7" in broken.result[0].message
    assert suites["b"].failures == 1 and suites["a"].failures == 0


@pytest.mark.parametrize("command", ["gpuprov", "invoke"])
def test_ansible_flags_over_ssh(farm, inventory, work, command):
    """Over sshd on loopback: -i, -l with an exclusion, -e, -f, -C, and the unreachable exit."""
    inv = inventory(hosts={"h1": farm.host_entry(farm.addresses[0]),
                           "h2": farm.host_entry(farm.addresses[1]),
                           "down": farm.host_entry("127.0.0.9")},
                    vars={"mark_dir": str(work)})
    rec = work / "tiny.yaml"
    rec.write_text(RECIPE)
    run = gpuprov if command == "gpuprov" else invoke
    home = {"home": work} if command == "gpuprov" else {}
    result = run("provision", "-i", str(inv), "--recipe", str(rec), "-l", "all:!down",
                 "-f", "1", "-e", "greeting=ssh", "-C", "--no-validate", cwd=work, **home)
    assert result.rc == 0, result.out + result.err
    assert "h1 would change mark" in " ".join(result.out.split())
    assert "down" not in result.out.split("RECAP")[1]
    result = run("provision", "-i", str(inv), "--recipe", str(rec), "--host", "all",
                 "-t", "hello", "--no-validate", cwd=work, **home)
    assert result.rc == 4, result.out + result.err  # one host unreachable, no step failed
    assert "down: unreachable: " in result.out.split("\nFAILED\n")[1]
