"""The memory's reductions of a row (caps, cuts) and the geometry of cut rows:
a mixin of :class:`~smoothlearn.scale.Scale`.

A row with cuts is the region of covariance ``S^2 - C C^T`` (the memory's
rank-one cuts). Everything here is a proved bound in float64 (issue 46): a
cut is checked inside its slab with the rounding of the support taken
against the quantities rounded (``||S v||^2`` and ``||C^T v||^2``), the
inscribed radius is a secular equation whose rounding bound holds at any
condition number, and the volume's ``det(I - Q^T Q)`` is formed in long
double where an a-priori bound of its rounding allows, in double-double from
the stored arrays where it does not (thin cuts on ill-conditioned rows).
Kept apart from :mod:`smoothlearn.scale` so that each module stays
small; :class:`CutGeometry` has no state of its own.
"""

import math
import warnings

import mpmath
import numpy as np
from scipy.optimize import brentq

from ._bases import _room_inside, gram_defect_bound, orthonormal_to_rounding
from ._double_double import dd_add, dd_gram, dd_matmul, dd_mul, dd_sub, two_sum

__all__ = ["CUT_MARGIN", "VOLUME_TOLERANCE", "CutGeometry"]

#: Relative margin a cut keeps inside its slab (of the slab's squared
#: extent): with the pair's margin between the slabs, two cut regions of
#: different labels are apart by a margin whatever the memory's ``eps``.
CUT_MARGIN = 2e-9

#: Relative error allowed in a cut row's proxy radius (``det(S^2 - C
#: C^T)^(1/2d)``) before its long-double path gives way to double-double.
VOLUME_TOLERANCE = 1e-7

_EPS = float(np.finfo(np.float64).eps)


def _wide_cholesky(matrix):
    """The lower Cholesky factor of a small SPD long-double matrix, in long
    double, or None where a pivot is not positive."""
    n = matrix.shape[0]
    lower = np.zeros_like(matrix)
    for j in range(n):
        pivot = matrix[j, j] - np.sum(lower[j, :j] ** 2)
        if not pivot > 0:
            return None
        lower[j, j] = np.sqrt(pivot)
        for m in range(j + 1, n):
            lower[m, j] = (matrix[m, j] - np.sum(lower[m, :j] * lower[j, :j])) / lower[
                j, j
            ]
    return lower


def _dense_solver(scale, i, n_features):
    """``y -> S_i^-1 y`` in long double from a float64 LU of ``S_i`` as run
    (dense, O(d^3) once): refinement's corrections where the closed form of
    the inverse does not contract."""
    from scipy.linalg import lu_factor, lu_solve

    factors = lu_factor(scale._apply_base(i, np.eye(n_features), 1.0, 1.0).T)

    def solve(_, y):
        return lu_solve(factors, np.asarray(y, dtype=np.float64)).astype(np.longdouble)

    solve.dense = True
    return solve


