"""Networks as data: load a spec, infer every layer's shapes, parameters and multiply-adds.

A network spec is a plain dict (a JSON file, or a Python module that builds the dict):

    {"name": "mynet", "input": [3, 224, 224],            # per-sample C, H, W of the data
     "description": "...", "source": "...",               # optional, shown by `gdlbench nets`
     "published": {"params": 123, "fwd_macs": 4.1e9, "source": "..."},   # optional, for checks
     "layers": [
        {"name": "conv1", "type": "conv", "out_channels": 64, "kernel": 7, "stride": 2, "pad": 3},
        {"name": "relu1", "type": "relu"},                 # inputs default to the layer before
        {"name": "cat", "type": "concat", "inputs": ["a", "b"]},   # "data" names the input
        ...]}

Keys starting with "_" or "#" are comments, ignored. Layer types and their attributes (defaults in brackets; kernel/stride/pad/dilation take an int
or [h, w]):
  conv            out_channels, kernel, stride [1], pad [0], dilation [1], groups [1], bias [true]
  fc              out_features, bias [true]        (flattens its input, as Caffe's InnerProduct)
  relu, flatten   -
  maxpool/avgpool kernel, stride [kernel], pad [0], ceil_mode [false]  (Caffe pools round up:
                  its nets set ceil_mode true; Caffe's rule drops a last window that starts in the pad)
  global_avgpool  -                                 (C, H, W) -> (C, 1, 1)
  lrn             size [5], alpha [1e-4], beta [0.75], k [1]   (across channels; alpha is divided
                  by size, as in Caffe and PyTorch)
  bn              eps [1e-5], momentum [0.1]        (training mode; scale and shift = 2C parameters;
                  running mean/var are buffers, not parameters, as torchvision counts them)
  concat          -                                 (channel axis; H and W must agree)
  add             -                                 (element-wise; all shapes must agree)
  dropout         ratio [0.5]
  softmax_xent    loss_weight [1]                   (softmax + cross-entropy; output (1, 1, 1))
  params          shapes                            (parameters only: [[d0, d1, ...], ...]; shape-
                  preserving, no multiply-adds; what `gdlbench import-trace` makes of a traced job's
                  gradients: the model prices it, the executor cannot run it)

Transformer layers (gdlbench/nets/transformer.py builds GPT-2, BERT and ViT from them). A sequence
of S tokens of width D is the per-sample shape (D, S, 1): channels are the features, H the
positions; the token input of a language model is [1, S, 1] (one id per position).
  embedding       vocab, hidden, positions, token_types [0]   (1, S, 1) -> (hidden, S, 1): token,
                  learned position (S <= positions) and token-type tables, summed; the data holds
                  no segment ids, so the types model a sentence pair: type 0 for positions
                  p < S // 2, 1 from there on (capped at token_types - 1)
  tokens          class_token [true]                (C, H, W) -> (C, H*W [+1], 1): patches to tokens,
                  a learned class token prepended and a learned position embedding added (ViT)
  layernorm       eps [1e-5]                        over the features at each position: 2D parameters
  attention       heads, bias [true], causal [false], dropout [0]   multi-head self-attention on
                  (D, S, 1): QKV projection [3D, D] (+[3D]), softmax(Q K^T / sqrt(D/heads)) V,
                  output projection [D, D] (+[D]); dropout on the attention probabilities
  linear          out_features, bias [true]         per position: (C, H, W) -> (F, H, W), [F, C] (+[F])
  gelu            approximate [false]               false: x Phi(x) with erf (torch's default; BERT,
                  ViT); true: the tanh approximation (GPT-2's gelu_new)
  tanh            -
  select_token    index [0]                         (C, S, 1) -> (C, 1, 1): one position (the class token)
  lm_head         vocab, tied [true], bias [false]  (D, S, 1) -> (vocab, S, 1): logits; tied: the
                  weight is the first embedding layer's token table (no parameter of its own)

A layer may name the `block` it belongs to (a string, e.g. "h.3"): a transformer block, the unit
that activation checkpointing recomputes and that ZeRO-3/FSDP gather at once (gdlbench.model.memory,
gdlbench.model.phases); it is not an attribute and does not change shapes or counts.

Multiply-adds (`fwd_macs`) count convolutions and fully connected layers only, per sample, the
convention of the published figures (AlexNet 0.72 G, ResNet-50 4.1 G); FLOPs = 2 x MACs. For
transformers also linear, lm_head and attention: S D 3D (QKV) + S^2 D (Q K^T) + S^2 D (AV) + S D^2
(output), the full S x S scores even when causal (the unfused kernels compute them all).

`Network.layer_specs()` is the contract the C++ iteration executor consumes. Keep it stable:
a list, in topological order (the order of the spec), of plain dicts

    {"name": str, "type": str,
     "inputs": [int, ...],          # indices into this list of the producer layers; -1 = the data
     "in_shapes": [[c, h, w], ...], # per-sample, one per input, in the order of "inputs"
     "out_shape": [c, h, w],        # per-sample
     "attrs": {...},                # the type's attributes above, every default filled in;
                                    # kernel/stride/pad/dilation always [h, w] lists
     "param_shapes": [[...], ...],  # conv: [K, C/groups, R, S] then [K] if bias; fc: [F, C*H*W]
                                    # then [F] if bias; bn: [C] (scale), [C] (shift); else []
     "params": int,                 # sum of the products of param_shapes
     "fwd_macs": int}               # forward multiply-adds per sample

Backward runs the list in reverse; `Network.gradient_messages()` gives the gradients in that
order (last layer first) with their sizes in bytes, for the communication model.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..common.errors import UsageError

DATA = "data"  # the name a layer uses for the network's input

# type -> {attribute: default}; None marks a required attribute.
_ATTRS: dict[str, dict[str, Any]] = {
    "conv": {"out_channels": None, "kernel": None, "stride": 1, "pad": 0, "dilation": 1, "groups": 1,
             "bias": True},
    "fc": {"out_features": None, "bias": True},
    "relu": {},
    "flatten": {},
    "maxpool": {"kernel": None, "stride": None, "pad": 0, "ceil_mode": False},
    "avgpool": {"kernel": None, "stride": None, "pad": 0, "ceil_mode": False},
    "global_avgpool": {},
    "lrn": {"size": 5, "alpha": 1e-4, "beta": 0.75, "k": 1.0},
    "bn": {"eps": 1e-5, "momentum": 0.1},
    "concat": {},
    "add": {},
    "dropout": {"ratio": 0.5},
    "softmax_xent": {"loss_weight": 1.0},
    "params": {"shapes": None},
}
LAYER_TYPES = tuple(_ATTRS)
_MULTI_INPUT = ("concat", "add")
_PAIR_ATTRS = ("kernel", "stride", "pad", "dilation")
# transformers (module docstring; _normalise_transformer, _infer_transformer)
_TRANSFORMER_ATTRS: dict[str, dict[str, Any]] = {
    "embedding": {"vocab": None, "hidden": None, "positions": None, "token_types": 0},
    "tokens": {"class_token": True},
    "layernorm": {"eps": 1e-5},
    "attention": {"heads": None, "bias": True, "causal": False, "dropout": 0.0},
    "linear": {"out_features": None, "bias": True},
    "gelu": {"approximate": False},
    "tanh": {},
    "select_token": {"index": 0},
    "lm_head": {"vocab": None, "tied": True, "bias": False},
}
_ATTRS.update(_TRANSFORMER_ATTRS)
LAYER_TYPES = tuple(_ATTRS)


@dataclass(frozen=True)
class Layer:
    """One layer with its inferred shapes (per sample), parameters and forward multiply-adds."""

    name: str
    type: str
    inputs: tuple[int, ...]
    in_shapes: tuple[tuple[int, int, int], ...]
    out_shape: tuple[int, int, int]
    attrs: dict[str, Any] = field(compare=False)
    param_shapes: tuple[tuple[int, ...], ...]
    fwd_macs: int
    block: str = field(default="", compare=False)  # the spec's "block" (module docstring); "" none

    @property
    def params(self) -> int:
        return sum(math.prod(s) for s in self.param_shapes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "type": self.type, "inputs": list(self.inputs),
            "in_shapes": [list(s) for s in self.in_shapes], "out_shape": list(self.out_shape),
            "attrs": {k: list(v) if isinstance(v, tuple) else v for k, v in self.attrs.items()},
            "param_shapes": [list(s) for s in self.param_shapes], "params": self.params,
            "fwd_macs": self.fwd_macs,
        }


@dataclass(frozen=True)
class GradientMessage:
    """The gradient of one layer's parameters, as the communication model sends it."""

    layer: str
    index: int  # the layer's index in layer_specs()
    params: int
    bytes: int


