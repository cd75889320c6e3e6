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

import numpy as np
import scipy.linalg
from scipy.optimize import brentq, minimize_scalar

from .scale import Scale

__all__ = [
    "Region",
    "contains_point",
    "ellipsoids_disjoint",
    "l1_distance_lower_bound",
    "l2_distance_to_ellipsoid",
    "min_k",
    "support_extent",
]


class Region:
    """One certified region ``{center + T u : ||u||_norm <= 1}``, ``T = rho S``.

    ``S`` is one row of a :class:`~smoothlearn.regions.Scale`, the type
    certificates hold: a region is a certificate's row with its ``rho``.

    Parameters
    ----------
    center : ndarray of shape (d,)
    rho : float
        ``c * gap``.
    scale : Scale, float or ndarray of shape (d,) or (k,)
        A one-row :class:`~smoothlearn.regions.Scale`, or its values:
        isotropic, diagonal, or the in-basis diagonal of a rotated scale.
    norm : {'l2', 'l1'}
    basis : ndarray of shape (d, k), optional
        Orthonormal columns of a rotated scale (with values only).
    scale_rest : float, optional
        Isotropic scale on the complement of ``basis`` (with values only).
    """

    def __init__(self, center, rho, scale, norm="l2", basis=None, scale_rest=None):
        if not isinstance(scale, Scale):
            values = np.asarray(scale, dtype=np.float64)
            values = values.reshape(1) if values.ndim == 0 else values[None]
            if basis is None:
                scale = Scale(values)
            else:
                rest = np.array([scale_rest], dtype=np.float64)
                scale = Scale(values, np.asarray(basis)[None], rest)
        elif basis is not None or scale_rest is not None:
            raise TypeError("a Scale carries its own basis and rest")
        if len(scale) != 1:
            raise ValueError("a Region holds one row of a Scale")
        self.center = center
        self.rho = rho
        self.form = scale
        self.norm = norm

    @property
    def d(self):
        return self.center.shape[0]

    @property
    def is_rotated(self):
        return self.form.kind == "rotated"

    @property
    def scale(self):
        """The scale's values: a float (isotropic), or (d,) or (k,) values."""
        values = self.form.values[0]
        return float(values) if np.ndim(values) == 0 else values

    @property
    def basis(self):
        return self.form.basis[0] if self.is_rotated else None

    @property
    def scale_rest(self):
        return float(self.form.rest[0]) if self.is_rotated else None

    def semi_axes(self):
        """``rho * s`` per axis of the region's own frame (length d or k (+rest))."""
        return self.rho * np.atleast_1d(np.asarray(self.scale, dtype=np.float64))

    @property
    def circumradius(self):
        """Radius of the smallest ``norm`` ball around the centre holding the region."""
        return float(self.rho * self.form.largest()[0])

    @property
    def inradius(self):
        """Radius of the largest ``norm`` ball around the centre inside the region."""
        return float(self.rho * self.form.smallest()[0])

    def whiten(self, v):
        """``T^-1 v`` for ``v`` of shape (..., d) (``||T^-1 v||`` is the gauge)."""
        return self.form.apply(0, v, power=-1.0, factor=self.rho)

    def whiten_transpose(self, v):
        """``T^-T v``: with :meth:`whiten`, ``M^-1 v = T^-T T^-1 v`` (``T`` is
        symmetric but for a cut region's factor)."""
        return self.form.apply(0, v, power=-1.0, factor=self.rho, transpose=True)

    def stretch(self, v):
        """``T^T v`` for ``v`` of shape (..., d): its norm is the support
        function (``T`` is symmetric but for a cut region's factor)."""
        return self.form.apply(0, v, power=1.0, factor=self.rho, transpose=True)

    def matrix(self):
        """Dense ``T = rho S`` (d x d; for a cut region its factor, with
        ``T T^T`` the covariance: what :func:`ellipsoids_disjoint` needs)."""
        return self.form.factor(0, self.d, factor=self.rho)

    def covariance(self):
        """Dense ``M = T T^T`` (d x d)."""
        return self.form.covariance(0, self.d, factor=self.rho)

    def diagonal_covariance(self):
        """The diagonal of ``M`` when ``M`` is diagonal, else None."""
        return self.form.diagonal_covariance(0, self.d, factor=self.rho)

    def ball(self, radius):
        """A ball of radius at most ``radius`` (in ``norm``) around the centre
        and inside this region, as a Region.

        Its scale is ``radius / rho`` rounded down, and at most this region's
        proved smallest semi-axis (``form.smallest()``): ``radius`` is often
        :attr:`inradius`, ``rho * smallest`` rounded to nearest, whose
        quotient by ``rho`` came back one float step above ``smallest``
        (a ball 2.4e-16 outside a diagonal region).
        """
        scale = np.nextafter(radius / self.rho, 0.0)
        scale = min(float(scale), float(self.form.smallest()[0]))
        return Region(self.center, self.rho, max(scale, 0.0), self.norm)

    def capped(self, radius):
        """This region with every semi-axis capped at ``radius``, as a Region.

        Inside this region and inside the ``norm`` ball of ``radius`` (an l1
        cross-polytope's half-widths capped at ``radius`` keep its vertices in
        that l1 ball), and holding the ball of ``min(radius, inradius)``
        (:meth:`~smoothlearn.scale.Scale.capped`).
        """
        form = self.form.capped(0, self.d, radius / self.rho)
        return Region(self.center, self.rho, form, self.norm)

    def cut(self, direction, extent, keep=None):
        """This region cut to the slab ``|v.(x - center)| <= extent`` by a
        rank-one down-date of its covariance (:meth:`~smoothlearn.scale.Scale.cut`;
        ``keep``: a radius whose ball it keeps inside), as a Region; None
        where the cut is too thin to be sound in floating point. l2 regions
        only."""
        if self.norm != "l2":
            raise ValueError("cuts are for l2 regions")
        keep = None if keep is None else keep / self.rho
        form = self.form.cut(0, self.d, direction, extent / self.rho, keep=keep)
        return None if form is None else Region(self.center, self.rho, form, self.norm)


