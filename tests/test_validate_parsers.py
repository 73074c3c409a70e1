"""validate/ parsers, spec table, timing statistics and bench log format,
tested on output captured on real machines (tests/fixtures/validate/SOURCES.md).
Standard library only: no torch needed."""

import ctypes
import ctypes.util
import os
import statistics

import pytest

from validate import gpu_state, output, smi, softmax_sample, specs, text, timing, versions

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "validate")


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


# --------------------------------------------------------------------------
# nvidia-smi CSV


def test_h100_query_gpu_with_header_and_units():
    rows = smi.parse_query_csv(fixture("h100_590_query_gpu.csv"))
    assert len(rows) == 1
    t = smi.typed_gpu_rows(rows)[0]
    assert t["name"] == "NVIDIA H100 80GB HBM3"
    assert t["driver_version"] == "590.48.01"
    assert t["memory.total"] == 81559  # "81559 MiB"
    assert t["power.draw"] == 69.85  # "69.85 W"
    assert t["pcie.link.gen.max"] == 5 and t["pcie.link.width.max"] == 16
    assert t["ecc.mode.current"] is True
    assert t["ecc.errors.uncorrected.volatile.total"] == 0
    assert t["remapped_rows.pending"] is False and t["remapped_rows.failure"] is False
    assert t["retired_pages.pending"] is None  # "[N/A]" on HBM3 parts
    assert t["compute_cap"] == "9.0"
    assert t["index"] == 0
    # the active clock-event mask 0x...01 is "idle" and nothing else
    assert smi.decode_throttle(t["clocks_event_reasons.active"]) == ["gpu_idle"]
    assert smi.decode_throttle(0x1FF) == [name for _, name in smi.THROTTLE_BITS]


def test_p100_csv_missing_values():
    t = smi.typed_gpu_rows(smi.parse_query_csv(fixture("p100_query_gpu.csv")))[0]
    assert t["name"] == "Tesla P100-PCIE-16GB"
    assert t["fan.speed"] is None  # "[N/A]"
    assert t["temperature.gpu"] == 37
    assert t["power.draw"] == 28.16


def test_noheader_nounits_with_given_fields_and_bare_na():
    lines = fixture("rtx2080_query_gpu_noheader_nounits.txt").splitlines()
    fields = lines[0].split(":", 1)[1].strip().split(",")
    rows = smi.parse_query_csv("\n".join(lines[1:]), fields)
    t = smi.typed_gpu_rows(rows)[0]
    assert t["name"] == "GeForce RTX 2080"  # a name with a space stays one value
    assert t["memory.total"] == 7979
    assert t["temperature.memory"] is None  # old drivers print a bare N/A
    assert t["pcie.link.width.current"] == 8
    assert t["utilization.gpu"] == "86"  # fields without a known type stay strings
    with pytest.raises(text.ParseError):
        smi.parse_query_csv("\n".join(lines[1:]), fields[:-1])


def test_missing_markers_and_numbers():
    for v in ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]",
              "[Requested functionality has been deprecated]", ""):
        assert smi.is_missing(v)
        assert smi.to_number(v) is None
    assert smi.to_number("16x") == 16
    assert smi.to_number("-8 C") == -8
    assert smi.to_bool("Not Active") is False and smi.to_bool("Active") is True


def test_invalid_field_message():
    msg = 'Field "clocks_event_reasons.active" is not a valid field to query.\n\n'
    assert smi.invalid_query_field(msg) == "clocks_event_reasons.active"
    assert smi.invalid_query_field("NVIDIA-SMI has failed because it couldn't communicate") is None


def test_retired_pages_query():
    rows = smi.parse_query_csv(fixture("h100_590_query_retired_pages.csv"))
    assert [r["retired_pages.cause"] for r in rows] == ["Single Bit ECC", "Double Bit ECC"]
    assert all(smi.is_missing(r["retired_pages.address"]) for r in rows)


# --------------------------------------------------------------------------
# nvidia-smi -q


