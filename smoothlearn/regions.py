"""Certified regions: compact scale representations and :class:`Certificates`.

Row ``i`` of a :class:`Certificates` certifies the region

    { center_i + delta : ||S_i^-1 delta|| <= c * gap_i }

in the noise family's norm (l2 for gaussian, l1 for uniform and laplace),
where ``c`` is the family's constant (see :mod:`smoothlearn.noise`). ``S_i``
is stored compactly, in one of three forms shared by all rows:

* isotropic: ``scale`` has shape ``(n_samples,)`` and ``S_i = scale[i] * I``;
* diagonal: ``scale`` has shape ``(n_samples, n_features)`` and
  ``S_i = diag(scale[i])``;
* rotated: ``basis`` has shape ``(n_samples, n_features, k)`` with orthonormal
  columns ``U_i``, ``scale`` has shape ``(n_samples, k)`` and ``scale_rest``
  shape ``(n_samples,)``, and ``S_i = U_i diag(scale[i]) U_i^T +
  scale_rest[i] (I - U_i U_i^T)`` (``k = n_features`` is a full rotation).

``gap`` and the scale always describe the region as finally certified, after
any reduction by the memory (a reduced region is a ball, stored as an
isotropic scale in the same form).

Certificates made through preprocessing ``y = A x + b`` (a scaler or PCA in a
pipeline, :func:`smoothlearn.pipeline.certify_estimator`) keep that region in
the classifier's space and ``A`` beside it (``input_map``): the region in the
units of the input is its preimage ``{x_i + delta : A delta in region_i - y_i}``,
and ``radius``, ``proxy_radius`` and ``contains`` speak of the preimage.
"""

import numbers

import numpy as np
import torch

from .noise import get_noise

__all__ = ["Certificates", "Scale", "operator_norm", "with_abstentions"]


def with_abstentions(labels, abstained, abstain_label):
    """``labels`` with ``abstain_label`` where ``abstained``, in a dtype holding both.

    Numeric labels stay numeric with a numeric abstain label; otherwise the
    result is an object array (numpy would turn -1 into the string '-1').
    """
    labels = np.asarray(labels)
    abstained = np.asarray(abstained, dtype=bool)
    if not abstained.any():
        return labels
    try:
        dtype = np.result_type(labels.dtype, np.asarray(abstain_label))
        if dtype.kind in "USO" or labels.dtype.kind in "USO":
            raise TypeError
    except TypeError:
        dtype = object
    out = labels.astype(dtype, copy=True)
    out[abstained] = abstain_label
    return out


def operator_norm(a, norm):
    """``||A||`` from ``norm`` to itself (l2: the largest singular value; l1:
    the largest column sum); a vector stands for a diagonal ``A``."""
    if a.ndim == 1:
        return float(np.abs(a).max())
    if norm == "l2":
        return float(np.linalg.norm(a, 2))
    return float(np.abs(a).sum(axis=0).max())


def _same_map(a, b):
    return (a is None and b is None) or (
        a is not None and b is not None and np.array_equal(a, b)
    )


def _as_rows(idx, n):
    if isinstance(idx, numbers.Integral):
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range for {n} certificates")
        return np.array([idx % n])
    return np.arange(n)[idx]


