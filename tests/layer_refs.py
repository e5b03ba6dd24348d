"""float64 numpy references of every layer type (forward, dx, dw), shared by the CPU and GPU tests.
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


def softmax_xent_forward(x, labels):
    n = x.shape[0]
    s = x.reshape(n, -1)
    mx = s.max(1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(s - mx).sum(1))
    p = np.exp(s - lse[:, None])
    return float((lse - s[np.arange(n), labels]).mean()), p


def softmax_xent(x, labels):
    n = x.shape[0]
    loss, p = softmax_xent_forward(x, labels)
    d = p.copy()
    d[np.arange(n), labels] -= 1
    y = np.zeros(n)
    y[0] = loss
    return y, [(d / n).reshape(x.shape)], []


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


__all__ = ["bn", "bn_forward", "dropout_keep", "fc", "global_avgpool", "lrn", "lrn_forward",
           "numeric_grad", "pool", "pool_out", "relu", "softmax_xent", "softmax_xent_forward"]