def contains_point(region, x):
    """Whether ``x`` lies in ``region`` (closed)."""
    ord_ = 2 if region.norm == "l2" else 1
    return bool(np.linalg.norm(region.whiten(x - region.center), ord=ord_) <= 1.0)


def support_extent(region, v):
    """``max over x in region of v.(x - center)``: the support function at ``v``.

    ``||T v||`` in the dual norm (``T = rho S`` is symmetric): l2 for an
    ellipsoid, the max-norm for an l1 cross-polytope. A proved upper bound:
    an ellipsoid's is ``sqrt(v^T M v)`` with its rounding bounded against the
    quantities rounded (:meth:`~smoothlearn.scale.Scale.support`; a cut
    region's from ``S^2 - C C^T`` directly, never through its factor's
    ``sqrt(1 - sv^2)``); a cross-polytope's element-wise products within
    ``4 eps``.
    """
    if region.norm == "l2":
        return region.form.support(0, v, factor=region.rho)
    stretched = region.stretch(v)
    eps = np.finfo(np.float64).eps
    return float(np.linalg.norm(stretched, ord=np.inf)) * (1.0 + 4.0 * eps)


#: Relative margin a separating hyperplane must clear before two regions count
#: as disjoint, or a distance as certain: far above float64 rounding of the
#: few dot products involved (about ``d * 1e-16``), far below any radius that
#: matters.
SEPARATION_MARGIN = 1e-9


def _minimise_k(k_of_t):
    """``(min K, argmin t)`` of a convex K on (0, 1)."""
    result = minimize_scalar(
        k_of_t, bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-10}
    )
    return float(result.fun), float(result.x)


