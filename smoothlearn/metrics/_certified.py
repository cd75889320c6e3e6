"""Metrics on certificates: certified accuracy, average (proxy) radius, ARI, supersets.

Every function takes ``(y_true, certificates)``; ``certificates`` is a
:class:`~smoothlearn.regions.Certificates` or anything with the arrays
``label``, ``abstained``, ``radius`` and ``proxy_radius`` (a log read back
with :func:`~smoothlearn.metrics.read_certificates_tsv`, say). An abstention
counts as wrong at every radius.
"""

from numbers import Real

import numpy as np
import scipy.linalg

from ..utils._sklearn_compat import Interval, validate_params

__all__ = [
    "average_certified_radius",
    "average_radius_improvement",
    "certified_accuracy",
    "certified_accuracy_curve",
    "clean_accuracy",
    "superset_share",
]


def _arrays(y_true, certificates, proxy=False):
    """Validated ``(correct, radius)`` arrays of one certificate set."""
    for name in ("label", "abstained", "radius", "proxy_radius"):
        if not hasattr(certificates, name):
            raise TypeError(
                "certificates must have label, abstained, radius and proxy_radius "
                "arrays (a smoothlearn Certificates); got "
                f"{type(certificates).__name__}."
            )
    y_true = np.asarray(y_true)
    label = np.asarray(certificates.label)
    if y_true.ndim != 1 or y_true.shape != label.shape:
        raise ValueError(
            "y_true and certificates must have the same length; got "
            f"{y_true.size} labels and {len(label)} certificates."
        )
    abstained = np.asarray(certificates.abstained, dtype=bool)
    correct = (~abstained) & (label.astype(object) == y_true.astype(object))
    radius = np.asarray(
        certificates.proxy_radius if proxy else certificates.radius, float
    )
    return correct, radius


def _check_radii(radius):
    radii = np.asarray(radius, dtype=np.float64)
    if not np.all(np.isfinite(radii)) or np.any(radii < 0):
        raise ValueError(f"radius must be finite and non-negative; got {radius!r}.")
    return radii


@validate_params(
    {
        "y_true": ["array-like"],
        "certificates": "no_validation",
        "radius": [Interval(Real, 0, None, closed="left"), "array-like"],
        "proxy": ["boolean"],
    },
    prefer_skip_nested_validation=True,
)
def certified_accuracy(y_true, certificates, radius=0.0, *, proxy=False):
    """Share of inputs certified correct at a radius.

    An input counts when its smoothed label is the true label and its
    certified radius (or proxy radius) is at least ``radius``: Cohen et al.'s
    certified accuracy, or UCAN's accuracy at an ALM when ``proxy=True``.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    certificates : Certificates
    radius : float or array-like of floats, default=0.0
        Radius (or radii) at which to count.
    proxy : bool, default=False
        Count by proxy radius (n-th root of the region's volume, ALM) instead
        of the inscribed radius.

    Returns
    -------
    float or ndarray
        One accuracy per radius (a float for a scalar radius).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> cert = SimpleNamespace(label=[0, 1, 1], abstained=[False, False, True],
    ...                        radius=[0.3, 0.9, 0.0], proxy_radius=[0.5, 1.2, 0.0])
    >>> certified_accuracy([0, 1, 1], cert, [0.0, 0.5])
    array([0.66666667, 0.33333333])
    """
    radii = _check_radii(radius)
    correct, r = _arrays(y_true, certificates, proxy)
    if len(correct) == 0:
        raise ValueError("need at least one certificate")
    acc = (correct[:, None] & (r[:, None] >= radii.reshape(1, -1))).mean(axis=0)
    return float(acc[0]) if radii.ndim == 0 else acc


def clean_accuracy(y_true, certificates):
    """Share of inputs on which the smoothed classifier is correct (radius 0).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    certificates : Certificates

    Returns
    -------
    float
    """
    return certified_accuracy(y_true, certificates, 0.0)


@validate_params(
    {
        "y_true": ["array-like"],
        "certificates": "no_validation",
        "proxy": ["boolean"],
        "radii": ["array-like", None],
    },
    prefer_skip_nested_validation=True,
)
def certified_accuracy_curve(y_true, certificates, *, proxy=False, radii=None):
    """Certified accuracy as a function of radius.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    certificates : Certificates
    proxy : bool, default=False
        Against proxy radius instead of radius.
    radii : array-like, default=None
        Where to evaluate; by default 0 and every distinct radius of a correct
        input, so the step curve is exact.

    Returns
    -------
    radii : ndarray of shape (n_radii,)
    accuracy : ndarray of shape (n_radii,)
    """
    correct, r = _arrays(y_true, certificates, proxy)
    if radii is None:
        radii = np.unique(np.concatenate([[0.0], r[correct]]))
    radii = _check_radii(radii).reshape(-1)
    return radii, certified_accuracy(y_true, certificates, radii, proxy=proxy)


