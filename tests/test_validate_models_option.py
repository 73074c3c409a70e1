"""`--models classic` names the 31-model list by what it is; `seed`, its old spelling, still works;
a list costs no torch import when no selected check benches."""
import json
import os
import subprocess
import sys

from tests.conftest import REPO
from validate import cli


def _models(*argv):
    return cli.resolve_models(cli.parse_args(["--out", "/tmp/unused", *argv]))


def test_classic_is_the_default_list_and_seed_is_its_alias():
    classic = _models("--models", "classic")
    assert len(classic) == 31 and classic[0] == "alexnet" and "wide_resnet50_2" in classic
    assert _models("--models", "seed") == classic
    assert _models() == classic


def test_quick_and_explicit_lists():
    assert _models("--quick") == ["resnet50", "resnet18", "mobilenet_v3_small"]
    assert _models("--models", "resnet18,vgg11") == ["resnet18", "vgg11"]


def test_a_model_list_costs_no_torch_when_no_check_benches(tmp_path):
    """`--checks xid --models resnet50` (a prolog's check, with the inventory's usual model
    list): the names were looked up in torchvision while the options were read, whatever the
    checks, so torch was imported (docs/explanation/figures.md) and a broken one ended the run.
    The torch and torchvision here are broken on purpose: real packages on PYTHONPATH ahead of
    the installed ones whose import kills the interpreter (nothing validate/ calls is
    replaced). The run never imports them, passes, and records the list as given."""
    broken = tmp_path / "broken"
    for name in ("torch", "torchvision"):
        (broken / name).mkdir(parents=True)
        (broken / name / "__init__.py").write_text("import os\nos.abort()  # a broken install\n")
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("[    1.000000] Linux version 6.1.0 (gcc)\n")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=f"{broken}{os.pathsep}{REPO}")
    proc = subprocess.run([sys.executable, "-m", "validate", "--out", str(out), "--checks", "xid",
                           "--kernel-log", str(kernel_log), "--models", "resnet50"],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    doc = json.loads((out / "results.json").read_text())
    assert doc["options"]["model_list"] == ["resnet50"] and doc["ok"] is True
