"""Datasheet figures of common data-centre GPUs, the one place they live.

Compute figures are dense (no structured sparsity) peak TFLOPS; memory is
peak HBM/GDDR bandwidth in GB/s (10^9 bytes/s); ``pcie_gbs`` is the host link's
theoretical one-direction bandwidth (PCIe gen3 x16 ~15.75, gen4 x16 ~31.5,
gen5 x16 ~63 GB/s).  ``None`` = the GPU has no such mode (no TF32/BF16 before
Ampere).  Sources, NVIDIA datasheets (figures marked * there are with sparsity;
we halve them to dense):

* H100 SXM5 / PCIe / NVL: "NVIDIA H100 Tensor Core GPU" datasheet (2023):
  SXM FP32 67, TF32 989*, BF16 1979*, 3.35 TB/s; PCIe FP32 51, TF32 756*,
  BF16 1513*, 2.0 TB/s; NVL FP32 60, TF32 835*, BF16 1671*, 3.9 TB/s.
* H200 SXM: "NVIDIA H200 Tensor Core GPU" datasheet (2024): same compute as
  H100 SXM, 4.8 TB/s; H200 NVL: FP32 60, TF32 835*, BF16 1671*, 4.8 TB/s.
* A100 SXM4 / PCIe: "NVIDIA A100 Tensor Core GPU" datasheet (2021): FP32 19.5,
  TF32 156 (312*), BF16 312 (624*); 80GB SXM 2039 GB/s, 80GB PCIe 1935 GB/s,
  40GB 1555 GB/s.
* L4: "NVIDIA L4 Tensor Core GPU" datasheet (2023): FP32 30.3, TF32 120*,
  BF16 242*, 300 GB/s, PCIe gen4 x16.
* A10: "NVIDIA A10 Tensor Core GPU" datasheet (2021): FP32 31.2, TF32 62.5
  (125*), BF16 125 (250*), 600 GB/s.  A10G (AWS g5): NVIDIA publishes no
  datasheet; AWS lists 600 GB/s; we use the A10 figures (doubtful, ratio is
  only indicative).
* T4: "NVIDIA T4 Tensor Core GPU" datasheet (2019): FP32 8.1, 320 GB/s,
  PCIe gen3 x16; no TF32/BF16.
* V100 SXM2 / PCIe: "NVIDIA V100 Tensor Core GPU" datasheet (2020): FP32 15.7 /
  14, 900 GB/s, PCIe gen3 x16; no TF32/BF16.
* L40S: "NVIDIA L40S" datasheet (2023): FP32 91.6, TF32 183 (366*), BF16 362
  (733*), 864 GB/s, PCIe gen4 x16.

* GH200 (Grace Hopper): Hopper GPU with H100 SXM compute (the MAMF table
  below lists its BF16 theory as 989), 96 GB HBM3 at 4.0 TB/s or 144 GB HBM3e
  at 4.9 TB/s: NVIDIA GH200 datasheet, *unsourced here* (not retrieved).  Its
  host link is NVLink-C2C, not PCIe: host copies have no PCIe reference.
* B200 (HGX, 1000 W): FP32 80, TF32 1100, BF16 2250 dense, 8 TB/s
  (glennklockwood.com/garden/processors/B200, quoting NVIDIA's HGX figures).
* H20: FP32 44, TF32 74, BF16 148, 4.0 TB/s, 78 SMs (zangshuxian.com/new/
  674733024499207168, willitrunai.com/es/gpus/h20-96gb; NVIDIA publishes no
  datasheet: third-party figures).
* A800 SXM4/PCIe 80GB: A100 compute and memory (NVIDIA A800 datasheet,
  *unsourced here*); its measured BF16 (266 TFLOPS, below) agrees.
* L40: FP32 90.5, TF32 90.5 (181*), BF16 181 (362*), 864 GB/s, PCIe gen4
  (NVIDIA L40 datasheet table as reproduced at mullet.se product 355414).
* A40: FP32 37.4, TF32 74.8, BF16 149.7 (hmc-tech.com/gpu/nvidia-l40-vs-
  nvidia-a40); 696 GB/s *unsourced here*; PCIe gen4.
* RTX 4090: FP32 82.6, TF32 82.6, BF16 165.2 (FP32 accumulate), 1008 GB/s;
  RTX 6000 Ada: FP32 91.1, TF32 182.1, BF16 364.2, 960 GB/s: NVIDIA Ada
  architecture whitepaper / RTX 6000 Ada datasheet, *unsourced here*.

What a healthy GPU of a SKU reaches is NOT a fixed fraction of its datasheet
(a 72 W L4 reaches 0.35 of its FP32 peak, an H100 0.77): the verdicts come
from validate/expectations.py (public measurements and thresholds per model,
each with its source); the figures here give ratios, SM counts for MIG
shares and the host link.
"""

