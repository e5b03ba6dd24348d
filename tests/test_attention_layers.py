"""The CPU attention, lm_head and per-position softmax_xent layers against float64 numpy references
(tests/layer_refs.py) and against torch (autograd) on the same inputs, through _core.LayerBench.run.
Sequences are (D, S, 1) per sample; torch sees them transposed to (batch, S, D)."""

from __future__ import annotations

import layer_refs as ref
import numpy as np
import pytest
from test_layers import close, rand, run_layer, spec

from gdlbench._native import _core


def attention_spec(d, s, heads, bias, causal, dropout=0.0, seed=0):
    shapes = [(3 * d, d)] + ([(3 * d,)] if bias else []) + [(d, d)] + ([(d,)] if bias else [])
    attrs = {"heads": heads, "bias": int(bias), "causal": int(causal), "dropout": dropout, "seed": seed}
    return spec("attention", [(d, s, 1)], (d, s, 1), attrs, shapes), shapes


def lm_head_spec(d, s, vocab, tied, bias):
    shapes = ([] if tied else [(vocab, d)]) + ([(vocab,)] if bias else [])
    attrs = {"vocab": vocab, "tied": int(tied), "bias": int(bias)}
    return spec("lm_head", [(d, s, 1)], (vocab, s, 1), attrs, shapes), shapes


# (d, s, heads, bias, causal, dropout): heads 1, 2, 3; odd S; dropout on the probabilities
ATTENTION = [(4, 5, 1, True, False, 0.0), (6, 7, 2, False, True, 0.0), (6, 5, 3, True, True, 0.0),
             (8, 9, 2, True, False, 0.0), (6, 7, 3, False, False, 0.0), (6, 7, 2, True, True, 0.3),
             (4, 5, 1, False, False, 0.5)]


def attention_case(d, s, heads, bias, causal, dropout, batch=2, seed=5):
    rng = np.random.default_rng(d * 100 + s * 10 + heads)
    sp, shapes = attention_spec(d, s, heads, bias, causal, dropout, seed)
    x = rand(rng, batch, d, s, 1)
    params = [rand(rng, *sh, scale=0.5) for sh in shapes]
    dy = rand(rng, batch, d, s, 1)
    return sp, x, params, dy


def _id(case):
    d, s, heads, bias, causal, dropout = case
    return f"d{d}-s{s}-h{heads}" + ("-bias" if bias else "") + ("-causal" if causal else "") + \
        (f"-drop{dropout}" if dropout else "")


@pytest.mark.parametrize("case", ATTENTION, ids=[_id(c) for c in ATTENTION])
def test_attention_matches_numpy(case):
    d, s, heads, bias, causal, dropout = case
    sp, x, params, dy = attention_case(*case)
    y, (dx,), dws = run_layer(_core, sp, 2, [x], dy, params)
    f64 = [p.astype(np.float64) for p in params]
    ry, (rdx,), rdws = ref.attention(x.astype(np.float64), dy.astype(np.float64), f64, heads, bias, causal,
                                     dropout, seed=5)
    close(y, ry, "y")
    close(dx, rdx, "dx")
    for i, (g, r) in enumerate(zip(dws, rdws, strict=True)):
        close(g, r, f"dw{i}")


def test_attention_reference_gradient_is_the_derivative():
    rng = np.random.default_rng(8)
    d, s, heads = 4, 3, 2
    x, dy = rng.standard_normal((1, d, s, 1)), rng.standard_normal((1, d, s, 1))
    params = [rng.standard_normal(sh) * 0.5 for sh in attention_spec(d, s, heads, True, True)[1]]
    _, (dx,), dws = ref.attention(x, dy, params, heads, True, True, 0.25, seed=2)

    def loss():
        return float((ref.attention(x, dy, params, heads, True, True, 0.25, seed=2)[0] * dy).sum())
    np.testing.assert_allclose(dx, ref.numeric_grad(loss, x), rtol=1e-5, atol=1e-8)
    for g, p in zip(dws, params, strict=True):
        np.testing.assert_allclose(g, ref.numeric_grad(loss, p), rtol=1e-5, atol=1e-8)


