"""float64 numpy references of the transformer layers (gdlbench/nets/network.py's docstring), in
gdlbench's layout: a sequence of S tokens of width D is the per-sample shape (D, S, 1), so a batch
is (B, D, S, 1). Each returns (y, [dx...], [dw...]) for the upstream gradient dy, like layer_refs."""

from __future__ import annotations

import math

import numpy as np

erf = np.vectorize(math.erf)  # float64, element by element (no scipy in the test env)


def token_types(seq: int, types: int) -> np.ndarray:
    """The embedding's token type per position: a sentence pair, 0 before S // 2, 1 from it on."""
    return np.minimum((np.arange(seq) >= seq // 2).astype(int), max(types - 1, 0))


def embedding(ids, dy, tok, pos, typ=None):
    b, _, s, _ = ids.shape
    d = tok.shape[1]
    idx = np.rint(ids.reshape(b, s)).astype(int)
    rows = tok[idx] + pos[:s][None]                          # (B, S, D)
    types = token_types(s, 0 if typ is None else typ.shape[0])
    if typ is not None:
        rows = rows + typ[types][None]
    g = dy[..., 0].transpose(0, 2, 1)                        # (B, S, D)
    dtok = np.zeros_like(tok)
    np.add.at(dtok, idx.ravel(), g.reshape(-1, d))
    dpos = np.zeros_like(pos)
    dpos[:s] = g.sum(0)
    dws = [dtok, dpos]
    if typ is not None:
        dtyp = np.zeros_like(typ)
        np.add.at(dtyp, types, g.sum(0))
        dws.append(dtyp)
    return rows.transpose(0, 2, 1)[..., None], [np.zeros_like(ids)], dws


def tokens(x, dy, *params):
    """ViT: (C, H, W) -> (C, H*W [+1], 1); params (cls [1, C],) pos [S, C]."""
    b, c = x.shape[:2]
    seq = x.reshape(b, c, -1)
    cls, pos = (params if len(params) == 2 else (None, params[0]))
    if cls is not None:
        seq = np.concatenate([np.broadcast_to(cls.T[None], (b, c, 1)), seq], axis=2)
    y = seq + pos.T[None]
    g = dy[..., 0]
    ct = 0 if cls is None else 1
    dx = g[:, :, ct:].reshape(x.shape)
    dpos = g.sum(0).T
    return y[..., None], [dx], ([dpos[:1].copy()] if cls is not None else []) + [dpos]


def layernorm(x, dy, gamma, beta, eps):
    """Over the features (axis 1) at each position."""
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    xhat = (x - mu) * rstd
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = xhat * gamma.reshape(shape) + beta.reshape(shape)
    g = dy * gamma.reshape(shape)
    dx = rstd * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    axes = (0,) + tuple(range(2, x.ndim))
    return y, [dx], [(dy * xhat).sum(axis=axes), dy.sum(axis=axes)]


def linear(x, dy, w, b=None):
    """Per position: Y_b = W X_b (+ b), X_b (C, H*W)."""
    n, c = x.shape[:2]
    f = w.shape[0]
    xs, gs = x.reshape(n, c, -1), dy.reshape(n, f, -1)
    y = np.einsum("fc,ncp->nfp", w, xs)
    if b is not None:
        y = y + b[None, :, None]
    dx = np.einsum("fc,nfp->ncp", w, gs).reshape(x.shape)
    dws = [np.einsum("nfp,ncp->fc", gs, xs)] + ([gs.sum(axis=(0, 2))] if b is not None else [])
    return y.reshape(dy.shape), [dx], dws


def gelu(x, dy, approximate=False):
    if approximate:
        k = math.sqrt(2 / math.pi)
        t = np.tanh(k * (x + 0.044715 * x ** 3))
        y = 0.5 * x * (1 + t)
        dydx = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
    else:
        cdf = 0.5 * (1 + erf(x / math.sqrt(2)))
        y = x * cdf
        dydx = cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return y, [dy * dydx], []


def tanh(x, dy):
    y = np.tanh(x)
    return y, [dy * (1 - y * y)], []


def select_token(x, dy, index):
    b, c = x.shape[:2]
    y = x.reshape(b, c, -1)[:, :, index]
    dx = np.zeros_like(x).reshape(b, c, -1)
    dx[:, :, index] = dy.reshape(b, c)
    return y.reshape(dy.shape), [dx.reshape(x.shape)], []