@validate_params(
    {"y_true": ["array-like"], "certificates": "no_validation", "proxy": ["boolean"]},
    prefer_skip_nested_validation=True,
)
def average_certified_radius(y_true, certificates, *, proxy=False):
    """ACR = E[R 1(correct)] (Zhai et al., 2020); AC R-tilde with ``proxy=True``.

    With ``proxy=True`` this is the average proxy radius of ANCER and equals
    UCAN's average ALM.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    certificates : Certificates
    proxy : bool, default=False

    Returns
    -------
    float

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> cert = SimpleNamespace(label=[0, 1, 1], abstained=[False, False, True],
    ...                        radius=[0.3, 0.9, 0.0], proxy_radius=[0.5, 1.2, 0.0])
    >>> round(average_certified_radius([0, 0, 1], cert), 6)
    0.1
    """
    correct, r = _arrays(y_true, certificates, proxy)
    return float(np.mean(np.where(correct, r, 0.0)))


@validate_params(
    {
        "y_true": ["array-like"],
        "certificates": "no_validation",
        "baseline": "no_validation",
        "proxy": ["boolean"],
    },
    prefer_skip_nested_validation=True,
)
def average_radius_improvement(y_true, certificates, baseline, *, proxy=False):
    """ARI (or AR-tilde-I with ``proxy=True``) of RANCER's section 4.1.

    ``E[R_x 1(g(x) = y) - R'_x 1(g'(x) = y)]``: the average certified radius of
    ``certificates`` minus that of ``baseline`` on the same inputs. Positive
    means ``certificates`` certify larger radii on average.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    certificates, baseline : Certificates
        Two certificate sets of the same inputs.
    proxy : bool, default=False

    Returns
    -------
    float
    """
    correct, r = _arrays(y_true, certificates, proxy)
    correct_b, r_b = _arrays(y_true, baseline, proxy)
    return float(np.mean(np.where(correct, r, 0.0) - np.where(correct_b, r_b, 0.0)))


def _region_transform(certificates, i):
    """``T`` with region i = {T u : ||u|| <= 1}: ``c * gap * S`` (dense or diagonal)."""
    factor = certificates.c * certificates.gap[i]
    return certificates.scales.diagonal_or_dense(
        i, certificates.n_features, factor=factor
    )


def _contains_region(outer, inner, i):
    """Whether row i's region of ``outer`` contains that of ``inner`` (same centre).

    Both regions are ``{T u : ||u|| <= 1}``. For diagonal T (l2 or l1), ``T_in``'s
    region lies in ``T_out``'s iff ``T_in,j <= T_out,j`` for every axis (for l1,
    every vertex of the inner cross-polytope lies in the outer one). For l2
    ellipsoids in general, iff ``T_in T_in^T <= T_out T_out^T`` in Loewner
    order, i.e. the largest generalised eigenvalue is at most 1.
    """
    t_out, t_in = _region_transform(outer, i), _region_transform(inner, i)
    tolerance = 1e-9
    if t_out.ndim == 1 and t_in.ndim == 1:
        return bool(np.all(t_in <= t_out * (1 + tolerance)))
    t_out = np.diag(t_out) if t_out.ndim == 1 else t_out
    t_in = np.diag(t_in) if t_in.ndim == 1 else t_in
    top = scipy.linalg.eigh(t_in @ t_in.T, t_out @ t_out.T, eigvals_only=True)[-1]
    return bool(top <= 1 + tolerance)


def superset_share(certificates, other):
    """Share of inputs on which ``certificates`` is a superior certificate to ``other``.

    ANCER's Definition 1: on input ``x`` region A is superior to region B when
    both predict the same class and ``A ⊇ B`` (regions share the centre ``x``).
    Decided exactly: per axis for diagonal regions (l2 ellipsoids and l1
    generalized cross-polytopes, ANCER section 5), in Loewner order for rotated
    ellipsoids. An empty region (abstention) is contained in any region; a
    non-empty one is never contained in an empty one.

    Parameters
    ----------
    certificates, other : Certificates
        Two certificate sets of the same inputs, with the same norm.

    Returns
    -------
    float
    """
    if len(certificates) != len(other):
        raise ValueError("both certificate sets must certify the same inputs")
    if certificates.norm != other.norm:
        raise ValueError(
            f"cannot compare {certificates.norm} regions with {other.norm} regions"
        )
    if not np.allclose(certificates.center, other.center):
        raise ValueError("both certificate sets must certify the same inputs")
    superior = np.zeros(len(other), dtype=bool)
    for i in range(len(other)):
        if other.abstained[i]:
            superior[i] = True
        elif certificates.abstained[i] or certificates.label[i] != other.label[i]:
            superior[i] = False
        else:
            superior[i] = _contains_region(certificates, other, i)
    return float(superior.mean()) if len(superior) else 0.0