def torch_attention(x, dy, params, heads, bias, causal, dropout, seed):
    """The layer in torch on (batch, S, D): F.scaled_dot_product_attention without dropout, explicit
    ops with the layer's mask with it; y, dx and the parameter gradients by autograd."""
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    n, d, s = x.shape[:3]
    dh = d // heads
    xt = torch.tensor(x.reshape(n, d, s), dtype=torch.float64).transpose(1, 2).requires_grad_()
    ps = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params]
    wqkv, wo = ps[0], ps[2 if bias else 1]
    qkv = f.linear(xt, wqkv, ps[1] if bias else None)
    q, k, v = (t.reshape(n, s, heads, dh).transpose(1, 2) for t in qkv.split(d, dim=2))
    if dropout == 0:
        o = f.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:
        sc = q @ k.transpose(-1, -2) / dh ** 0.5
        if causal:
            sc = sc.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        keep = torch.tensor(ref.dropout_keep(seed, n * heads * s * s, dropout).reshape(n, heads, s, s))
        o = (sc.softmax(-1) * keep / (1 - dropout)) @ v
    y = f.linear(o.transpose(1, 2).reshape(n, s, d), wo, ps[3] if bias else None)
    y.backward(torch.tensor(dy.reshape(n, d, s), dtype=torch.float64).transpose(1, 2))
    return (y.detach().transpose(1, 2).numpy().reshape(x.shape), xt.grad.transpose(1, 2).numpy().reshape(x.shape),
            [p.grad.numpy() for p in ps])


@pytest.mark.parametrize("case", ATTENTION, ids=[_id(c) for c in ATTENTION])
def test_attention_matches_torch(case):
    d, s, heads, bias, causal, dropout = case
    sp, x, params, dy = attention_case(*case)
    ty, tdx, tdws = torch_attention(x, dy, params, heads, bias, causal, dropout, seed=5)
    y, (dx,), dws = run_layer(_core, sp, 2, [x], dy, params)
    close(y, ty, "y")
    close(dx, tdx, "dx")
    for i, (g, r) in enumerate(zip(dws, tdws, strict=True)):
        close(g, r, f"dw{i}")


def test_attention_long_causal_rows_stay_finite():
    """Large scores (a wide softmax) and a causal mask: no NaN, the first query attends to itself only."""
    sp, x, params, dy = attention_case(8, 33, 2, True, True, 0.0)
    x *= 20
    y, (dx,), dws = run_layer(_core, sp, 2, [x], dy, params)
    ry, (rdx,), rdws = ref.attention(x.astype(np.float64), dy.astype(np.float64),
                                     [p.astype(np.float64) for p in params], 2, True, True)
    assert np.isfinite(y).all() and np.isfinite(dx).all()
    close(y, ry, "y", rtol=1e-3, atol=1e-4)
    close(dx, rdx, "dx", rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("message, change", [
    ("heads must be a positive integer dividing", {"heads": 4}),
    ("dropout must be in", {"dropout": 1.0}),
])
def test_attention_bad_attributes(message, change):
    sp, _ = attention_spec(6, 5, 2, True, False)
    sp["attrs"].update(change)
    with pytest.raises(ValueError, match=message):
        _core.LayerBench(sp, 2)


def test_attention_bad_param_shapes():
    sp, _ = attention_spec(6, 5, 2, True, False)
    sp["param_shapes"] = sp["param_shapes"][:2]
    with pytest.raises(ValueError, match="param_shapes must be"):
        _core.LayerBench(sp, 2)


# ---- lm_head ---------------------------------------------------------------------------------

def own_table(vocab, d):
    """The table of a tied head never bound (csrc/cpu/lm_head.cpp: fill_value(3, i) / 8)."""
    return ref.fill_value(3, vocab * d).reshape(vocab, d) * 0.125


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied-alone"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_lm_head_matches_numpy_and_torch(tied, bias):
    d, s, vocab, batch = 6, 5, 11, 3
    rng = np.random.default_rng(17)
    sp, shapes = lm_head_spec(d, s, vocab, tied, bias)
    x, dy = rand(rng, batch, d, s, 1), rand(rng, batch, vocab, s, 1)
    params = [rand(rng, *sh, scale=0.5) for sh in shapes]
    y, (dx,), dws = run_layer(_core, sp, batch, [x], dy, params)
    w = own_table(vocab, d) if tied else params[0].astype(np.float64)
    b = params[-1].astype(np.float64) if bias else None
    ry, (rdx,), rdws = ref.lm_head(x.astype(np.float64), dy.astype(np.float64), w, b)
    close(y, ry, "y")
    close(dx, rdx, "dx")
    want = rdws[1:] if tied else rdws  # tied alone: the table's gradient stays inside the layer
    assert len(dws) == len(want)
    for i, (g, r) in enumerate(zip(dws, want, strict=True)):
        close(g, r, f"dw{i}")
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x.reshape(batch, d, s), dtype=torch.float64).transpose(1, 2).requires_grad_()
    wt = torch.tensor(w, requires_grad=True)
    bt = torch.tensor(b, requires_grad=True) if bias else None
    yt = torch.nn.functional.linear(xt, wt, bt)  # (batch, S, vocab)
    yt.backward(torch.tensor(dy.reshape(batch, vocab, s), dtype=torch.float64).transpose(1, 2))
    close(y, yt.detach().transpose(1, 2).numpy().reshape(y.shape), "y vs torch")
    close(dx, xt.grad.transpose(1, 2).numpy().reshape(x.shape), "dx vs torch")
    if not tied:
        close(dws[0], wt.grad.numpy(), "dW vs torch")
    if bias:
        close(dws[-1], bt.grad.numpy(), "db vs torch")


