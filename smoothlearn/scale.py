"""The smoothing scale ``S``: the one currency of the engine.

A strategy answers a :class:`Scale` for a block of inputs (with UCAN's mean
offset where it has one); :meth:`Scale.as_run` gives the float32 smoothing the
engine runs and the region a certificate may record; the counting kernel draws
``x + offset + S z`` through :meth:`Scale.perturb`; block results,
:class:`~smoothlearn.regions.Certificates` and the memory's regions hold rows
of one. Every fact about a form (its arrays, volume, extreme singular values,
powers, noise, float32 rounding, the memory's ball, and the special structure
geometry and first-layer reuse exploit) is written here once.

The forms, shared by all rows of one Scale:

* isotropic: ``values`` of shape ``(m,)``, ``S_i = values[i] I``;
* diagonal: ``values`` of shape ``(m, d)``, ``S_i = diag(values[i])``;
* rotated: ``basis`` of shape ``(m, d, k)`` with orthonormal columns ``U_i``,
  ``values`` of shape ``(m, k)`` and ``rest`` of shape ``(m,)``:
  ``S_i = U_i diag(values[i]) U_i^T + rest[i] (I - U_i U_i^T)`` (``k = d`` is
  a full rotation, with no complement);
* rotated in a diagonal frame: a rotated scale with ``frame`` of shape
  ``(m, d)``, ``S_i = F_i R_i F_i`` with ``F_i = diag(frame[i])`` and ``R_i``
  the rotated scale above. With ``values = rest = 1`` it is the diagonal
  scale ``frame**2``: RANCER's rank-k directions on top of ANCER's diagonal
  (the issue's "whitened" form ``D^1/2 (I + U diag(s - 1) U^T) D^1/2``, with
  ``D = frame**2``; the frame holds ``D``'s square root so that float32
  rounding leaves the run and the recorded scale the same). Its inverse,
  volume and noise are closed-form, O(d k); its extreme singular values are
  bounded (``min(F)^2 lambda_min(R)`` below, ``max(F)^2 lambda_max(R)``
  above), each on the side that keeps a certificate sound;
* with cuts: any form above with ``cuts`` of shape ``(m, d, q)``, columns
  ``C_i``: the region whose covariance is ``S_i^2 - C_i C_i^T`` (the memory's
  separating-hyperplane cuts, :meth:`cut`; zero columns are no cuts). Its
  square root is not formed: a factor ``L_i = S_i (I - Q Q^T)^1/2`` with
  ``Q = S_i^-1 C_i`` (``L L^T = S^2 - C C^T``) whitens and stretches in
  O(d q) after the base form's own product, its volume is exact
  (``det(S)^2 det(I - Q^T Q)``) and its smallest singular value a sound
  lower bound (a secular equation of size ``q``). A cut row is a region
  only: it is never run (no noise). Its geometry (cuts, supports, inscribed
  radius, volume), every number a proved bound in float64, is
  :class:`~smoothlearn._cut_geometry.CutGeometry`'s, a mixin of Scale.

Arrays are numpy, or torch tensors for what the engine and the optimisers
compute (:meth:`noise`, :meth:`perturb`, :meth:`shared_parts`); the arithmetic
uses only operators and methods both share, so this module needs no torch.
"""

import numpy as np

from ._bases import (  # noqa: F401  (imported from here by other modules)
    _padded_cuts,
    basis_defect,
    basis_tolerance,
    gram_defect_bound,
    orthonormal_to_rounding,
)
from ._cut_geometry import CUT_MARGIN, CutGeometry  # noqa: F401

__all__ = ["Scale"]

#: Names of a Scale's arrays where they are stored apart: keyword arguments of
#: :class:`~smoothlearn.regions.Certificates` and the fields of a checkpoint
#: log's rows.
FIELDS = {
    "values": "scale",
    "basis": "basis",
    "rest": "scale_rest",
    "frame": "scale_frame",
    "cuts": "scale_cuts",
}


