"""End to end on throwaway Debian 12 sandbox hosts: real apt, real pip, real sudo, real reboots,
validation pushed, run and pulled back. (The apt route against a stand-in NVIDIA repository is in
test_apt_route.py.)"""
from __future__ import annotations

import json
import shlex

from remote import sandbox
from tests.conftest import REPO, invoke, write_yaml
from tests.sandbox_fixture import sandbox_hosts  # noqa: F401 - the fixture

WHEELS = str(REPO / "playbooks" / "cuda-wheels.yaml")
VENV_PYTHON = "/home/admin/.gpuprov/venv/bin/python"


def _json(path):
    return json.loads(path.read_text())["hosts"]


def test_cuda_wheels_provision_validate_and_rerun(sandbox_hosts, work):
    """The main line: provision with the no-root route, validation pulled into logs/."""
    inv = str(sandbox_hosts.inventory)
    common = ["--inventory", inv, "--recipe", WHEELS, "--var", "cuda_version=13.0",
              "--var", "with_torch=false"]
    first = invoke("provision", "--host", "sandbox1", *common, "--json", str(work / "1.json"),
                   cwd=work, timeout=900)
    host = _json(work / "1.json")["sandbox1"]
    assert host["failed"] == 0 and host["unreachable"] is False, first.out + first.err
    # No GPU in a sandbox: validation runs, compiles the cuDNN sample, and cannot pass.
    assert first.rc == 3  # validation failed, every step succeeded
    assert "not validated" in host["validation"] or "failed:" in host["validation"]
    assert "validation" in first.out and "sandbox1" in first.out
    runs = sorted((work / "logs" / "sandbox1").iterdir())
    assert len(runs) == 1
    run = runs[0]
    assert (run / "provision.log").exists() and (run / "validate.log").exists()
    checks = {c["name"]: c for c in json.loads((run / "results.json").read_text())["checks"]}
    assert checks["cudnn_compile"]["status"] == "pass", checks["cudnn_compile"]
    assert checks["cudnn_sample"]["status"] == "fail"
    assert checks["cudnn_sample"]["reason"], "the failure says why (no driver / no GPU)"
    assert checks["torch_import"]["status"] == "fail" and "not installed" in checks["torch_import"]["reason"]

    again = invoke("provision", "--host", "sandbox1", *common, "--no-validate",
                   "--json", str(work / "2.json"), cwd=work, timeout=600)
    assert again.rc == 0, again.out + again.err
    assert _json(work / "2.json")["sandbox1"]["changed"] == 0

    # `invoke validate` alone uses the venv's python that provisioning remembered on the host,
    # and `invoke logs` fetches its output again.
    val = invoke("validate", "--host", "sandbox1", "--inventory", inv, cwd=work, timeout=900)
    assert val.rc == 3 and "cudnn_sample" in val.out
    assert f"validate: python {VENV_PYTHON}" in val.out, val.out
    assert len(list((work / "logs" / "sandbox1").iterdir())) == 3
    fetched = invoke("logs", "--host", "sandbox1", "--inventory", inv, cwd=work / "logs",
                     timeout=120)
    assert fetched.rc == 0, fetched.out + fetched.err
    pulled = list((work / "logs" / "logs" / "sandbox1").iterdir())
    assert len(pulled) == 1 and (pulled[0] / "results.json").exists()


def test_site_does_nothing_without_a_gpu_unless_asked(sandbox_hosts, work):
    result = invoke("provision", "--host", "sandbox2", "--inventory", str(sandbox_hosts.inventory),
                    "--recipe", str(REPO / "playbooks" / "site.yaml"), "--no-validate",
                    "--json", str(work / "g.json"), cwd=work, timeout=300)
    assert result.rc == 0, result.out + result.err
    assert "no NVIDIA GPU found (lspci): nothing to install" in result.out
    counts = _json(work / "g.json")["sandbox2"]
    assert (counts["ok"], counts["changed"], counts["failed"]) == (1, 0, 0)


def test_site_check_plans_cleanly_without_a_gpu(sandbox_hosts, work):
    result = invoke("provision", "--host", "sandbox2", "--inventory", str(sandbox_hosts.inventory),
                    "--recipe", str(REPO / "playbooks" / "site.yaml"), "--check",
                    "--var", "allow_without_gpu=true",
                    "--var", "cuda_keyring_sha256=" + "0" * 64, "--json", str(work / "c.json"),
                    cwd=work, timeout=300)
    assert result.rc == 0, result.out + result.err
    steps = _json(work / "c.json")["sandbox2"]["steps"]
    statuses = {s["name"]: s["status"] for s in steps}
    assert statuses["Driver branch 580 (nvidia-open), held"] == "skipped"
    assert statuses["CUDA toolkit 12.8"] == "changed"
    assert "apt-get install cuda-toolkit-12-8" in result.out
    assert "debian12/x86_64/cuda-keyring_1.1-1_all.deb" in result.out


def test_reboot_handler_waits_for_a_new_boot_id(sandbox_hosts, work):
    rec = write_yaml(work / "reboot.yaml", {
        "steps": [{"name": "kernel option", "become": True, "notify": "reboot",
                   "file": {"path": "/var/tmp/gpuprov-reboot-test", "content": "x\n"}}],
        "handlers": {"reboot": {"reboot": {"timeout": 60}, "become": True}}})
    before = sandbox.boot_id(sandbox_hosts.state_dir, "sandbox2")
    args = ["--host", "sandbox2", "--inventory", str(sandbox_hosts.inventory), "--recipe", str(rec),
            "--no-validate", "--json", str(work / "r.json")]
    first = invoke("provision", *args, cwd=work, timeout=180)
    assert first.rc == 0, first.out + first.err
    steps = _json(work / "r.json")["sandbox2"]["steps"]
    assert [s["status"] for s in steps] == ["changed", "changed"]
    after = sandbox.boot_id(sandbox_hosts.state_dir, "sandbox2")
    assert after != before
    # Nothing changed, so no reboot: the boot_id stays.
    second = invoke("provision", *args, cwd=work, timeout=180)
    assert second.rc == 0 and _json(work / "r.json")["sandbox2"]["changed"] == 0
    assert sandbox.boot_id(sandbox_hosts.state_dir, "sandbox2") == after


