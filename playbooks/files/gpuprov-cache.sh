#!/bin/sh
# gpuprov's fleet cache on this host (written by gpuprov's cache.yaml; edits are overwritten).
#   gpuprov-cache start     start apt-cacher-ng and devpi-server (systemd units, or daemons
#                           where systemd is not PID 1: containers, sandboxes)
#   gpuprov-cache restart-apt
#                           restart apt-cacher-ng (after a change of its configuration)
#   gpuprov-cache restart-pypi
#                           restart devpi-server (after a change of its unit or of this script)
#   gpuprov-cache status    exit 0 when both answer on their ports
#   gpuprov-cache mirrors [--check] PYPI_UPSTREAM [INDEX_URL ...]
#                           point devpi's root/pypi at PYPI_UPSTREAM, mirror each INDEX_URL
#                           as root/NAME (NAME: the URL's host and path, '/' -> '-') and remove
#                           every other user and index
#   gpuprov-cache warm      load PyPI's project list into devpi now (its first request for any
#                           project waits for it, longer than pip's 15 s default timeout)
#   gpuprov-cache stats     bytes each cache holds (what it fetched from upstream, once)
set -eu
VENV={{ cache_venv | quote }}
SERVERDIR={{ cache_dir | quote }}/devpi
APT_PORT={{ cache_apt_port | int }}
PYPI_PORT={{ cache_pypi_port | int }}
ROOT_PASSWORD_FILE={{ cache_dir | quote }}/devpi-root-password
STARTED=/run/gpuprov-devpi.started
# devpi-server trusts the CA file named here (else certifi's): the system's store, as apt's.
export REQUESTS_CA_BUNDLE={{ cache_ca_bundle | quote }}

answers() {  # any HTTP answer on 127.0.0.1:$1 counts: apt-cacher-ng answers / with an error page
  "$VENV/bin/python" - "$1" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen("http://127.0.0.1:%s/" % sys.argv[1], timeout=5).close()
except urllib.error.HTTPError:
    pass
except Exception:
    sys.exit(1)
PY
}

wait_for() {  # devpi-server takes ~15 s to answer on its first start
  n=0
  until answers "$1"; do
    n=$((n + 1)); [ "$n" -lt 120 ] || { echo "nothing answers on port $1 after 60 s" >&2; exit 1; }
    sleep 0.5
  done
}

case "${1:-}" in
start)
  answers "$PYPI_PORT" || touch "$STARTED"
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable --now apt-cacher-ng gpuprov-devpi
  else
    answers "$APT_PORT" || /etc/init.d/apt-cacher-ng start
    if ! answers "$PYPI_PORT"; then
      start-stop-daemon --start --background --make-pidfile --pidfile /run/gpuprov-devpi.pid \
        --chuid gpuprov-cache --output /var/log/gpuprov-devpi.log \
        --exec "$VENV/bin/devpi-server" -- --serverdir "$SERVERDIR" \
        --restrict-modify root {{ devpi_listen_args }}
    fi
  fi
  wait_for "$APT_PORT"; wait_for "$PYPI_PORT" ;;
restart-apt)
  if [ -d /run/systemd/system ]; then
    systemctl restart apt-cacher-ng
  else
    # Its init script's stop finds no process in some containers (start-stop-daemon cannot
    # read /proc/PID/exe there): end them by name, then start one.
    pkill -x apt-cacher-ng || true
    n=0; while pgrep -x apt-cacher-ng >/dev/null && [ "$n" -lt 50 ]; do sleep 0.2; n=$((n + 1)); done
    /etc/init.d/apt-cacher-ng start
  fi
  wait_for "$APT_PORT" ;;
