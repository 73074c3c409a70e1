"""What a healthy GPU of each model must reach: the one table, and the one judge.

A GPU is matched to its model by PCI device id and subsystem id, as NVIDIA
DCGM does (device id + subsystem id first, then the device id alone:
NVIDIA/DCGM @ 72fa3fe nvvs/src/NvidiaValidationSuite.cpp L745-750), with the
name (``specs.lookup``) as the fallback.  Ids are the hex strings nvidia-smi
prints for ``--query-gpu=pci.device_id,pci.sub_device_id``: ``0x233010DE``
is device 0x2330 of vendor 0x10DE; ``0x16C110DE`` is subsystem 0x16C1.

Each cell of ``TABLE`` is a floor with its rule and its source: either a
fraction of a named public measurement of a healthy part (``_of``) or a
hand-set threshold someone publishes (``_thr``).  A figure without a cell is
"no reference": measured, reported, never a silent pass and never a failure.
The sources are collected, with repository, commit and line, in
shared/research/sku-expectations.md (2026-08); keys used below:

* DCGM    NVIDIA/DCGM @ 72fa3feaa67d nvvs/diag-skus.yaml.in (L = its line).
* AzNHC   Azure/azurehpc-health-checks @ 0e0a1ac26a64 conf/<vmsize>.conf.
* OCI     oracle-quickstart/oci-hpc @ b5285a68fa0a playbooks/roles/healthchecks/
          files/active_healthcheck.py L86-125 (average over a 1-16 GiB sweep).
* Fryer   huggingface/gpu-fryer @ 704ba85cf1bd README.md L67-73 (cuBLASLt
          8192^2, sustained; its "FP32" column is TF32).
* MAMF    stas00/ml-engineering @ 744d01e18b79 compute/accelerator/README.md
          L344-374 (best shape found by search).
* Napkin  tusharhqq/napkin-math-gpu results/{h100-sxm,a100-80gb-sxm4,a100-80gb-pcie}.md
          (torch, median of 7 rounds).
* AzBench Azure/AI-benchmarking-guide @ 8fd0c6e1bd0f Azure_Results/ND_*_results.md.
* T       github.com/zzc0721/torch-performance-test-data: issue #N = torch.mm
          n=8192 (its test.py: 6 warm-up + 30 runs); database.md = best of
          n=1024..10240.
* D       NVIDIA/DeepLearningExamples @ 291f0d02 PyTorch/Classification/ConvNets/
          resnet50v1.5/README.md, "FP32 Inference Latency", batch 64.

Our rules where the sources disagree (ours, stated once here):

* GEMM: 0.9 x the lowest public healthy measurement at an 8192-class shape
  (the 8192 figures run 0.92-1.0 x the best-shape MAMF figure on H100 and A100,
  and GPUs of one node spread by 5 % or more: MAMF L417); 0.8 x a best-shape
  figure (MAMF, T database.md) when only that exists.  FP32 (TF32 off): a torch
  measurement where one exists (the same operation as ours); else DCGM's
  SGEMM floor x 0.95, DCGM's own pass rule (TargetedStress_wrapper.cpp L58),
  loose because DCGM's rate includes its copies.
* Host copies, P2P, NCCL: the cloud fleet's hand-set threshold that measures
  the way we do (AzNHC: one message size, pinned, per GPU and per pair),
  rather than OCI's sweep average or a single user's report.
* Device copy: 0.9 x BabelStream/nvbench copy of a healthy part; DCGM's
  memory floors are for its own STREAM-Triad test and are not used here.
* Power under stress: DCGM's targeted_power rule, 0.75 x its target
  (TargetedPower_wrapper.cpp L67), informational when the enforced power
  limit is below that.
"""

import re
import typing  # noqa: F401  (the type comment of PROFILE)

from . import specs

# ---------------------------------------------------------------------------
# identification

