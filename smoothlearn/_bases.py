"""Helpers of :mod:`smoothlearn.scale` on bases and stacked cuts."""

import numpy as np
import scipy.linalg

__all__ = ["basis_defect", "basis_tolerance", "orthonormal_to_rounding"]


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
