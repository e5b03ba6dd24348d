"""The real convolution layers of the study's three networks, as DeepBench keeps its lists: the
distinct shapes (per sample) with how often each occurs in one forward pass.

- AlexNet as in BVLC Caffe (227x227 input; conv2, conv4 and conv5 in 2 groups).
- GoogLeNet as in BVLC Caffe (224x224), the two auxiliary classifiers' 1x1 convolutions included
  (training runs them).
- ResNet-50 as in torchvision (224x224; stride 2 in the 3x3 convolution of a stage's first block,
  "v1.5"), paper stage names conv2..conv5.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConvLayer:
    name: str       # "<net>/<layer>"
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: int = 1
    pad: int = 0
    groups: int = 1
    count: int = 1  # occurrences in the network

    @property
    def net(self) -> str:
        return self.name.split("/", 1)[0]


# name, C, H(=W), K, kernel, stride, pad, groups, count
_Row = tuple[str, int, int, int, int, int, int, int, int]

_ALEXNET = [
    ("conv1", 3, 227, 96, 11, 4, 0, 1, 1),
    ("conv2", 96, 27, 256, 5, 1, 2, 2, 1),
    ("conv3", 256, 13, 384, 3, 1, 1, 1, 1),
    ("conv4", 384, 13, 384, 3, 1, 1, 2, 1),
    ("conv5", 384, 13, 256, 3, 1, 1, 2, 1),
]

_RESNET50 = [
    ("conv1", 3, 224, 64, 7, 2, 3, 1, 1),
    # conv2_x: 3 bottlenecks at 56x56, width 64, out 256
    ("conv2_1x1_in", 64, 56, 64, 1, 1, 0, 1, 1),        # block 1 conv1
    ("conv2_1x1_reduce", 256, 56, 64, 1, 1, 0, 1, 2),   # blocks 2-3 conv1
    ("conv2_3x3", 64, 56, 64, 3, 1, 1, 1, 3),
    ("conv2_1x1_expand", 64, 56, 256, 1, 1, 0, 1, 4),   # conv3 x3 + the projection (same shape)
    # conv3_x: 4 bottlenecks, 56 -> 28, width 128, out 512
    ("conv3_1x1_in", 256, 56, 128, 1, 1, 0, 1, 1),
    ("conv3_3x3_s2", 128, 56, 128, 3, 2, 1, 1, 1),
    ("conv3_proj", 256, 56, 512, 1, 2, 0, 1, 1),
    ("conv3_1x1_reduce", 512, 28, 128, 1, 1, 0, 1, 3),
    ("conv3_3x3", 128, 28, 128, 3, 1, 1, 1, 3),
    ("conv3_1x1_expand", 128, 28, 512, 1, 1, 0, 1, 4),
    # conv4_x: 6 bottlenecks, 28 -> 14, width 256, out 1024
    ("conv4_1x1_in", 512, 28, 256, 1, 1, 0, 1, 1),
    ("conv4_3x3_s2", 256, 28, 256, 3, 2, 1, 1, 1),
    ("conv4_proj", 512, 28, 1024, 1, 2, 0, 1, 1),
    ("conv4_1x1_reduce", 1024, 14, 256, 1, 1, 0, 1, 5),
    ("conv4_3x3", 256, 14, 256, 3, 1, 1, 1, 5),
    ("conv4_1x1_expand", 256, 14, 1024, 1, 1, 0, 1, 6),
    # conv5_x: 3 bottlenecks, 14 -> 7, width 512, out 2048
    ("conv5_1x1_in", 1024, 14, 512, 1, 1, 0, 1, 1),
    ("conv5_3x3_s2", 512, 14, 512, 3, 2, 1, 1, 1),
    ("conv5_proj", 1024, 14, 2048, 1, 2, 0, 1, 1),
    ("conv5_1x1_reduce", 2048, 7, 512, 1, 1, 0, 1, 2),
    ("conv5_3x3", 512, 7, 512, 3, 1, 1, 1, 2),
    ("conv5_1x1_expand", 512, 7, 2048, 1, 1, 0, 1, 3),
]

# GoogLeNet's stem, then its inception modules as (name, C_in, H, #1x1, #3x3 reduce, #3x3,
# #5x5 reduce, #5x5, pool proj), from BVLC's train_val.prototxt.
_GOOGLENET_STEM = [
    ("conv1/7x7_s2", 3, 224, 64, 7, 2, 3, 1, 1),
    ("conv2/3x3_reduce", 64, 56, 64, 1, 1, 0, 1, 1),
    ("conv2/3x3", 64, 56, 192, 3, 1, 1, 1, 1),
]
_INCEPTION = [
    ("inception_3a", 192, 28, 64, 96, 128, 16, 32, 32),
    ("inception_3b", 256, 28, 128, 128, 192, 32, 96, 64),
    ("inception_4a", 480, 14, 192, 96, 208, 16, 48, 64),
    ("inception_4b", 512, 14, 160, 112, 224, 24, 64, 64),
    ("inception_4c", 512, 14, 128, 128, 256, 24, 64, 64),
    ("inception_4d", 512, 14, 112, 144, 288, 32, 64, 64),
    ("inception_4e", 528, 14, 256, 160, 320, 32, 128, 128),
    ("inception_5a", 832, 7, 256, 160, 320, 32, 128, 128),
    ("inception_5b", 832, 7, 384, 192, 384, 48, 128, 128),
]
_GOOGLENET_AUX = [  # after a 5x5/3 average pool: 14x14 -> 4x4
    ("loss1/conv", 512, 4, 128, 1, 1, 0, 1, 1),
    ("loss2/conv", 528, 4, 128, 1, 1, 0, 1, 1),
]


def _googlenet_rows() -> list[_Row]:
    rows = list(_GOOGLENET_STEM)
    for name, c, h, n1, r3, n3, r5, n5, pp in _INCEPTION:
        rows += [(f"{name}/1x1", c, h, n1, 1, 1, 0, 1, 1), (f"{name}/3x3_reduce", c, h, r3, 1, 1, 0, 1, 1),
                 (f"{name}/3x3", r3, h, n3, 3, 1, 1, 1, 1), (f"{name}/5x5_reduce", c, h, r5, 1, 1, 0, 1, 1),
                 (f"{name}/5x5", r5, h, n5, 5, 1, 2, 1, 1), (f"{name}/pool_proj", c, h, pp, 1, 1, 0, 1, 1)]
    return rows + _GOOGLENET_AUX


def _distinct(net: str, rows: list[_Row]) -> list[ConvLayer]:
    """Merge rows of the same shape: the first name stays, the counts add up."""
    out: dict[tuple[int, ...], ConvLayer] = {}
    for name, c, h, k, kern, stride, pad, groups, count in rows:
        key = (c, h, k, kern, stride, pad, groups)
        if key in out:
            old = out[key]
            out[key] = ConvLayer(old.name, c, h, h, k, kern, kern, stride, pad, groups, old.count + count)
        else:
            out[key] = ConvLayer(f"{net}/{name}", c, h, h, k, kern, kern, stride, pad, groups, count)
    return list(out.values())


NETS: dict[str, list[ConvLayer]] = {
    "alexnet": _distinct("alexnet", _ALEXNET),
    "googlenet": _distinct("googlenet", _googlenet_rows()),
    "resnet50": _distinct("resnet50", _RESNET50),
}
LAYERS: dict[str, ConvLayer] = {layer.name: layer for layers in NETS.values() for layer in layers}


def find(name: str) -> ConvLayer:
    """A layer by its full name ('resnet50/conv2_3x3'); KeyError lists the nets."""
    return LAYERS[name]


def total_count(net: str) -> int:
    """Convolutions in one forward pass of the network."""
    return sum(layer.count for layer in NETS[net])