def ellipsoids_disjoint(region_a, region_b, *, tolerance=SEPARATION_MARGIN):
    """Whether two regions are disjoint, erring only towards "they intersect".

    The convex ``K(t)`` of :func:`min_k` proposes a ``t`` (l1 regions are
    over-approximated by the ellipsoids ``{||T^-1 (x - a)||_2 <= 1}``, ANCER
    App. D.3); where ``K(t) < 0`` the direction ``v = M(t)^-1 d`` separates the
    ellipsoids (Cauchy-Schwarz on ``(1 - t) v^T M_A v + t v^T M_B v = v^T d``).
    That witness is then re-checked on the regions themselves:
    ``v.d - h_A(v) - h_B(v)`` (support functions, :func:`support_extent`) must
    exceed ``tolerance`` times the size of the terms, so rounding in ``K`` (ill
    conditioned scales, near-touching pairs) can only make a disjoint pair
    count as intersecting: the sound side for the memory.

    Before ``K``, cheaper proofs settle most pairs: the same re-check on the
    directions ``d``, ``M_A^-1 d`` and ``M_B^-1 d`` (any direction that
    separates proves disjointness), and a point of the centres' segment in
    both regions (which proves they meet). Each is a proof, so the answer
    differs from ``K``'s alone only where ``K``'s witness misses the margin.
    """
    diff = region_b.center - region_a.center

    def separates(v):
        norm_v = float(np.linalg.norm(v))
        if not np.isfinite(norm_v) or norm_v == 0.0:
            return False
        separation = (
            float(v @ diff) - support_extent(region_a, v) - support_extent(region_b, v)
        )
        size = norm_v * (
            float(np.linalg.norm(diff)) + region_a.circumradius + region_b.circumradius
        )
        return separation > tolerance * size

    # Cheap answers first (a few products with T^-1 and T, O(d^2) for a dense
    # form, where K(t) needs an O(d^3) SVD): the centres' difference and
    # K(t)'s witness M(t)^-1 d at its ends t -> 0 and t -> 1, then a point of
    # the centres' segment inside both. Of the 740 pairs of a Fashion-MNIST
    # dense RANCER memory that reached K(t), all disjoint, the centres'
    # difference alone separated 723.
    whitened_a, whitened_b = region_a.whiten(diff), region_b.whiten(diff)
    for v in (
        diff,
        region_a.whiten_transpose(whitened_a),
        region_b.whiten_transpose(whitened_b),
    ):
        if separates(v):
            return True
    if _segment_meets_both(region_a, region_b, whitened_a, whitened_b):
        return False
    # K(t) only proposes a witness: where a degenerate region defeats it
    # (inf or NaN from whitening a flat cut region), the pair counts as
    # meeting, the sound side
    try:
        with np.errstate(all="ignore"):
            k_of_t, direction = _k_function(diff, region_a, region_b)
            value, t = _minimise_k(k_of_t)
            return bool(value < 0.0) and separates(direction(t))
    except (ValueError, ArithmeticError, np.linalg.LinAlgError):
        return False


def _segment_meets_both(region_a, region_b, whitened_a, whitened_b):
    """Whether a point of the centres' segment lies in both regions.

    ``a + s d`` is in A iff ``s ||T_A^-1 d|| <= 1`` and in B iff
    ``(1 - s) ||T_B^-1 d|| <= 1`` (norms of the family), so some ``s`` serves
    both iff the two reaches add up to 1: a proof of intersection (rounding
    here can only err towards "they intersect", the memory's sound side).
    """
    ord_ = 2 if region_a.norm == "l2" else 1
    reach_a = np.linalg.norm(whitened_a, ord=ord_)
    reach_b = np.linalg.norm(whitened_b, ord=ord_)
    with np.errstate(divide="ignore"):
        return bool(1.0 / reach_a + 1.0 / reach_b >= 1.0)


