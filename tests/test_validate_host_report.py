"""The host checks' findings reach `gpuprov report` (issue 45 item 4): a real validate run in a
mount namespace (tests/test_validate_host.py's helpers: a read-only mount, a tmpfs past the fill
threshold, a stopped service) leaves its results.json in a logs tree as a host's run; the report's
Prometheus file carries the findings per action and the host figures, and report.html names the
findings in its health table."""
from __future__ import annotations

import shutil

from remote.report import run_report
from tests.test_report_common import recording_terminal
from tests.test_validate_host import _run_in_namespace, as_root


def _metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


@as_root
def test_host_findings_in_prometheus_and_html(tmp_path):
    t = tmp_path
    for d in ("ro", "full"):
        (t / d).mkdir()
    prof = {"host": {"mounts": [str(t / "ro")], "fill_paths": [str(t / "full")], "services": ["gpuprov-nosuchd"]}}
    proc, c = _run_in_namespace([
        "mount -t tmpfs -o size=4m tmpfs %s" % (t / "ro"), "mount -o remount,ro %s" % (t / "ro"),
        "mount -t tmpfs -o size=4m tmpfs %s" % (t / "full"), "head -c 3800000 /dev/zero > %s/f" % (t / "full")],
        prof, t / "out", t, checks="host_mounts,host_fill,host_services")
    assert proc.returncode == 1
    run = t / "logs" / "node1" / "20261129T080000Z"
    run.mkdir(parents=True)
    shutil.copy(t / "out" / "results.json", run / "results.json")
    prom = t / "gpuprov.prom"
    run_report(t / "logs", t / "report", terminal=recording_terminal(), prometheus_path=prom)
    m = _metrics(prom.read_text())
    assert m['gpuprov_check_findings{action="reboot the node",check="host_mounts",host="node1"}'] == 1
    assert m['gpuprov_check_findings{action="none",check="host_services",host="node1"}'] == 1
    assert m['gpuprov_host_mount_writable{host="node1",path="%s"}' % (t / "ro")] == 0
    assert m['gpuprov_host_filesystem_used_ratio{host="node1",path="%s"}' % (t / "full")] > 0.9
    assert m['gpuprov_host_service_running{host="node1",service="gpuprov-nosuchd"}'] == 0
    html = (t / "report" / "report.html").read_text()
    assert "%s (tmpfs on tmpfs) is read-only" % (t / "ro") in html
    assert "service gpuprov-nosuchd is not running" in html
