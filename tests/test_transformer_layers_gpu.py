"""The CUDA transformer layers (csrc/cuda/layers_transformer.cu) and the per-position softmax_xent
against float64 numpy references on the same inputs, and against the CPU backend where it has the
type; a small GPT, BERT and ViT through the CUDA executor against the CPU executor. The references
are checked here, without a GPU, by finite differences (tests/layer_refs.py's numeric_grad)."""

from __future__ import annotations

import math

import layer_refs as ref
import numpy as np
import pytest
from helpers import requires_gpu
from test_layers import close, rand, run_layer, spec

from gdlbench._native import _core, _cuda
from gdlbench.nets import transformer
from gdlbench.nets.network import load_network

# ---- float64 references: (N, ...) arrays in, (y, [dx...], [dw...]) out --------------------------------


def fill_value(seed: int, n: int) -> np.ndarray:
    """common/fill.h's fill_value(seed, i) for i < n."""
    s = ref._splitmix64(np.array([seed], dtype=np.uint64))[0]
    h = ref._splitmix64(s ^ np.arange(n, dtype=np.uint64))
    return ((h % np.uint64(257)).astype(np.int64) - 128) / 128.0


def embedding(ids, dy, tok, pos, typ=None):
    n, s = ids.shape[0], ids.shape[2]
    idx = np.rint(ids.reshape(n, s)).astype(np.int64)
    tt = np.where(np.arange(s) < s // 2, 0, min(1, (typ.shape[0] if typ is not None else 1) - 1))
    rows = tok[idx] + pos[:s][None] + (typ[tt][None] if typ is not None else 0)  # (n, s, d)
    g = dy.reshape(n, -1, s).transpose(0, 2, 1)  # (n, s, d)
    dtok, dpos = np.zeros_like(tok), np.zeros_like(pos)
    np.add.at(dtok, idx, g)
    dpos[:s] = g.sum(0)
    dws = [dtok, dpos]
    if typ is not None:
        dtyp = np.zeros_like(typ)
        np.add.at(dtyp, tt, g.sum(0))
        dws.append(dtyp)
    return rows.transpose(0, 2, 1)[..., None], [np.zeros_like(ids)], dws


def tokens(x, dy, *params):
    n, c = x.shape[:2]
    cls, pos = (params if len(params) == 2 else (None, params[0]))
    seq = x.reshape(n, c, -1)
    if cls is not None:
        seq = np.concatenate([np.broadcast_to(cls.T[None], (n, c, 1)), seq], 2)
    off = 0 if cls is None else 1
    g = dy.reshape(n, c, -1)
    dws = ([g[:, :, 0].sum(0)[None]] if cls is not None else []) + [g.sum(0).T]
    return (seq + pos.T[None])[..., None], [g[:, :, off:].reshape(x.shape)], dws


def layernorm(x, dy, gamma, beta, eps):
    xs, g = x.reshape(x.shape[0], x.shape[1], -1), dy.reshape(x.shape[0], x.shape[1], -1)
    mean = xs.mean(1, keepdims=True)
    rstd = 1 / np.sqrt(((xs - mean) ** 2).mean(1, keepdims=True) + eps)
    xhat = (xs - mean) * rstd
    y = xhat * gamma[None, :, None] + beta[None, :, None]
    gg = g * gamma[None, :, None]
    dx = rstd * (gg - gg.mean(1, keepdims=True) - xhat * (gg * xhat).mean(1, keepdims=True))
    return y.reshape(x.shape), [dx.reshape(x.shape)], [(g * xhat).sum((0, 2)), g.sum((0, 2))]


def linear(x, dy, w, b=None):
    n, f = x.shape[0], w.shape[0]
    xs, g = x.reshape(n, x.shape[1], -1), dy.reshape(n, f, -1)
    y = np.einsum("fc,ncp->nfp", w, xs) + (b[None, :, None] if b is not None else 0)
    dws = [np.einsum("nfp,ncp->fc", g, xs)] + ([g.sum((0, 2))] if b is not None else [])
    return y.reshape(dy.shape), [np.einsum("fc,nfp->ncp", w, g).reshape(x.shape)], dws


def gelu(x, dy, approximate):
    if approximate:
        k = math.sqrt(2 / math.pi)
        t = np.tanh(k * (x + 0.044715 * x**3))
        return 0.5 * x * (1 + t), [dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x))], []
    erf = np.vectorize(math.erf)(x / math.sqrt(2))
    d = 0.5 * (1 + erf) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return 0.5 * x * (1 + erf), [dy * d], []