def min_k(region_a, region_b):
    """``min_t K(t)`` of the pair (rancer.md eq. 5): negative iff disjoint.

    ``K(t) = 1 - t (1 - t) d^T ((1 - t) M_A + t M_B)^-1 d`` with ``M = T T^T``
    and ``d`` the centres' difference. Closed form for diagonal pairs (ancer.md
    D.2); for isotropic or rank-k rotated pairs (``M = c I + U D U^T``) a
    (k_a + k_b)-sized solve per ``t`` after O(d k) set-up; for cut regions
    and rank-k rotations in a diagonal frame (``M`` diagonal plus a low rank
    of mixed signs) Woodbury, O(d q^2) per ``t``; otherwise the singular
    values of ``T_A^-1 T_B`` (a generalised symmetric eigenproblem in
    square-root form, O(d^3)).
    """
    diff = region_b.center - region_a.center
    return _minimise_k(_k_function(diff, region_a, region_b)[0])[0]


def _k_function(diff, region_a, region_b):
    """``(K, v)``: ``K(t)`` and the separating direction ``v(t) = M(t)^-1 d``."""
    da, db = region_a.diagonal_covariance(), region_b.diagonal_covariance()
    if da is not None and db is not None:
        return _k_diagonal(diff, da, db)
    if _needs_signed_low_rank(region_a) or _needs_signed_low_rank(region_b):
        parts_a, parts_b = (
            _diagonal_plus_low_rank(region_a),
            _diagonal_plus_low_rank(region_b),
        )
        if parts_a is not None and parts_b is not None:
            if parts_a[1].shape[1] + parts_b[1].shape[1] < region_a.d:
                return _k_diagonal_low_rank(diff, parts_a, parts_b)
        return _k_dense(diff, region_a, region_b)
    low_a = region_a.form.isotropic_plus_low_rank(0, region_a.d, factor=region_a.rho)
    low_b = region_b.form.isotropic_plus_low_rank(0, region_b.d, factor=region_b.rho)
    if low_a is not None and low_b is not None:
        if low_a[1].shape[1] + low_b[1].shape[1] < region_a.d:
            return _k_low_rank(diff, low_a, low_b)
    return _k_dense(diff, region_a, region_b)


def _k_of(quad):
    """``K(t) = 1 - t (1 - t) quad(t)``, 1 outside (0, 1)."""

    def k_of_t(t):
        if t <= 0.0 or t >= 1.0:
            return 1.0
        return 1.0 - t * (1.0 - t) * quad(t)

    return k_of_t


def _k_diagonal(diff, da, db):
    d2 = diff**2

    def direction(t):
        return diff / (t * db + (1.0 - t) * da)

    return _k_of(lambda t: float(np.sum(d2 / (t * db + (1.0 - t) * da)))), direction


def _k_low_rank(diff, low_a, low_b):
    # M(t) = c(t) I + V E(t) V^T with V = [U_a U_b], E(t) = diag((1-t) D_a, t D_b);
    # Woodbury: M(t)^-1 d = (d - V E (c I + G E)^-1 p) / c, G = V^T V, p = V^T d
    (ca, ua, dA), (cb, ub, dB) = low_a, low_b
    V = np.hstack([ua, ub])
    G, p = V.T @ V, V.T @ diff
    dd = float(diff @ diff)
    eye = np.eye(len(p))

    def terms(t):
        c = (1.0 - t) * ca + t * cb
        E = np.concatenate([(1.0 - t) * dA, t * dB])
        inner = np.linalg.solve(c * eye + G * E, p) if len(p) else p
        return c, E, inner

    def quad(t):
        c, E, inner = terms(t)
        return (dd - float((p * E) @ inner)) / c

    def direction(t):
        c, E, inner = terms(t)
        return (diff - V @ (E * inner)) / c

    return _k_of(quad), direction


def _needs_signed_low_rank(region):
    """Whether ``M`` is diagonal plus a low rank of mixed signs (cuts, or a
    rank-k rotation in a diagonal frame), not isotropic plus low rank."""
    form = region.form
    return form.cuts is not None or form.frame is not None


