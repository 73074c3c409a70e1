"""The `pip_lock` step kind: a venv made to hold exactly the packages of a lock (`gpuprov lock`,
remote/config/lockfile.py), every file checked against the lock's sha256.

The installer is uv: its wheel is fetched with python's standard library and checked against
its own lock (`locks/uv.txt`), its binary put in `<venv>-uv/` beside the venv (so the venv holds
the lock alone), and it creates the venv when missing. pip (and `python -m venv`) install the
lock where uv cannot be fetched, or with `installer: pip`. Both refuse a file whose hash is not in the lock after
downloading everything and before installing anything, so a mismatch leaves the venv as it was;
the step's last line then names the package and both hashes.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..config.lockfile import LockFile, read_lock
from ..config.schema import Arg
from ..ground.errors import InputError, PlanError, Where
from .base import Args, Command, Kind, q, redacted_url, with_env
from .pyprobe import Installed, parse_probe, probe_script

if TYPE_CHECKING:
    from .route import BundleRoute, CacheRoute

UV_LOCK = "locks/uv.txt"  # relative to the recipe's folder, like `lock`

# Run after a failed install: one last line that names a hash mismatch, from uv's report
# ("Hash mismatch for `NAME==V`", then "Expected:" and "Computed:" blocks) or pip's ("THESE
# PACKAGES DO NOT MATCH THE HASHES ...", "NAME==V from URL:", "Expected sha256 X", "Got Y").
_MISMATCH = """import re, sys
text = open(sys.argv[1], errors="replace").read()
uv = re.search(r"Hash mismatch for `([^`]+)`.*?Expected:\\s*(\\S+).*?Computed:\\s*(\\S+)", text, re.S)
pip = re.search(r"DO NOT MATCH THE HASHES.*?\\n\\s*(\\S+) from .*?Expected sha256 (\\S+).*?Got\\s+(\\S+)", text, re.S)
found = uv or pip
if found:
    name, want, got = found.groups()
    print("hash mismatch for %s: the lock has %s, the downloaded file is %s; nothing was installed"
          % (name, want, got), file=sys.stderr)
"""


# Fetches uv's wheel for this machine from the index (PEP 503 simple page) with the standard
# library, checks its sha256 against uv's lock and unpacks the uv binary into DEST: no pip,
# no ensurepip (`python -m venv` with pip plus `pip install uv` took about 4 s of an 8 s install
# in a sandbox host; bench/lock_floor.py). argv: VERSION HASHES(comma-separated) DEST; the
# index comes in the environment (UV_DEFAULT_INDEX, as uv reads it), never in argv: it may
# carry a password. urllib does not send a URL's user part, so it goes as HTTP basic auth, to
# the index's host only, and not along a redirect (an "unredirected" header).
#
# Under `provision --bundle` the wheel is a file of the bundle on the host (GPUPROV_UV_WHEEL): read
# from there, hash-checked the same way, and no network is touched.
_FETCH_UV = """import base64, hashlib, io, os, platform, re, sys, urllib.parse, urllib.request, zipfile
version, hashes, dest = sys.argv[1], set(sys.argv[2].split(",")), sys.argv[3]
def fetch():
    local = os.environ.get("GPUPROV_UV_WHEEL", "")
    if local.startswith("http://"):
        return urllib.request.urlopen(local, timeout=300).read()
    if local:
        with open(local, "rb") as f:
            return f.read()
    return download()
def download():
  parts = urllib.parse.urlsplit(os.environ.get("UV_DEFAULT_INDEX") or "https://pypi.org/simple")
  host = parts.netloc.rpartition("@")[2]
  auth = None
  if "@" in parts.netloc:
      user = "%s:%s" % (urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or ""))
      auth = "Basic " + base64.b64encode(user.encode()).decode()
  index = urllib.parse.urlunsplit(parts._replace(netloc=host))
  def get(url, timeout):
      request = urllib.request.Request(url)
      if auth and urllib.parse.urlsplit(url).netloc == host:
          request.add_unredirected_header("Authorization", auth)
      return urllib.request.urlopen(request, timeout=timeout).read()
  page_url = index.rstrip("/") + "/uv/"
  page = get(page_url, 60).decode("utf-8", "replace")
  machine = platform.machine()
  want = re.compile(r"uv-%s-py3-none-manylinux_2_17_%s[.]" % (re.escape(version), re.escape(machine)))
  for href, name in re.findall(r'<a[^>]+href="([^"]+)"[^>]*>([^<]+)</a>', page):
      if want.match(name.strip()) and name.strip().endswith(".whl"):
          url = urllib.parse.urljoin(page_url, href.replace("&amp;", "&")).split("#")[0]
          break
  else:
      sys.exit("uv %s: no manylinux wheel for %s on %s" % (version, machine, page_url))
  return get(url, 300)
