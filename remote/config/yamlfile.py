"""Strict YAML loading that keeps positions.

Inventories and recipes are read through `load_yaml`, which returns plain dicts and lists
(`YamlMap`, `YamlList`) that remember the file and line of every value, so any later check can
say exactly where a mistake is. It refuses what PyYAML silently accepts or cannot bound:
duplicate keys, anchors/aliases (alias bombs), absurd nesting, more values than any real file
holds (a 4 MiB flat list would take a gigabyte), tags on lists and mappings, binary or non-UTF-8
files.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..ground.errors import InputError, Where

MAX_DEPTH = 50  # deeper nesting is never a real recipe; PyYAML would recurse until it crashes
MAX_BYTES = 4 * 1024 * 1024
# Every value costs ~700 bytes of parser objects; 100000 is ~70 MB and ~1 s, far above a real
# inventory (1000 hosts of 10 fields are ~21000 values).
MAX_NODES = 100_000
PLAIN_TAGS = {"tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"}
NULL_TAG = "tag:yaml.org,2002:null"  # `~`, `null`: PyYAML's resolved tag for an empty value


class YamlMap(dict[str, Any]):
    """A mapping that remembers where it and each of its keys were written."""

    where: Where
    key_where: dict[str, Where]

    def at(self, key: str) -> Where:
        """The position of `key` (or of the mapping itself when the key is absent)."""
        return self.key_where.get(key, self.where)


class YamlList(list[Any]):
    """A sequence that remembers where it and each item were written."""

    where: Where
    item_where: list[Where]

    def at(self, index: int) -> Where:
        return self.item_where[index] if index < len(self.item_where) else self.where


class _StrictLoader(yaml.SafeLoader):
    def __init__(self, stream: str, name: str):
        super().__init__(stream)
        self.name = name
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Optional[Node], index: Any) -> Optional[Node]:  # PyYAML hook
        if self.check_event(AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise InputError(
                f"YAML alias '*{event.anchor}' is not supported: write the value out "
                "(anchors and aliases are refused so a file cannot expand without bound)",
                self.name, event.start_mark.line + 1)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise InputError(f"nesting deeper than {MAX_DEPTH} levels", self.name,
                             event.start_mark.line + 1)
        self._nodes += 1
        if self._nodes > MAX_NODES:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise InputError(f"more than {MAX_NODES} YAML values: not an inventory or recipe "
                             "a person wrote", self.name, event.start_mark.line + 1)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _convert(loader: _StrictLoader, node: Node) -> Any:
    where = Where(loader.name, node.start_mark.line + 1)
    if isinstance(node, ScalarNode):
        try:
            return loader.construct_object(node, deep=True)
        except (ValueError, OverflowError) as exc:  # e.g. `2024-02-30` read as a date
            raise InputError(f"cannot read the value {_short(node.value)!r}: {exc}", loader.name,
                             where.line) from None
    if node.tag not in PLAIN_TAGS:
        # PyYAML would build these (sets, ordered maps, ...); as lists/mappings they would pass
        # silently with the tag ignored, so refuse them like unknown scalar tags.
        raise InputError(f"YAML tag '{node.tag}' is not supported", loader.name, where.line)
    if isinstance(node, SequenceNode):
        items = YamlList(_convert(loader, item) for item in node.value)
        items.where = where
        items.item_where = [Where(loader.name, item.start_mark.line + 1) for item in node.value]
        return items
    if isinstance(node, MappingNode):
        out = YamlMap()
        out.where = where
        out.key_where = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise InputError("YAML merge keys ('<<') are not supported", loader.name, key_line)
            key = _convert(loader, key_node)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise InputError("a mapping key must be a plain value", loader.name, key_line)
            # A key is a name as written: `yes:` is 'yes' (not 'True'), `0x1f:` is '0x1f'.
            key = key if isinstance(key, str) else key_node.value
            if key in out:
                first = out.key_where[key].line
                raise InputError(f"duplicate key '{key}' (first written on line {first})",
                                 loader.name, key_line)
            out[key] = _convert(loader, value_node)
            out.key_where[key] = Where(loader.name, key_line)
        return out
    raise InputError(f"unsupported YAML node {node.tag}", loader.name, where.line)


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_text(path: str | Path, what: str = "file") -> str:
    """The text of `path`: UTF-8, not binary, not empty, at most MAX_BYTES; else `InputError`.

    `what` names the kind of file in messages ("inventory", "recipe").
    """
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} not found", name) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", name) from None
    if len(raw) > MAX_BYTES:
        raise InputError(f"{what} is larger than {MAX_BYTES // 1024 // 1024} MiB", name)
    if b"\0" in raw:
        raise InputError(f"{what} is a binary file, not YAML", name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"{what} is not UTF-8 text", name, line) from None
    if not text.strip():
        raise InputError(f"{what} is empty", name)
    return text


def load_yaml(path: str | Path, what: str = "file", mapping: str = "") -> Any:
    """Load one YAML document from `path` with positions kept; raise `InputError` on any flaw.

    `what` names the kind of file in messages ("inventory", "recipe"). With `mapping` (the
    message), a document that is a list or a value other than null is refused at the line it
    starts on (a scalar keeps no position once read, so this is the one place that knows it).
    """
    name = str(path)
    text = read_text(path, what)
    try:
        loader = _StrictLoader(text, name)
    except yaml.reader.ReaderError as exc:  # a control character PyYAML will not read
        line = text[: exc.position].count("\n") + 1
        raise InputError(f"{what} holds a control character (U+{exc.character:04X}) that YAML does "
                         "not allow", name, line) from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise InputError(f"{what} has no content (only comments?)", name)
        if mapping and not isinstance(node, MappingNode) and node.tag != NULL_TAG:
            found = "a list" if isinstance(node, SequenceNode) else "a single value"
            raise InputError(f"{mapping}, not {found}", name, node.start_mark.line + 1)
        return _convert(loader, node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        if "\t" in problem or "'\\t'" in problem:
            problem = "a tab character; YAML indentation must use spaces"
        raise InputError(f"invalid YAML: {problem}", name, mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", name) from None
    except RecursionError:
        raise InputError("nesting too deep", name) from None
    except (ValueError, OverflowError) as exc:  # PyYAML's scanner on escapes like "\UFFFFFFFF"
        raise InputError(f"invalid YAML: an escape or value that cannot be read ({exc})", name,
                         loader.line + 1) from None
    finally:
        loader.dispose()