def test_smi_q_h100():
    q = smi.parse_smi_q(fixture("h100_590_smi_q.txt"))
    assert q["header"]["Driver Version"] == "590.48.01"
    assert q["header"]["CUDA Version"] == "13.1"
    assert len(q["gpus"]) == 1
    gpu = q["gpus"][0]
    assert gpu["_bus_id"] == "00000000:00:09.0"
    assert gpu["FB Memory Usage"]["Total"] == "81559 MiB"
    h = gpu_state.smi_q_health(gpu)
    assert h["name"] == "NVIDIA H100 80GB HBM3"
    assert h["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert h["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert h["ecc_uncorrected_volatile"] == 0
    assert h["ecc_mode"] is True
    assert h["throttle_active"] == ["gpu_idle"]  # nested "HW Thermal Slowdown" lines parsed too
    assert h["pcie"] == {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16}


def test_system_assessment_of_real_h100_and_of_a_sick_one():
    t = smi.typed_gpu_rows(smi.parse_query_csv(fixture("h100_590_query_gpu.csv")))[0]
    h = gpu_state.smi_q_health(smi.parse_smi_q(fixture("h100_590_smi_q.txt"))["gpus"][0])
    rec = gpu_state.gpu_record(t, h)
    assert rec["throttle"]["active"] == ["gpu_idle"]
    assert gpu_state.assess_gpu(rec) == ([], [])
    sick = gpu_state.gpu_record(t, h)
    sick["remapped_rows"]["pending"] = True
    sick["ecc"]["uncorrected_volatile"] = 3
    sick["pcie"]["width_current"] = 8
    sick["throttle"]["active"] = ["hw_slowdown", "hw_thermal_slowdown"]
    problems, warnings = gpu_state.assess_gpu(sick)
    # a pending remap needs a reset, yet new work may start meanwhile (issue 30): a warning
    assert ("GPU 0: row remapping pending, a GPU reset activates it", "reset the GPU") in warnings
    assert not any("remapping pending" in p for p, _ in problems)
    assert ("GPU 0: 3 uncorrected ECC errors since boot", "reset the GPU") in problems
    assert ("GPU 0: PCIe link x8 of x16", "none") in warnings  # at idle a hint: bandwidth judges it under load
    assert any("hw_slowdown" in w and a == "none" for w, a in warnings)
    sick["remapped_rows"]["failure"] = True
    assert ("GPU 0: row remapping failure occurred", "drain and replace (RMA)") in gpu_state.assess_gpu(sick)[0]


# --------------------------------------------------------------------------
# cuDNN versions


@pytest.mark.parametrize("name,version,encoded", [
    ("cudnn_version_9.24.0_wheel.h", "9.24.0", 92400),
    ("cudnn_version_8.0.2_grep.txt", "8.0.2", 8002),
    ("cudnn_version_8.2.1_grep.txt", "8.2.1", 8201),
    ("cudnn_h_7.4.2_grep.txt", "7.4.2", 7402),
])
def test_cudnn_header(name, version, encoded):
    v = versions.parse_cudnn_header(fixture(name))
    assert v["version"] == version
    assert v["encoded"] == encoded
    assert versions.cudnn_version_string(encoded) == version


def test_cudnn_header_on_this_machine_when_the_wheel_is_installed():
    try:
        import nvidia.cudnn  # noqa: F401
    except ImportError:
        pytest.skip("nvidia-cudnn wheel not installed")
    path = os.path.join(list(nvidia.cudnn.__path__)[0], "include", "cudnn_version.h")
    v = versions.parse_cudnn_header(open(path).read())
    assert v["major"] >= 9 and v["encoded"] == v["major"] * 10000 + v["minor"] * 100 + v["patch"]


@pytest.mark.parametrize("n,expected", [
    (92400, (9, 24, 0)),   # torch.backends.cudnn.version() here
    (90100, (9, 1, 0)),
    (8200, (8, 2, 0)),     # the seed's RTX 3080 session
    (8907, (8, 9, 7)),
    (7605, (7, 6, 5)),     # torch with cuDNN 7.6.5
    (0, None),
    (None, None),
])
def test_decode_cudnn_version(n, expected):
    assert versions.decode_cudnn_version(n) == expected


def test_nvcc_banner():
    # from the seeds' real sessions
    text = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2019 NVIDIA Corporation\n"
            "Built on Wed_Oct_23_19:24:38_PDT_2019\nCuda compilation tools, release 10.2, V10.2.89\n")
    assert versions.parse_nvcc_version(text) == {"release": "10.2", "version": "10.2.89"}
    assert versions.parse_nvcc_version("bash: nvcc: command not found") is None


# --------------------------------------------------------------------------
# the cuDNN sample


def test_generator_is_glibc_rand():
    libc_name = ctypes.util.find_library("c")
    if not libc_name or "libc.so.6" not in libc_name:
        pytest.skip("not glibc")
    libc = ctypes.CDLL(libc_name)
    libc.srand(1234)
    expected = [libc.rand() for _ in range(2000)]
    assert softmax_sample.additive_generator(1234, 2000) == expected


def test_real_gpu_output_of_the_seed_program_passes_the_reference_check():
    parsed = softmax_sample.parse_sample_output(fixture("sample_legacy_rtx3080.txt"))
    assert parsed["format"] == "legacy"
    assert [p for p, _ in parsed["top"]] == [754, 814, 961, 938, 717]
    problems, figures = softmax_sample.check_sample(parsed)
    assert problems == []
    assert [p for p, _ in figures["reference_top5"]] == [754, 814, 961, 938, 717]
    assert figures["top5_max_rel_error"] < 1e-5


