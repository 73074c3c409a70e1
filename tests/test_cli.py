"""gpuprov's own command line, run as a user runs it (a subprocess, a HOME of its own, real
sshd on loopback where a host is needed): the top level (-h, -V, --list only; Invoke's core
options refused), Ansible's flags with Ansible's meaning, bad values in one line with exit 2,
and the exit statuses of a run."""
from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
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
    flowed = " ".join(result.out.split())  # the exit-status paragraph is wrapped to the width
    assert "1 a step failed on a host" in flowed and "4 a host was unreachable" in flowed
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
    (["sandbox", "status", "--offline"], "error: --offline is for 'sandbox up' only, not 'status'"),
    (["provision", "--host", "a", "--bundle", "nosuch.tar"], "nosuch.tar: no such bundle (gpuprov bundle makes one)"),
    (["bundle", "--cuda", "9.9", "--out", "b.tar"], "bundle: --cuda 9.9: not a row of the stack table"),
    (["provision", "--host", "a", "-e", "novalue"], "error: --var 'novalue' must look like NAME=VALUE"),
    (["provision", "--host", "a", "-e", "{bad json"], "error: --var '{bad json' is not valid JSON"),
    (["provision", "--host", "a", "-e", "@missing.yaml"], "error: missing.yaml: extra vars file not found"),
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


@pytest.mark.parametrize("name,text,line,found", [
    ("list.json", "\n\n[1, 2]\n", 3, "a list"),
    ("vars.yaml", "# the cluster's vars\n---\n- a\n- b\n", 3, "a list"),
    ("vars.yaml", "# one word, not NAME: VALUE\n\nfast\n", 3, "a single value"),
])
def test_an_extra_vars_file_that_is_not_a_mapping_is_named_with_its_line(work, name, text,
                                                                          line, found):
    """`-e @FILE` holding a list or a single value (ansible-playbook refuses those too): one
    line naming the file and the line the value starts on, exit 2, no host touched."""
    inv, rec = _local_setup(work)
    (work / name).write_text(text)
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--host", "a",
                     "-e", f"@{name}", "--no-validate", cwd=work, home=work)
    assert result.rc == 2, result.out + result.err
    assert result.err == (f"error: {name}:{line}: an extra vars file must be a mapping of "
                          f"NAME: VALUE, not {found}\n"), result.err
    assert not (work / "mark-a").exists() and not (work / "logs").exists()


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

    # -v shows output, not commands; -vv each step's commands under its line too
    assert "$ echo" not in result.out
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "-l", "a", "-vv",
                     "--no-validate", cwd=work, home=work)
    lines = [" ".join(line.split()) for line in result.out.splitlines()]
    assert result.rc == 0, result.out + result.err
    at = next(n for n, line in enumerate(lines) if line.startswith("a ok say hello ("))
    assert lines[at + 1] == '$ echo "hello nobody -"', result.out


def test_check_and_diff_short_flags(work):
    """-C changes nothing; -D shows a unified diff of what file and template steps write."""
    inv, rec = _local_setup(work, RECIPE + f"""\
  - name: config
    file: {{path: "{work}/app.conf", content: "port = 1\\nname = new\\n"}}
  - name: rendered
    template: {{src: app.j2, dest: "{work}/app.rendered"}}
""")
    (work / "app.j2").write_text("host {{ host }}\nkept\n")
    (work / "app.conf").write_text("port = 1\nname = old\n")
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "-l", "a", "-C", "-D",
                     cwd=work, home=work)
    assert result.rc == 0, result.out + result.err
    assert "check (nothing will change)" in result.out and "would change" in result.out
    assert not (work / "mark-a").exists() and not (work / "app.rendered").exists()
    assert (work / "app.conf").read_text() == "port = 1\nname = old\n"
    lines = [line.strip() for line in result.out.splitlines()]
    conf = lines[lines.index(f"--- {work}/app.conf (before)"):]
    assert conf[1:6] == [f"+++ {work}/app.conf (after)", "@@ -1,2 +1,2 @@", "port = 1",
                         "-name = old", "+name = new"], conf
    rendered = lines[lines.index(f"+++ {work}/app.rendered (after)") - 1:]
    assert rendered[:5] == ["--- /dev/null", f"+++ {work}/app.rendered (after)",
                            "@@ -0,0 +1,2 @@", "+host a", "+kept"], rendered
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "-l", "a", "-D",
                     "--no-validate", cwd=work, home=work)
    assert result.rc == 0 and "+name = new" in result.out
    assert (work / "app.conf").read_text() == "port = 1\nname = new\n"


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


