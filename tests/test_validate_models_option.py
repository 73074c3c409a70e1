"""`--models classic` names the 31-model list by what it is; `seed`, its old spelling, still works."""
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
