"""The `template` step kind."""
from __future__ import annotations

from pathlib import Path

from ..errors import Where
from ..config.templating import parse, render_text
from .base import Kind, q
from .file import FILE_PROBE, check_mode, plan_file


class Template(Kind):
    """A Jinja2 file (relative to the recipe) rendered with the host's vars and facts to `dest`."""

    name = "template"
    fields = {"src": str, "dest": str, "mode": (str, int), "owner": str, "group": str}
    required = ("src", "dest")
    probe_fields = ("dest",)

    def check(self, args, where, base_dir):
        check_mode(args, where)
        src = Path(args["src"])
        path = src if src.is_absolute() else base_dir / src
        try:
            args["_source"] = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise where.error(f"template source {path} cannot be read: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None
        args["_source_path"] = str(path)
        parse(args["_source"], Where(str(path), 1))

    def templates(self, args):
        return [(args["dest"], False), (args["_source"], False)]

    def render(self, args, context):
        out = super().render({k: v for k, v in args.items() if k != "_source"}, context)
        out["content"] = render_text(args["_source"], context)
        return out

    def probe(self, args):
        return FILE_PROBE.format(path=q(args["dest"]))

    def plan(self, args, probe):
        return plan_file(args["dest"], args["content"], args.get("mode"), args.get("owner"),
                         args.get("group"), "file", probe)
