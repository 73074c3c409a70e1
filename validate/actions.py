"""The operator's action for a health finding: one small vocabulary, ordered
from least to most disruptive, so a scheduler or a person can act on it.

    none < restart the job < reset the GPU < reboot the node < drain and replace (RMA)

A finding whose action is ``reset the GPU`` or worse makes the node *sick*
(the GPU must not take new work until that is done); ``none`` and ``restart
the job`` are notes: the GPU itself is fine.  The words match NVIDIA's recovery
actions (the driver's Xid 154 text and NVML's nvmlGpuRecoveryAction_t: None,
GPU Reset Required, Node Reboot Required; docs.nvidia.com/deploy/
a100-gpu-mem-error-mgmt "Error Recovery and Response Flags") plus the two
ends NVIDIA's Xid catalog uses (RESTART_APP; CONTACT_SUPPORT / RMA).
"""

NONE = "none"
RESTART_JOB = "restart the job"
RESET_GPU = "reset the GPU"
REBOOT_NODE = "reboot the node"
DRAIN_RMA = "drain and replace (RMA)"

ORDER = (NONE, RESTART_JOB, RESET_GPU, REBOOT_NODE, DRAIN_RMA)
SICK = frozenset((RESET_GPU, REBOOT_NODE, DRAIN_RMA))


def rank(action):
    """Position in ORDER; unknown or None ranks below ``none``."""
    return ORDER.index(action) if action in ORDER else -1


def worst(actions):
    """The most disruptive of ``actions`` (None when there is none)."""
    best = None
    for a in actions:
        if a is not None and (best is None or rank(a) > rank(best)):
            best = a
    return best


def is_sick(action):
    return action in SICK


def of_recovery_text(text):
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
