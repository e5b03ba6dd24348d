"""ResNet-50/101/152 in the torchvision layout (He et al., arXiv 1512.03385; torchvision v1.5:
the stride of a bottleneck sits on its 3x3 conv; convs without bias, each followed by BN). In
Caffe's ResNet a BN is BatchNorm + Scale; here it is one bn layer with 2C parameters."""

from __future__ import annotations

from typing import Any

_DEPTHS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
# torchvision's model card: parameters and "GFLOPS" (multiply-adds per 224x224 image)
_PUBLISHED = {50: (25557032, 4.09e9), 101: (44549160, 7.80e9), 152: (60192808, 11.51e9)}


def _conv_bn(layers: list[dict[str, Any]], name: str, src: str, out: int, kernel: int, stride: int = 1, relu: bool = True) -> str:
    layers.append({"name": name, "type": "conv", "inputs": [src], "out_channels": out, "kernel": kernel,
                   "stride": stride, "pad": kernel // 2, "bias": False})
    layers.append({"name": name.replace("conv", "bn"), "type": "bn"})
    if relu:
        layers.append({"name": name.replace("conv", "relu"), "type": "relu"})
        return name.replace("conv", "relu")
    return name.replace("conv", "bn")


def spec(depth: int = 50) -> dict[str, Any]:
    layers: list[dict[str, Any]] = []
    x = _conv_bn(layers, "conv1", "data", 64, 7, stride=2)
    layers.append({"name": "maxpool", "type": "maxpool", "inputs": [x], "kernel": 3, "stride": 2, "pad": 1})
    x = "maxpool"
    for stage, blocks in enumerate(_DEPTHS[depth], start=1):
        width = 64 * 2 ** (stage - 1)
        for b in range(blocks):
            stride = 2 if stage > 1 and b == 0 else 1
            p = f"layer{stage}.{b}"
            y = _conv_bn(layers, f"{p}.conv1", x, width, 1)
            y = _conv_bn(layers, f"{p}.conv2", y, width, 3, stride=stride)
            y = _conv_bn(layers, f"{p}.conv3", y, width * 4, 1, relu=False)
            shortcut = x
            if b == 0:  # the projection shortcut: 1x1 conv + BN (torchvision's downsample)
                shortcut = _conv_bn(layers, f"{p}.downsample.conv", x, width * 4, 1, stride=stride, relu=False)
            layers.append({"name": f"{p}.add", "type": "add", "inputs": [y, shortcut]})
            layers.append({"name": f"{p}.relu", "type": "relu"})
            x = f"{p}.relu"
    layers.append({"name": "avgpool", "type": "global_avgpool", "inputs": [x]})
    layers.append({"name": "fc", "type": "fc", "out_features": 1000})
    layers.append({"name": "loss", "type": "softmax_xent"})
    params, macs = _PUBLISHED[depth]
    return {
        "name": f"resnet{depth}",
        "description": f"ResNet-{depth} (torchvision layout, BN, stride on the 3x3 conv)",
        "source": "He et al., arXiv 1512.03385; torchvision.models.resnet",
        "published": {"params": params, "fwd_macs": macs,
                      "source": f"torchvision model card (ResNet{depth}_Weights.IMAGENET1K_V1): {params:,} params, "
                                f"{macs / 1e9:.2f} GFLOPS (multiply-adds) per 224x224 image"},
        "input": [3, 224, 224],
        "layers": layers,
    }


NETS = {f"resnet{d}": (lambda d=d: spec(d)) for d in _DEPTHS}
