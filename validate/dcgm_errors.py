"""DCGM's diagnostic error codes, and the operator's action each one calls for.

The table is DCGM's own: every code of ``dcgmError_t`` with its name and severity, as
``dcgmErrorMeta`` lists them (NVIDIA/DCGM dcgmlib/src/dcgm_errors.c and dcgmlib/dcgm_errors.h at
commit 72fa3feaa67d716a75323a8f47c34ff3ee73f824, DCGM 4.6.0; the same table is published at
docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/errors.html).  Codes are only ever
appended ("New error codes must be added to end of enum", dcgm_errors.h), so a 3.x code means
the same here; a code past the table is read by its severity, or not at all.

The action (validate/actions.py's words) comes, in this order, from:

1. the code's own suggestion in dcgm_errors.h (``DCGM_FR_*_NEXT``) where it names one;
2. the codes whose suggestion is ``TRIAGE_RUN_FIELD_DIAG_MSG`` ("Run a field diagnostic on the
   GPU."): NVIDIA's field diagnostic is the step before an RMA, so drain and replace;
3. the severity (dcgmErrorSeverity_t comments): MONITOR "Can perform workload, but needs to be
   monitored" and CONFIG "This error can be configured" name none (the GPU is fine; the line
   says what to set); ISOLATE "Cannot perform workload. GPU should be isolated." drain and
   replace; RESET "Drain and reset GPU" reset the GPU.  UNKNOWN and TRIAGE name nothing: a
   failed test with such a code gets FALLBACK.

dcgmi agrees on ISOLATE: it exits DCGM_ST_NVVS_ISOLATE_ERROR when an error is of that severity,
DCGM_ST_NVVS_ERROR for any other (Diag::GetFailureResult, dcgmi/Diag.cpp at 72fa3fe): every
error fails the run, as every "Fail" fails the check here.

Standard library only; imports nothing but actions.
"""

from __future__ import annotations

from typing import Optional

from . import actions

NONE, MONITOR, ISOLATE, UNKNOWN, TRIAGE, CONFIG, RESET = range(7)
SEVERITY_NAMES = ("NONE", "MONITOR", "ISOLATE", "UNKNOWN", "TRIAGE", "CONFIG", "RESET")