def test_sudo_with_a_password(sandbox_hosts, work):
    """become through a sudo that wants a password: right, wrong, and none."""
    password = "s3cret-PW-7f3a"
    setup = write_yaml(work / "setup.yaml", {"steps": [
        {"shell": "id pwuser || useradd -m -s /bin/sh pwuser", "become": True,
         "changed_when": False},
        {"shell": f"echo 'pwuser:{password}' | chpasswd", "become": True},
        {"file": {"path": "/etc/sudoers.d/pwuser", "content": "pwuser ALL=(ALL) ALL\n",
                  "mode": "0440"}, "become": True},
        {"shell": "install -d -o pwuser -m 700 /home/pwuser/.ssh && install -o pwuser -m 600 "
                  "/home/admin/.ssh/authorized_keys /home/pwuser/.ssh/authorized_keys",
         "become": True},
    ]})
    inv = str(sandbox_hosts.inventory)
    assert invoke("provision", "--host", "sandbox2", "--inventory", inv, "--recipe", str(setup),
                  "--no-validate", cwd=work).rc == 0
    host = dict(sandbox_hosts.hosts["sandbox2"], user="pwuser", become=True)
    pw_inv = write_yaml(work / "pw.yaml", {"known_hosts": [str(sandbox_hosts.known_hosts)],
                                           "hosts": {"pw": host}})
    rec = write_yaml(work / "become.yaml", {"steps": [
        {"shell": "id -u > /var/tmp/whoami-root", "become": True},
        {"shell": "cat /etc/shadow | head -c 1 >/dev/null", "become": True}]})
    args = ["--host", "pw", "--inventory", str(pw_inv), "--recipe", str(rec), "--no-validate",
            "--json", str(work / "b.json")]

    right = invoke("provision", *args, cwd=work, env={"GPUPROV_BECOME_PASSWORD": password})
    assert right.rc == 0, right.out + right.err
    assert sandbox_hosts.run("sandbox2", "cat /var/tmp/whoami-root")[1].strip() == "0"
    wrong = invoke("provision", *args, cwd=work, env={"GPUPROV_BECOME_PASSWORD": "nope-nope"})
    assert wrong.rc == 1 and "rejected the become password" in wrong.out
    missing = invoke("provision", *args, cwd=work, env={"GPUPROV_BECOME_PASSWORD": ""})
    assert missing.rc == 1 and "needs a password" in missing.out
    # The password is never shown or written anywhere.
    outputs = {"stdout": right.out, "stderr": right.err, "wrong stdout": wrong.out,
               "json": (work / "b.json").read_text()}
    for log in (work / "logs" / "pw").rglob("*.log"):
        outputs[str(log)] = log.read_text()
    assert len(outputs) == 7, outputs.keys()  # three runs' provision.log files were read too
    leaked = [name for name, text in outputs.items() if password in text]
    assert leaked == []


def test_apt_waits_for_the_dpkg_lock_then_proceeds(sandbox_hosts, work):
    """Another process (as cloud-init or unattended-upgrades would) holds dpkg's frontend lock
    inside a sandbox host; the apt step waits for it, bounded, then installs."""
    hold_s = 8
    holder = ("import fcntl, time\n"
              "f = open('/var/lib/dpkg/lock-frontend', 'w')\n"
              "fcntl.lockf(f, fcntl.LOCK_EX)\n"
              "open('/var/tmp/gpuprov-lock-held', 'w').close()\n"
              f"time.sleep({hold_s})\n")
    sandbox_hosts.run("sandbox2", "sudo -n rm -f /var/tmp/gpuprov-lock-held; "
                      "sudo -n apt-get remove -y -q hello >/dev/null 2>&1; true", timeout=120)
    rc, _, err = sandbox_hosts.run(
        "sandbox2", f"sudo -n nohup python3 -c {shlex.quote(holder)} "
                    ">/dev/null 2>&1 & for i in $(seq 50); do "
                    "[ -e /var/tmp/gpuprov-lock-held ] && exit 0; sleep 0.1; done; exit 1")
    assert rc == 0, "the lock holder started"
    rec = write_yaml(work / "lock.yaml", {"steps": [
        {"name": "hello", "apt": {"packages": ["hello"], "update_cache": True, "lock_timeout": 120},
         "become": True}]})
    result = invoke("provision", "--host", "sandbox2", "--inventory", str(sandbox_hosts.inventory),
                    "--recipe", str(rec), "--no-validate", "--json", str(work / "l.json"),
                    cwd=work, timeout=300)
    try:
        assert result.rc == 0, result.out + result.err
        step = _json(work / "l.json")["sandbox2"]["steps"][0]
        assert step["status"] == "changed"
        log = next((work / "logs" / "sandbox2").iterdir()) / "provision.log"
        assert "Waiting for cache lock" in log.read_text() or step["elapsed_s"] >= hold_s - 3
        assert sandbox_hosts.run("sandbox2", "dpkg-query -W -f='${Status}' hello")[1] == \
            "install ok installed"
    finally:
        sandbox_hosts.run("sandbox2", "sudo -n apt-get remove -y -q hello >/dev/null 2>&1; "
                          "sudo -n rm -f /var/tmp/gpuprov-lock-held", timeout=120)
