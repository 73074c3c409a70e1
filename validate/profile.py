"""A node profile: what the inventory says one node must be, and what it waives.

``python3 -m validate --profile FILE|JSON`` (gpuprov passes the host's
``node_profile`` var and its waiver vars as one JSON document; see
docs/how-to/node-profiles.md).  The profile follows AzNHC's per-VM-size conf
files and AWS's per-instance-type defaults (shared/research/sku-expectations.md 1.):
expected hardware, and floors that override the table::

    {"gpus": {"count": 8, "model": "NVIDIA H100 80GB HBM3"},
     "pcie": {"gen": 5, "width": 16},
     "ib": [{"ports": 8, "rate_gbps": 400, "link_layer": "InfiniBand"}],
     "floors": {"bf16_tflops": 600, "nccl_busbw_gbs": 440},
     "tolerance": 0.05,
     "ignore_xids": [13], "acknowledged_before": "2026-11-20T00:00:00Z",
     "warn_only": ["p2p"],
     "fabric": {"ib_write_bw": 380}}

Every key is optional.  ``tolerance`` lowers every floor (the table's and
the profile's) by that fraction.  A bad document is one line naming the key
and what is wrong (``BadProfile``); validate exits 2 on it.
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Optional

from . import actions, expectations, jsonread

FLOOR_FIGURES = expectations.GPU_FIGURES + ("p2p_gbs", "nccl_busbw_gbs")
LINK_LAYERS = ("InfiniBand", "Ethernet")
KEYS = ("gpus", "pcie", "ib", "floors", "tolerance", "ignore_xids", "acknowledged_before", "warn_only",
        "fabric", "host", "dcgm")
# the host around the GPU (validate/checks/host_*.py; their defaults and sources: host_floors.py)
HOST_KEYS = ("mounts", "fill_max_pct", "fill_paths", "scratch", "scratch_read_mbs", "scratch_write_mbs",
             "fio_size_mib", "fio_seconds", "memory_gib", "edac_corrected_max", "cpus", "governor",
             "services", "clock")
# "dcgm": the dcgm check's run level, {"level": 1-4} (validate/checks/dcgm.py reads and checks it)


class BadProfile(ValueError):
    """A bad document: the message starts with the key it names ("ib[0].rate_gbps: ...");
    ``key`` is that key ("" for the document itself), so that gpuprov, which runs this same
    check on the inventory before it contacts a host, can name the line it was written on."""

    def __init__(self, message: str, key: Optional[str] = None) -> None:
        super().__init__(message)
        self.key = key if key is not None else message.partition(": ")[0]
        if self.key == "profile":
            self.key = ""


def _int(where, value, low=0):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BadProfile("%s: not an integer >= %d: %r" % (where, low, value))
    return value


def _num(where, value):
    # NaN and infinity are no floor: `.inf` in YAML would fail every node, `.nan` none
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0
            or value == float("inf")):
        raise BadProfile("%s: not a non-negative number: %r" % (where, value))
    try:
        return float(value)
    except OverflowError:  # an integer past float's range (the inventory's YAML has no digit cap)
        raise BadProfile("%s: too large a number (%d bits)" % (where, int(value).bit_length())) from None


def _mapping(where, value, keys):
    if not isinstance(value, dict):
        raise BadProfile("%s: not a mapping" % where)
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise BadProfile("%s: unknown key %r (known: %s)" % (where, unknown[0], ", ".join(keys)),
                         unknown[0] if where == "profile" else "%s.%s" % (where, unknown[0]))
    return value


def parse_time(where, text):
    """An ISO 8601 time ("2026-11-20", "2026-11-20T10:00:00Z", "...+02:00") as an aware
    datetime; a time without a zone is UTC."""
    if not isinstance(text, str):
        raise BadProfile("%s: not an ISO 8601 time: %r" % (where, text))
    s = text.strip()
    s = s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s
    try:
        t = datetime.datetime.fromisoformat(s)
    except ValueError:
        raise BadProfile("%s: not an ISO 8601 time: %r" % (where, text)) from None
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)


def _ports(where, spec):
    spec = _mapping(where, spec, ("ports", "rate_gbps", "link_layer"))
    out = {"ports": _int(where + ".ports", spec.get("ports", 0)),
           "rate_gbps": _num(where + ".rate_gbps", spec["rate_gbps"]) if spec.get("rate_gbps") is not None
           else None, "link_layer": spec.get("link_layer")}
    if out["link_layer"] is not None and out["link_layer"] not in LINK_LAYERS:
        raise BadProfile("%s.link_layer: %r is not one of %s" % (where, out["link_layer"], ", ".join(LINK_LAYERS)))
    return out


def _ib(doc):
    ib = doc.get("ib") or []
    ib = [ib] if isinstance(ib, dict) else ib
    if not isinstance(ib, list):
        raise BadProfile("ib: not a mapping or a list of mappings")
    return ib


def _tolerance(doc):
    tolerance = _num("tolerance", doc.get("tolerance", 0.0))
    if tolerance >= 1:
        raise BadProfile("tolerance: %r is not below 1 (a fraction: 0.05 = 5 %%)" % tolerance)
    return tolerance


def _ignore_xids(doc):
    ignore = doc.get("ignore_xids") or []
    if not isinstance(ignore, list):
        raise BadProfile("ignore_xids: not a list of Xid numbers")
    return ignore


def _warn_only(doc, check_names):
    warn_only = doc.get("warn_only") or []
    if not isinstance(warn_only, list) or not all(isinstance(c, str) for c in warn_only):
        raise BadProfile("warn_only: not a list of check names")
    for i, name in enumerate(warn_only):
        if check_names and name not in check_names:
            raise BadProfile("warn_only: unknown check %r (known: %s)" % (name, ", ".join(check_names)),
                             "warn_only[%d]" % i)
    return warn_only


def _model(gpus):
    model = gpus.get("model")
    if model is not None and not isinstance(model, str):
        raise BadProfile("gpus.model: not a string")
    return model


def _fabric(doc):
    """The floors of `gpuprov fabric`'s pairs, per tool (ib_write_bw Gb/s, all_reduce_perf GB/s,
    iperf3 Gb/s): checked here, judged by the fabric command (the tool names are its own)."""
    fabric = doc.get("fabric") or {}
    if not isinstance(fabric, dict) or not all(isinstance(k, str) for k in fabric):
        raise BadProfile("fabric: not a mapping of a tool to its floor")
    return fabric


def _paths(where, value):
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.startswith("/") for v in value):
        raise BadProfile("%s: not a list of absolute paths" % where)
    return list(value)


def _names(where, value):
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise BadProfile("%s: not a list of names" % where)
    return list(value)


def _optional_num(where, mapping, key):
    return _num(where, mapping[key]) if mapping.get(key) is not None else None


def _host(doc):
    """The ``host`` section: what the host around the GPUs must be (mounts, fill, scratch
    throughput, memory, CPUs, clock, services); every key optional."""
    h = _mapping("host", doc.get("host") or {}, HOST_KEYS)
    scratch = h.get("scratch")
    if scratch is not None and not (isinstance(scratch, str) and scratch.startswith("/")):
        raise BadProfile("host.scratch: not an absolute path: %r" % (scratch,))
    fill = _optional_num("host.fill_max_pct", h, "fill_max_pct")
    if fill is not None and not 0 < fill <= 100:
        raise BadProfile("host.fill_max_pct: %r is not a percentage above 0, at most 100" % fill)
    governor, clock = h.get("governor"), h.get("clock", True)
    if governor is not None and not (isinstance(governor, str) and governor.strip()):
        raise BadProfile("host.governor: not a governor's name (performance, powersave, ...)")
    if not isinstance(clock, bool):
        raise BadProfile("host.clock: not true or false")
    out = dict((k, _optional_num("host." + k, h, k)) for k in (
        "scratch_read_mbs", "scratch_write_mbs", "memory_gib"))
    out.update(dict((k, _optional_int("host." + k, h, k, 1)) for k in ("fio_size_mib", "fio_seconds", "cpus")))
    out.update({"mounts": _paths("host.mounts", h.get("mounts")), "fill_max_pct": fill,
                "fill_paths": _paths("host.fill_paths", h.get("fill_paths")), "scratch": scratch,
                "edac_corrected_max": _optional_int("host.edac_corrected_max", h, "edac_corrected_max", 0),
                "governor": governor, "services": _names("host.services", h.get("services")),
                "clock": clock})
    return out


def _optional_int(where, mapping, key, low):
    return _int(where, mapping[key], low) if mapping.get(key) is not None else None


def _acknowledged_before(doc):
    value = doc.get("acknowledged_before")
    return parse_time("acknowledged_before", value) if value is not None else None


def from_document(doc: Any, check_names=()) -> dict[str, Any]:
    """The checked profile of a parsed document (BadProfile naming the key): each key's shape
    first, in this order, then its values."""
    doc = _mapping("profile", doc, KEYS)
    gpus = _mapping("gpus", doc.get("gpus") or {}, ("count", "model"))
    pcie = _mapping("pcie", doc.get("pcie") or {}, ("gen", "width"))
    ib = _ib(doc)
    floors = _mapping("floors", doc.get("floors") or {}, FLOOR_FIGURES)
    tolerance = _tolerance(doc)
    ignore = _ignore_xids(doc)
    warn_only = _warn_only(doc, check_names)
    model = _model(gpus)
    fabric = _fabric(doc)
    host = _host(doc)
    return {
        "gpus": {"count": _optional_int("gpus.count", gpus, "count", 1), "model": model},
        "pcie": {"gen": _optional_int("pcie.gen", pcie, "gen", 1),
                 "width": _optional_int("pcie.width", pcie, "width", 1)},
        "ib": [_ports("ib[%d]" % i, p) for i, p in enumerate(ib)],
        "floors": dict((k, _num("floors." + k, v)) for k, v in floors.items()),
        "tolerance": tolerance,
        "ignore_xids": [_int("ignore_xids[%d]" % i, x, 1) for i, x in enumerate(ignore)],
        "acknowledged_before": _acknowledged_before(doc),
        "warn_only": list(warn_only),
        "fabric": dict((k, _num("fabric." + k, v)) for k, v in fabric.items()),
        "host": host,
        "document": doc,
    }


def load(text_or_path: str, check_names=()) -> dict[str, Any]:
    """``--profile``'s value: inline JSON (starts with '{') or a JSON file."""
    inline = text_or_path.lstrip().startswith("{")
    where = "--profile" if inline else "--profile %s" % text_or_path
    if not inline and not os.path.isfile(text_or_path):
        raise BadProfile("%s: no such file" % where)
    try:  # one reader for every JSON a user or a host gives (jsonread: size, depth, digits)
        doc = jsonread.loads(text_or_path) if inline else jsonread.load_file(text_or_path)
    except jsonread.BadJSON as exc:
        raise BadProfile("%s: %s" % (where, exc)) from None
    except OSError as exc:
        raise BadProfile("%s: %s" % (where, exc.strerror or exc)) from None
    try:
        return from_document(doc, check_names)
    except BadProfile as exc:
        raise BadProfile("%s: %s" % (where, exc)) from None


def empty() -> dict[str, Any]:
    return from_document({})


# ---------------------------------------------------------------------------
# the node against it


def judges_node(profile):
    """Whether the profile says what the node's GPUs must be (count, model, PCIe link)."""
    return bool(profile and (profile["gpus"]["count"] or profile["gpus"]["model"]
                             or profile["pcie"]["gen"] or profile["pcie"]["width"]))


def node_gaps(profile, gpus):
    """[(gap, action)] of nvidia-smi's GPU rows against the profile: the GPU count and model
    (fewer GPUs than expected: reboot the node; another model: no action, the wrong machine),
    then each GPU's PCIe link (drain and replace).  The one judge of a node against its
    profile: the node check on a live node, ``--judge --profile`` on recorded figures."""
    out = [(gap, actions.REBOOT_NODE if kind == "missing" else None) for gap, kind in gpu_gaps(profile, gpus)]
    return out + [(gap, actions.DRAIN_RMA) for gap in pcie_gaps(profile, gpus)]


def describe_gpus(count, model):
    return "%s x %s" % (count if count is not None else "any number of", model or "any GPU")


def gpu_gaps(profile, gpus):
    """[(gap, action key)] of nvidia-smi's GPU rows ({"name", "pci.device_id", ...})
    against the profile's count and model; action key: "missing" (fewer GPUs) or "model"."""
    want = profile["gpus"]
    expected = describe_gpus(want["count"], want["model"])
    found: dict[str, int] = {}
    wrong = False
    target = expectations.identify(want["model"])[0] if want["model"] else None
    for g in gpus:
        name = g.get("name") or "?"
        found[name] = found.get(name, 0) + 1
        if want["model"]:
            try:
                key = expectations.identify(name, g.get("pci.device_id"), g.get("pci.sub_device_id"))[0]
            except ValueError:
                key = expectations.identify(name)[0]
            wrong = wrong or (name.lower() != want["model"].lower() and (target is None or key != target))
    if wrong:  # one gap that names every GPU found (a wrong count beside it says nothing more)
        return [("expected %s, found %s" % (expected, ", ".join(
            "%d x %s" % (n, name) for name, n in sorted(found.items()))), "model")]
    if want["count"] is not None and len(gpus) != want["count"]:
        return [("expected %s, found %d" % (expected, len(gpus)),
                 "missing" if len(gpus) < want["count"] else "model")]
    return []


def pcie_gaps(profile, gpus):
    """[gap] of each GPU's maximum PCIe link (the most the GPU and its slot can
    train: nvidia-smi pcie.link.gen.max / width.max) below the profile's."""
    want = profile["pcie"]
    gaps = []
    for g in gpus:
        gen, width = g.get("pcie.link.gen.max"), g.get("pcie.link.width.max")
        short = []
        if want["gen"] is not None and gen is not None and gen < want["gen"]:
            short.append("gen %s" % gen)
        if want["width"] is not None and width is not None and width < want["width"]:
            short.append("x%s" % width)
        if short:
            gaps.append("GPU %s: PCIe link at most %s, expected gen %s x%s" % (
                g.get("pci.bus_id"), " ".join(short), want["gen"] or "any", want["width"] or "any"))
    return gaps
