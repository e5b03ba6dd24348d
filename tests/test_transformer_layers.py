"""The CPU transformer layers (embedding, tokens, layernorm, linear, gelu, tanh, select_token)
against float64 numpy references (tests/transformer_refs.py) and against torch on the same inputs
(moved to torch's (B, S, D) layout, gradients by autograd): y, dx and dw through
_core.LayerBench.run. Specs come from gdlbench.nets.network, so the kernels are held to its contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
import transformer_refs as ref
from test_layers import close, rand, run_layer

from gdlbench._native import _core
from gdlbench.nets.network import load_network


def layer_spec(type_, in_shape, **attrs):
    """network.py's spec of one layer of this type on a (C, H, W) input."""
    net = load_network({"name": "t", "input": list(in_shape), "layers": [{"name": "t", "type": type_, **attrs}]})
    return net.layer_specs()[0]


def ids(rng, batch, seq, vocab):
    return rng.integers(0, vocab, size=(batch, 1, seq, 1)).astype(np.float32)


def _seq(t):  # ours (B, D, S, 1) -> torch's (B, S, D)
    return t[..., 0].transpose(1, 2)


def _unseq(t):  # torch's (B, S, D) -> ours (B, D, S, 1)
    return t.transpose(1, 2)[..., None]


# ---- torch on the same inputs, in our layout in and out ------------------------------------------------

def t_embedding(x, tok, pos, typ=None):
    import torch
    idx = x[:, 0, :, 0].round().long()
    s = idx.shape[1]
    y = torch.nn.functional.embedding(idx, tok) + pos[:s]
    if typ is not None:
        y = y + typ[torch.as_tensor(ref.token_types(s, typ.shape[0]))]
    return _unseq(y)


def t_tokens(x, *params):
    import torch
    seq = x.flatten(2).transpose(1, 2)                     # (B, H*W, C)
    if len(params) == 2:
        seq = torch.cat([params[0].expand(x.shape[0], 1, -1), seq], dim=1)
    return _unseq(seq + params[-1])


def t_layernorm(x, gamma, beta, eps):
    import torch
    return _unseq(torch.nn.functional.layer_norm(_seq(x), (x.shape[1],), gamma, beta, eps))


def t_linear(x, w, b=None):
    import torch
    n, c, h, wd = x.shape
    y = torch.nn.functional.linear(x.reshape(n, c, -1).transpose(1, 2), w, b)
    return y.transpose(1, 2).reshape(n, -1, h, wd)


def t_gelu(x, approximate):
    import torch
    return torch.nn.functional.gelu(x, approximate="tanh" if approximate else "none")


def t_tanh(x):
    import torch
    return torch.tanh(x)


def t_select(x, index):
    return x.reshape(x.shape[0], x.shape[1], -1)[:, :, index].reshape(x.shape[0], x.shape[1], 1, 1)


# ---- the cases ------------------------------------------------------------------------------------------

def _params(rng, sp, scale=0.5):
    return [rand(rng, *shape, scale=scale) for shape in sp["param_shapes"]]


