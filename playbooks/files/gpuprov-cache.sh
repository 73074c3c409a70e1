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
#                           point devpi's root/pypi at PYPI_UPSTREAM and mirror each INDEX_URL
#                           as root/NAME (NAME: the URL's host and path, '/' -> '-')
#   gpuprov-cache warm      load PyPI's project list into devpi now (its first request for any
#                           project waits for it, longer than pip's 15 s default timeout)
#   gpuprov-cache stats     bytes each cache holds (what it fetched from upstream, once)
set -eu
VENV={{ cache_venv | quote }}
SERVERDIR={{ cache_dir | quote }}/devpi
APT_PORT={{ cache_apt_port | int }}
PYPI_PORT={{ cache_pypi_port | int }}
STARTED=/run/gpuprov-devpi.started
export DEVPI_CLIENTDIR={{ cache_dir | quote }}/devpi-client
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

index_name() { echo "$1" | sed -e 's#^[a-z]*://##' -e 's#/*$##' -e 's#[^A-Za-z0-9._-]#-#g'; }

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
        --host 0.0.0.0 --port "$PYPI_PORT"
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
  check=false; [ "$2" = --check ] && { check=true; shift; }
  shift; upstream=$1; shift
  list=$("$VENV/bin/python" - "$PYPI_PORT" <<'PY'
import json, sys, urllib.request
request = urllib.request.Request("http://127.0.0.1:%s/root" % sys.argv[1],
                                 headers={"Accept": "application/json"})
for name, spec in json.load(urllib.request.urlopen(request, timeout=10))["result"]["indexes"].items():
    print(name, spec.get("mirror_url", ""))
PY
)
  want="pypi $upstream"
  for url in "$@"; do want="$want
$(index_name "$url") $url"; done
  missing=$(echo "$want" | while read -r name url; do
    echo "$list" | grep -qxF "$name $url" || echo "$name $url"; done)
  [ -z "$missing" ] && exit 0
  $check && { echo "not mirrored yet: $missing"; exit 1; }
  "$VENV/bin/devpi" use "http://127.0.0.1:$PYPI_PORT" >/dev/null
  "$VENV/bin/devpi" login root --password "$(cat {{ cache_dir | quote }}/devpi-root-password)" >/dev/null
  echo "$missing" | while read -r name url; do
    if echo "$list" | grep -q "^$name "; then
      "$VENV/bin/devpi" index "root/$name" "mirror_url=$url" >/dev/null
    else
      "$VENV/bin/devpi" index -c "root/$name" type=mirror "mirror_url=$url" >/dev/null
    fi
    echo "root/$name mirrors $url"
  done ;;
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
  sed -n '2,10p' "$0" >&2; exit 2 ;;
esac
