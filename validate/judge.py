"""``python3 -m validate --judge FILE.json [--profile P]``: recorded figures, the run's verdict.

Figures measured elsewhere, or kept from an earlier run, get the same verdict
as a run: each goes through ``expectations`` (the table and its judge).
Input::

    {"gpus": [{"name", "pci_device_id", "pci_sub_device_id", "pci_bus_id", "pcie_link_gen_max",
               "pcie_link_width_max", "bf16_tflops", "tf32_tflops", "fp32_tflops",
               "d2d_gbs", "h2d_gbs", "d2h_gbs", "power_w"}],
     "p2p_gbs": {"0-1": GB/s, ...},
     "nccl_allreduce": {"busbw_gbs", "bytes", "gpus"}}

Any figure may be absent: it is not judged.  P2P pairs and the all-reduce are
judged against the node's model when every GPU is of one model.  With a
profile that says what the node must be (GPU count, model, PCIe link), the
``gpus`` list is held against it by the node check's own judge
(``profile.node_gaps``): the result's ``node``.  Exit: 0 every judged figure
passes, 1 any fails, 3 none fails but some had no reference, 2 bad input (one
line on stderr naming the file and the fault).
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from . import expectations as ex
from . import jsonread
from . import profile as profile_mod

EXIT = {ex.PASS: 0, ex.FAIL: 1, ex.NO_REFERENCE: 3}
_PAIR = re.compile(r"^(\d+)-(\d+)$")
# an input GPU's keys as nvidia-smi's rows name them (validate/checks/node.py FIELDS)
ROW_KEYS = {"name": "name", "pci_device_id": "pci.device_id", "pci_sub_device_id": "pci.sub_device_id",
            "pci_bus_id": "pci.bus_id", "pcie_link_gen_max": "pcie.link.gen.max",
            "pcie_link_width_max": "pcie.link.width.max"}


class BadInput(ValueError):
    pass


def _number(where, value):
    """A recorded figure: json reads `Infinity` and `NaN`, and an infinite figure would pass
    every floor, so only finite ones are figures."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value < 0):
        raise BadInput("%s: not a non-negative number: %r" % (where, value))
    return float(value)


def _gpu(index, g):
    if not isinstance(g, dict):
        raise BadInput("gpus[%d]: not an object" % index)
    for k in ("name", "pci_device_id", "pci_sub_device_id", "pci_bus_id"):
        if g.get(k) is not None and not isinstance(g[k], str):
            raise BadInput("gpus[%d].%s: not a string" % (index, k))
    try:
        model, how = ex.identify(g.get("name"), g.get("pci_device_id"), g.get("pci_sub_device_id"))
    except ValueError as exc:
        raise BadInput("gpus[%d]: %s" % (index, exc)) from None
    for k in ("pcie_link_gen_max", "pcie_link_width_max"):
        if g.get(k) is not None:
            # a link is a whole number (nvidia-smi's); `_row` makes it an int (inf would raise)
            if not _number("gpus[%d].%s" % (index, k), g[k]).is_integer():
                raise BadInput("gpus[%d].%s: not a whole number: %r" % (index, k, g[k]))
    return model, how


def _row(index, g):
    """An input GPU as an nvidia-smi row (the node check's input); without a bus id, named
    by its place in the list."""
    row = dict((smi_key, g.get(key)) for key, smi_key in ROW_KEYS.items())
    row["pci.bus_id"] = row["pci.bus_id"] or "gpus[%d]" % index
    for k in ("pcie.link.gen.max", "pcie.link.width.max"):
        row[k] = int(row[k]) if row[k] is not None else None
    return row