import re

# --floor: kept for compatibility of the command line; no verdict uses it
# (validate/expectations.py has the floors).
DEFAULT_FLOOR = 0.5

# Theoretical one-direction PCIe x16 bandwidth per generation, GB/s (PCI-SIG:
# 8, 16, 32 GT/s per lane with 128b/130b encoding; gen6 64 GT/s FLIT).
PCIE_X16_GBS = {1: 4.0, 2: 8.0, 3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}
PCIE3 = PCIE_X16_GBS[3]
PCIE4 = PCIE_X16_GBS[4]
PCIE5 = PCIE_X16_GBS[5]


def _sku(fp32, tf32, bf16, mem, pcie=PCIE4, sms=None, host="pcie"):
    return dict(fp32_tflops=fp32, tf32_tflops=tf32, bf16_tflops=bf16, mem_gbs=mem, pcie_gbs=pcie,
                sm_count=sms, host_link=host)


# (pattern on the CUDA device name, key, figures); first match wins, so the
# more specific names come first.  sm_count (full GPU) lets a MIG slice be
# judged by its share: A100 108 SMs, H100 SXM5 132, H100 PCIe 114 (NVIDIA
# A100 / H100 architecture whitepapers, as quoted at zangshuxian.com above).
_TABLE = [
    (r"GH200.*144G", "GH200 144GB", _sku(67.0, 494.5, 989.5, 4900.0, None, 132, "nvlink-c2c")),
    (r"GH200", "GH200", _sku(67.0, 494.5, 989.5, 4000.0, None, 132, "nvlink-c2c")),
    (r"\bH200 NVL", "H200 NVL", _sku(60.0, 417.5, 835.5, 4800.0, PCIE5, 132)),
    (r"\bH200", "H200 SXM", _sku(67.0, 494.5, 989.5, 4800.0, PCIE5, 132)),
    (r"\bH100 NVL", "H100 NVL", _sku(60.0, 417.5, 835.5, 3900.0, PCIE5, 132)),
    (r"\bH100.*PCIe", "H100 PCIe", _sku(51.0, 378.0, 756.5, 2000.0, PCIE5, 114)),
    (r"\bH100", "H100 SXM", _sku(67.0, 494.5, 989.5, 3350.0, PCIE5, 132)),
    (r"\bH20\b", "H20", _sku(44.0, 74.0, 148.0, 4000.0, PCIE5, 78)),
    (r"\bB200", "B200", _sku(80.0, 1100.0, 2250.0, 8000.0, PCIE5, None)),
    (r"\bA800.*(SXM|sxm)", "A800 SXM 80GB", _sku(19.5, 156.0, 312.0, 2039.0, PCIE4, 108)),
    (r"\bA800", "A800 PCIe 80GB", _sku(19.5, 156.0, 312.0, 1935.0, PCIE4, 108)),
    (r"\bA100.*(SXM|sxm).*80", "A100 SXM 80GB", _sku(19.5, 156.0, 312.0, 2039.0, PCIE4, 108)),
    (r"\bA100.*80", "A100 PCIe 80GB", _sku(19.5, 156.0, 312.0, 1935.0, PCIE4, 108)),
    (r"\bA100.*(SXM|sxm)", "A100 SXM 40GB", _sku(19.5, 156.0, 312.0, 1555.0, PCIE4, 108)),
    (r"\bA100", "A100 40GB", _sku(19.5, 156.0, 312.0, 1555.0, PCIE4, 108)),
    (r"\bL40S", "L40S", _sku(91.6, 183.0, 362.0, 864.0, PCIE4)),
    (r"\bL40\b", "L40", _sku(90.5, 90.5, 181.0, 864.0, PCIE4)),
    (r"\bL4\b", "L4", _sku(30.3, 60.0, 121.0, 300.0, PCIE4)),
    (r"\bA40\b", "A40", _sku(37.4, 74.8, 149.7, 696.0, PCIE4)),
    (r"A10G", "A10G", _sku(31.2, 62.5, 125.0, 600.0, PCIE4)),
    (r"\bA10\b", "A10", _sku(31.2, 62.5, 125.0, 600.0, PCIE4)),
    (r"RTX 6000 Ada", "RTX 6000 Ada", _sku(91.1, 182.1, 364.2, 960.0, PCIE4)),
    (r"RTX 4090", "RTX 4090", _sku(82.6, 82.6, 165.2, 1008.0, PCIE4)),
    (r"\bT4\b", "T4", _sku(8.1, None, None, 320.0, PCIE3)),
    (r"V100.*(SXM|sxm)", "V100 SXM2", _sku(15.7, None, None, 900.0, PCIE3)),
    (r"V100", "V100 PCIe", _sku(14.0, None, None, 900.0, PCIE3)),
]

