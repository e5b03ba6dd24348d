"""Every CPU layer type against a float64 numpy reference (tests/layer_refs.py): forward, dx, dw,
through _core.LayerBench.run; the references of LRN, BN and softmax-xent are themselves checked
by finite differences. GPU layers are compared with the CPU layers on the same inputs."""

from __future__ import annotations

import layer_refs as ref
import numpy as np
import pytest
from helpers import requires_gpu

from gdlbench._native import _core, _cuda

RTOL, ATOL = 2e-4, 2e-5


def spec(type_, in_shapes, out_shape, attrs=None, param_shapes=None, name="t"):
    return {"name": name, "type": type_, "in_shapes": [list(s) for s in in_shapes], "out_shape": list(out_shape),
            "attrs": attrs or {}, "param_shapes": [list(s) for s in (param_shapes or [])]}


def run_layer(module, sp, batch, xs, dy, params=(), labels=None):
    """(y, [dx...], [dw...]) of module's LayerBench, reshaped to the batch shapes."""
    lb = module.LayerBench(sp, batch)
    y, dxs, dws = lb.run([np.ascontiguousarray(x, np.float32) for x in xs], np.ascontiguousarray(dy, np.float32),
                         [np.ascontiguousarray(p, np.float32) for p in params],
                         [] if labels is None else [int(v) for v in labels])
    return (np.asarray(y).reshape((batch, *sp["out_shape"])),
            [np.asarray(d).reshape(x.shape) for d, x in zip(dxs, xs, strict=True)],
            [np.asarray(w).reshape(p.shape) for w, p in zip(dws, params, strict=True)])


def close(got, want, what, rtol=RTOL, atol=ATOL):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale, err_msg=what)


def rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---- the cases: (id, spec, batch, inputs, params, labels, reference(x64..., dy64, p64...)) ----------------