def test_lm_head_bad_shapes():
    sp, _ = lm_head_spec(6, 5, 11, False, True)
    sp["param_shapes"] = [[11, 6]]
    with pytest.raises(ValueError, match="param_shapes must be"):
        _core.LayerBench(sp, 2)
    sp, _ = lm_head_spec(6, 5, 11, True, False)
    sp["out_shape"] = [12, 5, 1]
    with pytest.raises(ValueError, match="out_shape"):
        _core.LayerBench(sp, 2)


# ---- softmax_xent per position ---------------------------------------------------------------

# blocks: 16 positions at a time (loss.cpp), here 2 full blocks + 8; 2 full blocks of (16, 2);
# a wide classifier; scale 30 spreads the exp's arguments over [-200, 0] (underflow included)
@pytest.mark.parametrize("shape,scale", [((11, 5, 1), 4), ((7, 3, 2), 4), ((4, 1, 1), 4), ((37, 40, 1), 30),
                                         ((300, 16, 2), 4), ((1000, 1, 1), 30)],
                         ids=["seq", "hw", "classifier", "blocks-tail", "blocks", "wide-classifier"])
def test_softmax_xent_per_position(shape, scale):
    batch = 3
    c, h, w = shape
    rng = np.random.default_rng(c * h * w)
    x = rand(rng, batch, c, h, w, scale=scale)
    labels = rng.integers(0, c, batch * h * w)
    sp = spec("softmax_xent", [shape], (1,))
    y, (dx,), _ = run_layer(_core, sp, batch, [x], np.zeros((batch, 1), np.float32), labels=labels)
    ry, (rdx,), _ = ref.softmax_xent(x.astype(np.float64), labels)
    close(y.reshape(-1), ry, "y")
    close(dx, rdx, "dx")
    np.testing.assert_allclose(dx, rdx, rtol=0, atol=1e-5 * np.abs(rdx).max(), err_msg="dx, relative to its largest")
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(xt, torch.tensor(labels.reshape(batch, h, w)))
    loss.backward()
    assert y[0, 0] == pytest.approx(loss.item(), rel=1e-5)
    close(dx, xt.grad.numpy(), "dx vs torch")


def test_softmax_xent_position_reference_gradient_is_the_derivative():
    rng = np.random.default_rng(6)
    x, labels = rng.standard_normal((2, 4, 3, 1)) * 2, np.array([3, 0, 2, 1, 1, 0])
    _, (dx,), _ = ref.softmax_xent(x, labels)
    num = ref.numeric_grad(lambda: ref.softmax_xent_forward(x, labels)[0], x)
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-9)


def test_softmax_xent_position_label_out_of_range():
    sp = spec("softmax_xent", [(3, 2, 1)], (1,))
    with pytest.raises(ValueError, match="label"):
        run_layer(_core, sp, 1, [np.zeros((1, 3, 2, 1), np.float32)], np.zeros((1, 1), np.float32), labels=[0, 3])


# ---- through the executor's layer graph (cpu::Net) ---------------------------------------------

def _net(layers, input_shape):
    from gdlbench.nets.network import Network

    net = Network({"name": "t", "input": list(input_shape), "layers": layers})
    return net, _core.Net(net.layer_specs(), 2)