def cases():
    rng = np.random.default_rng(35)
    out = []

    def add(id_, sp, batch, xs, params, fn, tfn, dx=True):
        out.append(pytest.param(sp, batch, xs, params, fn, tfn, dx, id=id_))

    for vocab, hidden, positions, s, tt, batch in ((11, 6, 9, 7, 0, 3), (13, 5, 8, 8, 2, 2), (7, 4, 5, 5, 3, 1)):
        sp = layer_spec("embedding", (1, s, 1), vocab=vocab, hidden=hidden, positions=positions, token_types=tt)
        add(f"embedding-v{vocab}-s{s}-types{tt}-b{batch}", sp, batch, [ids(rng, batch, s, vocab)],
            _params(rng, sp), ref.embedding, t_embedding, dx=False)
    for shape, ct, batch in (((4, 3, 2), True, 2), ((5, 2, 2), False, 3), ((3, 7, 1), True, 1)):
        sp = layer_spec("tokens", shape, class_token=ct)
        add(f"tokens-{'x'.join(map(str, shape))}-cls{int(ct)}", sp, batch, [rand(rng, batch, *shape)],
            _params(rng, sp), ref.tokens, t_tokens)
    for shape, eps, batch in (((6, 5, 1), 1e-5, 2), ((33, 70, 1), 1e-6, 3), ((8, 1, 1), 1e-5, 4)):
        sp = layer_spec("layernorm", shape, eps=eps)
        gamma, beta = rand(rng, shape[0]) + 1, rand(rng, shape[0])
        add(f"layernorm-{shape[0]}x{shape[1]}-b{batch}", sp, batch, [rand(rng, batch, *shape, scale=2) + 1],
            [gamma, beta], lambda x, dy, g, b, eps=eps: ref.layernorm(x, dy, g, b, eps),
            lambda x, g, b, eps=eps: t_layernorm(x, g, b, eps))
    # the last three have 128+ rows to split over the threads (cpu/seq_gemm.h gemm_rows): outputs F,
    # the input gradient's C (op(A) transposed), a single position
    for shape, f, bias, batch in (((6, 5, 1), 7, True, 2), ((5, 1, 1), 4, False, 3), ((4, 3, 2), 3, True, 2),
                                  ((9, 17, 1), 11, True, 1), ((24, 5, 1), 130, True, 2), ((130, 3, 1), 5, True, 2),
                                  ((16, 1, 1), 200, True, 3)):
        sp = layer_spec("linear", shape, out_features=f, bias=bias)
        add(f"linear-{'x'.join(map(str, shape))}-f{f}-bias{int(bias)}-b{batch}", sp, batch,
            [rand(rng, batch, *shape)], _params(rng, sp), ref.linear, t_linear)
    for approx in (False, True):
        sp = layer_spec("gelu", (6, 5, 1), approximate=approx)
        add(f"gelu-approximate{int(approx)}", sp, 2, [rand(rng, 2, 6, 5, 1, scale=3)], [],
            lambda x, dy, a=approx: ref.gelu(x, dy, a), lambda x, a=approx: t_gelu(x, a))
    add("tanh", layer_spec("tanh", (5, 3, 1)), 3, [rand(rng, 3, 5, 3, 1, scale=2)], [], ref.tanh, t_tanh)
    for index, shape in ((0, (4, 5, 1)), (4, (4, 5, 1)), (2, (3, 3, 1))):
        sp = layer_spec("select_token", shape, index=index)
        add(f"select_token-{index}-of-{shape[1]}", sp, 3, [rand(rng, 3, *shape)], [],
            lambda x, dy, i=index: ref.select_token(x, dy, i), lambda x, i=index: t_select(x, i))
    return out


CASES = cases()


def _dy(sp, batch):
    return rand(np.random.default_rng(7), batch, *sp["out_shape"])


@pytest.mark.parametrize("sp, batch, xs, params, fn, tfn, dx", CASES)
def test_cpu_transformer_layer_matches_numpy(sp, batch, xs, params, fn, tfn, dx):
    dy = _dy(sp, batch)
    y, dxs, dws = run_layer(_core, sp, batch, xs, dy, params)
    ry, rdx, rdw = fn(*[x.astype(np.float64) for x in xs], dy.astype(np.float64),
                      *[p.astype(np.float64) for p in params])
    close(y, np.asarray(ry).reshape(y.shape), "forward")
    for i, (g, r) in enumerate(zip(dxs, rdx, strict=True)):
        close(g, r, f"dx[{i}]")
    assert len(dws) == len(rdw)
    for i, (g, r) in enumerate(zip(dws, rdw, strict=True)):
        close(g, r, f"dw[{i}]")