data = fetch()
digest = hashlib.sha256(data).hexdigest()
if digest not in hashes:
    sys.exit("hash mismatch for uv==%s: the downloaded file is sha256:%s, not in the lock" % (version, digest))
member = "uv-%s.data/scripts/uv" % version
os.makedirs(dest, exist_ok=True)
tmp = os.path.join(dest, ".uv.tmp")
with zipfile.ZipFile(io.BytesIO(data)) as wheel, open(tmp, "wb") as out:
    out.write(wheel.read(member))
os.chmod(tmp, 0o755)
os.replace(tmp, os.path.join(dest, "uv"))
"""


class PipLock(Kind[Installed]):
    """A venv holding a lock's packages at their locked versions, installed with hashes
    required; satisfied when every package the lock pins for this host is installed at its
    version."""

    name = "pip_lock"
    spec = {
        "lock": Arg((str,), required=True),
        "venv": Arg((str,), required=True),
        "python": Arg((str,)),            # the python that creates the venv (default python3)
        "installer": Arg((str,), "auto", choices=("auto", "uv", "pip")),
        "index_url": Arg((str,)),
    }
    probe_fields = ("lock", "venv", "_base")
    fetches = True

    def check(self, args: Args, where: Where, base_dir: Path) -> None:
        args["_base"] = str(base_dir)
        args["_trusted"] = ""
        if "{{" not in args["lock"]:
            try:
                read_lock(self._path(args, args["lock"]))
            except InputError as exc:
                raise where.error(_lock_error(args["lock"], exc)) from None

    @staticmethod
    def _path(args: Args, name: str) -> Path:
        path = Path(name).expanduser()
        return path if path.is_absolute() else Path(args["_base"]) / path

    def _lock(self, args: Args) -> LockFile:
        try:
            return read_lock(self._path(args, args["lock"]))
        except InputError as exc:
            raise PlanError(_lock_error(args["lock"], exc)) from None

    @staticmethod
    def _python(args: Args) -> str:
        return str(args["venv"]).rstrip("/") + "/bin/python"

    def probe(self, args: Args) -> str:
        return probe_script(self._python(args), self._lock(args).names)

    def parse(self, out: str) -> Installed:
        return parse_probe(out)

    def through_cache(self, args: Args, route: CacheRoute) -> Args:
        """PyPI (or the given index) read from the cache when it mirrors it."""
        index = route.index_for(args["index_url"] or "")
        if index is None:
            return args
        return dict(args, index_url=index, _trusted=route.trusted_host)

    def through_bundle(self, args: Args, bundle: BundleRoute) -> Args:
        """The lock's wheels and uv from the bundle unpacked on the host, no index: the lock
        must be one the bundle was built from, byte for byte."""
        import hashlib

        lock = self._lock(args)
        name = Path(str(args["lock"])).name
        if bundle.locks.get(name) != hashlib.sha256(lock.text.encode()).hexdigest():
            what = "differs from the one" if name in bundle.locks else "is not"
            raise PlanError(f"pip_lock: lock {args['lock']} {what} in the bundle: add it with "
                            f"`{bundle.rebuild}`")
        return dict(args, index_url="", _trusted="", _find_links=bundle.wheels,
                    _uv_wheel=bundle.uv_wheel)

    def plan(self, args: Args, fact: Installed) -> list[Command]:
        from packaging.version import InvalidVersion, Version

        lock = self._lock(args)
        wanted = lock.pins_for(fact.environment) if not fact.python_missing else {}

        def same(installed: str, locked: str) -> bool:
            try:
                return Version(installed) == Version(locked)
            except InvalidVersion:
                return installed == locked

        if not fact.python_missing and all(same(fact.versions.get(name, ""), pin.version)
                                           for name, pin in wanted.items()):
            return []
        return [self._install(args, lock)]

    def _install(self, args: Args, lock: LockFile) -> Command:
        """One script: uv fetched if missing, the venv created if missing, the lock installed;
        pip (and `python -m venv`) where uv cannot be had.

        The index URL may carry a password (`pip_index_url` with credentials), and every local
        user of the host reads every process's arguments (/proc/PID/cmdline, what `ps` shows).
        So the script travels on stdin (`with_env`, as the shell kind's), and the installers
        get the index in their environment, which only the same user and root read
        (/proc/PID/environ, proc(5)): pip reads PIP_INDEX_URL for --index-url (pip's docs,
        "Configuration", "Environment Variables":
        https://pip.pypa.io/en/stable/topics/configuration/#environment-variables), uv reads
        UV_DEFAULT_INDEX for --default-index, which replaces --index-url (uv's reference,
        "Environment variables": https://docs.astral.sh/uv/reference/environment/#uv_default_index),
        and the uv fetcher reads UV_DEFAULT_INDEX too."""
        venv = str(args["venv"]).rstrip("/")
        py, base = q(venv + "/bin/python"), q(args["python"] or "python3")
        pip_opts, uv_opts, env = _installer_options(args)
        lines = ['lock=$(mktemp) && err=$(mktemp) || exit 1',
                 'trap \'rm -f "$lock" "$err"\' EXIT',
                 'cat > "$lock"']
        with_pip = [f'[ -x {py} ] || {base} -m venv {q(venv)} || exit 1',
                    f'{py} -m pip install {pip_opts} -r "$lock" 2>"$err"']
        installer = args["installer"]
        if installer == "pip":
            lines += with_pip
        else:
            lines += self._with_uv(args, venv, uv_opts, with_pip)
        lines += ['rc=$?', 'cat "$err" >&2',
                  f'[ $rc -eq 0 ] || {base} - "$err" <<\'EOF\'\n{_MISMATCH}EOF',
                  'exit $rc']
        how = "pip" if installer == "pip" else "uv (pip when uv cannot be fetched)"
        source = f" from {redacted_url(args['index_url'])}" if args["index_url"] else ""
        if args.get("_find_links"):
            source = f" from the bundle ({args['_find_links']})"
        return with_env("\n".join(lines), env, script_on_stdin=True, then=lock.text.encode(),
                        display=f"install {args['lock']} into {venv}{source} with {how}, hashes "
                                f"required ({len(lock.pins)} packages)")

    def _with_uv(self, args: Args, venv: str, uv_opts: str, with_pip: list[str]) -> list[str]:
        """The script's lines with uv: fetched beside the venv if missing (pinned by uv.txt),
        then the venv and the install with it; pip's lines `with_pip` when uv cannot be had
        (`installer: auto`; with `installer: uv` the script fails instead)."""
        py, base = q(venv + "/bin/python"), q(args["python"] or "python3")
        # uv goes beside the venv, not into it, so the venv holds the lock alone.
        tools, uv = q(venv + "-uv"), q(venv + "-uv/uv")
        try:
            uv_pin = read_lock(self._path(args, UV_LOCK)).pins[0]
        except InputError as exc:
            raise PlanError(_lock_error(UV_LOCK, exc)) from None
        otherwise = ('exit 1' if args["installer"] == "uv" else
                     'echo "uv could not be fetched: installing with pip" >&2')
        return [f'if [ ! -x {uv} ]; then',
                f'  {base} - {q(uv_pin.version)} {q(",".join(uv_pin.hashes))} '
                f"{tools} >&2 <<'EOF' || {otherwise}\n{_FETCH_UV}EOF",
                'fi',
                f'if [ -x {uv} ]; then',
                f'  [ -x {py} ] || {uv} venv -q --no-config --no-python-downloads '
                f'--allow-existing --python {base} {q(venv)} || exit 1',
                f'  NO_COLOR=1 {uv} pip install --python {py} {uv_opts} -r "$lock" 2>"$err"',
                'else', *(f"  {line}" for line in with_pip), 'fi']


def _installer_options(args: Args) -> tuple[str, str, dict[str, str]]:
    """(pip's options, uv's, the installers' environment): hashes required; the bundle's
    folder and no index under `provision --bundle`; the index in the environment, never in
    the arguments (see `PipLock._install`); the fleet cache's host trusted over plain HTTP."""
    pip_opts = "--disable-pip-version-check --no-input -q --require-hashes"
    uv_opts = "--require-hashes --system-certs --no-progress"
    env = {}
    if args.get("_find_links"):
        # the bundle's folder, and no index: nothing is fetched (pip's --no-index,
        # --find-links; uv's --offline too)
        # (a bundle site's URL instead of the folder, its http.server listing as the flat page
        # of links that --find-links reads from a URL: fetched from it, so not --offline, which
        # "disable[s] network access" (uv's CLI reference, `uv pip install`:
        # https://docs.astral.sh/uv/reference/cli/#uv-pip-install--find-links); the hashes
        # still come from the lock: remote/bundle/site.py)
        links = q(args["_find_links"])
        offline = "" if str(args["_find_links"]).startswith("http://") else " --offline"
        pip_opts += f" --no-index --find-links {links}"
        uv_opts += f"{offline} --no-index --find-links {links}"
        env["GPUPROV_UV_WHEEL"] = str(args["_uv_wheel"])
    if args["index_url"]:
        env = {"PIP_INDEX_URL": str(args["index_url"]),
               "UV_DEFAULT_INDEX": str(args["index_url"])}
    if args["_trusted"]:
        pip_opts += f" --trusted-host {q(args['_trusted'])}"
        uv_opts += f" --allow-insecure-host {q(args['_trusted'])}"
    return pip_opts, uv_opts, env


def _lock_error(name: str, exc: InputError) -> str:
    """A lock's problem, naming it as the recipe does (relative to the recipe's folder)."""
    return f"pip_lock: lock {name}" + (f" line {exc.line}" if exc.line else "") + f": {exc.message}"
