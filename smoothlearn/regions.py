"""Certified regions: :class:`Certificates`, and the labels of abstentions.

Row ``i`` of a :class:`Certificates` certifies the region

    { center_i + delta : ||S_i^-1 delta|| <= c * gap_i }

in the noise family's norm (l2 for gaussian, l1 for uniform and laplace),
where ``c`` is the family's constant (see :mod:`smoothlearn.noise`). The
scales ``S_i`` are one :class:`~smoothlearn.scale.Scale` (``scales``), in one
compact form shared by all rows, whose arrays are also ``scale``, ``basis``
and ``scale_rest``:

* isotropic: ``scale`` has shape ``(n_samples,)`` and ``S_i = scale[i] * I``;
* diagonal: ``scale`` has shape ``(n_samples, n_features)`` and
  ``S_i = diag(scale[i])``;
* rotated: ``basis`` has shape ``(n_samples, n_features, k)`` with orthonormal
  columns ``U_i``, ``scale`` has shape ``(n_samples, k)`` and ``scale_rest``
  shape ``(n_samples,)``, and ``S_i = U_i diag(scale[i]) U_i^T +
  scale_rest[i] (I - U_i U_i^T)`` (``k = n_features`` is a full rotation);
  with ``scale_frame`` of shape ``(n_samples, n_features)`` that rotated
  scale ``R_i`` sits in a diagonal frame: ``S_i = F_i R_i F_i``,
  ``F_i = diag(scale_frame[i])`` (rank-k RANCER on ANCER's diagonal).

* with cuts: any form above with ``scale_cuts`` of shape ``(n_samples,
  n_features, q)``: row ``i``'s region has the covariance ``S_i^2 - C_i
  C_i^T`` (``C_i = scale_cuts[i]``, zero columns cut nothing): the memory's
  rank-one cuts (:meth:`smoothlearn.scale.Scale.cut`).

``gap`` and the scale always describe the region as finally certified, after
any reduction by the memory (a capped region in the same form, a ball as an
isotropic scale in it, a cut region with its cuts).

Certificates made through preprocessing ``y = A x + b`` (a scaler or PCA in a
pipeline, :func:`smoothlearn.pipeline.certify_estimator`) keep that region in
the classifier's space and ``A`` beside it (``input_map``): the region in the
units of the input is its preimage ``{x_i + delta : A delta in region_i - y_i}``,
and ``radius``, ``proxy_radius`` and ``contains`` speak of the preimage.
"""

import numbers

import numpy as np

from .noise import get_noise
from .scale import Scale, basis_defect, basis_tolerance, gram_defect_bound

__all__ = [
    "Certificates",
    "class_labels",
    "operator_norm",
    "resolve_abstain_label",
    "with_abstentions",
]


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


def resolve_abstain_label(abstain_label, classes):
    """The label marking an abstention among ``classes``.

    ``'auto'`` picks -1 (or one below the smallest class) for numeric classes
    and ``'abstain'`` for string classes; a given label must be of the
    classes' kind and not one of them.

    Raises
    ------
    TypeError
        A numeric label for string classes or the other way round (the
        predictions would mix kinds, which scikit-learn's metrics reject).
    ValueError
        A label that is one of the classes.
    """
    numeric = np.asarray(classes).dtype.kind in "biuf"
    if isinstance(abstain_label, str) and abstain_label == "auto":
        if numeric:
            return min(-1, classes.min() - 1) if -1 in classes else -1
        label = "abstain"
        while label in set(classes):
            label = f"<{label}>"
        return label
    given_numeric = isinstance(abstain_label, (numbers.Number, np.number)) and not (
        isinstance(abstain_label, (bool, np.bool_))
    )
    if given_numeric != numeric:
        kind = "numbers" if numeric else "strings"
        raise TypeError(
            f"abstain_label={abstain_label!r} does not fit classes that are {kind}: "
            "predictions would mix kinds, which scikit-learn's metrics reject. Use "
            f"abstain_label='auto' or a label of the classes' kind."
        )
    if abstain_label in set(classes.tolist()):
        raise ValueError(
            f"abstain_label={abstain_label!r} is one of the classes; abstentions "
            "would be indistinguishable from predictions of that class."
        )
    return abstain_label


def class_labels(classes, class_index, abstain_label):
    """``classes[class_index]``, with ``abstain_label`` where the index is -1."""
    abstained = class_index < 0
    labels = classes[np.where(abstained, 0, class_index)]
    return with_abstentions(labels, abstained, abstain_label)


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


