"""The stack manifest: what one host's GPU stack is, recorded by every provision and validate run
as `logs/<host>/<run>/stack.json` (remote/ground/runfolder.py), and compared across hosts by `gpuprov report` (drift).

It holds the kernel, the driver, CUDA, cuDNN, NCCL and torch versions, every distribution in
the stack's python environment with its version and `record_sha256`, and the stack's Debian
packages with their versions.

`record_sha256` is the sha256 of the distribution's RECORD lines that carry a hash and lie inside
site-packages, sorted: the wheel's own list of files with each file's sha256, as the installer
wrote it. It is the same for the same wheel whatever installed it (pip or uv), wherever the venv
is, whatever python compiled it; it is not recomputed from the files on disk (that would read
gigabytes each run), so it tells which wheel was installed, not whether a file changed since.

The manifest comes from the host: untrusted. `check` bounds it (size, counts, lengths, shapes)
and returns it normalised, or raises `ManifestError` saying what is wrong.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..ground.errors import GpuprovError

SCHEMA = 1
MAX_BYTES = 2 * 1024 * 1024     # 2,000 packages at ~150 bytes is 0.3 MB
MAX_ITEMS = 5000               # packages, and apt packages, each
MAX_TEXT = 200                 # any one name or version
COMPONENTS = ("kernel", "driver", "cuda", "cudnn", "nccl", "torch", "python")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
SHA256 = re.compile(r"[0-9a-f]{64}")
# a control character, or a lone surrogate (a JSON "\udc80" escape): no encoding can write it;
# one regex search, where a per-character loop cost 1.3 s of a 1,000-run report (bench.report_history)
NOT_TEXT = re.compile("[\x00-\x1f\ud800-\udfff]")


class ManifestError(GpuprovError):
    """A manifest that is not one (from a host or a log folder: untrusted)."""


# Runs on the host with the stack's python (the venv's; any python3 works): standard library
# only, one JSON object on stdout. Debian packages of the stack: NVIDIA's driver, CUDA, cuDNN,
# NCCL, DCGM, the container toolkit, and the kernel headers DKMS builds against.
HOST_SCRIPT = r'''
import glob, hashlib, json, os, platform, re, subprocess, sys
from importlib import metadata

def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""

def record_sha256(dist):
    text = dist.read_text("RECORD") or ""
    lines = sorted(l for l in text.splitlines()
                   if l.count(",") >= 2 and l.rsplit(",", 2)[1] and not l.startswith(".."))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()

packages, versions = [], {}
for dist in metadata.distributions():
    name = (dist.metadata["Name"] or "").strip()
    if not name:
        continue
    key = re.sub(r"[-_.]+", "-", name).lower()
    versions[key] = dist.version
    packages.append({"name": key, "version": dist.version, "record_sha256": record_sha256(dist)})
apt = []
try:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"],
                         capture_output=True, text=True, timeout=30).stdout
except (OSError, subprocess.SubprocessError):
    out = ""
# The CUDA toolkit's libraries as NVIDIA's repository names them (libcufft-13-0, libnpp-13-0,
# libnvjitlink-13-0, ...: the toolkit's own library names, e.g. its libcufft_static.a,
# libnppc_static.a), so the apt lock's closure shows up here too.
stack = re.compile(r"(nvidia-|libnvidia-|cuda-|libcuda|cudnn|libcudnn|libnccl|libcublas|"
                   r"libcu(fft|file|rand|solver|sparse|pti)|libnpp|libnvjitlink|libnvjpeg|"
                   r"libnvfatbin|libnvptxcompiler|libnvvm|nsight-|gds-tools-|"
                   r"datacenter-gpu-manager|linux-headers-|dkms$)")
debs = {}
for line in out.splitlines():
    parts = line.split("\t")
    if len(parts) == 3 and parts[2].startswith(("ii", "hi")) and stack.match(parts[0]):
        debs[parts[0]] = parts[1]
        apt.append({"name": parts[0], "version": parts[1]})

def first(*values):
    return next((v for v in values if v), "")

def deb(prefix):
    return first(*(v for n, v in sorted(debs.items()) if n.startswith(prefix)))

driver = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", read("/proc/driver/nvidia/version"))
toolkit = ""
try:
    toolkit = json.loads(read("/usr/local/cuda/version.json") or "{}").get("cuda", {}).get("version", "")
except ValueError:
    pass
wheel = lambda *names: first(*(versions.get(n, "") for n in names))
print(json.dumps({
    "schema": 1,
    "kernel": platform.release(),
    "driver": driver.group(1) if driver else first(deb("nvidia-kernel-"), deb("nvidia-open"), deb("nvidia-driver")),
    "cuda": first(toolkit, wheel("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11")),
    "cudnn": first(wheel("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11"), deb("libcudnn")),
    "nccl": first(wheel("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"), deb("libnccl")),
    "torch": wheel("torch"),
    "python": platform.python_version(),
    "environment": sys.prefix,
    "packages": sorted(packages, key=lambda p: p["name"]),
    "apt": sorted(apt, key=lambda p: p["name"]),
}))
'''


def _text(value: Any, what: str, pattern: re.Pattern[str] | None = None) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_TEXT or NOT_TEXT.search(value):
        raise ManifestError(f"{what} is not a short line of text")
    if value and pattern is not None and not pattern.fullmatch(value):
        raise ManifestError(f"{what} {value!r} is not a valid name")
    return value


def _items(value: Any, what: str, hashed: bool) -> list[dict[str, str]]:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise ManifestError(f"{what} is not a list of at most {MAX_ITEMS} entries")
    out: dict[str, dict[str, str]] = {}
    for n, item in enumerate(value):
        if not isinstance(item, dict):
            raise ManifestError(f"{what}[{n}] is not an object")
        name = _text(item.get("name"), f"{what}[{n}].name", NAME)
        if not name:
            raise ManifestError(f"{what}[{n}] has no name")
        entry = {"name": name, "version": _text(item.get("version"), f"{what}[{n}].version")}
        if hashed:
            digest = item.get("record_sha256")
            if not isinstance(digest, str) or not SHA256.fullmatch(digest):
                raise ManifestError(f"{what}[{n}].record_sha256 is not 64 hex digits")
            entry["record_sha256"] = digest
        out[name] = entry
    return [out[k] for k in sorted(out)]


def check(data: Any) -> dict[str, Any]:
    """`data` as a manifest (parsed JSON), normalised: ManifestError when it is not one."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ManifestError(f"not a stack manifest of schema {SCHEMA}")
    out: dict[str, Any] = {"schema": SCHEMA}
    for key in COMPONENTS:
        out[key] = _text(data.get(key), key)
    out["environment"] = _text(data.get("environment"), "environment")
    out["packages"] = _items(data.get("packages", []), "packages", hashed=True)
    out["apt"] = _items(data.get("apt", []), "apt", hashed=False)
    return out


def parse(raw: bytes) -> dict[str, Any]:
    """A manifest from its bytes (the host's answer, or a stack.json): bounded, then `check`."""
    if len(raw) > MAX_BYTES:
        raise ManifestError(f"{len(raw)} bytes, over {MAX_BYTES}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ManifestError(f"not JSON: {str(exc)[:100]}") from None
    except RecursionError:  # the decoder recurses once per level: 100 KB of "[" is enough
        raise ManifestError("not JSON: nested too deeply") from None
    return check(data)


def items(manifest: dict[str, Any]) -> dict[tuple[str, str], str]:
    """What drift compares, as (what, name) -> value: each component ("kernel", ""...), each
    package (its version, with its RECORD digest's first 12 digits) and each apt package."""
    out: dict[tuple[str, str], str] = {}
    for key in COMPONENTS:
        if manifest.get(key):
            out[(key, "")] = manifest[key]
    for pkg in manifest.get("packages", []):
        out[("package", pkg["name"])] = pkg["version"]
        out[("package-files", pkg["name"])] = pkg["record_sha256"][:12]
    for pkg in manifest.get("apt", []):
        out[("apt", pkg["name"])] = pkg["version"]
    return out
