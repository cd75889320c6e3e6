"""Certificates through pipelines and searches, in the units of the user's input.

A linear base classifier behind each supported affine step has an exact truth
in raw units: with ``y = A x + t`` and f(y) = 1[w.y + b > 0] the raw decision
function is g(x) = (A^T w).x + (w.t + b), whose l2 distance to the boundary
is |g(x)| / ||A^T w||_2 (l1: / ||A^T w||_inf). The raw features differ in
scale by 100x, so a radius left in the scaled space would be off by up to that.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.decomposition import PCA, TruncatedSVD
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_validate
from sklearn.pipeline import Pipeline
from sklearn.pipeline import make_pipeline as sklearn_make_pipeline
from sklearn.preprocessing import (
    FunctionTransformer,
    MaxAbsScaler,
    MinMaxScaler,
    RobustScaler,
    StandardScaler,
)

from smoothlearn import Certificates, SmoothedClassifier, certify_estimator
from smoothlearn.metrics import (
    CertifiedAccuracyDisplay,
    acr_scorer,
    certified_accuracy_scorer,
    make_certificate_scorer,
)
from smoothlearn.metrics._certified import average_certified_radius
from smoothlearn.pipeline import (
    ClassifierSpaceWarning,
    affine_map,
    make_pipeline,
)
from smoothlearn.strategies import ANCER, IsotropicDD

from ._factories import fast_classifier, fast_strategy
from .conftest import linear_module

SCALES = np.array([1.0, 10.0, 100.0])
SIGMA = 0.3


def _raw_data(n=300, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, 3) * SCALES + [5.0, -50.0, 300.0]
    # correlated features, so that PCA rotates
    X[:, 1] += 5.0 * (X[:, 0] - 5.0)
    return X.astype(np.float64)


STEPS = {
    "standard": lambda: StandardScaler(),
    "standard_no_mean": lambda: StandardScaler(with_mean=False),
    "standard_no_std": lambda: StandardScaler(with_std=False),
    "robust_no_scaling": lambda: RobustScaler(with_scaling=False),
    "minmax": lambda: MinMaxScaler(),
    "maxabs": lambda: MaxAbsScaler(),
    "robust": lambda: RobustScaler(),
    "robust_no_centring": lambda: RobustScaler(with_centering=False),
    "pca": lambda: PCA(svd_solver="full"),
    "pca_whiten": lambda: PCA(whiten=True, svd_solver="full"),
    "pca_2": lambda: PCA(n_components=2, svd_solver="full"),
    "pca_2_whiten": lambda: PCA(n_components=2, whiten=True, svd_solver="full"),
    "svd_2": lambda: TruncatedSVD(n_components=2, algorithm="arpack"),
    "scaler_then_pca": lambda: Pipeline(
        [("s", StandardScaler()), ("p", PCA(n_components=2, svd_solver="full"))]
    ),
}


def _affine(step, X):
    """``(A, t)`` of a fitted step, measured from the step itself (a reference
    independent of :func:`affine_map`): ``A`` from differences, ``t`` at 0."""
    t = step.transform(np.zeros((1, X.shape[1])))[0]
    A = np.stack(
        [step.transform(np.eye(X.shape[1])[[j]])[0] - t for j in range(X.shape[1])],
        axis=1,
    )
    return A, t


def _linear_pipeline(name, noise="gaussian", strategy="cohen", seed=0):
    """A fitted pipeline (step, linear smoothed classifier), the raw truth
    ``(v, c)`` with g(x) = v.x + c, and inputs at known distances."""
    X = _raw_data()
    step = STEPS[name]().fit(X)
    A, t = _affine(step, X)
    k = A.shape[0]
    rng = np.random.RandomState(seed)
    w = rng.randn(k)
    b = 0.2
    y = np.arange(len(X)) % 2  # max_epochs=0: fit records the classes only
    clf = SmoothedClassifier(
        linear_module(w, b),
        strategy=strategy,
        noise=noise,
        sigma=SIGMA,
        max_epochs=0,
        n=20_000,
        batch_size=20_000,
        random_state=0,
    )
    pipe = Pipeline([("pre", STEPS[name]()), ("clf", clf)]).fit(X, y)
    # inputs at classifier-space signed distances 0.5 .. 2.5 sigma
    unit = w / np.linalg.norm(w)
    signed = np.concatenate([np.linspace(0.5, 2.5, 8), -np.linspace(0.5, 2.5, 8)])
    base = rng.randn(len(signed), k)
    base -= np.outer(base @ unit + b / np.linalg.norm(w), unit)
    Y0 = base + np.outer(signed * SIGMA, unit)
    X0 = (np.linalg.pinv(A) @ (Y0 - t).T).T
    v, c = A.T @ w, w @ t + b
    return pipe, X0, A, v, c


@pytest.mark.parametrize("name", sorted(STEPS))
def test_raw_unit_certificates_are_sound_behind_each_affine_step(name):
    pipe, X0, A, v, c = _linear_pipeline(name)
    cert = certify_estimator(pipe, X0)
    assert cert.space == "input"
    np.testing.assert_allclose(cert.input_map.reshape(A.shape[0], -1).shape[0], len(A))
    g = X0 @ v + c
    certified = ~cert.abstained
    assert certified.sum() >= 12
    np.testing.assert_array_equal(cert.label[certified], (g > 0)[certified])
    # sound: never beyond the raw boundary
    distance = np.abs(g) / np.linalg.norm(v)
    assert (cert.radius <= distance * (1 + 1e-9)).all()
    # the region holds no point of the other class: its boundary, sampled
    rng = np.random.RandomState(1)
    pinv = np.linalg.pinv(A)
    for i in np.flatnonzero(certified):
        S = cert.scale_matrix(i)
        rho = cert.c * cert.gap[i]
        u = rng.randn(200, A.shape[0])
        u *= rho / np.linalg.norm(u, axis=1, keepdims=True)
        delta = (pinv @ (S @ u.T)).T
        # plus anything along the directions the step discards
        null = np.eye(A.shape[1]) - pinv @ A
        delta += 1e3 * (null @ rng.randn(A.shape[1], 200)).T
        assert cert.contains(i, 0.999 * delta).all()
        inside = X0[i] + 0.999 * delta
        assert ((inside @ v + c > 0) == (g[i] > 0)).all()
        # and the inscribed ball is inside the region
        ball = rng.randn(200, A.shape[1])
        ball *= 0.999 * cert.radius[i] / np.linalg.norm(ball, axis=1, keepdims=True)
        assert cert.contains(i, ball).all()


def test_behind_a_standard_scaler_radii_scale_by_the_feature_scales():
    """Isotropic sigma in scaled units is the axis-aligned ellipsoid of
    semi-axes rho sigma scale_j in raw units: its inscribed radius is the
    scaled radius times the smallest scale, its proxy radius times their
    geometric mean; and both match the exact truth to Monte Carlo error."""
    pipe, X0, A, v, c = _linear_pipeline("standard")
    cert = certify_estimator(pipe, X0)
    scaler, clf = pipe[0], pipe[-1]
    scaled = clf.certify(scaler.transform(X0))  # same seed: the same draws
    scale = scaler.scale_
    np.testing.assert_allclose(cert.radius, scaled.radius * scale.min(), rtol=1e-12)
    np.testing.assert_allclose(
        cert.proxy_radius,
        scaled.proxy_radius * np.exp(np.log(scale).mean()),
        rtol=1e-12,
    )
    # the exact expectation: Cohen's radius sigma Phi^-1(p) in scaled units is
    # the scaled distance (p = Phi(distance / sigma)), less the bound's width
    scaled_distance = np.abs(X0 @ v + c) / np.linalg.norm(v * scale)
    np.testing.assert_allclose(
        cert.radius / scale.min(), scaled_distance, rtol=0.15, atol=0.02
    )


def test_l1_certificates_behind_a_scaler_are_sound():
    pipe, X0, A, v, c = _linear_pipeline("standard", noise="laplace")
    cert = certify_estimator(pipe, X0)
    assert cert.norm == "l1" and cert.space == "input"
    distance = np.abs(X0 @ v + c) / np.abs(v).max()
    assert (cert.radius <= distance * (1 + 1e-9)).all()
    scaled = pipe[-1].certify(pipe[0].transform(X0))
    np.testing.assert_allclose(cert.radius, scaled.radius * pipe[0].scale_.min())


@st.composite
def _mapped_certificates(draw):
    """Certificates of random scale forms and a random input map."""
    k = draw(st.integers(2, 4))
    d = draw(st.integers(k, 5))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.RandomState(seed)
    form = draw(st.sampled_from(["isotropic", "diagonal", "rotated"]))
    noise = (
        "gaussian"
        if form == "rotated"
        else draw(st.sampled_from(["gaussian", "laplace"]))
    )
    kind = draw(st.sampled_from(["diagonal", "matrix"])) if d == k else "matrix"
    a = (
        np.exp(rng.uniform(-3, 3, k))
        if kind == "diagonal"
        else rng.randn(k, d) * np.exp(rng.uniform(-2, 2, (k, 1)))
    )
    n = 3
    fields = {}
    if form == "isotropic":
        fields["scale"] = np.exp(rng.uniform(-1, 1, n))
    elif form == "diagonal":
        fields["scale"] = np.exp(rng.uniform(-1, 1, (n, k)))
    else:
        r = draw(st.integers(1, k))
        fields["basis"] = np.stack([np.linalg.qr(rng.randn(k, r))[0] for _ in range(n)])
        fields["scale"] = np.exp(rng.uniform(-1, 1, (n, r)))
        fields["scale_rest"] = np.exp(rng.uniform(-1, 1, n))
    x = rng.randn(n, a.shape[1] if a.ndim == 2 else k)
    y = x * a if a.ndim == 1 else x @ a.T
    return Certificates(
        label=[0, 1, 0],
        abstained=[False] * n,
        p_lower=[0.9] * n,
        gap=rng.uniform(0.2, 2.0, n),
        center=y,
        noise=noise,
        input_map=a,
        input_center=x,
        **fields,
    )


@settings(max_examples=150, deadline=None)
@given(cert=_mapped_certificates(), data=st.data())
def test_mapped_radii_are_exact_against_a_witness(cert, data):
    """The inscribed radius in input units is sound (a ball just inside it is
    inside the region, tested through ``contains``) and tight (a witness just
    outside it, along the worst direction, is outside); the proxy radius is
    the geometric-mean radius of the preimage (or of its cross-section)."""
    a = cert.input_map
    dense_a = np.diag(a) if a.ndim == 1 else a
    k, d = dense_a.shape
    rng = np.random.RandomState(data.draw(st.integers(0, 2**31 - 1)))
    for i in range(len(cert)):
        S = cert.scale_matrix(i)
        M = np.linalg.solve(S, dense_a)  # S^-1 A, (k, d)
        r = cert.radius[i]
        ord_ = 2 if cert.norm == "l2" else 1
        dirs = rng.randn(100, d)
        dirs /= np.linalg.norm(dirs, ord=ord_, axis=1, keepdims=True)
        assert cert.contains(i, (1 - 1e-9) * r * dirs).all()
        if cert.norm == "l2":
            witness = np.linalg.svd(M)[2][0]
        else:
            witness = np.eye(d)[np.abs(M).sum(axis=0).argmax()]
        assert not cert.contains(i, (1 + 1e-6) * r * witness)
        # proxy: rho det(S)^(1/k) / (det(A A^T))^(1/2k), by log-determinants
        rho = cert.c * cert.gap[i]
        log_s = np.linalg.slogdet(S)[1]
        log_a = np.linalg.slogdet(dense_a @ dense_a.T)[1] / 2
        np.testing.assert_allclose(
            cert.proxy_radius[i], rho * np.exp((log_s - log_a) / k), rtol=1e-8
        )


def _exact_input_radius(cert, i):
    """``c gap / ||S^-1 A||`` in 60-digit arithmetic from the stored arrays
    (``S`` as stored: ``r I + U diag(s - r) U^T`` for a rotated row)."""
    import mpmath

    with mpmath.workdps(60):
        a = cert.input_map
        dense = np.diag(a) if a.ndim == 1 else a
        k = dense.shape[0]
        form = cert.scales
        if form.kind == "rotated":
            u = mpmath.matrix(form.basis[i].tolist())
            rest = mpmath.mpf(float(form.rest[i]))
            diag = mpmath.diag([mpmath.mpf(float(v)) - rest for v in form.values[i]])
            s = u * diag * u.T + rest * mpmath.eye(k)
        else:
            values = np.broadcast_to(np.atleast_1d(form.values[i]), (k,))
            s = mpmath.diag([mpmath.mpf(float(v)) for v in values])
        m = mpmath.matrix(k, dense.shape[1])
        for c in range(dense.shape[1]):  # S^-1 A, a column at a time
            column = mpmath.lu_solve(s, mpmath.matrix(dense[:, c].tolist()))
            for r in range(k):
                m[r, c] = column[r]
        if cert.norm == "l2":
            norm = max(mpmath.svd_r(m, compute_uv=False))
        else:
            norm = max(
                mpmath.fsum(abs(m[r, c]) for r in range(m.rows)) for c in range(m.cols)
            )
        return mpmath.mpf(float(cert.c)) * mpmath.mpf(float(cert.gap[i])) / norm


@settings(max_examples=60, deadline=None)
@given(cert=_mapped_certificates())
def test_mapped_radii_are_proved_lower_bounds_of_the_exact_radius(cert):
    """Rounding may never put the input-units radius above ``c gap /
    ||S^-1 A||`` of the stored arrays; the allowance costs at most 1e-9."""
    for i in range(len(cert)):
        exact = _exact_input_radius(cert, i)
        assert cert.radius[i] <= exact
        assert cert.radius[i] >= exact * (1 - 1e-9)


def test_a_step_that_is_not_affine_leaves_the_classifier_space_and_warns():
    X = _raw_data(80)
    y = (X[:, 0] > 5).astype(int)
    for step in (FunctionTransformer(np.tanh), MinMaxScaler(clip=True)):
        pipe = sklearn_make_pipeline(step, fast_classifier(max_epochs=5)).fit(X, y)
        with pytest.warns(ClassifierSpaceWarning, match=type(step).__name__) as record:
            cert = certify_estimator(pipe, X[:5])
        assert len(record) == 1
        assert cert.space == "model" and cert.input_map is None
        assert affine_map(pipe[0]) is None


def test_pipelines_nested_and_searches_are_certified_through():
    X = _raw_data(120)
    y = (X[:, 0] > 5).astype(int)
    inner = Pipeline(
        [("scale", StandardScaler()), ("clf", fast_classifier(max_epochs=5))]
    )
    nested = Pipeline([("maxabs", MaxAbsScaler()), ("rest", inner)]).fit(X, y)
    cert = certify_estimator(nested, X[:6])
    composed = 1.0 / (nested[0].scale_ * nested[1][0].scale_)
    composed = composed * 1.0  # maxabs then standard: y = (x / m - mu) / s
    np.testing.assert_allclose(
        cert.input_map, 1.0 / nested[0].scale_ / nested[1][0].scale_
    )
    search = GridSearchCV(
        clone(inner), {"clf__sigma": [0.1, 0.2]}, cv=2, scoring=acr_scorer()
    ).fit(X, y)
    by_search = certify_estimator(search, X[:6])
    by_hand = certify_estimator(search.best_estimator_, X[:6])
    np.testing.assert_array_equal(by_search.radius, by_hand.radius)
    unfitted = GridSearchCV(clone(inner), {"clf__sigma": [0.1]}, refit=False)
    with pytest.raises(TypeError, match="best_estimator_"):
        certify_estimator(unfitted.fit(X, y), X[:2])
    # a smoothlearn Pipeline certifies as predict predicts
    pipe = make_pipeline(StandardScaler(), fast_classifier(max_epochs=5)).fit(X, y)
    np.testing.assert_array_equal(
        pipe.certify(X[:6]).radius, certify_estimator(pipe, X[:6]).radius
    )


SCORERS = {
    "ca_sequential": lambda: certified_accuracy_scorer(radius=0.5),
    "ca": lambda: certified_accuracy_scorer(radius=0.5, sequential=False),
    "ca_proxy": lambda: certified_accuracy_scorer(radius=0.5, proxy=True),
    "acr": lambda: acr_scorer(),
    "acr_proxy": lambda: acr_scorer(proxy=True),
}


def _tabular():
    X = _raw_data(160)
    y = (X[:, 0] - 5 + 0.02 * (X[:, 2] - 300) > 0).astype(int)
    return X, y


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_grid_search_over_a_pipeline_scores_with_each_certificate_scorer(name):
    X, y = _tabular()
    pipe = sklearn_make_pipeline(StandardScaler(), fast_classifier(max_epochs=10))
    scorer = SCORERS[name]()
    search = GridSearchCV(
        pipe, {"smoothedclassifier__sigma": [0.1, 0.3]}, cv=2, scoring=scorer
    ).fit(X[:120], y[:120])
    scores = search.cv_results_["mean_test_score"]
    assert np.isfinite(scores).all() and scores.max() > 0
    # scoring the refit pipeline by hand: the same number
    assert search.score(X[120:], y[120:]) == scorer(
        search.best_estimator_, X[120:], y[120:]
    )


def test_a_scoring_dict_certifies_once_per_split(monkeypatch):
    X, y = _tabular()
    calls = []
    certify = SmoothedClassifier.certify

    def counted(self, X, **kwargs):
        calls.append(kwargs.get("radius"))
        return certify(self, X, **kwargs)

    monkeypatch.setattr(SmoothedClassifier, "certify", counted)
    pipe = sklearn_make_pipeline(StandardScaler(), fast_classifier(max_epochs=10))
    scoring = {name: SCORERS[name]() for name in ("ca", "ca_proxy", "acr", "acr_proxy")}
    search = GridSearchCV(
        pipe,
        {"smoothedclassifier__sigma": [0.1, 0.3]},
        cv=2,
        scoring=scoring,
        refit="acr",
    ).fit(X, y)
    assert len(calls) == 2 * 2  # folds x candidates: one certification each
    for name in scoring:
        assert np.isfinite(search.cv_results_[f"mean_test_{name}"]).all()
    assert (
        search.best_params_["smoothedclassifier__sigma"]
        == [0.1, 0.3][int(np.argmax(search.cv_results_["mean_test_acr"]))]
    )
    calls.clear()
    scores = cross_validate(search.best_estimator_, X, y, cv=2, scoring=scoring)
    assert len(calls) == 2 and np.isfinite(scores["test_acr"]).all()


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_a_scorer_handed_an_estimator_it_cannot_certify_says_so(name):
    X, y = _tabular()
    model = LogisticRegression().fit(X, y)
    with pytest.raises(TypeError, match="LogisticRegression.*SmoothedClassifier"):
        SCORERS[name]()(model, X, y)
    with pytest.raises(TypeError, match="LogisticRegression"):
        make_certificate_scorer(average_certified_radius)(model, X, y)


def test_the_sequential_decision_is_at_the_radius_in_input_units():
    pipe, X0, A, v, c = _linear_pipeline("standard")
    full = certify_estimator(pipe, X0)
    for radius in (0.1, 0.5, 1.0):
        decided = certify_estimator(pipe, X0, radius=radius)
        # cohen is isotropic: the decision at ||A|| r in scaled units is the
        # decision at r in raw units, so it agrees with the full certificate
        # wherever that one is clear of r
        clear = np.abs(full.radius - radius) > 0.05 * radius
        np.testing.assert_array_equal(
            (decided.radius >= radius)[clear], (full.radius >= radius)[clear]
        )


def test_strategy_grids_work_with_a_strategy_given_by_name():
    X, y = _tabular()
    X, y = X[:60], y[:60]
    clf = fast_classifier("ancer", max_epochs=5, n=200)
    search = GridSearchCV(
        clf,
        {
            "strategy__kappa": [1.0, 2.0],
            "strategy__n_iter": [5],
            "strategy__compare_draws": [0],
            "strategy__isotropic": [IsotropicDD(n_iter=5, n_draws=16)],
        },
        cv=2,
        scoring=acr_scorer(),
    )
    search.fit(StandardScaler().fit_transform(X), y)
    assert isinstance(search.best_estimator_.strategy, ANCER)
    assert search.best_estimator_.strategy.kappa in (1.0, 2.0)
    pipe = sklearn_make_pipeline(StandardScaler(), clf)
    pipe.set_params(smoothedclassifier__strategy__kappa=3.0)
    assert pipe[-1].strategy.get_params()["kappa"] == 3.0
    assert pipe[-1].strategy.get_params()["n_iter"] == ANCER().n_iter
    # a bad name raises and leaves the estimator as it was
    with pytest.raises(ValueError, match="Invalid parameter 'kapa'"):
        fast_classifier("ancer").set_params(strategy__kapa=1.0)
    named = fast_classifier("ancer")
    with pytest.raises(ValueError):
        named.set_params(strategy__kapa=1.0)
    assert named.strategy == "ancer"
    # a strategy given as an object keeps scikit-learn's own nesting
    given = fast_classifier(fast_strategy("ancer")).set_params(strategy__kappa=4.0)
    assert given.strategy.kappa == 4.0


def test_the_display_reads_radii_in_the_certificates_units():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    X, y = _tabular()
    pipe = sklearn_make_pipeline(StandardScaler(), fast_classifier(max_epochs=10))
    pipe.fit(X, y)
    display = CertifiedAccuracyDisplay.from_estimator(pipe, X[:20], y[:20])
    cert = certify_estimator(pipe, X[:20])
    radii, _ = display.curves["cohen"]
    assert radii.max() == pytest.approx(cert.radius.max())
    assert display.ax_.get_xlabel() == "l2 radius"
    odd = sklearn_make_pipeline(
        FunctionTransformer(np.tanh), fast_classifier(max_epochs=5)
    )
    odd.fit(X, y)
    with pytest.warns(ClassifierSpaceWarning):
        display = CertifiedAccuracyDisplay.from_estimator(odd, X[:10], y[:10])
    assert "model" in display.ax_.get_xlabel()


# --------------------------------------------- the space of the certificates
def _breast_cancer_pipeline():
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    pipe = make_pipeline(StandardScaler(), fast_classifier(sigma=0.5, max_epochs=20))
    return pipe.fit(X[:300], y[:300]), X[300:340], y[300:340]


def test_model_space_is_exactly_the_final_steps_certificates_of_the_transform():
    pipe, X, _ = _breast_cancer_pipeline()
    in_model = pipe.certify(X, space="model")
    own = pipe[-1].certify(pipe[:-1].transform(X))
    assert in_model.space == "model" and in_model.input_map is None
    np.testing.assert_array_equal(in_model.label, own.label)
    np.testing.assert_array_equal(in_model.p_lower, own.p_lower)
    np.testing.assert_array_equal(in_model.radius, own.radius)
    np.testing.assert_array_equal(in_model.proxy_radius, own.proxy_radius)
    assert np.median(in_model.radius[in_model.radius > 0]) > 0.1  # a readable size
    # the same through certify_estimator and a fitted search's best estimator
    again = certify_estimator(pipe, X, space="model")
    np.testing.assert_array_equal(again.radius, own.radius)


def test_input_space_warns_naming_the_feature_that_shrinks_the_radius():
    from smoothlearn.pipeline import InputUnitsWarning

    pipe, X, _ = _breast_cancer_pipeline()
    with pytest.warns(InputUnitsWarning) as record:
        in_input = pipe.certify(X)
    in_model = pipe.certify(X, space="model")
    # the feature the scaler stretches most, the one that sets an isotropic
    # region's radius in the input's units
    smallest_spread = int(np.argmin(pipe[0].scale_))
    message = str(record[0].message)
    assert f"feature {smallest_spread}," in message and "space='model'" in message
    certified = in_model.radius > 0
    # exact for an isotropic smoothing: the radius divides by the largest 1/scale
    np.testing.assert_allclose(
        in_input.radius[certified],
        in_model.radius[certified] * pipe[0].scale_.min(),
        rtol=1e-12,
    )


def test_no_units_warning_where_the_input_units_keep_the_radius():
    import warnings

    from smoothlearn.pipeline import InputUnitsWarning

    X = _raw_data(200)
    pipe = make_pipeline(
        MinMaxScaler(feature_range=(0, 5)), fast_classifier(max_epochs=10)
    )
    pipe.fit(X[:, :1], (X[:, 0] > 5).astype(int))
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputUnitsWarning)
        pipe.certify(X[:20, :1])


def test_scorers_certify_in_the_space_asked_and_never_share_across_spaces():
    from sklearn.metrics._scorer import _MultimetricScorer

    pipe, X, y = _breast_cancer_pipeline()
    in_model = pipe.certify(X, space="model")
    with pytest.warns(Warning):
        in_input = pipe.certify(X)
    scorers = {
        "model": acr_scorer(space="model"),
        "input": acr_scorer(),
        "ca_model": certified_accuracy_scorer(0.5, sequential=False, space="model"),
    }
    with pytest.warns(Warning):
        scores = _MultimetricScorer(scorers=scorers)(pipe, X, y)
    assert scores["model"] == average_certified_radius(y, in_model)
    assert scores["input"] == average_certified_radius(y, in_input)
    assert scores["model"] > 10 * scores["input"]
    pytest.importorskip("matplotlib")
    display = CertifiedAccuracyDisplay.from_estimator(pipe, X, y, space="model")
    assert display.ax_.get_xlabel() == "l2 radius (in the model's space)"
    assert display.curves["cohen"][0].max() == in_model.radius.max()
    sequential = certified_accuracy_scorer(0.5, space="model")
    assert repr(sequential) == "certified_accuracy_scorer(radius=0.5, space='model')"
    decided = certify_estimator(pipe, X, radius=0.5, space="model")
    own = pipe[-1].certify(pipe[:-1].transform(X), radius=0.5)
    np.testing.assert_array_equal(decided.radius, own.radius)
    assert sequential(pipe, X, y) == np.mean((own.label == y) & (own.radius >= 0.5))


@pytest.mark.parametrize("space", ["classifier", "Model", None, 1])
def test_a_space_of_neither_kind_is_refused_before_any_work(space):
    pipe, X, _ = _breast_cancer_pipeline()
    with pytest.raises(ValueError, match="space must be 'input' or 'model'"):
        certify_estimator(pipe, X, space=space)
    with pytest.raises(ValueError):
        acr_scorer(space=space)


def test_the_model_spaces_earlier_name_is_read_as_model():
    import pickle

    from smoothlearn.metrics import CertificateLog

    pipe, X, _ = _breast_cancer_pipeline()
    cert = pipe.certify(X[:3], space="model")
    assert cert._replace(space="classifier").space == "model"
    state = cert.__dict__.copy()
    state["space"] = "classifier"  # as an earlier version pickled it
    old = pickle.loads(pickle.dumps(cert))
    old.__setstate__(state)
    assert old.space == "model"
    log = CertificateLog([0], [1], [1], [False], [1.0], [1.0], [True], [0.1], ["cohen"],
                         space=["classifier"])  # fmt: skip
    assert log.space.tolist() == ["model"]
