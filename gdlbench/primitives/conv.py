"""2-D convolution, forward, backward-data and backward-filter: im2col + OpenBLAS on the CPU (the
registered "conv" layer, driven through _core.LayerBench), cuDNN on the GPU (_cuda.conv_time).
Timed by the native harness; checked, untimed, against a float64 numpy direct convolution."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypedDict

import numpy as np

from .._fault import corrupt, fault_count
from .._native import _core, require_cuda
from ..common import env
from ..common.errors import CheckFailed, UsageError
from ..common.measurement import Measurement, check_device, check_threads, check_timing
from ..common.output import KERNEL_COLUMNS, Column
from ..common.units import format_bytes, option_argv

if TYPE_CHECKING:
    from ..nets.network import Layer

PASSES = ("fwd", "bwd-data", "bwd-filter")
CPU_DTYPES = ("float32",)
CUDA_DTYPES = ("float32", "tf32", "float16", "bfloat16")
LAYOUTS = ("nchw", "nhwc")
# Tolerance on max |out - ref| / ref(|inputs|): the error relative to the magnitudes summed. Inputs
# are k/128 (exact in every dtype), so the reference is exact; accumulation order, the output's
# rounding and, on the GPU, the transforms of FFT/Winograd algorithms count. Stated in every row.
TOLERANCE = {"float32": 5e-5, "tf32": 2e-3, "float16": 5e-3, "bfloat16": 2e-2}
# cuDNN's FFT and Winograd algorithms round transformed operands (to the dtype, or to TF32/fp16
# inside the transform): wider bounds on the GPU, the same measure.
CUDA_TOLERANCE = {"float32": 1e-4, "tf32": 5e-3, "float16": 1e-2, "bfloat16": 3e-2}
# Seeds of the test data (common/fill.h); the host regenerates the device's inputs from them.
SEED_X, SEED_W, SEED_B, SEED_DY, SEED_DX0 = 11, 5, 6, 7, 13
CHECK_BATCH = 2  # samples in the untimed check: enough to cross the CPU's multi-sample GEMM path


def _pair(v: int | Sequence[int], what: str) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    try:
        h, w = v
        return int(h), int(w)
    except (TypeError, ValueError):
        raise UsageError(f"conv: {what} must be an int or a pair (h, w), got {v!r}") from None


@dataclass(frozen=True)
class ConvShape:
    """One convolution: input N x C x H x W, K filters of C/groups x R x S."""

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    bias: bool = False

    @property
    def p(self) -> int:
        return (self.h + 2 * self.pad[0] - self.dilation[0] * (self.r - 1) - 1) // self.stride[0] + 1

    @property
    def q(self) -> int:
        return (self.w + 2 * self.pad[1] - self.dilation[1] * (self.s - 1) - 1) // self.stride[1] + 1

    @property
    def flops(self) -> float:
        """2·N·K·(C/g)·R·S·P·Q, the same for each of the three passes."""
        return 2.0 * self.n * self.k * (self.c // self.groups) * self.r * self.s * self.p * self.q

    def validate(self) -> None:
        for name in ("n", "c", "h", "w", "k", "r", "s", "groups"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v <= 0:
                raise UsageError(f"conv: {name} must be a positive integer, got {v!r}")
        if min(self.stride) < 1 or min(self.dilation) < 1:
            raise UsageError(f"conv: stride and dilation must be >= 1, got {self.stride}, {self.dilation}")
        if min(self.pad) < 0:
            raise UsageError(f"conv: padding must be >= 0, got {self.pad}")
        if self.c % self.groups or self.k % self.groups:
            raise UsageError(f"conv: channels (c={self.c}, k={self.k}) are not divisible by groups={self.groups}")
        for size, kernel, pad, dil, what in ((self.h, self.r, self.pad[0], self.dilation[0], "r x h"),
                                             (self.w, self.s, self.pad[1], self.dilation[1], "s x w")):
            if dil * (kernel - 1) + 1 > size + 2 * pad:
                raise UsageError(f"conv: the kernel ({what}: {kernel}, dilation {dil}) is larger than the padded "
                                 f"input ({size} + 2*{pad})")
        elements = max(self.n * self.c * self.h * self.w, self.n * self.k * self.p * self.q)
        if elements > 2**31 - 1:
            raise UsageError(f"conv: {elements} elements in one tensor exceed the 2^31-1 limit")

    @classmethod
    def from_layer(cls, layer: Layer, n: int = 1) -> ConvShape:
        """The geometry of a network's conv layer (gdlbench.nets.network: shapes per sample) at batch n."""
        a = layer.attrs
        c, h, w = layer.in_shapes[0]
        return cls(n, c, h, w, a["out_channels"], a["kernel"][0], a["kernel"][1], tuple(a["stride"]),
                   tuple(a["pad"]), tuple(a["dilation"]), a["groups"], a["bias"])

    def with_batch(self, n: int) -> ConvShape:
        return ConvShape(n, self.c, self.h, self.w, self.k, self.r, self.s, self.stride, self.pad, self.dilation,
                         self.groups, self.bias)

    def spec(self, name: str = "conv") -> dict[str, Any]:
        """The layer spec (per-sample shapes) that the CPU and CUDA "conv" layers read."""
        attrs = {"out_channels": self.k, "kernel_h": self.r, "kernel_w": self.s, "stride_h": self.stride[0],
                 "stride_w": self.stride[1], "pad_h": self.pad[0], "pad_w": self.pad[1],
                 "dilation_h": self.dilation[0], "dilation_w": self.dilation[1], "groups": self.groups,
                 "bias": int(self.bias)}
        params = [[self.k, self.c // self.groups, self.r, self.s]] + ([[self.k]] if self.bias else [])
        return {"name": name, "type": "conv", "inputs": [-1], "in_shapes": [[self.c, self.h, self.w]],
                "out_shape": [self.k, self.p, self.q], "attrs": attrs, "param_shapes": params}

    def geometry(self) -> dict[str, int]:
        """Flat integer geometry for the CUDA bindings."""
        return {"n": self.n, "c": self.c, "h": self.h, "w": self.w, "k": self.k, "r": self.r, "s": self.s,
                "stride_h": self.stride[0], "stride_w": self.stride[1], "pad_h": self.pad[0], "pad_w": self.pad[1],
                "dilation_h": self.dilation[0], "dilation_w": self.dilation[1], "groups": self.groups,
                "bias": int(self.bias)}


DEFAULT_WORKSPACE_LIMIT = 1 << 30  # the largest cuDNN workspace, bytes
CPU_ALGOS = ("heuristic", "search", "im2col")  # the CPU has one algorithm; the first two name it too


def format_hw(v: Sequence[int]) -> str:
    return f"{v[0]}x{v[1]}" if v[0] != v[1] else str(v[0])


@dataclass(frozen=True)
class ConvRequest:
    """One convolution's passes to time, checked once when made (check_on(device) adds what
    depends on the device that runs it); to_argv() is the `gdlbench conv` command that times it
    again. layer and count only label the rows (a network's name for the layer, how often it
    occurs): to_argv() gives the geometry, and requests that differ only there are equal."""

    shape: ConvShape = ConvShape(8, 64, 56, 56, 64, 3, 3)
    passes: tuple[str, ...] = PASSES
    device: str = "auto"
    dtype: str = "float32"
    layout: str = "nchw"
    algo: str = "heuristic"
    workspace_limit: int = DEFAULT_WORKSPACE_LIMIT
    all_algos: bool = False
    iters: int = 20
    warmup: int = 5
    threads: int | None = None
    check: bool = True
    layer: str = field(default="", compare=False)
    count: int = field(default=1, compare=False)

    def __post_init__(self) -> None:
        self.shape.validate()
        object.__setattr__(self, "passes", tuple(_passes(self.passes)))
        check_timing(self.iters, self.warmup, "conv")
        check_device(self.device, "conv")
        check_threads(self.threads, "conv")
        if self.layout not in LAYOUTS:
            raise UsageError(f"conv: layout must be nchw or nhwc, got {self.layout!r}")
        if not (isinstance(self.workspace_limit, (int, np.integer)) and self.workspace_limit >= 0):
            raise UsageError(f"conv: --workspace-limit must be a byte count >= 0, got {self.workspace_limit!r}")
        if self.count < 1:
            raise UsageError(f"conv: count must be >= 1, got {self.count}")
        if self.device != "auto":
            self.check_on(self.device)

    @property
    def name(self) -> str:
        sh = self.shape
        return self.layer or f"{sh.n}x{sh.c}x{sh.h}x{sh.w}*{sh.k}x{sh.r}x{sh.s}"

    def check_on(self, device: str) -> None:
        """What the device that runs it must offer: the dtype, and on the CPU its one algorithm, NCHW."""
        allowed = CPU_DTYPES if device == "cpu" else CUDA_DTYPES
        if self.dtype not in allowed:
            raise UsageError(f"conv: dtype {self.dtype!r} is not available on {device} ({', '.join(allowed)})")
        if device != "cpu":
            return
        if self.layout != "nchw":
            raise UsageError("conv: the CPU backend is NCHW only (--layout nhwc needs --device cuda)")
        if self.all_algos:
            raise UsageError("conv: --all-algos needs --device cuda: the CPU backend has one algorithm (im2col)")
        if self.algo not in CPU_ALGOS:
            raise UsageError(f"conv: unknown CPU algorithm {self.algo!r}: the CPU backend has one, im2col "
                             "(im2col + gemm)")

    def to_argv(self) -> list[str]:
        """gdlbench's arguments that time this convolution again."""
        sh = self.shape
        return ["conv", *option_argv([
            ("-n", sh.n), ("-c", sh.c), ("-h", sh.h), ("-w", sh.w), ("-k", sh.k), ("-r", sh.r), ("-s", sh.s),
            ("--stride", "x".join(map(str, sh.stride))), ("--pad", "x".join(map(str, sh.pad))),
            ("--dilation", "x".join(map(str, sh.dilation))), ("--groups", sh.groups), ("--bias", sh.bias),
            ("--pass", "all" if self.passes == PASSES else ",".join(self.passes)), ("--device", self.device),
            ("--dtype", self.dtype), ("--layout", self.layout), ("--algo", self.algo),
            ("--workspace-limit", self.workspace_limit), ("--all-algos", self.all_algos), ("--iters", self.iters),
            ("--warmup", self.warmup), ("--threads", self.threads), ("--no-check", not self.check)])]


class ConvCheck(TypedDict):
    """The float64 check of one run: the worst error and the wrong elements, of all passes and
    of each."""

    max_rel_error: float
    per_pass: dict[str, float]
    wrong_per_pass: dict[str, int]
    tolerance: float
    wrong: int
    passed: bool
    batch: int


class CudaConvCheck(ConvCheck):
    algos: dict[str, str]  # the cuDNN algorithm of each pass


class ConvRun(TypedDict):
    """One run of the three passes: y, dx (= dx0 + dL/dx), dw and, with a bias, db (else None)."""

    y: np.ndarray
    dx: np.ndarray
    dw: np.ndarray
    db: np.ndarray | None


class CudaConvRun(ConvRun):
    algos: dict[str, str]  # the cuDNN algorithm of each pass


@dataclass
class ConvResult:
    """One pass of one convolution timed: its Measurement, TFLOP/s and the float64 check."""

    command: ClassVar[str] = "conv"
    # the table the CLI prints (gdlbench.Compare)
    COLUMNS: ClassVar[list[Column]] = [
        Column("layer", "layer"), Column("count", "count"), Column("N", "n"), Column("C", "c"),
        Column("HxW", "hw"), Column("K", "k"), Column("RxS", "rs"), Column("stride", "stride", format_hw),
        Column("pad", "pad", format_hw), Column("g", "groups"), Column("pass", "pass"), Column("algo", "algo"),
        Column("workspace", "workspace_bytes", lambda b: format_bytes(b) if b else "0"), *KERNEL_COLUMNS]
    layer: str
    shape: ConvShape
    pass_: str
    dtype: str
    layout: str
    device: str
    algo: str
    workspace_bytes: int
    measurement: Measurement
    threads: int | None = None
    count: int = 1            # how often the layer occurs in its network
    check: ConvCheck | None = field(default=None)
    request: ConvRequest | None = field(default=None, compare=False)  # what was asked (to_argv())

    @property
    def tflops(self) -> float:
        return self.shape.flops / (self.measurement.median * 1e-6) / 1e12

    @property
    def passed(self) -> bool:
        return self.check is None or self.check["passed"]

    def to_dict(self) -> dict[str, Any]:
        s = self.shape
        row = {"layer": self.layer, "n": s.n, "c": s.c, "h": s.h, "w": s.w, "k": s.k, "r": s.r, "s": s.s,
               "p": s.p, "q": s.q, "hw": f"{s.h}x{s.w}", "rs": f"{s.r}x{s.s}", "stride": list(s.stride), "pad": list(s.pad), "dilation": list(s.dilation),
               "groups": s.groups, "pass": self.pass_, "dtype": self.dtype, "layout": self.layout,
               "device": self.device, "threads": self.threads, "algo": self.algo,
               "workspace_bytes": self.workspace_bytes, "count": self.count, **self.measurement.stats(),
               "samples_us": list(self.measurement.samples_us), "tflops": self.tflops}
        if self.check is not None:
            row.update(max_rel_error=self.check["max_rel_error"], tolerance=self.check["tolerance"],
                       wrong=self.check["wrong"], check_batch=self.check["batch"])
        return row


# --- float64 reference: direct convolution, a sum over kernel offsets (no im2col) ---------------

def _windows(xp: np.ndarray, sh: ConvShape, r: int, s: int) -> np.ndarray:
    """xp[:, :, h(p, r), w(q, s)] for every output (p, q): the inputs that kernel tap (r, s) sees."""
    h0, w0 = r * sh.dilation[0], s * sh.dilation[1]
    return xp[:, :, h0:h0 + (sh.p - 1) * sh.stride[0] + 1:sh.stride[0], w0:w0 + (sh.q - 1) * sh.stride[1] + 1:sh.stride[1]]


def reference(sh: ConvShape, x: np.ndarray, w: np.ndarray, dy: np.ndarray) -> dict[str, np.ndarray]:
    """y, dx, dw and db in float64 for NCHW x, KCRS w, NKPQ dy."""
    x, w, dy = (a.astype(np.float64) for a in (x, w, dy))
    g, cg, kg = sh.groups, sh.c // sh.groups, sh.k // sh.groups
    ph, pw = sh.pad
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    y = np.zeros((sh.n, sh.k, sh.p, sh.q))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for r in range(sh.r):
        for s in range(sh.s):
            win = _windows(xp, sh, r, s)
            dwin = _windows(dxp, sh, r, s)  # a view: writes land in dxp
            for gi in range(g):
                cs, ks = slice(gi * cg, (gi + 1) * cg), slice(gi * kg, (gi + 1) * kg)
                wt = w[ks, :, r, s]  # [kg, cg]
                y[:, ks] += np.einsum("nchw,kc->nkhw", win[:, cs], wt, optimize=True)
                dwin[:, cs] += np.einsum("nkhw,kc->nchw", dy[:, ks], wt, optimize=True)
                dw[ks, :, r, s] = np.einsum("nkhw,nchw->kc", dy[:, ks], win[:, cs], optimize=True)
    dx = dxp[:, :, ph:ph + sh.h, pw:pw + sh.w]
    return {"y": y, "dx": dx, "dw": dw, "db": dy.sum(axis=(0, 2, 3))}


def check_inputs(sh: ConvShape) -> dict[str, np.ndarray]:
    """The check's inputs, NCHW/KCRS float32, from the same generator as the device's cuda.fill."""
    arrays = {"x": ((sh.n, sh.c, sh.h, sh.w), SEED_X), "w": ((sh.k, sh.c // sh.groups, sh.r, sh.s), SEED_W),
              "b": ((sh.k,), SEED_B), "dy": ((sh.n, sh.k, sh.p, sh.q), SEED_DY),
              "dx0": ((sh.n, sh.c, sh.h, sh.w), SEED_DX0)}
    out: dict[str, np.ndarray] = {}
    for name, (shape, seed) in arrays.items():
        a = np.empty(shape, dtype=np.float32)
        _core.fill(a, seed)
        out[name] = a
    return out


_Arrays = dict[str, np.ndarray]
# (shape, (input name, array shape, hash of its bytes) for each input)
_ExpectedKey = tuple[ConvShape, tuple[tuple[str, tuple[int, ...], int], ...]]
_EXPECTED_CACHE: dict[_ExpectedKey, tuple[_Arrays, _Arrays]] = {}


def expected(sh: ConvShape, inputs: Mapping[str, np.ndarray]) -> tuple[_Arrays, _Arrays]:
    """(reference, magnitudes) of every output for these inputs; the last shape's are kept, as
    --all-algos checks many algorithms on the same data."""
    key = (sh, tuple((k, v.shape, hash(v.tobytes())) for k, v in sorted(inputs.items())))
    if key in _EXPECTED_CACHE:
        return _EXPECTED_CACHE[key]
    ref = reference(sh, inputs["x"], inputs["w"], inputs["dy"])
    mag = reference(sh, np.abs(inputs["x"]), np.abs(inputs["w"]), np.abs(inputs["dy"]))
    ref["y"] = ref["y"] + (inputs["b"].astype(np.float64)[None, :, None, None] if sh.bias else 0)
    mag["y"] = mag["y"] + (np.abs(inputs["b"]).astype(np.float64)[None, :, None, None] if sh.bias else 0)
    ref["dx"] = ref["dx"] + inputs["dx0"]
    mag["dx"] = mag["dx"] + np.abs(inputs["dx0"])
    _EXPECTED_CACHE.clear()
    _EXPECTED_CACHE[key] = (ref, mag)
    return ref, mag


_CHECKED: tuple[tuple[Literal["y", "dx", "dw", "db"], str], ...] = (
    ("y", "fwd"), ("dx", "bwd-data"), ("dw", "bwd-filter"), ("db", "bwd-filter"))


def compare(sh: ConvShape, got: ConvRun, inputs: Mapping[str, np.ndarray], dtype: str,
            tolerance: float | None = None) -> ConvCheck:
    """Each pass against the float64 reference; errors relative to the same convolution of |inputs|.
    got["dx"] is expected to hold dx0 + dL/dx (backward-data accumulates)."""
    ref, mag = expected(sh, inputs)
    tol = TOLERANCE[dtype] if tolerance is None else tolerance
    per_pass: dict[str, float] = {}
    wrong_per_pass: dict[str, int] = {}
    worst, wrong = 0.0, 0
    tiny = np.finfo(np.float64).tiny
    for key, pass_ in _CHECKED:
        if key == "db" and not sh.bias:
            continue
        out = got[key]
        if out is None:  # db, from a backend that computed no bias gradient for a layer with a bias
            raise CheckFailed(f"conv: the backend returned no {key} for a layer with a bias")
        got_k = corrupt(out.reshape(ref[key].shape), ref[key], mag[key], fault_count("conv"))  # test-only
        err = np.abs(got_k - ref[key]) / np.maximum(mag[key], tiny)
        e = float(np.max(err, where=np.isfinite(err), initial=0.0))  # finite only: the JSON refuses NaN
        per_pass[pass_] = max(per_pass.get(pass_, 0.0), e)
        worst = max(worst, e)
        bad = int(np.count_nonzero(~(err <= tol)))  # NaN and inf are wrong
        wrong_per_pass[pass_] = wrong_per_pass.get(pass_, 0) + bad
        wrong += bad
    return {"max_rel_error": worst, "per_pass": per_pass, "wrong_per_pass": wrong_per_pass, "tolerance": tol,
            "wrong": wrong, "passed": wrong == 0, "batch": sh.n}


# --- the API ------------------------------------------------------------------------------------

def _passes(passes: str | Sequence[str]) -> list[str]:
    """'all', one pass, a comma list or a sequence of passes -> the passes, each once, in order."""
    if isinstance(passes, str):
        passes = list(PASSES) if passes == "all" else passes.split(",")
    passes = list(passes)
    for p in passes:
        if p not in PASSES:
            raise UsageError(f"conv: pass must be fwd, bwd-data, bwd-filter (a comma list) or all, got {p!r}")
    if not passes or len(set(passes)) != len(passes):
        raise UsageError(f"conv: passes must be given once each, got {passes!r}")
    return passes


def conv(n: int | ConvRequest = 8, c: int = 64, h: int = 56, w: int = 56, k: int = 64, r: int = 3, s: int = 3,
         stride: int | tuple[int, int] = 1, pad: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1,
         groups: int = 1, passes: str | Sequence[str] = "all", device: str = "auto", dtype: str = "float32",
         layout: str = "nchw", algo: str = "heuristic", workspace_limit: int | None = None,
         all_algos: bool = False, *, bias: bool = False, iters: int = 20, warmup: int = 5,
         threads: int | None = None, check: bool = True, layer: str = "", count: int = 1) -> list[ConvResult]:
    """Time the given passes of one convolution (a ConvRequest, or its fields as arguments); one
    ConvResult per pass (per algorithm with all_algos on the GPU). algo: 'heuristic'
    (cudnnGet*_v7), 'search' (cudnnFind*Ex) or a cuDNN algorithm name (e.g. IMPLICIT_PRECOMP_GEMM,
    or 'fwd:FFT,bwd-data:ALGO_1'); the CPU has one algorithm, im2col+gemm. workspace_limit (bytes)
    bounds the cuDNN workspace (default 1 GiB)."""
    if isinstance(n, ConvRequest):
        return run(n)
    shape = ConvShape(n, c, h, w, k, r, s, _pair(stride, "stride"), _pair(pad, "pad"), _pair(dilation, "dilation"),
                      groups, bool(bias))
    limit = DEFAULT_WORKSPACE_LIMIT if workspace_limit is None else workspace_limit
    return run(ConvRequest(shape, tuple(_passes(passes)), device, dtype, layout, algo, limit, all_algos, iters,
                           warmup, threads, check, layer, count))


def run(req: ConvRequest) -> list[ConvResult]:
    """Time one request; each result carries it."""
    dev, _ = env.resolve_device(req.device)
    req.check_on(dev)
    passes = list(req.passes)
    if dev == "cpu":
        results = _conv_cpu(req.shape, passes, req.dtype, req.iters, req.warmup, req.threads, req.check, req.name,
                            req.count)
    else:
        results = _conv_cuda(req.shape, passes, req.dtype, req.layout, req.algo, req.workspace_limit, req.all_algos,
                             req.iters, req.warmup, req.check, req.name, req.count)
    return [replace(res, request=req) for res in results]


def _conv_cpu(sh: ConvShape, passes: list[str], dtype: str, iters: int, warmup: int, threads: int | None,
              check: bool, name: str, count: int) -> list[ConvResult]:
    threads = threads or env.default_threads()
    _core.set_blas_threads(threads)
    _core.set_compute_threads(threads)
    bench = _core.LayerBench(sh.spec(name), sh.n)
    region = "one layer pass (im2col/col2im + OpenBLAS sgemm per group), buffers preallocated and touched"
    results: list[ConvResult] = []
    for p in passes:
        samples = bench.time(p, warmup, iters)
        meas = Measurement(samples, "steady-clock", region)
        results.append(ConvResult(name, sh, p, dtype, "nchw", "cpu", "im2col", 0, meas, threads, count))
    del bench
    if check:
        chk = check_cpu(sh.with_batch(min(sh.n, CHECK_BATCH)))
        for res in results:
            res.check = _for_pass(chk, res.pass_)
    return results


def _for_pass(chk: ConvCheck, pass_: str) -> ConvCheck:
    """The check's figures for one pass (all three passes were checked in the same run)."""
    wrong = chk["wrong_per_pass"].get(pass_, 0)
    return {**chk, "max_rel_error": chk["per_pass"].get(pass_, 0.0), "wrong": wrong, "passed": wrong == 0}


def run_cpu(sh: ConvShape, inputs: Mapping[str, np.ndarray]) -> ConvRun:
    """The CPU layer's three passes on the given NCHW arrays: y, dx (= dx0 + dL/dx), dw, db."""
    bench = _core.LayerBench(sh.spec(), sh.n)
    params = [inputs["w"]] + ([inputs["b"]] if sh.bias else [])
    y, dxs, dws = bench.run([inputs["x"]], inputs["dy"], params, [], [inputs["dx0"]])
    return {"y": y, "dx": dxs[0], "dw": dws[0], "db": dws[1] if sh.bias else None}


def check_cpu(sh: ConvShape) -> ConvCheck:
    """All three CPU passes against the float64 reference (untimed)."""
    inputs = check_inputs(sh)
    return compare(sh, run_cpu(sh, inputs), inputs, "float32")


def _conv_cuda(sh: ConvShape, passes: list[str], dtype: str, layout: str, algo: str, workspace_limit: int,
               all_algos: bool, iters: int, warmup: int, check: bool, name: str, count: int) -> list[ConvResult]:
    cuda = require_cuda()
    mode, named = parse_algo(algo, passes, cuda.conv_algo_names())
    limit = int(workspace_limit)
    rows = cuda.conv_time(geometry=sh.geometry(), dtype=dtype, layout=layout, mode=mode, named=named,
                          workspace_limit=limit, passes=passes, all_algos=all_algos, warmup=warmup, iters=iters)
    region = "one cudnnConvolution{Forward,BackwardData,BackwardFilter} call, workspace preallocated"
    results: list[ConvResult] = []
    for row in rows:
        if not row["samples_us"]:  # --all-algos: this algorithm does not support the shape
            continue
        meas = Measurement(row["samples_us"], "cuda-events", region, meta={"status": row["status"]})
        results.append(ConvResult(name, sh, row["pass"], dtype, layout, "cuda", row["algo"], row["workspace_bytes"],
                                  meas, None, count))
    if not results:
        raise UsageError(f"conv: no cuDNN algorithm runs this shape within a {limit}-byte workspace")
    if check:
        small = sh.with_batch(min(sh.n, CHECK_BATCH))
        if not all_algos:
            # The algorithms that were timed, not a new choice at the check's batch size.
            try:
                chk = check_cuda(small, dtype, layout, "named", {r.pass_: r.algo for r in results}, limit)
            except ValueError:  # one of them does not support the small batch
                chk = check_cuda(small, dtype, layout, mode, named, limit)
            for res in results:
                res.check = _for_pass(chk, res.pass_)
        for res in results if all_algos else []:  # every algorithm that ran is checked on its own
            try:
                res.check = _for_pass(check_cuda(small, dtype, layout, "named", {res.pass_: res.algo}, limit),
                                      res.pass_)
            except ValueError as exc:  # not supported at the check's batch size: say so, do not fail
                res.measurement.meta["check"] = f"not checked: {exc}"
    return results


def parse_algo(algo: str, passes: list[str], names: dict[str, list[str]]) -> tuple[str, dict[str, str]]:
    """'heuristic' | 'search' | NAME | 'fwd:NAME,bwd-data:NAME,...' -> (mode, {pass: NAME})."""
    if algo in ("heuristic", "search"):
        return algo, {}
    named: dict[str, str] = {}
    for item in algo.split(","):
        if ":" in item:
            p, nm = item.split(":", 1)
            if p not in PASSES:
                raise UsageError(f"conv: --algo {algo!r}: unknown pass {p!r}")
            targets = [p]
        else:
            nm, targets = item, passes
        for p in targets:
            if nm.upper() not in names[p]:
                raise UsageError(f"conv: unknown algorithm {nm!r} for {p} (heuristic, search, or one of "
                                 f"{', '.join(names[p])})")
            named[p] = nm.upper()
    missing = [p for p in passes if p not in named]
    if missing:
        raise UsageError(f"conv: --algo {algo!r} names no algorithm for {', '.join(missing)}")
    return "named", named


def check_cuda(sh: ConvShape, dtype: str, layout: str, mode: str = "heuristic",
               named: Mapping[str, str] | None = None, workspace_limit: int = 1 << 30) -> CudaConvCheck:
    """The three cuDNN passes, with inputs from cuda.fill, against the float64 reference of the same
    values regenerated on the host. dx starts at dx0 on the device: backward-data must accumulate."""
    got = run_cuda(sh, dtype, layout, mode, named, workspace_limit)
    inputs = check_inputs_layout(sh, layout)
    chk = compare(sh, from_layout(sh, got, layout), inputs, dtype, CUDA_TOLERANCE[dtype])
    return {**chk, "algos": got["algos"]}


def run_cuda(sh: ConvShape, dtype: str, layout: str, mode: str = "heuristic",
             named: Mapping[str, str] | None = None, workspace_limit: int = 1 << 30) -> CudaConvRun:
    """The cuDNN layer's three passes once on cuda.fill data: flat float32 y, dx (= dx0 + dL/dx), dw,
    db in `layout`'s memory order, and the algorithms used."""
    from .gemm import _decode

    cuda = require_cuda()
    raw = cuda.conv_check(geometry=sh.geometry(), dtype=dtype, layout=layout, mode=mode, named=named or {},
                          workspace_limit=workspace_limit)

    def decoded(key: str) -> np.ndarray:
        return _decode(np.asarray(raw[key]), dtype)

    return {"y": decoded("y"), "dx": decoded("dx"), "dw": decoded("dw"),
            "db": decoded("db") if "db" in raw else None,  # with a bias only
            "algos": dict(raw["algos"])}


def check_inputs_layout(sh: ConvShape, layout: str) -> dict[str, np.ndarray]:
    """test_inputs as NCHW arrays, holding the values the device generated in `layout`'s memory order."""
    if layout == "nchw":
        return check_inputs(sh)
    nhwc = ConvShapeNHWC(sh)
    out: dict[str, np.ndarray] = {}
    for name, (shape, seed) in nhwc.arrays().items():
        a = np.empty(shape, dtype=np.float32)
        _core.fill(a, seed)
        out[name] = nhwc.to_nchw(a)
    return out


class ConvShapeNHWC:
    """Memory shapes of the NHWC tensors (filters KRSC) and their views as NCHW/KCRS."""

    def __init__(self, sh: ConvShape) -> None:
        self.sh = sh

    def arrays(self) -> dict[str, tuple[tuple[int, ...], int]]:
        sh = self.sh
        return {"x": ((sh.n, sh.h, sh.w, sh.c), SEED_X), "w": ((sh.k, sh.r, sh.s, sh.c // sh.groups), SEED_W),
                "b": ((sh.k,), SEED_B), "dy": ((sh.n, sh.p, sh.q, sh.k), SEED_DY),
                "dx0": ((sh.n, sh.h, sh.w, sh.c), SEED_DX0)}

    @staticmethod
    def to_nchw(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a.transpose(0, 3, 1, 2)) if a.ndim == 4 else a


def from_layout(sh: ConvShape, got: CudaConvRun, layout: str) -> CudaConvRun:
    """Device results (flat, in `layout`'s memory order) as NCHW / KCRS arrays."""
    if layout == "nchw":
        return got

    def nchw(a: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
        return ConvShapeNHWC.to_nchw(np.asarray(a).reshape(shape))

    return {**got, "y": nchw(got["y"], (sh.n, sh.p, sh.q, sh.k)), "dx": nchw(got["dx"], (sh.n, sh.h, sh.w, sh.c)),
            "dw": nchw(got["dw"], (sh.k, sh.r, sh.s, sh.c // sh.groups))}
