"""Geometry of certified regions: membership, intersection, projection.

A region is ``{a + T u : ||u|| <= 1}`` in the family's norm, where
``T = rho * S`` with ``rho = c * gap`` (DESIGN.md sections 3 and 6). Its
"covariance" form is ``M = T T^T``; as an ellipsoid
``{x : (x - a)^T A (x - a) <= 1}`` its shape matrix is ``A = M^-1 = S^-2 / rho^2``
(squared: ``S^-1 / rho`` would give semi-axes ``sqrt(rho)``, unsound for
``rho > 1``).

* :func:`ellipsoids_disjoint` -- ANCER App. D.2 / RANCER eq. (5): the ellipsoids
  are disjoint iff some ``t`` in (0, 1) has
  ``K(t) = 1 - d^T (M_B / (1 - t) + M_A / t)^-1 d < 0`` (``d = b - a``); ``K`` is
  convex. For general SPD pairs one generalised eigendecomposition turns ``K``
  into a sum of scalar terms; diagonal pairs have the closed form of D.2.
* :func:`l2_distance_to_ellipsoid` -- ANCER App. D.4 / RANCER eq. (6): project
  ``y = b - a`` onto ``{x : x^T A x <= 1}`` by the monotone scalar equation
  ``y^T (2 lam A + I)^-1 A (2 lam A + I)^-1 y = 1``.
* :func:`l1_distance_lower_bound` -- ANCER App. D.5, corrected: the facet
  hyperplane of the cross-polytope in ``y``'s orthant separates ``y`` from it,
  and the l1 distance from ``y`` to that hyperplane is ``(w.y - 1) /
  ||w||_inf``. D.5 takes the l1 norm of the l2 projection vector instead, which
  can exceed the true l1 distance (an l1 ball of that radius may cross the
  hyperplane); we follow the derivation, not the paper's formula.

Regions here are :class:`Region` objects in one of three compact forms.
"""

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq, minimize_scalar

__all__ = [
    "Region",
    "contains_point",
    "ellipsoids_disjoint",
    "l1_distance_lower_bound",
    "l2_distance_to_ellipsoid",
]


@dataclass
class Region:
    """One certified region ``{center + T u : ||u||_norm <= 1}``, ``T = rho S``.

    Attributes
    ----------
    center : ndarray of shape (d,)
    rho : float
        ``c * gap``.
    scale : float or ndarray of shape (d,) or (k,)
        Isotropic, diagonal, or the in-basis diagonal of a rotated scale.
    norm : {'l2', 'l1'}
    basis : ndarray of shape (d, k), optional
        Orthonormal columns of a rotated scale.
    scale_rest : float, optional
        Isotropic scale on the complement of ``basis``.
    """

    center: np.ndarray
    rho: float
    scale: object
    norm: str = "l2"
    basis: np.ndarray = None
    scale_rest: float = None

    @property
    def d(self):
        return self.center.shape[0]

    @property
    def is_rotated(self):
        return self.basis is not None

    def semi_axes(self):
        """``rho * s`` per axis of the region's own frame (length d or k (+rest))."""
        return self.rho * np.atleast_1d(np.asarray(self.scale, dtype=np.float64))

    @property
    def circumradius(self):
        """Radius of the smallest ``norm`` ball around the centre holding the region."""
        top = float(np.max(self.semi_axes()))
        if self.is_rotated and self.basis.shape[1] < self.d:
            top = max(top, self.rho * self.scale_rest)
        return top

    @property
    def inradius(self):
        """Radius of the largest ``norm`` ball around the centre inside the region."""
        low = float(np.min(self.semi_axes()))
        if self.is_rotated and self.basis.shape[1] < self.d:
            low = min(low, self.rho * self.scale_rest)
        return low

    def whiten(self, v):
        """``T^-1 v`` for ``v`` of shape (..., d)."""
        v = np.asarray(v, dtype=np.float64)
        if not self.is_rotated:
            return v / self.semi_axes()
        u = self.basis
        coef = v @ u
        rest = v - coef @ u.T
        return (coef / self.semi_axes()) @ u.T + rest / (self.rho * self.scale_rest)

    def covariance(self):
        """Dense ``M = T T^T`` (d x d)."""
        if not self.is_rotated:
            return np.diag(np.broadcast_to(self.semi_axes() ** 2, (self.d,)))
        u = self.basis
        rest2 = (self.rho * self.scale_rest) ** 2
        return (u * (self.semi_axes() ** 2 - rest2)) @ u.T + rest2 * np.eye(self.d)

    def diagonal_covariance(self):
        """The diagonal of ``M`` when ``M`` is diagonal, else None."""
        if self.is_rotated:
            return None
        return np.broadcast_to(self.semi_axes() ** 2, (self.d,))

    def ball(self, radius):
        """The ball of ``radius`` (in ``norm``) around the centre, as a Region."""
        return Region(self.center, self.rho, radius / self.rho, self.norm)


