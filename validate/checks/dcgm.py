"""dcgm: NVIDIA DCGM's own diagnostic, ``dcgmi diag -r LEVEL -j``, read and judged per GPU.

The level is ``GPUPROV_DCGM_LEVEL`` (a variable), else the node profile's ``dcgm.level``, else
1.  DCGM's levels (docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html,
"Run Levels"): level 1 a readiness check, 2 an epilogue on failure, 3 and 4 "to be run by an
administrator as post-mortem" (that page's "DCGM Diagnostic Goals"): so 3 and 4 run only when
asked.  Each level runs under a time limit (LIMIT_S).

Each result of each test becomes a finding with its GPU and action (validate/dcgm_judge.py).
Without ``dcgmi`` the check is not applicable, and says how to install DCGM.  A standalone
``nvvs`` is not run: "As of DCGM v1.5, running NVVS as a standalone utility is now deprecated
and all the functionality ... is available via ... dcgmi" (the same DCGM page, "Overview").
dcgmi needs DCGM's host engine (the ``nvidia-dcgm`` service, or ``nv-hostengine``): without it
dcgmi says it cannot connect, and the check fails with its words.
"""

from __future__ import annotations

import os
import shutil

from .. import dcgm_judge, dcgm_parse, host

LEVEL_VAR = "GPUPROV_DCGM_LEVEL"
DEFAULT_LEVEL = 1
# Time limits per level, seconds. How long each level takes, by source:
# - level 1: under a minute: "Running <1min diagnostic" with `timeout 1m dcgmi diag -r 1`
#   (Azure/azhpc-diagnostics PR 12); "~30 seconds" (factryze.ai/glossary/health-check).
# - level 2: about 2 minutes ("Running 2min diagnostic", azhpc-diagnostics PR 12; "~2 minutes",
#   factryze) to 10 minutes (issue 45's figure; its source is not named there).
# - level 3: "~12-15 minutes" (factryze.ai/glossary/health-check: a third party's figure).
# - level 4: 45 minutes to 2.25 hours (issue 45's figures; unverified here).  AWS HyperPod's
#   deep health check runs level 4 "including additional memory tests" (docs.aws.amazon.com/
#   sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-deep-health-checks.html).
# DCGM's own limit of 8 hours (NVIDIA/DCGM issue 120, as issue 45 cites it; not found in DCGM
# 4.6.0's modules/diag here, whose one timeout is a 600 s client heartbeat) is above all of these.
# The limits are ours (chosen): a few times the figure for 1 and 2 (a slow node still
# finishes), a wide margin over level 3's, level 4's top plus a margin.
LIMIT_S = {1: 300, 2: 1800, 3: 7200, 4: 10800}
DCGM_OWN_LIMIT_S = 8 * 3600  # NVIDIA/DCGM issue 120 (as cited above)
# Where DCGM installs dcgmi when PATH (a Slurm prolog's) lacks it: /usr/bin (the Debian and RPM
# packages, docs.nvidia.com/datacenter/dcgm/latest/user-guide/getting-started.html), /usr/local/bin.
DCGMI_PATHS = ("/usr/bin/dcgmi", "/usr/local/bin/dcgmi")
# 3.x installs nvvs under /usr/share/nvidia-validation-suite (NVIDIA/DCGM issue 139's thread names
# /usr/share/nvidia-validation-suite/diag-skus.yaml), 4.x under /usr/libexec/datacenter-gpu-manager-4.
NVVS_PATHS = ("/usr/share/nvidia-validation-suite/nvvs", "/usr/libexec/datacenter-gpu-manager-4/nvvs")
INSTALL = ("install DCGM: the datacenter-gpu-manager-4-cuda<CUDA major> package from NVIDIA's CUDA "
           "repository, then start nvidia-dcgm (docs.nvidia.com/datacenter/dcgm/latest/user-guide/"
           "getting-started.html); gpuprov's optional dcgm.yaml recipe does both "
           "(docs/reference/stack-recipes.md)")
RAW = "dcgm_diag.json"  # dcgmi's output, kept as it came