def select_token(x, dy, index):
    dx = np.zeros_like(x)
    dx[:, :, index] = dy.reshape(dx[:, :, index].shape)
    return x[:, :, index].reshape(dy.shape), [dx], []


def attention_forward(x, wqkv, bqkv, wo, bo, heads, causal, ratio, seed):
    """Y and what backward needs: X, QKV split per head (n, h, dh, s), P, the dropout keep mask, O."""
    n, d, s = x.shape[0], x.shape[1], x.shape[2]
    dh = d // heads
    xs = x.reshape(n, d, s)
    qkv = np.einsum("fd,nds->nfs", wqkv, xs) + (bqkv[None, :, None] if bqkv is not None else 0)
    q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(n, heads, dh, s) for i in range(3))
    sc = np.einsum("nhei,nhej->nhij", q, k) / math.sqrt(dh)
    if causal:
        sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    keep = (ref.dropout_keep(seed, p.size, ratio).reshape(p.shape) if ratio > 0 else np.ones(p.shape)) / (1 - ratio)
    o = np.einsum("nhij,nhej->nhei", p * keep, v).reshape(n, d, s)
    y = np.einsum("fd,nds->nfs", wo, o) + (bo[None, :, None] if bo is not None else 0)
    return y, (xs, q, k, v, p, keep, o)


def attention(x, dy, wqkv, bqkv, wo, bo, heads, causal, ratio, seed):
    y, (xs, q, k, v, p, keep, o) = attention_forward(x, wqkv, bqkv, wo, bo, heads, causal, ratio, seed)
    n, d, s = xs.shape
    g = dy.reshape(n, d, s)
    dwo, dbo = np.einsum("nfs,nds->fd", g, o), g.sum((0, 2))
    do = np.einsum("fd,nfs->nds", wo, g).reshape(q.shape)
    dpd = np.einsum("nhei,nhej->nhij", do, v)
    dv = np.einsum("nhij,nhei->nhej", p * keep, do)
    dp = dpd * keep
    ds = p * (dp - (p * dp).sum(-1, keepdims=True)) / math.sqrt(q.shape[2])
    dq, dk = np.einsum("nhij,nhej->nhei", ds, k), np.einsum("nhij,nhei->nhej", ds, q)
    dqkv = np.concatenate([t.reshape(n, d, s) for t in (dq, dk, dv)], 1)
    dws = [np.einsum("nfs,nds->fd", dqkv, xs)] + ([dqkv.sum((0, 2))] if bqkv is not None else [])
    dws += [dwo] + ([dbo] if bo is not None else [])
    return y.reshape(x.shape), [np.einsum("fd,nfs->nds", wqkv, dqkv).reshape(x.shape)], dws


def xent_positions(x, labels):
    """softmax_xent on (C, S, 1): a softmax over C at each position, mean over batch * positions."""
    n, c = x.shape[:2]
    rows = x.reshape(n, c, -1).transpose(0, 2, 1).reshape(-1, c)
    lab = np.asarray(labels)
    mx = rows.max(1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(rows - mx).sum(1))
    d = np.exp(rows - lse[:, None])
    d[np.arange(len(lab)), lab] -= 1
    y = np.zeros((n, 1))
    y[0] = (lse - rows[np.arange(len(lab)), lab]).mean()
    dx = (d / len(lab)).reshape(n, -1, c).transpose(0, 2, 1).reshape(x.shape)
    return y, [dx], []


# ---- the cases: (id, spec, batch, inputs, params, labels, reference(x..., dy, p...)) ------------------

def _ids(rng, batch, s, vocab):
    return rng.integers(0, vocab, (batch, 1, s, 1)).astype(np.float32)  # repeats: the scatter-add's atomics


