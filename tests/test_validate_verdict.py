"""The verdict on healthy and sick GPUs (issue 12 items 1-4, 10): pure judges
fed with real values, each with its source (tests/fixtures/validate/SOURCES.md),
and the matmul / bench checks run for real on the CPU."""

import os

import pytest

from validate import compat, gpu_state, smi, specs, verify
from validate.checks import bench, gpu_health

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "validate")

# torch.cuda.get_arch_list() of real builds
ARCHS_TORCH_2_14_CU130 = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120".split()  # this machine, validate/README.md
ARCHS_CU12X = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90".split()  # FlyMyAI/flymyai-lora-trainer#47
ARCHS_TORCH_1_8 = "sm_37 sm_50 sm_60 sm_70".split()  # MIC-DKFZ/BodyPartRegression#7, pytorch#45028


# --------------------------------------------------------------------------
# item 1: kernels for the GPU, judged as CUDA and torch judge them


@pytest.mark.parametrize("gpu,cap,archs,status,via", [
    # L4 / L40S / RTX 4090 are sm_89: binary compatible with sm_86 cubins (same major)
    ("L4", (8, 9), ARCHS_TORCH_2_14_CU130, compat.BINARY, "sm_86"),
    ("RTX 4090", (8, 9), ARCHS_CU12X, compat.BINARY, "sm_86"),
    ("H100", (9, 0), ARCHS_TORCH_2_14_CU130, compat.NATIVE, "sm_90"),
    ("A100", (8, 0), ARCHS_CU12X, compat.NATIVE, "sm_80"),
    # torch warned "not compatible" for these (the quoted issues): so do we
    ("RTX 5090", (12, 0), ARCHS_CU12X, compat.NONE, None),
    ("RTX 4090", (8, 9), ARCHS_TORCH_1_8, compat.NONE, None),
    ("A100", (8, 0), ARCHS_TORCH_1_8, compat.NONE, None),
])
def test_kernel_support_of_real_builds(gpu, cap, archs, status, via):
    assert compat.kernel_support(cap[0], cap[1], archs) == (status, via)


def test_ptx_only_and_arch_specific_cubins():
    # arch lists built by hand from the CUDA rules (no real build captured):
    # PTX runs on any newer capability through the JIT; sm_90a only on 9.0
    assert compat.kernel_support(8, 9, ["sm_80", "compute_80"]) == (compat.BINARY, "sm_80")
    assert compat.kernel_support(9, 0, ["sm_80", "compute_80"]) == (compat.PTX, "compute_80")
    assert compat.kernel_support(10, 0, ["sm_90a"]) == (compat.NONE, None)
    assert compat.kernel_support(9, 0, ["sm_90a"]) == (compat.NATIVE, "sm_90a")
    assert compat.kernel_support(8, 6, ["sm_89"]) == (compat.NONE, None)  # newer minor never runs down


# --------------------------------------------------------------------------
# item 2: matmul judged against what healthy GPUs of the SKU reach

# torch.mm n=8192 on healthy GPUs, github.com/zzc0721/torch-performance-test-data
L4 = {"fp32_tflops": 10.66, "tf32_tflops": 25.69, "bf16_tflops": 59.40}      # issue #120
A10G = {"fp32_tflops": 23.23, "tf32_tflops": 34.13, "bf16_tflops": 66.59}    # issue #126
H100 = {"fp32_tflops": 51.81, "tf32_tflops": 372.05, "bf16_tflops": 797.51}  # issue #79
A100_PCIE_40 = {"fp32_tflops": 17.56, "tf32_tflops": 97.32, "bf16_tflops": 215.26}  # issue #108


@pytest.mark.parametrize("name,measured", [
    ("NVIDIA L4", L4), ("NVIDIA A10G", A10G), ("NVIDIA H100 80GB HBM3", H100),
    ("NVIDIA A100-PCIE-40GB", A100_PCIE_40),
])
def test_healthy_public_measurements_pass(name, measured):
    sku, figures = specs.lookup(name)
    verdict = gpu_health.judge_matmul(measured, sku, None)
    assert set(v["verdict"] for v in verdict.values()) == {"pass"}, verdict
    for v in verdict.values():  # each floor names its public source (validate/expectations.py)
        assert v["source"]


def test_the_old_datasheet_floor_failed_the_healthy_l4():
    _, figures = specs.lookup("NVIDIA L4")
    ratio = specs.ratios(L4, figures, gpu_health.MATMUL_KEYS)
    assert [round(ratio[k], 2) for k in gpu_health.MATMUL_KEYS] == [0.35, 0.43, 0.49]  # all < 0.5


def test_a_gpu_at_30_percent_fails_and_an_unknown_one_has_no_reference():
    slow = dict((k, 0.3 * v) for k, v in H100.items())
    verdict = gpu_health.judge_matmul(slow, "H100 SXM", None)
    assert set(v["verdict"] for v in verdict.values()) == {"fail"}
    # Tesla P100-SXM2: 9.50 TFLOPS fp32 (torch-performance-test-data issue #180), not in the table
    sku, _ = specs.lookup("Tesla P100-SXM2-16GB")
    verdict = gpu_health.judge_matmul({"fp32_tflops": 9.50}, sku, None)
    assert verdict["fp32_tflops"]["verdict"] == "no reference"