# code: (name after DCGM_FR_, severity), dcgm_errors.c at 72fa3fe (DCGM 4.6.0)
CODES = {
    0: ("OK", 3), 1: ("UNKNOWN", 3), 2: ("UNRECOGNIZED", 3), 3: ("PCI_REPLAY_RATE", 2),
    4: ("VOLATILE_DBE_DETECTED", 2), 5: ("VOLATILE_SBE_DETECTED", 1), 6: ("PENDING_PAGE_RETIREMENTS", 6),
    7: ("RETIRED_PAGES_LIMIT", 2), 8: ("RETIRED_PAGES_DBE_LIMIT", 2), 9: ("CORRUPT_INFOROM", 4),
    10: ("CLOCKS_EVENT_THERMAL", 1), 11: ("POWER_UNREADABLE", 1), 12: ("CLOCKS_EVENT_POWER", 1),
    13: ("NVLINK_ERROR_THRESHOLD", 2), 14: ("NVLINK_DOWN", 4), 15: ("NVSWITCH_FATAL_ERROR", 2),
    16: ("NVSWITCH_NON_FATAL_ERROR", 1), 17: ("NVSWITCH_DOWN", 1), 18: ("NO_ACCESS_TO_FILE", 5),
    19: ("NVML_API", 1), 20: ("DEVICE_COUNT_MISMATCH", 5), 21: ("BAD_PARAMETER", 3),
    22: ("CANNOT_OPEN_LIB", 4), 23: ("DENYLISTED_DRIVER", 5), 24: ("NVML_LIB_BAD", 2),
    25: ("GRAPHICS_PROCESSES", 6), 26: ("HOSTENGINE_CONN", 1), 27: ("FIELD_QUERY", 1),
    28: ("BAD_CUDA_ENV", 5), 29: ("PERSISTENCE_MODE", 5), 30: ("LOW_BANDWIDTH", 4),
    31: ("HIGH_LATENCY", 4), 32: ("CANNOT_GET_FIELD_TAG", 1), 33: ("FIELD_VIOLATION", 2),
    34: ("FIELD_THRESHOLD", 1), 35: ("FIELD_VIOLATION_DBL", 2), 36: ("FIELD_THRESHOLD_DBL", 2),
    37: ("UNSUPPORTED_FIELD_TYPE", 4), 38: ("FIELD_THRESHOLD_TS", 2), 39: ("FIELD_THRESHOLD_TS_DBL", 2),
    40: ("THERMAL_VIOLATIONS", 1), 41: ("THERMAL_VIOLATIONS_TS", 1), 42: ("TEMP_VIOLATION", 1),
    43: ("CLOCKS_EVENT_VIOLATION", 1), 44: ("INTERNAL", 4), 45: ("PCIE_GENERATION", 4),
    46: ("PCIE_WIDTH", 5), 47: ("ABORTED", 5), 48: ("TEST_DISABLED", 5), 49: ("CANNOT_GET_STAT", 4),
    50: ("STRESS_LEVEL", 4), 51: ("CUDA_API", 1), 52: ("FAULTY_MEMORY", 2), 53: ("CANNOT_SET_WATCHES", 1),
    54: ("CUDA_UNBOUND", 4), 55: ("ECC_DISABLED", 5), 56: ("MEMORY_ALLOC", 4), 57: ("CUDA_DBE", 2),
    58: ("MEMORY_MISMATCH", 2), 59: ("CUDA_DEVICE", 4), 60: ("ECC_UNSUPPORTED", 5), 61: ("ECC_PENDING", 1),
    62: ("MEMORY_BANDWIDTH", 4), 63: ("TARGET_POWER", 4), 64: ("API_FAIL", 4), 65: ("API_FAIL_GPU", 4),
    66: ("CUDA_CONTEXT", 4), 67: ("DCGM_API", 4), 68: ("CONCURRENT_GPUS", 5), 69: ("TOO_MANY_ERRORS", 1),
    70: ("NVLINK_CRC_ERROR_THRESHOLD", 2), 71: ("NVLINK_ERROR_CRITICAL", 2),
    72: ("ENFORCED_POWER_LIMIT", 5), 73: ("MEMORY_ALLOC_HOST", 4), 74: ("GPU_OP_MODE", 1),
    75: ("NO_MEMORY_CLOCKS", 1), 76: ("NO_GRAPHICS_CLOCKS", 1), 77: ("HAD_TO_RESTORE_STATE", 4),
    78: ("L1TAG_UNSUPPORTED", 5), 79: ("L1TAG_MISCOMPARE", 2), 80: ("ROW_REMAP_FAILURE", 6),
    81: ("UNCONTAINED_ERROR", 2), 82: ("EMPTY_GPU_LIST", 5), 83: ("DBE_PENDING_PAGE_RETIREMENTS", 6),
    84: ("UNCORRECTABLE_ROW_REMAP", 6), 85: ("PENDING_ROW_REMAP", 6), 86: ("BROKEN_P2P_MEMORY_DEVICE", 2),
    87: ("BROKEN_P2P_WRITER_DEVICE", 2), 88: ("NVSWITCH_NVLINK_DOWN", 2),
    89: ("EUD_BINARY_PERMISSIONS", 4), 90: ("EUD_NON_ROOT_USER", 4), 91: ("EUD_SPAWN_FAILURE", 4),
    92: ("EUD_TIMEOUT", 4), 93: ("EUD_ZOMBIE", 4), 94: ("EUD_NON_ZERO_EXIT_CODE", 4),
    95: ("EUD_TEST_FAILED", 2), 96: ("FILE_CREATE_PERMISSIONS", 5), 97: ("PAUSE_RESUME_FAILED", 4),
    98: ("PCIE_H_REPLAY_VIOLATION", 2), 99: ("GPU_EXPECTED_NVLINKS_UP", 4),
    100: ("NVSWITCH_EXPECTED_NVLINKS_UP", 4), 101: ("XID_ERROR", 4), 102: ("SBE_VIOLATION", 2),
    103: ("DBE_VIOLATION", 2), 104: ("PCIE_REPLAY_VIOLATION", 2), 105: ("SBE_THRESHOLD_VIOLATION", 2),
    106: ("DBE_THRESHOLD_VIOLATION", 2), 107: ("PCIE_REPLAY_THRESHOLD_VIOLATION", 2),
    108: ("CUDA_FM_NOT_INITIALIZED", 1), 109: ("SXID_ERROR", 2), 110: ("GFLOPS_THRESHOLD_VIOLATION", 4),
    111: ("NAN_VALUE", 2), 112: ("FABRIC_MANAGER_TRAINING_ERROR", 5),
    113: ("BROKEN_P2P_PCIE_MEMORY_DEVICE", 2), 114: ("BROKEN_P2P_PCIE_WRITER_DEVICE", 2),
    115: ("BROKEN_P2P_NVLINK_MEMORY_DEVICE", 2), 116: ("BROKEN_P2P_NVLINK_WRITER_DEVICE", 2),
    117: ("TEST_SKIPPED", 5), 118: ("SRAM_THRESHOLD", 2), 119: ("NVLINK_EFFECTIVE_BER_THRESHOLD", 2),
    120: ("FALLEN_OFF_BUS", 2), 121: ("NVLINK_SYMBOL_BER_THRESHOLD", 2), 122: ("IMEX_UNHEALTHY", 2),
    123: ("FABRIC_PROBE_STATE", 1), 124: ("BINARY_PERMISSIONS", 4), 125: ("GPU_RECOVERY_RESET", 6),
    126: ("GPU_RECOVERY_REBOOT", 2), 127: ("GPU_RECOVERY_DRAIN_P2P", 6),
    128: ("GPU_RECOVERY_DRAIN_RESET", 6), 129: ("NCCL_ERROR", 6), 130: ("RETEST_REQUESTED", 4),
    131: ("CONTAINED_ERROR", 1), 132: ("UNCORRECTABLE_ROW_REMAP_LIMIT", 4),
}