# PCI device id -> model key (the keys of specs._TABLE where it has the model).
# Names and ids: NVIDIA/open-gpu-kernel-modules @ df1c9a3 (595.45.04) README.md
# "Compatible GPUs"; DCGM diag-skus.yaml.in lines as cited.
DEVICE_IDS = {
    "2330": "H100 SXM",        # NVIDIA H100 80GB HBM3 (DCGM L139)
    "2331": "H100 PCIe",       # NVIDIA H100 PCIe (DCGM L2531 "Nvidia P1010")
    "2321": "H100 NVL",        # NVIDIA H100 NVL (DCGM L3032)
    "233A": "H800 NVL",        # NVIDIA H800 NVL (DCGM L3112, misnamed "H100NVL" there)
    "2335": "H200 SXM",        # NVIDIA H200 (DCGM L3522)
    "233B": "H200 NVL",        # NVIDIA H200 NVL (DCGM L3593)
    "2342": "GH200",           # NVIDIA GH200 120GB / 480GB (DCGM L3214)
    "2348": "GH200 144GB",     # NVIDIA GH200 144G HBM3e (DCGM L3704)
    "20B0": "A100 SXM 40GB",   # NVIDIA A100-SXM4-40GB (DCGM L1475)
    "20B2": "A100 SXM 80GB",   # NVIDIA A100-SXM4-80GB (DCGM L1582)
    "20B5": "A100 PCIe 80GB",  # NVIDIA A100 80GB PCIe (DCGM L2162)
    "20F1": "A100 40GB",       # NVIDIA A100-PCIE-40GB (DCGM L1546)
    "26B9": "L40S",            # NVIDIA L40S (DCGM L3180)
    "26B5": "L40",             # NVIDIA L40
    "27B8": "L4",              # NVIDIA L4 (DCGM L2924)
    "2236": "A10",             # NVIDIA A10 (DCGM L1728)
    "2237": "A10G",            # NVIDIA A10G (DCGM L1765)
    "2901": "B200",            # NVIDIA B200 (DCGM L4081)
    "2941": "GB200",           # NVIDIA GB200 (DCGM L3915, misnamed "B200 DevId 10DE" there)
    "3182": "B300",            # NVIDIA B300 SXM6 AC (DCGM L4199)
    "31C2": "GB300",           # NVIDIA GB300 (DCGM L4246)
}
# (device id, subsystem id) -> model key, checked first, as DCGM does.  No
# subsystem changes the model among the ids above (GH200 120GB and 480GB share
# 2342 and one row; the B200 subsystems change only DCGM's SGEMM floor, which
# this table does not use for B200: see its row).
SUBSYSTEM_IDS = {}  # type: dict[tuple[str, str | None], str]

# Models the datasheet table (specs._TABLE) does not name: their name fallback.
_EXTRA_NAMES = [(r"\bGB300", "GB300"), (r"\bGB200", "GB200"), (r"\bB300", "B300"),
                (r"\bH800 NVL", "H800 NVL")]

_ID = re.compile(r"^(0x)?([0-9A-Fa-f]{4})([0-9A-Fa-f]{4})$")


def parse_id(text):
    """'0x233010DE' -> ('2330', '10DE'); ValueError when it is not 8 hex digits."""
    m = _ID.match((text or "").strip())
    if not m:
        raise ValueError("not a PCI id like 0x233010DE: %r" % (text,))
    return m.group(2).upper(), m.group(3).upper()


def identify(name=None, pci_device_id=None, pci_sub_device_id=None):
    """(model key or None, how): by ids where known, else by name."""
    if pci_device_id:
        device, vendor = parse_id(pci_device_id)
        if vendor == "10DE":
            sub = parse_id(pci_sub_device_id)[0] if pci_sub_device_id else None
            key = SUBSYSTEM_IDS.get((device, sub)) or DEVICE_IDS.get(device)
            if key:
                return key, "pci id %s" % device
    for pattern, key in _EXTRA_NAMES:
        if re.search(pattern, name or ""):
            return key, "name"
    key = specs.lookup(name)[0]
    return key, "name" if key else None


# ---------------------------------------------------------------------------
# the table

def _of(fraction, measured, source):
    """A floor at ``fraction`` of one public measurement of a healthy part."""
    return {"floor": fraction * measured, "measured": measured, "fraction": fraction,
            "rule": "%.2f x %g measured" % (fraction, measured), "source": source}


def _thr(floor, source, **when):
    """A hand-set threshold a fleet publishes; ``when``: bytes, gpus."""
    cell = {"floor": float(floor), "rule": "threshold %g" % floor, "source": source}
    cell.update(when)
    return cell


def _dcgm_sgemm(target_gflops, line):
    # DCGM passes targeted_stress at 0.95 x its target (TargetedStress_wrapper.cpp L58)
    return {"floor": 0.95 * target_gflops / 1000.0, "rule": "0.95 x DCGM target %g GFLOPS" % target_gflops,
            "source": "DCGM L%d targeted_stress (0.75 x NVIDIA SGEMM)" % line}


