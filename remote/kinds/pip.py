"""The `pip` step kind."""
from __future__ import annotations


from ..errors import PlanError
from .base import Command, Kind, _listed, q


_PIP_PROBE = """PY={python}
if [ ! -x "$PY" ] && ! command -v "$PY" >/dev/null 2>&1; then echo @missing; exit 0; fi
"$PY" - {names} <<'EOF'
import sys
try:
    from importlib import metadata
except ImportError:
    metadata = None
for name in sys.argv[1:]:
    try:
        print(name + "=" + metadata.version(name))
    except Exception:
        print(name + "=")
EOF"""


class Pip(Kind):
    """Python packages in a virtual environment (created when missing), from an index or mirror;
    satisfied when the installed versions already match."""

    name = "pip"
    fields = {"packages": (list, str), "venv": str, "python": str, "index_url": str,
              "extra_index_url": (list, str), "state": str, "extra_args": list}
    required = ("packages",)
    probe_fields = ("packages", "venv", "python")

    def check(self, args, where, base_dir):
        from packaging.requirements import InvalidRequirement, Requirement

        if isinstance(args["packages"], str) and "{{" not in args["packages"]:
            args["packages"] = args["packages"].split()
        for spec in _listed(args["packages"]):
            if "{{" in str(spec):
                continue
            try:
                req = Requirement(str(spec))
            except InvalidRequirement as exc:
                raise where.error(f"pip: {spec!r} is not a requirement: {exc}") from None
            if req.url:
                raise where.error(f"pip: {spec!r}: URL requirements cannot be checked for "
                                  "idempotence; use a shell step with creates:")
        if args.get("state", "present") not in ("present", "absent"):
            raise where.error("pip.state must be present or absent")

    def _python(self, args) -> str:
        if args.get("venv"):
            return args["venv"].rstrip("/") + "/bin/python"
        return args.get("python") or "python3"

    def probe(self, args):
        from packaging.requirements import Requirement

        names = " ".join(q(Requirement(str(s)).name) for s in _listed(args["packages"]))
        return _PIP_PROBE.format(python=q(self._python(args)), names=names)

    def plan(self, args, probe):
        from packaging.requirements import Requirement

        reqs = [Requirement(str(s)) for s in _listed(args["packages"])]
        missing_env = probe.out.strip() == "@missing"
        installed = {}
        for line in probe.out.splitlines():
            name, _, version = line.partition("=")
            installed[name] = version
        py = q(self._python(args))
        cmds = []
        if args.get("state", "present") == "absent":
            present = [r.name for r in reqs if installed.get(r.name)]
            if present and not missing_env:
                cmds.append(Command(f"{py} -m pip uninstall -y -q " + " ".join(map(q, present))))
            return cmds
        todo = [r for r in reqs if not installed.get(r.name)
                or not r.specifier.contains(installed[r.name], prereleases=True)]
        if not todo:
            return []
        if missing_env:
            if not args.get("venv"):
                raise PlanError(f"python {self._python(args)} not found on the host")
            base = q(args.get("python") or "python3")
            cmds.append(Command(f"{base} -m venv {q(args['venv'])}"))
        opts = ["--disable-pip-version-check", "--no-input", "-q"]
        if args.get("index_url"):
            opts += ["--index-url", q(args["index_url"])]
        extra = args.get("extra_index_url") or []
        for url in [extra] if isinstance(extra, str) else extra:
            opts += ["--extra-index-url", q(url)]
        opts += [q(str(a)) for a in args.get("extra_args") or []]
        cmds.append(Command(f"{py} -m pip install {' '.join(opts)} " +
                            " ".join(q(str(r)) for r in todo)))
        return cmds