def _split(flat, net):
    out, i = [], 0
    for layer in net.layers:
        for sh in layer.param_shapes:
            n = int(np.prod(sh))
            out.append(flat[i:i + n].astype(np.float64).reshape(sh))
            i += n
    return out


def test_graph_attention_lm_head_loss_per_position():
    """attention -> untied lm_head -> softmax_xent over (vocab, S, 1): the executor's labels per position
    (common/fill.h test_labels), its data (fill seed 3) and gradients against the chained references."""
    d, s, vocab, batch = 6, 5, 7, 2
    net, exe = _net([{"name": "att", "type": "attention", "heads": 2, "causal": True, "dropout": 0.25},
                     {"name": "head", "type": "lm_head", "vocab": vocab, "tied": False, "bias": True},
                     {"name": "loss", "type": "softmax_xent"}], (d, s, 1))
    exe.forward_backward()
    p = _split(np.asarray(exe.params()), net)
    x = ref.fill_value(3, batch * d * s).reshape(batch, d, s, 1)
    labels = (np.arange(batch * s) * 7919) % vocab
    zero = np.zeros((batch, d, s, 1))
    h = ref.attention(x, zero, p[:4], 2, True, True, 0.25)[0]
    logits = ref.lm_head(h, np.zeros((batch, vocab, s, 1)), p[4], p[5])[0]
    loss, (dlogits,), _ = ref.softmax_xent(logits, labels)
    _, (dh,), dws_head = ref.lm_head(h, dlogits, p[4], p[5])
    _, _, dws_att = ref.attention(x, dh, p[:4], 2, True, True, 0.25)
    assert exe.output() == pytest.approx(loss[0], rel=1e-5)
    got = _split(np.asarray(exe.grads()), net)
    for i, (g, r) in enumerate(zip(got, dws_att + dws_head, strict=True)):
        close(g, r, f"grad {i}")


def test_graph_tied_head_without_embedding_is_refused():
    """The layer graph's tie_weights refuses a tied head with no embedding to take the table from."""
    sp, _ = lm_head_spec(4, 3, 5, True, False)
    specs = [dict(sp, inputs=[-1]), {"name": "loss", "type": "softmax_xent", "inputs": [0], "in_shapes": [[5, 3, 1]],
                                     "out_shape": [1], "attrs": {}, "param_shapes": []}]
    with pytest.raises(ValueError, match="no embedding"):
        _core.Net(specs, 2)


@pytest.mark.skipif("embedding" not in _core.layer_types(), reason="needs the CPU embedding layer")
def test_graph_tied_head_shares_the_embedding_table():
    """embedding -> tied lm_head -> softmax_xent: the head reads the token table, and the table's
    gradient is the head's (written first) plus the embedding's scatter of its output gradient.
    (Written before the embedding kernel landed: the embedding's part follows network.py's docstring,
    token and position tables summed.)"""
    d, s, vocab, batch = 4, 3, 9, 2
    net, exe = _net([{"name": "emb", "type": "embedding", "vocab": vocab, "hidden": d, "positions": 4},
                     {"name": "head", "type": "lm_head", "vocab": vocab},
                     {"name": "loss", "type": "softmax_xent"}], (1, s, 1))
    exe.forward_backward()
    table, pos = _split(np.asarray(exe.params()), net)
    ids = (np.arange(batch * s) * 7919 + 13) % vocab  # common/fill.h fill_token_ids
    h = (table[ids].reshape(batch, s, d) + pos[:s]).transpose(0, 2, 1)[..., None]
    labels = (np.arange(batch * s) * 7919) % vocab
    logits = ref.lm_head(h, np.zeros((batch, vocab, s, 1)), table)[0]
    loss, (dlogits,), _ = ref.softmax_xent(logits, labels)
    _, (dh,), (dtable,) = ref.lm_head(h, dlogits, table)
    dcols = dh[..., 0].transpose(0, 2, 1).reshape(batch * s, d)
    np.add.at(dtable, ids, dcols)
    dpos = np.zeros_like(pos)
    dpos[:s] = dh[..., 0].sum(0).T
    assert exe.output() == pytest.approx(loss[0], rel=1e-5)
    gt, gp = _split(np.asarray(exe.grads()), net)
    close(gt, dtable, "token table grad (head + embedding)")
    close(gp, dpos, "position table grad")
