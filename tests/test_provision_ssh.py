"""The provisioning engine against real OpenSSH servers on loopback."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from tests.conftest import forwarding_refused_server, write_yaml


def recipe(work: Path, steps, name="r.yaml", **top) -> Path:
    data = {"name": "test recipe"}
    data.update(top)
    data["steps"] = steps
    return write_yaml(work / name, data)


def ten_steps(work: Path) -> list:
    """A 10-step recipe touching files, templates, creates/unless, a handler and an assert."""
    (work / "motd.j2").write_text("host={{ host }} cpus={{ facts.cpus }} v={{ version }}\n")
    steps = []
    for i in range(4):
        steps.append({"name": f"file {i}",
                      "file": {"path": f"{work}/{{{{ host }}}}-f{i}", "content": f"line {i}\n",
                               "mode": "0640"}})
    steps += [
        {"name": "dir", "file": {"path": f"{work}/{{{{ host }}}}-d", "state": "directory"}},
        {"name": "template", "template": {"src": "motd.j2", "dest": f"{work}/{{{{ host }}}}-motd"},
         "notify": "restart"},
        {"name": "marker", "shell": f"date > {work}/{{{{ host }}}}-marker",
         "creates": f"{work}/{{{{ host }}}}-marker"},
        {"name": "unless", "shell": f"echo x >> {work}/{{{{ host }}}}-unless",
         "unless": f"test -s {work}/{{{{ host }}}}-unless"},
        {"name": "probe", "shell": "uname -r", "changed_when": False},
        {"name": "assert", "assert": {"that": ["facts.cpus > 0"], "msg": "no CPUs?"}},
    ]
    return steps


def test_converge_then_rerun_changes_nothing(farm, work, inventory, provision):
    rec = recipe(work, ten_steps(work), vars={"version": "1"},
                 handlers={"restart": {"shell": f"echo restarted >> {work}/{{{{ host }}}}-handler"}})
    inv = inventory()
    first = provision("all", rec, inv)
    assert first.rc == 0, first.out
    for name in ("h1", "h2", "h3", "h4"):
        host = first.host(name)
        assert host["unreachable"] is False
        assert host["changed"] == 9, first.out  # 8 changing steps + the handler
        assert host["ok"] == 2  # changed_when: false, and the assert
        assert host["failed"] == 0
        assert (work / f"{name}-motd").read_text().startswith(f"host={name} cpus=")
        assert (work / f"{name}-handler").read_text() == "restarted\n"
        assert oct(os.stat(work / f"{name}-f0").st_mode & 0o777) == "0o640"
    second = provision("all", rec, inv)
    assert second.rc == 0
    for name in ("h1", "h2", "h3", "h4"):
        host = second.host(name)
        assert host["changed"] == 0, second.out
        assert host["ok"] == 10
        # the handler was not notified by an unchanged template, so it did not run again
        assert (work / f"{name}-handler").read_text() == "restarted\n"
        assert (work / f"{name}-unless").read_text() == "x\n"
    assert "RECAP" in second.out
    logs = list((work / "logs" / "h1").iterdir())
    assert len(logs) == 2, "each run writes its own logs/<host>/<run-id>/"
    text = (sorted(logs)[0] / "provision.log").read_text()
    assert "rc=0" in text and "motd" in text


def test_check_mode_changes_nothing_and_lists_commands(farm, work, inventory, provision):
    rec = recipe(work, [
        {"name": "write", "file": {"path": f"{work}/checked", "content": "hi\n"}},
        {"name": "run", "shell": f"touch {work}/touched", "creates": f"{work}/touched"},
    ])
    result = provision("h1", rec, inventory(), check=True)
    assert result.rc == 0
    assert result.statuses("h1") == ["changed", "changed"]
    assert not (work / "checked").exists() and not (work / "touched").exists()
    assert "would change" in result.out
    assert f"touch {work}/touched" in result.out
    assert f"write {work}/checked (3 bytes" in result.out


def test_when_creates_unless_changed_when(farm, work, inventory, provision):
    (work / "exists").write_text("")
    rec = recipe(work, [
        {"name": "skipped", "shell": "exit 1", "when": "facts.gpu_count > 0"},
        {"name": "runs", "shell": "true", "when": "facts.cpus >= 1"},
        {"name": "created", "shell": "exit 1", "creates": f"{work}/exists"},
        {"name": "unless ok", "shell": "exit 1", "unless": "true"},
        {"name": "quiet", "shell": "echo hi", "changed_when": False},
        {"name": "by output", "shell": "echo CHANGED", "changed_when": "'CHANGED' in stdout"},
        {"name": "failed_when", "shell": "echo fine; exit 3", "failed_when": "rc not in [0, 3]"},
    ])
    result = provision("h1", rec, inventory())
    assert result.rc == 0, result.out
    assert result.statuses("h1") == ["skipped", "changed", "ok", "ok", "ok", "changed", "changed"]


def test_failure_stops_that_host_and_reports_output(farm, work, inventory, provision):
    rec = recipe(work, [
        {"name": "boom", "shell": "echo something broke >&2; exit 7",
         "when": "host == 'h2'"},
        {"name": "after", "shell": f"touch {work}/{{{{ host }}}}-after"},
    ])
    result = provision("h1,h2", rec, inventory())
    assert result.rc == 1
    assert result.statuses("h1") == ["skipped", "changed"]
    assert result.statuses("h2") == ["failed"]
    assert "rc=7: something broke" in result.host("h2")["steps"][0]["message"]
    assert not (work / "h2-after").exists() and (work / "h1-after").exists()


def test_handlers_run_once_and_only_when_notified(farm, work, inventory, provision):
    rec = recipe(work, [
        {"name": "a", "file": {"path": f"{work}/a", "content": "a"}, "notify": "count"},
        {"name": "b", "file": {"path": f"{work}/b", "content": "b"}, "notify": "count"},
        {"name": "c", "shell": "true", "changed_when": False, "notify": "never"},
    ], handlers={"count": {"shell": f"echo x >> {work}/count"},
                 "never": {"shell": f"echo x >> {work}/never"}})
    assert provision("h1", rec, inventory()).rc == 0
    assert (work / "count").read_text() == "x\n"
    assert not (work / "never").exists()
    assert provision("h1", rec, inventory()).rc == 0
    assert (work / "count").read_text() == "x\n"


def test_tags_select_steps(farm, work, inventory, provision):
    rec = recipe(work, [
        {"name": "cuda", "shell": f"touch {work}/cuda", "tags": ["cuda"]},
        {"name": "torch", "shell": f"touch {work}/torch", "tags": "torch"},
        {"name": "always", "shell": f"touch {work}/always", "tags": ["always"]},
    ])
    result = provision("h1", rec, inventory(), tags="torch")
    assert [s["name"] for s in result.host("h1")["steps"]] == ["torch", "always"]
    assert (work / "torch").exists() and not (work / "cuda").exists()


def test_include_and_its_when(farm, work, inventory, provision):
    write_yaml(work / "inc.yaml", {"vars": {"inner": "from-include", "shared": "inner"},
                                   "steps": [{"name": "inc",
                                              "shell": f"echo {{{{ inner }}}} {{{{ shared }}}} > {work}/inc"}]})
    rec = recipe(work, [
        {"include": "inc.yaml"},
        {"include": "inc.yaml", "when": False, "name": "never"},
    ], vars={"shared": "outer"})
    result = provision("h1", rec, inventory())
    assert result.rc == 0
    assert result.statuses("h1") == ["changed", "skipped"]
    assert (work / "inc").read_text() == "from-include outer\n"


def test_var_precedence(farm, work, inventory, provision):
    """recipe < inventory < parent group < child group < host < --var"""
    inv = inventory(
        hosts={"h1": farm.host_entry(farm.addresses[0], vars={"d": "host", "e": "host"})},
        vars={"a": "inventory", "b": "inventory", "c": "inventory", "d": "inventory",
              "e": "inventory"},
        groups={"parent": {"children": ["child"],
                           "vars": {"b": "parent", "c": "parent", "d": "parent", "e": "parent"}},
                "child": {"hosts": ["h1"], "vars": {"c": "child", "d": "child", "e": "child"}}})
    rec = recipe(work, [{"shell": "echo {{ r }} {{ a }} {{ b }} {{ c }} {{ d }} {{ e }} > "
                                  f"{work}/vars"}],
                 vars={"r": "recipe", "a": "recipe", "b": "recipe"})
    result = provision("h1", rec, inv, var=["e=cli"])
    assert result.rc == 0, result.err
    assert (work / "vars").read_text() == "recipe inventory parent child host cli\n"


def test_values_are_quoted_in_shell_commands(farm, work, inventory, provision):
    pwned = Path("/tmp/gpuprov-pwned")
    pwned.unlink(missing_ok=True)
    rec = recipe(work, [
        {"shell": f"printf '%s\\n' {{{{ a }}}} {{{{ b }}}} > {work}/quoted"},
        {"shell": f"echo {{{{ host_note }}}} >> {work}/quoted"},
    ], vars={"a": "hello; echo INJECTED", "b": "$(touch /tmp/gpuprov-pwned)"})
    inv = inventory(vars={"host_note": "`id` && rm -rf x"})
    assert provision("h1", rec, inv).rc == 0
    assert (work / "quoted").read_text() == \
        "hello; echo INJECTED\n$(touch /tmp/gpuprov-pwned)\n`id` && rm -rf x\n"
    assert not pwned.exists()


def test_one_host_unreachable_others_converge(farm, work, inventory, provision):
    hosts = {"up": farm.host_entry(farm.addresses[0]),
             "down": farm.host_entry("127.0.0.99")}
    inv = inventory(hosts=hosts)
    rec = recipe(work, [{"shell": f"touch {work}/{{{{ host }}}}"}])
    started = time.monotonic()
    result = provision("all", rec, inv)
    assert time.monotonic() - started < 30
    assert result.rc == 4
    assert result.host("down")["unreachable"] is True
    assert "refused" in result.host("down")["message"]
    assert result.host("up")["changed"] == 1 and (work / "up").exists()
    assert "UNREACHABLE" in result.out.upper()


def test_jump_host(farm, work, inventory, provision):
    closed = forwarding_refused_server(farm)
    hosts = {"bastion": farm.host_entry(farm.addresses[0]),
             "inner": farm.host_entry(farm.addresses[1], jump="bastion"),
             "closed-bastion": farm.host_entry(closed),
             "behind-closed": farm.host_entry(farm.addresses[1], jump="closed-bastion")}
    rec = recipe(work, [{"shell": f"echo ok > {work}/{{{{ host }}}}"}])
    result = provision("inner,behind-closed", rec, inventory(hosts=hosts))
    assert result.host("inner")["changed"] == 1 and (work / "inner").exists()
    # The same server behind a bastion that refuses forwarding is unreachable: proof that the
    # connection really goes through the jump host.
    assert result.host("behind-closed")["unreachable"] is True
    assert not (work / "behind-closed").exists()
    assert result.rc == 4


def test_retries_until_success(farm, work, inventory, provision):
    script = (f"n=$(cat {work}/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > {work}/n; "
              f"[ $n -ge 3 ]")
    rec = recipe(work, [{"name": "flaky", "shell": script, "retries": 3, "delay": 0.1}])
    result = provision("h1", rec, inventory())
    assert result.rc == 0
    assert (work / "n").read_text() == "3\n"
    rec2 = recipe(work, [{"name": "never", "shell": "exit 1", "retries": 1, "delay": 0.1}], "r2.yaml")
    assert provision("h1", rec2, inventory()).rc == 1


def test_file_changes_only_what_differs(farm, work, inventory, provision):
    target = work / "conf"
    rec = recipe(work, [{"file": {"path": str(target), "content": "a=1\n", "mode": "0600"}}])
    assert provision("h1", rec, inventory()).statuses("h1") == ["changed"]
    inode = target.stat().st_ino
    os.chmod(target, 0o644)
    result = provision("h1", rec, inventory())
    assert result.statuses("h1") == ["changed"]
    assert target.stat().st_ino == inode, "a mode change must not rewrite the file"
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert provision("h1", rec, inventory()).statuses("h1") == ["ok"]


def test_local_connection(work, provision):
    inv = write_yaml(work / "inv.yaml", {"hosts": {"localhost": {"connection": "local"}}})
    rec = recipe(work, [{"shell": f"echo $(id -u) > {work}/local", "creates": f"{work}/local"}])
    assert provision("localhost", rec, inv).rc == 0
    assert (work / "local").read_text() == f"{os.getuid()}\n"
    assert provision("localhost", rec, inv).statuses("localhost") == ["ok"]


def test_facts_over_ssh(farm, work, inventory):
    import json

    from tests.conftest import invoke

    out = work / "facts.json"
    result = invoke("facts", "--host", "h1", "--inventory", str(inventory()), "--json", str(out))
    assert result.rc == 0, result.err
    facts = json.loads(out.read_text())["hosts"]["h1"]["facts"]
    assert facts["user"] == farm.user and facts["uid"] > 0 and not facts["is_root"]
    assert facts["cpus"] == os.cpu_count()
    assert facts["distro_id"] == "debian" and facts["arch"] == os.uname().machine
    assert facts["gpu_count"] == 0 and facts["gpus"] == [] and facts["driver_version"] == ""
    assert facts["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert "gpu_count" in result.out and "h1" in result.out


def test_only_the_facts_a_recipe_reads_are_gathered(farm, work, inventory, provision):
    rec = recipe(work, [{"shell": f"echo {{{{ facts.cpus }}}} > {work}/cpus"}])
    assert provision("h1", rec, inventory()).rc == 0
    log = next((work / "logs" / "h1").iterdir()) / "provision.log"
    assert (work / "cpus").read_text() == f"{os.cpu_count()}\n"
    # the facts command's trace shows what it gathered: the account and cpus, not lspci etc.
    from remote.config.recipe import facts_used, load_recipe
    from remote.kinds import KINDS

    assert facts_used(load_recipe(rec, KINDS), []) == {"cpus"}
    dynamic = recipe(work, [{"shell": "echo {{ facts[name] }}"}], "d.yaml", vars={"name": "arch"})
    assert facts_used(load_recipe(dynamic, KINDS), []) is None
    assert "gather facts" in log.read_text()
    # a recipe that reads no fact costs no facts round trip at all
    plain = recipe(work, [{"shell": f"touch {work}/plain"}], "p.yaml")
    shutil.rmtree(work / "logs")
    assert provision("h1", plain, inventory()).rc == 0
    only_log = next((work / "logs" / "h1").iterdir()) / "provision.log"
    assert "gather facts" not in only_log.read_text() and (work / "plain").exists()
    # facts read by a var (the stack recipes build NVIDIA's repository path this way) count too
    via_var = recipe(work, [{"shell": f"echo {{{{ repo }}}} > {work}/repo"}], "v.yaml",
                     vars={"repo": "{{ facts.distro_id }}/{{ facts.arch }}"})
    assert provision("h1", via_var, inventory()).rc == 0
    assert (work / "repo").read_text() == f"debian/{os.uname().machine}\n"


def _commands_sent(log: Path) -> list:
    """The '<label>: $ <command>' lines of a provision.log: one per SSH command sent."""
    import re

    return re.findall(r"^\[\d\d:\d\d:\d\d\] (.+?): \$ (.*)$", log.read_text(), re.M)


def _last_log(work: Path, host: str) -> Path:
    return sorted((work / "logs" / host).iterdir())[-1] / "provision.log"


def test_a_converged_host_costs_one_round_trip(farm, work, inventory, provision):
    """The probes of steps that read no fact travel with the facts script: re-running the
    ten-step recipe sends the facts+probes script and the step that always runs, nothing else."""
    rec = recipe(work, ten_steps(work), vars={"version": "1"},
                 handlers={"restart": {"shell": "true"}})
    assert provision("h1", rec, inventory()).rc == 0
    again = provision("h1", rec, inventory())
    assert again.rc == 0 and again.host("h1")["changed"] == 0, again.out
    assert _commands_sent(_last_log(work, "h1")) == [("facts", "gather facts + 8 probes"),
                                                     ("probe", "uname -r")]


def test_probes_that_read_facts_wait_for_them(farm, work, inventory, provision):
    """A step whose `when`, probed path (directly or through a var) reads a fact is probed
    after the facts came back, and still converges."""
    steps = [
        {"name": "a", "file": {"path": f"{work}/{{{{ host }}}}-a", "content": "a\n"}},
        {"name": "b", "file": {"path": f"{work}/{{{{ host }}}}-{{{{ facts.cpus }}}}-b",
                               "content": "b\n"}},
        {"name": "c", "file": {"path": f"{work}/{{{{ spot }}}}-c", "content": "c\n"}},
        {"name": "d", "shell": f"touch {work}/{{{{ host }}}}-d",
         "creates": f"{work}/{{{{ host }}}}-d", "when": "facts.cpus > 0"},
        {"name": "e", "shell": f"touch {work}/{{{{ host }}}}-e",
         "creates": f"{work}/{{{{ host }}}}-e"},
    ]
    rec = recipe(work, steps, vars={"spot": "{{ host }}-{{ facts.user }}"})
    first = provision("h1", rec, inventory())
    assert first.rc == 0 and first.host("h1")["changed"] == 5, first.out
    assert (work / f"h1-{os.cpu_count()}-b").read_text() == "b\n"
    assert (work / f"h1-{farm.user}-c").read_text() == "c\n"
    again = provision("h1", rec, inventory())
    assert again.rc == 0 and again.statuses("h1") == ["ok"] * 5, again.out
    assert _commands_sent(_last_log(work, "h1")) == [("facts", "gather facts + 2 probes"),
                                                     ("probe", "3 probes")]


def test_answers_gathered_with_the_facts_are_not_used_after_a_change(farm, work, inventory,
                                                                     provision):
    """Step 2's file is absent when the facts trip probes it; step 1 then writes it with the
    very content step 2 wants, so step 2 must look again and find nothing to do."""
    target = f"{work}/{{{{ host }}}}-shared"
    rec = recipe(work, [
        {"name": "writer", "shell": f"echo same > {target}", "creates": target},
        {"name": "same content", "file": {"path": target, "content": "same\n"}},
    ], vars={"unused": "{{ facts.cpus }}"})
    result = provision("h1", rec, inventory())
    assert result.rc == 0
    assert result.statuses("h1") == ["changed", "ok"], result.out


def test_a_command_that_closes_its_output_early_does_not_spin(farm, work, inventory):
    """After the remote end sends EOF, waiting for the exit status must sleep, not poll: a
    command that closes stdout/stderr and keeps running used to busy-loop the client (and
    starve every other host's thread of the GIL)."""
    from remote.config.inventory import load_inventory
    from remote.transport.connection import connection_for
    from remote.transport.hostkeys import KnownHosts

    inv = load_inventory(inventory())
    conn = connection_for(inv.hosts["h1"], inv.hosts, inv.timeouts,
                          KnownHosts(inv.known_hosts, inv.host_key_policy)).open()
    try:
        cpu = time.thread_time()
        result = conn.run("exec >/dev/null 2>&1; sleep 2; exit 3")  # no remote timeout wrapper
        cpu = time.thread_time() - cpu
    finally:
        conn.close()
    assert result.rc == 3
    assert cpu < 0.5, f"the client used {cpu:.2f} s of CPU waiting 2 s for an exit status"


def test_connections_leave_the_shared_fabric_config_untouched(farm, work, inventory):
    """Every connection of a run reads one Fabric Config. Fabric's constructor used to write a
    key into it, and invoke re-merges a Config on every write, emptying it for a moment: with
    64 hosts connecting at once, one host now and then failed with "No attribute or config key
    found for 'gateway'". A connection must not write to it at all (the race itself is too rare
    to reproduce on demand; test_forks_bound_concurrency_with_64_hosts is where it showed)."""
    from remote.config.inventory import load_inventory
    from remote.transport.connection import connection_for
    from remote.transport.hostkeys import KnownHosts
    from remote.transport.ssh import _fabric_config

    inv = load_inventory(inventory())
    shared = _fabric_config()
    merged = shared._config  # invoke replaces this dict whenever the Config is written to
    before = repr(merged)
    conn = connection_for(inv.hosts["h1"], inv.hosts, inv.timeouts,
                          KnownHosts(inv.known_hosts, inv.host_key_policy)).open()
    try:
        assert conn.run("echo hi").out == "hi\n"
    finally:
        conn.close()
    assert _fabric_config() is shared
    assert shared._config is merged and repr(merged) == before


def test_host_output_cannot_drive_the_terminal(farm, work, inventory, provision):
    """Escape sequences in what a host prints (here in a failing step's stderr) are shown
    as '?', not passed to the terminal or kept in provision.log (they could retitle it, hide
    text, move the cursor)."""
    rec = recipe(work, [{"name": "noisy", "shell": r"printf 'x\033]0;owned\007\033[2Jy\n' >&2; exit 1"}])
    result = provision("h1", rec, inventory())
    assert result.rc == 1
    assert "\x1b" not in result.out and "\x07" not in result.out
    assert "x?]0;owned??[2Jy" in result.out
    # nor does provision.log keep them: `cat provision.log` would replay them
    log = _last_log(work, "h1").read_text()
    assert "\x1b" not in log and "\x07" not in log and "x?]0;owned??[2Jy" in log


def test_run_log_records_what_was_trusted(farm, work, inventory, provision):
    """provision.log names the server, the cipher agreed (AES-GCM first: an AEAD cipher spares
    paramiko a per-packet MAC check in Python) and the host key that was trusted."""
    import subprocess

    rec = recipe(work, [{"shell": "true"}])
    assert provision("h1", rec, inventory()).rc == 0
    line = next(text for text in _last_log(work, "h1").read_text().splitlines() if "connected:" in text)
    fingerprint = subprocess.run(["ssh-keygen", "-lf", f"{farm.host_keys[farm.addresses[0]]}.pub"],
                                 capture_output=True, text=True, check=True).stdout.split()[1]
    assert f"{farm.user}@{farm.addresses[0]}:{farm.port}" in line
    assert "OpenSSH" in line and "aes128-gcm@openssh.com" in line
    assert line.endswith(f"host key ssh-ed25519 {fingerprint}")


def test_a_var_that_cannot_render_fails_the_host_with_its_reason(farm, work, inventory,
                                                                 provision):
    rec = recipe(work, [{"shell": "echo {{ ratio }}"}], vars={"ratio": "{{ 1 // 0 }}"})
    result = provision("h1", rec, inventory())
    assert result.rc == 1
    step = result.host("h1")["steps"][0]
    assert step["name"] == "vars" and step["status"] == "failed"
    assert "cannot evaluate '1 // 0'" in step["message"] and "internal" not in step["message"]


def test_a_reader_that_goes_away_does_not_stop_the_run(farm, work, inventory):
    """`invoke provision ... | head -1`: once the pipe is closed the run still converges every
    host and writes its JSON, quietly, with exit status 0."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    rec = recipe(work, [{"name": f"s{i}", "shell": f"touch {work}/{{{{ host }}}}-{i}"}
                        for i in range(5)])
    out = work / "out.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "provision", "--host", "all",
         "--inventory", str(inventory()), "--recipe", str(rec), "--no-validate", "--json", str(out)],
        cwd=work, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # the reader leaves after the first line
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    hosts = json.loads(out.read_text())["hosts"]
    assert all(h["changed"] == 5 for h in hosts.values()) and len(hosts) == 4
    assert all((work / f"h{n}-4").exists() for n in range(1, 5))


def test_an_encrypted_identity_file_is_a_login_error(farm, work, inventory, provision,
                                                     monkeypatch):
    """A passphrase-protected key (without an agent) makes the host unreachable with the
    login reason, like any other login failure; never an internal error."""
    import subprocess

    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    key = work / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "a passphrase", "-f", str(key)],
                   check=True)
    inv = inventory(hosts={"h1": farm.host_entry(farm.addresses[0], identity_file=str(key))})
    result = provision("h1", recipe(work, [{"shell": "true"}]), inv)
    assert result.rc == 4
    host = result.host("h1")
    assert host["unreachable"] is True and host["steps"] == []
    assert "login as" in host["message"] and "encrypted" in host["message"], host["message"]


def test_a_hanging_unless_fails_its_step_not_the_host(farm, work, inventory, provision):
    """An `unless` that hangs rides with the facts, times out there, and the facts are then
    gathered alone: the steps before it run, the step itself fails with the timeout."""
    rec = recipe(work, [
        {"name": "first", "shell": f"touch {work}/first"},
        {"name": "stuck check", "shell": "true", "unless": "sleep 60"},
    ], vars={"cpus": "{{ facts.cpus }}"})
    result = provision("h1", rec, inventory(timeouts={"command": 2}))
    assert result.rc == 1
    assert result.statuses("h1") == ["changed", "failed"], result.out
    assert "timed out after 2 s" in result.host("h1")["steps"][1]["message"]
    assert (work / "first").exists()
    assert "gathering facts alone" in _last_log(work, "h1").read_text()


def test_the_ready_line_is_found_after_a_traced_copy_of_the_command():
    """A login shell with `set -x` echoes our command line, token included, to stderr before
    the real ready line: the PID must still be found, and the trace stays in stderr. (The
    exchange parses bytes; this is the one part tested without a server.)"""
    from remote.transport.base import _Exchange

    exchange = _Exchange("[p]", "[gpuprov-ready-ab12]", None, b"data", True, None)
    exchange.feed_stderr(b"+ exec /bin/sh -c 'printf '%s%s\\n' '[gpuprov-ready-ab12]' \"$$\"'\n")
    assert exchange.pid is None and not exchange.to_send
    exchange.feed_stderr(b"[gpuprov-ready-ab12]4242\nlater\n")
    assert exchange.pid == 4242 and exchange.announced
    assert exchange.stderr.kept().startswith(b"+ exec") and exchange.stderr.kept().endswith(b"later\n")


def test_validate_remembers_its_python_and_falls_back_when_it_is_gone(farm, work, inventory):
    """`validate_python` given once is written on the host and used by later runs without
    `--var`; a remembered python that no longer exists falls back to the host's default."""
    import pwd

    from tests.conftest import invoke

    inv = str(inventory())
    quick = ["--var", "validate_args=--checks system"]
    first = invoke("validate", "--host", "h1", "--inventory", inv, "--var",
                   "validate_python=/usr/bin/python3", *quick, cwd=work)
    assert "validate: python /usr/bin/python3" in first.out, first.out + first.err
    remembered = Path(pwd.getpwnam(farm.user).pw_dir) / ".gpuprov" / "h1" / "python"
    try:
        assert remembered.read_text() == "/usr/bin/python3\n"
        again = invoke("validate", "--host", "h1", "--inventory", inv, *quick, cwd=work)
        assert "validate: python /usr/bin/python3" in again.out, again.out + again.err
        remembered.write_text("/gone/venv/bin/python\n")
        fallback = invoke("validate", "--host", "h1", "--inventory", inv, *quick, cwd=work)
        assert "validate: python python3" in fallback.out, fallback.out + fallback.err
        assert fallback.rc == first.rc, "the same checks ran with the default python"
    finally:
        shutil.rmtree(remembered.parent, ignore_errors=True)  # the host's state we made


def test_a_step_still_running_after_a_second_is_announced(farm, work, inventory, provision):
    """A step that runs past a second gets a 'running' line on every host (the run-wide alarm
    thread); a quick one stays quiet, and an alarm cancelled once never fires later."""
    recipe = write_yaml(work / "r.yaml", {"steps": [
        {"name": "slow", "shell": "sleep 1.6"},
        {"name": "quick", "shell": "true"},
        {"name": "after", "shell": "sleep 1.2"}]})
    res = provision("h1,h2", recipe, inventory())
    assert res.rc == 0, res.out
    running = [line.split() for line in res.out.splitlines() if " running " in line]
    assert sorted(running) == [["h1", "running", "after"], ["h1", "running", "slow"],
                               ["h2", "running", "after"], ["h2", "running", "slow"]]