def test_an_unknown_sku_passes_matmul_with_a_warning_not_a_skip(tmp_path):
    """Issue 12 item 2: "no expectation -> measured and reported as 'no reference', never a
    silent pass".  The check passes on what it checked (the product) and says, as a warning,
    what it could not judge; it no longer skips, which made every SKU outside the table (T4,
    V100, RTX A6000...) "not validated".  The P100 figure is real (see above)."""
    from validate import core

    name = "Tesla P100-SXM2-16GB"
    measured = {"fp32_tflops": 9.50, "tf32_tflops": None, "bf16_tflops": None}
    g = dict(measured, device="cuda:0", name=name, sku=None, mig_share=None, spec={}, ratio={},
             verdict=gpu_health.judge_matmul(measured, None, None))
    res = core.Result("matmul", True)
    gpu_health._report_matmul(_ctx(tmp_path), res, "cuda", 8192, [g])
    core._finish(res)
    assert res.status == "pass"
    assert res.warnings == ["performance not judged, no reference (measured only): %s fp32" % name]
    assert res.to_json()["warnings"] == res.warnings


# --------------------------------------------------------------------------
# item 3: host copies against the negotiated link; downtrained links


def test_h100_on_a_gen4_host_passes_and_on_gen5_the_same_figure_fails():
    gen4 = {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16}
    gen5 = {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16}
    # the old judge: 25 GB/s over the H100's own gen5 figure (63) = 0.40 < 0.5
    assert 25.0 / specs.lookup("NVIDIA H100 80GB HBM3")[1]["pcie_gbs"] < specs.DEFAULT_FLOOR
    assert gpu_health.judge_host_copy(25.0, gen4)["verdict"] == "pass"   # Azure gen4 floor 24
    assert gpu_health.judge_host_copy(25.0, gen5)["verdict"] == "fail"   # Azure gen5 floor 48
    assert gpu_health.judge_host_copy(25.0, {"gen_current": 4, "width_current": 8})["floor"] == 12.0
    assert gpu_health.judge_host_copy(25.0, None)["verdict"] == "no reference"


def test_downtrained_link_from_real_readings():
    q = gpu_state.smi_q_health(smi.parse_smi_q(open(os.path.join(FIX, "h100_590_smi_q.txt")).read())["gpus"][0])
    assert q["pcie"] == {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16}
    assert specs.link_downtrained(q["pcie"]) is None
    # sysfs of a card at 16 GT/s x8 in a 32 GT/s x16 slot (nokyan/resources#512)
    found = specs.link_downtrained({"gen_current": 4, "gen_max": 5, "width_current": 8, "width_max": 16})
    assert found == "PCIe link downtrained: gen 4 of 5, x8 of x16"


def test_grace_hopper_is_not_an_h200_and_has_no_pcie_reference():
    key, figures = specs.lookup("NVIDIA GH200 480GB")
    assert key == "GH200" and figures["host_link"] == "nvlink-c2c" and figures["pcie_gbs"] is None


# --------------------------------------------------------------------------
# item 4: MIG slices by their share; OOM at the user's batch


