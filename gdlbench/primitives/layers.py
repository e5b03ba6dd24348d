"""Single layers (everything but convolution, which gdlbench conv owns): each layer type's forward and
backward timed on its own, through the same C++/CUDA Layer objects the iteration executor builds.

A layer is a spec dict as Network.layer_specs() gives it:
    {"name", "type", "in_shapes": [[C, H, W], ...], "out_shape": [...], "attrs": {...}, "param_shapes": [...]}
Shapes are per sample; the batch is separate. Attribute names and parameter shapes per type are in
LAYER_TYPES below (and in csrc/cpu/*.cpp).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from .._native import _core, require_cuda
from ..common import env
from ..common.errors import UsageError
from ..common.hostmem import require_device, require_host
from ..common.measurement import Measurement, check_device, check_threads, check_timing
from ..common.output import Column, fmt_float
from ..common.units import option_argv

PASSES = ("fwd", "bwd-data", "bwd-filter", "bwd")

# type -> (attributes with defaults, parameter shapes); the contract with the network engine.
LAYER_TYPES: dict[str, tuple[str, str]] = {
    "fc": ("out_features, bias=1", "[out, in] then [out] if bias (in = numel of the per-sample input)"),
    "relu": ("-", "-"),
    "maxpool": ("kernel_h, kernel_w (or kernel), stride_h, stride_w (or stride, 1), pad_h, pad_w (or pad, 0), "
                "ceil_mode=1 (Caffe)", "-"),
    "avgpool": ("as maxpool; divides by the window clipped to the padded input (Caffe)", "-"),
    "global_avgpool": ("-; out_shape {C} or {C, 1, 1}", "-"),
    "lrn": ("size=5 (odd), alpha=1e-4, beta=0.75, k=1 (Caffe ACROSS_CHANNELS)", "-"),
    "bn": ("eps=1e-5 (training mode: batch statistics)", "[C] (scale) then [C] (shift)"),
    "concat": ("-; along the first per-sample axis, any number of inputs", "-"),
    "add": ("-; two or more inputs of one shape", "-"),
    "dropout": ("ratio=0.5, seed=0", "-"),
    "softmax_xent": ("-; in (C, H, W): a softmax over C at each position, one label each; out_shape {1}: "
                     "y[0] = mean loss; labels via set_labels", "-"),
    "flatten": ("-", "-"),
    # transformers: a sequence is (D, S, 1) per sample (gdlbench/nets/network.py's docstring)
    "embedding": ("vocab, hidden, positions, token_types=0; input (1, S, 1) token ids; type 0 before S/2, "
                  "1 after (a sentence pair)", "[vocab, hidden], [positions, hidden], [token_types, hidden] if any"),
    "tokens": ("class_token=1; (C, H, W) -> (C, H*W [+1], 1)", "[1, C] if class_token, then [S, C]"),
    "layernorm": ("eps=1e-5; over the features at each position", "[D] (gamma) then [D] (beta)"),
    "linear": ("out_features, bias=1; per position (C, H, W) -> (F, H, W)", "[F, C] then [F] if bias"),
    "gelu": ("approximate=0 (erf; 1: tanh, GPT-2)", "-"),
    "tanh": ("-", "-"),
    "select_token": ("index=0; (C, S, 1) -> (C, 1, 1)", "-"),
    "attention": ("heads, bias=1, causal=0, dropout=0 (on the probabilities), seed=0; on (D, S, 1)",
                  "[3D, D], [3D] if bias, [D, D], [D] if bias"),
    "lm_head": ("vocab, tied=1, bias=0; (D, S, 1) -> (vocab, S, 1)",
                "[vocab, D] unless tied (then the embedding's table), then [vocab] if bias"),
}

# A few real layers, for `gdlbench layer --layer NAME` (batch is the command's --batch).
BUILTIN: dict[str, dict[str, Any]] = {
    "alexnet-norm1": {"type": "lrn", "in_shapes": [[96, 55, 55]], "out_shape": [96, 55, 55],
                      "attrs": {"size": 5, "alpha": 1e-4, "beta": 0.75, "k": 1}},
    "alexnet-pool1": {"type": "maxpool", "in_shapes": [[96, 55, 55]], "out_shape": [96, 27, 27],
                      "attrs": {"kernel": 3, "stride": 2}},
    "alexnet-fc6": {"type": "fc", "in_shapes": [[256, 6, 6]], "out_shape": [4096], "attrs": {"out_features": 4096},
                    "param_shapes": [[4096, 9216], [4096]]},
    "alexnet-drop6": {"type": "dropout", "in_shapes": [[4096]], "out_shape": [4096], "attrs": {"ratio": 0.5}},
    "alexnet-loss": {"type": "softmax_xent", "in_shapes": [[1000]], "out_shape": [1]},
    "googlenet-pool2": {"type": "maxpool", "in_shapes": [[192, 56, 56]], "out_shape": [192, 28, 28],
                        "attrs": {"kernel": 3, "stride": 2}},
    "googlenet-inception3a-output": {"type": "concat", "in_shapes": [[64, 28, 28], [128, 28, 28], [32, 28, 28],
                                                                    [32, 28, 28]], "out_shape": [256, 28, 28]},
    "googlenet-pool5": {"type": "avgpool", "in_shapes": [[1024, 7, 7]], "out_shape": [1024, 1, 1],
                        "attrs": {"kernel": 7, "stride": 1}},
    "resnet50-bn2a": {"type": "bn", "in_shapes": [[256, 56, 56]], "out_shape": [256, 56, 56], "attrs": {"eps": 1e-5},
                      "param_shapes": [[256], [256]]},
    "resnet50-relu2a": {"type": "relu", "in_shapes": [[256, 56, 56]], "out_shape": [256, 56, 56]},
    "resnet50-add2a": {"type": "add", "in_shapes": [[256, 56, 56], [256, 56, 56]], "out_shape": [256, 56, 56]},
    "resnet50-avgpool": {"type": "global_avgpool", "in_shapes": [[2048, 7, 7]], "out_shape": [2048]},
}


@dataclass
class LayerResult:
    """One pass of one layer timed: its Measurement and input GB/s."""

    command: ClassVar[str] = "layer"
    # the table the CLI prints (gdlbench.Compare)
    COLUMNS: ClassVar[list[Column]] = [
        Column("layer", "layer"), Column("type", "type"), Column("batch", "batch"), Column("phase", "phase"),
        Column("time (us)", "time_us", fmt_float(1)), Column("min", "time_us_min", fmt_float(1)),
        Column("cv", "time_cv", fmt_float(3)), Column("input GB/s", "input_gbs", fmt_float(2)),
    ]
    name: str
    type: str
    batch: int
    device: str
    threads: int | None
    pass_: str
    measurement: Measurement
    bytes_in: int
    request: LayerRequest | None = field(default=None, compare=False)  # what was asked (to_argv())

    @property
    def gbs(self) -> float:
        """Input activation bytes / time: a floor on the memory traffic of these memory-bound layers."""
        return self.bytes_in / (self.measurement.median * 1e-6) / 1e9

    def to_dict(self) -> dict[str, Any]:
        row = {"layer": self.name, "type": self.type, "batch": self.batch, "device": self.device,
               "threads": self.threads, "phase": self.pass_, **self.measurement.to_dict(), "input_gbs": self.gbs}
        row.pop("clock"), row.pop("region")
        return row


def resolve(layer: str | dict[str, Any]) -> list[dict[str, Any]]:
    """Layer specs from built-in names ('alexnet-fc6', a comma list, or 'all') or one spec dict."""
    if isinstance(layer, dict):
        if "type" not in layer:
            raise UsageError("layer: a spec needs a 'type' (and in_shapes, out_shape, attrs, param_shapes)")
        return [layer]
    names = list(BUILTIN) if layer == "all" else [n.strip() for n in str(layer).split(",") if n.strip()]
    unknown = [n for n in names if n not in BUILTIN]
    if unknown or not names:
        raise UsageError(f"layer: unknown {', '.join(unknown) or repr(layer)} (known: {', '.join(BUILTIN)})")
    return [{"name": n, **BUILTIN[n]} for n in names]


def _pass_list(passes: str | tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(passes, str):
        passes = tuple(p.strip() for p in passes.split(",") if p.strip())
    if not passes:
        raise UsageError(f"layer: --pass names no pass ({', '.join(PASSES)})")
    for p in passes:
        if p not in PASSES:
            raise UsageError(f"layer: pass must be one of {', '.join(PASSES)}, got {p!r}")
    return tuple(passes)


@dataclass(frozen=True)
class LayerRequest:
    """Layers to time, checked once when made: built-in ones by name (a comma list, or 'all') or
    one spec dict as Network.layer_specs() gives it; to_argv() is the `gdlbench layer` command
    that times them again. passes: 'fwd', 'bwd-data', 'bwd-filter', 'bwd', a tuple or a comma list."""

    layer: str | dict[str, Any] = "resnet50-bn2a"
    batch: int = 32
    device: str = "auto"
    passes: tuple[str, ...] = ("fwd", "bwd")
    iters: int = 20
    warmup: int = 5
    threads: int | None = None

    def __post_init__(self) -> None:
        self.specs()  # bad names fail here
        if not self.batch >= 1:
            raise UsageError(f"layer: --batch must be >= 1, got {self.batch}")
        object.__setattr__(self, "passes", _pass_list(self.passes))
        check_timing(self.iters, self.warmup, "layer")
        check_device(self.device, "layer")
        check_threads(self.threads, "layer")

    def specs(self) -> list[dict[str, Any]]:
        return resolve(self.layer)

    def to_argv(self) -> list[str]:
        """gdlbench's arguments that time these layers again."""
        which = ("--spec", json.dumps(self.layer)) if isinstance(self.layer, dict) else ("--layer", self.layer)
        return ["layer", *option_argv([which, ("-b", self.batch), ("--device", self.device),
                                       ("--pass", ",".join(self.passes)), ("--iters", self.iters),
                                       ("--warmup", self.warmup), ("--threads", self.threads)])]


