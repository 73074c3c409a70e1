"""`gpuprov evidence` and the evidence after an RMA verdict (issue 34, item 3), over real OpenSSH.

The host is an sshd on loopback whose login PATH starts with a folder of the test's own tools
(sshd_config `SetEnv PATH=...`, tests/sshd.py server_with_tools):

- `nvidia-bug-report.sh` is a STAND-IN written by this test: NVIDIA's real script needs a GPU,
  its driver and root. It takes the real script's options (`--output-file FILE` writes
  FILE.gz, `--safe-mode`; validate/evidence.py cites them), records each call, and hangs in its
  full run while the test asks it to (`hang` in the tools folder).
- `nvidia-smi` is a stand-in too; `-q` prints a real H100's `nvidia-smi -q`
  (tests/fixtures/validate/h100_590_smi_q.txt, captured on a real machine: its SOURCES.md).
- `tar` is the real one, except that packing answers with an archive the test crafted when one
  is there (`pack`), as a compromised host's tar would.

Everything else is real: the control side (remote/commands/ in this process), the validate package
pushed and run with the host's python3 (validate/evidence.py, and `python -m validate` for the
RMA verdict, which reads a kernel log the test wrote with a real Xid line's shape).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from remote.commands import evidence as evidence_cmd
from remote.commands import provision as provision_cmd
from remote.commands import validate as validate_cmd
from remote.evidence import RMA
from remote.report import build_report
from tests import tarcraft
from tests.conftest import REPO, write_yaml
from tests.procs import kill_pids, sigint_as_in_a_terminal, wait_gone, wait_until
from tests.sshd import TEST_USER, server_with_tools

pytestmark = [pytest.mark.slow, pytest.mark.root]  # real sshd, started as root

ADDRESS = "127.0.0.94"
SMI_Q = REPO / "tests" / "fixtures" / "validate" / "h100_590_smi_q.txt"
FIXTURE = REPO / "tests" / "fixtures" / "evidence" / "manifest_standin.json"
# The real capture's masked serial (SMI_Q line 26): the archive is named after it.
SERIAL = "0000000000000"
RUN0 = "20261101T000000.000Z-0e0e"  # an earlier run this side holds for the host
# Xid 168's action is drain and replace (RMA) in validate/driver_errors.py; the line's shape is
# the driver's ("NVRM: Xid (PCI:...): N, ...", tests/fixtures/validate/kernel_xid_lines.txt).
RMA_LINE = "NVRM: Xid (PCI:0000:44:00): 168, reduced GPU memory capacity"

# STAND-IN for NVIDIA's nvidia-bug-report.sh (see the module's doc).
BUG_REPORT = """#!/bin/sh
out=nvidia-bug-report.log; safe=0
while [ $# -gt 0 ]; do
  case "$1" in --output-file) out=$2; shift;; --safe-mode) safe=1;; esac; shift
done
echo "safe=$safe pid=$$" >> {tools}/calls
if [ $safe = 0 ] && [ -e {tools}/hang ]; then sleep 600; fi
printf 'stand-in nvidia-bug-report.log, safe mode %s\\n' $safe | gzip -n > "$out.gz"
"""
SMI = """#!/bin/sh
[ "$1" = -q ] && exec cat {tools}/smi_q.txt
exit 9
"""
TAR = """#!/bin/sh
case "$1" in
  -czf) [ -e {tools}/pack ] && exec cat {tools}/pack ;;