# 1. What the code's DCGM_FR_*_NEXT says (dcgm_errors.h at 72fa3fe), in our words.
BY_CODE = {
    4: actions.RESET_GPU,     # VOLATILE_DBE_DETECTED: "Drain the GPU and reset it or reboot the node."
    81: actions.RESET_GPU,    # UNCONTAINED_ERROR: the same words as VOLATILE_DBE_DETECTED
    83: actions.RESET_GPU,    # DBE_PENDING_PAGE_RETIREMENTS: "Drain the GPU and reset it or reboot the node ..."
    85: actions.RESET_GPU,    # PENDING_ROW_REMAP (severity RESET; README: a pending remap is reset the GPU)
    80: actions.DRAIN_RMA,    # ROW_REMAP_FAILURE: "unrecoverable memory hardware damage"; README's RMA row
    120: actions.REBOOT_NODE,  # FALLEN_OFF_BUS: as Xid 79 (NVIDIA Xid catalog RESTART_BM), the system check's
    125: actions.RESET_GPU,   # GPU_RECOVERY_RESET: "Terminate all GPU processes and reset the GPU."
    126: actions.REBOOT_NODE,  # GPU_RECOVERY_REBOOT: "Reboot the operating system ..."
    127: actions.RESET_GPU,   # GPU_RECOVERY_DRAIN_P2P: drain P2P, then reset (actions.of_recovery_text)
    128: actions.RESET_GPU,   # GPU_RECOVERY_DRAIN_RESET: "Reset the GPU after existing work has drained."
    129: actions.RESET_GPU,   # NCCL_ERROR: "Attempt to reset the GPUs and reboot the machines if that fails."
    131: actions.RESTART_JOB,  # CONTAINED_ERROR: "Restart the application that encountered the error."
    108: actions.REBOOT_NODE,  # CUDA_FM_NOT_INITIALIZED: "Ensure that the FabricManager is running ..."
    112: actions.REBOOT_NODE,  # FABRIC_MANAGER_TRAINING_ERROR: the same; README's fabric row
    123: actions.REBOOT_NODE,  # FABRIC_PROBE_STATE: the same
}
# 2. The codes whose DCGM_FR_*_NEXT is TRIAGE_RUN_FIELD_DIAG_MSG (dcgm_errors.h at 72fa3fe).
FIELD_DIAG = frozenset((7, 8, 15, 52, 57, 58, 70, 71, 79, 102, 103, 104, 105, 106, 107, 111, 119, 121, 132))
# 3. By severity.
BY_SEVERITY = {NONE: actions.NONE, MONITOR: actions.NONE, CONFIG: actions.NONE,
               ISOLATE: actions.DRAIN_RMA, RESET: actions.RESET_GPU}
# A Deployment test of 3.x whose failure came without an error code: the code nvvs's software
# plugin reports for that check (nvvs/plugin_src/software/Software.cpp at b0ec3c6, DCGM 3.3.9;
# test names as dcgmi writes them, Diag.cpp levelOneTests; "Page Retirement/Row Remap" has
# several codes: the pending retirement one, DCGM_FR_PENDING_PAGE_RETIREMENTS).
BY_TEST_NAME = {"denylist": 23, "blacklist": 23, "nvml library": 22, "cuda main library": 22,
                "permissions and os blocks": 18, "permissions and os-related blocks": 18,
                "persistence mode": 29, "environment variables": 28, "environmental variables": 28,
                "page retirement/row remap": 6, "graphics processes": 25, "inforom": 9}
# Ours (unsourced): a test DCGM failed with no code or severity that names an action.  A GPU
# that failed DCGM's diagnostic takes no new work until a reset and a clean re-run, as
# actions.of_recovery_text treats a recovery action it does not know.
FALLBACK = actions.RESET_GPU


def name(code: Optional[int]) -> str:
    """``DCGM_FR_PERSISTENCE_MODE`` for 29; ``DCGM error 999`` for a code past the table."""
    if code in CODES:
        return "DCGM_FR_" + CODES[code][0]
    return "DCGM error %s" % code


def severity(code: Optional[int], given: Optional[int]) -> Optional[int]:
    """The severity the output gave, else the table's for the code (3.x before 3.3 wrote none)."""
    if given is not None and 0 <= given < len(SEVERITY_NAMES):
        return given
    if code in CODES:
        return CODES[code][1]
    return None


def action(code: Optional[int], given_severity: Optional[int] = None) -> Optional[str]:
    """The action DCGM's table names for an error, or None where it names none."""
    if code in BY_CODE:
        return BY_CODE[code]
    if code in FIELD_DIAG:
        return actions.DRAIN_RMA
    level = severity(code, given_severity)
    return BY_SEVERITY.get(level) if level is not None else None