class Network:
    """A loaded, shape-checked network. Build with `load_network(name_or_path)`."""

    def __init__(self, spec: dict[str, Any], origin: str = "<dict>") -> None:
        if isinstance(spec, dict) and "transformer" in spec:  # a user's transformer by its shape
            from .transformer import expand

            spec = expand(spec, origin)
        self.origin = origin
        self.spec = spec
        self.name, self.input_shape, self.layers = _build(spec, origin)
        self.description: str = str(spec.get("description", ""))
        self.source: str = str(spec.get("source", ""))
        self.published: dict[str, Any] = dict(spec.get("published", {}))

    # -- totals ---------------------------------------------------------------------------
    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def fwd_macs(self) -> int:
        """Forward multiply-adds per sample (conv and fc)."""
        return sum(layer.fwd_macs for layer in self.layers)

    def param_bytes(self, dtype_bytes: int = 4) -> int:
        return self.params * dtype_bytes

    def __len__(self) -> int:
        return len(self.layers)

    def __repr__(self) -> str:
        return (f"Network({self.name!r}, {len(self.layers)} layers, {self.params:,} params, "
                f"{self.fwd_macs / 1e9:.3f} GMACs/sample)")

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    # -- the executor's contract (module docstring) ---------------------------------------
    def layer_specs(self) -> list[dict[str, Any]]:
        return [layer.to_dict() for layer in self.layers]

    def gradient_messages(self, dtype_bytes: int = 4) -> list[GradientMessage]:
        """Gradients of the layers with parameters, in backward order (last layer first)."""
        return [GradientMessage(layer.name, i, layer.params, layer.params * dtype_bytes)
                for i, layer in reversed(list(enumerate(self.layers))) if layer.params]

    def summary(self) -> dict[str, Any]:
        return {"net": self.name, "layers": len(self.layers), "params": self.params,
                "size_mb": self.param_bytes() / 1e6, "fwd_gmacs": self.fwd_macs / 1e9,
                "fwd_gflops": 2 * self.fwd_macs / 1e9, "input": list(self.input_shape),
                "description": self.description, "origin": self.origin}


