"""The bounds on what `gpuprov lock` takes from an index it does not control (issue 31): the
time one fetch may take in all, the size an apt index may reach once decompressed, and the
memory uv may use for one resolution. The environment variables below change them.
"""
from __future__ import annotations

from ..ground.envvars import env_number

DEADLINE_VARIABLE = "GPUPROV_LOCK_DEADLINE"
# Seconds for one apt index or one `uv pip compile` (one lock's resolution), from its start:
# chosen, unsourced, minutes on a slow link (`gpuprov lock --cuda 13.0`, three resolutions, took
# 17 to 26 s here with uv's cache cold). A timeout per read (urllib's, uv's UV_HTTP_TIMEOUT)
# never ends a server that sends a byte every few seconds.
DEFAULT_DEADLINE = 300.0
MAX_INDEX_VARIABLE = "GPUPROV_LOCK_MAX_INDEX_BYTES"
# An apt index once decompressed: chosen, unsourced, far above an index of every CUDA and driver
# release of a distribution and far below a machine's memory. Its stanzas are bounded too, at
# one per BYTES_PER_STANZA of that cap (a real stanza, with its file name, size, four hashes and
# a description, takes most of that on its own): deb822 takes about 80 us of CPU for a stanza,
# so a 64 MiB index of tiny stanzas would otherwise cost minutes and gigabytes.
DEFAULT_MAX_INDEX_BYTES = 64 << 20
BYTES_PER_STANZA = 1024
MAX_MEMORY_VARIABLE = "GPUPROV_LOCK_MAX_MEMORY_BYTES"
# uv's data (RLIMIT_DATA): chosen, unsourced; that same run peaked at 56 MiB and passed with the
# cap at 256 MiB.
DEFAULT_MAX_MEMORY_BYTES = 2 << 30


def fetch_deadline() -> float:
    """Seconds one fetch may take from its start to its last byte (GPUPROV_LOCK_DEADLINE)."""
    return env_number(DEADLINE_VARIABLE, DEFAULT_DEADLINE, 0.1)


def max_index_bytes() -> int:
    """The most bytes an apt index may decompress to (GPUPROV_LOCK_MAX_INDEX_BYTES)."""
    return int(env_number(MAX_INDEX_VARIABLE, DEFAULT_MAX_INDEX_BYTES, 1))


def max_memory_bytes() -> int:
    """The most data memory uv may take for one resolution (GPUPROV_LOCK_MAX_MEMORY_BYTES)."""
    return int(env_number(MAX_MEMORY_VARIABLE, DEFAULT_MAX_MEMORY_BYTES, 64 << 20))


def size_text(size: int) -> str:
    """`64 MiB` for a whole number of MiB, else bytes."""
    return f"{size >> 20} MiB" if size and size % (1 << 20) == 0 else f"{size} bytes"
