"""The host checks through gpuprov on a sandbox host (tests/sandbox_fixture.py): the node
profile's `host` section given as an inventory var travels to the host, validate runs there
over a real read-only bind mount and a real sshd, and the findings come back in the run's
results.json and in the recap: a read-only mount is named with "remount", a stopped service is
named, a running one (sshd) is not."""
from __future__ import annotations

import json

from tests.conftest import invoke
from tests.sandbox_fixture import sandbox_hosts  # noqa: F401 - the fixture


def test_read_only_mount_and_stopped_service_named_through_gpuprov(sandbox_hosts, work):
    host = "sandbox2" if "sandbox2" in sandbox_hosts.names else "sandbox1"
    # a sandbox host cannot mount (no CAP_SYS_ADMIN); its /opt/wheels is a real read-only bind
    # mount of the machine's disk, its /dev/shm a writable tmpfs
    profile = {"host": {"mounts": ["/opt/wheels", "/dev/shm"], "services": ["sshd", "gpuprov-nosuchd"]}}
    val = invoke("validate", "--host", host, "--inventory", str(sandbox_hosts.inventory),
                 "--var", json.dumps({"node_profile": profile,
                                      "validate_args": "--device cpu --checks host_mounts,host_fill,host_services"}),
                 cwd=work, timeout=600)
    assert val.rc == 3, val.out + val.err  # validation failed, nothing else did
    run = sorted((work / "logs" / host).iterdir())[-1]
    checks = {c["name"]: c for c in json.loads((run / "results.json").read_text())["checks"]}
    mounts = checks["host_mounts"]
    assert mounts["status"] == "fail"
    assert mounts["reason"].startswith("/opt/wheels (ext4 on /dev/") and "is read-only" in mounts["reason"]
    assert "remount it read-write (mount -o remount,rw /opt/wheels)" in mounts["reason"]
    assert "/dev/shm" not in mounts["reason"]
    services = checks["host_services"]
    assert services["status"] == "fail" and "service gpuprov-nosuchd is not running" in services["reason"]
    assert "service sshd " not in services["reason"]
    assert checks["host_fill"]["status"] == "pass"
