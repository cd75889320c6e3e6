"""Certified accuracy with a confidence interval over the test set, and in l-inf.

A test set is a sample of the data: the certified accuracy measured on it is
an estimate of the accuracy on the data's distribution. These functions put a
confidence interval around it, and read l2 and l1 certificates in the l-inf
norm that many papers report.
"""

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from ..bounds import clopper_pearson_lower, clopper_pearson_upper
from ..utils._sklearn_compat import Interval, StrOptions, validate_params
from ._certified import _arrays, _check_radii, certified_accuracy

__all__ = [
    "CertifiedAccuracyInterval",
    "certified_accuracy_interval",
    "linf_certified_accuracy",
    "linf_certified_radius",
]


@dataclass(frozen=True)
class CertifiedAccuracyInterval:
    """Certified accuracy and its confidence interval (a result, as scipy's).

    Attributes
    ----------
    estimate : float or ndarray
        The certified accuracy on the test set (one per radius).
    low, high : float or ndarray
        The interval's ends.
    radius : float or ndarray
    confidence : float
    method : {'clopper-pearson', 'bootstrap'}
    n_samples : int
        Inputs in the test set.
    """

    estimate: object
    low: object
    high: object
    radius: object
    confidence: float
    method: str
    n_samples: int

    def __repr__(self):
        def show(a):
            return np.array2string(np.asarray(a), precision=4, separator=", ")

        return (
            f"CertifiedAccuracyInterval(estimate={show(self.estimate)}, "
            f"low={show(self.low)}, high={show(self.high)}, "
            f"radius={show(self.radius)}, confidence={self.confidence:g}, "
            f"method={self.method!r}, n_samples={self.n_samples})"
        )