def _diagonal_plus_low_rank(region):
    """``(D, V, H)`` with ``M = diag(D) + V H V^T`` (``H`` symmetric, of mixed
    signs), for ``S`` as run, whatever its basis (outside a frame ``S S = r^2
    I + U (2 r E + E U^T U E) U^T``, ``E = diag(s - r)``).

    In a diagonal frame ``S = F B F`` with ``B = r I + U E U^T``, ``E = diag(s
    - r)`` (exactly as :meth:`~smoothlearn.scale.Scale.apply` runs it, for any
    basis), so ``M = F B F^2 B F = r^2 F^4 + V H V^T`` with ``V = [F^3 U, F U]``
    and ``H = [[0, r E], [r E, E (U^T F^2 U) E]]``: rank 2k. A cut adds a
    column ``rho c`` of weight -1 (``M = rho^2 (S^2 - C C^T)``).
    """
    form, d = region.form, region.d
    rho2 = float(region.rho) ** 2
    values = np.asarray(form.values[0], dtype=np.float64)
    cuts = form.row_cuts(0)
    columns, blocks = [], []
    if form.kind == "rotated":
        u = np.asarray(form.basis[0], dtype=np.float64)
        r = float(form.rest[0])
        if form.frame is not None:
            f = np.asarray(form.frame[0], dtype=np.float64)
            fu = f[:, None] * u
            e = values - r
            k = len(e)
            h = np.zeros((2 * k, 2 * k))
            h[:k, k:] = h[k:, :k] = np.diag(r * e)
            h[k:, k:] = e[:, None] * (fu.T @ fu) * e[None, :]
            diagonal = rho2 * r * r * f**4
            columns.append(np.hstack([(f * f)[:, None] * fu, fu]))
            blocks.append(rho2 * h)
        else:
            # S S as run, for any basis: r^2 I + U (2 r E + E U^T U E) U^T
            e = values - r
            middle = e[:, None] * (u.T @ u) * e[None, :]
            middle[np.diag_indices_from(middle)] += 2.0 * r * e
            diagonal = np.full(d, rho2 * r * r)
            columns.append(u)
            blocks.append(rho2 * middle)
    else:
        diagonal = np.broadcast_to(rho2 * values**2, (d,)).astype(np.float64)
    if cuts is not None:
        columns.append(np.sqrt(rho2) * cuts)
        blocks.append(-np.eye(cuts.shape[1]))
    if not columns:
        return diagonal, np.zeros((d, 0)), np.zeros((0, 0))
    return diagonal, np.hstack(columns), scipy.linalg.block_diag(*blocks)


def _low_rank_solver(parts):
    """``solve(shift, x) = (M + shift I)^-1 x`` for ``M = diag(D) + V H V^T``:
    Woodbury, ``N^-1 x - N^-1 V (I + H G)^-1 H V^T N^-1 x`` with ``N = D +
    shift`` and ``G = V^T N^-1 V`` (no ``H^-1``: it may be singular), O(d q^2)."""
    diagonal, V, H = parts
    eye = np.eye(V.shape[1])

    def solve(shift, x):
        inverse = 1.0 / (diagonal + shift)
        scaled = V * inverse[:, None]
        if not V.shape[1]:
            return inverse * x
        inner = np.linalg.solve(eye + H @ (V.T @ scaled), H @ (scaled.T @ x))
        return inverse * x - scaled @ inner

    return solve


def _k_diagonal_low_rank(diff, parts_a, parts_b):
    # M(t) = N(t) + V H(t) V^T with N(t) = diag((1-t) D_a + t D_b), V = [V_a V_b]
    # and H(t) = blockdiag((1-t) H_a, t H_b): M(t)^-1 d by Woodbury
    (da, va, ha), (db, vb, hb) = parts_a, parts_b
    V = np.hstack([va, vb])

    def solver(t):
        H = scipy.linalg.block_diag((1.0 - t) * ha, t * hb)
        return _low_rank_solver(((1.0 - t) * da + t * db, V, H))

    def direction(t):
        return solver(t)(0.0, diff)

    return _k_of(lambda t: float(diff @ direction(t))), direction


