"""Convolution: the CPU layer and the cuDNN layer against a float64 direct convolution, the layer
lists, the result object and the CLI's contract."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import requires_gpu, run_cli

import gdlbench
from gdlbench import _core
from gdlbench.primitives import conv_layers
from gdlbench.primitives.conv import (
    TOLERANCE,
    ConvShape,
    check_cpu,
    check_inputs,
    compare,
    conv,
    reference,
    run_cpu,
)

USER_NET = Path(__file__).parent / "data" / "convnet.json"  # a user's net in gdlbench/nets' format

# Small shapes that cross every code path of the CPU layer: im2col with and without padding,
# stride, dilation, groups (including depthwise), bias, 1x1 with and without im2col, several
# samples per GEMM (small P*Q) and one (large P*Q), batch smaller and larger than the threads.
SHAPES = [
    ConvShape(2, 3, 7, 7, 4, 3, 3, (1, 1), (1, 1)),
    ConvShape(2, 4, 9, 8, 6, 3, 2, (2, 1), (1, 0), (1, 2), 2, True),
    ConvShape(3, 8, 5, 5, 4, 1, 1),
    ConvShape(1, 8, 5, 5, 4, 1, 1, (2, 2)),
    ConvShape(5, 6, 3, 3, 4, 1, 1, groups=2, bias=True),
    ConvShape(2, 6, 11, 11, 6, 5, 5, (3, 3), (2, 2), (1, 1), 3, True),
    ConvShape(1, 6, 6, 6, 6, 3, 3, (1, 1), (1, 1), groups=6),
    ConvShape(3, 8, 32, 32, 4, 1, 1, bias=True),
    ConvShape(3, 5, 24, 23, 7, 3, 3, (1, 1), (1, 1), bias=True),
    ConvShape(4, 16, 7, 7, 8, 3, 3, (1, 1), (1, 1)),
    ConvShape(2, 3, 15, 15, 4, 11, 11, (4, 4), (0, 0)),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.n}x{s.c}x{s.h}x{s.w}k{s.k}r{s.r}s{s.s}g{s.groups}")
def test_cpu_conv_matches_float64_reference(shape, threads):
    _core.set_compute_threads(threads)
    _core.set_blas_threads(threads)
    chk = check_cpu(shape)
    assert chk["passed"], chk
    assert set(chk["per_pass"]) == {"fwd", "bwd-data", "bwd-filter"}


def test_reference_against_an_independent_loop():
    """The numpy reference itself, against the definition written as plain loops."""
    sh = ConvShape(2, 4, 5, 6, 4, 3, 2, (2, 1), (1, 1), (1, 2), 2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((sh.n, sh.c, sh.h, sh.w))
    w = rng.standard_normal((sh.k, sh.c // sh.groups, sh.r, sh.s))
    dy = rng.standard_normal((sh.n, sh.k, sh.p, sh.q))
    ref = reference(sh, x, w, dy)
    y = np.zeros((sh.n, sh.k, sh.p, sh.q))
    dx = np.zeros_like(x)
    dw = np.zeros_like(w)
    cg, kg = sh.c // sh.groups, sh.k // sh.groups
    for n in range(sh.n):
        for k in range(sh.k):
            for p in range(sh.p):
                for q in range(sh.q):
                    for ci in range(cg):
                        c = (k // kg) * cg + ci
                        for r in range(sh.r):
                            for s in range(sh.s):
                                h = p * sh.stride[0] - sh.pad[0] + r * sh.dilation[0]
                                ww = q * sh.stride[1] - sh.pad[1] + s * sh.dilation[1]
                                if 0 <= h < sh.h and 0 <= ww < sh.w:
                                    y[n, k, p, q] += x[n, c, h, ww] * w[k, ci, r, s]
                                    dx[n, c, h, ww] += dy[n, k, p, q] * w[k, ci, r, s]
                                    dw[k, ci, r, s] += dy[n, k, p, q] * x[n, c, h, ww]
    np.testing.assert_allclose(ref["y"], y, atol=1e-12)
    np.testing.assert_allclose(ref["dx"], dx, atol=1e-12)
    np.testing.assert_allclose(ref["dw"], dw, atol=1e-12)


def test_backward_data_accumulates_and_backward_params_overwrites():
    sh = ConvShape(2, 4, 6, 6, 4, 3, 3, (1, 1), (1, 1), bias=True)
    inputs = check_inputs(sh)
    got = run_cpu(sh, inputs)
    zero = run_cpu(sh, {**inputs, "dx0": np.zeros_like(inputs["dx0"])})
    np.testing.assert_allclose(got["dx"], zero["dx"] + inputs["dx0"].ravel(), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(got["dw"], zero["dw"])  # not summed onto the previous run's gradient
    assert compare(sh, got, inputs, "float32")["passed"]


def test_check_detects_a_wrong_result():
    sh = ConvShape(1, 2, 5, 5, 3, 3, 3, (1, 1), (1, 1))
    inputs = check_inputs(sh)
    got = run_cpu(sh, inputs)
    got["y"] = got["y"].copy()
    got["y"][4] += 0.01
    bad = compare(sh, got, inputs, "float32")
    assert not bad["passed"] and bad["wrong"] == 1 and bad["per_pass"]["fwd"] > TOLERANCE["float32"]


def test_network_spec_with_pair_attributes():
    """Network.layer_specs() writes kernel/stride/pad/dilation as [h, w]; the layer reads them."""
    sh = ConvShape(2, 4, 8, 8, 6, 3, 3, (2, 2), (1, 1), (1, 1), 2, True)
    spec = sh.spec()
    spec["attrs"] = {"out_channels": 6, "kernel": [3, 3], "stride": [2, 2], "pad": [1, 1], "dilation": [1, 1],
                     "groups": 2, "bias": True}
    bench = _core.LayerBench(spec, 2)
    assert len(bench.time("fwd", 0, 1)) == 1


@pytest.mark.parametrize("bad, message", [
    ({"out_shape": [6, 5, 5]}, "out_shape"),
    ({"param_shapes": [[6, 2, 3, 3]]}, "param_shapes"),
    ({"attrs": {"out_channels": 6, "kernel_h": 3, "kernel_w": 3, "groups": 4}}, "divisible"),
    ({"attrs": {"out_channels": 6, "kernel_h": 13, "kernel_w": 3}}, "larger"),
])
def test_layer_rejects_bad_specs(bad, message):
    spec = {**ConvShape(1, 4, 8, 8, 6, 3, 3).spec(), **bad}
    with pytest.raises(ValueError, match=message):
        _core.LayerBench(spec, 1)


def test_api_result_rows():
    rs = conv(2, 8, 12, 12, 8, 3, 3, stride=1, pad=1, passes="all", device="cpu", iters=3, warmup=1, threads=1)
    assert [r.pass_ for r in rs] == ["fwd", "bwd-data", "bwd-filter"]
    for r in rs:
        d = r.to_dict()
        for key in ("layer", "n", "c", "h", "w", "k", "r", "s", "stride", "pad", "groups", "pass", "dtype", "layout",
                    "algo", "workspace_bytes", "time_us", "time_us_min", "time_us_p95", "time_us_max", "time_cv",
                    "samples_us", "tflops", "max_rel_error", "wrong"):
            assert key in d, key
        assert len(d["samples_us"]) == 3 and d["wrong"] == 0 and d["algo"] == "im2col"
        assert d["tflops"] == pytest.approx(2 * 2 * 8 * 8 * 9 * 12 * 12 / (d["time_us"] * 1e-6) / 1e12)


def test_layer_lists_come_from_the_nets():
    # Published counts: ResNet-50 has 53 convolutions (4.09 G multiply-adds at 224), GoogLeNet 57
    # (+ 2 auxiliary 1x1s in googlenet-aux), AlexNet 5.
    assert conv_layers.total_count("resnet50") == 53
    assert conv_layers.total_count("googlenet") == 57
    assert conv_layers.total_count("googlenet-aux") == 59
    assert conv_layers.total_count("alexnet") == 5
    resnet = conv_layers.of_net("resnet50")
    assert len(resnet) == 23  # distinct shapes
    assert sum(lay.count * lay.shape.flops / 2 for lay in resnet) == pytest.approx(4.087e9, rel=1e-3)
    for net in conv_layers.LISTED:
        for lay in conv_layers.of_net(net):
            assert lay.shape.n == 1 and lay.net == net
            lay.shape.validate()
    assert conv_layers.find("alexnet/conv2").shape.groups == 2
    # any layer of a merged shape finds the distinct layer that holds it
    assert conv_layers.find("resnet50/layer1.2.conv2") == conv_layers.find("resnet50/layer1.0.conv2")
    # a user's net in nets/ format
    user = conv_layers.of_net(str(USER_NET))
    assert [lay.name for lay in user] == ["convnet/conv1", "convnet/conv2", "convnet/conv3"]
    assert user[2].shape.groups == 2 and (user[2].shape.h, user[2].shape.c) == (8, 8)


def test_cli_conv_json(tmp_path):
    out = tmp_path / "c.json"
    p = run_cli("conv", "--device", "cpu", "-n", "2", "-c", "8", "-h", "9", "-k", "4", "-r", "3", "--pad", "1",
                "--iters", "3", "--warmup", "1", "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["command"] == "conv" and doc["timing"]["clock"] == "steady-clock"
    assert [r["pass"] for r in doc["rows"]] == ["fwd", "bwd-data", "bwd-filter"]
    row = doc["rows"][0]
    assert (row["n"], row["c"], row["h"], row["w"], row["k"], row["p"], row["q"]) == (2, 8, 9, 9, 4, 9, 9)
    assert row["wrong"] == 0 and len(row["samples_us"]) == 3
    for r in doc["rows"]:  # every pass checked and timed, at 2·N·K·C·R·S·P·Q / t
        _measured(r, flops=2 * 2 * 4 * 8 * 3 * 3 * 9 * 9)


def _measured(row: dict, flops: float) -> None:
    """A conv row's result: no wrong element within its tolerance, its time the median of its
    samples, and its TFLOP/s `flops` over that time."""
    assert row["wrong"] == 0 and row["max_rel_error"] <= row["tolerance"], row
    assert row["time_us"] > 0 and row["time_us"] == pytest.approx(statistics.median(row["samples_us"]), rel=1e-9)
    assert row["tflops"] == pytest.approx(flops / (row["time_us"] * 1e-6) / 1e12, rel=1e-9), row


def test_cli_conv_layer_and_net(tmp_path):
    out = tmp_path / "c.json"
    p = run_cli("conv", "--device", "cpu", "--layer", "alexnet/conv4", "-n", "1", "--pass", "fwd", "--iters", "1",
                "--warmup", "0", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "alexnet/conv4" in p.stdout and "TFLOP/s" in p.stdout
    (row,) = json.loads(out.read_text())["rows"]
    # AlexNet's conv4 (Krizhevsky et al.): 384 -> 384 channels, 3x3, 13x13, pad 1, in 2 groups
    geometry = (row["layer"], row["pass"], row["n"], row["c"], row["h"], row["w"], row["k"], row["r"], row["s"],
                row["p"], row["q"], row["groups"])
    assert geometry == ("alexnet/conv4", "fwd", 1, 384, 13, 13, 384, 3, 3, 13, 13, 2)
    _measured(row, flops=2 * 1 * 384 * (384 // 2) * 3 * 3 * 13 * 13)
    p = run_cli("conv", "--list")
    assert p.returncode == 0 and "resnet50/layer1.0.conv2" in p.stdout and "googlenet/inception_3a/5x5" in p.stdout
    p = run_cli("conv", "--net", "alexnet", "--list")
    assert p.returncode == 0 and "alexnet/conv5" in p.stdout and "resnet50" not in p.stdout, p.stdout
    assert p.stdout.startswith("alexnet: 5 distinct shapes, 5 convolutions")
    from gdlbench.primitives import conv_layers

    names = [line.split()[0] for line in p.stdout.splitlines() if line.startswith("  ")]
    assert names == [lay.name for lay in conv_layers.of_net("alexnet")]  # only the network asked for


def test_cli_conv_lists_and_measures_a_users_net(tmp_path):
    p = run_cli("conv", "--net", str(USER_NET), "--list")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "convnet: 3 distinct shapes, 3 convolutions"
    assert "convnet/conv3" in p.stdout and "groups 2" in p.stdout
    out = tmp_path / "c.json"
    p = run_cli("conv", "--device", "cpu", "--net", str(USER_NET), "-n", "2", "--pass", "fwd", "--iters", "1",
                "--warmup", "0", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "convnet/conv1" in p.stdout and "convnet/conv3" in p.stdout
    rows = json.loads(out.read_text())["rows"]
    # one forward row per distinct layer of the user's net, each checked and timed, at batch 2
    assert [(r["layer"], r["pass"], r["n"]) for r in rows] == [(f"convnet/conv{i}", "fwd", 2) for i in (1, 2, 3)]
    for r in rows:
        _measured(r, flops=2 * r["n"] * r["k"] * (r["c"] // r["groups"]) * r["r"] * r["s"] * r["p"] * r["q"])
    assert rows[2]["groups"] == 2 and (rows[2]["h"], rows[2]["c"]) == (8, 8)


@pytest.mark.parametrize("argv, message", [
    (["conv", "-n", "-1"], "positive"),
    (["conv", "-c", "0", "-h", "8", "-k", "4"], "positive"),
    (["conv", "-c", "4", "-h", "5", "-k", "4", "-r", "7"], "larger than the padded input"),
    (["conv", "-c", "6", "-h", "8", "-k", "4", "--groups", "4"], "divisible"),
    (["conv", "--layer", "resnet50/nope"], "unknown layer"),
    (["conv", "--net", "vgg"], "unknown network"),
    (["conv", "--layer", "alexnet/conv1", "--list"], "--list"),
    (["conv", "--layer", "alexnet/conv1", "-c", "3"], "not both"),
    (["conv", "--device", "cpu", "--dtype", "float16"], "not available on cpu"),
    (["conv", "--device", "cpu", "--algo", "winograd"], "unknown CPU algorithm"),
    (["conv", "--device", "cpu", "--layout", "nhwc"], "NCHW only"),
    (["conv", "--device", "cpu", "--all-algos"], "--all-algos"),
    (["conv", "--stride", "2x"], "--stride"),
    (["conv", "--pad", "-1", "-c", "4", "-h", "8", "-k", "4"], "padding"),
    (["conv", "--workspace-limit", "lots"], "workspace-limit"),
    (["conv", "--pass", "sideways"], "pass must be"),
    (["conv", "--pass", "fwd,fwd"], "once each"),
])
def test_cli_conv_bad_input_is_one_line_and_exit_2(argv, message):
    p = run_cli(*argv)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_cli_conv_cuda_without_gpu_is_a_clean_error():
    if gdlbench.cuda_status()[0] > 0:
        pytest.skip("a GPU is present")
    p = run_cli("conv", "--device", "cuda", "-c", "8", "-h", "8", "-k", "8")
    assert p.returncode == 2 and "no usable GPU" in p.stderr and "Traceback" not in p.stderr


# --- GPU: every pass of the cuDNN layer against the float64 reference and the CPU layer ---------

GPU_SHAPES = [
    ConvShape(2, 8, 9, 9, 16, 3, 3, (1, 1), (1, 1), bias=True),
    ConvShape(2, 16, 14, 14, 32, 1, 1),
    ConvShape(2, 16, 14, 14, 32, 1, 1, (2, 2)),
    ConvShape(2, 8, 11, 10, 8, 5, 3, (2, 1), (2, 1), (1, 2), 2, True),
    ConvShape(2, 64, 14, 14, 64, 3, 3, (1, 1), (1, 1)),
]


@requires_gpu
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", ["float32", "tf32", "float16", "bfloat16"])
def test_cuda_conv_matches_reference_and_cpu(dtype, layout):
    from gdlbench.primitives.conv import check_cuda
    for sh in GPU_SHAPES:
        chk = check_cuda(sh, dtype, layout)
        assert chk["passed"], (dtype, layout, sh, chk)


@requires_gpu
def test_cuda_conv_agrees_with_cpu_backend():
    from gdlbench.primitives.conv import run_cuda
    for sh in GPU_SHAPES:
        inputs = check_inputs(sh)
        cpu = run_cpu(sh, inputs)
        gpu = run_cuda(sh, "float32", "nchw")
        for key in ("y", "dx", "dw"):
            np.testing.assert_allclose(np.asarray(gpu[key]).ravel(), np.asarray(cpu[key]).ravel(), rtol=1e-4,
                                       atol=1e-3)


@requires_gpu
@pytest.mark.parametrize("algo", ["search", "heuristic"])
def test_cuda_conv_api_and_all_algos(algo):
    rs = conv(4, 32, 14, 14, 32, 3, 3, pad=1, device="cuda", dtype="float32", algo=algo, iters=3, warmup=1)
    assert {r.pass_ for r in rs} == {"fwd", "bwd-data", "bwd-filter"} and all(r.passed for r in rs)
    every = conv(4, 32, 14, 14, 32, 3, 3, pad=1, device="cuda", passes="fwd", all_algos=True, iters=2, warmup=1,
                 check=False)
    assert len({r.algo for r in every}) >= 2


@requires_gpu
def test_cuda_conv_named_algo_and_workspace_limit():
    rs = conv(2, 16, 14, 14, 16, 3, 3, pad=1, device="cuda", algo="fwd:IMPLICIT_GEMM,bwd-data:ALGO_1,bwd-filter:ALGO_1",
              iters=2, warmup=1)
    assert [r.algo for r in rs] == ["IMPLICIT_GEMM", "ALGO_1", "ALGO_1"] and all(r.passed for r in rs)
    rs = conv(2, 16, 14, 14, 16, 3, 3, pad=1, device="cuda", algo="search", workspace_limit=0, iters=2, warmup=1)
    assert all(r.workspace_bytes == 0 for r in rs)


# --- The host side of the GPU path, against a stand-in for _cuda that computes on the host --------

class _FakeCuda:
    """Plays _cuda.conv_check/conv_time: generates the inputs in the device's memory order (NHWC
    tensors, KRSC filters when layout is nhwc), convolves in float64 and returns the dtype's bytes."""

    @staticmethod
    def conv_algo_names():
        return {"fwd": ["IMPLICIT_GEMM", "FFT"], "bwd-data": ["ALGO_0", "ALGO_1"], "bwd-filter": ["ALGO_0", "ALGO_1"]}

    @staticmethod
    def _encode(a: np.ndarray, dtype: str) -> np.ndarray:
        a = np.ascontiguousarray(a, dtype=np.float32)
        if dtype == "float16":
            return a.astype(np.float16).view(np.uint8).ravel()
        if dtype == "bfloat16":  # round to nearest even on the upper 16 bits
            bits = a.view(np.uint32).astype(np.uint64)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            return bits.astype(np.uint16).view(np.uint8).ravel()
        return a.view(np.uint8).ravel()

    def conv_check(self, geometry, dtype, layout, mode, named, workspace_limit):
        g = geometry
        sh = ConvShape(g["n"], g["c"], g["h"], g["w"], g["k"], g["r"], g["s"], (g["stride_h"], g["stride_w"]),
                       (g["pad_h"], g["pad_w"]), (g["dilation_h"], g["dilation_w"]), g["groups"], bool(g["bias"]))
        nhwc = layout == "nhwc"

        def gen(shape_nchw, seed, is_filter=False):
            n, c, h, w = shape_nchw
            a = np.empty((n, h, w, c) if nhwc else shape_nchw, dtype=np.float32)
            _core.fill(a, seed)
            return a.transpose(0, 3, 1, 2) if nhwc else a

        x = gen((sh.n, sh.c, sh.h, sh.w), 11)
        w = gen((sh.k, sh.c // sh.groups, sh.r, sh.s), 5)
        dy = gen((sh.n, sh.k, sh.p, sh.q), 7)
        dx0 = gen((sh.n, sh.c, sh.h, sh.w), 13)
        b = np.empty(sh.k, dtype=np.float32)
        _core.fill(b, 6)
        ref = reference(sh, x, w, dy)
        y = ref["y"] + (b[None, :, None, None] if sh.bias else 0)
        out = {"y": y, "dx": ref["dx"] + dx0, "dw": ref["dw"]}
        raw = {k: self._encode(v.transpose(0, 2, 3, 1) if nhwc else v, dtype) for k, v in out.items()}
        if sh.bias:
            raw["db"] = self._encode(ref["db"], dtype)
        raw["algos"] = {"fwd": "IMPLICIT_GEMM", "bwd-data": "ALGO_1", "bwd-filter": "ALGO_1"}
        return raw

    def conv_time(self, geometry, dtype, layout, mode, named, workspace_limit, passes, all_algos, warmup, iters):
        rows = []
        for p in passes:
            for algo in (self.conv_algo_names()[p] if all_algos else [named.get(p, "IMPLICIT_GEMM")]):
                rows.append({"pass": p, "algo": algo, "workspace_bytes": 0, "samples_us": [1.0] * iters,
                             "status": "ok"})
            if all_algos:
                rows.append({"pass": p, "algo": "WINOGRAD", "workspace_bytes": 0, "samples_us": [],
                             "status": "not supported"})
        return rows


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_host_side_with_a_stand_in(monkeypatch, dtype, layout):
    conv_mod = sys.modules["gdlbench.primitives.conv"]  # the attribute gdlbench.conv is the function
    monkeypatch.setattr(conv_mod, "require_cuda", lambda: _FakeCuda())
    monkeypatch.setattr(conv_mod.env, "resolve_device", lambda d: ("cuda", "stand-in"))
    sh = ConvShape(2, 4, 6, 5, 6, 3, 2, (2, 1), (1, 1), (1, 1), 2, True)
    chk = conv_mod.check_cuda(sh, dtype, layout)
    assert chk["passed"], chk
    rs = conv(2, 4, 6, 5, 6, 3, 2, stride=(2, 1), pad=1, groups=2, device="cuda", dtype=dtype, layout=layout,
              algo="fwd:fft,bwd-data:ALGO_0,bwd-filter:ALGO_1", iters=2, warmup=0, bias=True)
    assert [r.algo for r in rs] == ["FFT", "ALGO_0", "ALGO_1"] and all(r.passed for r in rs)
    every = conv(2, 4, 6, 5, 6, 3, 2, device="cuda", dtype=dtype, layout=layout, all_algos=True, iters=2,
                 warmup=0, check=True, passes="fwd")
    assert all(r.check is not None and r.passed for r in every)
    assert [r.algo for r in every] == ["IMPLICIT_GEMM", "FFT"]  # the unsupported one is left out
    with pytest.raises(gdlbench.UsageError, match="unknown algorithm"):
        conv(2, 4, 6, 5, 6, 3, 2, device="cuda", algo="NOPE")
    with pytest.raises(gdlbench.UsageError, match="names no algorithm"):
        conv(2, 4, 6, 5, 6, 3, 2, device="cuda", algo="fwd:FFT")
    with pytest.raises(gdlbench.UsageError, match="not available on cuda"):
        conv(2, 4, 6, 5, 6, 3, 2, device="cuda", dtype="float64")


def test_gpu_host_side_a_missing_bias_gradient_fails_the_check(monkeypatch):
    """run_cuda gives db None when the device returned none; with a bias that is a failed check
    naming db, not a KeyError."""
    class NoBiasGradient(_FakeCuda):
        def conv_check(self, **kwargs):
            raw = super().conv_check(**kwargs)
            raw.pop("db", None)
            return raw

    conv_mod = sys.modules["gdlbench.primitives.conv"]
    monkeypatch.setattr(conv_mod, "require_cuda", lambda: NoBiasGradient())
    without = ConvShape(2, 4, 6, 5, 6, 3, 2, (1, 1), (1, 1), (1, 1), 1, False)
    assert conv_mod.run_cuda(without, "float32", "nchw")["db"] is None
    assert conv_mod.check_cuda(without, "float32", "nchw")["passed"]
    with_bias = ConvShape(2, 4, 6, 5, 6, 3, 2, (1, 1), (1, 1), (1, 1), 1, True)
    with pytest.raises(gdlbench.CheckFailed, match="no db"):
        conv_mod.check_cuda(with_bias, "float32", "nchw")
