"""Models used by the checks: torchvision classifiers by name (random weights,
input size from the weights' metadata) and a ResNet20 for CIFAR-10 (He et al.
2016, section 4.2: 3 stages of 3 basic blocks, 16/32/64 channels; projection
shortcuts where the shape changes).  Imported only after torch is known to be
importable."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def classifier_names(tv):
    """Every torchvision image classifier, sorted."""
    try:
        return sorted(tv.models.list_models(module=tv.models))
    except AttributeError:  # torchvision < 0.14
        return sorted(n for n in dir(tv.models) if n[0].islower() and not n.startswith("_")
                      and callable(getattr(tv.models, n)))


def input_size(tv, name):
    """Square input side for a model, from its default weights' transforms
    (inception 299, efficientnet_b7 600, ...); 224 when unknown."""
    try:
        weights = tv.models.get_model_weights(name)
        w = weights.DEFAULT if hasattr(weights, "DEFAULT") else list(weights)[0]
        size = w.transforms().crop_size
        return int(size[0] if isinstance(size, (list, tuple)) else size)
    except Exception:
        return 299 if name.startswith("inception") else 224


def build_classifier(tv, name, size):
    """Randomly initialised classifier; ViTs get their image size to match."""
    kwargs = {}
    if name.startswith("vit_"):
        kwargs["image_size"] = size
    if name in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = True  # silence the init warning, same behaviour
    try:
        return tv.models.get_model(name, weights=None, **kwargs)
    except AttributeError:  # torchvision < 0.14
        return getattr(tv.models, name)(pretrained=False, **kwargs)


class _Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super(_Block, self).__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
        self.relu1 = nn.ReLU(inplace=True)
        self.relu2 = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + (x if self.shortcut is None else self.shortcut(x))
        return self.relu2(out)


class ResNet20(nn.Module):
    """ResNet20 for 3x32x32 CIFAR-10 images (0.27 M parameters)."""

    def __init__(self, num_classes=10, blocks=(3, 3, 3)):
        super(ResNet20, self).__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        layers = []
        cin = 16
        for stage, (cout, n) in enumerate(zip((16, 32, 64), blocks)):
            for i in range(n):
                stride = 2 if (stage > 0 and i == 0) else 1
                layers.append(_Block(cin, cout, stride))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layers(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def param_count(model):
    return sum(p.numel() for p in model.parameters())


def release(device):
    """Free what a finished model left behind (between isolated model runs)."""
    import gc

    gc.collect()
    if str(device).startswith("cuda"):
        try:
            torch.cuda.empty_cache()
        except Exception:
            pass