def _dcgm_power(target_w, line):
    return {"floor": 0.75 * target_w, "rule": "0.75 x DCGM target_power %g W" % target_w,
            "source": "DCGM L%d targeted_power" % line}


GIB = 1 << 30
# Azure's 8-GPU nodes; each threshold at the line cited in the research notes.
_AZ_H100 = "AzNHC conf/nd96isr_h100_v5.conf"
_AZ_H200 = "AzNHC conf/nd96isr_h200_v5.conf"
_AZ_A100_80 = "AzNHC conf/nd96amsr_a100_v4.conf"
_AZ_A100_40 = "AzNHC conf/nd96asr_v4.conf"

TABLE = {
    "H100 SXM": {
        # 711 Napkin is the lowest; Fryer ~730, T #79 797.51, MAMF 794.5
        "bf16_tflops": _of(0.9, 711.0, "Napkin h100-sxm.md (Fryer ~730, T #79 797.51, MAMF 794.5)"),
        "tf32_tflops": _of(0.9, 372.05, "T issue #79 (8192) (Fryer ~373, Napkin 375)"),
        "fp32_tflops": _of(0.9, 51.81, "T issue #79 (8192) (Napkin 52)"),
        "d2d_gbs": _of(0.9, 2900.0, "AzBench ND_H100_v5 BabelStream copy L38 (Napkin 3004, VP nvbench 2903)"),
        "h2d_gbs": _thr(48, _AZ_H100 + " L49 check_gpu_bw (nvbandwidth CE)"),
        "d2h_gbs": _thr(48, _AZ_H100 + " L49 check_gpu_bw (nvbandwidth CE)"),
        "p2p_gbs": _thr(335, _AZ_H100 + " L52 check_gpu_bw (CE read, per pair)"),
        # OCI's 440 is a 1-16 GiB sweep average; NCCL maintainers: ~480 NVLS (nccl-tests#212)
        "nccl_busbw_gbs": _thr(460, _AZ_H100 + " L60 check_nccl_allreduce 16G", bytes=16 * GIB, gpus=8),
        "power_w": _dcgm_power(700, 139),
    },
    "H200 SXM": {
        # the only H200 measurement; MAMF says "same as H100" (794.5)
        "bf16_tflops": _of(0.8, 790.29, "T database.md, H200 (best of 1024..10240)"),
        "fp32_tflops": _of(0.8, 51.34, "T database.md, H200 (best of 1024..10240)"),
        "d2d_gbs": _of(0.9, 4010.0, "AzBench ND_H200_v5 BabelStream copy"),
        "h2d_gbs": _thr(48, _AZ_H200 + " L50 check_gpu_bw"),
        "d2h_gbs": _thr(48, _AZ_H200 + " L50 check_gpu_bw"),
        "p2p_gbs": _thr(335, _AZ_H200 + " L53 check_gpu_bw"),
        # AzNHC 431 at one 16G message, as we measure; OCI 440 is a sweep average
        "nccl_busbw_gbs": _thr(431, _AZ_H200 + " L61 check_nccl_allreduce 16G", bytes=16 * GIB, gpus=8),
        "power_w": _dcgm_power(700, 3522),
    },
    "H100 PCIe": {"fp32_tflops": _dcgm_sgemm(15375, 2531), "power_w": _dcgm_power(350, 2531)},
    "H100 NVL": {
        "fp32_tflops": _dcgm_sgemm(25575, 3032),
        "h2d_gbs": _thr(48, "AzNHC conf/nc80adis_h100_v5.conf L36"),
        "d2h_gbs": _thr(48, "AzNHC conf/nc80adis_h100_v5.conf L36"),
        # AzNHC's P2P 335 on this 2-GPU VM exceeds what its NVLink bridge is
        # marketed at (~300 per direction): doubtful, not used.
        "power_w": _dcgm_power(399, 3032),
    },
    "H800 NVL": {"fp32_tflops": _dcgm_sgemm(23700, 3112), "power_w": _dcgm_power(400, 3112)},
    "H200 NVL": {"fp32_tflops": _dcgm_sgemm(32218, 3593), "power_w": _dcgm_power(600, 3593)},
    "GH200": {
        "bf16_tflops": _of(0.9, 705.0, "Fryer README L67-73 (GH200, ~705)"),
        "tf32_tflops": _of(0.9, 363.0, "Fryer README L67-73 (GH200 \"FP32\" = TF32, ~363)"),
        "fp32_tflops": _dcgm_sgemm(37075, 3214),
        "power_w": _dcgm_power(900, 3214),
    },
    "GH200 144GB": {"fp32_tflops": _dcgm_sgemm(37581, 3704), "power_w": _dcgm_power(900, 3704)},
    "A100 SXM 80GB": {
        # AzBench fp16 cuBLASLt 8192 (253.7) is the lowest; A100 fp16 and bf16
        # tensor rates are the same (312 peak); Fryer ~270, Napkin 289
        "bf16_tflops": _of(0.9, 253.7, "AzBench ND_A100_v4 fp16 cuBLASLt 8192 L26 (Fryer ~270, Napkin 289)"),
        "tf32_tflops": _of(0.9, 130.0, "Fryer README L67-73 (A100 SXM ~130; Napkin 140)"),
        "fp32_tflops": _of(0.9, 19.0, "Napkin a100-80gb-sxm4.md (T database.md 19.18)"),
        "d2d_gbs": _of(0.9, 1610.0, "AzBench ND_A100_v4 BabelStream copy (Napkin 1750)"),
        "h2d_gbs": _thr(21, _AZ_A100_80 + " L54 check_gpu_bw"),
        "d2h_gbs": _thr(21, _AZ_A100_80 + " L54 check_gpu_bw"),
        "p2p_gbs": _thr(238, _AZ_A100_80 + " L57 check_gpu_bw"),
        "nccl_busbw_gbs": _thr(228, _AZ_A100_80 + " L65 check_nccl_allreduce", bytes=4 * GIB, gpus=8),
        "power_w": _dcgm_power(399, 1582),
    },
    "A100 SXM 40GB": {
        # no 40GB measurement: the 80GB row's GEMM (same GA100 at 400 W) as a proxy
        "bf16_tflops": _of(0.9, 253.7, "proxy: A100-SXM4-80GB row (AzBench ND_A100_v4 L26)"),
        "h2d_gbs": _thr(21, _AZ_A100_40 + " L54 check_gpu_bw"),
        "d2h_gbs": _thr(21, _AZ_A100_40 + " L54 check_gpu_bw"),
        "p2p_gbs": _thr(235, _AZ_A100_40 + " L57 check_gpu_bw"),
        "nccl_busbw_gbs": _thr(228, _AZ_A100_40 + " L65 check_nccl_allreduce 8G", bytes=8 * GIB, gpus=8),
        "power_w": _dcgm_power(399, 1475),
    },
    "A100 PCIe 80GB": {
        "bf16_tflops": _of(0.9, 236.0, "Napkin a100-80gb-pcie.md (MAMF 252.9)"),
        "tf32_tflops": _of(0.9, 113.0, "Napkin a100-80gb-pcie.md"),
        "fp32_tflops": _of(0.9, 19.0, "Napkin a100-80gb-pcie.md"),
        "d2d_gbs": _of(0.9, 1660.0, "Napkin a100-80gb-pcie.md"),
        "h2d_gbs": _thr(21, "AzNHC conf/nc24ads_a100_v4.conf L38"),
        "d2h_gbs": _thr(21, "AzNHC conf/nc24ads_a100_v4.conf L38"),
        "power_w": _dcgm_power(299, 2162),
    },
    "A100 40GB": {  # A100-PCIE-40GB: T #108 is below Fryer's ~224 / ~106
        "bf16_tflops": _of(0.9, 215.26, "T issue #108, A100-PCIE-40GB (8192) (Fryer ~224)"),
        "tf32_tflops": _of(0.9, 97.32, "T issue #108, A100-PCIE-40GB (8192) (Fryer ~106)"),
        "fp32_tflops": _of(0.9, 17.56, "T issue #108, A100-PCIE-40GB (8192)"),
        "power_w": _dcgm_power(299, 1546),
    },
    "L40S": {
        "bf16_tflops": _of(0.8, 269.15, "T database.md, L40S (best of 1024..10240)"),
        "fp32_tflops": _dcgm_sgemm(30000, 3180),
        "power_w": _dcgm_power(350, 3180),
    },
    "L4": {  # T #120 (torch, our protocol) rather than DCGM's SGEMM floor 8.7k
        "bf16_tflops": _of(0.9, 59.40, "T issue #120 (8192)"),
        "tf32_tflops": _of(0.9, 25.69, "T issue #120 (8192)"),
        "fp32_tflops": _of(0.9, 10.66, "T issue #120 (8192)"),
        "power_w": _dcgm_power(75, 2924),
    },
    "A10": {"fp32_tflops": _dcgm_sgemm(6075, 1728), "power_w": _dcgm_power(149, 1728)},
    "A10G": {
        "bf16_tflops": _of(0.9, 66.59, "T issue #126 (8192)"),
        "tf32_tflops": _of(0.9, 34.13, "T issue #126 (8192)"),
        "fp32_tflops": _of(0.9, 23.23, "T issue #126 (8192)"),
        "power_w": _dcgm_power(299, 1765),
    },
    "A40": {
        "bf16_tflops": _of(0.9, 110.64, "T issue #185 (8192)"),
        "tf32_tflops": _of(0.9, 59.52, "T issue #185 (8192)"),
        "fp32_tflops": _of(0.9, 23.73, "T issue #185 (8192)"),
    },
    "A800 SXM 80GB": {
        "bf16_tflops": _of(0.8, 266.48, "T database.md, A800 SXM4 80GB (best of 1024..10240)"),
        "fp32_tflops": _of(0.8, 19.08, "T database.md, A800 SXM4 80GB (best of 1024..10240)"),
    },
    "H20": {
        "bf16_tflops": _of(0.8, 141.86, "T database.md, H20 96GB (best of 1024..10240)"),
        "fp32_tflops": _of(0.8, 31.95, "T database.md, H20 96GB (best of 1024..10240)"),
    },
    "RTX 4090": {
        "bf16_tflops": _of(0.8, 160.53, "T database.md, lowest of its RTX 4090 rows (best of sizes)"),
        "fp32_tflops": _of(0.8, 54.69, "T database.md, lowest of its RTX 4090 rows (best of sizes)"),
    },
    "B200": {
        # T 1696.03 (best of sizes) is below MAMF 1745.  FP32: DCGM's plain 2901
        # row (36,949) and its rows for the three subsystem ids the driver lists
        # (~12.5k, L3783-3870) disagree threefold: no reference.
        "bf16_tflops": _of(0.8, 1696.03, "T database.md, B200 180GB (best of 1024..10240) (MAMF 1745)"),
        # OCI's floor is a 1-16 GiB sweep average, so it holds at 16 GiB too
        "nccl_busbw_gbs": _thr(440, "OCI active_healthcheck.py L86-125 (1G-16G average)", bytes=16 * GIB, gpus=8),
        "power_w": _dcgm_power(1000, 4081),
    },
    "GB200": {
        "bf16_tflops": _of(0.9, 1550.0, "Fryer README L67-73 (GB200, ~1550)"),
        "tf32_tflops": _of(0.9, 790.0, "Fryer README L67-73 (GB200 \"FP32\" = TF32, ~790)"),
        "fp32_tflops": _dcgm_sgemm(15225, 3915),
        "power_w": _dcgm_power(1199, 3915),
    },
    "B300": {
        "bf16_tflops": _of(0.8, 1769.0, "MAMF L351-358 (B300, best shape)"),
        "fp32_tflops": _dcgm_sgemm(36825, 4199),
        "nccl_busbw_gbs": _thr(800, "OCI active_healthcheck.py L86-125 (1G-16G average)", bytes=16 * GIB, gpus=8),
        "power_w": _dcgm_power(1099, 4199),
    },
    "GB300": {"fp32_tflops": _dcgm_sgemm(48750, 4246), "power_w": _dcgm_power(1399, 4246)},
    # resnet50 fp32 batch-64 throughput (the bench check): half of D's figure,
    # loose because their harness, data path and cuDNN differ (0.5: ours).
    "V100 SXM2": {"resnet50_fp32_ips": dict(_of(0.5, 1200.0, "D, NVIDIA DGX-1 (1x V100 16GB), FP32, batch 64"),
                                            batch=64)},
    "T4": {"resnet50_fp32_ips": dict(_of(0.5, 428.0, "D, NVIDIA T4, FP32, batch 64"), batch=64)},
}
# H200: no public PyTorch figure at our protocol (see above); our own run on a
# lent H200 VM is the measurement, at the same 0.5 (the fixture holds it).
TABLE["H200 SXM"]["resnet50_fp32_ips"] = dict(
    _of(0.5, 6774.0, "gpuprov run, 1x H200 VM, 2026-11-27: tests/fixtures/validate/h200/classic"), batch=64)