def _sequence_cases(rng, add):
    for types in (0, 1, 2):
        shapes = [(11, 6), (9, 6)] + ([(types, 6)] if types else [])
        add(f"embedding-types{types}", spec("embedding", [(1, 7, 1)], (6, 7, 1),
                                            {"vocab": 11, "hidden": 6, "positions": 9, "token_types": types}, shapes),
            3, [_ids(rng, 3, 7, 11)], [rand(rng, *s) for s in shapes], fn=embedding)
    for cls in (1, 0):
        s = 6 + cls
        shapes = ([(1, 5)] if cls else []) + [(s, 5)]
        add(f"tokens-class{cls}", spec("tokens", [(5, 2, 3)], (5, s, 1), {"class_token": cls}, shapes), 2,
            [rand(rng, 2, 5, 2, 3)], [rand(rng, *sh) for sh in shapes], fn=tokens)
    for d, s, eps in ((8, 5, 1e-5), (40, 3, 1e-12)):
        add(f"layernorm-{d}x{s}", spec("layernorm", [(d, s, 1)], (d, s, 1), {"eps": eps}, [(d,), (d,)]), 3,
            [rand(rng, 3, d, s, 1, scale=2) + 0.5], [rand(rng, d) + 1, rand(rng, d)],
            fn=lambda x, dy, g, b, eps=eps: layernorm(x, dy, g, b, eps))
    for bias, inp in ((1, (6, 5, 1)), (0, (6, 5, 1)), (1, (6, 2, 3))):
        shapes = [(4, 6)] + ([(4,)] if bias else [])
        add(f"linear-bias{bias}-{'x'.join(map(str, inp))}",
            spec("linear", [inp], (4, *inp[1:]), {"out_features": 4, "bias": bias}, shapes), 2,
            [rand(rng, 2, *inp)], [rand(rng, *sh) for sh in shapes], fn=linear)


def _elementwise_cases(rng, add):
    for approx in (0, 1):
        add(f"gelu-approximate{approx}", spec("gelu", [(4, 5, 1)], (4, 5, 1), {"approximate": approx}), 3,
            [rand(rng, 3, 4, 5, 1, scale=2)], fn=lambda x, dy, a=approx: gelu(x, dy, a))
    add("tanh", spec("tanh", [(4, 5, 1)], (4, 5, 1)), 3, [rand(rng, 3, 4, 5, 1, scale=2)],
        fn=lambda x, dy: (np.tanh(x), [dy * (1 - np.tanh(x) ** 2)], []))
    for index in (0, 3):
        add(f"select_token-{index}", spec("select_token", [(5, 4, 1)], (5, 1, 1), {"index": index}), 2,
            [rand(rng, 2, 5, 4, 1)], fn=lambda x, dy, i=index: select_token(x, dy, i))


def _attention_cases(rng, add):
    # (d, s, heads, bias, causal, dropout): S = 40 runs each softmax row over two warp strides
    for d, s, heads, bias, causal, ratio in ((8, 6, 2, 1, 0, 0.0), (8, 6, 2, 0, 1, 0.0), (8, 6, 2, 1, 1, 0.3),
                                             (16, 40, 4, 1, 1, 0.1), (12, 5, 1, 1, 0, 0.0)):
        shapes = [(3 * d, d)] + ([(3 * d,)] if bias else []) + [(d, d)] + ([(d,)] if bias else [])
        attrs = {"heads": heads, "bias": bias, "causal": causal, "dropout": ratio, "seed": 5}

        def fn(x, dy, *p, a=attrs, b=bias):
            wqkv, bqkv, wo, bo = (p[0], p[1], p[2], p[3]) if b else (p[0], None, p[1], None)
            return attention(x, dy, wqkv, bqkv, wo, bo, a["heads"], a["causal"], a["dropout"], a["seed"])
        add(f"attention-d{d}s{s}h{heads}-bias{bias}-causal{causal}-drop{ratio}",
            spec("attention", [(d, s, 1)], (d, s, 1), attrs, shapes), 2, [rand(rng, 2, d, s, 1)],
            [rand(rng, *sh, scale=0.5) for sh in shapes], fn=fn)


