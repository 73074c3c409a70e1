"""One bundle per site (`provision --bundle` with the inventory's `bundle_site:`): the control
machine pushes the checked bundle once, to the site host, which serves it over HTTP to the
other hosts while the run needs it; they install from there over the site network.

The site host gets the bundle as any host does (remote/bundle/push.py: streamed once over SSH,
unpacked only if the bytes it received have the checked archive's sha256), then a small HTTP
server (python3's http.server, `SERVER`) serving /var/lib/gpuprov/bundles read-only, which
stops itself after IDLE_S without a request. The other hosts wait for it, then each gets, from
the control machine, only what anchors its trust: the bundle's apt key (`apt/bundle-key.gpg`,
read from the checked archive and compared with the signed manifest's sha256 here), and it
writes an apt source whose `URIs:` is the site's repository and whose `Signed-By:` is that key.
The recipe's steps then read the repository and the wheels over HTTP:

- apt checks InRelease with that key alone (sources.list(5), Signed-By; apt-secure(8)), each
  index against Release, each .deb against Packages: a .deb the site host changed is refused.
- pip_lock installs with `--require-hashes` from the lock on the control machine (which
  `read_bundle` compared with the bundle's, byte for byte), uv's own wheel checked against
  uv.txt's hashes: a wheel the site host changed is refused.
- a `deb` step's file is fetched into the host's folder and checked against the manifest's
  sha256 before the step sees it (`attach_command`).

So the site host can withhold the bundle or serve it slowly, never change what a host installs:
every hash a host checks comes from the control machine (the verified manifest, the recipe's
locks), none from the site host. A host that cannot reach the site fails alone, its line
naming the site, the URL, and what to open; the others go on.
"""
from __future__ import annotations

import base64
import hashlib
import re
import shlex
import tarfile
import threading
import time
from dataclasses import replace
from typing import Optional

from ..config.inventory import Host, Inventory
from ..config.inventory.model import BundleSite
from ..engine.jobs import Job
from ..engine.results import StepResult, StepStatus
from ..engine.session import HostSession
from ..ground.errors import GpuprovError
from ..kinds.route import BundleRoute
from .archive import Bundle, BundleError
from .push import RATE_FLOOR, STEP, PushBundle

KEY = "apt/bundle-key.gpg"
IDLE_S = 900            # chosen: the server stops after 15 minutes without a request
PIDFILE = "/run/gpuprov-bundle-site.pid"
LOG = "/var/log/gpuprov-bundle-site.log"
REACH_TIMEOUT_S = 10    # chosen: one probe of the site from a host
UNREACHABLE = 3         # the attach script's exit status when the site does not answer
CARRIED = re.compile(r"apt/[0-9a-f]{64}\.deb")   # a deb step's file (kinds/route.py CarriedFile)

# python3's http.server over the bundles' folder (python3 is on every host that runs a
# pip_lock step): GET and HEAD only, no listing outside it (SimpleHTTPRequestHandler's
# translate_path drops `..`: https://docs.python.org/3/library/http.server.html); it stops
# after IDLE_S seconds in which no byte was sent.
SERVER = """import functools, http.server, sys, threading, time
root, port, idle = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
last = [time.monotonic()]
class Handler(http.server.SimpleHTTPRequestHandler):
    def send_head(self):
        last[0] = time.monotonic()
        return super().send_head()
    def copyfile(self, source, out):
        for block in iter(lambda: source.read(1 << 20), b""):
            out.write(block)
            last[0] = time.monotonic()
server = http.server.ThreadingHTTPServer(("", port), functools.partial(Handler, directory=root))
def watch():
    while time.monotonic() - last[0] < idle:
        time.sleep(2)
    server.shutdown()
threading.Thread(target=watch, daemon=True).start()
server.serve_forever()
"""

# A URL's body into a file by the first there of curl, wget, python3 (all read the URL from
# their arguments: a site URL holds no secret).
GET = ("get() { if command -v curl >/dev/null 2>&1; then curl -fsS --max-time \"$3\" -o \"$2\" \"$1\"; "
       "elif command -v wget >/dev/null 2>&1; then wget -q -T \"$3\" -O \"$2\" \"$1\"; "
       "else python3 -c 'import sys, urllib.request\n"
       "open(sys.argv[2], \"wb\").write(urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[3])).read())'"
       " \"$1\" \"$2\" \"$3\"; fi; }")


def base_url(site: BundleSite) -> str:
    address = f"[{site.address}]" if ":" in site.address else site.address
    return f"http://{address}:{site.port}"