# ---------------------------------------------------------------------------------------------
# Shape inference


def _pair(value: Any, what: str) -> tuple[int, int]:
    if isinstance(value, bool):
        raise UsageError(f"{what}: expected an int or [h, w], got {value!r}")
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return int(value[0]), int(value[1])
    raise UsageError(f"{what}: expected an int or [h, w], got {value!r}")


def _positive_int(value: Any, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{what}: expected an integer >= {minimum}, got {value!r}")
    return value


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{what}: expected a number, got {value!r}")
    return float(value)


def _pool_out(size: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    if ceil_mode:
        # Caffe's PoolingLayer: round up, then drop a last window that would start in the pad.
        out = -(-(size + 2 * p - k) // s) + 1
        if p > 0 and (out - 1) * s >= size + p:
            out -= 1
        return out
    return (size + 2 * p - k) // s + 1


def _normalise_attrs(where: str, ltype: str, raw: dict[str, Any]) -> dict[str, Any]:
    allowed = _ATTRS[ltype]
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise UsageError(f"{where}: unknown attribute(s) {', '.join(unknown)} for type {ltype!r} "
                         f"(allowed: {', '.join(allowed) or 'none'})")
    attrs: dict[str, Any] = {}
    for key, default in allowed.items():
        value = raw.get(key, default)
        if value is None and not (key == "stride" and ltype in ("maxpool", "avgpool")):
            raise UsageError(f"{where}: type {ltype!r} needs attribute {key!r}")
        attrs[key] = value
    if ltype in ("maxpool", "avgpool") and attrs["stride"] is None:
        attrs["stride"] = attrs["kernel"]
    for key in _PAIR_ATTRS:
        if key in attrs:
            h, w = _pair(attrs[key], f"{where}: {key}")
            if h < (0 if key == "pad" else 1) or w < (0 if key == "pad" else 1):
                raise UsageError(f"{where}: {key} must be {'>= 0' if key == 'pad' else '>= 1'}, got {attrs[key]!r}")
            attrs[key] = [h, w]
    for key in ("out_channels", "out_features", "groups", "size"):
        if key in attrs:
            attrs[key] = _positive_int(attrs[key], f"{where}: {key}")
    for key in ("alpha", "beta", "k", "eps", "momentum", "loss_weight", "ratio"):
        if key in attrs:
            attrs[key] = _number(attrs[key], f"{where}: {key}")
    if "ratio" in attrs and not 0 <= attrs["ratio"] < 1:
        raise UsageError(f"{where}: ratio must be in [0, 1), got {attrs['ratio']}")
    if ltype == "params":
        shapes = attrs["shapes"]
        if not isinstance(shapes, list) or not all(
                isinstance(sh, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in sh)
                for sh in shapes):
            raise UsageError(f"{where}: shapes must be a list of parameter shapes (lists of positive integers), "
                             f"got {shapes!r}")
    for key in ("bias", "ceil_mode"):
        if key in attrs and not isinstance(attrs[key], bool):
            raise UsageError(f"{where}: {key} must be true or false, got {attrs[key]!r}")
    if ltype in _TRANSFORMER_ATTRS:
        _normalise_transformer(where, attrs)
    return attrs


def _infer(where: str, ltype: str, attrs: dict[str, Any], shapes: list[tuple[int, int, int]]
           ) -> tuple[tuple[int, int, int], list[tuple[int, ...]], int]:
    """(out_shape, param_shapes, fwd_macs) of one layer from its input shapes."""
    if ltype in _MULTI_INPUT:
        if len(shapes) < 2:
            raise UsageError(f"{where}: {ltype} needs at least two inputs, got {len(shapes)}")
    elif len(shapes) != 1:
        raise UsageError(f"{where}: {ltype} takes one input, got {len(shapes)}")
    c, h, w = shapes[0]
    if ltype in _TRANSFORMER:
        return _infer_transformer(where, ltype, attrs, (c, h, w))
    if ltype == "conv":
        k, g = attrs["out_channels"], attrs["groups"]
        (r, s), (sh, sw), (ph, pw), (dh, dw) = attrs["kernel"], attrs["stride"], attrs["pad"], attrs["dilation"]
        if c % g or k % g:
            raise UsageError(f"{where}: groups={g} must divide input channels {c} and out_channels {k}")
        p = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
        q = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
        if p < 1 or q < 1:
            raise UsageError(f"{where}: shape mismatch: kernel {r}x{s} does not fit input {c}x{h}x{w}")
        pshapes: list[tuple[int, ...]] = [(k, c // g, r, s)] + ([(k,)] if attrs["bias"] else [])
        return (k, p, q), pshapes, k * (c // g) * r * s * p * q
    if ltype == "fc":
        n_in, f = c * h * w, attrs["out_features"]
        return (f, 1, 1), [(f, n_in)] + ([(f,)] if attrs["bias"] else []), n_in * f
    if ltype in ("maxpool", "avgpool"):
        (r, s), (sh, sw), (ph, pw) = attrs["kernel"], attrs["stride"], attrs["pad"]
        if ph >= r or pw >= s:
            raise UsageError(f"{where}: pad {attrs['pad']} must be smaller than the kernel {attrs['kernel']}")
        p, q = _pool_out(h, r, sh, ph, attrs["ceil_mode"]), _pool_out(w, s, sw, pw, attrs["ceil_mode"])
        if p < 1 or q < 1:
            raise UsageError(f"{where}: shape mismatch: window {r}x{s} does not fit input {c}x{h}x{w}")
        return (c, p, q), [], 0
    if ltype == "global_avgpool":
        return (c, 1, 1), [], 0
    if ltype == "flatten":
        return (c * h * w, 1, 1), [], 0
    if ltype == "bn":
        return (c, h, w), [(c,), (c,)], 0
    if ltype == "concat":
        if any(sh_[1:] != (h, w) for sh_ in shapes):
            raise UsageError(f"{where}: shape mismatch: concat inputs differ in H x W: "
                             + ", ".join("x".join(map(str, s_)) for s_ in shapes))
        return (sum(s_[0] for s_ in shapes), h, w), [], 0
    if ltype == "add":
        if any(s_ != shapes[0] for s_ in shapes):
            raise UsageError(f"{where}: shape mismatch: add inputs differ: "
                             + ", ".join("x".join(map(str, s_)) for s_ in shapes))
        return shapes[0], [], 0
    if ltype == "softmax_xent":
        return (1, 1, 1), [], 0
    if ltype == "params":
        return (c, h, w), [tuple(sh) for sh in attrs["shapes"]], 0
    return (c, h, w), [], 0  # relu, lrn, dropout: shape-preserving


def _normalise_transformer(where: str, attrs: dict[str, Any]) -> None:
    """The checks of the transformer types' attributes, in place."""
    for key in ("out_features", "vocab", "hidden", "positions", "heads"):
        if key in attrs:
            attrs[key] = _positive_int(attrs[key], f"{where}: {key}")
    for key in ("token_types", "index"):
        if key in attrs:
            attrs[key] = _positive_int(attrs[key], f"{where}: {key}", minimum=0)
    for key in ("eps", "dropout"):
        if key in attrs:
            attrs[key] = _number(attrs[key], f"{where}: {key}")
    if "dropout" in attrs and not 0 <= attrs["dropout"] < 1:
        raise UsageError(f"{where}: dropout must be in [0, 1), got {attrs['dropout']}")
    for key in ("bias", "causal", "tied", "class_token", "approximate"):
        if key in attrs and not isinstance(attrs[key], bool):
            raise UsageError(f"{where}: {key} must be true or false, got {attrs[key]!r}")


_TRANSFORMER = ("embedding", "tokens", "layernorm", "attention", "linear", "select_token", "lm_head")


def _infer_transformer(where: str, ltype: str, attrs: dict[str, Any], shape: tuple[int, int, int]
                       ) -> tuple[tuple[int, int, int], list[tuple[int, ...]], int]:
    c, h, w = shape
    bias = bool(attrs.get("bias"))
    if ltype == "layernorm":
        return (c, h, w), [(c,), (c,)], 0
    if ltype == "linear":
        f = attrs["out_features"]
        return (f, h, w), [(f, c)] + ([(f,)] if bias else []), c * f * h * w
    if ltype == "tokens":
        s = h * w + (1 if attrs["class_token"] else 0)
        tok: list[tuple[int, ...]] = [(1, c)] if attrs["class_token"] else []
        return (c, s, 1), tok + [(s, c)], 0
    if w != 1:
        raise UsageError(f"{where}: {ltype} takes a sequence (D, S, 1), got {c}x{h}x{w}")
    if ltype == "embedding":
        d, s = attrs["hidden"], h
        if c != 1:
            raise UsageError(f"{where}: embedding takes token ids (1, S, 1), got {c}x{h}x{w}")
        if s > attrs["positions"]:
            raise UsageError(f"{where}: sequence {s} is longer than positions {attrs['positions']}")
        tables = [(attrs["vocab"], d), (attrs["positions"], d)]
        return (d, s, 1), tables + ([(attrs["token_types"], d)] if attrs["token_types"] else []), 0
    if ltype == "attention":
        d, s, heads = c, h, attrs["heads"]
        if d % heads:
            raise UsageError(f"{where}: heads={heads} must divide the width {d}")
        pshapes: list[tuple[int, ...]] = [(3 * d, d)]
        pshapes += [(3 * d,)] if bias else []
        pshapes += [(d, d)] + ([(d,)] if bias else [])
        return (d, s, 1), pshapes, s * d * 3 * d + 2 * s * s * d + s * d * d
    if ltype == "select_token":
        if attrs["index"] >= h:
            raise UsageError(f"{where}: index {attrs['index']} is outside the sequence of {h}")
        return (c, 1, 1), [], 0
    # lm_head
    v = attrs["vocab"]
    own: list[tuple[int, ...]] = [] if attrs["tied"] else [(v, c)]
    return (v, h, 1), own + ([(v,)] if bias else []), c * v * h


def _is_comment(key: Any) -> bool:
    """JSON has no comments: keys starting with '_' or '#' are notes, ignored."""
    return isinstance(key, str) and key.startswith(("_", "#"))


def _check_spec(spec: Any, origin: str) -> tuple[str, tuple[int, int, int], list[Any]]:
    """The spec's name, input shape and raw layers, checked (its keys, their types)."""
    if not isinstance(spec, dict):
        raise UsageError(f"{origin}: a network spec is an object with 'name', 'input' and 'layers'")
    unknown = sorted(k for k in set(spec) - {"name", "input", "layers", "description", "source", "published"}
                     if not _is_comment(k))
    if unknown:
        raise UsageError(f"{origin}: unknown key(s) {', '.join(unknown)} (name, input, layers, "
                         "description, source, published)")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{origin}: the spec needs a 'name' string")
    raw_in = spec.get("input")
    if (not isinstance(raw_in, (list, tuple)) or len(raw_in) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in raw_in)):
        raise UsageError(f"{origin}: 'input' must be [C, H, W] positive integers, got {raw_in!r}")
    input_shape = (int(raw_in[0]), int(raw_in[1]), int(raw_in[2]))
    raw_layers = spec.get("layers")
    if not isinstance(raw_layers, list) or not raw_layers:
        raise UsageError(f"{origin}: 'layers' must be a non-empty list")
    return name, input_shape, raw_layers


def _input_indices(where: str, inputs: Any, index: dict[str, int], later_layers: list[Any]) -> list[int]:
    """The indices of a layer's inputs among the layers before it (-1: the data); later_layers:
    the raw layers from this one on, to say why an input is missing."""
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs:
        raise UsageError(f"{where}: 'inputs' must be a list of layer names")
    idx: list[int] = []
    for src in inputs:
        if not isinstance(src, str):
            raise UsageError(f"{where}: 'inputs' must be a list of layer names, got {src!r} in it")
        if src == DATA:
            idx.append(-1)
        elif src in index:
            idx.append(index[src])
        else:
            later = any(isinstance(r, dict) and r.get("name") == src for r in later_layers)
            raise UsageError(f"{where}: input {src!r} " + (
                "comes later in the list (layers must be in topological order)" if later
                else "is not a layer defined before it (or 'data')"))
    return idx


def _build_layer(origin: str, i: int, raw_layers: list[Any], index: dict[str, int], layers: list[Layer],
                 input_shape: tuple[int, int, int]) -> Layer:
    """Layer #i of the spec, checked, with its shapes inferred from the layers before it."""
    raw = raw_layers[i]
    if not isinstance(raw, dict):
        raise UsageError(f"{origin}: layer #{i} is not an object")
    lname = raw.get("name")
    if not isinstance(lname, str) or not lname:
        raise UsageError(f"{origin}: layer #{i} needs a 'name' string")
    where = f"{origin}: layer {lname!r}"
    if lname == DATA or lname in index:
        raise UsageError(f"{where}: duplicate name" if lname in index else f"{where}: {DATA!r} is reserved")
    ltype = raw.get("type")
    if not isinstance(ltype, str) or ltype not in _ATTRS:
        raise UsageError(f"{where}: unknown type {ltype!r} (known: {', '.join(LAYER_TYPES)})")
    idx = _input_indices(where, raw.get("inputs", [layers[-1].name] if layers else [DATA]), index, raw_layers[i:])
    attrs = _normalise_attrs(where, ltype, {k: v for k, v in raw.items()
                                            if k not in ("name", "type", "inputs", "block") and not _is_comment(k)})
    block = raw.get("block", "")
    if not isinstance(block, str):
        raise UsageError(f"{where}: 'block' must be a string, got {block!r}")
    shapes = [input_shape if j < 0 else layers[j].out_shape for j in idx]
    out, pshapes, macs = _infer(where, ltype, attrs, shapes)
    if ltype == "lm_head" and attrs["tied"]:
        _check_tied(where, attrs["vocab"], shapes[0][0], layers)
    return Layer(lname, ltype, tuple(idx), tuple(shapes), out, attrs, tuple(pshapes), macs, block)


def _build(spec: Any, origin: str) -> tuple[str, tuple[int, int, int], list[Layer]]:
    """A spec's name, input shape and layers, each checked (UsageError naming `origin`)."""
    name, input_shape, raw_layers = _check_spec(spec, origin)
    index: dict[str, int] = {}
    layers: list[Layer] = []
    for i in range(len(raw_layers)):
        layer = _build_layer(origin, i, raw_layers, index, layers, input_shape)
        index[layer.name] = len(layers)
        layers.append(layer)
    return name, input_shape, layers


def _check_tied(where: str, vocab: int, width: int, layers: list[Layer]) -> None:
    """A tied lm_head reuses the first embedding's token table: it must exist and match."""
    emb = next((lay for lay in layers if lay.type == "embedding"), None)
    if emb is None:
        raise UsageError(f"{where}: tied lm_head needs an embedding layer before it")
    if emb.param_shapes[0] != (vocab, width):
        raise UsageError(f"{where}: tied lm_head [{vocab}, {width}] does not match the embedding "
                         f"{emb.name!r} [{emb.param_shapes[0][0]}, {emb.param_shapes[0][1]}]")


# ---------------------------------------------------------------------------------------------
# Loading: built-in nets (gdlbench/nets: *.json files and modules with a NETS dict) or a path


def _json_spec(entry: Any) -> Any:
    return json.loads(entry.read_text())


def _builtin_specs() -> dict[str, Callable[[], Any]]:
    found: dict[str, Callable[[], Any]] = {}
    pkg = resources.files("gdlbench.nets")
    for entry in sorted(pkg.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            found[entry.name[:-5]] = functools.partial(_json_spec, entry)
        elif entry.name.endswith(".py") and not entry.name.startswith("_"):
            module = importlib.import_module(f"gdlbench.nets.{entry.name[:-3]}")
            for net_name, builder in getattr(module, "NETS", {}).items():
                found[net_name] = builder
    return found


def builtin_nets() -> list[str]:
    """Names of the networks shipped with gdlbench."""
    return list(_builtin_specs())


def _load_path(path: Path) -> Any:
    """The spec a file holds, unchecked (Network checks it)."""
    if not path.exists():
        raise UsageError(f"--net {path}: no such file")
    if not path.is_file():
        raise UsageError(f"--net {path}: not a regular file (expected a .json or .py network spec)")
    if path.suffix == ".json":
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise UsageError(f"--net {path}: not valid JSON: {exc}") from None
    if path.suffix == ".py":
        # A user's own spec module: it defines SPEC (a dict) or spec() returning one.
        module_spec = importlib.util.spec_from_file_location(f"gdlbench_user_net_{path.stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise UsageError(f"--net {path}: cannot import")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        if hasattr(module, "SPEC"):
            return module.SPEC
        if callable(getattr(module, "spec", None)):
            return module.spec()
        raise UsageError(f"--net {path}: a Python spec defines SPEC (a dict) or spec()")
    raise UsageError(f"--net {path}: expected a .json or .py network spec")


def net_option(text: str) -> str:
    """argparse type of --net: the text, once it names a network. Checked while the command line
    is parsed, before MPI starts, so that a bad name is one line from rank 0, not one per rank."""
    try:
        load_network(text)
    except UsageError as exc:  # a ValueError, which argparse would replace with "invalid value"
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--net: ").removeprefix("--net ")) from None
    return text


def load_network(net: str | Path | dict[str, Any] | Network) -> Network:
    """A built-in name ('resnet50'; a transformer with parameters, 'gpt2-small:seq=128'), a path
    to a .json/.py spec, a spec dict, or a Network."""
    if isinstance(net, Network):
        return net
    if isinstance(net, dict):
        return Network(net)
    text = str(net)
    builtins = _builtin_specs()
    if text in builtins:
        return Network(builtins[text](), origin=text)
    if text.endswith((".json", ".py")) or "/" in text:
        return Network(_load_path(Path(text)), origin=text)
    base, colon, params = text.partition(":")
    from .transformer import ALIASES, PARAMETRISED, with_params

    resolved = ALIASES.get(base, base)  # gpt2 = gpt2-small, as Hugging Face names it
    if resolved != base and not colon:
        return Network(builtins[resolved](), origin=text)
    # Errors name what the user typed, and for an alias what it stands for.
    shown = text if resolved == base else f"{text} (= {resolved}{colon}{params})"
    if colon:  # a transformer with its parameters: gpt2-small:seq=128 (gdlbench/nets/transformer.py)
        if resolved not in PARAMETRISED:
            raise UsageError(f"--net {shown}: only {', '.join(PARAMETRISED)} take parameters (NAME:KEY=VALUE:...)")
        return Network(with_params(resolved, params, shown), origin=text)
    aliases = "".join(f"; {a} = {b}" for a, b in ALIASES.items())
    raise UsageError(f"--net: unknown network {text!r} (built in: {', '.join(builtins)}{aliases}; "
                     "or a path to a .json spec)")