# 4. Feedback a person can act on.

def test_a_missing_key_file_is_named_and_the_host_key_hint_is_filled_in(farm, work):
    address = farm.addresses[0]
    inv = write_yaml(work / "inv.yaml", {"hosts": {
        "nokey": farm.host_entry(address, identity_file=str(work / "id_gone")),
        "newkey": farm.host_entry(address)}})
    result = gpuprov("facts", "-i", str(inv), "--host", "nokey", cwd=work, home=work)
    assert result.rc == 2, result.out + result.err
    assert result.err.strip() == (f"error: {inv}:2: nokey: identity_file {work / 'id_gone'} "
                                  "does not exist")
    # No known_hosts in this HOME or the inventory: the hint is a command to paste.
    result = gpuprov("facts", "-i", str(inv), "--host", "newkey", cwd=work, home=work)
    assert result.rc == 4, result.out + result.err
    assert f"ssh-keyscan -p {farm.port} {address} >> " in result.out


SLOW_RECIPE = "name: slow\nsteps:\n  - name: long step\n    shell: sleep 4\n"


def test_a_long_step_shows_signs_of_life_when_piped(work):
    """Piped (a CI log): a `running` line with the elapsed time every GPUPROV_PROGRESS_EVERY
    seconds (60 by default; 1 here so the test stays short)."""
    inv, rec = _local_setup(work, SLOW_RECIPE)
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--host", "a",
                     "--no-validate", cwd=work, home=work, env={"GPUPROV_PROGRESS_EVERY": "1"})
    assert result.rc == 0, result.out + result.err
    lines = [" ".join(line.split()) for line in result.out.splitlines()]
    assert "a running long step" in lines
    assert any(line.startswith("a running long step (still running, ") for line in lines), lines
    assert "\r" not in result.out and "\x1b" not in result.out  # nothing for a terminal


def test_a_long_step_shows_a_live_elapsed_time_on_a_terminal(work):
    """On a terminal (a pty, as a person's): one live line at the bottom with the step and its
    elapsed time, redrawn in place and cleared when the run ends."""
    import fcntl
    import pty
    import struct
    import termios

    inv, rec = _local_setup(work, SLOW_RECIPE)
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))  # 30 x 100
    proc = subprocess.Popen([sys.executable, "-c", "from remote.program import main; main()",
                             "provision", "-i", str(inv), "--recipe", str(rec), "--host", "a",
                             "--no-validate"], cwd=work, stdin=side, stdout=side, stderr=side,
                            env=dict(os.environ, PYTHONPATH=str(REPO), HOME=str(work),
                                     TERM="xterm"))
    os.close(side)
    seen = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # EIO: the program ended and closed its side
            break
        if not chunk:
            break
        seen += chunk
    os.close(main)
    assert proc.wait(timeout=60) == 0, seen
    text = seen.decode(errors="replace")
    live = [part for part in text.split("\r\x1b[K") if part.startswith("\x1b[2ma long step ")]
    assert len(live) >= 2, text  # redrawn as the seconds go by
    assert any("a long step 3s" in part for part in live), live
    assert "RECAP" in text and text.count("\r\x1b[K") >= len(live)


