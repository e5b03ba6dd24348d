"""The CUDA transformer layers (csrc/cuda/layers_transformer.cu) and the per-position softmax_xent
against the float64 numpy references the CPU tests use (tests/transformer_refs.py, tests/layer_refs.py)
on the same inputs, and against the CPU backend where it has the type; a small GPT, BERT and ViT
through the CUDA executor against the CPU executor. The references are checked here, without a GPU,
by finite differences (tests/layer_refs.py's numeric_grad)."""

from __future__ import annotations

import layer_refs as ref
import numpy as np
import pytest
import transformer_refs as tref
from helpers import requires_gpu
from test_layers import close, rand, run_layer, spec

from gdlbench._native import _core, _cuda
from gdlbench.nets import transformer
from gdlbench.nets.network import load_network

# ---- the cases: (id, spec, batch, inputs, params, labels, reference(x..., dy, p...)) ------------------

def _ids(rng, batch, s, vocab):
    return rng.integers(0, vocab, (batch, 1, s, 1)).astype(np.float32)  # repeats: the scatter-add's atomics


def _sequence_cases(rng, add):
    for types in (0, 1, 2):
        shapes = [(11, 6), (9, 6)] + ([(types, 6)] if types else [])
        add(f"embedding-types{types}", spec("embedding", [(1, 7, 1)], (6, 7, 1),
                                            {"vocab": 11, "hidden": 6, "positions": 9, "token_types": types}, shapes),
            3, [_ids(rng, 3, 7, 11)], [rand(rng, *s) for s in shapes], fn=tref.embedding)
    for cls in (1, 0):
        s = 6 + cls
        shapes = ([(1, 5)] if cls else []) + [(s, 5)]
        add(f"tokens-class{cls}", spec("tokens", [(5, 2, 3)], (5, s, 1), {"class_token": cls}, shapes), 2,
            [rand(rng, 2, 5, 2, 3)], [rand(rng, *sh) for sh in shapes], fn=tref.tokens)
    for d, s, eps in ((8, 5, 1e-5), (40, 3, 1e-12)):
        add(f"layernorm-{d}x{s}", spec("layernorm", [(d, s, 1)], (d, s, 1), {"eps": eps}, [(d,), (d,)]), 3,
            [rand(rng, 3, d, s, 1, scale=2) + 0.5], [rand(rng, d) + 1, rand(rng, d)],
            fn=lambda x, dy, g, b, eps=eps: tref.layernorm(x, dy, g, b, eps))
    for bias, inp in ((1, (6, 5, 1)), (0, (6, 5, 1)), (1, (6, 2, 3))):
        shapes = [(4, 6)] + ([(4,)] if bias else [])
        add(f"linear-bias{bias}-{'x'.join(map(str, inp))}",
            spec("linear", [inp], (4, *inp[1:]), {"out_features": 4, "bias": bias}, shapes), 2,
            [rand(rng, 2, *inp)], [rand(rng, *sh) for sh in shapes], fn=tref.linear)


def _elementwise_cases(rng, add):
    for approx in (0, 1):
        add(f"gelu-approximate{approx}", spec("gelu", [(4, 5, 1)], (4, 5, 1), {"approximate": approx}), 3,
            [rand(rng, 3, 4, 5, 1, scale=2)], fn=lambda x, dy, a=approx: tref.gelu(x, dy, a))
    add("tanh", spec("tanh", [(4, 5, 1)], (4, 5, 1)), 3, [rand(rng, 3, 4, 5, 1, scale=2)],
        fn=tref.tanh)
    for index in (0, 3):
        add(f"select_token-{index}", spec("select_token", [(5, 4, 1)], (5, 1, 1), {"index": index}), 2,
            [rand(rng, 2, 5, 4, 1)], fn=lambda x, dy, i=index: tref.select_token(x, dy, i))


def _attention_cases(rng, add):
    # (d, s, heads, bias, causal, dropout): S = 40 runs each softmax row over two warp strides
    for d, s, heads, bias, causal, ratio in ((8, 6, 2, 1, 0, 0.0), (8, 6, 2, 0, 1, 0.0), (8, 6, 2, 1, 1, 0.3),
                                             (16, 40, 4, 1, 1, 0.1), (12, 5, 1, 1, 0, 0.0)):
        shapes = [(3 * d, d)] + ([(3 * d,)] if bias else []) + [(d, d)] + ([(d,)] if bias else [])
        attrs = {"heads": heads, "bias": bias, "causal": causal, "dropout": ratio, "seed": 5}

        def fn(x, dy, *p, a=attrs):
            return ref.attention(x, dy, list(p), a["heads"], a["bias"], a["causal"], a["dropout"], a["seed"])
        add(f"attention-d{d}s{s}h{heads}-bias{bias}-causal{causal}-drop{ratio}",
            spec("attention", [(d, s, 1)], (d, s, 1), attrs, shapes), 2, [rand(rng, 2, d, s, 1)],
            [rand(rng, *sh, scale=0.5) for sh in shapes], fn=fn)


def _head_cases(rng, add):
    for tied, bias in ((0, 0), (0, 1), (1, 1), (1, 0)):
        shapes = ([] if tied else [(13, 6)]) + ([(13,)] if bias else [])
        own = (ref.fill_value(3, 13 * 6) * 0.125).reshape(13, 6)  # a tied head's own table when unbound

        def fn(x, dy, *p, t=tied, b=bias, own=own):
            w, rest = (own, list(p)) if t else (p[0], list(p[1:]))
            y, dxs, dws = ref.lm_head(x, dy, w, rest[0] if b else None)
            return y, dxs, dws[1:] if t else dws
        add(f"lm_head-tied{tied}-bias{bias}", spec("lm_head", [(6, 5, 1)], (13, 5, 1),
                                                    {"vocab": 13, "tied": tied, "bias": bias}, shapes), 2,
            [rand(rng, 2, 6, 5, 1)], [rand(rng, *sh) for sh in shapes], fn=fn)
    labels = [int(v) for v in rng.integers(0, 9, 3 * 5)]
    add("softmax_xent-positions", spec("softmax_xent", [(9, 5, 1)], (1, 1, 1)), 3, [rand(rng, 3, 9, 5, 1, scale=3)],
        labels=labels, fn=lambda x, dy, lab=labels: ref.softmax_xent(x, lab))


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