class Scale:
    """The smoothing scales ``S_i`` of a set of rows, in one compact form.

    The one definition of the three forms (module docstring): ``values`` of
    shape ``(m,)`` (isotropic), ``(m, d)`` (diagonal) or ``(m, k)`` with
    ``basis`` ``(m, d, k)`` (orthonormal columns ``U_i``) and ``rest`` ``(m,)``
    (rotated: ``S_i = U_i diag(values_i) U_i^T + rest_i (I - U_i U_i^T)``).
    Certificates, the memory's geometry, the metrics and the engine's noise
    all compute with it. Arrays are numpy, or torch for :meth:`noise`.

    Parameters
    ----------
    values : array of shape (m,), (m, d) or (m, k)
    basis : array of shape (m, d, k), default=None
    rest : array of shape (m,), default=None
    """

    def __init__(self, values, basis=None, rest=None):
        if (basis is None) != (rest is None):
            raise ValueError("a rotated scale needs both basis and rest")
        self.values = values
        self.basis = basis
        self.rest = rest

    @property
    def kind(self):
        """``'isotropic'``, ``'diagonal'`` or ``'rotated'``."""
        if self.basis is not None:
            return "rotated"
        return "isotropic" if self.values.ndim == 1 else "diagonal"

    def __len__(self):
        return len(self.values)

    def __getitem__(self, rows):
        """The rows ``rows`` (a slice, index array or list) as a Scale."""
        if self.basis is None:
            return Scale(self.values[rows])
        return Scale(self.values[rows], self.basis[rows], self.rest[rows])

    def _has_complement(self):
        return self.kind == "rotated" and self.basis.shape[2] < self.basis.shape[1]

    def smallest(self):
        """Smallest singular value of each ``S_i``, shape (m,)."""
        if self.kind == "isotropic":
            return np.array(self.values, dtype=np.float64)
        smallest = self.values.min(axis=1)
        if self._has_complement():
            smallest = np.minimum(smallest, self.rest)
        return smallest

    def largest(self):
        """Largest singular value of each ``S_i``, shape (m,)."""
        if self.kind == "isotropic":
            return np.array(self.values, dtype=np.float64)
        largest = self.values.max(axis=1)
        if self._has_complement():
            largest = np.maximum(largest, self.rest)
        return largest

    def geometric_mean(self, n_features):
        """``det(S_i)^(1/d)`` of each row, shape (m,)."""
        if self.kind == "isotropic":
            return np.array(self.values, dtype=np.float64)
        log_sum = np.log(self.values).sum(axis=1)
        if self.kind == "rotated":
            log_sum = log_sum + (n_features - self.basis.shape[2]) * np.log(self.rest)
        return np.exp(log_sum / n_features)

    def apply(self, i, v, power=1.0, factor=1.0):
        """``(factor S_i)^power v`` for ``v`` of shape (..., d), in float64.

        ``S_i`` is diagonal in the frame of its basis, so any power is one
        scaling there.
        """
        v = np.asarray(v, dtype=np.float64)
        if self.kind != "rotated":
            return v * (factor * np.asarray(self.values[i], dtype=np.float64)) ** power
        u = self.basis[i]
        coef = v @ u
        rest = v - coef @ u.T
        return (coef * (factor * self.values[i]) ** power) @ u.T + rest * (
            factor * self.rest[i]
        ) ** power

    def dense(self, i, n_features, factor=1.0):
        """Dense ``factor S_i`` (d x d): ``O(d^2)`` memory, for diagnostics."""
        return self.apply(i, np.eye(n_features), factor=factor)

    def covariance(self, i, n_features, factor=1.0):
        """Dense ``(factor S_i)^2``, a region's ``M = T T^T`` (d x d)."""
        if self.kind != "rotated":
            semi2 = (factor * np.asarray(self.values[i], dtype=np.float64)) ** 2
            return np.diag(np.broadcast_to(semi2, (n_features,)))
        u = self.basis[i]
        rest2 = (factor * self.rest[i]) ** 2
        return (u * ((factor * self.values[i]) ** 2 - rest2)) @ u.T + rest2 * np.eye(
            n_features
        )

    def noise(self, z):
        """``S_i z`` for every row ``i`` and draw ``z`` (torch, differentiable).

        For a rotated scale ``r z + U ((s - r) * U^T z)``: O(d k) per draw.

        Parameters
        ----------
        z : torch.Tensor of shape (w, d)

        Returns
        -------
        torch.Tensor of shape (m, w, d)
        """
        if self.kind != "rotated":
            return self.values.reshape(len(self.values), 1, -1) * z[None]
        basis, scale, rest = self.basis, self.values, self.rest
        coef = torch.einsum("wd,gdk->gwk", z, basis) * (scale - rest[:, None])[:, None]
        return rest[:, None, None] * z + torch.einsum("gwk,gdk->gwd", coef, basis)