class CutGeometry:
    """Caps, cuts, supports, inscribed radii and volumes of a Scale's rows
    (a mixin: the methods use the Scale's arrays and its ``_apply_base``)."""

    def cut(self, i, n_features, direction, extent, keep=None):
        """Row ``i`` cut to the slab ``|v^T y| <= extent`` (``v`` = ``direction``).

        The region's covariance ``M`` (``S_i^2``, less any earlier cuts) takes
        a rank-one down-date ``M' = M - w w^T`` with ``(v^T w)^2 = s - g^2``,
        ``s = v^T M v``: ``M' <= M`` (inside the row) and ``v^T M' v = g^2``
        (inside the slab; its support along ``v`` is ``g``). ``g^2`` is
        ``extent^2`` less a relative :data:`CUT_MARGIN` and a bound on the
        rounding of ``s`` and of the new column, taken against ``||S v||^2``
        and ``||C^T v||^2`` (earlier cuts can make them far larger than
        ``s``); the new row's support along ``v`` (:meth:`support`, a proved
        upper bound) is then checked inside, ``g`` lowered where it is not.

        The largest such region (``w`` minimising ``w^T M^-1 w``) takes ``w``
        along ``M v``: ``M' = M - (s - g^2) / s^2 (M v)(M v)^T``, whose volume
        falls by ``g / sqrt(s)``, along one direction only; it may lose part
        of the inscribed ball. With ``keep`` (a radius below ``g``; where it
        is not below the row's inscribed radius, the largest region is
        taken), ``w`` also keeps the ball of radius ``keep``
        inside (``w^T (M - keep^2 I)^-1 w <= 1``): the Lagrange conditions
        give ``w`` along ``(M^-1 + mu (M - keep^2 I)^-1)^-1 v``, ``mu`` the
        least that keeps the ball (a bisection; closed forms through the
        base's eigenvalues and Woodbury for earlier cuts). A diagonal frame,
        or a basis orthonormal only to more than rounding, takes the largest
        region.

        Returns the one-row Scale with the new cut column (unchanged where the
        row already lies in the slab), or None where the cut would leave too
        thin a region for its rounding to stay inside the slab (``g^2 / s``
        below ``1e-12``).
        """
        v = np.asarray(direction, dtype=np.float64)
        row = self[[i]]
        extent = float(extent)
        base_v = row._apply_base(0, v, 1.0, 1.0)  # S v
        old = row.row_cuts(0)
        cut_v = np.zeros(0) if old is None else old.T @ v  # C^T v
        mv = row._apply_base(0, base_v, 1.0, 1.0)
        if old is not None:
            mv = mv - old @ cut_v
        s = float(base_v @ base_v) - float(cut_v @ cut_v)
        # rounding is bounded against the quantities rounded: the base's
        # ||S v||^2 and the earlier cuts' ||C^T v||^2 (earlier cuts can make
        # them far larger than s), and M v in the new column
        eps = np.finfo(np.float64).eps
        rounding = row._support_rounding(
            0, v, float(base_v @ base_v), float(cut_v @ cut_v), cuts=old
        )
        allowance = 3.0 * rounding + 16.0 * (n_features + 2) * eps * float(
            np.linalg.norm(mv) * np.linalg.norm(v)
        )
        target = extent**2 * (1.0 - CUT_MARGIN)
        g2 = target - allowance
        if s <= g2:
            return row
        for _ in range(4):
            if not g2 > 1e-12 * s:
                return None
            column = (np.sqrt(s - g2) / s) * mv
            if keep is not None and keep**2 < g2:
                kept = row._ball_keeping_direction(v, mv, s - g2, float(keep) ** 2)
                if kept is not None:
                    column = kept * (np.sqrt(s - g2) / float(v @ kept))
            cuts = column[:, None] if old is None else np.hstack([old, column[:, None]])
            out = type(self)(**{**row._arrays(), "cuts": cuts[None]})
            # proved, not assumed: the new row's support along v (a sound
            # upper bound, its rounding bounded) inside the slab's margin
            support = out.support(0, v)
            if support**2 <= target and np.isfinite(support):
                return out
            g2 -= support**2 - target + allowance
        return None

    def _ball_keeping_direction(self, v, mv, tau, r2):
        """For row 0: ``u = (M^-1 + mu N^-1)^-1 v`` (``N = M - r2 I``) with the
        least ``mu >= 0`` such that ``w = u sqrt(tau) / (v.u)`` keeps the ball
        (``w^T N^-1 w <= 1`` less a margin), or None where the form has no
        closed-form functions of its base, the ball does not fit (no ``mu``
        keeps it, or ``M - w w^T`` would not stay positive definite), or the
        largest region already keeps it (``mu = 0``)."""
        if self.frame is not None:
            return None
        if self.kind == "rotated" and not orthonormal_to_rounding(self.basis[0]):
            return None
        cuts = self.row_cuts(0)
        target = 1.0 - 1e-9

        def base(f, x):  # f(B) x, B = the base's S^2, x of shape (d,) or (d, q)
            return self._base_function_apply(0, x, f)

        def inverse(shift, x):  # (B - shift I - C C^T)^-1 x, Woodbury
            out = base(lambda b: 1.0 / (b - shift), x)
            if cuts is None:
                return out
            bc = base(lambda b: 1.0 / (b - shift), cuts)
            inner = np.eye(cuts.shape[1]) - cuts.T @ bc
            return out + bc @ np.linalg.solve(inner, bc.T @ x)

        def ball_value(u):
            value = tau * float(u @ inverse(r2, u)) / float(v @ u) ** 2
            return value if value >= 0.0 else np.inf  # N indefinite: no ball

        if ball_value(mv) <= target:
            return None  # the largest region keeps the ball already

        if cuts is not None:
            # M^-1 = B^-1 + U1 G1^-1 U1^T and N^-1 alike (Woodbury), so
            # M^-1 + mu N^-1 = D + U K U^T with D = f(B), f = 1/b + mu/(b - r2)
            q = cuts.shape[1]
            u1 = base(lambda b: 1.0 / b, cuts)
            u2 = base(lambda b: 1.0 / (b - r2), cuts)
            big_u = np.hstack([u1, u2])
            g1, g2 = np.eye(q) - cuts.T @ u1, np.eye(q) - cuts.T @ u2
            k_inv = np.zeros((2 * q, 2 * q))
            k_inv[:q, :q] = g1

        def direction(mu):
            def d_inv(x):
                return base(lambda b: 1.0 / (1.0 / b + mu / (b - r2)), x)

            out = d_inv(v)
            if cuts is None:
                return out
            k_inv[q:, q:] = g2 / mu
            du = d_inv(big_u)
            return out - du @ np.linalg.solve(k_inv + big_u.T @ du, big_u.T @ out)

        # the least mu to a factor 1.05 (the kept ball's side of it): a
        # larger mu only keeps the ball with more to spare, at some volume
        lo, hi = 0.0, 1.0
        while ball_value(direction(hi)) > target:
            lo, hi = hi, hi * 8.0
            if hi > 1e16:
                return None
        while lo == 0.0 or hi > 1.05 * lo:
            mid = np.sqrt(lo * hi) if lo > 0.0 else hi / 8.0
            if ball_value(direction(mid)) > target:
                lo = mid
            else:
                hi = mid
            if hi < 1e-12:  # mu -> 0: the largest region nearly keeps it
                break
        u = direction(hi)
        if not (np.all(np.isfinite(u)) and float(v @ u) > 0.0):
            return None
        # M - w w^T must stay positive definite (w^T M^-1 w < 1): it does where
        # the ball fits (N > 0), which nothing above assumed; checked
        w = u * (np.sqrt(tau) / float(v @ u))
        if not float(w @ inverse(0.0, w)) < target:
            return None
        return u

    def _base_function_apply(self, i, x, f):
        """``f(B) x`` for row ``i``'s base covariance ``B = S^2`` (no frame):
        ``f`` of its eigenvalues, in its own frame."""
        x = np.asarray(x, dtype=np.float64)
        x = np.asarray(x, dtype=np.float64)

        def scaled(fb, y):  # diag(fb) y, for y of shape (n,) or (n, q)
            return fb * y if np.ndim(fb) == 0 or y.ndim == 1 else fb[:, None] * y

        if self.kind != "rotated":
            return scaled(f(np.asarray(self.values[i], dtype=np.float64) ** 2), x)
        u = np.asarray(self.basis[i], dtype=np.float64)
        coef = u.T @ x
        out = u @ scaled(f(np.asarray(self.values[i], dtype=np.float64) ** 2), coef)
        if u.shape[1] < u.shape[0]:  # a full rotation has no complement
            out = out + f(float(self.rest[i]) ** 2) * (x - u @ coef)
        return out

    def _covariance_apply(self, i, v):
        """``(S_i^2 - C_i C_i^T) v`` for ``v`` of shape (d,)."""
        out = self._apply_base(i, self._apply_base(i, v, 1.0, 1.0), 1.0, 1.0)
        cuts = self.row_cuts(i)
        return out if cuts is None else out - cuts @ (cuts.T @ v)

    def _cut_smallest(self, i, base):
        """A proved lower bound of the smallest singular value of row ``i``'s
        cut region, ``sqrt(lambda_min(S^2 - C C^T))`` (``S`` as
        :meth:`apply` runs it).

        Below ``lambda_min(S^2)``, ``S^2 - lam I - C C^T`` is positive
        semidefinite iff ``||Q(lam)|| <= 1``, ``Q(lam) = (S^2 - lam I)^-1/2
        C``, which grows with ``lam``. Where ``(S^2 - lam I)^-1/2`` is
        closed-form (isotropic, diagonal, rotated on a basis orthonormal to
        rounding) ``Q`` is formed in the base's own frame and ``lam`` is
        accepted only where ``||Q||`` plus a bound on its rounding stays below
        1: the bound grows with ``(s_min^2 - lam)^-1/2`` and
        ``||C||``, so it holds at any condition number (an ill-conditioned
        row gets a smaller ``lam``, never a larger one). ``S^2`` as run
        differs from the closed form by ``U D (U^T U - I) D U^T`` (``D =
        diag(s - r)``), which is subtracted from ``lam`` (Weyl). Otherwise (a
        diagonal frame, a basis orthonormal only to more than rounding) the
        dense eigenvalues less a bound on their rounding taken against
        ``||S||^2 + ||C||_F^2`` (the covariance is formed by cancellation
        against ``S^2``), O(d^3) once per row.
        """
        cuts = self.row_cuts(i)
        margin = 1e-9
        d = cuts.shape[0]
        eps = np.finfo(np.float64).eps
        largest = float(self.largest()[i])
        cut_norm2 = float(np.sum(cuts**2))
        dense = self.frame is not None
        if self.kind == "rotated" and not dense:
            dense = not orthonormal_to_rounding(self.basis[i])
        if dense:
            lam = np.linalg.eigvalsh(self.covariance(i, d))
            # forming S S - C C^T: each entry within d eps of |S||S| + |C||C^T|
            # (spectral norm below d ||S||^2 + ||C||_F^2); eigvalsh's backward
            # error a few d eps ||M||
            rounding = (2.0 * d + 32.0) * d * eps * (largest**2 + cut_norm2)
            low = float(lam[0]) - rounding
            return float(np.sqrt(max(low, 0.0) * (1.0 - margin)))
        cap = float(base) ** 2 * (1.0 - 1e-6)
        spectrum = self._base_spectrum(i)
        head, tail, coordinate_error, defect = self._cut_coordinates(i, cuts)
        cut_norm = np.sqrt(cut_norm2)
        # relative rounding of the float64 steps: Q's entries rounded from long
        # double, the complement's QR, the norm
        relative_steps = 4.0 * (d + head.shape[0] + 8) * eps

        def excess(lam):
            shifted = spectrum - lam
            # each b - lam relative to the exact (b = s^2 rounded, lam < b)
            relative = 4.0 * eps * (1.0 + float(np.max(spectrum / shifted)))
            # the head's axes (an isotropic row's one value for every axis)
            axes = head.shape[0]
            head_shift = (
                shifted[:axes] if shifted.size >= axes else np.full(axes, shifted[0])
            )
            scale = 1.0 / np.sqrt(head_shift)
            parts = [head * scale[:, None]]
            if tail is not None:
                parts.append(tail / np.sqrt(shifted[-1]))
            norm = float(np.linalg.norm(np.vstack(parts), 2))
            bound = norm * (1.0 + relative + relative_steps)
            bound += coordinate_error * cut_norm / np.sqrt(float(shifted.min()))
            # the bound carries the rounding: it need only stay below 1
            return bound - 1.0

        if not excess(0.0) < 0.0:
            return 0.0
        if excess(cap) < 0.0:
            lam = cap
        else:
            lam = brentq(excess, 0.0, cap, xtol=1e-15 * cap, rtol=1e-12)
            # the root's side where the bound holds (brentq may answer either)
            while lam > 0.0 and not excess(lam) < 0.0:
                lam = lam * (1.0 - 1e-6) - 1e-300
        # S S as run against the closed form the search used (Weyl)
        lam = lam - defect
        return float(np.sqrt(max(lam, 0.0) * (1.0 - margin)))

    def _cut_coordinates(self, i, cuts):
        """Row ``i``'s cuts in the eigenframe of a closed form ``S_P`` of its
        base (no frame, a basis orthonormal to rounding): ``(head, tail,
        error, defect)``.

        ``head`` (``k x q``, or ``d x q`` unrotated) holds the cuts'
        coordinates along the axes of ``values``, ``tail`` (``q x q``, or
        None) an R factor of the complement's part, so that ``||Q(lam)|| =
        ||[diag((b - lam)^-1/2) head; (r^2 - lam)^-1/2 tail]||``. For a
        rotated row ``S_P = r I + P D P^T`` with ``P`` the polar factor of
        the stored ``U`` (``U = P H``, ``H = (U^T U)^1/2``): the coordinates
        ``P^T C = H^-1 U^T C`` and ``C - P P^T C`` are formed in long double
        by the series of ``H^-1`` in ``E = U^T U - I`` (no cancellation
        against ``||C||`` beyond long double's rounding); ``error`` bounds
        what is left of it, relative to ``||C||``; ``defect`` bounds ``||S S
        - S_P^2||`` for ``S`` as run (``||S - S_P|| <= 1.01 |E| max|s - r|``).
        """
        if self.kind != "rotated":
            return np.asarray(cuts, dtype=np.float64), None, 0.0, 0.0
        wide = np.longdouble
        wide_eps = max(float(np.finfo(wide).eps), 0.0)
        u = np.asarray(self.basis[i], dtype=wide)
        c = np.asarray(cuts, dtype=wide)
        d, k = u.shape
        y = u.T @ c
        e = u.T @ u - np.eye(k, dtype=wide)
        ey = e @ y
        eey = e @ ey
        head = (y - ey / 2 + 3 * eey / 8).astype(np.float64)
        # ||U^T U - I|| with the rounding of forming it (it may round far below)
        gram_error = gram_defect_bound(self.basis[i])
        error = 8.0 * (d + k + 4) * np.sqrt(k + 1.0) * max(wide_eps, 1e-300)
        error += 4.0 * gram_error**3
        tail = None
        if k < d:
            z = (c - u @ (y - ey + eey)).astype(np.float64)
            tail = np.linalg.qr(z, mode="r")
        values = np.asarray(self.values[i], dtype=np.float64)
        rest = float(self.rest[i])
        spread = float(np.abs(values - rest).max())
        big = max(float(values.max()), rest)
        delta = 1.01 * gram_error * spread
        defect = 2.0 * big * delta + delta**2
        return head, tail, error, defect

    def _base_spectrum(self, i):
        """The eigenvalues ``b`` of row ``i``'s closed-form ``S^2`` (no frame),
        as :meth:`_base_function_apply` uses them."""
        values = np.atleast_1d(np.asarray(self.values[i], dtype=np.float64)) ** 2
        if self.kind == "rotated" and self._has_complement():
            values = np.append(values, float(self.rest[i]) ** 2)
        return values

    def support(self, i, v, factor=1.0):
        """A proved upper bound of the l2 support of row ``i``'s region along
        ``v``: ``sqrt(v^T M v)`` with ``M = (factor S_i)^2 - factor^2 C_i
        C_i^T``.

        Computed as ``||S v||^2 - ||C^T v||^2`` (no factor, no square root of
        a cut's ``1 - sv^2``) plus a bound on its rounding taken against the
        quantities rounded, ``||S v||^2`` and ``||C^T v||^2`` (not their
        difference, which thin cuts make far smaller).
        """
        v = np.asarray(v, dtype=np.float64)
        base_v = self._apply_base(i, v, 1.0, factor)
        base2 = float(base_v @ base_v)
        cuts = None if self.cuts is None else self.row_cuts(i)
        if cuts is None:
            h2 = base2 + self._support_rounding(i, v, base2, 0.0, factor)
        else:
            cut_v = factor * (cuts.T @ v)
            cut2 = float(cut_v @ cut_v)
            h2 = base2 - cut2
            h2 += self._support_rounding(i, v, base2, cut2, factor, cuts)
        return math.sqrt(max(h2, 0.0))

    def _support_rounding(self, i, v, base2, cut2, factor=1.0, cuts=None):
        """A bound on the rounding of ``||S v||^2 - ||C^T v||^2`` computed as
        ``base2`` (``||factor S v||^2`` as computed) less ``cut2`` (``||factor
        C^T v||^2``): the base's product through a basis within ``4 (d + k +
        4) sqrt(k + 1) eps ||S|| ||v||`` (element-wise products within ``4
        eps`` relative), each dot product within ``(n + 2) eps`` of its
        terms."""
        eps = _EPS
        d = v.shape[-1]
        base_norm = math.sqrt(base2)
        if self.basis is not None:
            k = self.basis.shape[2]
            v_norm = math.sqrt(float(v @ v))
            big = abs(factor) * self._row_largest(i)
            e1 = 4.0 * (d + k + 4) * math.sqrt(k + 1.0) * eps * big * v_norm
        else:
            e1 = 4.0 * eps * base_norm
        out = 2.0 * e1 * base_norm + e1**2 + 4.0 * (d + 2) * eps * base2
        if cuts is not None:
            v_norm = math.sqrt(float(v @ v))
            cut_norm = math.sqrt(cut2)
            e2 = (d + 2) * eps * abs(factor) * float(np.linalg.norm(cuts)) * v_norm
            out += 2.0 * e2 * cut_norm + e2**2 + 4.0 * (cuts.shape[1] + 2) * eps * cut2
        return out

    def _row_largest(self, i):
        """``largest()[i]``, the array kept (supports ask it per row)."""
        largest = self.__dict__.get("_largest")
        if largest is None:
            largest = self._largest = self.largest()
        return float(largest[i])

    def _shifted_inverse(self, i, v, lam):
        """``(S_i^2 - lam I)^-1 v`` for ``v`` of shape (d, q), a row without a
        frame and ``lam`` below its smallest eigenvalue."""
        return self._base_function_apply(i, v, lambda b: 1.0 / (b - lam))

    def _with_cut_volume(self, mean, n_features):
        mean = np.array(mean, dtype=np.float64, copy=True)
        for i in range(len(self)):
            cuts = self.row_cuts(i)
            if cuts is not None:
                # det(S^2 - C C^T) = det(S)^2 det(I - Q^T Q), Q = S^-1 C; kept
                # per row (the double-double path takes 0.6 s at d = 784)
                cache = self.__dict__.setdefault("_cut_log_dets", {})
                if i not in cache:
                    cache[i] = self._cut_log_det(i, cuts, n_features)
                mean[i] *= np.exp(cache[i] / (2.0 * n_features))
        return mean

    def _cut_log_det(self, i, cuts, n_features):
        """``log det(I - Q^T Q)``, ``Q = S_i^-1 C_i`` (``S`` as run), to
        :data:`VOLUME_TOLERANCE` relative in the proxy radius
        ``exp(log det / (2 d))``.

        First in long double: ``Q`` through the closed-form inverse in the
        base's own frame, ``I - Q^T Q`` and its Cholesky factor ``L`` there.
        Thin cuts make ``I - Q^T Q`` cancel (``Q``'s singular values near 1),
        so ``Q``'s rounding is divided by its smallest eigenvalue: an a-priori
        bound of that path's error (:meth:`_wide_log_det_error`) decides, and
        where it could exceed the tolerance ``Q`` is solved from the stored
        float64 arrays in double-double (:meth:`_cut_log_det_precise`).
        """
        wide = np.longdouble
        q = self._closed_inverse_wide(i, np.asarray(cuts, dtype=wide))
        lower = _wide_cholesky(np.eye(q.shape[1], dtype=wide) - q.T @ q)
        if lower is not None:
            error = self._wide_log_det_error(i, cuts, q, lower)
            if error <= 2.0 * n_features * VOLUME_TOLERANCE:
                return float(2.0 * np.sum(np.log(np.diagonal(lower))))
        return self._cut_log_det_precise(i, cuts)

    def _closed_inverse_wide(self, i, y):
        """``S_i^-1 y`` in long double for ``y`` of shape (d, q), through the
        closed form of the inverse in the base's own frame (exact for an
        orthonormal basis)."""
        wide = np.longdouble
        values = np.asarray(self.values[i], dtype=wide)
        if self.kind != "rotated":
            return y / (values if values.ndim == 0 else values[:, None])
        u = np.asarray(self.basis[i], dtype=wide)
        rest = wide(self.rest[i])
        if self.frame is not None:
            frame = np.asarray(self.frame[i], dtype=wide)[:, None]
            y = y / frame
        coef = u.T @ y
        # R^-1 y = U diag(1/s) U^T y + (y - U U^T y) / r
        out = u @ (coef / values[:, None]) + (y - u @ coef) / rest
        return out if self.frame is None else out / frame

    def _semi_axis_range(self, i):
        """``(smallest, largest)`` semi-axis of row ``i``'s base as stored
        (closed form; in a frame, scaled by its extreme squares)."""
        values = np.atleast_1d(np.asarray(self.values[i], dtype=np.float64))
        small, big = float(values.min()), float(values.max())
        if self.kind == "rotated":
            rest = float(self.rest[i])
            small, big = min(small, rest), max(big, rest)
            if self.frame is not None:
                frame = np.asarray(self.frame[i], dtype=np.float64)
                small *= float(frame.min()) ** 2
                big *= float(frame.max()) ** 2
        return small, big

    def _wide_log_det_error(self, i, cuts, q, lower):
        """An a-priori bound of the long-double path's error in ``log det(I -
        Q^T Q)``: ``Q``'s rounding (each step within a few ``(d + k) eps``
        of ``||C|| / sigma_min``) and the closed form against ``S`` as run
        (``|U^T U - I|`` times ``cond(S)``), carried through ``Q^T Q`` and
        divided by ``lambda_min(I - Q^T Q) >= 1 / ||L^-1||_F^2``."""
        wide_eps = float(np.finfo(np.longdouble).eps)
        d, n_cuts = cuts.shape
        small, big = self._semi_axis_range(i)
        q_norm = float(np.linalg.norm(q.astype(np.float64)))
        steps = 8.0 * (d + 4) * wide_eps
        closed_form = 0.0  # ||S_closed^-1 - S^-1|| ||C|| <= ||S^-1 dS|| ||Q||
        if self.kind == "rotated":
            u = np.asarray(self.basis[i], dtype=np.float64)
            k = u.shape[1]
            steps = 8.0 * (d + k + 4) * wide_eps
            # U^T U - I as computed (in float64 it can round to 0) plus a
            # bound on that rounding
            gram_error = gram_defect_bound(u)
            closed_form = 4.0 * gram_error * big / small
        # each step's rounding relative to ||y|| <= ||C|| / f_min, divided by
        # the smallest semi-axis (not relative to the entries of Q)
        q_error = steps * float(np.linalg.norm(cuts)) / small + closed_form * q_norm
        gram = 2.0 * q_norm * q_error + q_error**2
        gram += 4.0 * (d + n_cuts + 4) * wide_eps * (1.0 + q_norm**2)
        inverse = np.linalg.inv(lower.astype(np.float64))
        return 2.0 * n_cuts * float(np.sum(inverse**2)) * gram

    def _cut_log_det_precise(self, i, cuts):
        """``log det(I - Q^T Q)`` with ``Q = S^-1 C`` solved from the stored
        float64 arrays in double-double (``S`` as run, ``F (r I + U diag(s -
        r) U^T) F``, applied exactly but for double-double's rounding):
        iterative refinement whose residuals are double-double and whose
        corrections come from the long-double closed form (contracting by
        about ``cond(S) |U^T U - I|``; a dense LU of ``S`` where that does not
        contract), then ``Q^T Q`` in double-double and the ``q x q``
        Cholesky of ``I - Q^T Q`` in 160-bit mpmath. ``-inf`` where even that
        is not positive definite."""
        c = np.asarray(cuts, dtype=np.float64)
        solve = self._closed_inverse_wide
        x = solve(i, c.astype(np.longdouble))
        xh = x.astype(np.float64)
        xl = (x - xh).astype(np.float64)
        previous = np.inf
        for step in range(12):
            sh, sl = self._apply_base_dd(i, xh, xl)
            rh, rl = dd_sub(c, np.zeros_like(c), sh, sl)
            residual = rh.astype(np.longdouble) + rl
            correction = solve(i, residual)
            size = float(np.linalg.norm(correction.astype(np.float64)))
            if not size < 0.5 * previous and step > 0:
                if size > 1e-20 * float(np.linalg.norm(xh)) and not getattr(
                    solve, "dense", False
                ):
                    # the closed form does not contract (a basis far from
                    # orthonormal): restart with a dense LU of S as run
                    solve = _dense_solver(self, i, c.shape[0])
                    previous = np.inf
                    continue
                break
            ch = correction.astype(np.float64)
            cl = (correction - ch).astype(np.float64)
            xh, xl = dd_add(xh, xl, ch, cl)
            previous = size
            if size <= 1e-30 * float(np.linalg.norm(xh)):
                break
        gh, gl = dd_gram(xh, xl)
        n = gh.shape[0]
        with mpmath.workprec(160):
            inner = mpmath.matrix(n, n)
            for a in range(n):
                for b in range(n):
                    g = mpmath.mpf(float(gh[a, b])) + mpmath.mpf(float(gl[a, b]))
                    inner[a, b] = (1 if a == b else 0) - g
            try:
                lower = mpmath.cholesky(inner)
            except ValueError:
                return -np.inf  # no volume left (or none that 32 digits prove)
            log_det = float(2 * sum(mpmath.log(lower[a, a]) for a in range(n)))
            inverse = mpmath.inverse(lower)
            amplification = float(mpmath.fsum(v**2 for v in inverse))
        # a posteriori: Q within its last correction and the residuals'
        # double-double rounding (about (d + k)^2 eps^2 cond(S) ||Q||)
        d = c.shape[0]
        width = d + (0 if self.basis is None else self.basis.shape[2]) + 4
        small, big = self._semi_axis_range(i)
        x_norm = float(np.linalg.norm(xh))
        x_error = size + 16.0 * width**2 * _EPS**2 * (big / small) * x_norm
        gram = 2.0 * x_norm * x_error + x_error**2 + 4.0 * width * _EPS**2 * x_norm**2
        error = 2.0 * n * amplification * gram / (2.0 * d)
        if not error <= VOLUME_TOLERANCE:
            warnings.warn(
                f"a cut row's proxy radius may be off by {error:.1e} relative "
                "(its volume's double-double evaluation did not settle)",
                RuntimeWarning,
                stacklevel=4,
            )
        return log_det

    def _apply_base_dd(self, i, xh, xl):
        """``S_i x`` (as run: ``F (r I + U diag(s - r) U^T) F x``) for a
        double-double ``x`` (d, q), in double-double."""
        values = np.asarray(self.values[i], dtype=np.float64)
        if self.kind != "rotated":
            scale = values if values.ndim == 0 else values[:, None]
            return dd_mul(xh, xl, scale, 0.0)
        frame = None
        if self.frame is not None:
            frame = np.asarray(self.frame[i], dtype=np.float64)[:, None]
            xh, xl = dd_mul(xh, xl, frame, 0.0)
        u = np.asarray(self.basis[i], dtype=np.float64)
        rest = float(self.rest[i])
        zh, zl = dd_matmul(u.T, xh, xl)
        dh, dl = two_sum(values, -rest)  # s - r exactly
        zh, zl = dd_mul(zh, zl, dh[:, None], dl[:, None])
        uh, ul = dd_matmul(u, zh, zl)
        rh, rl = dd_mul(xh, xl, rest, 0.0)
        out = dd_add(rh, rl, uh, ul)
        return out if frame is None else dd_mul(*out, frame, 0.0)

    def _cut_factor(self, i):
        """``(W, sv)`` with ``S_i^-1 C_i = W diag(sv) V^T`` (thin), or None
        for a row without cuts: the factor ``L = S (I - Q Q^T)^1/2`` of the
        cut region acts as ``S`` times ``I - W diag(1 - sqrt(1 - sv^2)) W^T``."""
        if self.cuts is None:
            return None
        # kept per row: every whitening and support of a cut region uses it
        cache = self.__dict__.setdefault("_factors", {})
        if i not in cache:
            cuts = self.row_cuts(i)
            if cuts is None:
                cache[i] = None
            else:
                q = self._apply_base(i, cuts.T, -1.0, 1.0).T  # S^-1 C, (d, q)
                w, sv, _ = np.linalg.svd(q, full_matrices=False)
                cache[i] = (w, sv)
        return cache[i]

    def capped(self, i, n_features, limit):
        """Row ``i`` with every semi-axis of ``S_i`` capped at ``limit``.

        A one-row Scale ``S'`` with the eigenvectors of ``S_i`` and singular
        values ``min(lambda_j, limit)``: its region lies inside ``S_i``'s and
        inside the ball of radius ``limit``, and holds the ball of radius
        ``min(limit, lambda_min)`` (the memory's reduced region, rancer.md
        section 3, larger than the paper's ball wherever ``S_i`` is longer
        than ``limit`` along some axes and shorter along others). Exact (the
        same axes, ``min`` exact in floating point) for the isotropic,
        diagonal and rotated forms; a rotated row whose stored basis is
        orthonormal only to more than rounding (a user's) is shrunk into the
        row by a ``k x k`` check (``_room_inside``). In a diagonal frame the
        axes come from a dense ``eigh`` (O(d^3)): the ``k`` shortest are
        kept (capped) and the rest of the space takes ``min(limit,
        lambda_(k+1))``, so the row keeps the form's shapes (a frame of
        ones), shrunk by a bound on how far the decomposition's rounding
        could take it outside ``S_i`` (from its residuals, about 1e-13
        relative) and a relative margin of 1e-9.
        """
        limit = float(limit)
        if self.row_cuts(i) is not None:
            # a cut region has no per-axis cap in its own form: its inscribed
            # ball (a sound lower bound of it), capped
            return type(self)(np.array([min(limit, float(self.smallest()[i]))]))
        if self.kind != "rotated":
            return type(self)(np.minimum(self.values[[i]], limit))
        if self.frame is None:
            values = np.minimum(self.values[[i]], limit)
            rest = np.minimum(self.rest[[i]], limit)
            room = _room_inside(
                self.basis[i], self.values[i], self.rest[i], values[0], rest[0]
            )
            if room is not None:
                # a stored basis orthonormal only to rounding: the same axes
                # capped can stick out by about cond(S) |U^T U - I| (1e-9
                # relative seen); shrink into the row, with a margin for the
                # check's own rounding (eigenvalues of the covariance, whose
                # condition is cond(S)^2)
                spread = max(self.values[i].max(), self.rest[i]) / min(
                    self.values[i].min(), self.rest[i]
                )
                margin = max(1e-9, 1e3 * np.finfo(np.float64).eps * spread**2)
                shrink = np.sqrt(min(room, 1.0) * (1.0 - margin))
                values, rest = values * shrink, rest * shrink
            else:
                # orthonormal to rounding: S and S' as run are within 3
                # |U^T U - I| max|s - r| of their closed forms on the polar
                # factor of U, where S' <= S exactly; so ||S^-1 S'|| <= 1 +
                # that over s_min, taken off (with the products' rounding)
                u = np.asarray(self.basis[i], dtype=np.float64)
                k = u.shape[1]
                gram_error = gram_defect_bound(u)
                spread = float(np.abs(self.values[i] - self.rest[i]).max())
                spread += float(np.abs(values[0] - rest[0]).max())
                low = min(float(self.values[i].min()), float(self.rest[i]))
                eps = np.finfo(np.float64).eps
                shrink = 1.0 - (
                    8.0 * gram_error * spread / low + 16.0 * (n_features + k) * eps
                )
                shrink = max(shrink, 0.0)  # no room proved: a point
                values, rest = values * shrink, rest * shrink
            out = type(self)(values, self.basis[[i]], rest)
            # inside the ball of the limit as run too (S' is r' I + U D' U^T,
            # within _basis_deviation of its closed form)
            top = float(out.largest()[0])
            if top > limit:
                fit = limit / top * (1.0 - 4.0 * np.finfo(np.float64).eps)
                out = type(self)(values * fit, self.basis[[i]], rest * fit)
            return out
        dense = self.dense(i, n_features)
        lam, vectors = np.linalg.eigh((dense + dense.T) / 2.0)  # ascending
        smallest = float(self.smallest()[i])
        ball = type(self)(np.array([min(limit, smallest)]))  # where rounding defeats it
        if not lam[0] > 0.0:
            return ball
        k = min(self.basis.shape[2], n_features)
        values = np.minimum(lam[:k], limit)
        rest = min(limit, lam[k]) if k < n_features else values.min()
        # Containment, from the decomposition's own residuals: with unit v,
        # e = ||V^T V - I|| and E = S - V diag(lam) V^T, the stored S' (V's
        # first k columns, r' on the rest) meets ||S' v|| <= ||V g V^T v|| +
        # r' e, g <= lam gives ||V g V^T v|| <= sqrt((1+e)/(1-e)) (||S v|| +
        # ||E||), and ||S v|| >= smallest. Frobenius norms bound both
        # spectral ones; the dense S's own rounding is added to ||E||.
        eps = np.finfo(np.float64).eps
        orthogonality = gram_defect_bound(vectors)
        residual = np.linalg.norm(dense - (vectors * lam) @ vectors.T)
        residual += 8 * n_features * eps * float(self.largest()[i])
        if orthogonality >= 0.5:
            return ball
        growth = np.sqrt((1 + orthogonality) / (1 - orthogonality))
        excess = growth * (1 + residual / smallest) + rest * orthogonality / smallest
        excess *= 1.0 + 1e-9
        return type(self)(
            values[None] / excess, vectors[None, :, :k], np.array([rest]) / excess
        )