def _head_cases(rng, add):
    for tied, bias in ((0, 0), (0, 1), (1, 1), (1, 0)):
        shapes = ([] if tied else [(13, 6)]) + ([(13,)] if bias else [])
        own = (fill_value(3, 13 * 6) * 0.125).reshape(13, 6)  # a tied head's own table when unbound

        def fn(x, dy, *p, t=tied, b=bias, own=own):
            w, rest = (own, list(p)) if t else (p[0], list(p[1:]))
            y, dxs, dws = linear(x, dy, w, rest[0] if b else None)
            return y, dxs, dws[1:] if t else dws
        add(f"lm_head-tied{tied}-bias{bias}", spec("lm_head", [(6, 5, 1)], (13, 5, 1),
                                                    {"vocab": 13, "tied": tied, "bias": bias}, shapes), 2,
            [rand(rng, 2, 6, 5, 1)], [rand(rng, *sh) for sh in shapes], fn=fn)
    labels = [int(v) for v in rng.integers(0, 9, 3 * 5)]
    add("softmax_xent-positions", spec("softmax_xent", [(9, 5, 1)], (1, 1, 1)), 3, [rand(rng, 3, 9, 5, 1, scale=3)],
        labels=labels, fn=lambda x, dy, lab=labels: xent_positions(x, lab))


def cases():
    rng = np.random.default_rng(35)
    out = []

    def add(id_, sp, batch, xs, params=(), labels=None, fn=None):
        out.append(pytest.param(sp, batch, xs, list(params), labels, fn, id=id_))
    for make in (_sequence_cases, _elementwise_cases, _attention_cases, _head_cases):
        make(rng, add)
    return out


CASES = cases()


def _dy(sp, batch):
    if sp["type"] == "softmax_xent":  # the loss: dL/dy is 1 at the mean (its dx does not read dy)
        dy = np.zeros((batch, 1, 1, 1), np.float32)
        dy[0] = 1
        return dy
    return rand(np.random.default_rng(99), batch, *sp["out_shape"])


def _reference(fn, xs, dy, params):
    return fn(*[x.astype(np.float64) for x in xs], dy.astype(np.float64), *[p.astype(np.float64) for p in params])


# ---- the references, checked without a GPU ------------------------------------------------------------

@pytest.mark.parametrize("sp, batch, xs, params, labels, fn", CASES)
def test_reference_gradients_are_the_derivatives(sp, batch, xs, params, labels, fn):
    """dx and every dw of the reference against central differences of sum(y * dy)."""
    dy = _dy(sp, batch).astype(np.float64)
    xs64, ps64 = [x.astype(np.float64) for x in xs], [p.astype(np.float64) for p in params]
    _, dxs, dws = fn(*xs64, dy, *ps64)
    assert len(dws) == len(params)

    def f():
        return float((np.asarray(fn(*xs64, dy, *ps64)[0]).reshape(dy.shape) * dy).sum())
    arrays = ([] if sp["type"] == "embedding" else list(zip(xs64, dxs, strict=True))) + list(zip(ps64, dws, strict=True))
    for i, (a, want) in enumerate(arrays):
        np.testing.assert_allclose(np.asarray(want).reshape(a.shape), ref.numeric_grad(f, a), rtol=1e-5, atol=1e-7,
                                   err_msg=f"array {i}")


def _cpu_lacks(sp):
    """Why the CPU backend cannot be compared on this case ('' when it can): it lacks the type."""
    if sp["type"] not in _core.layer_types():
        return f"the CPU backend has no {sp['type']} layer"
    return ""


def test_references_agree_with_the_cpu_layers_where_they_exist():
    """Where the CPU backend has the type, its kernels and these references are the same math."""
    for p in CASES:
        sp, batch, xs, params, labels, fn = p.values
        if _cpu_lacks(sp):
            continue
        dy = _dy(sp, batch)
        _compare(run_layer(_core, sp, batch, xs, dy, params, labels), _reference(fn, xs, dy, params), p.id)


def _compare(got, want, what, rtol=2e-4, atol=2e-5):
    close(got[0], np.asarray(want[0]).reshape(got[0].shape), f"{what}: forward", rtol, atol)
    for i, (g, w) in enumerate(zip(got[1], want[1], strict=True)):
        close(g, np.asarray(w).reshape(g.shape), f"{what}: dx[{i}]", rtol, atol)
    for i, (g, w) in enumerate(zip(got[2], want[2], strict=True)):
        close(g, np.asarray(w).reshape(g.shape), f"{what}: dw[{i}]", rtol, atol)


# ---- GPU: each CUDA layer against the float64 reference and the CPU layer on the same inputs ------------

@requires_gpu
@pytest.mark.parametrize("sp, batch, xs, params, labels, fn", CASES)
def test_cuda_transformer_layer_matches_float64(sp, batch, xs, params, labels, fn):
    dy = _dy(sp, batch)
    _compare(run_layer(_cuda, sp, batch, xs, dy, params, labels), _reference(fn, xs, dy, params), "cuda")