def test_reference_check_catches_wrong_results():
    text = fixture("sample_legacy_rtx3080.txt").replace("pos 814", "pos 815")
    problems, _ = softmax_sample.check_sample(softmax_sample.parse_sample_output(text))
    assert problems == ["top-2 position 815, reference 814"]
    text = fixture("sample_legacy_rtx3080.txt").replace("0.00159118", "0.00169118")
    problems, _ = softmax_sample.check_sample(softmax_sample.parse_sample_output(text))
    assert len(problems) == 1 and "top-1 value" in problems[0]
    good = ("gpuprov-cudnn-softmax 1\ninput_sum 493.332465549\nsum 1.000020000\n"
            + "".join("top %d %d %.9g\n" % (k, p, v) for k, (p, v) in enumerate(
                softmax_sample.top_k(softmax_sample.softmax_reference(softmax_sample.sample_input()), 5)))
            + "status ok\n")
    problems, _ = softmax_sample.check_sample(softmax_sample.parse_sample_output(good))
    assert problems == ["softmax sums to 1.000020000, not 1 within 1e-05"]
    problems, _ = softmax_sample.check_sample(
        softmax_sample.parse_sample_output(good.replace("sum 1.000020000", "sum 1.000000001")))
    assert problems == []


def test_no_gpu_output_of_our_program():
    parsed = softmax_sample.parse_sample_output(fixture("sample_nogpu_stdout.txt"))
    assert parsed["format"] == "gpuprov" and parsed["status"] == "fail"
    assert parsed["cudnn_header"] == 92400 and parsed["cuda_driver"] == 0
    # the input generator of the C++ program and ours agree
    assert abs(parsed["input_sum"] - sum(softmax_sample.sample_input())) < 1e-6
    errors = softmax_sample.parse_sample_errors(fixture("sample_nogpu_stderr.txt"))
    assert errors == [{"api": "cuda", "call": "cudaGetDeviceCount(&count)", "name": "cudaErrorInsufficientDriver",
                       "text": "CUDA driver version is insufficient for CUDA runtime version"}]
    problems, _ = softmax_sample.check_sample(parsed)
    assert problems == ["sample did not complete (status fail)"]


# --------------------------------------------------------------------------
# spec table


@pytest.mark.parametrize("name,key", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA H20", "H20"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA A800-SXM4-80GB", "A800 SXM 80GB"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
    ("NVIDIA L40", "L40"),
    ("NVIDIA A40", "A40"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A10G", "A10G"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("Tesla T4", "T4"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla P100-PCIE-16GB", None),
    ("GeForce RTX 2080", None),
])
def test_spec_lookup(name, key):
    got, figures = specs.lookup(name)
    assert got == key
    assert bool(figures) == (key is not None)


def test_spec_ratios():
    _, sp = specs.lookup("NVIDIA H100 80GB HBM3")
    r = specs.ratios({"fp32_tflops": 33.5, "tf32_tflops": None}, sp, ("fp32_tflops", "tf32_tflops", "bf16_tflops"))
    assert r == {"fp32_tflops": 0.5}


# --------------------------------------------------------------------------
# timing statistics (no durations asserted)


def test_percentiles_match_the_statistics_module():
    data = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.3, 5.8, 9.7, 9.3]
    s = timing.summarize(data)
    q = statistics.quantiles(data, n=4, method="inclusive")  # numpy-style linear
    assert s["median"] == pytest.approx(statistics.median(data))
    assert s["p25"] == pytest.approx(q[0]) and s["p75"] == pytest.approx(q[2])
    assert s["iqr"] == pytest.approx(q[2] - q[0])
    assert s["iqr_rel"] == pytest.approx((q[2] - q[0]) / statistics.median(data))
    assert s["p10"] == pytest.approx(statistics.quantiles(data, n=10, method="inclusive")[0])
    assert s["iters"] == 10 and s["min"] == 1.0 and s["max"] == 9.7


def test_measure_times_exactly_iters_after_warmup():
    calls = []
    st = timing.measure(lambda: calls.append(1), warmup=3, iters=7, device="cpu")
    assert len(calls) == 10
    assert st["iters"] == 7 and len(st["samples"]) == 7
    assert st["clock"] == "perf_counter_ns"
    synced = []
    st = timing.measure(lambda: None, warmup=0, iters=4, device="cpu", sync=lambda: synced.append(1))
    assert len(synced) == 5 and st["clock"] == "perf_counter_ns+sync"
    with pytest.raises(ValueError):
        timing.measure(lambda: None, 0, 0)


# --------------------------------------------------------------------------
# bench_torch.log


def test_bench_log_round_trip_in_the_seed_format():
    text = output.bench_log_text("PyTorch 2.14.1 cuda NVIDIA H100 80GB HBM3",
                                 [("resnet50", 7.94), ("googlenet", None), ("alexnet", 1.25)])
    assert text.splitlines() == ["#head;PyTorch 2.14.1 cuda NVIDIA H100 80GB HBM3",
                                 "#resnet50;7.940000", "#alexnet;1.250000"]
    cols = output.parse_bench_log(text + "#head;PyTorch other\n#resnet50;8.0\n")
    assert [c["label"] for c in cols] == ["PyTorch 2.14.1 cuda NVIDIA H100 80GB HBM3", "PyTorch other"]
    assert cols[0]["models"] == {"resnet50": 7.94, "alexnet": 1.25}
    # the seed's own example line parses too
    assert output.parse_bench_log("#head;PyTorch\n#resnet50;7.940051\n")[0]["models"] == {"resnet50": 7.940051}
    with pytest.raises(ValueError):
        output.parse_bench_log("#head;x\n# a comment\n")