def test_validation_failed_has_its_own_exit_status_and_junit_cases(farm, inventory, work):
    """Steps succeed, validation fails (no NVIDIA driver on the loopback host): exit 3, the
    FAILED block says why, and --junit has a testcase per check with the check's reason."""
    junitparser = pytest.importorskip("junitparser")
    inv = inventory(hosts={"h1": farm.host_entry(farm.addresses[0])},
                    vars={"validate_args": "--checks system"})
    rec = work / "ok.yaml"
    rec.write_text("name: ok\nsteps:\n  - name: nothing\n    shell: 'true'\n")
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--host", "h1",
                     "--junit", "j.xml", cwd=work, home=work)
    assert result.rc == 3, result.out + result.err
    assert "h1: validation: failed: system" in result.out.split("\nFAILED\n")[1]
    suite = next(iter(junitparser.JUnitXml.fromfile(str(work / "j.xml"))))
    cases = {case.name: case for case in suite}
    assert cases["nothing"].is_passed
    assert "nvidia-smi" in cases["validate: system"].result[0].message


def test_validate_python_is_remembered_without_validating(farm, inventory, work):
    """`--no-validate` (and a recipe's `validate: false`) still record the recipe's
    validate_python, so a later `gpuprov validate` uses the venv the recipe built."""
    inv = inventory(hosts={"h1": farm.host_entry(farm.addresses[0])})
    rec = work / "venv.yaml"
    rec.write_text("name: venv\nvars: {validate_python: /opt/made-up/bin/python}\n"
                   "steps:\n  - name: nothing\n    shell: 'true'\n")
    show = work / "show.yaml"
    show.write_text("name: show\nsteps:\n  - name: remembered\n"
                    "    shell: cat ~/.gpuprov/h1/python; rm -f ~/.gpuprov/h1/python\n")
    for flags in (["--no-validate"], []):
        if not flags:  # the same recipe, with validate: false at the top instead
            rec.write_text("validate: false\n" + rec.read_text())
        result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--host", "h1",
                         *flags, cwd=work, home=work)
        assert result.rc == 0 and "validate" not in result.out.split("RECAP")[0], result.out
        result = gpuprov("provision", "-i", str(inv), "--recipe", str(show), "--host", "h1",
                         "-v", "--no-validate", cwd=work, home=work)
        assert "h1 | /opt/made-up/bin/python" in " ".join(result.out.split()), result.out


def test_logs_of_a_host_never_validated_is_nothing_to_pull_not_a_failed_validation(work):
    """`gpuprov logs` for a host only provisioned (no validation run in its ~/.gpuprov), or one
    whose latest run folder was removed by hand: one plain line and exit 0, as the exit-code
    page says; not 3 ("validation failed")."""
    inv, rec = _local_setup(work)
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--host", "a",
                     "--no-validate", cwd=work, home=work)
    assert result.rc == 0, result.out + result.err
    runs = work / ".gpuprov" / "a" / "runs"
    run_id = "20261122T055742.123Z-14af"
    for case in ("provisioned only", "its run folder removed by hand"):
        if case != "provisioned only":
            runs.mkdir(parents=True, exist_ok=True)
            (runs / "latest").symlink_to(run_id)
        result = gpuprov("logs", "-i", str(inv), "--host", "a", cwd=work, home=work)
        assert result.rc == 0, (case, result.out + result.err)
        assert ("a: no validation run on the host, nothing to pull (`gpuprov validate --host a` "
                "runs one)") in result.out.splitlines(), case
        assert "FAILED" not in result.out and not result.err, case
    # a run that is there is pulled as before
    (runs / run_id).mkdir()
    (runs / run_id / "results.json").write_text(json.dumps(
        {"ok": True, "checks": [{"name": "system", "required": True, "status": "pass"}]}))
    result = gpuprov("logs", "-i", str(inv), "--host", "a", cwd=work, home=work)
    assert result.rc == 0 and f"{run_id}: passed (1 checks)" in result.out, result.out
    assert (work / "logs" / "a" / run_id / "results.json").is_file()