@requires_gpu
@pytest.mark.parametrize("sp, batch, xs, params, labels, fn", CASES)
def test_cuda_transformer_layer_matches_cpu(sp, batch, xs, params, labels, fn):
    if _cpu_lacks(sp):
        pytest.skip(_cpu_lacks(sp))
    dy = _dy(sp, batch)
    _compare(run_layer(_cuda, sp, batch, xs, dy, params, labels), run_layer(_core, sp, batch, xs, dy, params, labels),
             "cuda vs cpu")


@requires_gpu
def test_cuda_attention_times_every_pass():
    """bwd-data alone (no backward_params before it to leave dQKV) recomputes what it needs."""
    sp = next(p.values[0] for p in CASES if p.id.startswith("attention-d8s6h2-bias1-causal1"))
    lb = _cuda.LayerBench(sp, 2)
    for p in ("fwd", "bwd-data", "bwd-filter", "bwd"):
        assert len(lb.time(p, 1, 2)) == 2


# ---- GPU: small transformers through the CUDA executor against the CPU executor --------------------------

def _tiny_bert(seq=8):
    """BERT-base's layout (token types, post-LN, pooler, tied MLM decoder with bias, two losses), small."""
    layers = [{"name": "emb", "type": "embedding", "vocab": 29, "hidden": 16, "positions": 12, "token_types": 2},
              {"name": "emb.ln", "type": "layernorm", "eps": 1e-12}, {"name": "emb.drop", "type": "dropout", "ratio": 0.1}]
    x = transformer._block(layers, "l.0", "emb.drop", 16, 2, 32, pre_ln=False, causal=False, dropout=0.1, eps=1e-12)
    layers += [{"name": "pool", "type": "select_token", "inputs": [x]},
               {"name": "pool.dense", "type": "linear", "out_features": 16}, {"name": "pool.tanh", "type": "tanh"},
               {"name": "mlm.dense", "type": "linear", "inputs": [x], "out_features": 16},
               {"name": "mlm.gelu", "type": "gelu"}, {"name": "mlm.ln", "type": "layernorm", "eps": 1e-12},
               {"name": "mlm.decoder", "type": "lm_head", "vocab": 29, "tied": True, "bias": True},
               {"name": "mlm_loss", "type": "softmax_xent"},
               {"name": "nsp", "type": "fc", "inputs": ["pool.tanh"], "out_features": 2},
               {"name": "nsp_loss", "type": "softmax_xent"}]
    return {"name": "tiny-bert", "input": [1, seq, 1], "layers": layers}


TINY_NETS = {
    "gpt-tied": lambda: transformer.gpt("tiny-gpt", layers=2, hidden=16, heads=2, seq=8, vocab=37, dropout=0.1),
    "gpt-untied": lambda: transformer.gpt("tiny-gpt-untied", layers=1, hidden=16, heads=4, seq=6, vocab=23,
                                          tied=False, dropout=0.0),
    "bert": _tiny_bert,
    "vit": lambda: transformer.vit(image=8, patch=4, layers=1, hidden=16, heads=2, mlp=32, classes=5, name="tiny-vit"),
}


@requires_gpu
@pytest.mark.parametrize("name", sorted(TINY_NETS))
def test_cuda_executor_runs_small_transformers_as_the_cpu_executor(name):
    """Token ids as the data, one label set per loss layer, the tied head: the GPU's loss and
    gradients against the CPU executor's on the same parameters, inputs and labels."""
    specs = load_network(TINY_NETS[name]()).layer_specs()
    missing = sorted({s["type"] for s in specs} - set(_core.layer_types()))
    if missing:
        pytest.skip(f"the CPU backend has no {', '.join(missing)} layer")
    cpu, gpu = _core.Net(specs, 3), _cuda.Net(specs, 3)
    cpu.forward_backward()
    gpu.forward_backward()
    assert np.isclose(gpu.output(), cpu.output(), rtol=1e-4, atol=1e-5)
    g_cpu, g_gpu = cpu.grads().astype(np.float64), gpu.grads().astype(np.float64)
    assert np.isfinite(g_gpu).all()
    scale = np.abs(g_cpu).max()
    assert np.abs(g_gpu - g_cpu).max() <= 1e-3 * scale, np.abs(g_gpu - g_cpu).max() / scale
