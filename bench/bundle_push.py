"""What pushing a bundle costs the control machine in memory (issue 35): the peak RSS of
`provision --bundle` sending a large bundle to a sandbox host over SSH.

    python3 -m bench.bundle_push [--size-mb 1024] [--rounds 2] [--before TREE] [--json PATH]

The bundle is made here: the real validate/, a stand-in uv wheel with its lock, and one
stand-in .deb of --size-mb MB (incompressible bytes), written with its manifest first, so that
an older gpuprov (`--before`: a checkout, e.g. a `git worktree` at a commit whose push read the archive whole)
reads it too. Each round runs `provision --bundle` in a fresh process (`python -m invoke`, with
PYTHONPATH at the tree measured), and takes its VmHWM at exit (its own peak RSS; wait4's
ru_maxrss would count the pre-exec copy of this process). The recipe's one step removes the
pushed bundle on the host, so every round pushes it whole. With --before, the trees alternate.

`--ciphers`: instead, what the SSH session's cipher and MAC cost the bulk stream: --size-mb
MB from memory over one Paramiko session into `cat > /dev/null` on the sandbox host, in 256 KiB
pieces (remote/transport's), with each cipher/MAC pair of CIPHERS alone on offer (paramiko's
Transport.get_security_options() through SSHClient.connect's transport_factory, as in
https://github.com/paramiko/paramiko/issues/2310), the
pairs alternating for --rounds rounds. paramiko's own order puts aes128-ctr with hmac-sha2-256
first; remote/transport/ssh.py puts AES-GCM first.

Needs root (a sandbox host).
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from bench.common import REPO, BenchError, machine, proc_tail, stats
from remote import sandbox
from remote.bundle.archive import HOST_ROOT, SCHEMA, sums_text, validate_files
from remote.ground.fileio import sha256_file
from remote.ground.paths import VALIDATE_DIR

UV = "uv-0.0.0-py3-none-any.whl"
DEB = "gpuprov-bench-payload_1.0_all.deb"
# python -c: run `invoke ARGS` as `python -m invoke` would, and write this process's VmHWM
# (KiB) to PATH at exit.
WRAPPER = """
import atexit, runpy, sys
path = sys.argv.pop(1)
def peak():
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(path, "w") as out:
        out.write(kib)
