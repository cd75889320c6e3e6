"""Double-double arithmetic on numpy arrays (a value is a pair ``hi + lo`` of
float64 arrays, about 32 significant digits).

Only what the memory's volume needs (issue 46): error-free sums and products
(Knuth's two-sum, Dekker's split product; no fused multiply-add is assumed)
and a compensated matrix product (Ogita, Rump and Oishi's Dot2, whose result
is as accurate as if computed in twice the working precision: its error is
within about ``n^2 eps^2`` of the sum of the terms' magnitudes, besides
double-double's own rounding of the result).
"""

import numpy as np

__all__ = ["dd_add", "dd_matmul", "dd_mul", "dd_sub", "dd_gram", "two_prod", "two_sum"]

_SPLITTER = 134217729.0  # 2^27 + 1: Dekker's split of a float64


def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a):
    c = _SPLITTER * a
    high = c - (c - a)
    return high, a - high


def two_prod(a, b):
    """``(p, e)`` with ``p = fl(a b)`` and ``p + e = a b`` exactly (no
    overflow in the split: ``|a|, |b|`` below about 1e300)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, al * bl - (((p - ah * bh) - al * bh) - ah * bl)


def _normalised(hi, lo):
    s = hi + lo
    return s, lo - (s - hi)


def dd_mul(ah, al, bh, bl):
    """``(ah + al)(bh + bl)`` in double-double."""
    p, e = two_prod(ah, bh)
    return _normalised(p, e + (ah * bl + al * bh))


def dd_sub(ah, al, bh, bl):
    """``(ah + al) - (bh + bl)`` in double-double."""
    s, e = two_sum(ah, -bh)
    return _normalised(s, e + (al - bl))


def dd_matmul(a, xh, xl):
    """``A (xh + xl)`` for a float64 matrix ``A`` (m, n) and a double-double
    ``x`` (n, q): Dot2 along ``n``, then ``A xl`` (``|xl| <= eps |xh|``)
    added in float64."""
    a = np.asarray(a, dtype=np.float64)
    sh = np.zeros((a.shape[0], xh.shape[1]))
    sl = np.zeros_like(sh)
    for j in range(a.shape[1]):
        p, e = two_prod(a[:, j, None], xh[j][None, :])
        sh, t = two_sum(sh, p)
        sl += t + e
    return _normalised(sh, sl + a @ xl)


def dd_gram(xh, xl):
    """``X^T X`` for a double-double ``X`` (n, q), in double-double."""
    q = xh.shape[1]
    sh = np.zeros((q, q))
    sl = np.zeros_like(sh)
    for j in range(xh.shape[0]):
        p, e = two_prod(xh[j][:, None], xh[j][None, :])
        sh, t = two_sum(sh, p)
        cross = xh[j][:, None] * xl[j][None, :]
        sl += t + e + cross + cross.T
    return _normalised(sh, sl)


def dd_add(ah, al, bh, bl):
    """``(ah + al) + (bh + bl)`` in double-double."""
    return dd_sub(ah, al, -bh, -bl)
