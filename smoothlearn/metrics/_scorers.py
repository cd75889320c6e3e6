"""Scorers for model selection: ``scoring=`` in GridSearchCV and cross_validate.

A scorer certifies ``X`` with the estimator of the current fold through
:func:`smoothlearn.pipeline.certify_estimator` (a smoothed classifier, a
pipeline ending in one, a fitted search over either; radii in the units of
``X`` behind known affine steps, or with ``space='model'`` in the units the
smoothed classifier sees) and applies one metric to the certificates.
The scorers are scikit-learn scorers (``_BaseScorer``): in a multimetric
``scoring`` dict scikit-learn hands every scorer the response of one call per
(estimator, X), so three certificate scorers cost one certification. Nothing
is kept between calls, so nothing leaks across folds. An estimator that ends
in no smoothed classifier raises a TypeError naming it.
"""

import warnings
from numbers import Real

from sklearn.base import BaseEstimator

# scikit-learn's scorer base class: the one way for scorers of a scoring dict
# to share a response (its multimetric scorer caches what ``_score`` asks its
# method_caller for, per estimator and X)
from sklearn.metrics._scorer import _BaseScorer

from ..pipeline import SPACES, certify_estimator
from ..utils._sklearn_compat import Interval, StrOptions, validate_params
from ._certified import average_certified_radius, certified_accuracy

__all__ = [
    "CertificateMetricScorer",
    "CertificateScorer",
    "SequentialCertifiedAccuracy",
    "acr_scorer",
    "certified_accuracy_scorer",
    "get_scorer",
    "get_scorer_names",
    "make_certificate_scorer",
]


class _Certifying(BaseEstimator):
    """``estimator`` seen through :func:`certify_estimator`: its ``certify``
    (input space) and ``certify_model`` (model space) are the responses
    scikit-learn's scorers ask for; a scoring dict caches each by its name,
    so scorers of one space share one certification and never another's."""

    def __init__(self, estimator):
        self.estimator = estimator

    def certify(self, X):
        return certify_estimator(self.estimator, X)

    def certify_model(self, X):
        return certify_estimator(self.estimator, X, space="model")


def _check_space(space):
    if not (isinstance(space, str) and space in SPACES):
        raise ValueError(f"space must be 'input' or 'model'; got {space!r}.")
    return space


class CertificateMetricScorer(_BaseScorer):
    """A scorer of a metric of certificates (made by :func:`make_certificate_scorer`).

    ``scorer(estimator, X, y)`` is ``metric(y, certify_estimator(estimator, X),
    **kwargs)``; in a scoring dict every such scorer shares one certification.

    Parameters
    ----------
    metric : callable
        ``metric(y_true, certificates, **kwargs) -> float``, greater is better.
    kwargs : dict
        Passed to ``metric``.
    space : {'input', 'model'}, default='input'
        The certificates' units (:func:`certify_estimator`).
    """

    def __init__(self, metric, kwargs, space="input"):
        # scikit-learn's multimetric scorer counts each scorer's response
        # method on the estimator to decide whether to cache: 'predict' is
        # one every classifier and pipeline has; the certificates themselves
        # are cached under 'certify' or 'certify_model' (_score)
        super().__init__(metric, sign=1, kwargs=kwargs, response_method="predict")
        self.space = _check_space(space)

    def _score(self, method_caller, estimator, X, y_true, **kwargs):
        method = "certify" if self.space == "input" else "certify_model"
        certificates = method_caller(_Certifying(estimator), method, X)
        return self._score_func(y_true, certificates, **{**self._kwargs, **kwargs})

    def __repr__(self):
        kwargs = "".join(f", {k}={v!r}" for k, v in self._kwargs.items())
        space = "" if self.space == "input" else f", space={self.space!r}"
        return f"make_certificate_scorer({self._score_func.__name__}{kwargs}{space})"


def make_certificate_scorer(metric, *, space="input", **kwargs):
    """A scikit-learn scorer of a metric of certificates.

    ``scorer(estimator, X, y)`` is ``metric(y, certify_estimator(estimator,
    X, space=space), **kwargs)``: ``estimator`` may be a smoothed classifier, a pipeline
    ending in one or a fitted search (:func:`smoothlearn.pipeline.certify_estimator`).
    Scorers made here share one certification per (estimator, X, space) when
    they stand together in a ``scoring`` dict.

    Parameters
    ----------
    metric : callable
        ``metric(y_true, certificates, **kwargs) -> float``, greater is better.
    space : {'input', 'model'}, default='input'
        The certificates' units: ``X``'s, or the space the smoothed
        classifier sees after the pipeline's steps (:func:`certify_estimator`).
    **kwargs
        Passed to ``metric``.

    Returns
    -------
    scorer : callable
        A scikit-learn scorer.

    Examples
    --------
    >>> from smoothlearn.metrics import certified_accuracy
    >>> make_certificate_scorer(certified_accuracy, radius=0.5)
    make_certificate_scorer(certified_accuracy, radius=0.5)
    """
    return CertificateMetricScorer(metric, kwargs, space=space)


def CertificateScorer(metric, **kwargs):  # noqa: N802 (the old class's name)
    """Deprecated: use :func:`make_certificate_scorer`.

    The old scorer class was a plain callable, which scikit-learn's
    multimetric scoring could not share a certification between.
    """
    warnings.warn(
        "CertificateScorer is deprecated and will be removed in 0.3; use "
        "make_certificate_scorer, whose scorers share one certification in a "
        "scoring dict.",
        FutureWarning,
        stacklevel=2,
    )
    return make_certificate_scorer(metric, **kwargs)