@pytest.mark.parametrize("sp, batch, xs, params, fn, tfn, dx", CASES)
def test_cpu_transformer_layer_matches_torch(sp, batch, xs, params, fn, tfn, dx):
    torch = pytest.importorskip("torch")
    dy = _dy(sp, batch)
    y, dxs, dws = run_layer(_core, sp, batch, xs, dy, params)
    tx = [torch.tensor(x, requires_grad=dx) for x in xs]
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    ty = tfn(*tx, *tp)
    (ty * torch.tensor(dy)).sum().backward()
    close(y, ty.detach().numpy(), "forward")
    for i, (g, t) in enumerate(zip(dxs, tx, strict=True)):
        close(g, t.grad.numpy() if dx else np.zeros_like(g), f"dx[{i}]")
    for i, (g, t) in enumerate(zip(dws, tp, strict=True)):
        close(g, t.grad.numpy(), f"dw[{i}]")


def test_gelu_reference_gradients_are_the_derivatives():
    x = np.linspace(-4, 4, 17)
    for approx in (False, True):
        _, (d,), _ = ref.gelu(x, np.ones_like(x), approx)
        h = 1e-6
        num = (ref.gelu(x + h, x, approx)[0] - ref.gelu(x - h, x, approx)[0]) / (2 * h)
        np.testing.assert_allclose(d, num, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ref.gelu(np.array([1.0]), np.ones(1))[0], [0.5 * (1 + math.erf(1 / math.sqrt(2)))])


def test_embedding_token_types_are_a_sentence_pair():
    assert ref.token_types(5, 2).tolist() == [0, 0, 1, 1, 1]
    assert ref.token_types(4, 1).tolist() == [0, 0, 0, 0]
    assert ref.token_types(6, 3).tolist() == [0, 0, 0, 1, 1, 1]


def test_param_gradients_overwrite_across_runs():
    """Two runs on one LayerBench give the same parameter gradients (scatter-adds start from zero)."""
    rng = np.random.default_rng(3)
    for sp, x in ((layer_spec("embedding", (1, 6, 1), vocab=5, hidden=4, positions=8, token_types=2),
                   ids(rng, 2, 6, 5)),
                  (layer_spec("linear", (4, 6, 1), out_features=3), rand(rng, 2, 4, 6, 1)),
                  (layer_spec("layernorm", (4, 6, 1)), rand(rng, 2, 4, 6, 1)),
                  (layer_spec("tokens", (4, 2, 3)), rand(rng, 2, 4, 2, 3))):
        lb, params, dy = _core.LayerBench(sp, 2), _params(rng, sp), _dy(sp, 2)
        first = [np.array(w) for w in lb.run([x], dy, params, [])[2]]
        second = lb.run([x], dy, params, [])[2]
        for a, b in zip(first, second, strict=True):
            np.testing.assert_array_equal(a, np.asarray(b))


@pytest.mark.parametrize("bad_id", [5.0, -1.0, 1e9, float("nan"), float("inf")])
def test_embedding_id_out_of_range_is_an_error(bad_id):
    sp = layer_spec("embedding", (1, 4, 1), vocab=5, hidden=3, positions=4)
    x = np.array([[0, 1, bad_id, 2]], np.float32).reshape(1, 1, 4, 1)
    with pytest.raises(ValueError, match=r"token id .* outside \[0, 5\)"):
        run_layer(_core, sp, 1, [x], np.zeros((1, 3, 4, 1), np.float32), _params(np.random.default_rng(0), sp))


def _with(sp, **changes):
    return {**sp, **changes}


@pytest.mark.parametrize("bad, message", [
    (_with(layer_spec("embedding", (1, 4, 1), vocab=5, hidden=3, positions=4), in_shapes=[[1, 6, 1]],
           out_shape=[3, 6, 1]), "longer than positions"),
    (_with(layer_spec("embedding", (1, 4, 1), vocab=5, hidden=3, positions=4, token_types=2),
           param_shapes=[[5, 3], [4, 3]]), "param_shapes"),
    (_with(layer_spec("embedding", (1, 4, 1), vocab=5, hidden=3, positions=4), in_shapes=[[2, 4, 1]]), "token ids"),
    (_with(layer_spec("gelu", (3, 2, 1)), attrs={"approximate": 2}), "approximate"),
    (_with(layer_spec("linear", (3, 2, 1), out_features=4), param_shapes=[[4, 2], [4]]), "param_shapes"),
    (_with(layer_spec("linear", (3, 2, 1), out_features=4, bias=False), param_shapes=[[4, 3], [4]]), "param_shapes"),
    (_with(layer_spec("layernorm", (3, 2, 1)), attrs={"eps": 0}), "eps"),
    (_with(layer_spec("select_token", (3, 2, 1)), attrs={"index": 2}), "outside the sequence"),
    (_with(layer_spec("tokens", (3, 2, 2)), out_shape=[3, 4, 1]), "out_shape"),
])
def test_bad_transformer_specs_are_value_errors(bad, message):
    with pytest.raises(ValueError, match=message):
        _core.LayerBench(bad, 2)


