"""The `assert` step kind."""
from __future__ import annotations


from ..config.templating import evaluate, render_text
from .base import Kind


class Assert(Kind):
    """Conditions over facts and vars, checked on the control side; fails with `msg`."""

    name = "assert"
    fields = {"that": (list, str), "msg": str}
    required = ("that",)
    scalar_field = "that"
    remote = False

    def check(self, args, where, base_dir):
        if isinstance(args["that"], str):
            args["that"] = [args["that"]]
        for expr in args["that"]:
            if not isinstance(expr, (str, bool)):
                raise where.error("assert.that must hold expressions (strings)")

    def templates(self, args):
        return [(args.get("msg", ""), False)]

    def expressions(self, args):
        return [e for e in args["that"] if isinstance(e, str)]

    def render(self, args, context):
        return args  # expressions are evaluated in run_local, msg rendered there

    def run_local(self, args, context) -> tuple:
        for expr in args["that"]:
            if not evaluate(expr, context):
                msg = render_text(args.get("msg") or "", context)
                return False, msg or f"assertion failed: {expr}"
        return True, ""