def cases():
    rng = np.random.default_rng(1234)
    out = []

    def add(id_, sp, batch, xs, params=(), labels=None, fn=None):
        out.append(pytest.param(sp, batch, xs, list(params), labels, fn, id=id_))

    x = rand(rng, 3, 4, 5, 5)
    add("fc-chw-bias", spec("fc", [(4, 5, 5)], (7,), {"out_features": 7, "bias": 1}, [(7, 100), (7,)]), 3,
        [x], [rand(rng, 7, 100, scale=0.1), rand(rng, 7)], fn=lambda x, dy, w, b: ref.fc(x, dy, w, b))
    add("fc-nobias", spec("fc", [(33,)], (10,), {"out_features": 10, "bias": 0}, [(10, 33)]), 5,
        [rand(rng, 5, 33)], [rand(rng, 10, 33)], fn=lambda x, dy, w: ref.fc(x, dy, w))
    add("relu", spec("relu", [(3, 4, 4)], (3, 4, 4)), 2, [rand(rng, 2, 3, 4, 4)], fn=ref.relu)
    # AlexNet/GoogLeNet-like: 3x3 stride 2, ceil mode (Caffe); 3x3 stride 1 pad 1; 2x2 floor; a
    # padded ceil-mode case whose last window overhangs the padding (the avgpool divisor case).
    geoms = [(3, 3, 2, 2, 0, 0, 1, 9, 9), (3, 3, 1, 1, 1, 1, 1, 6, 7), (2, 2, 2, 2, 0, 0, 0, 7, 7),
             (3, 3, 2, 2, 1, 1, 1, 8, 8), (5, 3, 3, 2, 2, 1, 1, 10, 9)]
    for kind in ("max", "avg"):
        for kh, kw, sh, sw, ph, pw, cm, h, w in geoms:
            oh, ow = ref.pool_out(h, kh, sh, ph, cm), ref.pool_out(w, kw, sw, pw, cm)
            attrs = dict(kernel_h=kh, kernel_w=kw, stride_h=sh, stride_w=sw, pad_h=ph, pad_w=pw, ceil_mode=cm)
            add(f"{kind}pool-k{kh}x{kw}s{sh}x{sw}p{ph}x{pw}c{cm}-{h}x{w}",
                spec(f"{kind}pool", [(3, h, w)], (3, oh, ow), attrs), 2, [rand(rng, 2, 3, h, w)],
                fn=lambda x, dy, kind=kind, a=(kh, kw, sh, sw, ph, pw, bool(cm)): ref.pool(x, dy, kind, *a))
    add("global_avgpool", spec("global_avgpool", [(5, 7, 7)], (5, 1, 1)), 3, [rand(rng, 3, 5, 7, 7)],
        fn=lambda x, dy: (lambda r: (r[0].reshape(dy.shape), r[1], r[2]))(ref.global_avgpool(x, dy)))
    for size, c in ((5, 8), (3, 2), (5, 3)):
        # alpha larger than AlexNet's 1e-4 tests the cross term; beta 0.75 takes the sqrt path, 0.6 pow
        a = dict(size=size, alpha=1e-2, beta=0.75 if size == 5 else 0.6, k=2.0)
        add(f"lrn-size{size}-c{c}", spec("lrn", [(c, 4, 5)], (c, 4, 5), a), 2, [rand(rng, 2, c, 4, 5, scale=3)],
            fn=lambda x, dy, a=a: ref.lrn(x, dy, a["size"], a["alpha"], a["beta"], a["k"]))
    add("bn-chw", spec("bn", [(4, 3, 5)], (4, 3, 5), {"eps": 1e-5}, [(4,), (4,)]), 3,
        [rand(rng, 3, 4, 3, 5, scale=2) + 1], [rand(rng, 4) + 1, rand(rng, 4)],
        fn=lambda x, dy, g, b: ref.bn(x, dy, g, b, 1e-5))
    add("bn-fc", spec("bn", [(6,)], (6,), {"eps": 1e-3}, [(6,), (6,)]), 8, [rand(rng, 8, 6)],
        [rand(rng, 6), rand(rng, 6)], fn=lambda x, dy, g, b: ref.bn(x, dy, g, b, 1e-3))
    add("add", spec("add", [(3, 4, 4), (3, 4, 4)], (3, 4, 4)), 2, [rand(rng, 2, 3, 4, 4), rand(rng, 2, 3, 4, 4)],
        fn=lambda a, b, dy: (a + b, [dy, dy], []))
    ins = [rand(rng, 2, c, 3, 3) for c in (2, 5, 1)]
    add("concat", spec("concat", [(2, 3, 3), (5, 3, 3), (1, 3, 3)], (8, 3, 3)), 2, ins,
        fn=lambda a, b, c, dy: (np.concatenate([a, b, c], 1), [dy[:, :2], dy[:, 2:7], dy[:, 7:]], []))
    add("flatten", spec("flatten", [(3, 2, 2)], (12,)), 2, [rand(rng, 2, 3, 2, 2)],
        fn=lambda x, dy: (x.reshape(2, 12), [dy.reshape(x.shape)], []))
    for ratio in (0.5, 0.1):
        def drop(x, dy, ratio=ratio):
            keep = ref.dropout_keep(7, x.size, ratio).reshape(x.shape)
            return x * keep / (1 - ratio), [dy * keep / (1 - ratio)], []
        add(f"dropout-{ratio}", spec("dropout", [(4, 8, 8)], (4, 8, 8), {"ratio": ratio, "seed": 7}), 3,
            [rand(rng, 3, 4, 8, 8)], fn=drop)
    labels = [3, 0, 9, 3]
    add("softmax_xent", spec("softmax_xent", [(10,)], (1,)), 4, [rand(rng, 4, 10, scale=3)], labels=labels,
        fn=lambda x, dy, lab=labels: (lambda r: (r[0].reshape(4, 1), r[1], r[2]))(ref.softmax_xent(x, np.array(lab))))
    add("softmax_xent-c11", spec("softmax_xent", [(7, 1, 1)], (1,)), 3, [rand(rng, 3, 7, 1, 1, scale=20)],
        labels=[6, 1, 0],
        fn=lambda x, dy: (lambda r: (r[0].reshape(3, 1), r[1], r[2]))(ref.softmax_xent(x, np.array([6, 1, 0]))))
    return out


CASES = cases()


@pytest.mark.parametrize("sp, batch, xs, params, labels, fn", CASES)
def test_cpu_layer_matches_numpy(sp, batch, xs, params, labels, fn):
    rng = np.random.default_rng(99)
    dy = rand(rng, batch, *sp["out_shape"])
    y, dxs, dws = run_layer(_core, sp, batch, xs, dy, params, labels)
    x64 = [x.astype(np.float64) for x in xs]
    p64 = [p.astype(np.float64) for p in params]
    if labels is not None:
        ry, rdx, rdw = fn(*x64, dy.astype(np.float64))
    else:
        ry, rdx, rdw = fn(*x64, dy.astype(np.float64), *p64)
    close(y, np.asarray(ry).reshape(y.shape), "forward")
    for i, (g, r) in enumerate(zip(dxs, rdx, strict=True)):
        close(g, r, f"dx[{i}]")
    for i, (g, r) in enumerate(zip(dws, rdw, strict=True)):
        close(g, r, f"dw[{i}]")