def layer(layer: str | dict[str, Any] | LayerRequest = "resnet50-bn2a", batch: int = 32, device: str = "auto",
          passes: str | tuple[str, ...] = ("fwd", "bwd"), *, iters: int = 20, warmup: int = 5,
          threads: int | None = None) -> list[LayerResult]:
    """Time the forward and backward passes of layers other than convolution (`gdlbench layer`):
    a LayerRequest, or its fields as arguments. Each result carries the request of its own layer."""
    req = layer if isinstance(layer, LayerRequest) else LayerRequest(layer, batch, device, _pass_list(passes), iters,
                                                                      warmup, threads)
    results: list[LayerResult] = []
    for spec in req.specs():
        one = req if isinstance(req.layer, dict) else replace(req, layer=spec["name"])
        results += [replace(r, request=one) for r in time_layer(spec, req.batch, req.device, req.passes,
                                                                 iters=req.iters, warmup=req.warmup,
                                                                 threads=req.threads)]
    return results


def layer_types(device: str = "cpu") -> list[str]:
    """Layer types the given backend can build."""
    return list((_core if device == "cpu" else require_cuda()).layer_types())


def time_layer(spec: dict[str, Any], batch: int, device: str = "auto", passes: tuple[str, ...] = ("fwd", "bwd"), *,
               iters: int = 20, warmup: int = 5, threads: int | None = None) -> list[LayerResult]:
    """Time each pass of one layer (buffers filled with gdlbench's test data; labels for losses)."""
    check_timing(iters, warmup, "layer")
    if batch < 1:
        raise UsageError(f"layer: --batch must be >= 1, got {batch}")
    if not passes:
        raise UsageError(f"layer: --pass names no pass ({', '.join(PASSES)})")
    for p in passes:
        if p not in PASSES:
            raise UsageError(f"layer: pass must be one of {', '.join(PASSES)}, got {p!r}")
    dev, _ = env.resolve_device(device)
    try:  # inputs, output and their gradients, at least (a malformed spec: the builder says why)
        need = 8 * batch * (sum(_numel(s) for s in spec["in_shapes"]) + _numel(spec.get("out_shape", [1])))
    except (KeyError, TypeError, ValueError):
        need = 0
    if dev == "cpu":
        require_host(need, f"layer --batch {batch}")
    else:
        require_device(require_cuda(), need, f"layer --batch {batch}")
    if dev == "cpu":
        threads = threads or env.default_threads()
        _core.set_compute_threads(threads)
        _core.set_blas_threads(threads)
        bench, clock, region = _core.LayerBench(spec, batch), "steady-clock", f"one pass, {threads} threads"
    else:
        threads = None
        bench, clock, region = require_cuda().LayerBench(spec, batch), "cuda-events", "one pass on the stream"
    nbytes = 4 * batch * sum(int(_numel(s)) for s in spec["in_shapes"])
    name = spec.get("name", spec["type"])
    return [LayerResult(name, spec["type"], batch, dev, threads, p,
                        Measurement(bench.time(p, warmup, iters), clock, region), nbytes) for p in passes]


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
