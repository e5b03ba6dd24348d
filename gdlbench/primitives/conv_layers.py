"""The convolution layers of a network, as DeepBench keeps its lists: the distinct shapes (per
sample) with how often each occurs in one forward pass, read from the network itself
(gdlbench/nets, or a user's spec file in the same format), so `gdlbench conv --net` lists any net.

>>> from gdlbench import conv_layers
>>> [(lay.name, lay.shape.groups, lay.count) for lay in conv_layers.of_net("alexnet")][:2]
[('alexnet/conv1', 1, 1), ('alexnet/conv2', 2, 1)]
>>> conv_layers.total_count("resnet50")
53
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..common.errors import UsageError
from ..nets.network import Network, builtin_nets, load_network
from .conv import ConvShape

# the built-in nets whose layers `conv --list` shows by default, and `conv --layer NET/NAME` finds
LISTED = ("alexnet", "googlenet", "resnet50")


@dataclass(frozen=True)
class ConvLayer:
    """One distinct convolution of a network: its geometry per sample (a ConvShape of batch 1)
    and how often it occurs in one forward pass."""

    name: str  # "<net>/<layer>": the first layer of the network with this shape
    shape: ConvShape
    count: int = 1

    @property
    def net(self) -> str:
        return self.name.split("/", 1)[0]


def of_net(net: str | Path | Network) -> list[ConvLayer]:
    """The network's convolutions, the layers of one shape merged (the first name stays, the
    counts add up), in the order they first occur."""
    network = net if isinstance(net, Network) else load_network(net)
    out: dict[ConvShape, ConvLayer] = {}
    for layer in network.layers:
        if layer.type != "conv":
            continue
        shape = ConvShape.from_layer(layer)
        old = out.get(shape)
        out[shape] = (ConvLayer(old.name, shape, old.count + 1) if old
                      else ConvLayer(f"{network.name}/{layer.name}", shape))
    if not out:
        raise UsageError(f"{network.name}: no convolution layers")
    return list(out.values())


def total_count(net: str | Path | Network) -> int:
    """Convolutions in one forward pass of the network."""
    return sum(layer.count for layer in of_net(net))


def find(name: str) -> ConvLayer:
    """A layer by its full name: a built-in net, then the name of any of its conv layers
    ('resnet50/layer1.1.conv2'); the distinct layer of that shape. UsageError when there is none."""
    net, _, layer_name = name.partition("/")
    if net in builtin_nets():
        network = load_network(net)
        layer = next((la for la in network.layers if la.name == layer_name and la.type == "conv"), None)
        if layer is not None:
            shape = ConvShape.from_layer(layer)
            return next(lay for lay in of_net(network) if lay.shape == shape)
    raise UsageError(f"--layer: unknown layer {name!r} (gdlbench conv --list shows them)")
