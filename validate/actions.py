"""The operator's action for a health finding: one small vocabulary, ordered
from least to most disruptive, so a scheduler or a person can act on it.

    none < restart the job < reset the GPU < reboot the node < drain and replace (RMA)

A finding whose action is ``reset the GPU`` or worse makes the node *sick*
(the GPU must not take new work until that is done); ``none`` and ``restart
the job`` are notes: the GPU itself is fine.  One exception, NVIDIA's own: a
row remap waiting for the next reset (Xid 63, ``nvidia-smi -q`` "Remapped
Rows ... Pending: Yes").  Its action is reset the GPU, yet the finding does
not fail: the node passes, with the action *deferred* (``deferred``).

The words match NVIDIA's recovery actions (the driver's Xid 154 text and
NVML's nvmlGpuRecoveryAction_t: None, GPU Reset Required, Node Reboot
Required; docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt "Error Recovery and
Response Flags") plus the two ends NVIDIA's Xid catalog uses (RESTART_APP;
CONTACT_SUPPORT / RMA).
"""

from __future__ import annotations

from typing import Iterable

NONE = "none"
RESTART_JOB = "restart the job"
RESET_GPU = "reset the GPU"
REBOOT_NODE = "reboot the node"
DRAIN_RMA = "drain and replace (RMA)"

ORDER = (NONE, RESTART_JOB, RESET_GPU, REBOOT_NODE, DRAIN_RMA)
SICK = frozenset((RESET_GPU, REBOOT_NODE, DRAIN_RMA))


def rank(action: str | None) -> int:
    """Position in ORDER; unknown or None ranks below ``none``."""
    return ORDER.index(action) if action in ORDER else -1


def worst(actions: Iterable[str | None]) -> str | None:
    """The most disruptive of ``actions`` (None when there is none)."""
    best = None
    for a in actions:
        if a is not None and (best is None or rank(a) > rank(best)):
            best = a
    return best


def is_sick(action: str | None) -> bool:
    return action in SICK


def deferred(findings: Iterable[dict[str, object]]) -> str | None:
    """The action a node that passes still needs: the most disruptive action
    of reset the GPU or worse among findings that do not fail (results.json
    ``deferred_action``).  A pending row remap: "row-remapping will happen at
    the next GPU reset ... Even with the flag set, unaffected applications can
    continue running ... and new workloads can be launched" (docs.nvidia.com/
    deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html);
    NVML's nvmlDeviceGetRemappedRows: "A reset will be required to actually
    remap the row"; Meta's gcm calls a pending remap CRITICAL (facebookresearch
    .github.io/gcm, health_checks check-nvidia-smi row_remap): so the reset is
    named, and the node keeps taking work until it is idle."""
    return worst(str(f["action"]) for f in findings if not f.get("fails") and is_sick(str(f["action"])))


def of_recovery_text(text: str | None) -> str:
    """Our action for the recovery action the driver prints in Xid 154
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset
    Required)").  The names are the driver's (_gpuRecoveryActionName in
    open-gpu-kernel-modules 595.45.04 src/nvidia/src/kernel/gpu/gpu.c: None,
    GPU Reset Required, Node Reboot Required, Drain P2P, Drain and Reset,
    Recover IMEX Domain).  "Recover IMEX Domain" is scoped to the multi-node
    IMEX domain, not this GPU (kubernetes-sigs/dra-driver-nvidia-gpu PR 1441
    keeps such GPUs schedulable): restart the job.  "Drain P2P": drain the
    peer-to-peer work, then reset (ours: the NVML enum only says "Drain P2P").
    A text we do not know: by its words, else reset the GPU (ours)."""
    t = (text or "").strip().lower()
    if t == "none":
        return NONE
    if "reboot" in t:
        return REBOOT_NODE
    if "imex" in t:
        return RESTART_JOB
    if "reset" in t or "drain" in t:
        return RESET_GPU
    return RESET_GPU