esac
exec /usr/bin/tar "$@"
"""


@pytest.fixture(scope="module")
def tools(farm):
    crafted = {"nvidia-bug-report.sh": BUG_REPORT, "nvidia-smi": SMI, "tar": TAR}
    with server_with_tools(farm, ADDRESS, crafted, "gpuprov-evidence-") as folder:
        shutil.copyfile(SMI_Q, folder / "smi_q.txt")
        os.chmod(folder / "smi_q.txt", 0o644)
        yield folder


@pytest.fixture
def host(farm, work, tools):
    """(name, inventory): a host of its own name, whose validation reads a kernel log with an
    Xid whose action is RMA; the tools reset after the test."""
    name = f"gpu-{secrets.token_hex(3)}"
    kernel_log = work / "kern.log"
    kernel_log.write_text(f"[ 12.000000] {RMA_LINE}\n[ 13.000000] unrelated line\n")
    os.chmod(kernel_log, 0o644)
    entry = farm.host_entry(ADDRESS, vars={"validate_args": f"--checks xid --kernel-log {kernel_log}"})
    inventory = write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)], "hosts": {name: entry}})
    yield name, inventory
    for leftover in ("hang", "pack", "calls"):
        (tools / leftover).unlink(missing_ok=True)
    if (tools / "hidden-bug-report.sh").exists():
        os.replace(tools / "hidden-bug-report.sh", tools / "nvidia-bug-report.sh")
    shutil.rmtree(gpuprov_folder(name), ignore_errors=True)


def gpuprov_folder(name: str) -> Path:
    """The host's ~/.gpuprov/<name> (the farm's login user)."""
    return Path(pwd.getpwnam(TEST_USER).pw_dir) / ".gpuprov" / name


def earlier_run(work: Path, name: str) -> Path:
    """An earlier run's folder this side holds for the host: results.json and stack.json."""
    folder = work / "logs" / name / RUN0
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"ok": False, "action": RMA, "checks": []}))
    (folder / "stack.json").write_text(json.dumps({"packages": {}, "apt": {}}))
    return folder


def evidence(work, inventory, name, capsys, **kwargs):
    rc = evidence_cmd.run(host=name, inventory=str(inventory), logs_dir=str(work / "logs"), **kwargs)
    out = capsys.readouterr()
    return rc, out.out + out.err


def archives(work: Path, name: str) -> list[Path]:
    return sorted((work / "logs" / name).glob("*/evidence-*.tar.gz"))


def members(archive: Path) -> dict:
    """name -> bytes (None for a folder), in the archive's order."""
    with tarfile.open(archive) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else None) for m in tar}


def manifest_of(archive: Path) -> dict:
    stem = archive.name[:-len(".tar.gz")]
    return json.loads(members(archive)[f"{stem}/manifest.json"])


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def shape(manifest: dict) -> dict:
    """The manifest without what changes from run to run (times, hashes, paths, the host)."""
    return {"schema": manifest["schema"], "tool": manifest["tool"], "gpus": manifest["gpus"],
            "bug_report_mode": manifest["bug_report"]["mode"],
            "bug_report_runs": [r["mode"] for r in manifest["bug_report"]["runs"]],
            "xid_lines": manifest["xid"]["lines"],
            "files": [f["name"] for f in manifest["files"]],
            "missing": [m["name"] for m in manifest["missing"]]}