# The stress check's sustained bf16 GEMM: half of the same measurement, since
# that is a short burst and this load runs at the power cap with every product
# compared (the 0.5 is ours: unsourced).
STRESS_FRACTION = 0.5
for _cells in TABLE.values():
    _bf16 = _cells.get("bf16_tflops")
    if _bf16 and "measured" in _bf16:
        _cells["stress_bf16_tflops"] = _of(STRESS_FRACTION, _bf16["measured"], _bf16["source"])

# Figures a MIG slice is judged on, by its share of the whole GPU; its copies
# and power have no public figure for a slice.
SCALED_BY_SHARE = ("bf16_tflops", "tf32_tflops", "fp32_tflops", "stress_bf16_tflops")

GPU_FIGURES = ("bf16_tflops", "tf32_tflops", "fp32_tflops", "d2d_gbs", "h2d_gbs", "d2h_gbs", "power_w")

PASS, FAIL, NO_REFERENCE = "pass", "fail", "no reference"


# The node profile's floors, which override the table's cells, and its
# tolerance, which lowers every floor (validate/profile.py; set once per run).
PROFILE = {"floors": {}, "tolerance": 0.0}  # type: dict[str, typing.Any]


def use_profile(floors=None, tolerance=0.0):
    PROFILE["floors"] = dict(floors or {})
    PROFILE["tolerance"] = float(tolerance or 0.0)


