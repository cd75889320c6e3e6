"""High-precision references for the geometry of certified regions (mpmath).

Slow and exact enough to judge float64 code on ill-conditioned, near-touching
pairs: every matrix is built from a region's compact form in 60-digit
arithmetic, and ``min_t K(t)`` is found by golden-section search on the
concave ``g(t) = t (1 - t) d^T M(t)^-1 d``.
"""

import mpmath
import numpy as np

mpmath.mp.dps = 60


def covariance(region):
    """``M = T T^T`` of a :class:`smoothlearn.geometry.Region` as an mpmath matrix
    (less ``rho^2 C C^T`` for a region with cuts)."""
    m = _base_covariance(region)
    cuts = region.form.row_cuts(0)
    if cuts is None:
        return m
    rho = mpmath.mpf(region.rho)
    c = mpmath.matrix(cuts.tolist())
    return m - rho**2 * (c * c.T)


def _base_covariance(region):
    d = region.d
    rho = mpmath.mpf(region.rho)
    semi = [rho * mpmath.mpf(float(s)) for s in np.atleast_1d(region.scale)]
    if region.basis is None:
        semi = semi * d if len(semi) == 1 else semi
        return mpmath.diag([s**2 for s in semi])
    # S as run, for any basis: r I + U diag(s - r) U^T (not the closed form
    # r^2 I + U diag(s^2 - r^2) U^T of its square, which holds only for an
    # exactly orthonormal U)
    # numpy object arrays of mpf: the same 60-digit sums, without mpmath's
    # matrix overhead (20x faster at d = 64)
    u = np.vectorize(mpmath.mpf, otypes=[object])(region.basis)
    rest = rho * mpmath.mpf(float(region.scale_rest))
    t = (u * np.array([s - rest for s in semi], dtype=object)) @ u.T
    t[np.diag_indices(d)] += rest
    frame = region.form.frame
    if frame is not None:
        f = np.vectorize(mpmath.mpf, otypes=[object])(frame[0])
        t = f[:, None] * t * f[None, :]
    return mpmath.matrix((t @ t.T).tolist())


def _symmetric_root(m):
    """The symmetric positive square root of an mpmath SPD matrix."""
    evals, evecs = mpmath.eigsy(m)
    root = mpmath.diag([mpmath.sqrt(e) for e in evals])
    return evecs * root * evecs.T


def _g_max(ma, mb, diff):
    """``max_t t (1 - t) d^T ((1 - t) M_A + t M_B)^-1 d`` (g is concave in t)."""

    def g(t):
        m = (1 - t) * ma + t * mb
        return t * (1 - t) * (diff.T * mpmath.lu_solve(m, diff))[0]

    lo, hi = mpmath.mpf(0), mpmath.mpf(1)
    ratio = (mpmath.sqrt(5) - 1) / 2
    x1, x2 = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    g1, g2 = g(x1), g(x2)
    for _ in range(160):
        if g1 < g2:
            lo, x1, g1 = x1, x2, g2
            x2 = lo + ratio * (hi - lo)
            g2 = g(x2)
        else:
            hi, x2, g2 = x2, x1, g1
            x1 = hi - ratio * (hi - lo)
            g1 = g(x1)
    return max(g1, g2)


def min_k(region_a, region_b):
    """``min_t K(t)`` in high precision: negative iff the ellipsoids are disjoint."""
    diff = mpmath.matrix(
        [mpmath.mpf(float(v)) for v in region_b.center]
    ) - mpmath.matrix([mpmath.mpf(float(v)) for v in region_a.center])
    return 1 - _g_max(covariance(region_a), covariance(region_b), diff)


def touching_distance(region_a, region_b_shape, direction):
    """``tau`` such that ``region_b_shape`` centred at ``a + tau u`` touches ``a``.

    ``K(t) = 1 - tau^2 g_u(t)`` for the unit direction ``u``, so the pair
    touches at ``tau = 1 / sqrt(max_t g_u(t))``.
    """
    u = np.asarray(direction, dtype=np.float64)
    diff = mpmath.matrix([mpmath.mpf(float(v)) for v in u])
    g = _g_max(covariance(region_a), covariance(region_b_shape), diff)
    return 1 / mpmath.sqrt(g)


def l2_distance(region, point):
    """Euclidean distance from ``point`` to the ellipsoid ``region`` (0 inside).

    Projection by the secular equation in the eigenbasis of ``A = M^-1``,
    solved by bisection in high precision.
    """
    m = covariance(region)
    evals, evecs = mpmath.eigsy(m)
    y_full = mpmath.matrix([mpmath.mpf(float(p)) for p in point]) - mpmath.matrix(
        [mpmath.mpf(float(c)) for c in region.center]
    )
    y = evecs.T * y_full
    alpha = [1 / evals[i] for i in range(region.d)]
    if sum(y[i] ** 2 * alpha[i] for i in range(region.d)) <= 1:
        return mpmath.mpf(0)

    def f(lam):
        return (
            sum(
                y[i] ** 2 * alpha[i] / (1 + 2 * lam * alpha[i]) ** 2
                for i in range(region.d)
            )
            - 1
        )

    lo, hi = mpmath.mpf(0), 1 / min(alpha)
    while f(hi) > 0:
        hi *= 4
    for _ in range(400):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    lam = (lo + hi) / 2
    return mpmath.sqrt(
        sum(
            (2 * lam * alpha[i] / (1 + 2 * lam * alpha[i]) * y[i]) ** 2
            for i in range(region.d)
        )
    )


def largest_ratio(inner, outer):
    """``lambda_max(M_outer^-1 M_inner)``: at most 1 iff ``inner`` (same centre)
    lies in ``outer``."""
    lower = mpmath.cholesky(covariance(outer))
    inv = mpmath.inverse(lower)
    evals = mpmath.eigsy(inv * covariance(inner) * inv.T, eigvals_only=True)
    return max(evals[i] for i in range(evals.rows))


def smallest_semi_axis(region):
    """``sqrt(lambda_min(M))``: the region's inscribed radius."""
    evals = mpmath.eigsy(covariance(region), eigvals_only=True)
    return mpmath.sqrt(min(evals[i] for i in range(evals.rows)))


def log_volume_mean(region):
    """``log det(M) / (2 d)``: the log of the geometric mean semi-axis."""
    return mpmath.log(mpmath.det(covariance(region))) / (2 * region.d)