atexit.register(peak)
sys.argv[0] = "invoke"
runpy.run_module("invoke", run_name="__main__", alter_sys=True)
"""


def make_bundle(out: Path, size_mb: int) -> int:
    """A bundle of `size_mb` MB at `out` (manifest first, as every gpuprov reads it); its size."""
    chunk = hashlib.sha256(b"gpuprov bench").digest() * (1 << 15)    # 1 MiB, not all zeros
    members: dict[str, bytes | Path] = {f"wheels/{UV}": b"STAND-IN uv wheel (bench/bundle_push.py)\n"}
    members["locks/uv.txt"] = (f"uv==0.0.0 \\\n    --hash=sha256:"
                               f"{hashlib.sha256(members[f'wheels/{UV}']).hexdigest()}\n").encode()
    members.update(validate_files(VALIDATE_DIR))
    payload = out.parent / DEB
    digest = hashlib.sha256()
    with open(payload, "wb") as f:
        for _ in range(size_mb):
            f.write(chunk)
            digest.update(chunk)
    files = []
    for rel, data in sorted(members.items()):
        blob = data if isinstance(data, bytes) else data.read_bytes()
        files.append({"path": rel, "sha256": hashlib.sha256(blob).hexdigest(), "size": len(blob),
                      "origin": "bench/bundle_push.py"})
    files.append({"path": f"apt/{DEB}", "sha256": digest.hexdigest(), "size": payload.stat().st_size,
                  "origin": "bench/bundle_push.py"})
    manifest = {"schema": SCHEMA, "cuda": "13.0", "torch": False, "distro": "debian12",
                "command": "python3 -m bench.bundle_push", "uv_wheel": f"wheels/{UV}", "debs": {},
                "files": sorted(files, key=lambda f: f["path"])}
    raw = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    sums = sums_text(manifest["files"]).encode()

    def info(name: str, size: int) -> tarfile.TarInfo:
        member = tarfile.TarInfo(name)
        member.size, member.mode, member.mtime = size, 0o644, 0
        return member

    with tarfile.TarFile(out, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info("manifest.json", len(raw)), io.BytesIO(raw))
        tar.addfile(info("SHA256SUMS", len(sums)), io.BytesIO(sums))
        for entry in manifest["files"]:
            data = members.get(entry["path"], payload)
            if isinstance(data, bytes):
                tar.addfile(info(entry["path"], len(data)), io.BytesIO(data))
            else:
                with open(data, "rb") as f:
                    tar.addfile(info(entry["path"], entry["size"]), f)
    payload.unlink()
    return out.stat().st_size


def push(tree: Path, inventory: Path, recipe: Path, bundle: Path, work: Path) -> dict:
    """One `provision --bundle` from `tree`: its wall time and peak RSS."""
    peak = work / "peak_kib"
    peak.unlink(missing_ok=True)
    cmd = [sys.executable, "-c", WRAPPER, str(peak), "--search-root", str(tree), "provision",
           "--host", "all", "--inventory", str(inventory), "--recipe", str(recipe), "--bundle",
           str(bundle), "--no-validate", "--json", str(work / "run.json")]
    if (tree / "remote" / "bundle" / "trust.py").exists():     # a tree that asks for an anchor
        cmd += ["--bundle-sha256", sha256_file(bundle)]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, PYTHONPATH=str(tree)))
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise BenchError(f"provision from {tree} failed ({proc.returncode}): {proc_tail(proc)}")
    steps = [s for h in json.loads((work / "run.json").read_text())["hosts"].values() for s in h["steps"]]
    if not any(s["status"] == "changed" and " pushed " in s["name"] for s in steps):
        raise BenchError(f"provision from {tree} pushed nothing: {steps}")
    return {"wall_s": round(elapsed, 2), "peak_rss_mib": round(int(peak.read_text()) / 1024, 1)}


CIPHERS = [("aes128-ctr", "hmac-sha2-256"), ("aes128-ctr", "hmac-sha2-256-etm@openssh.com"),
           ("aes128-gcm@openssh.com", ""), ("aes256-gcm@openssh.com", "")]


def stream(host: dict, known_hosts: Path, cipher: str, mac: str, size_mb: int) -> dict:
    """`size_mb` MB over one Paramiko session with `cipher` and `mac` alone on offer."""
    import paramiko

    def only(sock, **kwargs):   # noqa: ANN001, ANN003, ANN202  paramiko's transport_factory
        transport = paramiko.Transport(sock, **kwargs)
        options = transport.get_security_options()
        options.ciphers = (cipher,)
        if mac:
            options.digests = (mac,)
        return transport

    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(host["address"], port=host["port"], username="root",
                   key_filename=host["identity_file"], look_for_keys=False, allow_agent=False,
                   timeout=10, transport_factory=only)
    try:
        transport = client.get_transport()
        assert transport is not None
        piece = memoryview(hashlib.sha256(b"bench").digest() * (1 << 13))    # 256 KiB
        channel = transport.open_session()
        started, cpu = time.monotonic(), time.process_time()
        channel.exec_command("cat > /dev/null")
        for _ in range(size_mb * 4):
            channel.sendall(piece)
        channel.shutdown_write()
        rc = channel.recv_exit_status()
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
        if rc != 0:
            raise BenchError(f"cat > /dev/null exited {rc}")
        agreed = f"{transport.local_cipher}+{transport.local_mac or ''}"
    finally:
        client.close()
    return {"agreed": agreed, "s": round(elapsed, 2), "mb_per_s": round(size_mb * 1.048576 / elapsed, 1),
            "client_cpu_s": round(cpu, 2)}


def ciphers(args: argparse.Namespace) -> dict:
    from tests.sandbox_fixture import SandboxHosts

    result: dict = {"machine": machine(), "size_mb": args.size_mb, "rounds": []}
    state = Path(tempfile.mkdtemp(prefix="gpuprov-sandbox-"))
    try:
        inventory = sandbox.up(1, state, progress=lambda line: None)
        hosts = SandboxHosts(inventory, state)
        host = hosts.hosts[hosts.names[0]]
        for n in range(args.rounds):
            order = CIPHERS if n % 2 == 0 else list(reversed(CIPHERS))
            row = {f"{c}+{m}": stream(host, hosts.known_hosts, c, m, args.size_mb) for c, m in order}
            print(json.dumps(row), flush=True)
            result["rounds"].append(row)
    finally:
        sandbox.down(state, progress=lambda line: None)
        shutil.rmtree(state, ignore_errors=True)
    for key in result["rounds"][0]:
        rate = [r[key]["mb_per_s"] for r in result["rounds"]]
        cpu = [r[key]["client_cpu_s"] for r in result["rounds"]]
        print(f"  {key:45} {statistics.median(rate):6.1f} MB/s median ({min(rate)}-{max(rate)}), "
              f"client CPU {statistics.median(cpu):.1f} s")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--before", type=Path,
                    help="another gpuprov checkout to measure alike (e.g. a worktree of an older commit)")
    ap.add_argument("--ciphers", action="store_true",
                    help="the SSH bulk rate of each cipher/MAC pair instead (see above)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (a sandbox host)")
    if args.ciphers:
        out = ciphers(args)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1) + "\n")
        return 0
    trees = {"this": REPO} | ({"before": args.before.resolve()} if args.before else {})
    result: dict = {"machine": machine(), "size_mb": args.size_mb, "trees": {k: str(v) for k, v in trees.items()},
                    "rounds": []}
    work = Path(tempfile.mkdtemp(prefix="gpuprov-bench-push-"))
    state = Path(tempfile.mkdtemp(prefix="gpuprov-sandbox-"))
    try:
        bundle = work / "big.bundle.tar"
        result["bundle_bytes"] = make_bundle(bundle, args.size_mb)
        recipe = work / "forget.yaml"
        recipe.write_text(json.dumps({"name": "forget the bundle (bench)", "steps": [
            {"name": "forget the bundle", "become": True, "shell": f"rm -rf {HOST_ROOT}"}]}))
        inventory = sandbox.up(1, state, progress=lambda line: None)
        for n in range(args.rounds):
            row = {}
            for name in (list(trees) if n % 2 == 0 else list(reversed(trees))):
                row[name] = push(trees[name], inventory, recipe, bundle, work)
            print(json.dumps(row), flush=True)
            result["rounds"].append(row)
    finally:
        sandbox.down(state, progress=lambda line: None)
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    summary = {}
    print(f"bundle push, {result['machine']['date']}, a {result['bundle_bytes'] / 1e6:.0f} MB bundle "
          f"to 1 sandbox host over SSH, {args.rounds} rounds:")
    for name, tree in trees.items():
        rss = [r[name]["peak_rss_mib"] for r in result["rounds"]]
        summary[name] = {"peak_rss_mib": {"median": statistics.median(rss), "max": max(rss)},
                         "wall_s": stats([r[name]["wall_s"] for r in result["rounds"]])}
        print(f"  {name:6} ({tree}): peak RSS median {statistics.median(rss):.0f} MiB (max "
              f"{max(rss):.0f}), wall median {summary[name]['wall_s']['median_s']:.1f} s")
    result["summary"] = summary
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
