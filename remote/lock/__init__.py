"""`gpuprov lock`: generate the locks in `playbooks/locks/` from the stack table
(`playbooks/stack.yaml`) with uv's resolver (`uv pip compile --generate-hashes`), so every host
installs the same files: every package, dependencies included, pinned `==` with its sha256.

One lock per stack row and route:
- `cuda-<row>-wheels.txt`: the row's CUDA wheels (`wheels`, held by `wheel_constraints`), no
  torch;
- `cuda-<row>-wheels-torch.txt`: the same plus torch and torchvision;
- `torch-<row>.txt`: torch and torchvision alone (with what they need), for the apt route's
  `pytorch.yaml`, whose CUDA comes from NVIDIA's repository.
The two torch locks are made here only for rows whose torch build PyPI publishes
(`torch_on_pypi`); the other rows' torch is on PyTorch's own index (`--torch-index`), which this
command reaches only where the machine does: run it there.
- `uv.txt`: uv itself, which the `pip_lock` kind installs on the host (with pip, hash-checked).

The apt route's locks (`gpuprov lock --apt`: exact Debian package versions from NVIDIA's
repository index) are made by `remote.lock.apt`.

The resolution is universal (`--universal`: x86_64 and aarch64 in one file, with markers) for
python 3.10 and newer, the oldest python of a supported distribution (Ubuntu 22.04).
"""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional
from urllib.parse import unquote

from ..config.lockfile import read_lock
from ..config.yamlfile import load_yaml
from ..ground.errors import InputError
from ..ground.exitcodes import EXIT_INPUT, EXIT_OK
from ..ground.paths import RECIPES_DIR
from .limits import DEADLINE_VARIABLE, MAX_MEMORY_VARIABLE, fetch_deadline, max_memory_bytes, size_text

LOCKS_DIR = RECIPES_DIR / "locks"
STACK = RECIPES_DIR / "stack.yaml"
PYTHON_FLOOR = "3.10"  # Ubuntu 22.04's python3, the oldest of the supported distributions
PYPI = "https://pypi.org/simple"
# uv for the hosts: the same release this command resolves with (pyproject.toml), from PyPI.
UV_REQUIREMENT = "uv==0.13.8"
COMMAND = "gpuprov lock"


@dataclass
class LockSpec:
    """What one lock holds: its file name, requirements and constraints, and the indexes."""

    file: str
    requirements: list[str]
    constraints: list[str] = field(default_factory=list)
    index_url: str = PYPI
    extra_index_urls: list[str] = field(default_factory=list)
    platform: Optional[str] = None  # None: universal

    def command(self) -> list[str]:
        """The `uv pip compile` arguments (after the requirement files); the indexes are in
        `environment`."""
        # --no-python-downloads: uv would try to fetch a python 3.10 for the resolution (12 s of
        # retries offline) where none is installed; any python resolves for the floor's markers.
        args = ["--no-config", "--no-python-downloads", "--generate-hashes",
                "--python-version", PYTHON_FLOOR, "--custom-compile-command", COMMAND]
        args += ["--python-platform", self.platform] if self.platform else ["--universal"]
        if self.index_url != PYPI:
            # torch from PyTorch's index, the rest where uv finds the best match; the lock
            # then names its indexes, so an install reads the same ones.
            args += ["--index-strategy", "unsafe-best-match", "--emit-index-url"]
        return args

    def environment(self) -> dict[str, str]:
        """The indexes, for uv's environment: an index URL may carry a password (`--torch-index`
        with credentials), and any user of this machine reads every process's arguments
        (/proc/PID/cmdline), not its environment (proc(5)). uv reads UV_INDEX_URL for
        --index-url and UV_EXTRA_INDEX_URL (space-separated) for --extra-index-url (`uv pip
        compile --help`, uv 0.13.8: "[env: UV_INDEX_URL]", "[env: UV_EXTRA_INDEX_URL]")."""
        env = {"UV_INDEX_URL": self.index_url}
        if self.extra_index_urls:
            env["UV_EXTRA_INDEX_URL"] = " ".join(self.extra_index_urls)
        return env

    def without_credentials(self, text: str) -> str:
        """`text` (uv's output, a lock) with each index URL's user part removed: a lock is
        committed and shipped, a message is shown and logged, and neither may hold a
        password. The hosts get the credentials from their recipe's `index_url`."""
        for url in [self.index_url, *self.extra_index_urls]:
            scheme, sep, rest = url.partition("://")
            netloc, slash, path = rest.partition("/")
            userinfo, at, host = netloc.rpartition("@")
            if not (sep and at):
                continue
            text = text.replace(url, f"{scheme}://{host}{slash}{path}")
            # the password (a lone user part is a token), as written and decoded, wherever
            # uv printed it in another form
            user, colon, password = userinfo.partition(":")
            secret = password if colon else user
            for spelling in {secret, unquote(secret)} - {""}:
                text = text.replace(spelling, "***")
        return text


def stack_rows(stack: Path = STACK) -> dict[str, Any]:
    """The stack table's rows by CUDA version."""
    data = load_yaml(stack, "recipe")
    return dict(data["vars"]["compat"])


def lock_name(cuda_version: str, torch: bool) -> str:
    """The no-root route's lock of a row (`cuda-wheels.yaml`), with or without torch."""
    return f"cuda-{cuda_version}-wheels{'-torch' if torch else ''}.txt"