def _k_dense(diff, region_a, region_b):
    # square-root form: M(t) = T_A ((1 - t) I + t C C^T) T_A with C = T_A^-1 T_B.
    # With C = W diag(sv) R^T, d^T M(t)^-1 d = sum_i w_i^2 / (1 - t + t sv_i^2),
    # w = W^T T_A^-1 d. The singular values are >= 0 by construction and
    # accurate where eigh of an explicit T_A^-1 M_B T_A^-1 (clipped at 0)
    # was not (touching pairs with semi-axes 1e-3..1e2 misjudged).
    C = region_a.whiten(region_b.matrix().T).T
    W, sv = _left_singular(C)
    w = W.T @ region_a.whiten(diff)
    w2, lam = w**2, sv**2

    def direction(t):
        return region_a.whiten_transpose(W @ (w / (1.0 - t + t * lam)))

    return _k_of(lambda t: float(np.sum(w2 / (lam * t + 1.0 - t)))), direction


def _left_singular(C):
    """``(W, sv)`` of ``C = W diag(sv) R^T``.

    LAPACK's divide-and-conquer driver (numpy's) can fail to converge on a
    benign matrix: a 784 x 784 C of singular values 0.17 to 0.67, between a
    dense RANCER region and a ball, stopped a certification on Fashion-MNIST.
    There the QR-iteration driver computes the same factors.
    """
    try:
        W, sv, _ = np.linalg.svd(C)
    except np.linalg.LinAlgError:
        W, sv, _ = scipy.linalg.svd(C, lapack_driver="gesvd")
    return W, sv


def _shape_eigen(region):
    """Eigenvalues ``alpha`` of ``A = M^-1`` and coordinates in its eigenbasis."""
    semi, coordinates = region.form.principal_axes(0, region.d, factor=region.rho)
    return 1.0 / semi**2, coordinates


def l2_distance_to_ellipsoid(region, point):
    """A lower bound, tight to rounding, of the Euclidean distance to ``region``.

    Solves ``f(lam) = sum_i y_i^2 alpha_i / (1 + 2 lam alpha_i)^2 - 1 = 0`` in the
    shape's eigenbasis (``f`` decreases monotonically for ``lam > 0``) for the
    projection ``x* = (2 lam A + I)^-1 y``. The distance is then read off the
    separating hyperplane through ``x*`` with normal ``n = y - x*``:
    ``(n.y - h(n)) / ||n||`` (``h`` the support function) is a lower bound of
    the distance for any ``n`` and equals it at the exact projection, so an
    inexact root can only shrink the answer: the sound side for the memory.
    For a rotated rank-k region the complement of the basis counts as one
    coordinate; cut regions and rotations in a diagonal frame solve the same
    equation by Woodbury (:func:`_projection_normal_low_rank`), with no O(d^3)
    eigendecomposition.

    Returns 0 when ``point`` lies inside.
    """
    y_full = np.asarray(point, dtype=np.float64) - region.center
    try:
        with np.errstate(all="ignore"):
            normal = _projection_normal(region, y_full)
    except (ValueError, ArithmeticError, np.linalg.LinAlgError):
        # a flat or degenerate region defeats the projection: any normal
        # still gives a sound bound, the direction to the point among them
        normal = y_full
    if normal is None:  # inside, to the projection's rounding
        return 0.0
    if not np.all(np.isfinite(normal)):
        normal = y_full
    return _distance_along(region, y_full, normal)


def _distance_along(region, y, normal):
    """The distance from ``y`` (relative to the centre) to ``region`` read off
    the hyperplane of ``normal`` through the region's support: ``(n.y -
    h(n)) / ||n||``, a lower bound for any ``n`` (:func:`support_extent` is
    a proved upper bound), less the rounding of ``n.y``; 0 where it proves
    nothing."""
    norm = float(np.linalg.norm(normal))
    if not (np.isfinite(norm) and norm > 0.0):
        return 0.0
    bound = (float(normal @ y) - support_extent(region, normal)) / norm
    rounding = SEPARATION_MARGIN * (float(np.linalg.norm(y)) + region.circumradius)
    bound -= rounding
    return float(bound) if np.isfinite(bound) and bound > 0.0 else 0.0


