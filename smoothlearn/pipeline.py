"""Certify whatever ends in a smoothed classifier, in the units of the user's input.

Scikit-learn users put a scaler (or PCA) in front of the classifier:
``make_pipeline(StandardScaler(), SmoothedClassifier())``. The certificate a
user needs is about the input they pass, which an attacker perturbs, not
about what the network sees. :func:`certify_estimator` certifies a
:class:`~smoothlearn.SmoothedClassifier`, a ``Pipeline`` ending in one (nested
too) or a fitted ``GridSearchCV``/``RandomizedSearchCV`` (its refit best
estimator), and maps each certificate back through the steps before the
classifier:

* every step a known affine map ``y = A x + b`` (StandardScaler, MinMaxScaler
  without clipping, MaxAbsScaler, RobustScaler, PCA and TruncatedSVD,
  whitened or not, and pipelines of them): the certificates carry ``A``
  (``Certificates.input_map``) and the user's inputs; ``radius`` and
  ``proxy_radius`` are those of the preimage of the classifier's region, in
  the input's units, exactly (:class:`~smoothlearn.regions.Certificates`);
* any other step: the certificates stay in the classifier's space,
  ``Certificates.space == 'model'``, with one warning per call.

``space='model'`` asks for the classifier's space outright: the certificates
the smoothed classifier gives on the transformed inputs (standardised units
behind a ``StandardScaler``), which suit tabular data whose features have
units of very different sizes. In the input's units the radius is set by the
feature the preprocessing stretches most; where that makes it more than ten
times smaller than in the model's space, an :class:`InputUnitsWarning` names
the feature and the option.

The memory of a data-dependent smoothing works in the classifier's space, on
the classifier's own certificates: if two regions are disjoint there, their
preimages are disjoint (a point in both would map into both), so a memory
that is sound there is sound in the input's units.
"""

import warnings

import numpy as np
from sklearn import pipeline as sklearn_pipeline
from sklearn.decomposition import PCA, TruncatedSVD
from sklearn.pipeline import Pipeline as SklearnPipeline
from sklearn.preprocessing import (
    MaxAbsScaler,
    MinMaxScaler,
    RobustScaler,
    StandardScaler,
)
from sklearn.utils.validation import check_is_fitted

from .regions import operator_norm

__all__ = [
    "ClassifierSpaceWarning",
    "InputUnitsWarning",
    "Pipeline",
    "affine_map",
    "certify_estimator",
    "make_pipeline",
    "smoothed_classifier_of",
]


class ClassifierSpaceWarning(UserWarning):
    """Certificates left in the classifier's space: a step before it is not a
    known affine map, so their radii are not in the input's units."""


class InputUnitsWarning(UserWarning):
    """Radii in the input's units more than :data:`UNITS_SHRINK_WARNING` times
    smaller than in the model's space: one feature's units set them."""


#: Warn when the input's units shrink the median radius by more than this
#: factor against the model's space.
UNITS_SHRINK_WARNING = 10.0

SPACES = ("input", "model")


def smoothed_classifier_of(estimator):
    """``(steps, classifier)``: the fitted transformers before the estimator's
    smoothed classifier, in order, and that classifier.

    Parameters
    ----------
    estimator : SmoothedClassifier, Pipeline or fitted search
        Anything with a ``certify`` method, a ``Pipeline`` whose last step is
        one of these, or a fitted ``GridSearchCV``/``RandomizedSearchCV``
        (refit) over one of these.

    Raises
    ------
    TypeError
        For anything else, naming what it got and what it needs.
    """
    if isinstance(estimator, SklearnPipeline):
        steps = [
            step
            for _, step in estimator.steps[:-1]
            if step is not None
            and not (isinstance(step, str) and step == "passthrough")
        ]
        inner, classifier = smoothed_classifier_of(estimator.steps[-1][1])
        return steps + inner, classifier
    if (
        hasattr(estimator, "cv_results_")
        or hasattr(estimator, "param_grid")
        or (hasattr(estimator, "param_distributions"))
    ):
        if not hasattr(estimator, "best_estimator_"):
            raise TypeError(
                f"cannot certify with {type(estimator).__name__} that has no "
                "best_estimator_: fit it first, with refit=True (or a refit "
                "metric name when scoring is a dict)."
            )
        return smoothed_classifier_of(estimator.best_estimator_)
    if hasattr(estimator, "certify"):
        return [], estimator
    raise TypeError(
        f"cannot certify with {type(estimator).__name__}: certificates need a "
        "SmoothedClassifier, or a Pipeline or fitted GridSearchCV/"
        "RandomizedSearchCV ending in one."
    )


