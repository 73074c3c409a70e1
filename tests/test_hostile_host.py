"""A compromised host answering pulls with crafted output, over real OpenSSH.

The host here is an sshd whose login PATH starts with a folder of the test's own `readlink` and
`tar` (sshd_config `SetEnv PATH=...`): `readlink runs/latest` names the run the test chooses and
`tar -czf` answers with the archive the test crafted, as a compromised host's tools would. The
control side runs unchanged (`invoke logs`, `invoke validate` in a subprocess).
"""
from __future__ import annotations

import gzip
import io
import json
import os
import pwd
import secrets
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import REPO, invoke, write_yaml
from tests.procs import run_python_module_measured
from tests.sshd import shared_tmp

pytestmark = [pytest.mark.slow, pytest.mark.root]  # real sshd, started as root

ADDRESS = "127.0.0.41"
# Run ids as the control side makes them (remote/output/runlog.py new_run_id).
RUN1 = "20261122T055742.123Z-14af"
# The control process's peak memory while it refuses a hostile archive (`invoke logs` peaked at
# 46 MiB with a tiny archive, 66 MiB with the 10 MiB bomb, on the 2-core VM).
MAX_RSS_MIB = 150

READLINK = """#!/bin/sh
cat {tools}/latest
"""
# Packing (`tar -czf - -C DIR .`) answers with the crafted archive; unpacking the pushed
# validate package still works.
TAR = """#!/bin/sh
case "$1" in
  -czf) cat {tools}/answer.tgz ;;
  *) exec /usr/bin/tar "$@" ;;
esac
"""
# `validate_python`: writes nothing and succeeds at once (the archive is what matters).
PYTHON = "#!/bin/sh\nexit 0\n"


@pytest.fixture(scope="module")
def tools(farm):
    """The host's tools folder, first on its login PATH."""
    folder = shared_tmp("gpuprov-hostile-")
    for name, text in (("readlink", READLINK), ("tar", TAR), ("python", PYTHON)):
        (folder / name).write_text(text.format(tools=folder))
        os.chmod(folder / name, 0o755)
    farm.add_server(ADDRESS, SetEnv=f"PATH={folder}:/usr/local/bin:/usr/bin:/bin")
    yield folder
    farm.stop(ADDRESS)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def host(farm, work, tools):
    """(name, inventory): a host name of its own, so that ~/.gpuprov/NAME on the shared login
    user is this test's alone."""
    name = f"evil-{secrets.token_hex(3)}"
    inventory = write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)], "hosts": {name: farm.host_entry(ADDRESS)}})
    yield name, inventory
    shutil.rmtree(Path(pwd.getpwnam(farm.user).pw_dir) / ".gpuprov" / name, ignore_errors=True)


def answer(tools: Path, latest: str, files: dict) -> None:
    """What the host's readlink and tar will say."""
    (tools / "latest").write_text(latest + "\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    (tools / "answer.tgz").write_bytes(buffer.getvalue())


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


# (run id the host names, files of its archive, the innocent file it aims at, under logs/)
ATTACKS = [
    ("..", {f"h2/{RUN1}/results.json": b'{"forged": true}'}, f"h2/{RUN1}/results.json"),
    (".", {f"{RUN1}/results.json": b'{"forged": true}'}, f"{{host}}/{RUN1}/results.json"),
    (RUN1, {"results.json": b'{"forged": true}'}, f"{{host}}/{RUN1}/results.json"),
]


@pytest.mark.parametrize("run_id, files, victim", ATTACKS, ids=["parent", "same", "again"])
def test_logs_pull_cannot_touch_other_runs(host, tools, work, run_id, files, victim):
    """`invoke logs` names its destination after the host's `runs/latest`: `..` made it
    logs/ itself (another host's run deleted and a forged one planted), `.` the host's own
    folder (its earlier runs rewritten), and a run pulled before was replaced."""
    name, inventory = host
    target = work / "logs" / victim.format(host=name)
    target.parent.mkdir(parents=True)
    target.write_bytes(b'{"innocent": true}')
    before = tree(work / "logs")
    answer(tools, run_id, files)
    result = invoke("logs", "--host", name, "--inventory", str(inventory), cwd=work)
    assert result.rc == 1, result.out + result.err
    assert tree(work / "logs") == before
    reason = "already exists" if run_id == RUN1 else "is not one gpuprov makes"
    assert reason in result.out, result.out


def test_a_pulled_provision_log_cannot_replace_the_control_sides(host, tools, work):
    """`invoke validate` records the run in logs/<host>/<run>/provision.log, then pulls the
    host's output into the same folder: a provision.log in the host's archive replaced it."""
    name, inventory = host
    answer(tools, RUN1, {"results.json": json.dumps({"checks": [], "ok": True}).encode(),
                         "provision.log": b"every step ok, validated\n"})
    result = invoke("validate", "--host", name, "--inventory", str(inventory),
                    "--var", f"validate_python={tools}/python", cwd=work)
    assert result.rc == 1, result.out + result.err
    assert "provision.log, which only the control side writes" in result.out, result.out
    [run] = (work / "logs" / name).iterdir()
    assert sorted(p.name for p in run.iterdir()) == ["provision.log"]
    log = (run / "provision.log").read_text()
    assert f"run {run.name} on {name}" in log and "every step ok" not in log


def ten_gib_of_zeros() -> bytes:
    """A 10 MiB archive of one 10 GiB file of zeros (gzip members back to back)."""
    info = tarfile.TarInfo("./bench_torch.log")
    info.size = 10 << 30
    mib = gzip.compress(bytes(1 << 20), compresslevel=9)
    return b"".join([gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT))] + [mib] * 10240
                    + [gzip.compress(bytes(1024))])


def sparse_gib(folder: Path) -> bytes:
    """A tarball (GNU tar --sparse) of a 1 GiB results.json that is all hole: a few hundred
    bytes that unpacked to 1 GiB every later reader read whole."""
    folder.mkdir()
    with open(folder / "results.json", "wb") as handle:
        handle.truncate(1 << 30)
    return subprocess.run(["tar", "--sparse", "-czf", "-", "-C", str(folder), "."],
                          capture_output=True, check=True).stdout


@pytest.mark.parametrize("archive, reason", [
    (lambda work: ten_gib_of_zeros(), "unpacks to 10240 MiB, over the 256 MiB allowed per file"),
    (lambda work: sparse_gib(work / "sparse"), "sparse file: './results.json'"),
], ids=["10 GiB bomb", "1 GiB sparse"])
def test_oversized_archives_are_refused_before_writing(host, tools, work, archive, reason):
    """The host answers `invoke logs` with an archive that unpacks far beyond its size:
    refused from its headers, nothing written, the control process's memory bounded."""
    name, inventory = host
    (tools / "latest").write_text(RUN1 + "\n")
    (tools / "answer.tgz").write_bytes(archive(work))
    rc, out, err, _, rss = run_python_module_measured(
        "invoke", ["--search-root", str(REPO), "logs", "--host", name,
                   "--inventory", str(inventory)],
        work / "peak_kib", env={"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"]},
        cwd=str(work), timeout=120)
    assert rc == 1, (rc, out, err)
    assert reason in out, out
    assert tree(work / "logs") == {name: None}, "only the host's folder, empty"
    assert rss < MAX_RSS_MIB, f"peak RSS {rss:.0f} MiB"
    print(f"peak RSS {rss:.0f} MiB")