def _rounding_error(a, b):
    """``a * b - fl(a * b)`` exactly (Dekker's two-product; NaN where a split
    overflows)."""
    with np.errstate(all="ignore"):
        product = a * b
        split = 134217729.0  # 2^27 + 1
        a_big, b_big = a * split, b * split
        a_high = a_big - (a_big - a)
        b_high = b_big - (b_big - b)
        a_low, b_low = a - a_high, b - b_high
        return (
            (a_high * b_high - product) + a_high * b_low + a_low * b_high
        ) + a_low * b_low


def _product_down(c, gap, smallest):
    """``c * gap * smallest`` rounded down: a proved lower bound of the exact
    product of the stored values (rounding to nearest put the radius one
    float step above it). Each product that rounded up (its exact error
    negative, or not known: overflow, near underflow) takes the result one
    float step towards 0; exact products stay exact."""
    gap = np.asarray(gap, dtype=np.float64)
    smallest = np.asarray(smallest, dtype=np.float64)
    first = np.float64(c) * gap
    first_error = _rounding_error(np.float64(c), gap)
    value = first * smallest
    second_error = _rounding_error(first, smallest)
    tiny = np.finfo(np.float64).tiny * 2.0**60  # Dekker's error exact above
    steps = np.zeros(np.shape(value), dtype=np.intp)
    for error, product in ((first_error, first), (second_error, value)):
        unknown = ~np.isfinite(error) | (np.abs(product) < tiny)
        steps = steps + ((error < 0) | (unknown & (product != 0)))
    for step in (1, 2):
        value = np.where(steps >= step, np.nextafter(value, 0.0), value)
    return value


def _as_centres(center, n):
    """``center`` as ``(n, n_features)``, or a ValueError saying what is wrong."""
    center = np.asarray(center)
    if n == 0:
        if center.ndim < 2 or center.shape[0] != 0:
            raise ValueError(
                "empty Certificates need center of shape (0, n_features); got "
                f"shape {center.shape}"
            )
        return center.reshape(0, int(np.prod(center.shape[1:])))
    if center.size == 0 or center.size % n:
        raise ValueError(
            f"center of shape {center.shape} does not hold one input per label ({n})"
        )
    return center.reshape(n, -1)