class Scale(CutGeometry):
    """The smoothing scales ``S_i`` of a set of rows, in one compact form.

    Parameters
    ----------
    values : array of shape (m,), (m, d) or (m, k)
        Isotropic or diagonal scales, or the in-basis scales of a rotated one.
    basis : array of shape (m, d, k), default=None
        Orthonormal columns ``U_i`` of a rotated scale.
    rest : array of shape (m,), default=None
        A rotated scale's isotropic scale on the complement of ``basis``.
    offset : array of shape (m, d), default=None
        The noise's mean offset (UCAN's generators): the noise is
        ``offset + S z``, centred at ``x + offset``; the certified region stays
        centred at ``x``. Carried from a strategy to the engine, never into a
        certificate.
    frame : array of shape (m, d), default=None
        A rotated scale's diagonal frame: ``S_i = diag(frame[i]) R_i
        diag(frame[i])`` with ``R_i`` the rotated scale of ``values``,
        ``basis`` and ``rest``.
    cuts : array of shape (m, d, q), default=None
        Rank-one cuts of each row's region: its covariance is ``S_i^2 -
        C_i C_i^T`` (zero columns cut nothing). Regions only (no noise).

    Examples
    --------
    >>> import numpy as np
    >>> s = Scale(np.array([0.5, 2.0]))
    >>> s.kind, s.smallest().tolist(), s.geometric_mean(3).tolist()
    ('isotropic', [0.5, 2.0], [0.5, 2.0])
    """

    #: Names of the arrays where they are stored apart (:meth:`fields`).
    FIELD_NAMES = tuple(FIELDS.values())

    # pickles of an earlier version hold no offset, no frame and no cuts
    offset = None
    frame = None
    cuts = None

    def __init__(
        self, values, basis=None, rest=None, offset=None, frame=None, cuts=None
    ):
        if (basis is None) != (rest is None):
            raise ValueError("a rotated scale needs both basis and rest")
        if frame is not None and basis is None:
            raise ValueError("a diagonal frame belongs to a rotated scale")
        self.values = values
        self.basis = basis
        self.rest = rest
        self.offset = offset
        self.frame = frame
        self.cuts = cuts

    # ------------------------------------------------------------ the form
    @property
    def kind(self):
        """``'isotropic'``, ``'diagonal'`` or ``'rotated'``."""
        if self.basis is not None:
            return "rotated"
        return "isotropic" if self.values.ndim == 1 else "diagonal"

    def __len__(self):
        return len(self.values)

    def _arrays(self):
        return {
            "values": self.values,
            "basis": self.basis,
            "rest": self.rest,
            "frame": self.frame,
            "cuts": self.cuts,
        }

    @property
    def has_cuts(self):
        """Whether any row has a cut (a nonzero column of ``cuts``)."""
        return self.cuts is not None and bool(np.any(np.asarray(self.cuts) != 0))

    def row_cuts(self, i):
        """Row ``i``'s nonzero cut columns ``C_i`` (d, q_i), or None."""
        if self.cuts is None:
            return None
        cuts = np.asarray(self.cuts[i], dtype=np.float64)
        cuts = cuts[:, np.any(cuts != 0, axis=0)]
        return cuts if cuts.shape[1] else None

    def map(self, function, *, offset=True):
        """A Scale of ``function(array)`` for each of its arrays (the offset too,
        unless ``offset=False``, which drops it)."""
        arrays = {
            k: None if a is None else function(a) for k, a in self._arrays().items()
        }
        moved = None if self.offset is None or not offset else function(self.offset)
        return Scale(**arrays, offset=moved)

    def __getitem__(self, rows):
        """The rows ``rows`` (a slice, index array or list) as a Scale."""
        out = self.map(lambda a: a[rows])
        # per-row facts already derived (a cut row's radius, a basis's
        # distance from orthonormal, the largest values) go with the rows
        for name in ("_floor", "_deviation", "_largest"):
            if name in self.__dict__:
                setattr(out, name, self.__dict__[name][rows])
        return out

    def fields(self):
        """The arrays under their stored names (``scale``, ``basis``,
        ``scale_rest``, ``scale_frame``), Nones left out; the offset is not a
        region's."""
        return {FIELDS[k]: a for k, a in self._arrays().items() if a is not None}

    @classmethod
    def from_fields(
        cls, scale, basis=None, scale_rest=None, scale_frame=None, scale_cuts=None
    ):
        """The Scale whose :meth:`fields` are these."""
        return cls(scale, basis, scale_rest, frame=scale_frame, cuts=scale_cuts)

    @classmethod
    def concatenate(cls, parts):
        """The rows of ``parts`` (Scales of one form, with or without cuts),
        in order; cuts are padded with zero columns to the most any part has."""
        parts = list(parts)
        first = parts[0]
        arrays = {
            k: None if a is None else np.concatenate([p._arrays()[k] for p in parts])
            for k, a in first._arrays().items()
            if k != "cuts"
        }
        arrays["cuts"] = _padded_cuts(parts)
        offset = None
        if first.offset is not None:
            offset = np.concatenate([p.offset for p in parts])
        return cls(**arrays, offset=offset)

    @classmethod
    def pick(cls, candidates, chosen):
        """Row ``i`` of ``candidates[chosen[i]]``, for Scales of one form.

        An array the candidates share (one basis under several scales) is
        taken as it is; others are copied row by row, never stacked.
        """
        chosen = np.asarray(chosen)

        def picked(arrays):
            if all(a is arrays[0] for a in arrays):
                return arrays[0]
            out = np.array(arrays[0], copy=True)
            for c, array in enumerate(arrays[1:], start=1):
                rows = chosen == c
                out[rows] = np.asarray(array)[rows]
            return out

        first = candidates[0]
        if any(c.cuts is not None for c in candidates):
            raise ValueError("strategies' candidates have no cuts")
        arrays = {
            k: None if a is None else picked([c._arrays()[k] for c in candidates])
            for k, a in first._arrays().items()
        }
        offset = None
        if first.offset is not None:
            offset = picked([c.offset for c in candidates])
        return cls(**arrays, offset=offset)

    def equals(self, other):
        """Whether ``other`` holds the same rows exactly: form, values, offset."""
        pairs = list(zip(self._arrays().values(), other._arrays().values()))
        pairs.append((self.offset, other.offset))
        return all(
            (a is None and b is None)
            or (a is not None and b is not None and np.array_equal(a, b))
            for a, b in pairs
        )

    def check(self, n_rows, n_features):
        """Raise a ValueError unless this is a Scale of ``n_rows`` rows for
        inputs of ``n_features``."""
        values = self.values
        if values.shape[0] != n_rows or values.ndim not in (1, 2):
            raise ValueError("scale must have shape (n,), (n, d) or (n, k)")
        if self.basis is None:
            if values.ndim == 2 and values.shape[1] != n_features:
                raise ValueError("a diagonal scale must have one column per feature")
            self._check_cuts(n_rows, n_features)
            return
        if self.basis.shape[:2] != (n_rows, n_features) or values.shape != (
            n_rows,
            self.basis.shape[2],
        ):
            raise ValueError("basis must be (n, d, k) with scale (n, k)")
        if self.basis.shape[2] == 0:
            raise ValueError(
                "a rotated scale needs k >= 1 basis columns; S = r I is an "
                "isotropic scale (pass scale_rest as the scale)"
            )
        if self.rest.shape != (n_rows,):
            raise ValueError("a rotated scale needs scale_rest of shape (n,)")
        if self.frame is not None and self.frame.shape != (n_rows, n_features):
            raise ValueError("a diagonal frame must have shape (n, d)")
        self._check_cuts(n_rows, n_features)

    def _check_cuts(self, n_rows, n_features):
        if self.cuts is not None and (
            np.ndim(self.cuts) != 3 or np.shape(self.cuts)[:2] != (n_rows, n_features)
        ):
            raise ValueError("cuts must have shape (n, d, q)")

    def with_isotropic(self, rows, values):
        """Rows ``rows`` replaced by isotropic ``values`` (shape ``(len(rows),)``),
        in this Scale's form (a copy): the memory's reduced balls and the
        isotropic candidates strategies compare with their answer."""
        values = np.asarray(values, dtype=np.float64)
        new = np.array(self.values, copy=True)
        new[rows] = values if self.kind == "isotropic" else values[:, None]
        rest = frame = None
        if self.rest is not None:
            rest = np.array(self.rest, copy=True)
            rest[rows] = values
        if self.frame is not None:
            frame = np.array(self.frame, copy=True)
            frame[rows] = 1.0
        cuts = None
        if self.cuts is not None:
            cuts = np.array(self.cuts, copy=True)
            cuts[rows] = 0.0
        return Scale(new, self.basis, rest, self.offset, frame, cuts)

    def with_rows(self, rows, parts):
        """Rows ``rows`` replaced by ``parts`` (one-row Scales), a copy: the
        memory's shrunk regions, written back in this Scale's form.

        An isotropic part is a ball, written by :meth:`with_isotropic`; another
        part must have this Scale's form and shapes, a rotated one without a
        frame taking the frame of ones. A part's cuts (a ball's too) are its
        row's, the cuts padded with zero columns to the most any row has.
        """
        balls = [(i, p) for i, p in zip(rows, parts) if p.kind == "isotropic"]
        out = self.with_isotropic(
            [i for i, _ in balls], [float(p.values[0]) for _, p in balls]
        )
        others = [(i, p) for i, p in zip(rows, parts) if p.kind != "isotropic"]
        cut = [(i, p) for i, p in zip(rows, parts) if p.cuts is not None]
        if not others and not cut:
            return out
        arrays = {
            k: None if a is None else np.array(a, copy=True)
            for k, a in out._arrays().items()
        }
        for i, part in others:
            if part.kind != self.kind or part.values.shape[1:] != self.values.shape[1:]:
                raise ValueError("rows must be written back in the Scale's own form")
            for name, given in part._arrays().items():
                if name != "cuts" and arrays[name] is not None:
                    arrays[name][i] = 1.0 if given is None else given[0]
        # a part's cuts go with its row (a ball's too, on the ball written above)
        padded = _padded_cuts([out, *(p for _, p in cut)])
        arrays["cuts"] = None if padded is None else padded[: len(out)]
        for i, part in zip(rows, parts):
            if arrays["cuts"] is not None and part.kind != "isotropic":
                arrays["cuts"][i] = 0.0
            if part.cuts is not None:
                arrays["cuts"][i, :, : part.cuts.shape[2]] = part.cuts[0]
        return Scale(**arrays, offset=self.offset)

    # -------------------------------------------------------------- facts
    def _has_complement(self):
        return self.kind == "rotated" and self.basis.shape[2] < self.basis.shape[1]

    def smallest(self):
        """Smallest singular value of each ``S_i``, shape (m,).

        In a diagonal frame a lower bound, ``min(F_i)^2`` times ``R_i``'s
        (``S = F R F`` with ``R >= lambda_min(R) I``): the sound side for an
        inscribed radius.
        """
        if "_floor" in self.__dict__:
            return self._floor
        smallest = self._base_smallest()
        if self.cuts is not None:
            smallest = np.array(smallest, dtype=np.float64, copy=True)
            for i in range(len(self)):
                if self.row_cuts(i) is not None:
                    smallest[i] = self._cut_smallest(i, smallest[i])
            self._floor = smallest  # a secular equation per cut row: kept
        return smallest

    def _base_smallest(self):
        if self.kind == "isotropic":
            return np.array(self.values, dtype=np.float64)
        smallest = self.values.min(axis=1)
        if self._has_complement():
            smallest = np.minimum(smallest, self.rest)
        if self.kind == "rotated":
            smallest = np.maximum(smallest - self._basis_deviation(), 0.0)
        if self.frame is not None:
            smallest = smallest * self.frame.min(axis=1) ** 2
        return smallest

    def _basis_deviation(self):
        """A bound on ``||R - R_P||`` per row: the rotated scale as run, ``r I +
        U D U^T`` (``D = diag(s - r)``), against its closed form on the polar
        factor ``P`` of ``U`` (whose singular values are ``s`` and ``r``
        exactly): ``1.01 ||U^T U - I||_F max|s - r|`` (``U = P H``, ``||H -
        I|| <= ||U^T U - I|| / 2``). Zero for torch arrays (the engine's,
        never a certificate's)."""
        if not isinstance(self.basis, np.ndarray):
            return 0.0
        cached = self.__dict__.get("_deviation")
        if cached is not None:
            return cached
        # with the rounding of forming U^T U - I, which may round far below it
        gram_error = gram_defect_bound(self.basis)
        values = np.asarray(self.values, dtype=np.float64)
        spread = np.abs(values - np.asarray(self.rest, dtype=np.float64)[:, None])
        self._deviation = 1.01 * gram_error * spread.max(axis=1)
        return self._deviation

    def largest(self):
        """Largest singular value of each ``S_i``, shape (m,).

        In a diagonal frame an upper bound, ``max(F_i)^2`` times ``R_i``'s:
        the sound side for a circumscribed radius.
        """
        if self.kind == "isotropic":
            return np.array(self.values, dtype=np.float64)
        cached = self.__dict__.get("_largest")
        if cached is not None:
            return cached
        largest = self.values.max(axis=1)
        if self._has_complement():
            largest = np.maximum(largest, self.rest)
        if self.kind == "rotated":
            largest = largest + self._basis_deviation()
        if self.frame is not None:
            largest = largest * self.frame.max(axis=1) ** 2
        if isinstance(largest, np.ndarray):
            self._largest = largest
        return largest

    def geometric_mean(self, n_features):
        """``det(S_i)^(1/d)`` of each row, shape (m,) (of ``(S^2 - C C^T)^1/2``
        for a cut row, exactly)."""
        if self.kind == "isotropic":
            mean = np.array(self.values, dtype=np.float64)
            return (
                mean if self.cuts is None else self._with_cut_volume(mean, n_features)
            )
        log_sum = np.log(self.values).sum(axis=1)
        if self.kind == "rotated":
            log_sum = log_sum + (n_features - self.basis.shape[2]) * np.log(self.rest)
        if self.frame is not None:  # det(F R F) = det(F)^2 det(R)
            log_sum = log_sum + 2.0 * np.log(self.frame).sum(axis=1)
        mean = np.exp(log_sum / n_features)
        return mean if self.cuts is None else self._with_cut_volume(mean, n_features)

    def apply(self, i, v, power=1.0, factor=1.0, transpose=False):
        """``(factor S_i)^power v`` for ``v`` of shape (..., d), in float64.

        ``S_i`` is diagonal in the frame of its basis, so any power is one
        scaling there. In a diagonal frame only powers 1 and -1:
        ``(F R F)^-1 = F^-1 R^-1 F^-1``. A cut row takes powers 1 and -1 of
        its factor ``L = S (I - Q Q^T)^1/2`` (``L L^T`` its covariance;
        ``transpose`` for ``L^T`` and ``L^-T``): the norms of ``L^-1 v`` and
        ``L^T v`` are the region's (its gauge and support function).
        """
        cut = self._cut_factor(i)
        if cut is None:
            return self._apply_base(i, v, power, factor)
        if power not in (1, -1):
            raise ValueError("a cut scale has powers 1 and -1")
        w, sv = cut
        # (I - Q Q^T)^(p/2) = I + W diag((1 - sv^2)^(p/2) - 1) W^T
        with np.errstate(divide="ignore"):
            middle = np.clip(1.0 - sv**2, 0.0, None) ** (0.5 * power) - 1.0
        v = np.asarray(v, dtype=np.float64)

        def mid(x):
            return x + ((x @ w) * middle) @ w.T

        # L = S P, L^-1 = P^-1 S^-1, L^T = P S, L^-T = S^-1 P^-1 (P, S symmetric)
        if (power == 1) != transpose:
            return self._apply_base(i, mid(v), power, factor)
        return mid(self._apply_base(i, v, power, factor))

    def _apply_base(self, i, v, power, factor):
        v = np.asarray(v, dtype=np.float64)
        if self.kind != "rotated":
            return v * (factor * np.asarray(self.values[i], dtype=np.float64)) ** power
        frame = None
        if self.frame is not None:
            if power not in (1, -1):
                raise ValueError("a scale in a diagonal frame has powers 1 and -1")
            frame = np.asarray(self.frame[i], dtype=np.float64) ** power
            v = v * frame
        u = self.basis[i]
        coef = v @ u
        rest = v - coef @ u.T
        out = (coef * (factor * self.values[i]) ** power) @ u.T + rest * (
            factor * self.rest[i]
        ) ** power
        return out if frame is None else out * frame

    def dense(self, i, n_features, factor=1.0):
        """Dense ``factor S_i`` (d x d, symmetric): ``O(d^2)`` memory, for
        diagnostics. A cut row: the symmetric square root of its covariance
        (a dense ``eigh``, O(d^3)), so that ``S @ S`` is the region's ``M``
        as for every other form."""
        if self.row_cuts(i) is None:
            return self.apply(i, np.eye(n_features), factor=factor)
        lam, vectors = np.linalg.eigh(self.covariance(i, n_features, factor))
        return (vectors * np.sqrt(np.clip(lam, 0.0, None))) @ vectors.T

    def factor(self, i, n_features, factor=1.0):
        """Dense ``L`` with ``L L^T = (factor S_i)^2``: ``S`` itself, or a cut
        row's factor ``S (I - Q Q^T)^1/2`` (no eigendecomposition)."""
        return self.apply(i, np.eye(n_features), factor=factor, transpose=True)

    def covariance(self, i, n_features, factor=1.0):
        """Dense ``(factor S_i)^2``, a region's ``M = T T^T`` (d x d)."""
        cuts = self.row_cuts(i)
        if cuts is not None:
            base = Scale(**{**self[[i]]._arrays(), "cuts": None})
            return base.covariance(0, n_features, factor) - factor**2 * cuts @ cuts.T
        if self.kind != "rotated":
            semi2 = (factor * np.asarray(self.values[i], dtype=np.float64)) ** 2
            return np.diag(np.broadcast_to(semi2, (n_features,)))
        if self.frame is not None:
            dense = self.dense(i, n_features, factor=factor)
            return dense @ dense
        # S S as run (S = r I + U D U^T, D = diag(s - r)), for any basis:
        # r^2 I + U (2 r D + D U^T U D) U^T
        u = np.asarray(self.basis[i], dtype=np.float64)
        rest = factor * float(self.rest[i])
        spread = factor * np.asarray(self.values[i], dtype=np.float64) - rest
        middle = spread[:, None] * (u.T @ u) * spread[None, :]
        middle[np.diag_indices_from(middle)] += 2.0 * rest * spread
        return u @ middle @ u.T + rest**2 * np.eye(n_features)

    def diagonal_or_dense(self, i, n_features, factor=1.0):
        """``factor S_i`` as its diagonal (d,) where it is diagonal in the
        coordinates, else dense (d x d)."""
        if self.kind == "rotated" or self.row_cuts(i) is not None:
            return self.dense(i, n_features, factor=factor)
        return factor * np.broadcast_to(self.values[i], (n_features,))

    def per_coordinate(self, n_features):
        """Each row's scale per coordinate, shape (m, d); None for a rotated
        scale, which has no per-coordinate form (nor one with cuts)."""
        if self.kind == "rotated" or self.has_cuts:
            return None
        values = np.asarray(self.values, dtype=np.float64).reshape(len(self), -1)
        return np.broadcast_to(values, (len(self), n_features))

    # ----------------------------------------- structure geometry exploits
    def diagonal_covariance(self, i, n_features, factor=1.0):
        """The diagonal of ``(factor S_i)^2`` where that matrix is diagonal,
        else None."""
        if self.kind == "rotated" or self.row_cuts(i) is not None:
            return None
        semi = factor * np.atleast_1d(np.asarray(self.values[i], dtype=np.float64))
        return np.broadcast_to(semi**2, (n_features,))

    def isotropic_plus_low_rank(self, i, n_features, factor=1.0):
        """``(c, U, D)`` with ``(factor S_i)^2 = c I + U diag(D) U^T`` and
        ``U`` of fewer than ``d`` columns, or None (diagonal, full rotation,
        cuts)."""
        if self.row_cuts(i) is not None:
            return None
        if self.kind != "rotated":
            values = np.asarray(self.values[i], dtype=np.float64)
            if np.size(values) != 1:
                return None
            c = float(factor * np.atleast_1d(values)[0]) ** 2
            return c, np.zeros((n_features, 0)), np.zeros(0)
        if self.basis.shape[2] >= n_features or self.frame is not None:
            return None
        c = float(factor * self.rest[i]) ** 2
        semi = factor * np.atleast_1d(np.asarray(self.values[i], dtype=np.float64))
        return c, self.basis[i], semi**2 - c

    def principal_axes(self, i, n_features, factor=1.0):
        """``(semi, coordinates)``: the singular values of ``factor S_i`` along
        an orthonormal frame of its eigenvectors, and the map of a vector to
        its coordinates there. A rotated scale's complement is one coordinate
        (the length of the vector's part in it), with semi-axis
        ``factor * rest``. In a diagonal frame the eigenvectors are not
        known in closed form: a dense ``eigh``, O(d^3); nor with cuts (``eigh``
        of the covariance)."""
        if self.row_cuts(i) is not None:
            lam, vectors = np.linalg.eigh(self.covariance(i, n_features, factor))
            return np.sqrt(np.clip(lam, 0.0, None)), lambda y: vectors.T @ y
        semi = factor * np.atleast_1d(np.asarray(self.values[i], dtype=np.float64))
        if self.kind != "rotated":
            return np.broadcast_to(semi, (n_features,)), lambda y: y
        if self.frame is not None:
            semi, vectors = np.linalg.eigh(self.dense(i, n_features, factor=factor))
            return semi, lambda y: vectors.T @ y
        u = self.basis[i]
        k = u.shape[1]
        if k == n_features:
            return semi, lambda y: u.T @ y

        def coordinates(y):
            coef = u.T @ y
            return np.append(coef, np.linalg.norm(y - u @ coef))

        return np.append(semi, factor * self.rest[i]), coordinates

    # ------------------------------------------------------- what is run
    def noise(self, z):
        """``S_i z`` for every row ``i`` and draw ``z`` (differentiable with torch).

        For a rotated scale ``r z + U ((s - r) * U^T z)``: O(d k) per draw
        (in a diagonal frame, ``F`` applied before and after).

        Parameters
        ----------
        z : array of shape (w, d)

        Returns
        -------
        array of shape (m, w, d)
        """
        self._not_cut()
        if self.kind != "rotated":
            return self.values.reshape(len(self.values), 1, -1) * z[None]
        basis, rest = self.basis, self.rest
        if self.frame is not None:  # F R F z, per row
            y = self.frame[:, None] * z[None]  # (m, w, d)
            coef = (y @ basis) * (self.values - rest[:, None])[:, None]
            out = rest[:, None, None] * y + coef @ basis.swapaxes(1, 2)
            return out * self.frame[:, None]
        coef = (basis.swapaxes(1, 2) @ z.T).swapaxes(1, 2)  # (m, w, k): U^T z
        coef = coef * (self.values - rest[:, None])[:, None]
        return rest[:, None, None] * z + coef @ basis.swapaxes(1, 2)

    def perturb(self, centres, z):
        """``centres_i + S_i z`` for every row and draw: (m, w, d) noisy torch
        inputs (``centres`` are where the noise is centred: the inputs, moved by
        the offset where there is one)."""
        self._not_cut()
        if self.kind != "rotated":
            return centres[:, None].addcmul(
                self.values.reshape(len(self.values), 1, -1), z[None]
            )
        return centres[:, None] + self.noise(z)

    def shared_parts(self):
        """How ``S_i z`` splits for first-layer reuse, or None.

        ``(common, factor, basis, stretch)`` with ``S_i z = factor_i * (common
        * z) + basis_i (stretch_i * basis_i^T z)``: ``common`` (d,) shared by
        every row (None: the identity), ``factor`` (m,) per row (None: 1),
        ``basis`` (m, d, k) and ``stretch`` (m, k) a low-rank part per row
        (None: none). A linear first layer ``L`` then needs ``L (common * z)``
        once per draw and ``L basis_i`` once per row. None where the rows share
        no such structure (per-input diagonals, diagonal frames).
        """
        self._not_cut()
        if self.kind == "isotropic":
            return None, self.values, None, None
        if self.frame is not None:
            return None
        if self.kind == "rotated":
            return None, self.rest, self.basis, self.values - self.rest[:, None]
        if bool((self.values == self.values[:1]).all()):
            return self.values[0], None, None, None
        return None

    def _not_cut(self):
        if self.has_cuts:
            raise ValueError(
                "a scale with cuts is a certified region, never a smoothing to run"
            )

    def isotropic_rows(self):
        """Which rows are isotropic: all of an isotropic scale, the rows of a
        diagonal one whose values are all equal; none of a rotated one.

        Returns
        -------
        ndarray of bool, shape (m,)
        """
        if self.cuts is not None:
            cut = np.any(np.asarray(self.cuts) != 0, axis=(1, 2))
            return ~cut & Scale(self.values, self.basis, self.rest).isotropic_rows()
        if self.kind == "isotropic":
            return np.ones(len(self), dtype=bool)
        if self.kind == "rotated":
            return np.zeros(len(self), dtype=bool)
        values = np.asarray(self.values)
        return (values == values[:, :1]).all(axis=1)

    def as_run(self):
        """The smoothing the engine runs, and the scale a certificate records.

        The network and the noise run in float32, so the engine smooths with
        the float32 values of a strategy's answer, not its float64 ones
        (``sigma=0.12`` runs as 0.1199999973). This returns ``(run, recorded)``:

        * ``run``: every value rounded to float32 (held as float64 arrays; the
          offset as float32), what the counting kernel is given;
        * ``recorded``: the scale the certificate states (no offset).
          Isotropic and diagonal scales are exactly the values run. A rotated
          scale runs as ``S~ = r I + U~ diag(s - r) U~^T`` with ``U~`` the
          float32 basis, whose columns are orthonormal only to about 1e-7; the
          record keeps the orthonormalised basis ``U`` (QR of ``U~``) and
          shrinks ``s`` and ``r`` by ``1 - 2 Delta / s_min`` with ``Delta =
          max|s - r| (2 e + e^2)``, ``e = ||U - U~||_F``. Then ``||S~^-1
          S_rec|| <= 1`` (Weyl's bound on ``S~``'s smallest singular value), so
          the recorded region lies inside the one the draws certify. In a
          diagonal frame ``Delta`` carries ``max(F)^2`` and ``s_min`` is
          :meth:`smallest`'s lower bound.

        Returns
        -------
        run, recorded : Scale

        Raises
        ------
        ValueError
            A rotated scale whose float32 basis is too far from orthonormal
            for the shrink to stay positive.
        """
        self._not_cut()
        run = self.map(
            lambda a: np.asarray(a, dtype=np.float32).astype(np.float64), offset=False
        )
        if self.offset is not None:
            run.offset = np.asarray(self.offset, dtype=np.float32)
        if run.kind != "rotated":
            return run, run.map(lambda a: a, offset=False)
        basis, scale, rest = run.basis, run.values, run.rest
        q, r = np.linalg.qr(basis)
        q = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
        e = np.linalg.norm(q - basis, axis=(1, 2))
        delta = np.abs(scale - rest[:, None]).max(axis=1) * (2 * e + e**2)
        # a diagonal frame F (the same float32 values run and recorded)
        # multiplies both sides: ||F (R~ - R) F|| <= max(F)^2 ||R~ - R||, and
        # smallest() bounds the recorded S's smallest singular value below
        if run.frame is not None:
            delta = delta * run.frame.max(axis=1) ** 2
        smallest = Scale(scale, q, rest, frame=run.frame).smallest()
        if np.any(2 * delta >= smallest):
            raise ValueError(
                "a rotated scale is too ill-conditioned for float32 noise: its basis "
                "rounds to columns far from orthonormal"
            )
        shrink = 1.0 - 2.0 * delta / smallest
        return run, Scale(scale * shrink[:, None], q, rest * shrink, frame=run.frame)