def test_logs_whose_pull_fails_exit_1_not_a_failed_validation(farm, inventory, work):
    """`gpuprov logs` whose pull fails on the host (its tar cannot read a file of the run's
    folder: exit 2, "Permission denied") exits 1, a job's own work that failed, as the exit-code
    page says; it exited 3 ("validation failed") and the recap said "not validated" although
    nothing was judged. The header has no "apply" (provision's mode word): logs applies nothing."""
    name = f"pull-{secrets.token_hex(3)}"
    inv = inventory(hosts={name: farm.host_entry(farm.addresses[0])})
    folder = Path(pwd.getpwnam(farm.user).pw_dir) / ".gpuprov" / name
    run_id = "20261122T055742.123Z-14af"
    run = folder / "runs" / run_id
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(
        {"ok": True, "checks": [{"name": "system", "required": True, "status": "pass"}]}))
    unreadable = run / "root-only.log"
    unreadable.write_text("x\n")
    os.chmod(unreadable, 0o600)  # root's: the login user's tar cannot open it
    for path in (folder.parent, folder, folder / "runs", run):
        os.chmod(path, 0o755)
    (folder / "runs" / "latest").symlink_to(run_id)
    try:
        failed = gpuprov("logs", "-i", str(inv), "--host", name, cwd=work, home=work)
        stored = sorted(p.name for p in (work / "logs").rglob("*"))
        os.chmod(unreadable, 0o644)
        pulled = gpuprov("logs", "-i", str(inv), "--host", name, cwd=work, home=work)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert failed.rc == 1, failed.out + failed.err
    [reason] = [line for line in failed.out.split("\nFAILED\n")[1].splitlines()
                if line.startswith(f"{name}: ")]
    assert reason.startswith(f"{name}: pull: {run_id}: not pulled: "), reason
    assert "Permission denied" in reason and "validat" not in reason, reason
    assert "not validated" not in failed.out, failed.out
    assert failed.out.startswith("logs: 1 host(s), ") and "apply" not in failed.out.splitlines()[0]
    assert stored == [name], f"nothing stored: {stored}"
    # once tar can read it, the run is pulled and its verdict shown, exit 0, as before
    assert pulled.rc == 0 and f"{run_id}: passed (1 checks)" in pulled.out, pulled.out
    assert (work / "logs" / name / run_id / "root-only.log").is_file()


def test_logs_exits_0_whatever_the_verdict_it_pulled(farm, inventory, work):
    """`gpuprov logs` that pulled a run exits 0 and shows its verdict, whichever it is, as the
    exit-code page says (`gpuprov logs && gpuprov report` goes on): it exited 0 for "failed: X"
    but 3 for "not validated: X skipped" and for a results.json it could not read."""
    tag = secrets.token_hex(3)
    run_id = "20261122T055742.123Z-14af"
    verdicts = {
        "failed": ({"ok": False, "checks": [{"name": "gpu", "required": True, "status": "fail"}]},
                   f"{run_id}: failed: gpu"),
        "skipped": ({"ok": False, "checks": [{"name": "nccl", "required": True, "status": "skip"}]},
                    f"{run_id}: not validated: nccl skipped"),
        "unreadable": ("{not json", f"{run_id}: not validated: no readable results.json"),
    }
    home = Path(pwd.getpwnam(farm.user).pw_dir)
    hosts, folders = {}, []
    for case, (results, _) in verdicts.items():
        name = f"{case}-{tag}"
        hosts[name] = farm.host_entry(farm.addresses[0])
        folder = home / ".gpuprov" / name
        folders.append(folder)
        (folder / "runs" / run_id).mkdir(parents=True)
        (folder / "runs" / run_id / "results.json").write_text(
            results if isinstance(results, str) else json.dumps(results))
        (folder / "runs" / "latest").symlink_to(run_id)
        for path in (folder, *folder.rglob("*")):  # the login user's, as a validation leaves it
            os.lchown(path, pwd.getpwnam(farm.user).pw_uid, -1)
    inv = inventory(hosts=hosts)
    try:
        results = {case: gpuprov("logs", "-i", str(inv), "--host", f"{case}-{tag}",
                                 cwd=work, home=work) for case in verdicts}
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
    for case, (_, verdict) in verdicts.items():
        result = results[case]
        assert result.rc == 0, (case, result.out + result.err)
        row = next(line for line in result.out.splitlines() if line.startswith(f"{case}-{tag} "))
        assert verdict in row, (case, result.out)
        assert "\nFAILED\n" not in result.out, (case, result.out)
        assert (work / "logs" / f"{case}-{tag}" / run_id / "results.json").is_file(), case


