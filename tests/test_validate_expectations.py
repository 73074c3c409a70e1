"""The table of expectations (validate/expectations.py) and ``python3 -m validate --judge``.

Every figure below is a public measurement of a healthy part, or a published
sick case, as cited in shared/research/sku-expectations.md; the source is
named next to each."""

import json
import os
import subprocess
import sys

import pytest

from validate import expectations as ex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "validate")


def _judge(tmp_path, doc, profile=None):
    path = tmp_path / "figures.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    extra = ["--profile", json.dumps(profile)] if profile is not None else []
    p = subprocess.run([sys.executable, "-m", "validate", "--judge", str(path)] + extra, cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    return p.returncode, (json.loads(p.stdout) if p.stdout else None), p.stderr


def _verdicts(out):
    return dict(((f["gpu"], f["figure"]), f["verdict"]) for f in out["figures"])


def test_the_recorded_h100_is_identified_by_its_pci_ids():
    # nvidia-smi --query-gpu of a real H100 (h100_590_query_gpu.csv): pci.device_id 0x233010DE,
    # pci.sub_device_id 0x16C110DE
    header, row = open(os.path.join(FIX, "h100_590_query_gpu.csv")).read().splitlines()[:2]
    fields = dict(zip([h.strip() for h in header.split(",")], [c.strip() for c in row.split(",")]))
    assert ex.identify(fields["name"], fields["pci.device_id"], fields["pci.sub_device_id"]) == \
        ("H100 SXM", "pci id 2330")
    # ids decide where the name would not: "NVIDIA H200 NVL" is 233B, "NVIDIA GB200" 2941 (driver README)
    assert ex.identify("some renamed board", "0x233B10DE", None)[0] == "H200 NVL"
    assert ex.identify(None, "0x294110DE", "0x20CA10DE")[0] == "GB200"
    # no ids: the name; an unknown id of another vendor: the name too
    assert ex.identify("NVIDIA A100-SXM4-80GB") == ("A100 SXM 80GB", "name")
    assert ex.identify("NVIDIA L40S", "0x12341002")[0] == "L40S"
    assert ex.identify("Tesla P100-SXM2-16GB") == (None, None)


# Healthy parts (research notes 2.4): they pass every cell they have.
HEALTHY = [
    # H100 SXM: Fryer ~730 bf16 / ~373 TF32; Napkin 52 fp32, 3004 copy, 56/55 pinned
    ({"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x233010DE", "pci_sub_device_id": "0x16C110DE",
      "bf16_tflops": 730, "tf32_tflops": 373, "fp32_tflops": 52, "d2d_gbs": 3004, "h2d_gbs": 56,
      "d2h_gbs": 55}, 380.0),  # P2P: p2pBandwidthLatencyTest 380 uni (NVIDIA/nccl#1264)
    # H200: AzBench 4010 copy, CE 55.43/55.06, MAMF net 396.40 P2P uni
    ({"name": "NVIDIA H200", "pci_device_id": "0x233510DE", "bf16_tflops": 790.29, "d2d_gbs": 4010,
      "h2d_gbs": 55.43, "d2h_gbs": 55.06}, 396.40),
    # A100-SXM4-80GB: Fryer ~270 / ~130, Napkin 19 fp32, AzBench 1610 copy, Napkin 26/26, 274 P2P
    ({"name": "NVIDIA A100-SXM4-80GB", "pci_device_id": "0x20B210DE", "bf16_tflops": 270,
      "tf32_tflops": 130, "fp32_tflops": 19, "d2d_gbs": 1610, "h2d_gbs": 26, "d2h_gbs": 26}, 274.0),
    # A100 80GB PCIe (Napkin): 236 / 113 / 19, copy 1660, pinned 25/26
    ({"name": "NVIDIA A100 80GB PCIe", "pci_device_id": "0x20B510DE", "bf16_tflops": 236,
      "tf32_tflops": 113, "fp32_tflops": 19, "d2d_gbs": 1660, "h2d_gbs": 25, "d2h_gbs": 26}, None),
    # GH200 (Fryer ~705 / ~363), GB200 (Fryer ~1550 / ~790), B200 (MAMF 1745), L4 (T #120)
    ({"name": "NVIDIA GH200 480GB", "pci_device_id": "0x234210DE", "bf16_tflops": 705, "tf32_tflops": 363},
     None),
    ({"name": "NVIDIA GB200", "pci_device_id": "0x294110DE", "bf16_tflops": 1550, "tf32_tflops": 790}, None),
    ({"name": "NVIDIA B200", "pci_device_id": "0x290110DE", "bf16_tflops": 1745}, None),
    ({"name": "NVIDIA L4", "pci_device_id": "0x27B810DE", "bf16_tflops": 59.40, "tf32_tflops": 25.69,
      "fp32_tflops": 10.66}, None),
]


@pytest.mark.parametrize("gpu,p2p", HEALTHY, ids=[g["name"] for g, _ in HEALTHY])
def test_healthy_public_measurements_pass_through_the_cli(tmp_path, gpu, p2p):
    doc = {"gpus": [gpu] * (2 if p2p else 1)}
    if p2p:
        doc["p2p_gbs"] = {"0-1": p2p, "1-0": p2p}
    rc, out, err = _judge(tmp_path, doc)
    assert (rc, err) == (0, ""), out
    assert out["verdict"] == "pass"
    assert all(f["source"] and f["floor"] <= f["value"] for f in out["figures"])


def test_nccl_allreduce_healthy_passes_and_well_under_the_floor_fails(tmp_path):
    h100 = {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x233010DE"}
    # healthy: 479.72 GB/s at 8 GiB (VP) is below the 16 GiB the floor is for: no reference;
    # 480 at 16 GiB passes (AzNHC's own size; maintainers ~480 NVLS, nccl-tests#212)
    at_8 = {"gpus": [h100] * 8, "nccl_allreduce": {"busbw_gbs": 479.72, "bytes": 8 << 30, "gpus": 8}}
    rc, out, _ = _judge(tmp_path, at_8)
    assert rc == 3 and out["figures"][0]["verdict"] == "no reference"
    at_16 = dict(at_8, nccl_allreduce={"busbw_gbs": 480.0, "bytes": 16 << 30, "gpus": 8})
    assert _judge(tmp_path, at_16)[:2][0] == 0
    # ring-only H100 busbw ~370 (nccl-tests#212) is well under Azure's 460: fail
    sick = dict(at_8, nccl_allreduce={"busbw_gbs": 370.0, "bytes": 16 << 30, "gpus": 8})
    rc, out, _ = _judge(tmp_path, sick)
    assert rc == 1 and out["verdict"] == "fail"
    assert out["figures"][0]["floor"] == 460.0 and "nd96isr_h100_v5" in out["figures"][0]["source"]
    # A100 SXM 80GB: AzBench 231.58 passes Azure's 228; OCI's ring floor 185 would not catch 190
    a100 = {"name": "NVIDIA A100-SXM4-80GB", "pci_device_id": "0x20B210DE"}
    ok = {"gpus": [a100] * 8, "nccl_allreduce": {"busbw_gbs": 231.58, "bytes": 8 << 30, "gpus": 8}}
    assert _judge(tmp_path, ok)[0] == 0
    ok["nccl_allreduce"]["busbw_gbs"] = 190.0
    assert _judge(tmp_path, ok)[0] == 1


def test_published_sick_cases_fail(tmp_path):
    gpus = [
        # a GPU at a third of its GEMM speed (DCGM#122): an H100 at 730 / 3
        {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x233010DE", "bf16_tflops": 730 / 3.0},
        # Azure's A100 D2H of 6.27 GB/s (AzBench ND_A100_v4, SM copy)
        {"name": "NVIDIA A100-SXM4-80GB", "pci_device_id": "0x20B210DE", "h2d_gbs": 26.28, "d2h_gbs": 6.27},
        # power capped far below TDP under stress: an H100 SXM (700 W) drawing 300 W
        {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x233010DE", "power_w": 300.0},
    ]
    rc, out, _ = _judge(tmp_path, {"gpus": gpus})
    assert rc == 1 and out["verdict"] == "fail"
    assert _verdicts(out) == {(0, "bf16_tflops"): "fail", (1, "h2d_gbs"): "pass", (1, "d2h_gbs"): "fail",
                              (2, "power_w"): "fail"}
    power = [f for f in out["figures"] if f["figure"] == "power_w"][0]
    assert power["floor"] == 525.0 and power["source"] == "DCGM L139 targeted_power"


def test_an_unknown_model_has_no_reference_and_absent_figures_are_not_judged(tmp_path):
    # Tesla P100-SXM2: 9.50 TFLOPS fp32 (torch-performance-test-data issue #180), not in the table
    rc, out, _ = _judge(tmp_path, {"gpus": [{"name": "Tesla P100-SXM2-16GB", "fp32_tflops": 9.50}]})
    assert rc == 3 and out["verdict"] == "no reference"
    assert out["figures"][0]["floor"] is None and out["models"][0]["model"] is None
    # an H200 with a figure that has no cell (nobody published H200 TF32): no reference, exit 3
    rc, out, _ = _judge(tmp_path, {"gpus": [{"name": "NVIDIA H200", "tf32_tflops": 400, "bf16_tflops": 700}]})
    assert rc == 3 and _verdicts(out) == {(0, "tf32_tflops"): "no reference", (0, "bf16_tflops"): "pass"}
    # a mixed node has no P2P floor
    rc, out, _ = _judge(tmp_path, {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}, {"name": "NVIDIA A100-SXM4-80GB"}],
                                   "p2p_gbs": {"0-1": 100}})
    assert rc == 3


def _recorded_h100():
    """The real H100's row of nvidia-smi --query-gpu (h100_590_query_gpu.csv: pci.device_id
    0x233010DE, sub 0x16C110DE, bus 00000000:00:09.0, pcie.link.gen.max 5, width.max 16) in
    --judge's keys, with Fryer's ~730 bf16 TFLOPS (research notes 2.4)."""
    header, row = open(os.path.join(FIX, "h100_590_query_gpu.csv")).read().splitlines()[:2]
    f = dict(zip([h.strip() for h in header.split(",")], [c.strip() for c in row.split(",")]))
    return {"name": f["name"], "pci_device_id": f["pci.device_id"], "pci_sub_device_id": f["pci.sub_device_id"],
            "pci_bus_id": f["pci.bus_id"], "pcie_link_gen_max": int(f["pcie.link.gen.max"]),
            "pcie_link_width_max": int(f["pcie.link.width.max"]), "bf16_tflops": 730}


H100_8 = {"gpus": {"count": 8, "model": "NVIDIA H100 80GB HBM3"}, "pcie": {"gen": 5, "width": 16}}


@pytest.mark.parametrize("count, change, prof, rc, gaps", [
    # as the profile says: the node passes, its figures too
    (8, {}, H100_8, 0, []),
    # a table key names the model as well as nvidia-smi's name (found by PCI id)
    (8, {}, {"gpus": {"count": 8, "model": "H100 SXM"}}, 0, []),
    # a GPU fell off the bus: fewer than the profile says, every figure healthy
    (7, {}, H100_8, 1, [("expected 8 x NVIDIA H100 80GB HBM3, found 7", "reboot the node")]),
    (9, {}, H100_8, 1, [("expected 8 x NVIDIA H100 80GB HBM3, found 9", None)]),
    # another model than the profile's: the wrong machine, no action on it
    (8, {}, {"gpus": {"count": 8, "model": "NVIDIA B200"}}, 1,
     [("expected 8 x NVIDIA B200, found 8 x NVIDIA H100 80GB HBM3", None)]),
    # one GPU whose slot trains at most Gen4 x8 on a Gen5 x16 profile
    (8, {3: {"pcie_link_gen_max": 4, "pcie_link_width_max": 8}}, H100_8, 1,
     [("GPU 00000000:00:09.0: PCIe link at most gen 4 x8, expected gen 5 x16", "drain and replace (RMA)")]),
    # no PCIe link recorded against a profile that asks for one: not judged, said (exit 3)
    (8, {i: {"pcie_link_gen_max": None} for i in range(8)}, H100_8, 3, []),
])
def test_judge_holds_the_recorded_gpus_against_the_profile(tmp_path, count, change, prof, rc, gaps):
    """`--judge FILE --profile P` judges the node as a live run's node check does: GPU count,
    model and PCIe link, each gap with its action (before: only the figures were judged, and a
    7-GPU node passed an 8 x H100 profile)."""
    gpus = [dict(_recorded_h100(), **change.get(i, {})) for i in range(count)]
    got_rc, out, err = _judge(tmp_path, {"gpus": gpus}, prof)
    assert (got_rc, err) == (rc, ""), out
    assert [(g["what"], g["action"]) for g in out["node"]["gaps"]] == gaps
    assert out["node"]["found"]["count"] == count
    assert all(f["verdict"] == "pass" for f in out["figures"])  # the figures alone would pass
    assert out["verdict"] == {0: "pass", 1: "fail", 3: "no reference"}[rc]


def test_judge_without_gpus_in_the_profile_or_the_figures_does_not_judge_the_node(tmp_path):
    rc, out, _ = _judge(tmp_path, {"gpus": [_recorded_h100()]}, {"floors": {"bf16_tflops": 600}})
    assert rc == 0 and out["node"] is None
    rc, out, _ = _judge(tmp_path, {"p2p_gbs": {"0-1": 380.0}}, H100_8)
    assert rc == 3 and out["node"]["verdict"] == "no reference"
    assert out["node"]["reason"] == "no gpus recorded: the node is not judged"


@pytest.mark.parametrize("text,why", [
    ("{", "not JSON: Expecting property name enclosed in double quotes: line 1 column 2"),
    ("[]", "the document is not a JSON object"),
    ('{"gpus": [{"name": "NVIDIA H100", "bf16_tflops": "fast"}]}', "gpus[0].bf16_tflops: not a non-negative"),
    ('{"gpus": [{"pci_device_id": "2330"}]}', "gpus[0]: not a PCI id like 0x233010DE"),
    ('{"p2p_gbs": {"0to1": 3}}', "p2p_gbs: '0to1' is not a pair"),
    ('{"gpus": [{"name": "NVIDIA H100", "pcie_link_gen_max": "five"}]}',
     "gpus[0].pcie_link_gen_max: not a non-negative number: 'five'"),
    # json reads Infinity: an infinite figure would pass every floor
    ('{"gpus": [{"name": "NVIDIA H100", "bf16_tflops": Infinity}]}',
     "gpus[0].bf16_tflops: not a non-negative number: inf"),
    ('{"p2p_gbs": {"0-1": NaN}}', "p2p_gbs.0-1: not a non-negative number: nan"),
])
def test_bad_input_is_one_line_naming_the_file_exit_2(tmp_path, text, why):
    rc, out, err = _judge(tmp_path, text)
    assert rc == 2 and out is None
    assert err.startswith("validate: error: %s: %s" % (tmp_path / "figures.json", why)) and err.count("\n") == 1


@pytest.mark.parametrize("value, why", [("Infinity", "not a non-negative number: inf"),
                                        ("4.5", "not a whole number: 4.5")])
def test_a_pcie_link_that_is_not_a_whole_number_is_bad_input(tmp_path, value, why):
    """A recorded link of `Infinity` (json reads it) or 4.5 is no link nvidia-smi reports:
    bad input, one line, exit 2 (before: with --profile, Infinity ended in a traceback and
    exit 1, "a figure failed"; 4.5 was judged as gen 4)."""
    text = '{"gpus": [{"name": "NVIDIA H100 80GB HBM3", "pcie_link_gen_max": %s}]}' % value
    rc, out, err = _judge(tmp_path, text, H100_8)
    assert rc == 2 and out is None, err
    assert err.startswith("validate: error: %s: gpus[0].pcie_link_gen_max: %s"
                          % (tmp_path / "figures.json", why)), err
    assert err.count("\n") == 1


def test_a_mig_slice_is_judged_by_its_share():
    # 1g.10gb: 16 of 132 SMs; a healthy H100 slice (Fryer 730 x share) passes, a third of it fails
    share = 16 / 132.0
    assert ex.judge("H100 SXM", "bf16_tflops", 730 * share, share)["verdict"] == "pass"
    assert ex.judge("H100 SXM", "bf16_tflops", 730 * share / 3, share)["verdict"] == "fail"
    assert ex.judge("H100 SXM", "d2d_gbs", 400.0, share)["verdict"] == "no reference"  # copies: no slice figure


def test_every_cell_names_a_rule_and_a_source():
    for model, cells in ex.TABLE.items():
        for figure, cell in cells.items():
            assert cell["floor"] > 0 and cell["rule"] and cell["source"], (model, figure)
    # a model identified but with no public figure (L40, 26B5) is "no reference", not a pass
    assert ex.judge(ex.identify(None, "0x26B510DE")[0], "bf16_tflops", 100.0)["verdict"] == "no reference"


def test_stress_judges_power_drawn_as_dcgm_targeted_power():
    from validate.checks import stress

    # an H100 SXM (DCGM target 700 W, floor 525) capped far below its TDP: 300 W drawn with a
    # 700 W limit fails; the same 300 W under a 300 W enforced limit is not judged (DCGM: then
    # only informational); 690 W passes; a MIG slice has no power figure
    capped = stress.power_verdict("H100 SXM", None, {"power_max_w": 300.0, "power_limit_w": 700.0})
    assert (capped["verdict"], capped["floor"]) == ("fail", 525.0)
    node = [{"label": "GPU 0", "name": "NVIDIA H100 80GB HBM3", "tflops": 700.0, "iterations": 100,
             "mismatches": 0, "samples": [], "power": capped}]
    assert stress.judge(node) == ["GPU 0: drew at most 300 W under load, below 525 "
                                  "(0.75 x DCGM target_power 700 W: DCGM L139 targeted_power)"]
    limited = stress.power_verdict("H100 SXM", None, {"power_max_w": 300.0, "power_limit_w": 300.0})
    assert limited["verdict"] == "no reference" and "power limit 300 W" in limited["why"]
    assert stress.power_verdict("H100 SXM", None, {"power_max_w": 690.0, "power_limit_w": 700.0})["verdict"] == "pass"
    assert stress.power_verdict("H100 SXM", 16 / 132.0, {"power_max_w": 90.0})["verdict"] == "no reference"