def test_backward_data_accumulates_and_params_overwrite():
    """Backward-data adds onto the input gradient it is given (dx0 + dL/dx); the parameter
    gradients are overwritten: two runs, from different dx0, give dx0 + the same dL/dx and the
    numpy reference's dw both times."""
    rng = np.random.default_rng(5)
    sp = spec("fc", [(6,)], (4,), {"out_features": 4}, [(4, 6), (4,)])
    lb = _core.LayerBench(sp, 3)
    x, dy, w, b = rand(rng, 3, 6), rand(rng, 3, 4), rand(rng, 4, 6), rand(rng, 4)
    _, rdx, rdw = ref.fc(x.astype(np.float64), dy.astype(np.float64), w.astype(np.float64), b.astype(np.float64))
    for dx0 in (rand(rng, 3, 6), np.full((3, 6), 100.0, np.float32)):
        _, dxs, dws = lb.run([x], dy, [w, b], [], [dx0])
        np.testing.assert_allclose(dxs[0].reshape(3, 6), dx0 + rdx[0], rtol=0, atol=1e-5)
        np.testing.assert_allclose(dws[0].reshape(4, 6), rdw[0], rtol=0, atol=1e-5)  # not summed over runs
        np.testing.assert_allclose(dws[1], rdw[1], rtol=0, atol=1e-5)


# ---- the references' own gradients, by central differences (float64, tiny shapes) -------------------

def test_lrn_reference_gradient_is_the_derivative():
    rng = np.random.default_rng(2)
    x, dy = rng.standard_normal((1, 5, 2, 2)) * 2, rng.standard_normal((1, 5, 2, 2))
    a = (3, 0.3, 0.75, 1.5)
    _, (dx,), _ = ref.lrn(x, dy, *a)
    num = ref.numeric_grad(lambda: float((ref.lrn_forward(x, *a)[0] * dy).sum()), x)
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-8)