def test_mig_slice_is_judged_by_its_share():
    _, figures = specs.lookup("NVIDIA H100 80GB HBM3")
    # 1g.10gb: 16 of 132 SMs (NVIDIA MIG user guide, H100 profiles)
    share = specs.mig_share("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 16, figures)
    assert share == pytest.approx(16 / 132.0)
    assert specs.mig_share("NVIDIA H100 80GB HBM3", 132, figures) is None
    assert specs.mig_share("NVIDIA A100-SXM4-40GB MIG 3g.20gb", None, {}) == pytest.approx(3 / 7.0)
    slice_bf16 = 797.51 * share * 0.95
    verdict = gpu_health.judge_matmul({"bf16_tflops": slice_bf16}, "H100 SXM", share)
    assert verdict["bf16_tflops"]["verdict"] == "pass"
    assert gpu_health.judge_matmul({"bf16_tflops": slice_bf16}, "H100 SXM", None)["bf16_tflops"]["verdict"] == "fail"


def test_real_out_of_memory_is_recognised():
    import torch

    with pytest.raises(RuntimeError) as info:
        torch.empty(int(6e11) // 4)  # 600 GB: the CPU allocator refuses it
    assert bench.is_out_of_memory(info.value)
    assert not bench.is_out_of_memory(RuntimeError("CUDA error: an illegal memory access was encountered"))


# --------------------------------------------------------------------------
# item 10 and the checks themselves, in this process on the CPU


def _ctx(tmp_path, **extra):
    from validate import cli, core

    opts = cli.parse_args(["--out", str(tmp_path), "--device", "cpu", "--iters", "3", "--warmup", "1"]
                          + [a for k, v in extra.items() for a in ("--" + k, v)])
    cli.resolve_defaults(opts)
    return core.Context(opts, str(tmp_path), stream=open(os.devnull, "w"))


def _run(ctx, name):
    from validate import core

    return core.run_check(ctx, core.SPECS[name], True)


def test_product_check_on_real_products():
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)
    for mode, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        x, y = a.to(dtype), b.to(dtype)
        c = x @ y
        assert verify.product_ok(torch, x, y, c, mode)[0]
        bad = c.clone()
        bad[7, 300] = -bad[7, 300] * 256  # one element with its sign and an exponent bit flipped
        assert not verify.product_ok(torch, x, y, bad, mode)[0]
        bad[7, 300] = float("nan")
        assert verify.product_ok(torch, x, y, bad, mode) == (False, float("inf"))


def test_matmul_verifies_the_timed_product(tmp_path, monkeypatch):
    import torch

    res = _run(_ctx(tmp_path), "matmul")
    assert res.status == "pass", res.reason  # cpu mode: measured, not judged
    assert res.figures["per_gpu"][0]["fp32_check_error"] < 1.0
    real_mm = torch.mm

    def mm_with_a_stuck_tile(x, y, out=None):  # what a sick GPU would hand back
        r = real_mm(x, y, out=out)
        r[:16, :16] = 0
        return r

    monkeypatch.setattr(torch, "mm", mm_with_a_stuck_tile)
    res = _run(_ctx(tmp_path), "matmul")
    assert res.status == "fail" and "the timed product is wrong" in res.reason


def test_bench_records_oom_at_the_users_batch_as_a_result(tmp_path):
    # batch 1,1000000: the throughput batch needs 600 GB; the CPU refuses it
    res = _run(_ctx(tmp_path, models="squeezenet1_1", batch="1,1000000"), "bench")
    assert res.status == "pass", res.reason
    thr = res.figures["models"]["squeezenet1_1"]["throughput_ips"]
    assert thr["oom"] is True and thr["oom_batch"] == 1000000
    assert res.figures["oom"] == ["squeezenet1_1"]
    assert any("does not fit in GPU memory" in line for line in res.details)


# --------------------------------------------------------------------------
# item 9: bench measurements too spread to trust are flagged, not reported


def test_bench_flags_spread_measurements_from_the_recorded_cpu_run():
    # validate/README.md, "A real run": resnet50 b1 971.40 ms with IQR/med 75.8 %
    # (busy 2-core VM) and resnet18 45.8 ms with IQR/med 3.3 % (OMP_NUM_THREADS=1)
    noisy = {"latency_ms": {"median": 971.40, "iqr_rel": 0.758}, "throughput_ips": {"batch": 8, "fp32": 4.5}}
    quiet = {"latency_ms": {"median": 45.8, "iqr_rel": 0.033}, "throughput_ips": {"batch": 8, "fp32": 15.0}}
    assert bench.judge_model(noisy) == {"trust": "untrusted", "unstable": ["latency"], "verdict": "no reference"}
    assert bench.judge_model(quiet) == {"trust": "ok", "unstable": [], "verdict": "no reference"}


def test_bench_judges_throughput_against_public_floors():
    """NVIDIA DeepLearningExamples, ResNet50 v1.5 for PyTorch, inference FP32 batch 64:
    V100 16GB 1200 img/s, T4 428 img/s (NGC pytorch-21.03).  Loose floors: half of it."""
    from validate import specs

    t4 = specs.lookup("Tesla T4")[0]
    v100 = specs.lookup("Tesla V100-SXM2-16GB")[0]
    assert specs.lookup("Tesla V100-PCIE-16GB")[0] == "V100 PCIe"  # a 250 W card: not judged by the SXM2 figure
    # the published healthy figures themselves pass...
    healthy_t4 = {"latency_ms": {"median": 10.7, "iqr_rel": 0.02}, "throughput_ips": {"batch": 64, "fp32": 428.0}}
    assert bench.judge_model(healthy_t4, t4, "resnet50")["verdict"] == "pass"
    healthy_v100 = {"latency_ms": {"median": 10.37, "iqr_rel": 0.02}, "throughput_ips": {"batch": 64, "fp32": 1200.0}}
    assert bench.judge_model(healthy_v100, v100, "resnet50")["verdict"] == "pass"
    # ...a V100 at 30 % of it fails, with the source in the reason
    sick = {"latency_ms": {"median": 30.0, "iqr_rel": 0.02}, "throughput_ips": {"batch": 64, "fp32": 360.0}}
    got = bench.judge_model(sick, v100, "resnet50")
    assert got["verdict"] == "fail"
    assert got["slow"] == ["fp32 b64 360 img/s < 600 (0.50 x 1200 measured, D, NVIDIA DGX-1 (1x V100 16GB), FP32, "
                           "batch 64)"]
    # measured at another batch: the figure does not apply
    assert bench.judge_model(dict(sick, throughput_ips={"batch": 8, "fp32": 360.0}), v100,
                             "resnet50")["verdict"] == "no reference"
    # an unknown SKU (H100: no public PyTorch figure at this protocol) is not judged
    assert bench.judge_model(healthy_v100, "H100 SXM", "resnet50")["verdict"] == "no reference"
