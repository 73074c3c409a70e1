"""The `pip` step kind."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..config.schema import Arg
from ..ground.errors import PlanError, Where
from .base import Args, Command, Kind, listed, q, redacted_url, with_env
from .pyprobe import Installed, parse_probe, probe_script

if TYPE_CHECKING:
    from packaging.requirements import Requirement

    from .route import BundleRoute, CacheRoute


class Pip(Kind[Installed]):
    """Python packages in a virtual environment (created when missing), from an index or mirror;
    satisfied when the installed versions already match."""

    name = "pip"
    spec = {
        "packages": Arg((list, str), required=True),
        "venv": Arg((str,)),
        "python": Arg((str,)),
        "index_url": Arg((str,)),
        "extra_index_url": Arg((list, str)),
        "state": Arg((str,), "present", choices=("present", "absent")),
        "extra_args": Arg((list,)),
    }
    probe_fields = ("packages", "venv", "python")
    fetches = True

    def check(self, args: Args, where: Where, base_dir: Path) -> None:
        from packaging.requirements import InvalidRequirement, Requirement

        if isinstance(args["packages"], str) and "{{" not in args["packages"]:
            args["packages"] = args["packages"].split()
        for package in listed(args["packages"]):
            if "{{" in str(package):
                continue
            try:
                req = Requirement(str(package))
            except InvalidRequirement as exc:
                raise where.error(f"pip: {package!r} is not a requirement: {exc}") from None
            if req.url:
                raise where.error(f"pip: {package!r}: URL requirements cannot be checked for "
                                  "idempotence; use a shell step with creates:")

    @staticmethod
    def _python(args: Args) -> str:
        if args["venv"]:
            return str(args["venv"]).rstrip("/") + "/bin/python"
        return str(args["python"] or "python3")

    def probe(self, args: Args) -> str:
        from packaging.requirements import Requirement

        names = [Requirement(str(s)).name for s in listed(args["packages"])]
        return probe_script(self._python(args), names)

    def parse(self, out: str) -> Installed:
        return parse_probe(out)

    def through_cache(self, args: Args, route: CacheRoute) -> Args:
        """Each index the cache mirrors (PyPI when no index_url is given) read from the cache."""
        extra = args["extra_index_url"] or []
        extras = [extra] if isinstance(extra, str) else list(extra)
        index = route.index_for(args["index_url"] or "")
        cached = [route.index_for(url) for url in extras]
        if index is None and not any(cached):
            return args
        return dict(args, index_url=index or args["index_url"],
                    extra_index_url=[new or old for new, old in zip(cached, extras)],
                    extra_args=[*(args["extra_args"] or []), "--trusted-host", route.trusted_host])

    def through_bundle(self, args: Args, bundle: BundleRoute) -> Args:
        """The packages from the bundle's wheels (`provision --bundle`), no index: pip's
        --no-index --find-links, with what the step installs checked against them in `plan`
        (a host that has them already needs nothing)."""
        return dict(args, index_url=None, extra_index_url=None, _find_links=bundle.wheels,
                    _bundle_wheels=bundle.wheel_files, _bundle_rebuild=bundle.rebuild)

    def plan(self, args: Args, fact: Installed) -> list[Command]:
        from packaging.requirements import Requirement

        reqs = [Requirement(str(s)) for s in listed(args["packages"])]
        installed = fact.versions
        py = q(self._python(args))
        cmds = []
        if args["state"] == "absent":
            present = [r.name for r in reqs if installed.get(r.name)]
            if present:
                cmds.append(Command(f"{py} -m pip uninstall -y -q " + " ".join(map(q, present))))
            return cmds
        todo = [r for r in reqs if not installed.get(r.name)
                or not r.specifier.contains(installed[r.name], prereleases=True)]
        if not todo:
            return []
        if args.get("_find_links"):
            _in_bundle(todo, args["_bundle_wheels"], args["_bundle_rebuild"])
        if fact.python_missing:
            if not args["venv"]:
                raise PlanError(f"python {self._python(args)} not found on the host")
            base = q(args["python"] or "python3")
            cmds.append(Command(f"{base} -m venv {q(args['venv'])}"))
        opts = ["--disable-pip-version-check", "--no-input", "-q"]
        if args.get("_find_links"):
            # the bundle's folder and no index: pip fetches nothing (pip install --no-index,
            # --find-links: https://pip.pypa.io/en/stable/cli/pip_install/)
            opts += ["--no-index", "--find-links", q(args["_find_links"])]
        extra = [q(str(a)) for a in args["extra_args"] or []]
        packages = " ".join(q(str(r)) for r in todo)
        env = _index_env(args)
        # Plans and logs show the indexes as pip's options, passwords as ***; the host gets
        # them in pip's environment (`_index_env`).
        shown_indexes = [f"--{name[4:].lower().replace('_', '-')} {q(redacted_url(url))}"
                         for name, urls in env.items() for url in urls.split(" ")]
        cmds.append(with_env(
            f"{py} -m pip install {' '.join(opts + extra)} {packages}", env,
            display=f"{py} -m pip install {' '.join(opts + shown_indexes + extra)} {packages}",
            script_on_stdin=True))
        return cmds


def _in_bundle(todo: list[Requirement], wheels: tuple[str, ...], rebuild: str) -> None:
    """PlanError naming each requirement of `todo` that no wheel of the bundle (`wheels`, file
    names) satisfies, and how a bundle gets it: the bundle carries its locks' wheels only."""
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    have: dict[str, list[str]] = {}
    for wheel in wheels:
        try:
            name, version, _, _ = parse_wheel_filename(wheel)
        except InvalidWheelFilename:
            continue
        have.setdefault(str(name), []).append(str(version))
    lacking = [str(r) for r in todo
               if not any(r.specifier.contains(v, prereleases=True)
                          for v in have.get(canonicalize_name(r.name), []))]
    if lacking:
        raise PlanError(f"pip: {', '.join(lacking)} not among the bundle's wheels: a bundle "
                        f"carries its row's locked wheels (`{rebuild}`), and no lock of the row "
                        "pins it; on an air-gapped host install what a pip_lock step's lock pins")


def _index_env(args: Args) -> dict[str, str]:
    """The step's indexes as pip's environment variables, never its arguments: an index URL
    may carry a password or token, and a command line on the host is readable by every local
    user. pip reads each long option from PIP_<UPPER_LONG_NAME>, a repeatable one as values
    separated by spaces (pip's docs, "Configuration", "Environment Variables":
    https://pip.pypa.io/en/stable/topics/configuration/#environment-variables; the
    `pip install` manual names PIP_INDEX_URL and PIP_EXTRA_INDEX_URL). `with_env` sends them
    on stdin. A command-line option would override them (pip's order: options, environment,
    config files), and none is given."""
    env = {}
    if args["index_url"]:
        env["PIP_INDEX_URL"] = str(args["index_url"])
    extra = args["extra_index_url"] or []
    extras = [str(url) for url in ([extra] if isinstance(extra, str) else extra)]
    if extras:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(extras)
    return env

