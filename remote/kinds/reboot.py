"""The `reboot` step kind."""
from __future__ import annotations


from ..errors import PlanError
from .base import Command, Kind


class Reboot(Kind):
    """Reboot the host and wait until it is back with a new boot_id (refused on the local
    connection: that would reboot the control machine)."""

    name = "reboot"
    fields = {"timeout": (int, float, str), "msg": str}
    scalar_field = "msg"

    def plan(self, args, probe):
        return [Command("reboot", display=f"reboot and wait up to {self.timeout(args):g} s for a "
                                          "new boot_id")]

    @staticmethod
    def timeout(args) -> float:
        try:
            return float(args.get("timeout", 900))
        except (TypeError, ValueError):
            raise PlanError(f"reboot.timeout {args.get('timeout')!r} is not a number") from None
