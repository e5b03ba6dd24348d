"""VGG-16 (configuration D of Simonyan and Zisserman, arXiv 1409.1556), as torchvision builds it
without BN: 13 3x3 convs with bias, 5 max pools, three fc layers with dropout."""

from __future__ import annotations

from typing import Any

_CFG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def spec() -> dict[str, Any]:
    layers: list[dict[str, Any]] = []
    block, idx = 1, 1
    for v in _CFG16:
        if v == "M":
            layers.append({"name": f"pool{block}", "type": "maxpool", "kernel": 2, "stride": 2})
            block, idx = block + 1, 1
            continue
        layers.append({"name": f"conv{block}_{idx}", "type": "conv", "out_channels": v, "kernel": 3, "pad": 1})
        layers.append({"name": f"relu{block}_{idx}", "type": "relu"})
        idx += 1
    for i, f in ((6, 4096), (7, 4096)):
        layers += [{"name": f"fc{i}", "type": "fc", "out_features": f}, {"name": f"relu{i}", "type": "relu"},
                   {"name": f"drop{i}", "type": "dropout", "ratio": 0.5}]
    layers += [{"name": "fc8", "type": "fc", "out_features": 1000}, {"name": "loss", "type": "softmax_xent"}]
    return {
        "name": "vgg16",
        "description": "VGG-16 (configuration D, no BN; torchvision layout)",
        "source": "Simonyan and Zisserman, arXiv 1409.1556; torchvision.models.vgg16",
        "published": {"params": 138357544, "fwd_macs": 15.47e9,
                      "source": "torchvision model card (VGG16_Weights.IMAGENET1K_V1): 138,357,544 params, "
                                "15.47 GFLOPS (multiply-adds) per 224x224 image"},
        "input": [3, 224, 224],
        "layers": layers,
    }


NETS = {"vgg16": spec}
