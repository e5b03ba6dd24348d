"""float64 numpy references of every layer type (forward, dx, dw), shared by the CPU and GPU tests; the
sequence layers (embedding, tokens, layernorm, linear, gelu, tanh, select_token) are in transformer_refs.py.
Each takes per-batch arrays shaped (N, ...) and returns (y, [dx...], [dw...])."""

from __future__ import annotations

import numpy as np

M64 = (1 << 64) - 1


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(M64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def dropout_keep(seed: int, n: int, ratio: float) -> np.ndarray:
    """common/dropout.h in numpy."""
    s = _splitmix64(np.array([seed ^ 0xD1B54A32D192ED03], dtype=np.uint64))[0]
    h = _splitmix64(s ^ np.arange(n, dtype=np.uint64))
    u = (h >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    return u >= np.float32(ratio)


def pool_out(n: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    span = n + 2 * p - k
    o = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and p > 0 and (o - 1) * s >= n + p:
        o -= 1
    return o


def fc(x, dy, w, b=None):
    n = x.shape[0]
    xf = x.reshape(n, -1)
    y = xf @ w.T + (b if b is not None else 0)
    dws = [dy.T @ xf] + ([dy.sum(0)] if b is not None else [])
    return y, [(dy @ w).reshape(x.shape)], dws


def relu(x, dy):
    return np.maximum(x, 0), [dy * (x > 0)], []


def pool(x, dy, kind, kh, kw, sh, sw, ph, pw, ceil_mode):
    n, c, h, w = x.shape
    oh, ow = pool_out(h, kh, sh, ph, ceil_mode), pool_out(w, kw, sw, pw, ceil_mode)
    y = np.zeros((n, c, oh, ow))
    dx = np.zeros_like(x)
    for i in range(oh):
        y0, y1p = i * sh - ph, min(i * sh - ph + kh, h + ph)
        ya, yb = max(y0, 0), min(y1p, h)
        for j in range(ow):
            x0, x1p = j * sw - pw, min(j * sw - pw + kw, w + pw)
            xa, xb = max(x0, 0), min(x1p, w)
            win = x[:, :, ya:yb, xa:xb]
            if kind == "max":
                flat = win.reshape(n, c, -1)
                am = flat.argmax(-1)
                y[:, :, i, j] = flat.max(-1)
                ww = xb - xa
                for a in range(n):
                    for b in range(c):
                        dx[a, b, ya + am[a, b] // ww, xa + am[a, b] % ww] += dy[a, b, i, j]
            else:
                div = (y1p - y0) * (x1p - x0)
                y[:, :, i, j] = win.sum((2, 3)) / div
                dx[:, :, ya:yb, xa:xb] += dy[:, :, i, j][:, :, None, None] / div
    return y, [dx], []


def global_avgpool(x, dy):
    n, c = x.shape[:2]
    hw = x[0, 0].size
    return x.reshape(n, c, -1).mean(-1), [np.broadcast_to(dy.reshape(n, c, 1, 1) / hw, x.shape).copy()], []


def lrn_forward(x, size, alpha, beta, k):
    c = x.shape[1]
    half = (size - 1) // 2
    sq = x * x
    scale = np.empty_like(x)
    for ch in range(c):
        lo, hi = max(0, ch - half), min(c, ch + half + 1)
        scale[:, ch] = k + alpha / size * sq[:, lo:hi].sum(1)
    return x * scale ** -beta, scale


def lrn(x, dy, size, alpha, beta, k):
    y, scale = lrn_forward(x, size, alpha, beta, k)
    c = x.shape[1]
    half = (size - 1) // 2
    r = dy * y / scale
    dx = dy * scale ** -beta
    for ch in range(c):
        lo, hi = max(0, ch - half), min(c, ch + half + 1)
        dx[:, ch] -= 2 * alpha * beta / size * x[:, ch] * r[:, lo:hi].sum(1)
    return y, [dx], []


def bn_forward(x, gamma, beta, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mu = x.mean(axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axes, keepdims=True)
    xhat = (x - mu) / np.sqrt(var + eps)
    return gamma.reshape(shape) * xhat + beta.reshape(shape), xhat, var


def bn(x, dy, gamma, beta, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y, xhat, var = bn_forward(x, gamma, beta, eps)
    m = x.size / x.shape[1]
    dgamma = (dy * xhat).sum(axes)
    dbeta = dy.sum(axes)
    dx = gamma.reshape(shape) / np.sqrt(var + eps) / m * (m * dy - dbeta.reshape(shape) - xhat * dgamma.reshape(shape))
    return y, [dx], [dgamma, dbeta]


def _class_rows(x):
    """(N, C, ...) -> (N * positions, C): the classes of each position, sample-major (the layer's labels)."""
    n, c = x.shape[:2]
    return x.reshape(n, c, -1).transpose(0, 2, 1).reshape(-1, c)


def softmax_xent_forward(x, labels):
    """Mean loss over samples and positions (a softmax over axis 1 at each position) and the softmax,
    in x's shape. labels: one per position, sample-major (N or N * H * W of them)."""
    s = _class_rows(x)
    labels = np.asarray(labels).reshape(-1)
    mx = s.max(1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(s - mx).sum(1))
    p = np.exp(s - lse[:, None])
    n, c = x.shape[:2]
    return float((lse - s[np.arange(len(s)), labels]).mean()), p.reshape(n, -1, c).transpose(0, 2, 1).reshape(x.shape)


def softmax_xent(x, labels):
    n = x.shape[0]
    loss, p = softmax_xent_forward(x, labels)
    d = _class_rows(p)
    m = len(d)
    d[np.arange(m), np.asarray(labels).reshape(-1)] -= 1
    y = np.zeros(n)
    y[0] = loss
    dx = d.reshape(n, -1, x.shape[1]).transpose(0, 2, 1).reshape(x.shape) / m
    return y, [dx], []


def fill_value(seed: int, n: int) -> np.ndarray:
    """common/fill.h's fill_value(seed, i) for i < n, float64 (exact: k / 128)."""
    s = _splitmix64(np.array([seed], dtype=np.uint64))[0]
    h = _splitmix64(s ^ np.arange(n, dtype=np.uint64))
    return ((h % np.uint64(257)).astype(np.int64) - 128) / 128.0


def attention(x, dy, params, heads, bias, causal, ratio=0.0, seed=0):
    """Multi-head self-attention on x (N, D, S, 1) (csrc/cpu/attention.cpp), float64; params in
    param_shapes order; the dropout mask of element (n, h, i, j) is dropout_keep at
    ((n * heads + h) * S + i) * S + j."""
    n, d, s = x.shape[:3]
    dh = d // heads
    xs, dys = x.reshape(n, d, s), dy.reshape(n, d, s)
    wqkv, wo = params[0], params[2 if bias else 1]
    qkv = np.einsum("rd,nds->nrs", wqkv, xs) + (params[1][None, :, None] if bias else 0)
    q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(n, heads, dh, s) for i in range(3))
    sc = np.einsum("nhci,nhcj->nhij", q, k) / np.sqrt(dh)
    if causal:
        sc = np.where(np.triu(np.ones((s, s), bool), 1), -np.inf, sc)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    keep = dropout_keep(seed, n * heads * s * s, ratio).reshape(p.shape) / (1 - ratio) if ratio > 0 else 1.0
    pd = p * keep
    o = np.einsum("nhcj,nhij->nhci", v, pd).reshape(n, d, s)
    y = np.einsum("ed,nds->nes", wo, o) + (params[3][None, :, None] if bias else 0)
    do = np.einsum("ed,nes->nds", wo, dys).reshape(n, heads, dh, s)
    dp = np.einsum("nhci,nhcj->nhij", do, v) * keep
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    dq = np.einsum("nhij,nhcj->nhci", ds, k) / np.sqrt(dh)
    dk = np.einsum("nhij,nhci->nhcj", ds, q) / np.sqrt(dh)
    dv = np.einsum("nhci,nhij->nhcj", do, pd)
    dqkv = np.concatenate([t.reshape(n, d, s) for t in (dq, dk, dv)], axis=1)
    dx = np.einsum("rd,nrs->nds", wqkv, dqkv).reshape(x.shape)
    dws = [np.einsum("nrs,nds->rd", dqkv, xs)] + ([dqkv.sum((0, 2))] if bias else [])
    dws += [np.einsum("nes,nds->ed", dys, o)] + ([dys.sum((0, 2))] if bias else [])
    return y.reshape(x.shape), [dx], dws


def lm_head(x, dy, w, b=None):
    """(N, D, S, 1) -> (N, vocab, S, 1) logits W X_n (+ b); dws: [dW] (+ [db])."""
    n, d, s = x.shape[:3]
    xs, dys = x.reshape(n, d, s), dy.reshape(n, -1, s)
    y = np.einsum("vd,nds->nvs", w, xs) + (b[None, :, None] if b is not None else 0)
    dx = np.einsum("vd,nvs->nds", w, dys).reshape(x.shape)
    dws = [np.einsum("nvs,nds->vd", dys, xs)] + ([dys.sum((0, 2))] if b is not None else [])
    return y.reshape(dy.shape), [dx], dws


def numeric_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar f at x (float64)."""
    g = np.zeros_like(x)
    flat, gf = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        fp = f()
        flat[i] = old - eps
        fm = f()
        flat[i] = old
        gf[i] = (fp - fm) / (2 * eps)
    return g


__all__ = ["attention", "bn", "bn_forward", "dropout_keep", "fc", "fill_value", "global_avgpool", "lm_head", "lrn",
           "lrn_forward", "numeric_grad", "pool", "pool_out", "relu", "softmax_xent", "softmax_xent_forward"]