def judge_node(doc, prof):
    """The recorded GPUs against the profile's count, model and PCIe link, by the judge the
    node check uses on a live node; None when the profile says nothing of them."""
    if not profile_mod.judges_node(prof):
        return None
    node: dict[str, Any] = {"expected": {"gpus": prof["gpus"], "pcie": prof["pcie"]}, "found": None, "gaps": []}
    if "gpus" not in doc:
        return dict(node, verdict=ex.NO_REFERENCE, reason="no gpus recorded: the node is not judged")
    rows = [_row(i, g) for i, g in enumerate(doc["gpus"])]
    node["found"] = {"count": len(rows), "names": sorted(set(r["name"] or "?" for r in rows))}
    node["gaps"] = [{"what": what, "action": action} for what, action in profile_mod.node_gaps(prof, rows)]
    if node["gaps"]:
        return dict(node, verdict=ex.FAIL, reason="; ".join(g["what"] for g in node["gaps"]))
    unrecorded = [i for i, r in enumerate(rows)
                  if (prof["pcie"]["gen"] and r["pcie.link.gen.max"] is None)
                  or (prof["pcie"]["width"] and r["pcie.link.width.max"] is None)]
    if unrecorded:
        return dict(node, verdict=ex.NO_REFERENCE, reason="no PCIe link recorded for gpus %s: not judged"
                    % ",".join(str(i) for i in unrecorded))
    return dict(node, verdict=ex.PASS, reason="")


def judge_document(doc, prof=None):
    """{"figures": [...], "models": [...], "node", "verdict"} for a parsed input
    document (``prof``: a loaded profile, or None); raises BadInput naming the fault."""
    if not isinstance(doc, dict):
        raise BadInput("the document is not a JSON object")
    gpus = doc.get("gpus", [])
    if not isinstance(gpus, list):
        raise BadInput("gpus: not a list")
    figures, models = [], []
    for i, g in enumerate(gpus):
        model, how = _gpu(i, g)
        models.append({"gpu": i, "name": g.get("name"), "model": model, "matched_by": how})
        for figure in ex.GPU_FIGURES:
            if g.get(figure) is not None:
                value = _number("gpus[%d].%s" % (i, figure), g[figure])
                figures.append(dict(ex.judge(model, figure, value), gpu=i, model=model, figure=figure))
    kinds = set(m["model"] for m in models)
    node = kinds.pop() if len(kinds) == 1 else None  # a floor for 8 H100s says nothing of a mixed node
    p2p = doc.get("p2p_gbs") or {}
    if not isinstance(p2p, dict):
        raise BadInput("p2p_gbs: not an object")
    for pair in sorted(p2p):
        if not _PAIR.match(pair):
            raise BadInput("p2p_gbs: %r is not a pair like \"0-1\"" % pair)
        value = _number("p2p_gbs.%s" % pair, p2p[pair])
        figures.append(dict(ex.judge(node, "p2p_gbs", value), gpu=pair, model=node, figure="p2p_gbs"))
    nccl = doc.get("nccl_allreduce")
    if nccl is not None:
        if not isinstance(nccl, dict):
            raise BadInput("nccl_allreduce: not an object")
        if nccl.get("busbw_gbs") is not None:
            busbw = _number("nccl_allreduce.busbw_gbs", nccl["busbw_gbs"])
            nbytes = nccl.get("bytes")
            if nbytes is not None:
                nbytes = int(_number("nccl_allreduce.bytes", nbytes))
            count = nccl.get("gpus", len(gpus))
            count = int(_number("nccl_allreduce.gpus", count))
            figures.append(dict(ex.judge_allreduce(node, busbw, nbytes, count), gpu="all", model=node,
                                figure="nccl_busbw_gbs", bytes=nbytes, gpus=count))
    node = judge_node(doc, prof)
    return {"models": models, "figures": figures, "node": node,
            "verdict": ex.overall(figures + ([node] if node else []))}


def main(path, stdout=None, stderr=None, prof=None):
    """Judge FILE (against the loaded profile ``prof``, if any), print the JSON verdict;
    the exit status."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        try:
            doc = jsonread.load_file(path)
        except jsonread.BadJSON as exc:
            raise BadInput(str(exc)) from None
        result = judge_document(doc, prof)
    except (OSError, UnicodeDecodeError) as exc:
        stderr.write("validate: error: %s: %s\n" % (path, getattr(exc, "strerror", None) or exc))
        return 2
    except BadInput as exc:
        stderr.write("validate: error: %s: %s\n" % (path, exc))
        return 2
    result["file"] = path
    stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return EXIT[result["verdict"]]