def affine_map(step):
    """The linear part ``A`` of a fitted step that is an affine map, or None.

    Returns a vector (a diagonal ``A``), a ``(k, d)`` matrix, or None where
    the step is not one this function knows as affine (or is not fitted).
    """
    if isinstance(step, SklearnPipeline):
        return _compose(
            [affine_map(s) for _, s in step.steps if s not in (None, "passthrough")]
        )
    try:
        check_is_fitted(step)
    except Exception:  # not a fitted estimator: nothing known of it
        return None
    if isinstance(step, (StandardScaler, RobustScaler)):
        # no scaling (with_std=False, with_scaling=False): a translation
        if step.scale_ is None:
            return np.ones(step.n_features_in_)
        return 1.0 / np.asarray(step.scale_, dtype=np.float64)
    if isinstance(step, MinMaxScaler):
        # clip=True clips values outside the training range: not affine
        return None if step.clip else np.asarray(step.scale_, dtype=np.float64)
    if isinstance(step, MaxAbsScaler):
        return 1.0 / np.asarray(step.scale_, dtype=np.float64)
    if isinstance(step, PCA):
        components = np.asarray(step.components_, dtype=np.float64)
        if step.whiten:
            components = components / np.sqrt(step.explained_variance_)[:, None]
        return components
    if isinstance(step, TruncatedSVD):
        return np.asarray(step.components_, dtype=np.float64)
    return None


def _compose(maps):
    """``A_k ... A_1`` of the steps' maps in order (None where any is unknown)."""
    out = None
    for i, a in enumerate(maps):
        if a is None:
            return None
        if i == 0:
            out = a
        elif out.ndim == 1 and a.ndim == 1:
            out = a * out
        else:
            left = np.diag(a) if a.ndim == 1 else a
            right = np.diag(out) if out.ndim == 1 else out
            out = left @ right
    return out


def certify_estimator(estimator, X, *, radius=None, checkpoint=None, space="input"):
    """Certify ``X`` with whatever ends in a smoothed classifier, in ``X``'s units.

    Parameters
    ----------
    estimator : SmoothedClassifier, Pipeline or fitted search
        A fitted :class:`~smoothlearn.SmoothedClassifier`, a ``Pipeline``
        ending in one (nested pipelines too), or a fitted
        ``GridSearchCV``/``RandomizedSearchCV`` whose refit best estimator is
        one of these.
    X : array-like of shape (n_samples, n_features)
        Inputs as the estimator takes them (before its preprocessing).
    radius : float, default=None
        Decide, for each input, whether it is certified at this radius in
        ``space``'s units, sequentially (:meth:`SmoothedClassifier.certify`);
        in the input's units the classifier decides at ``||A|| radius``, which
        implies it here.
    checkpoint : str or path-like, default=None
        As :meth:`SmoothedClassifier.certify`.
    space : {'input', 'model'}, default='input'
        The units of the certificates. ``'input'``: those of ``X``, which an
        attacker perturbs (a :class:`InputUnitsWarning` where they make the
        radii more than ten times smaller than the model's, naming the
        feature that sets them). ``'model'``: the space the smoothed
        classifier sees, after the steps before it: exactly its own
        certificates of the transformed ``X`` (``Certificates.space ==
        'model'``), e.g. standardised units behind a ``StandardScaler``.

    Returns
    -------
    Certificates
        With ``space='input'``: in ``X``'s units when every step before the
        classifier is a known affine map (:func:`affine_map`): ``input_map``
        holds its linear part, ``input_center`` the inputs, and ``radius``,
        ``proxy_radius`` and ``contains`` speak of the preimage of each
        region. Otherwise in the classifier's space (``space='model'``), with
        a :class:`ClassifierSpaceWarning`.

    Raises
    ------
    TypeError
        When ``estimator`` ends in no smoothed classifier.
    ValueError
        When ``space`` is neither ``'input'`` nor ``'model'``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from smoothlearn import SmoothedClassifier, certify_estimator
    >>> rng = np.random.RandomState(0)
    >>> X = rng.randn(60, 2).astype(np.float32) * [1.0, 100.0]
    >>> y = (X[:, 0] > 0).astype(int)
    >>> pipe = make_pipeline(StandardScaler(), SmoothedClassifier(
    ...     n=2000, max_epochs=30, lr=0.01, random_state=0)).fit(X, y)
    >>> cert = certify_estimator(pipe, X[:3])
    >>> cert.space, cert.input_map.shape
    ('input', (2,))
    >>> certify_estimator(pipe, X[:3], space="model").space
    'model'
    """
    if not (isinstance(space, str) and space in SPACES):
        raise ValueError(f"space must be 'input' or 'model'; got {space!r}.")
    steps, classifier = smoothed_classifier_of(estimator)
    Z = X
    for step in steps:
        Z = step.transform(Z)
    if not steps:
        return _certify(classifier, Z, radius, checkpoint)
    if space == "model":
        certificates = _certify(classifier, Z, radius, checkpoint)
        return certificates._replace(space="model")
    a = _compose([affine_map(step) for step in steps])
    k = np.asarray(Z).reshape(len(Z), -1).shape[1]
    if a is None or not _full_row_rank(a, k):
        unknown = [type(s).__name__ for s in steps if affine_map(s) is None]
        warnings.warn(
            "certificates stay in the classifier's space (space='model'): "
            + (
                f"{', '.join(unknown)} before the classifier is not an affine map "
                "smoothlearn knows"
                if unknown
                else "the steps before the classifier lose rank"
            )
            + "; their radii (and radius=) are not in the units of X.",
            ClassifierSpaceWarning,
            stacklevel=2,
        )
        certificates = _certify(classifier, Z, radius, checkpoint)
        return certificates._replace(space="model")
    if radius is not None:
        # ||Delta|| <= r in X's units moves y by at most ||A|| r: deciding at
        # ||A|| r in the classifier's space decides at r here (exactly for an
        # isotropic smoothing, soundly for the others)
        radius = float(radius) * operator_norm(a, classifier.noise_.norm)
    certificates = _certify(classifier, Z, radius, checkpoint)
    X_flat = np.asarray(X, dtype=np.float64).reshape(len(certificates), -1)
    in_input = certificates._replace(input_map=a, input_center=X_flat, space="input")
    _warn_if_units_shrink(certificates, in_input, a, steps, X)
    return in_input


