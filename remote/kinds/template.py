"""The `template` step kind."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ..config.schema import Arg
from ..config.templating import parse as parse_template
from ..config.templating import render_text
from ..ground.errors import Where
from .base import Args, Command, Kind, q
from .file import FILE_PROBE, FILE_SPEC, FileState, check_mode, content_change, parse_file_state, plan_file


class Template(Kind[FileState]):
    """A Jinja2 file (relative to the recipe) rendered with the host's vars and facts to `dest`."""

    name = "template"
    spec = {"src": Arg((str,), required=True), "dest": Arg((str,), required=True), **FILE_SPEC}
    probe_fields = ("dest",)

    def check(self, args: Args, where: Where, base_dir: Path) -> None:
        check_mode(args, where)
        src = Path(args["src"])
        path = src if src.is_absolute() else base_dir / src
        try:
            args["_source"] = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise where.error(f"template source {path} cannot be read: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None
        args["_source_path"] = str(path)
        parse_template(args["_source"], Where(str(path), 1))

    def templates(self, args: Args) -> list[tuple[Any, bool]]:
        return [(args["dest"], False), (args["_source"], False)]

    def render(self, args: Args, context: dict[str, Any]) -> Args:
        out = super().render({k: v for k, v in args.items() if k != "_source"}, context)
        out["content"] = render_text(args["_source"], context)
        return out

    def probe(self, args: Args) -> str:
        return FILE_PROBE.format(path=q(args["dest"]))

    def parse(self, out: str) -> FileState:
        return parse_file_state(out)

    def plan(self, args: Args, fact: FileState) -> list[Command]:
        return plan_file(args["dest"], args["content"], args["mode"], args["owner"],
                         args["group"], "file", fact)

    def diff_target(self, args: Args, fact: FileState) -> Optional[tuple[str, str, bool]]:
        return content_change(args["dest"], args["content"], fact)