def contains_point(region, x):
    """Whether ``x`` lies in ``region`` (closed)."""
    ord_ = 2 if region.norm == "l2" else 1
    return bool(np.linalg.norm(region.whiten(x - region.center), ord=ord_) <= 1.0)


def _minimise_k(k_of_t):
    """Minimum of a convex K on (0, 1)."""
    result = minimize_scalar(
        k_of_t, bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-10}
    )
    return float(result.fun)


def ellipsoids_disjoint(region_a, region_b, *, tolerance=1e-9):
    """Whether two ellipsoids (or their l2 over-approximations) are disjoint.

    l1 regions ``{||T^-1 (x - a)||_1 <= 1}`` are over-approximated by the
    ellipsoids ``{||T^-1 (x - a)||_2 <= 1}`` (ANCER App. D.3): disjoint
    over-approximations imply disjoint regions.

    Returns True only when ``min K(t) < -tolerance``: near-touching pairs
    count as intersecting, the sound side for the memory.
    """
    return min_k(region_a, region_b) < -tolerance


def min_k(region_a, region_b):
    """``min_t K(t)`` of the pair (rancer.md eq. 5): negative iff disjoint.

    ``K(t) = 1 - t (1 - t) d^T ((1 - t) M_A + t M_B)^-1 d`` with ``M = T T^T``
    and ``d`` the centres' difference. Three evaluations of the inner solve:
    closed form for diagonal pairs (ancer.md D.2); for isotropic or rank-k
    rotated pairs (``M = c I + U D U^T``) a (k_a + k_b)-sized solve per ``t``
    after O(d k) set-up; otherwise one generalised eigendecomposition (O(d^3)).
    """
    diff = region_b.center - region_a.center
    da, db = region_a.diagonal_covariance(), region_b.diagonal_covariance()
    if da is not None and db is not None:
        d2 = diff**2

        def k_of_t(t):
            if t <= 0.0 or t >= 1.0:
                return 1.0
            return 1.0 - t * (1.0 - t) * np.sum(d2 / (t * db + (1.0 - t) * da))

        return _minimise_k(k_of_t)
    low_a, low_b = _low_rank_form(region_a), _low_rank_form(region_b)
    if low_a is not None and low_b is not None:
        if low_a[1].shape[1] + low_b[1].shape[1] < region_a.d:
            return _min_k_low_rank(diff, low_a, low_b)
    return _min_k_dense(diff, region_a, region_b)


def _low_rank_form(region):
    """``(c, U, D)`` with ``M = c I + U diag(D) U^T``; None if diagonal or full."""
    if not region.is_rotated:
        if np.ndim(region.scale) == 0 or np.size(region.scale) == 1:
            c = float(region.semi_axes()[0]) ** 2
            return c, np.zeros((region.d, 0)), np.zeros(0)
        return None
    if region.basis.shape[1] >= region.d:
        return None
    c = float(region.rho * region.scale_rest) ** 2
    return c, region.basis, region.semi_axes() ** 2 - c


def _min_k_low_rank(diff, low_a, low_b):
    # M(t) = c(t) I + V E(t) V^T with V = [U_a U_b], E(t) = diag((1-t) D_a, t D_b):
    # d^T M(t)^-1 d = (|d|^2 - p^T E (c I + G E)^-1 p) / c, G = V^T V, p = V^T d
    (ca, ua, dA), (cb, ub, dB) = low_a, low_b
    V = np.hstack([ua, ub])
    G, p = V.T @ V, V.T @ diff
    dd = float(diff @ diff)
    eye = np.eye(len(p))

    def k_of_t(t):
        if t <= 0.0 or t >= 1.0:
            return 1.0
        c = (1.0 - t) * ca + t * cb
        E = np.concatenate([(1.0 - t) * dA, t * dB])
        inner = np.linalg.solve(c * eye + G * E, p) if len(p) else p
        quad = (dd - float((p * E) @ inner)) / c
        return 1.0 - t * (1.0 - t) * quad

    return _minimise_k(k_of_t)