def torch_lock_name(cuda_version: str) -> str:
    """The apt route's torch lock of a row (`pytorch.yaml`)."""
    return f"torch-{cuda_version}.txt"


def specs(rows: dict[str, Any], cuda: Optional[str], torch: bool,
          torch_index: Optional[str]) -> list[LockSpec]:
    """The locks to make: every row (or `cuda`'s), without torch, and with torch where PyPI has
    the row's build, or for `cuda` alone from `torch_index`."""
    if cuda is not None and cuda not in rows:
        raise InputError(f"--cuda {cuda}: not a row of {STACK} (known: {', '.join(rows)})")
    out = [LockSpec("uv.txt", [UV_REQUIREMENT])] if cuda is None else []
    for version, row in rows.items():
        if cuda is not None and version != cuda:
            continue
        platform = "x86_64-manylinux_2_28" if "aarch64" in (row.get("wheels_not_on") or []) else None
        wheels = list(row["wheels"])
        constraints = list(row.get("wheel_constraints") or [])
        if not torch_index:
            out.append(LockSpec(lock_name(version, False), wheels, constraints, platform=platform))
        torch_pins = [f"torch=={row['torch']}", f"torchvision=={row['torchvision']}"]
        if not torch_index and not (torch and row.get("torch_on_pypi")):
            continue
        # torch from PyPI, or from PyTorch's index with PyPI for the rest
        index, extra = (torch_index, [PYPI]) if torch_index else (PYPI, [])
        out.append(LockSpec(lock_name(version, True), wheels + torch_pins, constraints,
                            index_url=index, extra_index_urls=extra, platform=platform))
        out.append(LockSpec(torch_lock_name(version), torch_pins, index_url=index,
                            extra_index_urls=extra, platform=platform))
    return out


def run_resolver(cmd: list[str], cwd: str, lock: str,
                 env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    """Run uv for `lock` within the lock's bounds (limits.py). uv's UV_HTTP_TIMEOUT is the
    "timeout (in seconds) for HTTP reads" (https://docs.astral.sh/uv/reference/environment/
    #uv_http_timeout): each read, so an index that dribbles or answers without end holds it for
    good; and uv keeps a whole answer in memory (a 726 KB gzip bomb took it to 4.3 GiB, HTML
    without end past 7 GiB; `python3 -m bench.hostile_lock`). So its process group is killed at
    `fetch_deadline()`, and its data is capped at `max_memory_bytes()` (RLIMIT_DATA: an
    allocation past it fails and uv aborts). InputError, one line, either way."""
    deadline, memory = fetch_deadline(), max_memory_bytes()

    def cap_memory() -> None:          # in the child, before exec: no thread runs there
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            env=env, start_new_session=True, preexec_fn=cap_memory)
    try:
        out, err = proc.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise InputError(f"uv pip compile for {lock} did not finish within {deadline:g} s, the "
                         f"deadline of one resolution ({DEADLINE_VARIABLE} sets it)") from None
    except BaseException:
        _kill_group(proc)              # Ctrl-C: its own session does not get the terminal's
        raise
    if proc.returncode == -signal.SIGABRT and "memory allocation of" in err:
        raise InputError(f"uv pip compile for {lock} stopped at {size_text(memory)} of memory, the "
                         f"cap on one resolution ({MAX_MEMORY_VARIABLE} sets it): an index answered "
                         "with more than a resolution takes")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def compile_lock(spec: LockSpec, out_dir: Path) -> Path:
    """Resolve `spec` with `uv pip compile` into `out_dir/spec.file` (written only when uv
    succeeds, and checked to parse as a lock); InputError with uv's message otherwise."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / spec.file
    with tempfile.TemporaryDirectory() as tmp:
        reqs, cons, out = Path(tmp, "requirements.in"), Path(tmp, "constraints.txt"), Path(tmp, spec.file)
        reqs.write_text("\n".join(spec.requirements) + "\n")
        cons.write_text("\n".join(spec.constraints) + "\n")
        cmd = [sys.executable, "-m", "uv", "pip", "compile", str(reqs), "-c", str(cons),
               "-o", str(out), "--quiet", *spec.command()]
        proc = run_resolver(cmd, tmp, spec.file, env={**os.environ, **spec.environment()})
        if proc.returncode != 0:
            message = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            raise InputError(spec.without_credentials(
                f"uv pip compile failed for {spec.file}: " + " ".join(message[-6:])))
        # uv names its temporary input files in annotations ("via -r /tmp/.../requirements.in"):
        # keep the lock the same wherever it is made. Its --emit-index-url lines name the
        # indexes with their credentials (seen with uv 0.13.8): written without them.
        text = out.read_text().replace(str(reqs), "requirements.in").replace(str(cons),
                                                                                "constraints.txt")
        text = spec.without_credentials(text)
        out.write_text(text)
        read_lock(out)  # a file the kind could not read is not written
        target.write_text(text)
    return target


def run_lock(cuda: Optional[str] = None, torch: bool = True, torch_index: Optional[str] = None,
             out_dir: Path = LOCKS_DIR) -> int:
    """`gpuprov lock`: (re)generate the locks; print each file written. Exit status."""
    try:
        for spec in specs(stack_rows(), cuda, torch, torch_index):
            path = compile_lock(spec, out_dir)
            lock = read_lock(path)
            print(f"{path}: {len(lock.pins)} packages pinned with sha256")
    except InputError as exc:
        print(f"lock: {exc}", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK
