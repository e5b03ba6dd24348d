"""GEMM: C = op(A) @ op(B), OpenBLAS on the CPU and cuBLAS on the GPU, timed by the native harness
and checked, untimed, against a float64 reference."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from .._fault import corrupt, fault_count
from .._native import _core, require_cuda
from ..common import env
from ..common.errors import UsageError
from ..common.hostmem import require_device, require_host
from ..common.measurement import Measurement, check_device, check_threads, check_timing
from ..common.output import KERNEL_COLUMNS, Column
from ..common.units import option_argv

CPU_DTYPES = ("float32", "float64")
CUDA_DTYPES = ("float32", "tf32", "float16", "bfloat16", "float64")
# Tolerance on max_ij |C - R|_ij / (|A| |B|)_ij, the error relative to the magnitudes summed.
# Inputs are k/128 (exact in every dtype), so R is exact and only the kernel's accumulation and
# the output's rounding count.
TOLERANCE = {"float64": 1e-12, "float32": 2e-5, "tf32": 2e-5, "float16": 2e-3, "bfloat16": 1e-2}
CHECK_ROWS = 128  # rows of C compared with the reference: large GEMMs stay cheap to check
_NUMPY_DTYPE = {"float32": np.float32, "float64": np.float64}


@dataclass(frozen=True)
class GemmRequest:
    """One GEMM shape to time, checked once when made; to_argv() is the `gdlbench gemm` command
    that times it again. device 'auto': cuda when a GPU is visible (the result says which ran)."""

    m: int = 2048
    n: int = 2048
    k: int = 2048
    dtype: str = "float32"
    device: str = "auto"
    iters: int = 20
    warmup: int = 5
    threads: int | None = None
    check: bool = True
    trans_a: bool = False
    trans_b: bool = False
    seed: int = 1

    def __post_init__(self) -> None:
        validate_shape(self.m, self.n, self.k)
        check_timing(self.iters, self.warmup, "gemm")
        check_device(self.device, "gemm")
        check_threads(self.threads, "gemm")
        if self.dtype not in (*CPU_DTYPES, *CUDA_DTYPES):
            raise UsageError(f"gemm: unknown dtype {self.dtype!r} (cpu: {', '.join(CPU_DTYPES)}; "
                             f"cuda: {', '.join(CUDA_DTYPES)})")
        if not 0 <= self.seed < 2**63 - 1:
            raise UsageError(f"gemm: --seed must be from 0 to 2**63 - 2, got {self.seed}")

    def to_argv(self) -> list[str]:
        """gdlbench's arguments that time this shape again."""
        return ["gemm", *option_argv([
            ("-m", self.m), ("-n", self.n), ("-k", self.k), ("--dtype", self.dtype), ("--device", self.device),
            ("--iters", self.iters), ("--warmup", self.warmup), ("--threads", self.threads),
            ("--ta", self.trans_a), ("--tb", self.trans_b), ("--no-check", not self.check), ("--seed", self.seed)])]


@dataclass
class GemmResult:
    """One GEMM shape timed: its Measurement, TFLOP/s and the float64 check."""

    command: ClassVar[str] = "gemm"
    # the table the CLI prints (gdlbench.Compare)
    COLUMNS: ClassVar[list[Column]] = [
        Column("m", "m"), Column("n", "n"), Column("k", "k"), Column("dtype", "dtype"), *KERNEL_COLUMNS]
    m: int
    n: int
    k: int
    dtype: str
    device: str
    threads: int | None
    trans_a: bool
    trans_b: bool
    measurement: Measurement
    check: dict[str, Any] | None = field(default=None)
    request: GemmRequest | None = field(default=None, compare=False)  # what was asked (to_argv())

    @property
    def tflops(self) -> float:
        return 2.0 * self.m * self.n * self.k / (self.measurement.median * 1e-6) / 1e12

    @property
    def passed(self) -> bool:
        return self.check is None or self.check["passed"]

    def to_dict(self) -> dict[str, Any]:
        row = {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype, "device": self.device,
               "threads": self.threads, "trans_a": self.trans_a, "trans_b": self.trans_b,
               **self.measurement.to_dict(), "tflops": self.tflops}
        row.pop("clock"), row.pop("region")
        if self.check is not None:
            row.update(max_rel_error=self.check["max_rel_error"], tolerance=self.check["tolerance"],
                       wrong=self.check["wrong"])
        return row


def validate_shape(m: int, n: int, k: int) -> None:
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, (int, np.integer)) or v <= 0:
            raise UsageError(f"gemm: {name} must be a positive integer, got {v!r}")
        if v > 2**31 - 1:
            raise UsageError(f"gemm: {name}={v} exceeds the BLAS limit of 2^31-1")


def _op(x: np.ndarray, trans: bool) -> np.ndarray:
    return x.T if trans else x


def check_rows(m: int) -> np.ndarray:
    """Evenly spread row indices (first and last included) that the check compares."""
    return np.unique(np.linspace(0, m - 1, num=min(m, CHECK_ROWS)).round().astype(np.int64))


def compare(c_rows: np.ndarray, a: np.ndarray, b: np.ndarray, rows: np.ndarray, trans_a: bool, trans_b: bool,
            dtype: str) -> dict[str, Any]:
    """Compare rows of C with the float64 reference op(A)[rows] @ op(B)."""
    a64 = _op(a.astype(np.float64), trans_a)[rows]
    b64 = _op(b.astype(np.float64), trans_b)
    ref = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    got = corrupt(c_rows, ref, scale, fault_count("gemm"))  # test-only; otherwise a float64 copy
    err = np.abs(got - ref) / np.maximum(scale, np.finfo(np.float64).tiny)
    tol = TOLERANCE[dtype]
    wrong = int(np.count_nonzero(~(err <= tol)))  # NaN and inf are wrong
    worst = float(np.max(err, where=np.isfinite(err), initial=0.0))  # the JSON holds finite numbers only
    return {"max_rel_error": worst, "tolerance": tol, "wrong": wrong,
            "checked_rows": int(rows.size), "passed": wrong == 0}


def gemm(m: int | GemmRequest = 2048, n: int = 2048, k: int = 2048, dtype: str = "float32", device: str = "auto",
         *, iters: int = 20, warmup: int = 5, threads: int | None = None, check: bool = True,
         trans_a: bool = False, trans_b: bool = False, a: Any = None, b: Any = None, seed: int = 1) -> GemmResult:
    """Time C = op(A) @ op(B): a GemmRequest, or its fields as arguments. Give sizes (random
    inputs), or arrays `a` and `b` (numpy -> CPU, any object with __cuda_array_interface__, e.g.
    CuPy -> GPU); their shapes then set m, n and k."""
    if (a is None) != (b is None):
        raise UsageError("gemm: give both a and b, or neither")
    if a is not None:
        check_timing(iters, warmup, "gemm")
        check_threads(threads, "gemm")
        return _gemm_arrays(a, b, iters=iters, warmup=warmup, threads=threads, check=check,
                            trans_a=trans_a, trans_b=trans_b)
    req = m if isinstance(m, GemmRequest) else GemmRequest(m, n, k, dtype, device, iters, warmup, threads, check,
                                                            trans_a, trans_b, seed)
    return run(req)


def run(req: GemmRequest) -> GemmResult:
    """Time one request (random inputs of its seed); the result carries it."""
    dev, _ = env.resolve_device(req.device)
    if dev == "cpu":
        result = _gemm_cpu(req.m, req.n, req.k, req.dtype, req.iters, req.warmup, req.threads, req.check,
                           req.trans_a, req.trans_b, req.seed)
    else:
        result = _gemm_cuda(req.m, req.n, req.k, req.dtype, req.iters, req.warmup, req.check, req.trans_a,
                            req.trans_b, req.seed)
    return replace(result, request=req)


def _shape_of(m: int, n: int, k: int, trans_a: bool, trans_b: bool) -> tuple[tuple[int, int], tuple[int, int]]:
    return ((k, m) if trans_a else (m, k)), ((n, k) if trans_b else (k, n))


def _gemm_cpu(m: int, n: int, k: int, dtype: str, iters: int, warmup: int, threads: int | None, check: bool,
              trans_a: bool, trans_b: bool, seed: int) -> GemmResult:
    if dtype not in CPU_DTYPES:
        raise UsageError(f"gemm: dtype {dtype!r} is not available on cpu ({', '.join(CPU_DTYPES)})")
    np_dtype = _NUMPY_DTYPE[dtype]
    sa, sb = _shape_of(m, n, k, trans_a, trans_b)
    require_host((m * k + k * n + m * n) * np.dtype(np_dtype).itemsize, "gemm")
    a = np.empty(sa, dtype=np_dtype)
    b = np.empty(sb, dtype=np_dtype)
    _core.fill(a, seed)
    _core.fill(b, seed + 1)
    return _run_cpu(a, b, dtype, iters, warmup, threads, check, trans_a, trans_b)


def _run_cpu(a: np.ndarray, b: np.ndarray, dtype: str, iters: int, warmup: int, threads: int | None, check: bool,
             trans_a: bool, trans_b: bool) -> GemmResult:
    m = a.shape[1] if trans_a else a.shape[0]
    k = a.shape[0] if trans_a else a.shape[1]
    n = b.shape[0] if trans_b else b.shape[1]
    threads = threads or env.default_threads()
    c = np.zeros((m, n), dtype=a.dtype)  # zeros touches every page before timing
    _core.set_blas_threads(threads)
    samples = _core.gemm_time(a, b, c, trans_a=trans_a, trans_b=trans_b, warmup=warmup, iters=iters)
    meas = Measurement(samples, "steady-clock", "one cblas_?gemm call (output buffer preallocated)")
    result = GemmResult(m, n, k, dtype, "cpu", threads, trans_a, trans_b, meas)
    if check:
        rows = check_rows(m)
        result.check = compare(c[rows], a, b, rows, trans_a, trans_b, dtype)
    return result


def producer_stream(cai: dict[str, Any]) -> int | None:
    """The stream whose queued work must finish before an array is read (__cuda_array_interface__
    v3): None when the producer names none (nothing to wait for), else 1 (the legacy default
    stream), 2 (the per-thread default stream) or a cudaStream_t. gdlbench's own stream is
    non-blocking, so it does not wait for any of these by itself."""
    stream = cai.get("stream")
    if stream is None:
        return None
    if isinstance(stream, bool) or not isinstance(stream, int) or stream <= 0:
        raise UsageError(f"device array: __cuda_array_interface__ stream must be None or a positive integer "
                         f"(0 is forbidden as ambiguous), got {stream!r}")
    return stream


def _cuda_ptr(x: Any) -> tuple[int, tuple[int, ...], str, int | None]:
    cai = x.__cuda_array_interface__
    if cai.get("strides") is not None:  # None means C-contiguous
        itemsize = np.dtype(cai["typestr"]).itemsize
        expected = tuple(int(np.prod(cai["shape"][i + 1:])) * itemsize for i in range(len(cai["shape"])))
        if tuple(cai["strides"]) != expected:
            raise UsageError("gemm: device arrays must be C-contiguous")
    return int(cai["data"][0]), tuple(cai["shape"]), np.dtype(cai["typestr"]).name, producer_stream(cai)


