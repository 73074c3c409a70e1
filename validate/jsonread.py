"""The one reader of a JSON document that validate/ takes from a user or a host: `--judge
FILE`, `--profile FILE|JSON`.  Python's json module recurses once per level of nesting (a
file of 100,000 ``[`` raises RecursionError), reads an integer of any length that a later
``float()`` cannot hold (OverflowError past 309 digits) and, from Python 3.11, refuses one past
4,300 digits with a ValueError of its own (``sys.get_int_max_str_digits``, "Integer string
conversion length limitation", docs.python.org/3/library/stdtypes.html#int-max-str-digits).
Here each of those is a `BadJSON` before json sees it: too large, nested too deeply, an integer
with too many digits.  ``NaN`` and ``Infinity`` are read (json accepts them) and refused where
a figure is checked (judge.py ``_number``, profile.py ``_num``), as before.

Stands alone (standard library only, Python 3.8+): it runs on the hosts' python3.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

# Chosen (unsourced): a recorded figures file or a node profile is a few KiB; 1 MiB is room
# for a few thousand GPUs.
MAX_BYTES = 1 << 20
# Chosen (unsourced): a node profile or a figures file is 4 levels deep (gpus[i].spec.key), a
# results.json 8 (tests/fixtures/validate/h200/*/results.json); CPython's decoder would go about
# 1,000 deep before its RecursionError.
MAX_DEPTH = 64
# Chosen (unsourced): no count or figure needs more than 20 digits; every integer of at most 40
# digits converts to a float (the largest float has 309).
MAX_INT_DIGITS = 40

# Escapes first (RFC 8259 section 7: a backslash and the character after it), then what is left
# between quotes is a string's text: taken out before brackets are counted, so a "[" inside a
# string is not nesting. Single-character repeats only: re runs them without a stack per
# character (an escape-heavy 16 MiB string through a regex with a repeated group took 558 MiB).
_STRING = re.compile(rb'"[^"]*"')
# bytes.translate keeps only the brackets, `{` `}` made `[` `]`, in one C loop (the brackets are
# ASCII: no byte of a UTF-8 multibyte character is one)
_ONE_KIND = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


class BadJSON(ValueError):
    """Not a document validate reads: the message says why, in a few words."""


def check_depth(text: str, limit: int = MAX_DEPTH) -> None:
    """`BadJSON` when arrays and objects in `text` nest more than `limit` deep. No recursion:
    each pass takes out every innermost pair of brackets with bytes.replace (one level a pass,
    at most `limit` + 1 passes, in C); brackets left that no pass can pair are text json
    refuses itself, unless they would take it past `limit` first."""
    bare = text.encode("utf-8", "surrogatepass").replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = _STRING.sub(b"", bare).translate(_ONE_KIND, _NOT_BRACKET)
    for passes in range(limit + 1):
        if not brackets:
            return
        inner = brackets.replace(b"[]", b"")
        if inner == brackets:  # nothing pairs: closers, then openers that never close
            if passes + brackets.count(b"[") <= limit:
                return  # json names the fault
            break
        brackets = inner
    raise BadJSON("nested more than %d deep" % limit)


def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise BadJSON("an integer of %d digits, more than %d" % (len(digits.lstrip("-")), MAX_INT_DIGITS))
    return int(digits)


def loads(text: str, max_bytes: int = MAX_BYTES) -> Any:
    """`text` as a JSON value; `BadJSON` naming the fault (size, nesting, digits, syntax).
    `max_bytes`: the control side reads a host's results.json (up to 16 MiB) with it."""
    if len(text) > max_bytes:
        raise BadJSON("%d bytes, more than %d" % (len(text), max_bytes))
    check_depth(text)
    try:
        return json.loads(text, parse_int=_int)
    except BadJSON:
        raise
    except (ValueError, RecursionError) as exc:  # RecursionError: a bracket the count missed
        raise BadJSON("not JSON: %s" % exc) from None


def load_file(path: str) -> Any:
    """The JSON document in the file `path`: a regular file (a FIFO or a device is refused,
    never waited on) of at most MAX_BYTES, UTF-8; `BadJSON` or OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise BadJSON("not a regular file")
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise BadJSON("more than %d bytes" % MAX_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadJSON("not UTF-8 text (%s)" % exc.reason) from None
    return loads(text)
