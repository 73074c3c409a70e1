"""The `reboot` step kind."""
from __future__ import annotations

from ..config.schema import Arg
from ..ground.errors import PlanError
from .base import Args, Kind
from .commands import RebootAndWait

# How long a reboot is waited for by default (chosen: GPU servers POST slowly; Ansible's reboot
# module waits 600 s, docs.ansible.com ansible.builtin.reboot `reboot_timeout`). The one owner:
# `gpuprov remediate`'s reboot waits as long (remote/remediation/ladder.py).
DEFAULT_TIMEOUT_S = 900


class Reboot(Kind[None]):
    """Reboot the host and wait until it is back with a new boot_id (refused on the local
    connection: that would reboot the control machine)."""

    name = "reboot"
    # A string: the timeout may be a template (`"{{ reboot_timeout }}"`), a number once rendered.
    spec = {"timeout": Arg((int, float, str), DEFAULT_TIMEOUT_S), "msg": Arg((str,))}
    scalar_field = "msg"

    def parse(self, out: str) -> None:
        return None

    def plan(self, args: Args, fact: None) -> list[RebootAndWait]:
        return [RebootAndWait(self.timeout(args))]

    @staticmethod
    def timeout(args: Args) -> float:
        try:
            return float(args["timeout"])
        except (TypeError, ValueError):
            raise PlanError(f"reboot.timeout {args['timeout']!r} is not a number") from None