restart-pypi)
  # Started after the last change of its unit and of this script: already what they say.
  if [ "$STARTED" -nt "$0" ] && [ "$STARTED" -nt /etc/systemd/system/gpuprov-devpi.service ]; then
    exit 0
  fi
  touch "$STARTED"
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl restart gpuprov-devpi
  else
    if [ -f /run/gpuprov-devpi.pid ]; then
      pid=$(cat /run/gpuprov-devpi.pid)
      kill "$pid" 2>/dev/null || true
      n=0; while kill -0 "$pid" 2>/dev/null && [ "$n" -lt 100 ]; do sleep 0.2; n=$((n + 1)); done
      rm -f /run/gpuprov-devpi.pid
    fi
    "$0" start >/dev/null
  fi
  wait_for "$PYPI_PORT" ;;
status)
  answers "$APT_PORT" && answers "$PYPI_PORT" ;;
mirrors)
  # devpi's HTTP API (devpi-server 6.20.3 views.py: POST /+login {"user", "password"} gives a
  # token sent as X-Devpi-Auth: base64("root:TOKEN"); PUT/PATCH/DELETE /USER[/INDEX]), so the
  # root password goes from its file to devpi-server and to no command line.
  shift
  "$VENV/bin/python" - "$PYPI_PORT" "$ROOT_PASSWORD_FILE" "$@" <<'PY'
import base64, json, re, sys, urllib.request
port, password_file, args = sys.argv[1], sys.argv[2], sys.argv[3:]
check = args[:1] == ["--check"]
if check:
    args = args[1:]
upstream, extra = args[0], args[1:]
base = "http://127.0.0.1:%s" % port

def index_name(url):
    return re.sub(r"[^A-Za-z0-9._-]", "-", re.sub(r"/*$", "", re.sub(r"^[a-z]*://", "", url)))

def call(method, path, body=None, auth=""):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method, headers={
        "Accept": "application/json", "Content-Type": "application/json"})
    if auth:
        request.add_header("X-Devpi-Auth", auth)
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer).get("result")

want = dict([("pypi", upstream)] + [(index_name(url), url) for url in extra])
users = call("GET", "/")
root = users.get("root", {}).get("indexes", {})
others = sorted(name for name in users if name != "root")
unwanted = sorted(name for name in root if name not in want
                  or root[name].get("type") != "mirror")
to_set = sorted(name for name, url in want.items()
                if name in unwanted or root.get(name, {}).get("mirror_url") != url)
changes = ["user %s: removed" % name for name in others]
changes += ["root/%s: removed" % name for name in unwanted if name not in want]
changes += ["root/%s mirrors %s" % (name, want[name]) for name in to_set]
if not changes:
    sys.exit(0)
if check:
    print("to change: " + "; ".join(changes))
    sys.exit(1)
with open(password_file) as secret:
    token = call("POST", "/+login", {"user": "root", "password": secret.read().strip()})["password"]
auth = base64.b64encode(("root:%s" % token).encode()).decode()

def remove(user, indexes):
    for name, spec in indexes.items():  # devpi deletes volatile indexes only
        if not spec.get("volatile", True):
            call("PATCH", "/%s/%s" % (user, name), ["volatile=True"], auth)
        if user == "root":
            call("DELETE", "/root/%s" % name, auth=auth)
    if user != "root":
        call("DELETE", "/%s" % user, auth=auth)

for name in others:
    remove(name, users[name].get("indexes", {}))
remove("root", {name: root[name] for name in unwanted})
for name in to_set:
    if name in root and name not in unwanted:
        call("PATCH", "/root/%s" % name, ["mirror_url=%s" % want[name]], auth)
    else:
        call("PUT", "/root/%s" % name, {"type": "mirror", "mirror_url": want[name]}, auth)
print("\n".join(changes))
PY
  ;;
warm)
  "$VENV/bin/python" - "$PYPI_PORT" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen("http://127.0.0.1:%s/root/pypi/+simple/pip/" % sys.argv[1], timeout=600).close()
except urllib.error.HTTPError:
    pass  # a 404 from a stand-in upstream without pip: the list is loaded all the same
PY
  ;;
stats)
  echo "apt-cacher-ng $(du -sb /var/cache/apt-cacher-ng | cut -f1)"
  echo "devpi $(du -sb "$SERVERDIR/+files" 2>/dev/null | cut -f1 || echo 0)" ;;
*)
  sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