def _gemm_arrays(a: Any, b: Any, *, iters: int, warmup: int, threads: int | None, check: bool, trans_a: bool,
                 trans_b: bool) -> GemmResult:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.dtype != b.dtype or a.dtype.name not in CPU_DTYPES or a.ndim != 2 or b.ndim != 2:
            raise UsageError("gemm: a and b must be 2-D numpy arrays of one dtype, float32 or float64")
        return _run_cpu(np.ascontiguousarray(a), np.ascontiguousarray(b), a.dtype.name, iters, warmup, threads,
                        check, trans_a, trans_b)
    if not (hasattr(a, "__cuda_array_interface__") and hasattr(b, "__cuda_array_interface__")):
        raise UsageError("gemm: a and b must both be numpy arrays or both device arrays (CuPy)")
    cuda = require_cuda()
    pa, shape_a, dt, stream_a = _cuda_ptr(a)
    pb, shape_b, dt_b, stream_b = _cuda_ptr(b)
    if dt != dt_b or dt not in ("float32", "float16", "float64") or len(shape_a) != 2 or len(shape_b) != 2:
        raise UsageError("gemm: device arrays must be 2-D, of one dtype: float32, float16 or float64")
    m, k = (shape_a[1], shape_a[0]) if trans_a else shape_a
    kb, n = (shape_b[1], shape_b[0]) if trans_b else shape_b
    if k != kb:
        raise UsageError(f"gemm: inner dimensions differ ({k} and {kb})")
    for stream in {stream_a, stream_b} - {None}:  # the producer's writes come first
        cuda.wait_for_stream(stream)
    c = cuda.DeviceBuffer(m * n * cuda.dtype_size(dt))
    samples = cuda.gemm_time(a=pa, b=pb, c=c.ptr, m=m, n=n, k=k, dtype=dt, trans_a=trans_a, trans_b=trans_b,
                              warmup=warmup, iters=iters)
    meas = Measurement(samples, "cuda-events", "one cublasGemmEx call")
    result = GemmResult(m, n, k, dt, "cuda", None, trans_a, trans_b, meas)
    if check:
        host_a, host_b = (_device_to_numpy(cuda, p, s, dt) for p, s in ((pa, shape_a), (pb, shape_b)))
        rows = check_rows(m)
        result.check = compare(_device_rows(cuda, c.ptr, m, n, dt, rows), host_a, host_b, rows, trans_a, trans_b, dt)
    return result


def _device_to_numpy(cuda: Any, ptr: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    raw = np.empty(int(np.prod(shape)) * cuda.dtype_size(dtype), dtype=np.uint8)
    cuda.copy_to_host(ptr, raw)
    return _decode(raw, dtype).reshape(shape)


def _decode(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Device bytes of `dtype` -> float32/float64 numpy values (bf16 has no numpy type: widen bits)."""
    if dtype == "bfloat16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if dtype == "float16":
        return raw.view(np.float16).astype(np.float32)
    if dtype == "float64":
        return raw.view(np.float64)
    return raw.view(np.float32)  # float32 and tf32


def _device_rows(cuda: Any, ptr: int, m: int, n: int, dtype: str, rows: np.ndarray) -> np.ndarray:
    size = cuda.dtype_size(dtype)
    out = np.empty((rows.size, n), dtype=np.float64)
    raw = np.empty(n * size, dtype=np.uint8)
    for i, r in enumerate(rows):
        cuda.copy_to_host(ptr + int(r) * n * size, raw)
        out[i] = _decode(raw, dtype)
    return out


def _gemm_cuda(m: int, n: int, k: int, dtype: str, iters: int, warmup: int, check: bool, trans_a: bool,
               trans_b: bool, seed: int) -> GemmResult:
    cuda = require_cuda()
    if dtype not in CUDA_DTYPES:
        raise UsageError(f"gemm: dtype {dtype!r} is not available on cuda ({', '.join(CUDA_DTYPES)})")
    size = cuda.dtype_size(dtype)
    require_device(cuda, (m * k + k * n + m * n) * size, "gemm")
    sa, sb = _shape_of(m, n, k, trans_a, trans_b)
    a = cuda.DeviceBuffer(m * k * size)
    b = cuda.DeviceBuffer(k * n * size)
    c = cuda.DeviceBuffer(m * n * size)
    cuda.fill(ptr=a.ptr, count=m * k, dtype=dtype, seed=seed)
    cuda.fill(ptr=b.ptr, count=k * n, dtype=dtype, seed=seed + 1)
    samples = cuda.gemm_time(a=a.ptr, b=b.ptr, c=c.ptr, m=m, n=n, k=k, dtype=dtype, trans_a=trans_a,
                              trans_b=trans_b, warmup=warmup, iters=iters)
    meas = Measurement(samples, "cuda-events", "one cublasGemmEx call")
    result = GemmResult(m, n, k, dtype, "cuda", None, trans_a, trans_b, meas)
    if check:
        # The host regenerates the device's inputs bit for bit (same generator, exact values).
        host_a = np.empty(sa, dtype=np.float32)
        host_b = np.empty(sb, dtype=np.float32)
        _core.fill(host_a, seed)
        _core.fill(host_b, seed + 1)
        rows = check_rows(m)
        result.check = compare(_device_rows(cuda, c.ptr, m, n, dtype, rows), host_a, host_b, rows, trans_a,
                               trans_b, dtype)
    return result