def test_bn_reference_gradient_is_the_derivative():
    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal((3, 2, 2, 2)), rng.standard_normal((3, 2, 2, 2))
    g, b = rng.standard_normal(2), rng.standard_normal(2)
    _, (dx,), (dg, db) = ref.bn(x, dy, g, b, 1e-5)
    loss = lambda: float((ref.bn_forward(x, g, b, 1e-5)[0] * dy).sum())  # noqa: E731
    np.testing.assert_allclose(dx, ref.numeric_grad(loss, x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dg, ref.numeric_grad(loss, g), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(db, ref.numeric_grad(loss, b), rtol=1e-5, atol=1e-7)


def test_softmax_xent_reference_gradient_is_the_derivative():
    rng = np.random.default_rng(4)
    x, labels = rng.standard_normal((3, 5)) * 2, np.array([4, 0, 2])
    _, (dx,), _ = ref.softmax_xent(x, labels)
    num = ref.numeric_grad(lambda: ref.softmax_xent_forward(x, labels)[0], x)
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-9)


def test_softmax_xent_mean_loss_matches_log_sum_exp():
    x = np.array([[1000.0, 0.0, -1000.0], [0.0, 0.0, 0.0]], np.float32)  # no overflow, no log(0)
    y, _, _ = run_layer(_core, spec("softmax_xent", [(3,)], (1,)), 2, [x], np.zeros((2, 1), np.float32),
                        labels=[2, 1])
    assert y[0, 0] == pytest.approx((2000.0 + np.log(3.0)) / 2, rel=1e-6) and y[1, 0] == 0


def test_dropout_keeps_about_one_minus_ratio():
    keep = ref.dropout_keep(0, 100_000, 0.3)
    assert abs(keep.mean() - 0.7) < 0.01


@pytest.mark.parametrize("bad, message", [
    (spec("fc", [(6,)], (4,), {"out_features": 5}, [(5, 6), (5,)]), "out_features"),
    (spec("fc", [(6,)], (4,), {"out_features": 4}, [(4, 7), (4,)]), "weight"),
    (spec("maxpool", [(3, 8, 8)], (3, 3, 3), {"kernel_h": 3, "kernel_w": 3, "stride_h": 2, "stride_w": 2}), "out_shape"),
    (spec("avgpool", [(3, 8, 8)], (3, 8, 8), {"kernel_h": 0, "kernel_w": 3}), "kernel"),
    (spec("lrn", [(3, 4, 4)], (3, 4, 4), {"size": 4}), "odd"),
    (spec("bn", [(3, 4, 4)], (3, 4, 4), {}, [(3,)]), "param_shapes"),
    (spec("concat", [(2, 3, 3), (2, 3, 3)], (5, 3, 3)), "sum"),
    (spec("add", [(3,)], (3,)), "two inputs"),
    (spec("dropout", [(3,)], (3,), {"ratio": 1.0}), "ratio"),
    (spec("softmax_xent", [(3,)], (3,)), "{1}"),
    (spec("nosuchlayer", [(3,)], (3,)), "unknown type"),
])
def test_bad_specs_are_value_errors(bad, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
        _core.LayerBench(bad, 2)


def test_softmax_xent_bad_label_is_an_error():
    lb = _core.LayerBench(spec("softmax_xent", [(3,)], (1,)), 2)
    with pytest.raises(ValueError, match="label"):
        lb.run([np.zeros((2, 3), np.float32)], np.zeros(2, np.float32), [], [0, 3])


@pytest.mark.parametrize("type_", ["fc", "maxpool", "lrn", "bn", "softmax_xent"])
def test_layer_timing_runs(type_):
    sps = {"fc": spec("fc", [(64,)], (32,), {"out_features": 32}, [(32, 64), (32,)]),
           "maxpool": spec("maxpool", [(8, 9, 9)], (8, 4, 4), {"kernel_h": 3, "kernel_w": 3, "stride_h": 2, "stride_w": 2}),
           "lrn": spec("lrn", [(8, 6, 6)], (8, 6, 6), {"size": 5, "alpha": 1e-4, "beta": 0.75, "k": 1}),
           "bn": spec("bn", [(8, 6, 6)], (8, 6, 6), {"eps": 1e-5}, [(8,), (8,)]),
           "softmax_xent": spec("softmax_xent", [(10,)], (1,))}
    lb = _core.LayerBench(sps[type_], 4)
    for p in ("fwd", "bwd-data", "bwd-filter", "bwd"):
        s = lb.time(p, 1, 2)
        assert len(s) == 2 and min(s) >= 0


# ---- GPU: each CUDA layer against the CPU layer on the same inputs --------------------------------------

@requires_gpu
@pytest.mark.parametrize("sp, batch, xs, params, labels, fn", CASES)
def test_cuda_layer_matches_cpu(sp, batch, xs, params, labels, fn):
    rng = np.random.default_rng(99)
    dy = rand(rng, batch, *sp["out_shape"])
    cpu = run_layer(_core, sp, batch, xs, dy, params, labels)
    gpu = run_layer(_cuda, sp, batch, xs, dy, params, labels)
    close(gpu[0], cpu[0], "forward")
    for i, (g, c) in enumerate(zip(gpu[1], cpu[1], strict=True)):
        close(g, c, f"dx[{i}]")
    for i, (g, c) in enumerate(zip(gpu[2], cpu[2], strict=True)):
        close(g, c, f"dw[{i}]")


TIE_POOL = spec("maxpool", [(2, 7, 7)], (2, 3, 3), {"kernel_h": 3, "kernel_w": 3, "stride_h": 2, "stride_w": 2,
                                                    "ceil_mode": 0})


def test_cpu_maxpool_sends_a_tied_maximums_gradient_to_the_first():
    """The rule both backends follow: the first maximum in row-major order takes the gradient."""
    sp = spec("maxpool", [(1, 2, 2)], (1, 1, 1), {"kernel_h": 2, "kernel_w": 2, "stride_h": 2, "stride_w": 2})
    x = np.full((1, 1, 2, 2), 3.0, np.float32)
    _, (dx,), _ = run_layer(_core, sp, 1, [x], np.full((1, 1, 1, 1), 5.0, np.float32))
    assert dx.ravel().tolist() == [5.0, 0.0, 0.0, 0.0]


@requires_gpu
def test_cuda_maxpool_ties_match_cpu():
    """Inputs of three values only, so most windows hold a tied maximum (cuDNN's MAX backward would
    pick any one of them; gdlbench's kernel picks the first, as the CPU does)."""
    rng = np.random.default_rng(7)
    x = rng.integers(0, 3, size=(4, 2, 7, 7)).astype(np.float32)
    dy = rand(rng, 4, 2, 3, 3)
    cpu = run_layer(_core, TIE_POOL, 4, [x], dy)
    gpu = run_layer(_cuda, TIE_POOL, 4, [x], dy)
    np.testing.assert_array_equal(gpu[0], cpu[0])
    close(gpu[1][0], cpu[1][0], "dx")


@requires_gpu
def test_cuda_layer_types_cover_cpu():
    assert set(_core.layer_types()) - {"conv"} <= set(_cuda.layer_types())


@requires_gpu
@pytest.mark.parametrize("type_", ["fc", "maxpool", "bn"])
def test_cuda_layer_timing_runs(type_):
    sp = {"fc": spec("fc", [(64,)], (32,), {"out_features": 32}, [(32, 64), (32,)]),
          "maxpool": spec("maxpool", [(8, 9, 9)], (8, 4, 4), {"kernel_h": 3, "kernel_w": 3, "stride_h": 2, "stride_w": 2}),
          "bn": spec("bn", [(8, 6, 6)], (8, 6, 6), {"eps": 1e-5}, [(8,), (8,)])}[type_]
    lb = _cuda.LayerBench(sp, 4)
    for p in ("fwd", "bwd-data", "bwd-filter", "bwd"):
        assert len(lb.time(p, 1, 2)) == 2


# ---- gdlbench layer and gdlbench.primitives.layers -----------------------------------------------------------

def test_builtin_layers_build_and_time():
    from gdlbench.primitives.layers import BUILTIN, LAYER_TYPES, time_layer

    assert set(LAYER_TYPES) <= set(_core.layer_types())
    for name, sp in BUILTIN.items():
        (r,) = time_layer({"name": name, **sp}, 1, "cpu", ("fwd",), iters=1, warmup=0)
        assert r.to_dict()["time_us"] > 0 and r.to_dict()["phase"] == "fwd"


def test_cli_layer_json(tmp_path):
    import json

    from helpers import run_cli

    out = tmp_path / "l.json"
    p = run_cli("layer", "--layer", "alexnet-loss,resnet50-avgpool", "-b", "2", "-n", "2", "--device", "cpu",
                "--pass", "fwd,bwd-data", "--json", str(out))
    assert p.returncode == 0, p.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["layer"], r["phase"]) for r in rows] == [("alexnet-loss", "fwd"), ("alexnet-loss", "bwd-data"),
                                                       ("resnet50-avgpool", "fwd"), ("resnet50-avgpool", "bwd-data")]
    # each timed, its GB/s its input's bytes over its time: AlexNet's 1000 class scores and ResNet-50's
    # 2048 x 7 x 7 features before the pool, fp32, batch 2
    for r in rows:
        in_bytes = 2 * 4 * (1000 if r["layer"] == "alexnet-loss" else 2048 * 7 * 7)
        assert r["batch"] == 2 and len(r["samples_us"]) == 2 and r["time_us"] > 0
        assert r["input_gbs"] == pytest.approx(in_bytes / r["time_us"] / 1e3, rel=1e-9), r
    sp = '{"type": "relu", "in_shapes": [[4, 3, 3]], "out_shape": [4, 3, 3]}'
    out2 = tmp_path / "s.json"
    p = run_cli("layer", "--spec", sp, "-b", "2", "-n", "2", "--device", "cpu", "--json", str(out2))
    assert p.returncode == 0, p.stderr
    rows = json.loads(out2.read_text())["rows"]
    assert {r["phase"] for r in rows} >= {"fwd"} and all(len(r["samples_us"]) == 2 and r["time_us"] > 0 for r in rows)


@pytest.mark.parametrize("argv, message", [
    (["layer"], "--layer NAME or --spec"),
    (["layer", "--layer", "nosuch"], "unknown"),
    (["layer", "--spec", "{bad json"], "not JSON"),
    (["layer", "--spec", '{"type": "relu", "in_shapes": [[3]], "out_shape": [4]}', "--device", "cpu"], "relu"),
    (["layer", "--layer", "alexnet-loss", "--pass", "sideways"], "pass"),
    (["layer", "--layer", "alexnet-loss", "-b", "0"], "batch"),
])
def test_cli_layer_bad_input(argv, message, capsys):
    from gdlbench.cli import main

    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and message in err
