"""Helpers of :mod:`smoothlearn.scale` on bases and stacked cuts."""

import numpy as np
import scipy.linalg

__all__ = [
    "basis_defect",
    "basis_tolerance",
    "gram_defect_bound",
    "orthonormal_to_rounding",
]

_EPS = float(np.finfo(np.float64).eps)
# long double products cost about 50x float64 BLAS: used up to this many
# multiply-adds (about half a second), float64 beyond
_WIDE_WORK = 100_000_000


def _room_inside(basis, values, rest, capped_values, capped_rest):
    """How far ``S'`` (``capped_*``) may be scaled and stay inside ``S``: the
    largest ``c^2`` with ``c S'`` inside ``S``, both read as the stored
    rotated form ``r I + U diag(s - r) U^T`` as run (whose square is the
    memory's covariance), for a basis ``U`` orthonormal or not.

    With ``G = U^T U`` and ``U = Q G^1/2`` (``Q`` orthonormal) the form acts
    as ``r`` on the complement of ``U``'s span and as the ``k x k`` matrix
    ``r I + G^1/2 diag(s - r) G^1/2`` on it, so containment is a generalised
    eigenvalue problem of size ``k``. A basis orthonormal to rounding
    (``|G - I| <= 4 k eps``) returns None without solving (the caller
    shrinks by the basis's distance from orthonormal).
    """
    basis = np.asarray(basis, dtype=np.float64)
    if orthonormal_to_rounding(basis):
        return None
    gram = basis.T @ basis
    lam, vec = np.linalg.eigh(gram)
    root = (vec * np.sqrt(np.clip(lam, 0.0, None))) @ vec.T
    # the complement takes r' = min(r, limit) <= r: never the binding side
    room = 1.0
    for power in (1,):  # containment of S' in S is that of S'^2 in S^2
        a = _on_span(root, values, rest, power)
        b = _on_span(root, capped_values, capped_rest, power)
        if power == 1:  # (c S')^2 <= S^2
            a, b = a @ a, b @ b
        try:
            lowest = float(scipy.linalg.eigh(a, b, eigvals_only=True)[0])
        except np.linalg.LinAlgError:  # the capped form itself is degenerate
            return 0.0
        room = min(room, lowest)
    return max(room, 0.0)


def _on_span(root, values, rest, power):
    """``r^p I + G^1/2 diag(s^p - r^p) G^1/2``: the rotated form's ``p``-th
    power (1: the form, 2: its covariance) on its basis's span."""
    values = np.asarray(values, dtype=np.float64)
    rest = float(rest)
    return (
        rest**power * np.eye(len(root)) + (root * (values**power - rest**power)) @ root
    )


def _padded_cuts(parts):
    """The cuts of ``parts`` (Scales of one form) stacked, zero columns padding
    each to the most any has; None where none has cuts."""
    if all(p.cuts is None for p in parts):
        return None
    d = next(np.shape(p.cuts)[1] for p in parts if p.cuts is not None)
    q = max(np.shape(p.cuts)[2] for p in parts if p.cuts is not None)
    out = np.zeros((sum(len(p) for p in parts), d, q))
    start = 0
    for p in parts:
        if p.cuts is not None:
            out[start : start + len(p), :, : np.shape(p.cuts)[2]] = p.cuts
        start += len(p)
    return out


def basis_defect(basis):
    """``max |U^T U - I|`` of each ``(d, k)`` basis in a stack ``(m, d, k)``."""
    basis = np.asarray(basis, dtype=np.float64)
    gram = basis.swapaxes(1, 2) @ basis
    return np.abs(gram - np.eye(basis.shape[2])).max(axis=(1, 2))


def gram_defect_bound(basis):
    """A proved upper bound of ``||U^T U - I||_F`` for each stored float64
    basis: one float for a ``(d, k)`` basis, an array for a stack ``(m, d,
    k)``.

    ``U^T U - I`` as computed can round to far less than it is (for a basis
    orthonormal to float64 rounding, float64's own rounding is as large as
    the defect), so its rounding is added: each entry of ``U^T U`` is a dot
    product of ``d`` terms, within ``gamma_d |u_i|^T |u_j|`` of the exact one
    in any order of summation (Higham, Accuracy and Stability, 3.1), and
    ``|| |U|^T |U| ||_F <= ||U||_F^2 = k + tr(E) <= k + sqrt(k) ||E||_F``;
    with ``N`` the computed norm rounded up, ``||E||_F <= N + gamma_d (k +
    sqrt(k) ||E||_F)``, solved for ``||E||_F``. Formed in long double (where
    the platform has it, ``gamma_d`` about 2000x smaller) up to
    ``_WIDE_WORK`` multiply-adds, in float64 beyond; the subtraction of ``I``,
    the conversion to float64 and the norm's ``k^2`` squares and square root
    are covered by ``(k^2 + 8) eps`` relative on ``N``.
    """
    basis = np.asarray(basis, dtype=np.float64)
    single = basis.ndim == 2
    stack = basis[None] if single else basis
    m, d, k = stack.shape
    wide = m * d * k * k <= _WIDE_WORK
    dtype = np.longdouble if wide else np.float64
    # the platform's own epsilon (long double is float64 on some platforms);
    # twice the unit roundoff, so gamma_d <= d eps
    unit = float(np.finfo(dtype).eps)
    if not d * unit * np.sqrt(k) <= 0.5:  # the solve below and its rounding
        raise ValueError(f"a basis of {d} x {k} is beyond this bound's range")
    w = stack.astype(dtype)
    # an overflow in U^T U (entries near 1e154) leaves no bound: infinite
    with np.errstate(over="ignore", invalid="ignore"):
        defect = (w.swapaxes(1, 2) @ w - np.eye(k, dtype=dtype)).astype(np.float64)
        computed = np.sqrt(np.sum(defect**2, axis=(1, 2)))
    computed = computed * (1.0 + (k * k + 8) * _EPS)
    gamma = d * unit
    bound = (computed + gamma * k) / (1.0 - gamma * np.sqrt(k))
    bound = bound * (1.0 + 4.0 * _EPS)  # the last three float64 operations
    bound = np.where(np.isfinite(bound), bound, np.inf)
    return float(bound[0]) if single else bound


def basis_tolerance(n_features, k):
    """The most ``|U^T U - I|`` a stored basis may have: float64 rounding of
    an orthonormalisation (QR, eigh) of ``k`` columns of ``n_features``,
    ``16 (d + k) eps`` (a float32 basis, about 1e-8 off, is far above)."""
    return 16.0 * (n_features + k) * np.finfo(np.float64).eps


def orthonormal_to_rounding(basis):
    """Whether a ``(d, k)`` basis is orthonormal to float64 rounding
    (``|U^T U - I| <= 4 k eps``), as the engine's are: closed forms that
    assume orthonormal columns are exact there."""
    basis = np.asarray(basis, dtype=np.float64)
    k = basis.shape[1]
    return bool(
        np.abs(basis.T @ basis - np.eye(k)).max() <= 4 * k * np.finfo(float).eps
    )