class SequentialCertifiedAccuracy:
    """Scorer of certified accuracy at a radius, decided sequentially.

    ``scorer(estimator, X, y)`` is ``certified_accuracy(y,
    certify_estimator(estimator, X, radius=radius), radius)``: each input
    spends only the draws that deciding
    "certified at ``radius``" needs (see ``SmoothedClassifier.certify``).
    Made by :func:`certified_accuracy_scorer`; a plain callable, so it works
    wherever scikit-learn takes ``scoring=``, alone or in a dict (where it
    certifies apart from the dict's other certificate scorers, which share one
    full certification).

    Parameters
    ----------
    radius : float
    space : {'input', 'model'}, default='input'
        The units of ``radius`` and the certificates (:func:`certify_estimator`).
    """

    def __init__(self, radius, space="input"):
        self.radius = radius
        self.space = _check_space(space)

    def __call__(self, estimator, X, y_true):
        certificates = certify_estimator(
            estimator, X, radius=self.radius, space=self.space
        )
        return certified_accuracy(y_true, certificates, self.radius)

    def __repr__(self):
        space = "" if self.space == "input" else f", space={self.space!r}"
        return f"certified_accuracy_scorer(radius={self.radius!r}{space})"


@validate_params(
    {
        "radius": [Interval(Real, 0, None, closed="left")],
        "proxy": ["boolean"],
        "sequential": ["boolean"],
        "space": [StrOptions(set(SPACES))],
    },
    prefer_skip_nested_validation=True,
)
def certified_accuracy_scorer(
    radius=0.0, *, proxy=False, sequential=True, space="input"
):
    """Scorer of certified accuracy at ``radius`` (by proxy radius if ``proxy``).

    Parameters
    ----------
    radius : float, default=0.0
    proxy : bool, default=False
        Count by proxy radius instead of the inscribed radius; such a scorer
        certifies in full (the sequential decision is on the inscribed radius).
    sequential : bool, default=True
        Decide "certified at ``radius``" sequentially,
        ``estimator.certify(X, radius=radius)``: on digits at ``radius=0.5``
        about a tenth of the draws of a full certification, with the same
        guarantee (:class:`SequentialCertifiedAccuracy`). False certifies in
        full and thresholds, sharing that certification with the other
        certificate scorers of a scoring dict.
    space : {'input', 'model'}, default='input'
        The units of ``radius``: those of ``X``, or those the smoothed
        classifier sees after the pipeline's steps (standardised units behind
        a ``StandardScaler``; :func:`~smoothlearn.pipeline.certify_estimator`).

    Returns
    -------
    scorer : callable

    Examples
    --------
    >>> certified_accuracy_scorer(radius=0.5)
    certified_accuracy_scorer(radius=0.5)
    >>> certified_accuracy_scorer(radius=0.5, sequential=False)
    make_certificate_scorer(certified_accuracy, radius=0.5, proxy=False)
    """
    if sequential and not proxy:
        return SequentialCertifiedAccuracy(float(radius), space=space)
    return make_certificate_scorer(
        certified_accuracy, space=space, radius=radius, proxy=proxy
    )


@validate_params(
    {"proxy": ["boolean"], "space": [StrOptions(set(SPACES))]},
    prefer_skip_nested_validation=True,
)
def acr_scorer(*, proxy=False, space="input"):
    """Scorer of the average certified radius (ACR; AC R-tilde if ``proxy``).

    Parameters
    ----------
    proxy : bool, default=False
    space : {'input', 'model'}, default='input'
        The units of the radii (:func:`~smoothlearn.pipeline.certify_estimator`).

    Returns
    -------
    scorer : callable
    """
    return make_certificate_scorer(average_certified_radius, space=space, proxy=proxy)


_REGISTRY = {
    "certified_accuracy": lambda **kw: certified_accuracy_scorer(**kw),
    "certified_accuracy_proxy": lambda **kw: certified_accuracy_scorer(
        proxy=True, **kw
    ),
    "acr": lambda **kw: acr_scorer(**kw),
    "acr_proxy": lambda **kw: acr_scorer(proxy=True, **kw),
}


def get_scorer_names():
    """Names accepted by :func:`get_scorer`.

    Examples
    --------
    >>> get_scorer_names()
    ['acr', 'acr_proxy', 'certified_accuracy', 'certified_accuracy_proxy']
    """
    return sorted(_REGISTRY)


def get_scorer(name, **kwargs):
    """A certificate scorer by name, with its keyword arguments.

    scikit-learn's ``scoring="..."`` strings name its own scorers only; pass
    these as objects, e.g. ``scoring={"acr": get_scorer("acr"), "ca@0.5":
    get_scorer("certified_accuracy", radius=0.5)}``.

    Parameters
    ----------
    name : str
        One of :func:`get_scorer_names`.
    **kwargs
        Passed to the scorer's factory (``radius`` for certified accuracy).

    Returns
    -------
    scorer : callable
        A scikit-learn scorer (:func:`make_certificate_scorer`).
    """
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown scorer {name!r}; choose one of {get_scorer_names()}."
        )
    try:
        return _REGISTRY[name](**kwargs)
    except TypeError as exc:
        raise TypeError(f"scorer {name!r}: {exc}") from None
