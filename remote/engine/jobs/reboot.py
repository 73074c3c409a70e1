"""The reboot-and-wait command (`kinds.commands.RebootAndWait`): reboot a host, reconnect, and
wait for a new boot_id. The session reopens its connection here; the cache route it found goes
with the old connection (`HostSession.close`).
"""
from __future__ import annotations

import time

from ...ground.errors import CommandTimeout, ConnectionLost, Unreachable
from ..results import StepStatus
from ..session import HostSession

BOOT_ID = "cat /proc/sys/kernel/random/boot_id"


def reboot_and_wait(session: HostSession, timeout: float) -> tuple[StepStatus, str]:
    """Reboot the host, reconnect, and wait for a new boot_id: (status, message)."""
    if session.host.is_local:
        return StepStatus.FAILED, ("refusing to reboot: this host is the control machine "
                                   "(connection: local)")
    before = session.conn.run(BOOT_ID, timeout=30).out.strip()
    session.reporter.running(session.host.name, f"rebooting (waiting up to {timeout:g} s)")
    session.log.event(f"reboot: boot_id before {before}")
    try:
        # Detached, so the command returns before sshd goes down with the host.
        session.conn.run("nohup sh -c 'sleep 1; reboot || shutdown -r now' >/dev/null 2>&1 &",
                         become=True, timeout=30)
    except (ConnectionLost, CommandTimeout):
        pass
    session.close()
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    time.sleep(2)
    while time.monotonic() < deadline:
        session.check_cancel()
        try:
            session.open()
            after = session.conn.run(BOOT_ID, timeout=30).out.strip()
            if after and after != before:
                session.facts["boot_id"] = after
                session.log.event(f"reboot: back with boot_id {after}")
                return StepStatus.CHANGED, \
                    f"rebooted in {timeout - (deadline - time.monotonic()):.0f} s"
            last = "still the same boot_id (reboot not started?)"
            session.close()
        except (Unreachable, ConnectionLost, CommandTimeout, EOFError, OSError) as exc:
            # sshd may accept and drop connections while the host comes back
            last = str(exc) or type(exc).__name__
        time.sleep(2)
    raise Unreachable(f"did not come back with a new boot_id within {timeout:g} s after "
                      f"reboot ({last})")
