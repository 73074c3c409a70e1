"""The `reboot` step kind."""
from __future__ import annotations

from ..config.schema import Arg
from ..ground.errors import PlanError
from ..ground.reboots import REBOOT_TIMEOUT_S
from .base import Args, Kind
from .commands import RebootAndWait


class Reboot(Kind[None]):
    """Reboot the host and wait until it is back with a new boot_id (refused on the local
    connection: that would reboot the control machine)."""

    name = "reboot"
    # A string: the timeout may be a template (`"{{ reboot_timeout }}"`), a number once rendered.
    spec = {"timeout": Arg((int, float, str), REBOOT_TIMEOUT_S), "msg": Arg((str,))}
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