def test_recipe_validate_must_be_a_boolean(work):
    inv, rec = _local_setup(work, "validate: 'no'\n" + RECIPE)
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--host", "a",
                     cwd=work, home=work)
    assert result.rc == 2 and result.err.startswith(f"error: {rec}:1: 'validate' must be")


# 5. Output for the systems operators already watch; 6. small things.

def test_report_writes_prometheus_textfile(work):
    from prometheus_client.parser import text_string_to_metric_families

    fleet = REPO / "tests" / "fixtures" / "report" / "fleet"
    out = work / "textfile" / "gpuprov.prom"
    out.parent.mkdir()
    result = gpuprov("report", "--logs", str(fleet), "--out", str(work / "r"),
                     "--prometheus", str(out), cwd=work, home=work)
    assert result.rc == 0, result.out + result.err
    families = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    passed = {(s.labels["host"], s.labels["check"]): s.value
              for s in families["gpuprov_check_passed"].samples}
    assert passed[("a100-1", "bench")] == 1.0
    assert {s.labels["host"] for s in families["gpuprov_validation_ok"].samples} >= {"a100-1",
                                                                                    "h100-1"}
    latency = {(s.labels["host"], s.labels["model"]): s.value
               for s in families["gpuprov_bench_latency_seconds"].samples}
    assert latency[("a100-1", "resnet50")] == pytest.approx(0.007, rel=1e-3)  # 7.0 ms
    assert [p.name for p in out.parent.iterdir()] == ["gpuprov.prom"]  # no temporary left


def test_report_counts_runs_without_validation_results(work):
    fleet = REPO / "tests" / "fixtures" / "report" / "fleet"
    logs = work / "logs"
    import shutil

    shutil.copytree(fleet / "a100-1", logs / "a100-1")
    for n in range(3):  # provision --no-validate leaves only its run log
        run = logs / "a100-1" / f"20261124T10000{n}Z"
        run.mkdir()
        (run / "provision.log").write_text("a run\n")
    result = gpuprov("report", "--logs", str(logs), "--out", str(work / "r"), cwd=work,
                     home=work)
    assert result.rc == 0, result.out + result.err
    assert "BAD LOGS" not in result.out
    assert "note: 3 run(s) without validation results" in result.out


def test_report_reads_a_cluster_runs_folder_as_the_clusters_not_a_bad_log(work):
    """A Slurm run's own folder (logs/CLUSTER/RUN/slurm.json) is no host's run: the report
    must not list it among the bad logs, in a process that never opened an inventory."""
    fleet = REPO / "tests" / "fixtures" / "report" / "fleet"
    logs = work / "logs"
    import shutil

    shutil.copytree(fleet / "a100-1", logs / "a100-1")
    cluster_run = logs / "cluster1" / "20261124T100000Z"
    cluster_run.mkdir(parents=True)
    (cluster_run / "slurm.json").write_text("{}")
    result = gpuprov("report", "--logs", str(logs), "--out", str(work / "r"), cwd=work,
                     home=work)
    assert result.rc == 0, result.out + result.err
    assert "cluster1" not in result.out, result.out


def test_sandbox_status_without_hosts(work):
    result = gpuprov("sandbox", "status", cwd=work, home=work)
    assert result.rc == 0 and result.out.strip() == (
        "no sandbox hosts (gpuprov sandbox up starts them)"), result.out + result.err