def serve_command(root: str, bundle_id: str, port: int) -> str:
    """Start (or restart) the site's server over `root`'s parent; exit 0 once it serves the
    bundle's folder on `port`, else the reason on stderr."""
    folder = root.rpartition("/")[0]
    probe = (f"python3 -c 'import urllib.request; urllib.request.urlopen("
             f"\"http://127.0.0.1:{port}/{bundle_id}/.complete\", timeout=2).read()' 2>/dev/null")
    return "\n".join([
        "command -v python3 >/dev/null 2>&1 || { echo 'python3 is not installed: the bundle "
        "site serves with python3 -m http.server' >&2; exit 1; }",
        f'P={PIDFILE}',
        'if [ -f "$P" ] && grep -q gpuprov-bundle-site "/proc/$(cat "$P")/cmdline" 2>/dev/null; '
        'then kill "$(cat "$P")"; sleep 0.3; fi',
        f"setsid python3 -c {shlex.quote('# gpuprov-bundle-site' + chr(10) + SERVER)} "
        f"{shlex.quote(folder)} {port} {IDLE_S} </dev/null >>{LOG} 2>&1 &",
        'echo $! > "$P"',
        "i=0; while [ $i -lt 50 ]; do",
        f"  {probe} && exit 0",
        '  kill -0 "$(cat "$P")" 2>/dev/null || break',
        "  sleep 0.2; i=$((i+1))",
        "done",
        f"echo \"the server did not answer on port {port}: $(tail -n 2 {LOG} | tr '\\n' ' ')\" >&2",
        "exit 1",
    ])


def attach_command(root: str, url: str, key: bytes, carried: dict[str, str]) -> str:
    """Make `root` on a host that installs from the site at `url`: the apt source (the site's
    repository, `Signed-By:` the key the control machine sent), its lists' folder, and the
    `deb` steps' files fetched from the site, each checked against the manifest's sha256
    (`carried`: path -> sha256). Exit UNREACHABLE when the site does not answer."""
    sources = ("Types: deb\n"
               f"URIs: {url}/apt/\n"
               "Suites: ./\n"
               f"Signed-By: {root}/apt/bundle-key.gpg\n")
    lines = [
        "umask 022", GET,
        f"R={shlex.quote(root)}; T=$R.partial.$$; U={shlex.quote(url)}",
        "trap 'rm -rf \"$T\"' EXIT",
        'mkdir -p "$T/apt" "$T/sources.d" "$T/lists/partial" || exit 1',
        f'get "$U/.complete" "$T/.probe" {REACH_TIMEOUT_S} 2>"$T/.err" || '
        f'{{ tr "\\n" " " < "$T/.err" | cut -c1-200 >&2; exit {UNREACHABLE}; }}',
        f"printf '%s' {shlex.quote(base64.b64encode(key).decode())} | base64 -d > \"$T/apt/bundle-key.gpg\" || exit 1",
        f"printf '%s' {shlex.quote(sources)} > \"$T/sources.d/gpuprov-bundle.sources\" || exit 1",
    ]
    for path, digest in sorted(carried.items()):
        lines += [f'get "$U/{path}" "$T/{path}" 600 || exit 1',
                  f"echo {shlex.quote(f'{digest}  {path}')} | (cd \"$T\" && sha256sum -c --quiet) "
                  f"|| {{ echo 'the site served {path} changed: refused' >&2; exit 1; }}"]
    lines.append('rm -f "$T/.probe" "$T/.err" && rm -rf "$R" && mv "$T" "$R"')
    return "\n".join(lines)


def bundle_key(bundle: Bundle) -> bytes:
    """The bundle's apt key from its archive, with the sha256 the checked manifest gives it
    (BundleError otherwise: the archive changed since the check)."""
    want = bundle.files.get(KEY, {}).get("sha256")
    if want is None:
        raise BundleError(f"it carries no {KEY}: no apt repository to serve", bundle.path)
    try:
        with tarfile.open(bundle.path, "r:") as archive:
            member = archive.extractfile(KEY)
            data = member.read() if member is not None else b""
    except (OSError, KeyError, tarfile.TarError) as exc:
        raise BundleError(f"cannot read {KEY} from it: {exc}", bundle.path) from None
    if hashlib.sha256(data).hexdigest() != want:
        raise BundleError(f"its {KEY} is not the one its manifest names: it changed after the "
                          "check", bundle.path)
    return data


def site_route(route: BundleRoute, site: BundleSite) -> BundleRoute:
    """`route` (the bundle unpacked on the host) as a host that installs from the site reads
    it: its own folder for the apt source, the rest over HTTP."""
    url = f"{base_url(site)}/{route.id}"
    return replace(route, root=f"{route.root}.site", site=url,
                   uv_wheel=url + route.uv_wheel[len(route.root):], validate="")