def cell(model, figure, share=None):
    """The table's cell for ``figure`` of ``model`` (a copy, scaled for a MIG
    slice's ``share``; the profile's floor in its place), or None: no reference."""
    found = TABLE.get(model or "", {}).get(figure)
    override = PROFILE["floors"].get(figure)
    if override is not None:
        found = dict(found or ({"bytes": 8 * GIB} if figure == "nccl_busbw_gbs" else {}),
                     floor=float(override), rule="profile floor %g" % override, source="node profile (inventory)")
        found.pop("measured", None)
    if not found:
        return None
    found = dict(found)
    if PROFILE["tolerance"]:
        found["floor"] *= 1.0 - PROFILE["tolerance"]
        found["rule"] += " - tolerance %g%%" % (100 * PROFILE["tolerance"])
    if share:
        if figure not in SCALED_BY_SHARE:
            return None
        found["floor"] *= share
        found["rule"] += " x MIG share %.3f" % share
        if "measured" in found:
            found["measured"] *= share
    return found


def verdict(expected, value, why=None):
    """The one judging function: {"value", "floor", "rule", "source", "verdict"}
    of ``value`` against a cell (None: no reference)."""
    if not expected:
        return {"value": value, "floor": None, "rule": None, "source": None, "verdict": NO_REFERENCE,
                "why": why or "no public figure for this model"}
    out = {"value": value, "floor": expected["floor"], "rule": expected["rule"], "source": expected["source"],
           "verdict": PASS if value >= expected["floor"] else FAIL}
    if "measured" in expected:
        out["measured"] = expected["measured"]
    return out


def judge(model, figure, value, share=None):
    """``verdict`` of ``value`` against the table's cell for ``model``."""
    return verdict(cell(model, figure, share), value)


def judge_allreduce(model, busbw_gbs, nbytes, gpus):
    """An all-reduce's busbw: the floor holds only for its GPU count and at
    least its message size (NCCL reaches its peak only at several GiB:
    nccl-tests#212), else no reference."""
    expected = cell(model, "nccl_busbw_gbs")
    if expected and expected.get("gpus") not in (None, gpus):
        return verdict(None, busbw_gbs, "the floor is for %d GPUs, not %s" % (expected["gpus"], gpus))
    if expected and nbytes is not None and nbytes < expected["bytes"]:
        return verdict(None, busbw_gbs, "the floor holds at %d GiB or more, measured at %.3g GiB"
                       % (expected["bytes"] >> 30, float(nbytes) / GIB))
    return verdict(expected, busbw_gbs)


def overall(verdicts):
    """fail if any fails; else no reference if any had none; else pass."""
    seen = set(v["verdict"] for v in verdicts)
    return FAIL if FAIL in seen else NO_REFERENCE if NO_REFERENCE in seen else PASS
