"""The checks that catch sick GPUs (issue 12 items 5-8): xid on real kernel
lines, stress and memory on the CPU with real torch, nccl's orchestration
with gloo and two real processes.  Sources: tests/fixtures/validate/SOURCES.md."""

import os

import pytest

from validate import parsers, topology, xid
from validate.checks import memory, stress

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "validate")


def _ctx(tmp_path, *args):
    from validate import cli, core

    opts = cli.parse_args(["--out", str(tmp_path), "--device", "cpu", "--iters", "3", "--warmup", "1"] + list(args))
    cli.resolve_defaults(opts)
    return core.Context(opts, str(tmp_path), stream=open(os.devnull, "w"))


def _run(ctx, name):
    from validate import core

    return core.run_check(ctx, core.SPECS[name], True)


# --------------------------------------------------------------------------
# item 7: Xid


def test_real_xid_lines_are_parsed_named_and_judged():
    events = xid.parse(open(os.path.join(FIX, "kernel_xid_lines.txt")).read())
    assert [(e["xid"], e["pci"]) for e in events] == [
        (13, "0000:cb:00"), (79, "0000:44:00"), (94, "0000:9b:00"), (149, "0019:01:00"), (145, "0018:01:00")]
    assert events[2]["pid"] == "1234" and events[2]["process"] == "python3"
    problems, notes = xid.judge(events)
    assert problems == ["Xid 79 (GPU has fallen off the bus) on GPU PCI:0000:44:00, 1 time(s); "
                        "last: NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"]
    assert [n.split(" (")[0] for n in notes] == ["Xid 13", "Xid 94", "Xid 145", "Xid 149"]


def test_xid_check_fails_on_a_sick_log_passes_a_clean_one_and_never_passes_unread(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(open(os.path.join(FIX, "kernel_xid_lines.txt")).read())
    res = _run(_ctx(tmp_path, "--kernel-log", str(log)), "xid")
    assert res.status == "fail" and "Xid 79 (GPU has fallen off the bus)" in res.reason
    assert res.figures["sick"] == [79] and res.figures["xids"] == [13, 79, 94, 145, 149]
    clean = tmp_path / "clean.log"
    clean.write_text("[    0.000000] Linux version 6.1.0\n")
    res = _run(_ctx(tmp_path, "--kernel-log", str(clean)), "xid")
    assert res.status == "pass" and res.summary.startswith("0 Xid event(s)")
    ctx = _ctx(tmp_path, "--kernel-log", str(clean))
    clean.unlink()  # gone after the command line was checked
    res = _run(ctx, "xid")
    assert res.status == "skip" and res.reason.startswith("kernel log not readable")


# --------------------------------------------------------------------------
# item 5: stress


def test_stress_judge_on_sampled_values():
    # H100 idle reading (h100_590_query_gpu.csv): event reasons 0x1 = idle
    rows = parsers.typed_gpu_rows(parsers.parse_query_csv(open(os.path.join(FIX, "h100_590_query_gpu.csv")).read()))
    mask = rows[0]["clocks_event_reasons.active"]
    assert parsers.decode_throttle(mask) == ["gpu_idle"]
    ok = {"label": "GPU 0", "tflops": 700.0, "iterations": 100, "mismatches": 0,
          "samples": [{"throttle": parsers.decode_throttle(mask)}, {"throttle": ["sw_power_cap"]}]}
    assert stress.judge([ok, dict(ok, label="GPU 1", tflops=690.0)]) == []
    # NVML bits as Azure's azure_gpu_clock_throttling.nhc lists them: 0x40 HW thermal, 0x80 power brake
    hot = dict(ok, label="GPU 1", samples=[{"throttle": parsers.decode_throttle(0x40 | 0x80)}])
    slow = dict(ok, label="GPU 2", tflops=0.3 * 700)
    flaky = dict(ok, label="GPU 3", mismatches=2)
    problems = stress.judge([ok, hot, slow, flaky])
    assert problems == [
        "GPU 1: clocks held back under load by hw_power_brake_slowdown, hw_thermal_slowdown",
        "GPU 2: 210.0 TFLOPS under load, below 80% of its peers' median 700.0",
        "GPU 3: 2 of 100 results differ from the verified first product",
    ]


def test_stress_runs_on_the_cpu_and_catches_a_wrong_result(tmp_path, monkeypatch):
    import torch

    res = _run(_ctx(tmp_path, "--stress-seconds", "0.5"), "stress")
    assert res.status == "pass", res.reason
    g = res.figures["per_gpu"][0]
    assert g["iterations"] >= 10 and g["mismatches"] == 0 and g["tflops"] > 0
    real_mm = torch.mm
    calls = []

    def mm_that_flips_later(x, y, out=None):  # right first, wrong from the 5th call on
        r = real_mm(x, y, out=out)
        calls.append(1)
        if len(calls) > 5:
            r[3, 3] = float("nan")
        return r

    monkeypatch.setattr(torch, "mm", mm_that_flips_later)
    res = _run(_ctx(tmp_path, "--stress-seconds", "0.3"), "stress")
    assert res.status == "fail" and "results differ from the verified first product" in res.reason


# --------------------------------------------------------------------------
# item 6: memory


def test_memory_patterns_find_a_bad_word(tmp_path):
    import torch

    res = _run(_ctx(tmp_path), "memory")
    assert res.status == "pass" and res.figures["per_gpu"][0]["bytes_tested"] == memory.CPU_BYTES
    chunks = memory.allocate(torch, "cpu", memory.CPU_BYTES)

    def stuck_bit(i, chunk):  # bit 20 of word 1000 stuck at 1
        chunk[1000] = chunk[1000] | (1 << 20)

    errors = memory.scan(torch, chunks, stuck_bit)
    # ones and 0x55555555 have bit 20 set already: a stuck-at-1 bit shows under the others
    assert [e[0] for e in errors] == ["zeros", "0xAAAAAAAA", "address"]
    assert all(e[2] == 1 and e[3] == 4000 for e in errors)


# --------------------------------------------------------------------------
# item 8: topology, busbw, the collective for real


def test_topology_of_a_real_hgx_b200():
    links = topology.parse_topo(open(os.path.join(FIX, "topo_b200_nv18.txt")).read())
    assert len(links) == 56 and set(links.values()) == {"NV18"}
    assert topology.link_class(links[(0, 7)]) == "nvlink"
    assert topology.link_class("SYS") == "pcie" and topology.link_class("X") is None


def test_busbw_is_nccl_tests_formula():
    # nccl-tests doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n
    algbw, busbw = topology.busbw_allreduce(16 << 30, 0.065, 8)
    assert algbw == pytest.approx((16 << 30) / 0.065 / 1e9)
    assert busbw == pytest.approx(algbw * 14 / 8)


def test_nccl_orchestration_with_gloo_and_two_processes(tmp_path):
    res = _run(_ctx(tmp_path), "nccl")
    assert res.status == "pass", res.reason
    f = res.figures
    assert f["backend"] == "gloo" and f["world"] == 2 and f["wrong_elements"] == 0
    assert f["busbw_gbs"] == pytest.approx(f["algbw_gbs"])  # 2(n-1)/n = 1 for two ranks


def test_p2p_skips_with_the_reason_without_gpus(tmp_path):
    res = _run(_ctx(tmp_path), "p2p")
    assert res.status == "skip" and res.reason == "no GPUs: nothing to copy between"