def _as_rows(idx, n):
    if isinstance(idx, numbers.Integral):
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range for {n} certificates")
        return np.array([idx % n])
    return np.arange(n)[idx]


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
    scale : Scale or ndarray of shape (n_samples,), (n_samples, n_features) \
            or (n_samples, k)
        The scale of each row: a :class:`~smoothlearn.scale.Scale`, or its
        values with ``basis`` and ``scale_rest`` (see the module docstring).
    noise : str
        Name of the noise family (``'gaussian'``, ``'uniform'``, ``'laplace'``).
    basis : ndarray of shape (n_samples, n_features, k), default=None
        Orthonormal columns of a rotated scale given by its values.
    scale_rest : ndarray of shape (n_samples,), default=None
        Isotropic scale on the orthogonal complement of ``basis``.
    scale_frame : ndarray of shape (n_samples, n_features), default=None
        The diagonal frame of a rotated scale given by its values.
    scale_cuts : ndarray of shape (n_samples, n_features, q), default=None
        Rank-one cuts of each row's region (covariance ``S^2 - C C^T``).
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
    space : {'input', 'model'}, default='input'
        The units of ``radius`` and ``proxy_radius``: the input's, or the
        model's (the space the smoothed classifier sees: asked for with
        ``space='model'``, or after a preprocessing step that is not a known
        affine map). ``'classifier'``, its earlier name, is read as
        ``'model'``.

    Attributes
    ----------
    scales : Scale
        Every row's scale ``S_i`` (float64). ``scale``, ``basis`` and
        ``scale_rest`` are its arrays (``values``, ``basis``, ``rest``).
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
        scale_frame=None,
        scale_cuts=None,
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
        self.center = _as_centres(center, n)
        if not isinstance(scale, Scale):
            scale = Scale(scale, basis, scale_rest, frame=scale_frame, cuts=scale_cuts)
        elif any(a is not None for a in (basis, scale_rest, scale_frame, scale_cuts)):
            raise TypeError("a Scale carries its own basis, scale_rest, frame and cuts")
        self.scales = scale.map(lambda a: np.asarray(a, dtype=np.float64), offset=False)
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
        self.space = "model" if space == "classifier" else space  # its old name
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
        self.scales.check(n, self.n_features)
        self._check_finite()
        if self.noise != "gaussian" and self.kind == "rotated":
            raise ValueError("l1 families support isotropic and diagonal scales only")
        if self.noise != "gaussian" and self.scales.has_cuts:
            raise ValueError("cuts are l2 regions' (gaussian); l1 regions have none")
        if self.kind == "rotated" and n:
            basis = self.scales.basis
            defect = basis_defect(basis)
            tolerance = basis_tolerance(self.n_features, basis.shape[2])
            if not np.all(defect <= tolerance):
                row = int(np.argmax(~(defect <= tolerance)))
                raise ValueError(
                    f"basis of row {row} is not orthonormal to float64 rounding "
                    f"(max |U^T U - I| = {defect[row]:.3g} > {tolerance:.3g}): "
                    "orthonormalise it in float64 (e.g. numpy.linalg.qr) and "
                    "shrink its scales so that the region stays inside the one "
                    "certified."
                )
        if self.space not in ("input", "model"):
            raise ValueError(f"space must be 'input' or 'model'; got {self.space!r}")
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

    def _check_finite(self):
        """Refuse values no region can have: a NaN or infinite centre, gap or
        scale, a negative gap or scale (``S = -I`` would report radius -1 and
        a region the memory cannot compare). Abstained rows carry gap 0 and
        may carry scale 0; both are allowed everywhere (radius 0)."""
        if not np.all(np.isfinite(self.center)):
            row = int(np.argmax(~np.all(np.isfinite(self.center), axis=1)))
            raise ValueError(f"center of row {row} is not finite (NaN or inf)")
        if not np.all((self.gap >= 0) & np.isfinite(self.gap)):
            row = int(np.argmax(~((self.gap >= 0) & np.isfinite(self.gap))))
            raise ValueError(
                f"gap must be finite and >= 0 (0 where abstained); row {row} "
                f"has {self.gap[row]!r}"
            )
        scales = self.scales
        for name, values in (
            ("scale", scales.values),
            ("scale_rest", scales.rest),
            ("scale_frame", scales.frame),
        ):
            if values is None:
                continue
            bad = ~((values >= 0) & np.isfinite(values))
            if bad.any():
                row = int(np.argmax(bad.reshape(len(bad), -1).any(axis=1)))
                raise ValueError(
                    f"{name} must be finite and >= 0; row {row} has "
                    f"{np.asarray(values[row]).ravel()[bad[row].ravel()][0]!r}"
                )
        if scales.cuts is not None and not np.all(np.isfinite(scales.cuts)):
            raise ValueError("scale_cuts must be finite")

    def __setstate__(self, state):
        # certificates pickled by an earlier version hold the scale's arrays apart
        if "scales" not in state:
            state["scales"] = Scale(
                state.pop("scale"),
                state.pop("basis", None),
                state.pop("scale_rest", None),
            )
        if state.get("space") == "classifier":  # the model's space's earlier name
            state["space"] = "model"
        self.__dict__.update(state)

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
    def scale(self):
        """The scales' values: ``(n_samples,)``, ``(n_samples, n_features)`` or
        ``(n_samples, k)`` (``scales.values``)."""
        return self.scales.values

    @property
    def basis(self):
        """A rotated scale's orthonormal columns, else None (``scales.basis``)."""
        return self.scales.basis

    @property
    def scale_rest(self):
        """A rotated scale's scale on the complement of ``basis``, else None."""
        return self.scales.rest

    @property
    def scale_frame(self):
        """A rotated scale's diagonal frame ``F`` (``S = F R F``), else None."""
        return self.scales.frame

    @property
    def scale_cuts(self):
        """The regions' rank-one cuts ``(n_samples, n_features, q)``, else None."""
        return self.scales.cuts

    @property
    def kind(self):
        """``'isotropic'``, ``'diagonal'`` or ``'rotated'`` (with or without
        cuts: :attr:`scale_cuts`)."""
        return self.scales.kind

    # ------------------------------------------------------------ scale facts
    @property
    def min_scale(self):
        """Smallest singular value of each row's scale, shape (n_samples,)
        (a lower bound for a rotated scale in a diagonal frame)."""
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
        else:  # 1 / an upper bound of ||S^-1 A||, rounded down
            smallest = np.nextafter(1.0 / self._inverse_scale_map_norm(), 0.0)
        return np.where(self.abstained, 0.0, _product_down(self.c, self.gap, smallest))

    @property
    def proxy_radius(self):
        mean = self.geometric_mean_scale
        if self.input_map is not None:
            a = self.input_map
            stretch = np.abs(a) if a.ndim == 1 else np.linalg.svd(a, compute_uv=False)
            mean = mean / np.exp(np.mean(np.log(stretch)))
        return np.where(self.abstained, 0.0, self.c * self.gap * mean)

    def _inverse_scale_map_norm(self):
        """An upper bound of ``||S_i^-1 A||`` per row, in the operator norm of
        ``norm``: the computed value and an allowance for its rounding.

        Isotropic ``S``: ``||A|| / s_i``. Diagonal ``S`` and diagonal ``A``:
        ``max_j |a_j| / s_j`` in both norms (one rounding each). Otherwise the
        dense ``k x d`` matrix per row: its largest singular value (l2) or
        largest column sum (l1), plus what rounding may have taken off it:
        each column of ``S^-1 A`` within ``32 (k + d) eps ||a_j|| / s_min``
        of the exact one (the scale's closed form applied in float64), and,
        for a basis off orthonormal, the closed form's departure from the
        stored form, ``4 |U^T U - I| cond(S) / s_min`` per unit of ``||A||``;
        the l1 norm's allowance goes through the l2 one (``||E||_1 <= sqrt(k)
        ||E||_2``, ``||A||_2 <= sqrt(d) ||A||_1``). A row with cuts takes
        ``||A|| / s_min`` with its proved smallest semi-axis instead: looser,
        and proved without a rounding analysis of the cut form's inverse.
        """
        eps = np.finfo(np.float64).eps
        a, scales = self.input_map, self.scales
        cut = scales.has_cuts
        k, d = a.shape[0], a.shape[-1]
        if scales.kind == "isotropic" and not cut:  # ||A|| / s_i
            rounding = 2 * eps if a.ndim == 1 else 8 * (k + d) * eps
            value = operator_norm(a, self.norm) / scales.values
            return value * (1.0 + rounding + 2 * eps)
        if a.ndim == 1 and scales.kind != "rotated" and not cut:
            s = np.broadcast_to(
                scales.values.reshape(len(self), -1), (len(self), self.n_features)
            )
            return (np.abs(a)[None] / s).max(axis=1) * (1.0 + 2 * eps)
        dense = np.diag(a) if a.ndim == 1 else a
        out = np.empty(len(self))
        for i in range(len(self)):
            m = scales.apply(i, dense.T, power=-1.0).T  # S_i^-1 A, (k, d)
            out[i] = (
                np.linalg.norm(m, 2) if self.norm == "l2" else np.abs(m).sum(0).max()
            )
        smallest = np.asarray(scales.smallest(), dtype=np.float64)
        largest = np.asarray(scales.largest(), dtype=np.float64)
        defect = np.zeros(len(self))
        if scales.kind == "rotated":  # ||U^T U - I||, its rounding included
            defect = gram_defect_bound(scales.basis)
        norm_a = float(np.linalg.norm(dense, 2)) * (1.0 + 8 * (k + d) * eps)
        relative = 32 * (k + d) * eps + 4 * defect * largest / smallest
        allowance = relative * norm_a / smallest
        if self.norm == "l1":
            allowance = allowance * np.sqrt(k * d)
        bound = out * (1.0 + 8 * (k + d) * eps) + allowance
        if cut:  # ||S^-1 A|| <= ||A|| / s_min (l1: sqrt(k) times that)
            rows = np.array([scales.row_cuts(i) is not None for i in range(len(self))])
            whole = norm_a / smallest * (np.sqrt(k) if self.norm == "l1" else 1.0)
            bound = np.where(rows, whole, bound)
        return bound * (1.0 + 2 * eps)

    def scale_matrix(self, i):
        """The dense ``(n_features, n_features)`` scale ``S`` of row ``i``.

        For diagnostics: it costs ``O(n_features^2)`` memory. A row with cuts
        gives the symmetric square root of its covariance ``S^2 - C C^T``
        (the region is ``{center + c gap S u : ||u|| <= 1}`` for every row).
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
        "reduced",
        "class_index",
        "time",
        "n_draws",
        "input_center",
    )

    def _fields(self, rows=None):
        out = {"scale": self.scales if rows is None else self.scales[rows]}
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
        fields = {"scale": Scale.concatenate(p.scales for p in parts)}
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