class Certificates:
    """Per-input smoothed predictions and their certified regions.

    Attributes are arrays with one entry per certified input, in input order.

    Parameters
    ----------
    label : ndarray of shape (n_samples,)
        Predicted class label, or the abstain label where abstained.
    abstained : ndarray of bool, shape (n_samples,)
        Whether the smoothed classifier abstained on the input.
    p_lower : ndarray of shape (n_samples,)
        One-sided Clopper-Pearson lower bound of the top-class probability.
    gap : ndarray of shape (n_samples,)
        The family's gap of the (possibly reduced) region; 0 where abstained.
    center : ndarray of shape (n_samples, n_features)
        The certified inputs, flattened.
    scale : ndarray of shape (n_samples,), (n_samples, n_features) or (n_samples, k)
        The compact scale of each row (see the module docstring).
    noise : str
        Name of the noise family (``'gaussian'``, ``'uniform'``, ``'laplace'``).
    basis : ndarray of shape (n_samples, n_features, k), default=None
        Orthonormal columns of a rotated scale.
    scale_rest : ndarray of shape (n_samples,), default=None
        Isotropic scale on the orthogonal complement of ``basis``.
    reduced : ndarray of bool, shape (n_samples,), default=None
        Whether the memory shrank the region (all False when None).
    class_index : ndarray of int, shape (n_samples,), default=None
        Index of the predicted class in the classifier's ``classes_`` (-1 where
        abstained).
    strategy : str, default=''
        Name of the strategy that chose the scales.
    smoothing : str, default=''
        The smoothing written whole: the strategy with every parameter (by
        value), the noise family and ``sigma``, e.g. ``'ancer(..., kappa=2,
        ...) gaussian sigma=0.25'`` (:func:`smoothlearn.strategies.describe_smoothing`),
        so certificates of two smoothings are told apart. A data-dependent
        estimator keeps one memory per smoothing.
    abstain_label : object, default=-1
        The label written where abstained.
    time : ndarray of shape (n_samples,), default=None
        Seconds spent per input (NaN where unknown).
    n_draws : ndarray of int, shape (n_samples,), default=None
        Estimation draws behind each row's bound: the estimator's ``n``, or
        fewer with input-specific sizes or a sequential decision (-1 where
        unknown).
    input_map : ndarray of shape (n_features,) or (n_features, n_input_features), \
            default=None
        The linear part ``A`` of the preprocessing ``y = A x + b`` between the
        user's input ``x`` and the classifier's ``y`` (a diagonal as a vector):
        ``radius``, ``proxy_radius`` and ``contains`` are then in the input's
        units. None: the classifier's space is the input's.
    input_center : ndarray of shape (n_samples, n_input_features), default=None
        The user's inputs ``x`` (with ``input_map``); ``center`` holds ``A x + b``.
    space : {'input', 'classifier'}, default='input'
        The units of ``radius`` and ``proxy_radius``: the input's, or (after a
        preprocessing step that is not a known affine map) the classifier's.

    Attributes
    ----------
    norm : {'l2', 'l1'}
        Norm of the certified regions.
    radius : ndarray of shape (n_samples,)
        Radius of the largest ball (in ``norm``) inside each region: ``c * gap *
        smallest scale``; 0 where abstained. With ``input_map`` ``A``, the
        largest ball of the input's units inside the preimage: ``c * gap /
        ||S^-1 A||`` (the operator norm of ``norm``; ``c * gap * min_j s_j /
        |a_j|`` for diagonal ``S`` and ``A``), exact.
    proxy_radius : ndarray of shape (n_samples,)
        ``c * gap`` times the geometric mean of the scale (the n-th root of the
        region's volume up to the unit ball's): the proxy radius of ANCER and
        RANCER and UCAN's ALM; 0 where abstained. With ``input_map`` ``A``
        (``k`` rows of full rank), the same of the preimage: the classifier's
        proxy radius over ``(prod_j sigma_j(A))^(1/k)``. Where ``A`` drops
        directions (PCA with ``k`` below the input's features) the preimage is
        unbounded along them and this is the proxy radius of its cross-section
        in the ``k`` directions ``A`` keeps (``radius`` stays finite and sound).
    """

    def __init__(
        self,
        label,
        abstained,
        p_lower,
        gap,
        center,
        scale,
        noise,
        *,
        basis=None,
        scale_rest=None,
        reduced=None,
        class_index=None,
        strategy="",
        smoothing="",
        time=None,
        n_draws=None,
        abstain_label=-1,
        input_map=None,
        input_center=None,
        space="input",
    ):
        n = len(label)
        self.label = np.asarray(label)
        self.abstained = np.asarray(abstained, dtype=bool)
        self.p_lower = np.asarray(p_lower, dtype=np.float64)
        self.gap = np.asarray(gap, dtype=np.float64)
        self.center = np.asarray(center).reshape(n, -1)
        self.scale = np.asarray(scale, dtype=np.float64)
        self.basis = None if basis is None else np.asarray(basis, dtype=np.float64)
        self.scale_rest = (
            None if scale_rest is None else np.asarray(scale_rest, dtype=np.float64)
        )
        self.reduced = (
            np.zeros(n, dtype=bool) if reduced is None else np.asarray(reduced, bool)
        )
        self.class_index = (
            np.where(self.abstained, -1, 0)
            if class_index is None
            else np.asarray(class_index, dtype=np.intp)
        )
        self.noise = get_noise(noise).name
        self.strategy = strategy
        self.smoothing = smoothing
        self.abstain_label = abstain_label
        self.time = np.full(n, np.nan) if time is None else np.asarray(time, float)
        self.n_draws = (
            np.full(n, -1, dtype=np.int64)
            if n_draws is None
            else np.asarray(n_draws, dtype=np.int64)
        )
        self.input_map = (
            None if input_map is None else np.asarray(input_map, dtype=np.float64)
        )
        self.input_center = (
            None
            if input_center is None
            else np.asarray(input_center, dtype=np.float64).reshape(n, -1)
        )
        self.space = space
        self._check_consistent()

    def _check_consistent(self):
        n = len(self.label)
        for name in (
            "abstained",
            "p_lower",
            "gap",
            "reduced",
            "class_index",
            "time",
            "n_draws",
        ):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have shape ({n},)")
        if self.scale.shape[0] != n or self.scale.ndim not in (1, 2):
            raise ValueError("scale must have shape (n,), (n, d) or (n, k)")
        if self.basis is None:
            if self.scale.ndim == 2 and self.scale.shape[1] != self.n_features:
                raise ValueError("a diagonal scale must have one column per feature")
        else:
            if self.basis.shape[:2] != (n, self.n_features) or self.scale.shape != (
                n,
                self.basis.shape[2],
            ):
                raise ValueError("basis must be (n, d, k) with scale (n, k)")
            if self.scale_rest is None or self.scale_rest.shape != (n,):
                raise ValueError("a rotated scale needs scale_rest of shape (n,)")
        if self.noise != "gaussian" and self.basis is not None:
            raise ValueError("l1 families support isotropic and diagonal scales only")
        if self.space not in ("input", "classifier"):
            raise ValueError(
                f"space must be 'input' or 'classifier'; got {self.space!r}"
            )
        if (self.input_map is None) != (self.input_center is None):
            raise ValueError("input_map and input_center go together")
        if self.input_map is not None:
            a = self.input_map
            if a.ndim not in (1, 2) or a.shape[0] != self.n_features:
                raise ValueError(
                    "input_map must be (n_features,) or (n_features, n_input_features)"
                )
            if self.input_center.shape[1] != (
                a.shape[1] if a.ndim == 2 else a.shape[0]
            ):
                raise ValueError("input_center must have n_input_features columns")
            if self.space != "input":
                raise ValueError("certificates with an input_map are in input units")

    # ------------------------------------------------------------------ sizes
    def __len__(self):
        return len(self.label)

    @property
    def n_features(self):
        return self.center.shape[1]

    @property
    def norm(self):
        return get_noise(self.noise).norm

    @property
    def c(self):
        """The family's constant ``c`` (region: ``||S^-1 delta|| <= c * gap``)."""
        return get_noise(self.noise).c

    @property
    def scales(self):
        """Every row's scale as a :class:`Scale` (views of the arrays)."""
        return Scale(self.scale, self.basis, self.scale_rest)

    @property
    def kind(self):
        """``'isotropic'``, ``'diagonal'`` or ``'rotated'``."""
        return self.scales.kind

    # ------------------------------------------------------------ scale facts
    @property
    def min_scale(self):
        """Smallest singular value of each row's scale, shape (n_samples,)."""
        return self.scales.smallest()

    @property
    def geometric_mean_scale(self):
        """``det(S)^(1/d)`` of each row, shape (n_samples,)."""
        return self.scales.geometric_mean(self.n_features)

    @property
    def n_input_features(self):
        """Features of the user's input (``n_features`` without ``input_map``)."""
        return (
            self.n_features if self.input_center is None else self.input_center.shape[1]
        )

    @property
    def radius(self):
        if self.input_map is None:
            smallest = self.min_scale
        else:
            smallest = 1.0 / self._inverse_scale_map_norm()
        return np.where(self.abstained, 0.0, self.c * self.gap * smallest)

    @property
    def proxy_radius(self):
        mean = self.geometric_mean_scale
        if self.input_map is not None:
            a = self.input_map
            stretch = np.abs(a) if a.ndim == 1 else np.linalg.svd(a, compute_uv=False)
            mean = mean / np.exp(np.mean(np.log(stretch)))
        return np.where(self.abstained, 0.0, self.c * self.gap * mean)

    def _inverse_scale_map_norm(self):
        """``||S_i^-1 A||`` per row, in the operator norm of ``norm``.

        Isotropic ``S``: ``||A|| / s_i``. Diagonal ``S`` and diagonal ``A``:
        ``max_j |a_j| / s_j`` in both norms. Otherwise the dense ``k x d``
        matrix per row: its largest singular value (l2) or largest column sum
        (l1).
        """
        a, scales = self.input_map, self.scales
        if scales.kind == "isotropic":  # ||A|| / s_i
            return operator_norm(a, self.norm) / scales.values
        if a.ndim == 1 and scales.kind != "rotated":
            s = np.broadcast_to(
                scales.values.reshape(len(self), -1), (len(self), self.n_features)
            )
            return (np.abs(a)[None] / s).max(axis=1)
        dense = np.diag(a) if a.ndim == 1 else a
        out = np.empty(len(self))
        for i in range(len(self)):
            m = scales.apply(i, dense.T, power=-1.0).T  # S_i^-1 A, (k, d)
            out[i] = (
                np.linalg.norm(m, 2) if self.norm == "l2" else np.abs(m).sum(0).max()
            )
        return out

    def scale_matrix(self, i):
        """The dense ``(n_features, n_features)`` scale ``S`` of row ``i``.

        For diagnostics: it costs ``O(n_features^2)`` memory.
        """
        i = int(_as_rows(i, len(self))[0])
        return self.scales.dense(i, self.n_features)

    def inverse_scale_apply(self, i, delta):
        """``S_i^-1 delta`` for ``delta`` of shape (..., n_features)."""
        return self.scales.apply(i, delta, power=-1.0)

    def contains(self, i, delta):
        """Whether ``center[i] + delta`` lies in row ``i``'s certified region.

        Parameters
        ----------
        i : int
            Row index.
        delta : array-like of shape (n_input_features,) or (m, n_input_features)
            Perturbation(s) of the input, in its units; any shape that
            flattens to whole rows of ``n_input_features``.

        Returns
        -------
        bool or ndarray of bool
            False wherever the row abstained (its region is empty).
        """
        i = int(_as_rows(i, len(self))[0])
        delta = np.asarray(delta, dtype=np.float64)
        single = delta.size == self.n_input_features
        delta = delta.reshape(-1, self.n_input_features)
        if self.input_map is not None:  # into the classifier's space
            a = self.input_map
            delta = delta * a if a.ndim == 1 else delta @ a.T
        ord_ = 2 if self.norm == "l2" else 1
        dist = np.linalg.norm(self.inverse_scale_apply(i, delta), ord=ord_, axis=1)
        inside = (~self.abstained[i]) & (dist <= self.c * self.gap[i])
        return bool(inside[0]) if single else inside

    # ------------------------------------------------------------ containers
    _row_fields = (
        "label",
        "abstained",
        "p_lower",
        "gap",
        "center",
        "scale",
        "basis",
        "scale_rest",
        "reduced",
        "class_index",
        "time",
        "n_draws",
        "input_center",
    )

    def _fields(self, rows=None):
        out = {}
        for name in self._row_fields:
            value = getattr(self, name)
            if value is not None and rows is not None:
                value = value[rows]
            out[name] = value
        return out

    def _meta(self):
        return {
            "noise": self.noise,
            "strategy": self.strategy,
            "smoothing": self.smoothing,
            "abstain_label": self.abstain_label,
            "input_map": self.input_map,
            "space": self.space,
        }

    def _replace(self, **changes):
        """A copy with ``changes`` to any fields, per row or not."""
        return Certificates(**{**self._meta(), **self._fields(), **changes})

    def __getitem__(self, idx):
        rows = _as_rows(idx, len(self))
        return Certificates(**self._meta(), **self._fields(rows))

    @classmethod
    def concatenate(cls, parts):
        """Join certificate sets of the same family, scale form and dimension.

        Parameters
        ----------
        parts : sequence of Certificates

        Returns
        -------
        Certificates
        """
        parts = list(parts)
        if not parts:
            raise ValueError("need at least one Certificates to concatenate")
        first = parts[0]
        for p in parts[1:]:
            if (p.noise, p.kind, p.n_features) != (
                first.noise,
                first.kind,
                first.n_features,
            ):
                raise ValueError(
                    "can only concatenate certificates of one noise family, "
                    "scale form and dimension"
                )
            if p.space != first.space or not _same_map(p.input_map, first.input_map):
                raise ValueError(
                    "can only concatenate certificates in the same units "
                    "(space and input_map)"
                )
        fields = {}
        for name in cls._row_fields:
            values = [getattr(p, name) for p in parts]
            fields[name] = None if values[0] is None else np.concatenate(values)
        # what every part shares, else '' (a mix of strategies or smoothings)
        meta = first._meta()
        for name in ("strategy", "smoothing"):
            if any(getattr(p, name) != meta[name] for p in parts):
                meta[name] = ""
        return cls(**meta, **fields)

    def to_frame(self):
        """A :class:`pandas.DataFrame` with one row per input (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(
            {
                "label": self.label,
                "abstained": self.abstained,
                "p_lower": self.p_lower,
                "gap": self.gap,
                "radius": self.radius,
                "proxy_radius": self.proxy_radius,
                "reduced": self.reduced,
                "time": self.time,
                "n_draws": self.n_draws,
                "strategy": self.strategy,
                "smoothing": self.smoothing,
            }
        )

    def __repr__(self):
        n = len(self)
        if n == 0:
            return f"Certificates(n=0, noise={self.noise!r})"
        return (
            f"Certificates(n={n}, noise={self.noise!r}, norm={self.norm!r}, "
            f"scale={self.kind!r}, strategy={self.strategy!r}, "
            f"abstained={int(self.abstained.sum())}, "
            f"reduced={int(self.reduced.sum())}, "
            f"mean_radius={self.radius.mean():.4g}, "
            f"mean_proxy_radius={self.proxy_radius.mean():.4g})"
        )
