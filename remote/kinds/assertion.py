"""The `assert` step kind."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config.schema import Arg
from ..config.templating import evaluate, render_text
from ..ground.errors import Where
from .base import Args, Kind
from .commands import LocalAction


class Assert(Kind[None]):
    """Conditions over facts and vars, checked on the control side; fails with `msg`."""

    name = "assert"
    spec = {"that": Arg((list, str), required=True), "msg": Arg((str,), "")}
    scalar_field = "that"
    control_side = True

    def check(self, args: Args, where: Where, base_dir: Path) -> None:
        if isinstance(args["that"], str):
            args["that"] = [args["that"]]
        for expr in args["that"]:
            if not isinstance(expr, (str, bool)):
                raise where.error("assert.that must hold expressions (strings)")

    def templates(self, args: Args) -> list[tuple[Any, bool]]:
        return [(args["msg"], False)]

    def expressions(self, args: Args) -> list[str]:
        return [e for e in args["that"] if isinstance(e, str)]

    def parse(self, out: str) -> None:
        return None

    def render(self, args: Args, context: dict[str, Any]) -> Args:
        return args  # expressions are evaluated by the plan's action, msg rendered there

    def plan(self, args: Args, fact: None) -> list[LocalAction]:
        def check(context: dict[str, Any]) -> tuple[bool, str]:
            for expr in args["that"]:
                if not evaluate(expr, context):
                    msg = render_text(args["msg"] or "", context)
                    return False, msg or f"assertion failed: {expr}"
            return True, ""
        return [LocalAction(check, "assert " + " and ".join(map(str, args["that"])))]
