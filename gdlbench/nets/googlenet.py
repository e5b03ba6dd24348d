"""GoogLeNet as in BVLC Caffe (models/bvlc_googlenet/train_val.prototxt), with and without the
two auxiliary classifiers (loss1 after inception_4a, loss2 after inception_4d, weight 0.3), which
training uses. Every conv has a bias and is followed by a ReLU; pools round up (Caffe)."""

from __future__ import annotations

from typing import Any

# (name, 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj): Szegedy et al. 2014, table 1
_INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128),
}


def _conv_relu(layers: list[dict[str, Any]], name: str, src: str, out: int, kernel: int, stride: int = 1, pad: int = 0) -> str:
    layers.append({"name": name, "type": "conv", "inputs": [src], "out_channels": out, "kernel": kernel,
                   "stride": stride, "pad": pad})
    layers.append({"name": f"{name}/relu", "type": "relu"})
    return f"{name}/relu"


def _inception(layers: list[dict[str, Any]], tag: str, src: str) -> str:
    c1, r3, c3, r5, c5, pp = _INCEPTION[tag]
    p = f"inception_{tag}"
    b1 = _conv_relu(layers, f"{p}/1x1", src, c1, 1)
    _conv_relu(layers, f"{p}/3x3_reduce", src, r3, 1)
    b3 = _conv_relu(layers, f"{p}/3x3", f"{p}/3x3_reduce/relu", c3, 3, pad=1)
    _conv_relu(layers, f"{p}/5x5_reduce", src, r5, 1)
    b5 = _conv_relu(layers, f"{p}/5x5", f"{p}/5x5_reduce/relu", c5, 5, pad=2)
    layers.append({"name": f"{p}/pool", "type": "maxpool", "inputs": [src], "kernel": 3, "stride": 1, "pad": 1,
                   "ceil_mode": True})
    bp = _conv_relu(layers, f"{p}/pool_proj", f"{p}/pool", pp, 1)
    layers.append({"name": f"{p}/output", "type": "concat", "inputs": [b1, b3, b5, bp]})
    return f"{p}/output"


def _aux(layers: list[dict[str, Any]], k: int, src: str) -> None:
    layers.append({"name": f"loss{k}/ave_pool", "type": "avgpool", "inputs": [src], "kernel": 5, "stride": 3,
                   "ceil_mode": True})
    _conv_relu(layers, f"loss{k}/conv", f"loss{k}/ave_pool", 128, 1)
    layers.append({"name": f"loss{k}/fc", "type": "fc", "out_features": 1024})
    layers.append({"name": f"loss{k}/relu_fc", "type": "relu"})
    layers.append({"name": f"loss{k}/drop_fc", "type": "dropout", "ratio": 0.7})
    layers.append({"name": f"loss{k}/classifier", "type": "fc", "out_features": 1000})
    layers.append({"name": f"loss{k}/loss", "type": "softmax_xent", "loss_weight": 0.3})


def spec(aux: bool = False) -> dict[str, Any]:
    layers: list[dict[str, Any]] = []
    x = _conv_relu(layers, "conv1/7x7_s2", "data", 64, 7, stride=2, pad=3)
    layers.append({"name": "pool1/3x3_s2", "type": "maxpool", "inputs": [x], "kernel": 3, "stride": 2, "ceil_mode": True})
    layers.append({"name": "pool1/norm1", "type": "lrn", "size": 5, "alpha": 1e-4, "beta": 0.75})
    x = _conv_relu(layers, "conv2/3x3_reduce", "pool1/norm1", 64, 1)
    x = _conv_relu(layers, "conv2/3x3", x, 192, 3, pad=1)
    layers.append({"name": "conv2/norm2", "type": "lrn", "inputs": [x], "size": 5, "alpha": 1e-4, "beta": 0.75})
    layers.append({"name": "pool2/3x3_s2", "type": "maxpool", "kernel": 3, "stride": 2, "ceil_mode": True})
    x = "pool2/3x3_s2"
    for tag in ("3a", "3b", "pool3", "4a", "4b", "4c", "4d", "4e", "pool4", "5a", "5b"):
        if tag.startswith("pool"):
            layers.append({"name": f"{tag}/3x3_s2", "type": "maxpool", "inputs": [x], "kernel": 3, "stride": 2,
                           "ceil_mode": True})
            x = f"{tag}/3x3_s2"
            continue
        x = _inception(layers, tag, x)
        if aux and tag in ("4a", "4d"):
            _aux(layers, 1 if tag == "4a" else 2, x)
    layers.append({"name": "pool5/7x7_s1", "type": "avgpool", "inputs": [x], "kernel": 7, "stride": 1, "ceil_mode": True})
    layers.append({"name": "pool5/drop_7x7_s1", "type": "dropout", "ratio": 0.4})
    layers.append({"name": "loss3/classifier", "type": "fc", "out_features": 1000})
    layers.append({"name": "loss3/loss3", "type": "softmax_xent"})
    return {
        "name": "googlenet-aux" if aux else "googlenet",
        "description": "GoogLeNet as in BVLC Caffe" + (", with the two auxiliary classifiers (training)" if aux
                                                       else ", without the auxiliary classifiers"),
        "source": "BVLC Caffe models/bvlc_googlenet/train_val.prototxt; Szegedy et al., arXiv 1409.4842",
        "published": {"params": 13378280 if aux else 6998552, "fwd_macs": 1.5e9,
                      "source": "parameters counted from the prototxt; 'around 1.5 billion multiply-adds' "
                                "(Szegedy et al. 2014, section 5; main branch)"},
        "input": [3, 224, 224],
        "layers": layers,
    }


NETS = {"googlenet": lambda: spec(aux=False), "googlenet-aux": lambda: spec(aux=True)}