MY_TYPES = ("embedding", "tokens", "layernorm", "linear", "gelu", "tanh", "select_token", "dropout", "add")


@pytest.mark.parametrize("net", ["gpt2-small:seq=16", "vit-b16"])
def test_real_net_layers_build_and_run(net):
    """Every distinct layer of these types in GPT-2 small (seq 16) and ViT-B/16 builds and runs a
    timed forward and backward at batch 2 (the full 50257 x 768 token table included)."""
    seen = set()
    for sp in load_network(net).layer_specs():
        key = (sp["type"], repr(sp["in_shapes"]), repr(sp["attrs"]))
        if sp["type"] not in MY_TYPES or key in seen:
            continue
        seen.add(key)
        lb = _core.LayerBench(sp, 2)
        for p in ("fwd", "bwd"):
            assert min(lb.time(p, 0, 1)) >= 0
    assert {k[0] for k in seen} >= ({"embedding", "layernorm", "linear", "gelu", "dropout", "add"} if "gpt" in net
                                    else {"tokens", "layernorm", "linear", "gelu", "select_token", "add"})


def test_gpt_uses_the_tanh_gelu_bert_and_vit_the_erf():
    def approx(net):
        return {sp["attrs"]["approximate"] for sp in load_network(net).layer_specs() if sp["type"] == "gelu"}
    assert approx("gpt2-small:seq=16") == {True}
    assert approx("vit-b16") == {False}


def test_encoder_without_attention_runs_in_the_executor():
    """A small BERT-like stack (embedding with token types, LN, MLP, residual, pooler with tanh) and a
    tiny ViT front end run a whole iteration on the CPU executor: token ids as data, the classifier
    loss at the end, every layer timed forward and backward."""
    import gdlbench
    enc = {"name": "tiny-enc", "input": [1, 12, 1], "layers": [
        {"name": "emb", "type": "embedding", "vocab": 50, "hidden": 16, "positions": 16, "token_types": 2},
        {"name": "ln0", "type": "layernorm"}, {"name": "fc1", "type": "linear", "out_features": 64},
        {"name": "act", "type": "gelu", "approximate": True}, {"name": "fc2", "type": "linear", "out_features": 16},
        {"name": "res", "type": "add", "inputs": ["fc2", "ln0"]}, {"name": "ln1", "type": "layernorm"},
        {"name": "cls", "type": "select_token"}, {"name": "pool", "type": "linear", "out_features": 16},
        {"name": "tanh", "type": "tanh"}, {"name": "head", "type": "fc", "out_features": 5},
        {"name": "loss", "type": "softmax_xent"}]}
    vit = {"name": "tiny-vit", "input": [3, 8, 8], "layers": [
        {"name": "patch", "type": "conv", "out_channels": 16, "kernel": 4, "stride": 4},
        {"name": "tok", "type": "tokens"}, {"name": "ln", "type": "layernorm", "eps": 1e-6},
        {"name": "cls", "type": "select_token"}, {"name": "head", "type": "fc", "out_features": 10},
        {"name": "loss", "type": "softmax_xent"}]}
    for net in (enc, vit):
        it = gdlbench.Iteration(net, batch=3, device="cpu", strategy="wfbp", iters=1, warmup=0, io=False).measure()
        assert [lay["name"] for lay in it.layers] == [lay["name"] for lay in net["layers"]]
        assert all(lay["forward"].median > 0 and lay["backward"].median > 0 for lay in it.layers)