def lookup(device_name):
    """(key, figures) for a CUDA device name such as 'NVIDIA H100 80GB HBM3',
    or (None, {}) when the GPU is not in the table."""
    if not device_name:
        return None, {}
    for pattern, key, figures in _TABLE:
        if re.search(pattern, device_name):
            return key, dict(figures)
    return None, {}


def datasheet(key):
    """The datasheet figures of a model key, or {}."""
    for _, k, figures in _TABLE:
        if k == key:
            return dict(figures)
    return {}


def ratios(measured, spec, keys):
    """{key: measured/spec} for keys where both are known."""
    out = {}
    for k in keys:
        m = measured.get(k)
        s = spec.get(k)
        if m is not None and s:
            out[k] = m / s
    return out


_MIG_PROFILE = re.compile(r"MIG\s+(\d+)g\.(\d+)gb")


def mig_share(device_name, sm_count, figures):
    """Fraction of the full GPU a MIG slice has, or None for a whole GPU.

    From the SM count when the SKU's full count is known (a 1g.10gb slice of
    an H100 SXM has 16 of 132 SMs), else from the profile in the name
    ("MIG 3g.40gb" -> 3/7 compute slices, NVIDIA MIG user guide: 7 slices)."""
    full = (figures or {}).get("sm_count")
    if full and sm_count and sm_count < full:
        return float(sm_count) / full
    m = _MIG_PROFILE.search(device_name or "")
    if m:
        return int(m.group(1)) / 7.0
    return None


# --------------------------------------------------------------------------
# host <-> device copies against the negotiated PCIe link

# Pinned host copies a healthy x16 link gives (GB/s, the lower of h2d/d2h), as
# Azure's HPC node health checks fail below (github.com/Azure/azurehpc-health-
# checks conf/): gen5 48 (nd96isr_h200_v5: check_gpu_bw 48; the H100 configs
# use 52), gen4 24 (nd96amsr_a100_v4: check_cuda_bw 24, also the check's
# default), gen3 10 (nc6s_v3, V100: check_gpu_bw 10).
PINNED_COPY_FLOOR_X16 = {3: 10.0, 4: 24.0, 5: 48.0}


def pcie_link_gbs(gen, width):
    """Theoretical one-direction GB/s of a PCIe link, or None if unknown."""
    if not gen or not width or gen not in PCIE_X16_GBS:
        return None
    return PCIE_X16_GBS[gen] * width / 16.0


def pinned_copy_floor(gen, width):
    """GB/s below which a pinned host copy over this negotiated link is sick
    (the x16 floor scaled by lanes), or None when no source gives one."""
    if not gen or not width or gen not in PINNED_COPY_FLOOR_X16:
        return None
    return PINNED_COPY_FLOOR_X16[gen] * width / 16.0


def link_downtrained(pcie):
    """A finding when the link runs below what GPU and host allow, else None.

    ``pcie``: {"gen_current", "gen_max", "width_current", "width_max"} as
    nvidia-smi reports them; ``gen.max`` is already the lower of GPU and host
    ("if the GPU supports a higher PCIe generation than the system supports
    then this reports the system PCIe generation", nvidia-smi --help-query-gpu).
    The generation drops at idle to save power, so read it under load."""
    if not pcie:
        return None
    found = []
    gc, gm, wc, wm = (pcie.get(k) for k in ("gen_current", "gen_max", "width_current", "width_max"))
    if gc and gm and gc < gm:
        found.append("gen %d of %d" % (gc, gm))
    if wc and wm and wc < wm:
        found.append("x%d of x%d" % (wc, wm))
    return "PCIe link downtrained: " + ", ".join(found) if found else None