def _min_k_dense(diff, region_a, region_b):
    # general SPD pair: with M_A = L L^T and L^-1 M_B L^-T = V diag(lam) V^T,
    # K(t) = 1 - sum_i w_i^2 t (1 - t) / (lam_i t + 1 - t), w = V^T L^-1 d.
    ma, mb = region_a.covariance(), region_b.covariance()
    chol = np.linalg.cholesky(ma)
    inv_chol = np.linalg.solve(chol, np.eye(len(ma)))
    lam, vecs = np.linalg.eigh(inv_chol @ mb @ inv_chol.T)
    lam = np.clip(lam, 0.0, None)
    w2 = (vecs.T @ (inv_chol @ diff)) ** 2

    def k_general(t):
        if t <= 0.0 or t >= 1.0:
            return 1.0
        return 1.0 - t * (1.0 - t) * np.sum(w2 / (lam * t + 1.0 - t))

    return _minimise_k(k_general)


def _shape_eigen(region):
    """Eigenvalues ``alpha`` of ``A = M^-1`` and coordinates in its eigenbasis."""
    semi = region.semi_axes()
    if not region.is_rotated:
        alpha = np.broadcast_to(1.0 / semi**2, (region.d,))
        return alpha, lambda y: y
    u = region.basis
    alpha_in = 1.0 / semi**2
    rest = region.rho * region.scale_rest
    k = u.shape[1]

    def coordinates(y):
        coef = u.T @ y
        if k == region.d:
            return coef
        perp = np.linalg.norm(y - u @ coef)
        return np.append(coef, perp)

    alpha = alpha_in if k == region.d else np.append(alpha_in, 1.0 / rest**2)
    return alpha, coordinates


def l2_distance_to_ellipsoid(region, point):
    """Euclidean distance from ``point`` (outside) to the ellipsoid ``region``.

    Solves ``f(lam) = sum_i y_i^2 alpha_i / (1 + 2 lam alpha_i)^2 - 1 = 0`` in the
    shape's eigenbasis (``f`` decreases monotonically for ``lam > 0``), then
    ``x* = (2 lam A + I)^-1 y`` and the distance ``||x* - y||``. For a rotated
    rank-k region the complement of the basis counts as one coordinate.

    Returns 0 when ``point`` lies inside.
    """
    y_full = np.asarray(point, dtype=np.float64) - region.center
    alpha, coordinates = _shape_eigen(region)
    y = coordinates(y_full)
    y2a = y**2 * alpha
    if y2a.sum() <= 1.0:
        return 0.0

    def f(lam):
        return np.sum(y2a / (1.0 + 2.0 * lam * alpha) ** 2) - 1.0

    high = 1.0 / alpha.min()
    while f(high) > 0:
        high *= 4.0
    lam = brentq(f, 0.0, high, xtol=1e-14, rtol=1e-12, maxiter=500)
    # x* - y = -(2 lam alpha / (1 + 2 lam alpha)) y, coordinate-wise
    return float(np.linalg.norm(2.0 * lam * alpha / (1.0 + 2.0 * lam * alpha) * y))


def l1_distance_lower_bound(region, point):
    """A lower bound of the l1 distance from ``point`` to a cross-polytope region.

    ``region = {x : sum_i |x_i - a_i| / t_i <= 1}`` (half-widths ``t``). The
    facet hyperplane ``sum_i sign(y_i) x_i / t_i = 1`` in ``y = point - a``'s
    orthant has the region on one side and ``y`` on the other, so the l1 ball
    of radius ``(||y / t||_1 - 1) * min_i t_i`` (the l1 distance to that
    hyperplane) around ``point`` misses the region. Returns 0 inside.
    """
    if region.is_rotated:
        raise ValueError("l1 regions are isotropic or diagonal")
    t = np.broadcast_to(region.semi_axes(), (region.d,))
    y = np.asarray(point, dtype=np.float64) - region.center
    excess = np.sum(np.abs(y) / t) - 1.0
    return float(max(excess, 0.0) * t.min())
