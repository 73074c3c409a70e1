"""``python3 -m validate --judge FILE.json``: recorded figures, the run's verdict.

Figures measured elsewhere, or kept from an earlier run, get the same verdict
as a run: each goes through ``expectations`` (the table and its judge).
Input::

    {"gpus": [{"name", "pci_device_id", "pci_sub_device_id", "bf16_tflops", "tf32_tflops",
               "fp32_tflops", "d2d_gbs", "h2d_gbs", "d2h_gbs", "power_w"}],
     "p2p_gbs": {"0-1": GB/s, ...},
     "nccl_allreduce": {"busbw_gbs", "bytes", "gpus"}}

Any figure may be absent: it is not judged.  P2P pairs and the all-reduce are
judged against the node's model when every GPU is of one model.  Exit: 0
every judged figure passes, 1 any fails, 3 none fails but some had no
reference, 2 bad input (one line on stderr naming the file and the fault).
"""

import json
import re
import sys

from . import expectations as ex

EXIT = {ex.PASS: 0, ex.FAIL: 1, ex.NO_REFERENCE: 3}
_PAIR = re.compile(r"^(\d+)-(\d+)$")


class BadInput(ValueError):
    pass


def _number(where, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise BadInput("%s: not a non-negative number: %r" % (where, value))
    return float(value)


def _gpu(index, g):
    if not isinstance(g, dict):
        raise BadInput("gpus[%d]: not an object" % index)
    for k in ("name", "pci_device_id", "pci_sub_device_id"):
        if g.get(k) is not None and not isinstance(g[k], str):
            raise BadInput("gpus[%d].%s: not a string" % (index, k))
    try:
        model, how = ex.identify(g.get("name"), g.get("pci_device_id"), g.get("pci_sub_device_id"))
    except ValueError as exc:
        raise BadInput("gpus[%d]: %s" % (index, exc)) from None
    return model, how


def judge_document(doc):
    """{"figures": [...], "models": [...], "verdict"} for a parsed input
    document; raises BadInput naming the fault."""
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
    return {"models": models, "figures": figures, "verdict": ex.overall(figures)}


def main(path, stdout=None, stderr=None):
    """Judge FILE, print the JSON verdict; the exit status."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        with open(path) as f:
            text = f.read()
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise BadInput("not JSON: %s" % exc) from None
        result = judge_document(doc)
    except (OSError, UnicodeDecodeError) as exc:
        stderr.write("validate: error: %s: %s\n" % (path, getattr(exc, "strerror", None) or exc))
        return 2
    except BadInput as exc:
        stderr.write("validate: error: %s: %s\n" % (path, exc))
        return 2
    result["file"] = path
    stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return EXIT[result["verdict"]]