def _warn_if_units_shrink(in_model, in_input, a, steps, X, option="space='model'"):
    """:class:`InputUnitsWarning` where the input's units shrink the median
    radius more than :data:`UNITS_SHRINK_WARNING` times, naming the feature
    the map stretches most (the one that sets an isotropic region's radius)
    and ``option``, the way to certify in the model's space."""
    model, given = in_model.radius, in_input.radius
    both = (model > 0) & (given > 0)
    if not both.any():
        return
    shrink = float(np.median(model[both] / given[both]))
    if not shrink > UNITS_SHRINK_WARNING:
        return
    if a.ndim == 1:
        feature = int(np.argmax(np.abs(a)))
    else:  # the input direction A stretches most, by its largest coordinate
        feature = int(np.argmax(np.abs(np.linalg.svd(a)[2][0])))
    names = getattr(X, "columns", None)
    if names is None:
        names = getattr(steps[0], "feature_names_in_", None)
    name = f"{names[feature]!r}" if names is not None else f"{feature}"
    column = a[feature] if a.ndim == 1 else a[:, feature]
    stretch = float(np.linalg.norm(np.atleast_1d(column)))
    warnings.warn(
        f"certified radii in the units of X are {shrink:.0f} times smaller than in "
        f"the model's space (median): feature {name}, which "
        f"{' then '.join(type(s).__name__ for s in steps)} stretches by "
        f"{stretch:.3g}, sets them. Pass {option} for radii in the units the "
        "smoothed classifier sees (standardised units behind a StandardScaler), "
        "or scale that feature otherwise.",
        InputUnitsWarning,
        stacklevel=_outside_smoothlearn(),
    )


def _outside_smoothlearn():
    """The ``stacklevel`` of the first caller outside smoothlearn (a warning
    then points at the user's line, whichever public function it came from)."""
    import os
    import sys

    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        package + os.sep
    ):
        frame, level = frame.f_back, level + 1
    return level


def _certify(classifier, Z, radius, checkpoint):
    """``classifier.certify(Z)`` with the options given (a user's class may
    take none)."""
    options = {"radius": radius, "checkpoint": checkpoint}
    return classifier.certify(
        Z, **{name: value for name, value in options.items() if value is not None}
    )


def _full_row_rank(a, k):
    if a.ndim == 1:
        return a.shape[0] == k and bool(np.all(a != 0) and np.all(np.isfinite(a)))
    return a.shape[0] == k and np.linalg.matrix_rank(a) == k


class Pipeline(SklearnPipeline):
    """scikit-learn's ``Pipeline`` with ``certify``, as ``predict`` is there.

    A ``Pipeline`` in every other way (imbalanced-learn's adds
    ``fit_resample`` the same way): ``pipe.certify(X)`` is
    :func:`certify_estimator` of the pipeline, so certificates come in the
    units of ``X``. scikit-learn's own ``Pipeline`` works with
    :func:`certify_estimator` and the scorers too.

    Examples
    --------
    >>> from sklearn.preprocessing import MinMaxScaler
    >>> from smoothlearn import SmoothedClassifier
    >>> from smoothlearn.pipeline import make_pipeline
    >>> pipe = make_pipeline(MinMaxScaler(), SmoothedClassifier())
    >>> hasattr(pipe, "certify")
    True
    """

    def certify(self, X, *, radius=None, checkpoint=None, space="input"):
        """:func:`certify_estimator` of this pipeline: certificates in ``X``'s
        units, or in the model's (``space='model'``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        radius : float, default=None
        checkpoint : str or path-like, default=None
        space : {'input', 'model'}, default='input'

        Returns
        -------
        Certificates
        """
        return certify_estimator(
            self, X, radius=radius, checkpoint=checkpoint, space=space
        )


def make_pipeline(*steps, **kwargs):
    """scikit-learn's ``make_pipeline``, building a :class:`Pipeline` with ``certify``.

    Parameters
    ----------
    *steps : estimators
    **kwargs
        As :func:`sklearn.pipeline.make_pipeline` (``memory``, ``verbose``...).

    Returns
    -------
    Pipeline
    """
    built = sklearn_pipeline.make_pipeline(*steps, **kwargs)
    return Pipeline(**built.get_params(deep=False))
