"""The probe the `pip` and `pip_lock` kinds share: which version of each named distribution a
python has installed, and that python's PEP 508 marker environment (what a lock's markers are
evaluated against; what packaging.markers.default_environment computes there).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

from .base import q

# @missing when the python is neither an executable path nor a command on PATH; otherwise one
# `@env {json}` line, then `name=version` for each name ("" when not installed).
_PROBE = """PY={python}
if [ ! -x "$PY" ] && ! command -v "$PY" >/dev/null 2>&1; then echo @missing; exit 0; fi
"$PY" - {names} <<'EOF'
import json, os, platform, sys
try:
    from importlib import metadata
except ImportError:
    metadata = None
impl = sys.implementation
iver = "{{0.major}}.{{0.minor}}.{{0.micro}}".format(impl.version)
if impl.version.releaselevel != "final":
    iver += impl.version.releaselevel[0] + str(impl.version.serial)
env = {{"implementation_name": impl.name, "implementation_version": iver,
       "os_name": os.name, "platform_machine": platform.machine(),
       "platform_release": platform.release(), "platform_system": platform.system(),
       "platform_version": platform.version(), "python_full_version": platform.python_version(),
       "platform_python_implementation": platform.python_implementation(),
       "python_version": ".".join(platform.python_version_tuple()[:2]),
       "sys_platform": sys.platform}}
print("@env " + json.dumps(env))
for name in sys.argv[1:]:
    try:
        print(name + "=" + metadata.version(name))
    except Exception:
        print(name + "=")
EOF"""


@dataclass
class Installed:
    """What the probe says: the python is missing, or its marker environment and each named
    distribution's installed version (name -> version, "" when not installed)."""

    python_missing: bool = False
    environment: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


def probe_script(python: str, names: Iterable[str]) -> str:
    """The shell script that asks `python` (a path or a command) for `names`' versions."""
    return _PROBE.format(python=q(python), names=" ".join(q(n) for n in names))


def parse_probe(out: str) -> Installed:
    """The probe's output read back; lines it does not know are ignored (the host is untrusted)."""
    if out.strip() == "@missing":
        return Installed(python_missing=True)
    state = Installed()
    for line in out.splitlines():
        if line.startswith("@env "):
            try:
                env = json.loads(line[5:])
            except ValueError:
                continue
            if isinstance(env, dict):
                state.environment = {str(k): str(v) for k, v in env.items()}
        elif "=" in line:
            name, _, version = line.partition("=")
            state.versions[name] = version
    return state