def test_evidence_gathers_the_bug_report_identities_xids_and_last_results(host, tools, work, capsys):
    """`gpuprov evidence` on a host with the stand-in script: one archive named after the GPU's
    serial, its manifest first, listing every file with its sha256; the identities are the
    real capture's; the Xid line is the kernel log's; results.json and stack.json are the
    last ones this side holds; nothing is left on the host or in hidden folders."""
    name, inventory = host
    earlier = earlier_run(work, name)
    rc, out = evidence(work, inventory, name, capsys)
    assert rc == 0, out
    [archive] = archives(work, name)
    assert archive.name == f"evidence-{name}-{SERIAL}.tar.gz"
    assert archive.parent.name != RUN0, "the archive goes into this run's folder"
    stem = archive.name[:-len(".tar.gz")]
    files = members(archive)
    assert list(files)[:2] == [stem, f"{stem}/manifest.json"], list(files)
    manifest = json.loads(files[f"{stem}/manifest.json"])
    gpu = manifest["gpus"][0]
    assert (gpu["serial"], gpu["uuid"], gpu["board_part_number"], gpu["vbios"]) == (
        SERIAL, "GPU-00000000-0000-0000-0000-000000000000", "692-2G520-0200-000", "96.00.A5.00.01")
    assert gzip.decompress(files[f"{stem}/nvidia-bug-report.log.gz"]) == \
        b"stand-in nvidia-bug-report.log, safe mode 0\n"
    assert files[f"{stem}/xid.log"].decode() == f"[ 12.000000] {RMA_LINE}\n"
    assert files[f"{stem}/results.json"] == (earlier / "results.json").read_bytes()
    assert files[f"{stem}/stack.json"] == (earlier / "stack.json").read_bytes()
    for entry in manifest["files"]:
        data = files[f"{stem}/{entry['name']}"]
        assert (entry["bytes"], entry["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    assert manifest["missing"] == [] and manifest["bug_report"]["mode"] == "full"
    assert shape(manifest) == shape(json.loads(FIXTURE.read_text())), "the README shows the fixture"
    assert f"evidence in {archive}" in out, out
    print(out)
    assert not list((work / "logs").rglob(".evidence")), "no hidden folder left"
    assert not list(gpuprov_folder(name).glob("evidence-*")), "the host's working folder is removed"
    # the report tells the evidence run apart: no "run without validation results"
    notes = build_report(work / "logs").notes
    assert f"1 evidence run(s) (gpuprov evidence): archives, no figures ({name})" in notes, notes
    assert not any("without validation results" in n for n in notes), notes


def test_a_hung_full_run_is_killed_and_safe_mode_gives_the_report(host, tools, work, capsys):
    """The full run of nvidia-bug-report.sh hangs: after --bug-report-timeout it is killed,
    its children too, and the --safe-mode run's report is the one kept; the manifest says so."""
    name, inventory = host
    (tools / "hang").touch()
    start = time.monotonic()
    rc, out = evidence(work, inventory, name, capsys, bug_report_timeout=3)
    took = time.monotonic() - start
    assert rc == 0, out
    [archive] = archives(work, name)
    stem = archive.name[:-len(".tar.gz")]
    manifest = manifest_of(archive)
    runs = manifest["bug_report"]["runs"]
    assert [r["mode"] for r in runs] == ["full", "safe-mode"] and manifest["bug_report"]["mode"] == "safe-mode"
    assert runs[0]["rc"] is None and runs[0]["why"] == "hung: killed after 3 s", runs
    assert gzip.decompress(members(archive)[f"{stem}/nvidia-bug-report.log.gz"]) == \
        b"stand-in nvidia-bug-report.log, safe mode 1\n"
    calls = (tools / "calls").read_text().split()
    assert [c for c in calls if c.startswith("safe=")] == ["safe=0", "safe=1"]
    hung = int([c for c in calls if c.startswith("pid=")][0][4:])
    assert not Path(f"/proc/{hung}").exists(), "the hung script was killed"
    assert took < 30, f"bounded: {took:.1f} s"  # 3 s of hang, the rest is SSH and python starts
    print(f"evidence with a hung full run: {took:.1f} s")


def test_a_host_without_the_script_still_gives_the_rest(host, tools, work, capsys):
    """No nvidia-bug-report.sh on the host (no driver): the archive holds everything else and
    the manifest, and the recap, say what is missing and why."""
    name, inventory = host
    assert not Path("/usr/bin/nvidia-bug-report.sh").exists(), "the host must lack the script"
    os.replace(tools / "nvidia-bug-report.sh", tools / "hidden-bug-report.sh")
    earlier_run(work, name)
    rc, out = evidence(work, inventory, name, capsys)
    assert rc == 0, out
    [archive] = archives(work, name)
    manifest = manifest_of(archive)
    assert manifest["missing"] == [{"name": "nvidia-bug-report.log.gz", "why": (
        "nvidia-bug-report.sh not installed with this driver (nvidia-smi is there; driver images "
        "without the NVIDIA utilities lack it)")}]
    assert [f["name"] for f in manifest["files"]] == ["nvidia-smi-q.txt", "results.json", "stack.json",
                                                      "xid.log"]
    assert manifest["gpus"][0]["serial"] == SERIAL
    assert "missing: nvidia-bug-report.log.gz" in out, out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_mid_gather_leaves_nothing_on_the_host(host, tools, work, sig):
    """Ctrl-C (or SIGTERM) while the host gathers (its full bug report hangs): exit 130, the
    collector stopped, and the host's working folder (~/.gpuprov/<host>/evidence-<run>/, with
    the results pushed and the package unpacked) removed. It stayed behind, half-gathered: the
    clean-up's own command was stopped by the same cancel."""
    name, inventory = host
    (tools / "hang").touch()
    earlier_run(work, name)
    calls = tools / "calls"
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "evidence", "--host", name,
         "--inventory", str(inventory)], cwd=work, env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=sigint_as_in_a_terminal)
    hung = None
    try:
        assert wait_until(lambda: calls.exists() and "pid=" in calls.read_text(), 60), \
            "the bug report never started"
        hung = int(calls.read_text().split("pid=")[1].split()[0])
        [stage] = gpuprov_folder(name).glob("evidence-*")
        assert (stage / "in" / "results.json").is_file() and (stage / "pkg").is_dir()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        gone = hung is None or wait_gone(hung, 10)
        if not gone:
            kill_pids([hung])
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "Traceback" not in err and "interrupted" in out, out + err
    assert gone, "the hung bug report was left running"
    assert not list(gpuprov_folder(name).glob("evidence-*")), "the host's working folder is removed"


def tarball(entries) -> bytes:
    """A gzip tarball of (TarInfo, bytes or None) entries, as a hostile host would craft it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def file_info(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def link_info(name: str, target: str, kind=tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def inner_manifest(host_stem: str = "") -> bytes:
    """A manifest listing xid.log ("log\n"); with `host_stem` (`evidence-<host>-<SERIAL>`),
    also that host and its GPU, as the collector writes them."""
    data = b"log\n"
    manifest: dict = {"files": [{"name": "xid.log", "bytes": len(data),
                                 "sha256": hashlib.sha256(data).hexdigest()}]}
    if host_stem:
        manifest.update(host=host_stem[len("evidence-"):-len(SERIAL) - 1], gpus=[{"serial": SERIAL}])
    return json.dumps(manifest).encode()


def inner(stem: str, extra, host_stem: str = "") -> bytes:
    """An evidence archive whose manifest lists its one file, plus the `extra` entries."""
    return tarball([(file_info(f"{stem}/manifest.json"), inner_manifest(host_stem)),
                    (file_info(f"{stem}/xid.log"), b"log\n")] + extra)


def a_stem(stem: str) -> str:
    """`evidence-<host>-a-<serials>` for `evidence-<host>-<serials>`: checked by prefix, it was
    taken as this host's (issue 41, attack 8)."""
    return stem[:-len(SERIAL)] + "a-" + SERIAL


def hidden_behind(stem: str) -> bytes:
    """The honest archive's members, then a header whose uid reads `0 00000` (tarfile stopped
    there without an error; GNU tar reads on: tests/tarcraft.py) and what it hid: another
    xid.log, a file the manifest does not list, a link to /etc/shadow."""
    forged = b"forged\n"
    body = tarcraft.members_of(gzip.decompress(inner(stem, [], stem))) + b"".join([
        tarcraft.member(f"{stem}/xid.log", forged, tarcraft.bad_uid(tarcraft.header(f"{stem}/xid.log", len(forged)))),
        tarcraft.member(f"{stem}/planted.sh", b"#!/bin/sh\n"),
        tarcraft.header(f"{stem}/shadow", 0, tarfile.SYMTYPE, linkname="/etc/shadow")])
    return gzip.compress(body + tarcraft.end(written=len(body)))