def find_dcgmi():
    found = shutil.which("dcgmi")
    if found:
        return found
    return next((p for p in DCGMI_PATHS if os.access(p, os.X_OK)), None)


def find_nvvs():
    return shutil.which("nvvs") or next((p for p in NVVS_PATHS if os.access(p, os.X_OK)), None)


def level_of(ctx):
    """(level, None) or (None, why it is wrong)."""
    raw = os.environ.get(LEVEL_VAR)
    where = LEVEL_VAR
    if raw is None:
        doc = (ctx.profile or {}).get("document") or {}
        raw = (doc.get("dcgm") or {}).get("level") if isinstance(doc.get("dcgm"), dict) else None
        where = "profile dcgm.level"
    if raw is None:
        return DEFAULT_LEVEL, None
    text = str(raw).strip()
    if isinstance(raw, bool) or text not in ("1", "2", "3", "4"):
        return None, "%s: %r is not a DCGM run level (1, 2, 3 or 4)" % (where, raw)
    return int(text), None


def _judge(res, doc, level):
    verdict = dcgm_judge.judge(doc)
    for f in verdict["findings"]:
        if f["fails"] and f["action"] is None:
            res.problem(f["what"])
        elif f["fails"]:
            res.problem(f["what"], f["action"])
        else:
            res.notice(f["what"], f["action"])
            if f["status"] == "warn":
                res.warn(f["what"])
    c = verdict["counts"]
    res.figures.update({"level": level, "format": doc["format"], "dcgm_version": doc["version"],
                        "driver": doc["driver"], "counts": c, "gpus": verdict["gpus"],
                        "iterations": doc["iterations"]})
    res.summary = "level %d, DCGM %s: %d pass, %d fail, %d warn, %d skip on %s" % (
        level, doc["version"] or "?", c["pass"], c["fail"], c["warn"], c["skip"],
        ", ".join(sorted(verdict["gpus"], key=lambda g: (len(g), g))) or "no GPU")
    return verdict


def run(ctx, res):
    dcgmi = find_dcgmi()
    if not dcgmi:
        nvvs = find_nvvs()
        extra = ("; %s is here, but standalone nvvs is deprecated since DCGM 1.5 (DCGM Diagnostics, "
                 "Overview) and not run" % nvvs) if nvvs else ""
        res.waive("not applicable: DCGM is not installed (no dcgmi in PATH, %s)%s; %s"
                  % (", ".join(DCGMI_PATHS), extra, INSTALL), warning=False)
        return
    level, wrong = level_of(ctx)
    if wrong:
        res.problem(wrong)
        return
    argv = [dcgmi, "diag", "-r", str(level), "-j"]
    ctx.progress("running %s (limit %d s)" % (" ".join(argv), LIMIT_S[level]))
    out = host.run_tool(argv, timeout=LIMIT_S[level])
    res.figures.update({"command": " ".join(argv), "limit_s": LIMIT_S[level], "exit": out["rc"]})
    with open(ctx.artefact(res, RAW), "w") as f:
        f.write(out["stdout"] or "")
    if out["error"]:
        res.problem("dcgmi diag -r %d: %s" % (level, out["error"]))
        return
    try:
        doc = dcgm_parse.parse(out["stdout"] or "")
    except dcgm_parse.BadOutput as exc:
        lines = (out["stderr"] or out["stdout"] or "").strip().splitlines()
        said = dcgm_parse.clean(lines[-1]) if lines else ""
        res.problem("dcgmi diag -r %d exited %s without a DCGM result (%s)%s"
                    % (level, out["rc"], exc, ": " + said if said else ""))
        return
    if doc["runtime_error"]:
        res.problem("DCGM could not run the diagnostic: %s" % doc["runtime_error"])
    verdict = _judge(res, doc, level)
    if not verdict["checked"] and not doc["runtime_error"]:
        res.waive("DCGM ran no test here: every test was skipped (%d)" % verdict["counts"]["skip"])
    elif out["rc"] not in (0, None) and not res.problems:
        res.warn("dcgmi exited %s though no test failed" % out["rc"])