def _projection_normal(region, y_full):
    """``y - x*`` (``x*`` the projection of ``y`` onto the region) in the
    input's coordinates, or None where ``y`` lies inside."""
    if _needs_signed_low_rank(region):
        parts = _diagonal_plus_low_rank(region)
        if parts is not None and parts[1].shape[1] < region.d:
            return _projection_normal_low_rank(region, y_full, parts)
    form = region.form
    dense = form.frame is not None or form.row_cuts(0) is not None
    if dense:
        lam_m, vectors = np.linalg.eigh(region.covariance())
        alpha = 1.0 / np.clip(lam_m, 0.0, None)
        y = vectors.T @ y_full
    else:
        alpha, coordinates = _shape_eigen(region)
        y = coordinates(y_full)
    y2a = y**2 * alpha
    if y2a.sum() <= 1.0:
        return None

    def f(lam):
        return np.sum(y2a / (1.0 + 2.0 * lam * alpha) ** 2) - 1.0

    high = 1.0 / alpha.min()
    while f(high) > 0:
        high *= 4.0
    # the root's scale is the bracket's (1 / alpha): an absolute tolerance
    # would swallow it for small regions (a ball of radius 1e-3 puts it near
    # 1e-12 for a point 1e-9 outside)
    lam = brentq(f, 0.0, high, xtol=1e-15 * high, rtol=1e-12, maxiter=500)
    if dense:
        return vectors @ (2.0 * lam * alpha / (1.0 + 2.0 * lam * alpha) * y)
    # y - x* = 2 lam (M + 2 lam I)^-1 y, in the base's own frame
    rho2 = float(region.rho) ** 2
    return (
        2.0
        * lam
        * form._base_function_apply(0, y_full, lambda b: 1.0 / (rho2 * b + 2.0 * lam))
    )


def _projection_normal_low_rank(region, y, parts):
    """:func:`_projection_normal` for ``M = diag(D) + V H V^T`` (cuts, a
    rotation in a diagonal frame; :func:`_diagonal_plus_low_rank`), in O(d
    q^2) per step (no eigendecomposition): with ``p(lam) = (M + 2 lam I)^-1
    y`` (Woodbury), the projection is ``x* = M p`` and ``f(lam) = p^T M p -
    1``; the normal ``y - x* = 2 lam p``."""
    diagonal, V, H = parts
    solve = _low_rank_solver(parts)

    def cov(x):
        return diagonal * x + V @ (H @ (V.T @ x))

    if float(y @ solve(0.0, y)) <= 1.0:
        return None

    def f(lam):
        p = solve(2.0 * lam, y)
        return float(p @ cov(p)) - 1.0

    if not f(0.0) > 0.0:  # on the boundary to rounding: no distance is certain
        return None
    high = float(region.circumradius) ** 2
    while f(high) > 0:
        high *= 4.0
    lam = brentq(f, 0.0, high, xtol=1e-15 * high, rtol=1e-12, maxiter=500)
    return 2.0 * lam * solve(2.0 * lam, y)


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
    ratios = np.abs(y) / t
    total = float(np.sum(ratios))
    # the sum's rounding, and a strict margin of the bound's own (a region
    # capped at this distance must not touch the other, whatever eps)
    eps = np.finfo(np.float64).eps
    excess = total - 1.0 - (region.d + 4) * eps * (total + 1.0)
    bound = excess * float(t.min()) * (1.0 - 4.0 * eps)
    bound -= SEPARATION_MARGIN * (float(np.abs(y).sum()) + float(t.max()))
    return float(bound) if np.isfinite(bound) and bound > 0.0 else 0.0
