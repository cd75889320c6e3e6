"""Scorers for model selection: ``scoring=`` in GridSearchCV and cross_validate.

A scorer is a callable ``scorer(estimator, X, y) -> float``: it certifies ``X``
once with the estimator of the current fold and applies one metric. It keeps
nothing between calls, so nothing leaks across folds.
"""

from numbers import Real

from ..utils._sklearn_compat import Interval, validate_params
from ._certified import average_certified_radius, certified_accuracy

__all__ = [
    "CertificateScorer",
    "acr_scorer",
    "certified_accuracy_scorer",
    "get_scorer",
    "get_scorer_names",
]


class CertificateScorer:
    """Score an estimator by a metric of its certificates.

    Parameters
    ----------
    metric : callable
        ``metric(y_true, certificates, **kwargs) -> float``.
    **kwargs
        Passed to ``metric``.
    """

    def __init__(self, metric, **kwargs):
        self.metric = metric
        self.kwargs = kwargs

    def __call__(self, estimator, X, y):
        return self.metric(y, estimator.certify(X), **self.kwargs)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"CertificateScorer({self.metric.__name__}{', ' if args else ''}{args})"


@validate_params(
    {"radius": [Interval(Real, 0, None, closed="left")], "proxy": ["boolean"]},
    prefer_skip_nested_validation=True,
)
def certified_accuracy_scorer(radius=0.0, *, proxy=False):
    """Scorer of certified accuracy at ``radius`` (by proxy radius if ``proxy``).

    Examples
    --------
    >>> certified_accuracy_scorer(radius=0.5)
    CertificateScorer(certified_accuracy, radius=0.5, proxy=False)
    """
    return CertificateScorer(certified_accuracy, radius=radius, proxy=proxy)


@validate_params({"proxy": ["boolean"]}, prefer_skip_nested_validation=True)
def acr_scorer(*, proxy=False):
    """Scorer of the average certified radius (ACR; AC R-tilde if ``proxy``)."""
    return CertificateScorer(average_certified_radius, proxy=proxy)


_REGISTRY = {
    "certified_accuracy": certified_accuracy_scorer,
    "certified_accuracy_proxy": lambda **kw: certified_accuracy_scorer(
        proxy=True, **kw
    ),
    "acr": acr_scorer,
    "acr_proxy": lambda: acr_scorer(proxy=True),
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
    """A scorer by name, with its keyword arguments (e.g. ``radius=0.5``).

    Parameters
    ----------
    name : str
        One of :func:`get_scorer_names`.
    **kwargs
        Passed to the scorer's factory.

    Returns
    -------
    CertificateScorer
    """
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown scorer {name!r}; choose one of {get_scorer_names()}."
        )
    return _REGISTRY[name](**kwargs)