class SiteBundle:
    """The run's job with the bundle served from `site`: the site host first takes the bundle
    and serves it (then runs `job` if it was selected), every other host waits for that, then
    installs from the site (the module docstring)."""

    def __init__(self, bundle: Bundle, site: BundleSite, selected: bool, job: Job, key: bytes):
        self.bundle, self.site, self.selected, self.job = bundle, site, selected, job
        self.key = key     # `bundle_key`: read before any host is contacted
        self.ready = threading.Event()
        self.site_failed = ""

    @property
    def outcome(self) -> Optional[str]:
        return self.job.outcome

    def __call__(self, session: HostSession) -> None:
        if session.host.name == self.site.host:
            self._serve(session)
            if self.selected and not self.site_failed:
                self.job(session)
            return
        if session.options.check:
            self.job(session)
            return
        if self._attach(session):
            self.job(session)

    def _serve(self, session: HostSession) -> None:
        try:
            if session.options.check:
                return
            if not PushBundle(self.bundle, self.job).push(session):
                self.site_failed = "it did not take the bundle"
                return
            self._start(session)
        finally:
            self.ready.set()

    def _start(self, session: HostSession) -> None:
        assert session.options.bundle is not None
        started = time.monotonic()
        name = f"{STEP} {self.bundle.id} served to the site"
        try:
            res = session.conn.run(serve_command(session.options.bundle.root, self.bundle.id,
                                                 self.site.port),
                                   become=True, timeout=session.inventory.timeouts.command)
        except GpuprovError as exc:
            self.site_failed = f"its server did not start: {exc}"
            session.fail(name, self.site_failed)
            return
        if res.rc != 0:
            self.site_failed = f"its server did not start: {(res.err.strip() or res.out.strip())[:300]}"
            session.fail(name, self.site_failed)
            return
        session.record(StepResult(f"{name} on port {self.site.port} (stops after "
                                  f"{IDLE_S // 60} idle minutes)", StepStatus.CHANGED,
                                  time.monotonic() - started))

    def _attach(self, session: HostSession) -> bool:
        """Wait for the site, then make this host's folder for it; False (the host failed,
        the step says why) otherwise."""
        route = session.options.bundle
        assert route is not None
        name = f"{STEP} {self.bundle.id} from the site {self.site.host}"
        session.reporter.running(session.host.name, STEP)
        if not self.ready.wait(timeout=self._wait_s(session)):
            session.fail(name, f"the bundle site {self.site.host} was not ready in time: nothing installed here")
            return False
        if self.site_failed:
            session.fail(name, f"the bundle site {self.site.host} failed ({self.site_failed}): nothing "
                               "installed here; see its row")
            return False
        ours = site_route(route, self.site)
        started = time.monotonic()
        carried = {p: f["sha256"] for p, f in self.bundle.files.items() if CARRIED.fullmatch(p)}
        try:
            res = session.conn.run(attach_command(ours.root, ours.site, self.key, carried),
                                   become=True, timeout=session.inventory.timeouts.command + 600)
        except GpuprovError as exc:
            session.fail(name, f"could not set up the site's source: {exc}")
            return False
        session.log.command(STEP, f"the apt source of {ours.site} in {ours.root}", res.rc,
                            res.elapsed_s, res.out, res.err)
        if res.rc == UNREACHABLE:
            session.fail(name, f"cannot reach the bundle site {self.site.host} at {ours.site}/ "
                               f"({res.err.strip()[:160] or 'no answer'}): let this host reach "
                               f"{self.site.address} TCP port {self.site.port}, then run provision "
                               "again (the other hosts are not held up)")
            return False
        if res.rc != 0:
            session.fail(name, (res.err.strip() or res.out.strip() or f"exited {res.rc}")[:400])
            return False
        session.options = replace(session.options, bundle=ours)
        session.record(StepResult(f"{name} ({ours.site}/)", StepStatus.OK, time.monotonic() - started))
        return True

    def _wait_s(self, session: HostSession) -> float:
        """The site's push and start at the slowest rate a push is allowed (push.py)."""
        return 120 + self.bundle.size / RATE_FLOOR + session.inventory.timeouts.command


def run_hosts(inv: Inventory, hosts: list[Host], site: BundleSite) -> tuple[list[Host], bool]:
    """The run's hosts with the site host first (added when not selected: it only takes the
    bundle and serves it), and whether it was selected."""
    selected = any(h.name == site.host for h in hosts)
    first = inv.hosts[site.host]
    return [first, *(h for h in hosts if h.name != site.host)], selected