OTHER = f"evidence-gpu-other-{SERIAL}"  # another host's name
HOSTILE = {
    # the folder the host sends
    "outer link": (lambda STEM: tarball([(link_info(f"./{STEM}.tar.gz", "/etc/passwd"), None)]),
                   "has a link or device"),
    "outer ../": (lambda STEM: tarball([(file_info(f"./../../escape/{STEM}.tar.gz"), b"x")]),
                  "has an unsafe path"),
    "outer hard link": (lambda STEM: tarball([(link_info(f"./{STEM}.tar.gz", "/etc/shadow", tarfile.LNKTYPE), None)]),
                        "has a link or device"),
    "outer oversize": (lambda STEM: tarball([(file_info(f"./{STEM}.tar.gz"), os.urandom(3 << 20))]),
                       "over the 1 MiB allowed (GPUPROV_PULL_MAX_ARCHIVE_BYTES)"),
    "not an archive's name": (lambda STEM: tarball([(file_info("./results.json"), b"{}")]),
                              "not one evidence-<host>-<serials>.tar.gz"),
    "another host's archive": (lambda STEM: tarball([(file_info(f"./{OTHER}.tar.gz"), inner(OTHER, []))]),
                               "not one evidence-<host>-<serials>.tar.gz"),
    # the evidence archive inside it
    "inner link": (lambda STEM: tarball([(file_info(f"./{STEM}.tar.gz"), inner(STEM, [
        (link_info(f"{STEM}/stack.json", "/etc/passwd"), None)]))]), "has a link or device"),
    "inner ../": (lambda STEM: tarball([(file_info(f"./{STEM}.tar.gz"), inner(STEM, [
        (file_info(f"{STEM}/../../../../escape"), b"x")]))]), "has an unsafe path"),
    "inner unlisted file": (lambda STEM: tarball([(file_info(f"./{STEM}.tar.gz"), inner(STEM, [
        (file_info(f"{STEM}/planted.sh"), b"x")]))]), "does not match its files"),
    # issue 41: members hidden from Python's tarfile behind a header it gave up on (GNU tar,
    # which reads on, extracted them from the archive gpuprov kept), and a name that only
    # begins like this host's
    "inner hidden behind a malformed header": (lambda STEM: tarball([(file_info(f"./{STEM}.tar.gz"),
                                                                      hidden_behind(STEM))]),
                                               "has a malformed uid field b'0 00000\\x00' in the header of: "
                                               "'{STEM}/xid.log'"),
    "a name that only begins with the host's": (
        lambda STEM: tarball([(file_info(f"./{a_stem(STEM)}.tar.gz"), inner(a_stem(STEM), [], STEM))]),
        "not one evidence-<host>-<serials>.tar.gz of"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_archive_is_refused_with_nothing_written_outside(host, tools, work, capsys,
                                                                   monkeypatch, case):
    """The host answers the pull with a crafted archive: a link, `..` names, one over the cap,
    a wrong name, or an evidence archive holding a link, `..` names or a file its manifest does
    not list. Refused with the reason; the run folder holds only the run log, nothing is
    written anywhere else, and no hidden folder is left."""
    name, inventory = host
    crafted, reason = HOSTILE[case]
    reason = reason.replace("{STEM}", f"evidence-{name}-{SERIAL}")
    (tools / "pack").write_bytes(crafted(f"evidence-{name}-{SERIAL}"))
    os.chmod(tools / "pack", 0o644)
    monkeypatch.setenv("GPUPROV_PULL_MAX_ARCHIVE_BYTES", str(1 << 20))
    before = tree(work)
    rc, out = evidence(work, inventory, name, capsys)
    assert rc == 1, out  # not collected: 1 (remote/ground/exitcodes.py); no validation failed (3)
    assert reason in out, out
    [run] = list((work / "logs" / name).iterdir())
    assert tree(run) == ["provision.log"], tree(run)
    assert [p for p in tree(work) if p not in before] == [
        "logs", f"logs/{name}", f"logs/{name}/{run.name}", f"logs/{name}/{run.name}/provision.log"]
    assert not (Path("/tmp") / "escape").exists() and not (work / "escape").exists()


def test_evidence_not_collected_exits_1_before_an_unreachable_hosts_4(host, tools, work, capsys,
                                                                      farm):
    """The exit status of `gpuprov evidence` (remote/ground/exitcodes.py, docs/reference/exit-codes.md):
    evidence that could not be collected is a failed step's 1, not "validation failed" (3: no
    validation ran), and it comes before another host's "unreachable" (4), as 1 comes before 4.
    Alone, the unreachable host gives 4."""
    name, inventory = host
    (tools / "pack").write_bytes(b"not an archive")
    os.chmod(tools / "pack", 0o644)
    data = yaml.safe_load(inventory.read_text())
    data["hosts"]["gone"] = {"address": "127.0.0.99", "port": 1}  # nothing listens there
    both = write_yaml(work / "both.yaml", data)
    rc, out = evidence(work, both, "all", capsys)
    assert rc == 1, out
    assert "evidence not collected" in out and "unreachable" in out, out
    rc, out = evidence(work, both, "gone", capsys)
    assert rc == 4, out


def test_an_rma_verdict_brings_the_evidence_and_no_evidence_leaves_it(host, tools, work, capsys):
    """`validate` on a host whose kernel log has an Xid whose action is drain and replace
    (RMA): the run's folder gains the evidence archive, holding that run's results.json and
    stack.json, and the recap and `--json` say where it is. With --no-evidence it does not."""
    name, inventory = host
    rc = validate_cmd.run(host=name, inventory=str(inventory), logs_dir=str(work / "logs"),
                      json_path=str(work / "result.json"))
    out = capsys.readouterr().out
    assert rc == 3, out
    [archive] = archives(work, name)
    assert json.loads((work / "result.json").read_text())["hosts"][name]["evidence"] == str(archive)
    run = archive.parent
    assert json.loads((run / "results.json").read_text())["action"] == RMA
    stem = archive.name[:-len(".tar.gz")]
    files = members(archive)
    assert files[f"{stem}/results.json"] == (run / "results.json").read_bytes()
    assert files[f"{stem}/stack.json"] == (run / "stack.json").read_bytes()
    assert f"{name}: {RMA}: evidence in {archive}" in out, out

    rc = validate_cmd.run(host=name, inventory=str(inventory), logs_dir=str(work / "logs"), evidence=False,
                      json_path=str(work / "result.json"))
    out = capsys.readouterr().out
    assert rc == 3, out
    assert archives(work, name) == [archive], "no second archive"
    assert "evidence" not in json.loads((work / "result.json").read_text())["hosts"][name]
    assert "evidence" not in out.replace("--no-evidence", ""), out


def test_provision_brings_the_evidence_after_its_validations_rma_verdict(host, tools, work, capsys):
    """`provision` validates after its steps: the same RMA verdict brings the evidence into
    that run's folder."""
    name, inventory = host
    recipe = write_yaml(work / "recipe.yaml", {"steps": [{"name": "nothing", "shell": "true"}]})
    rc = provision_cmd.run(host=name, recipe=str(recipe), inventory=str(inventory),
                       logs_dir=str(work / "logs"))
    out = capsys.readouterr().out
    assert rc == 3, out
    [archive] = archives(work, name)
    assert (archive.parent / "results.json").is_file() and f"{RMA}: evidence in {archive}" in out, out


def test_a_selection_with_a_cluster_still_brings_the_evidence(host, tools, work, capsys):
    """`validate` on a selection that holds a cluster's login node sends its other hosts down
    the SSH route: an RMA verdict there brings the evidence as it does alone. The login node
    here is unreachable (a closed port on loopback): only its row is affected."""
    name, inventory = host
    data = yaml.safe_load(Path(inventory).read_text())
    data["hosts"]["login1"] = {"address": "127.0.0.1", "port": 9, "user": TEST_USER,
                               "slurm": {"partition": "debug"}}
    write_yaml(Path(inventory), data)
    rc = validate_cmd.run(host=f"{name},login1", inventory=str(inventory), logs_dir=str(work / "logs"),
                      json_path=str(work / "result.json"))
    out = capsys.readouterr().out
    assert rc == 4, out  # the unreachable login node (4 before 3, remote/ground/exitcodes.py)
    [archive] = archives(work, name)
    assert f"{name}: {RMA}: evidence in {archive}" in out, out
    assert json.loads((work / "result.json").read_text())["hosts"][name]["evidence"] == str(archive)


def test_the_kept_archive_is_made_here_of_the_checked_files(host, tools, work, capsys, tmp_path):
    """The host's archive holds what was checked, but as the host chose to write it (its owner,
    dates, order, and whatever GNU tar would read past tarfile): gpuprov kept those bytes.
    Now it keeps an archive made here of the checked files: the same files, root's, dated 0,
    the manifest first, and the same bytes for the same files."""
    name, inventory = host
    stem = f"evidence-{name}-{SERIAL}"
    hosts = []
    for info, data in ((file_info(f"{stem}/xid.log"), b"log\n"),
                       (file_info(f"{stem}/manifest.json"), inner_manifest(stem))):
        info.uid, info.uname, info.mtime, info.mode = 1000, "mallory", 1_700_000_000, 0o4755
        hosts.append((info, data))
    host_bytes = tarball(hosts)
    (tools / "pack").write_bytes(tarball([(file_info(f"./{stem}.tar.gz"), host_bytes)]))
    os.chmod(tools / "pack", 0o644)
    kept = []
    for _ in range(2):
        rc, out = evidence(work, inventory, name, capsys)
        assert rc == 0, out
        kept.append(archives(work, name)[-1])
    assert kept[0] != kept[1] and kept[0].read_bytes() == kept[1].read_bytes() != host_bytes
    with tarfile.open(kept[0]) as tar:
        got = [(m.name, m.mode, m.uid, m.gid, m.uname, m.gname, m.mtime) for m in tar]
    assert got == [(stem, 0o755, 0, 0, "", "", 0), (f"{stem}/manifest.json", 0o644, 0, 0, "", "", 0),
                   (f"{stem}/xid.log", 0o644, 0, 0, "", "", 0)]
    listed = subprocess.run(["tar", "-tzf", str(kept[0])], capture_output=True, text=True, check=True)
    assert listed.stdout.split() == [f"{stem}/", f"{stem}/manifest.json", f"{stem}/xid.log"]
    assert members(kept[0])[f"{stem}/manifest.json"] == inner_manifest(stem)