@validate_params(
    {
        "y_true": ["array-like"],
        "certificates": "no_validation",
        "radius": [Interval(Real, 0, None, closed="left"), "array-like"],
        "confidence": [Interval(Real, 0, 1, closed="neither")],
        "method": [StrOptions({"clopper-pearson", "bootstrap"})],
        "n_resamples": [Interval(Integral, 1, None, closed="left")],
        "proxy": ["boolean"],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def certified_accuracy_interval(
    y_true,
    certificates,
    radius=0.0,
    *,
    confidence=0.95,
    method="clopper-pearson",
    n_resamples=2000,
    proxy=False,
    random_state=None,
):
    """Certified accuracy at a radius with a confidence interval over the test set.

    The test inputs are taken as independent draws from the data's
    distribution, so the number certified correct at ``radius`` is binomial in
    the number of inputs. ``'clopper-pearson'`` gives the exact two-sided
    binomial interval (each tail ``(1 - confidence) / 2``; it covers the
    distribution's certified accuracy with probability at least
    ``confidence``, conservatively); ``'bootstrap'`` the percentile interval
    of ``n_resamples`` resamples of the inputs.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    certificates : Certificates
    radius : float or array-like of floats, default=0.0
        Radius (or radii) at which to count; a separate interval per radius.
    confidence : float, default=0.95
        Two-sided confidence level in (0, 1).
    method : {'clopper-pearson', 'bootstrap'}, default='clopper-pearson'
    n_resamples : int, default=2000
        Bootstrap resamples (``method='bootstrap'`` only).
    proxy : bool, default=False
        Count by proxy radius instead of the inscribed radius.
    random_state : int, RandomState instance or None, default=None
        Resampling seed (``method='bootstrap'`` only).

    Returns
    -------
    CertifiedAccuracyInterval
        ``estimate`` (what :func:`certified_accuracy` returns), ``low`` and
        ``high``: floats for a scalar radius, arrays for several.

    Notes
    -----
    The interval accounts for the sampling of the test set only. Each
    certificate itself holds with probability at least ``1 - alpha`` (the
    estimator's ``alpha``) over its own noise draws; a statement about both
    holds, by a union bound, with probability at least ``confidence - alpha``
    per certificate counted.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> cert = SimpleNamespace(label=[0] * 40, abstained=[False] * 40,
    ...                        radius=[0.6] * 30 + [0.1] * 10, proxy_radius=[0.6] * 40)
    >>> result = certified_accuracy_interval([0] * 40, cert, 0.5)
    >>> result.estimate, round(result.low, 4), round(result.high, 4)
    (0.75, 0.588, 0.8731)
    """
    radii = _check_radii(radius)
    correct, r = _arrays(y_true, certificates, proxy)
    n = len(correct)
    if n == 0:
        raise ValueError("need at least one certificate")
    estimate = np.atleast_1d(
        certified_accuracy(y_true, certificates, radii, proxy=proxy)
    )
    tail = (1.0 - confidence) / 2.0
    if method == "clopper-pearson":
        k = np.round(estimate * n)
        low = clopper_pearson_lower(k, n, tail)
        high = clopper_pearson_upper(k, n, tail)
    else:
        rng = np.random.default_rng(
            random_state
            if not isinstance(random_state, np.random.RandomState)
            else random_state.randint(2**31 - 1)
        )
        hits = correct[:, None] & (r[:, None] >= radii.reshape(1, -1))
        draws = rng.integers(0, n, size=(n_resamples, n))
        resampled = np.stack([hits[d].mean(axis=0) for d in draws])
        low, high = np.quantile(resampled, [tail, 1.0 - tail], axis=0)
    scalar = radii.ndim == 0

    def out(a):
        a = np.asarray(a, dtype=np.float64).reshape(-1)
        return float(a[0]) if scalar else a

    return CertifiedAccuracyInterval(
        estimate=out(estimate),
        low=out(low),
        high=out(high),
        radius=float(radii) if scalar else radii,
        confidence=float(confidence),
        method=method,
        n_samples=n,
    )


def linf_certified_radius(certificates):
    """The l-inf radius each certificate implies: the largest l-inf ball inside.

    A certificate's ``radius`` is the largest ball of its own norm inside
    its region (the inscribed radius, also of anisotropic regions, so this
    holds for every strategy). With ``d`` features, ``||delta||_2 <=
    sqrt(d) ||delta||_inf`` and ``||delta||_1 <= d ||delta||_inf``, so the l2
    ball of radius ``r`` contains the l-inf ball of radius ``r / sqrt(d)``
    and the l1 ball of radius ``r`` the l-inf ball of radius ``r / d``. Both
    are the largest such balls (the cube's corner ``(t, ..., t)`` touches the
    sphere). ``d`` is the input's features (``n_input_features``: the units of
    ``radius``).

    Parameters
    ----------
    certificates : Certificates

    Returns
    -------
    ndarray of shape (n_samples,)
        0 where abstained.

    Examples
    --------
    >>> import numpy as np
    >>> from smoothlearn import Certificates
    >>> cert = Certificates([0], [False], [0.9], [1.0], np.zeros((1, 4)),
    ...                     np.array([0.5]), "gaussian")
    >>> linf_certified_radius(cert)
    array([0.25])
    """
    d = certificates.n_input_features
    radius = np.asarray(certificates.radius, dtype=np.float64)
    if certificates.norm == "l2":
        out = radius / np.sqrt(d)
    else:  # l1 (uniform, laplace)
        out = radius / d
    # sqrt and the division each round by at most half an ulp: shrinking by
    # 4 machine epsilons (the product's own rounding included) keeps the
    # result below r / sqrt(d) (r / d) computed exactly, so it stays sound
    out = out * (1.0 - 4.0 * np.finfo(np.float64).eps)
    return np.where(np.asarray(certificates.abstained, dtype=bool), 0.0, out)


@validate_params(
    {
        "y_true": ["array-like"],
        "certificates": "no_validation",
        "radius": [Interval(Real, 0, None, closed="left"), "array-like"],
    },
    prefer_skip_nested_validation=True,
)
def linf_certified_accuracy(y_true, certificates, radius=0.0):
    """Certified accuracy at an l-inf radius, implied by l2 or l1 certificates.

    An input counts when its smoothed label is right and the l-inf ball of
    ``radius`` lies inside its region by :func:`linf_certified_radius`
    (``r / sqrt(d)`` for l2 certificates, ``r / d`` for l1): the figure
    papers report beside l2 results (an l2 certificate of 0.5 on 784 pixels
    covers l-inf 0.5 / 28 = 0.018, about 4.5/255).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    certificates : Certificates
    radius : float or array-like of floats, default=0.0
        l-inf radius (or radii), in the input's units.

    Returns
    -------
    float or ndarray
    """
    radii = _check_radii(radius)
    correct, _ = _arrays(y_true, certificates)
    if len(correct) == 0:
        raise ValueError("need at least one certificate")
    r = linf_certified_radius(certificates)
    acc = (correct[:, None] & (r[:, None] >= radii.reshape(1, -1))).mean(axis=0)
    return float(acc[0]) if radii.ndim == 0 else acc
