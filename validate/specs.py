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

Measured values are compared as ratio = measured / spec; a check fails below
``DEFAULT_FLOOR`` (``--floor``).  Achievable fractions: large fp32/bf16 GEMMs
usually reach 60-90 % of peak, a device copy 75-90 % of HBM peak, pinned host
copies 75-90 % of the PCIe figure, so 0.5 flags a sick or mis-configured GPU
without flagging a healthy one.
"""

import re

DEFAULT_FLOOR = 0.5

PCIE3 = 15.75
PCIE4 = 31.5
PCIE5 = 63.0

# (pattern on the CUDA device name, key, figures); first match wins, so the
# more specific names come first.
_TABLE = [
    (r"H200 NVL", "H200 NVL", dict(fp32_tflops=60.0, tf32_tflops=417.5, bf16_tflops=835.5, mem_gbs=4800.0, pcie_gbs=PCIE5)),
    (r"H200", "H200 SXM", dict(fp32_tflops=67.0, tf32_tflops=494.5, bf16_tflops=989.5, mem_gbs=4800.0, pcie_gbs=PCIE5)),
    (r"H100 NVL", "H100 NVL", dict(fp32_tflops=60.0, tf32_tflops=417.5, bf16_tflops=835.5, mem_gbs=3900.0, pcie_gbs=PCIE5)),
    (r"H100.*PCIe", "H100 PCIe", dict(fp32_tflops=51.0, tf32_tflops=378.0, bf16_tflops=756.5, mem_gbs=2000.0, pcie_gbs=PCIE5)),
    (r"H100", "H100 SXM", dict(fp32_tflops=67.0, tf32_tflops=494.5, bf16_tflops=989.5, mem_gbs=3350.0, pcie_gbs=PCIE5)),
    (r"A100.*(SXM|sxm).*80", "A100 SXM 80GB", dict(fp32_tflops=19.5, tf32_tflops=156.0, bf16_tflops=312.0, mem_gbs=2039.0, pcie_gbs=PCIE4)),
    (r"A100.*80", "A100 PCIe 80GB", dict(fp32_tflops=19.5, tf32_tflops=156.0, bf16_tflops=312.0, mem_gbs=1935.0, pcie_gbs=PCIE4)),
    (r"A100", "A100 40GB", dict(fp32_tflops=19.5, tf32_tflops=156.0, bf16_tflops=312.0, mem_gbs=1555.0, pcie_gbs=PCIE4)),
    (r"L40S", "L40S", dict(fp32_tflops=91.6, tf32_tflops=183.0, bf16_tflops=362.0, mem_gbs=864.0, pcie_gbs=PCIE4)),
    (r"\bL4\b", "L4", dict(fp32_tflops=30.3, tf32_tflops=60.0, bf16_tflops=121.0, mem_gbs=300.0, pcie_gbs=PCIE4)),
    (r"A10G", "A10G", dict(fp32_tflops=31.2, tf32_tflops=62.5, bf16_tflops=125.0, mem_gbs=600.0, pcie_gbs=PCIE4)),
    (r"\bA10\b", "A10", dict(fp32_tflops=31.2, tf32_tflops=62.5, bf16_tflops=125.0, mem_gbs=600.0, pcie_gbs=PCIE4)),
    (r"\bT4\b", "T4", dict(fp32_tflops=8.1, tf32_tflops=None, bf16_tflops=None, mem_gbs=320.0, pcie_gbs=PCIE3)),
    (r"V100.*(SXM|sxm)", "V100 SXM2", dict(fp32_tflops=15.7, tf32_tflops=None, bf16_tflops=None, mem_gbs=900.0, pcie_gbs=PCIE3)),
    (r"V100", "V100 PCIe", dict(fp32_tflops=14.0, tf32_tflops=None, bf16_tflops=None, mem_gbs=900.0, pcie_gbs=PCIE3)),
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


def ratios(measured, spec, keys):
    """{key: measured/spec} for keys where both are known."""
    out = {}
    for k in keys:
        m = measured.get(k)
        s = spec.get(k)
        if m is not None and s:
            out[k] = m / s
    return out
