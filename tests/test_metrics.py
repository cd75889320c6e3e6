import io

import matplotlib
import numpy as np
import pytest
from scipy.stats import ortho_group
from sklearn.model_selection import GridSearchCV, cross_validate

from smoothlearn import Certificates, SmoothedClassifier
from smoothlearn.metrics import (
    CertifiedAccuracyDisplay,
    acr_scorer,
    average_certified_radius,
    average_radius_improvement,
    certified_accuracy,
    certified_accuracy_curve,
    certified_accuracy_scorer,
    certified_accuracy_table,
    clean_accuracy,
    get_scorer,
    get_scorer_names,
    read_certificates_tsv,
    superset_share,
    write_certificates_tsv,
)

matplotlib.use("Agg")

# Five inputs: correct (r=0.5), correct (r=0.5, a tie in radius), wrong label,
# abstained, correct (r=1.2). Diagonal scales give proxy radii by hand.
Y = np.array([0, 1, 2, 1, 0])


def _fixed(strategy="a", gap=None):
    gap = np.array([0.5, 0.25, 0.8, 0.0, 1.2]) if gap is None else gap
    scale = np.array([[1.0, 4.0], [2.0, 2.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    return Certificates(
        label=np.array([0, 1, 1, -1, 0]),
        abstained=np.array([False, False, False, True, False]),
        p_lower=np.full(5, 0.9),
        gap=gap,
        center=np.zeros((5, 2)),
        scale=scale,
        noise="gaussian",
        strategy=strategy,
        time=np.array([0.5, 1.25, 2.0, 0.001, 3661.5]),
        class_index=np.array([0, 1, 1, -1, 0]),
    )


def test_hand_computed_radii_and_accuracies():
    cert = _fixed()
    # radius = gap * min scale; proxy = gap * sqrt(s1 s2)
    np.testing.assert_allclose(cert.radius, [0.5, 0.5, 0.8, 0.0, 1.2])
    np.testing.assert_allclose(cert.proxy_radius, [1.0, 0.5, 0.8, 0.0, 1.2])
    np.testing.assert_allclose(
        certified_accuracy(Y, cert, [0.0, 0.5, 0.50001, 1.2, 1.3]),
        [0.6, 0.6, 0.2, 0.2, 0.0],
    )
    assert certified_accuracy(Y, cert, 0.75, proxy=True) == pytest.approx(0.4)
    assert clean_accuracy(Y, cert) == pytest.approx(0.6)
    assert average_certified_radius(Y, cert) == pytest.approx((0.5 + 0.5 + 1.2) / 5)
    assert average_certified_radius(Y, cert, proxy=True) == pytest.approx(
        (1.0 + 0.5 + 1.2) / 5
    )
    radii, acc = certified_accuracy_curve(Y, cert)
    np.testing.assert_allclose(radii, [0.0, 0.5, 1.2])
    np.testing.assert_allclose(acc, [0.6, 0.6, 0.2])


def test_average_radius_improvement():
    a, b = _fixed(), _fixed(gap=np.array([0.25, 0.25, 0.8, 0.0, 1.0]))
    # per input: (0.5-0.25) + (0.5-0.5) + 0 + 0 + (1.2-1.0)
    assert average_radius_improvement(Y, a, b) == pytest.approx(0.45 / 5)
    assert average_radius_improvement(Y, a, b, proxy=True) == pytest.approx(
        (0.5 + 0 + 0.2) / 5
    )


def test_bad_metric_input():
    cert = _fixed()
    with pytest.raises(ValueError, match="same length"):
        certified_accuracy(Y[:3], cert)
    with pytest.raises(ValueError, match="radius"):
        certified_accuracy(Y, cert, -0.1)
    with pytest.raises(ValueError, match="radius"):
        certified_accuracy(Y, cert, [0.1, -1.0])
    with pytest.raises(TypeError):
        certified_accuracy(Y, cert, radiuss=0.5)
    with pytest.raises(TypeError, match="certificates must have"):
        certified_accuracy(Y, [0, 1, 2, 1, 0])
    with pytest.raises(ValueError, match="unknown scorer"):
        get_scorer("accuracy")


def _diag(scale, gap, label=0):
    n, d = np.shape(scale)
    return Certificates(
        label=np.full(n, label),
        abstained=np.zeros(n, bool),
        p_lower=np.full(n, 0.9),
        gap=np.full(n, gap),
        center=np.zeros((n, d)),
        scale=scale,
        noise="gaussian",
        class_index=np.zeros(n, int),
    )


def test_superset_share_is_exact_for_diagonal_regions():
    inner = _diag(np.array([[1.0, 1.0], [1.0, 1.0]]), 1.0)
    outer = _diag(np.array([[1.0, 3.0], [0.99, 3.0]]), 1.0)
    # first: contains (touching on axis 1); second: pokes out along axis 1
    assert superset_share(outer, inner) == 0.5
    assert superset_share(inner, outer) == 0.0
    assert superset_share(_diag(np.ones((2, 2)), 1.0, label=1), inner) == 0.0


def test_superset_share_matches_sampling_for_rotated_ellipsoids():
    rng = np.random.RandomState(0)
    d = 3
    u = ortho_group.rvs(d, random_state=1)
    results = []
    for trial in range(20):
        s = rng.uniform(0.5, 2.0, d)
        outer = Certificates(
            label=[0],
            abstained=[False],
            p_lower=[0.9],
            gap=[1.0],
            center=np.zeros((1, d)),
            scale=s[None],
            basis=u[None],
            scale_rest=[1.0],
            noise="gaussian",
            class_index=[0],
        )
        rho = rng.uniform(0.3, 1.5)
        inner = _diag(np.full((1, d), rho), 1.0)
        decided = superset_share(outer, inner) == 1.0
        # brute force: points on the inner sphere all inside the outer ellipsoid?
        v = rng.randn(20000, d)
        v = rho * v / np.linalg.norm(v, axis=1, keepdims=True)
        sampled = bool(outer.contains(0, v).all())
        assert decided == sampled or abs(rho - s.min()) < 0.01
        results.append(decided)
    assert 0 < sum(results) < 20  # both outcomes exercised


def test_tsv_round_trips_exactly_and_reads_cohens_logs(tmp_path):
    cert = _fixed()
    path = tmp_path / "log.tsv"
    write_certificates_tsv(path, cert, Y)
    text = path.read_text()
    assert text.splitlines()[0].split("\t")[:6] == [
        "idx",
        "label",
        "predict",
        "radius",
        "correct",
        "time",
    ]
    log = read_certificates_tsv(path)
    np.testing.assert_array_equal(log.radius, cert.radius)
    np.testing.assert_array_equal(log.proxy_radius, cert.proxy_radius)
    np.testing.assert_array_equal(log.label, cert.label)
    np.testing.assert_array_equal(log.abstained, cert.abstained)
    np.testing.assert_allclose(log.time, cert.time)
    assert certified_accuracy(log.y_true, log, 0.5) == certified_accuracy(Y, cert, 0.5)
    again = io.StringIO()
    write_certificates_tsv(again, log, log.y_true)
    assert again.getvalue() == text
    cohen = (
        "idx\tlabel\tpredict\tradius\tcorrect\ttime\n"
        "0\t3\t3\t0.512\t1\t0:00:02.5\n"
        "10\t1\t-1\t0.0\t0\t0:00:02.4\n"
    )
    old = read_certificates_tsv(io.StringIO(cohen))
    np.testing.assert_array_equal(old.abstained, [False, True])
    assert old.time[0] == 2.5 and certified_accuracy(old.y_true, old, 0.5) == 0.5


def test_table_lists_every_strategy():
    table = certified_accuracy_table(
        Y, {"ancer": _fixed(), "cohen": _fixed()}, [0.0, 0.5]
    )
    lines = table.splitlines()
    assert lines[0].split() == ["strategy", "R=0", "R=0.5", "ACR", "ACR~"]
    assert lines[1].split() == ["ancer", "60.0", "60.0", "0.440", "0.540"]


def test_plot_draws_the_step_curves(tmp_path):
    display = CertifiedAccuracyDisplay.from_certificates(
        Y, {"a": _fixed(), "b": _fixed(gap=np.full(5, 0.1))}
    )
    x, y = display.lines_["a"].get_data()
    np.testing.assert_allclose(x, [0.0, 0.5, 1.2])
    np.testing.assert_allclose(y, [60.0, 60.0, 20.0])  # percent, as the table
    assert display.ax_.get_xlabel() == "l2 radius"
    assert display.ax_.get_ylabel() == "certified accuracy (%)"
    assert display.max_radius_line_ is None
    display.figure_.savefig(tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000
    proxy = CertifiedAccuracyDisplay.from_certificates(Y, _fixed(), proxy=True)
    assert proxy.ax_.get_xlabel() == "proxy radius"


def test_plot_has_the_caption_and_marks_the_largest_certifiable_radius():
    from smoothlearn.bounds import largest_certifiable_radius

    r_max = largest_certifiable_radius("gaussian", 0.25, 100_000, 0.001)
    caption = "digits, gaussian sigma=0.25, n=100000, alpha=0.001, l2 norm"
    display = CertifiedAccuracyDisplay.from_certificates(
        Y, {"a": _fixed()}, caption=caption, max_radius=r_max
    )
    assert display.ax_.get_title() == caption
    x, _ = display.max_radius_line_.get_data()
    np.testing.assert_allclose(x, [r_max, r_max])
    assert f"{r_max:.3g}" in display.max_radius_line_.get_label()
    table = certified_accuracy_table(Y, {"a": _fixed()}, [0.0, 0.5, 1.2])
    _, y = display.lines_["a"].get_data()
    assert [f"{v:.1f}" for v in y] == table.splitlines()[1].split()[1:4]


def test_largest_certifiable_radius_is_the_bound_of_n_agreeing_draws():
    import mpmath

    from smoothlearn.bounds import largest_certifiable_radius

    settings = [(100_000, 0.001, 0.25), (10_000, 0.01, 0.5), (500, 0.05, 1)]
    for n, alpha, sigma in settings:
        with mpmath.workdps(40):
            p = mpmath.mpf(alpha) ** (mpmath.mpf(1) / n)  # all n draws agree
            gaussian = sigma * mpmath.sqrt(2) * mpmath.erfinv(2 * p - 1)
            uniform = sigma * mpmath.sqrt(3) * (2 * p - 1)
        for family, exact in (("gaussian", gaussian), ("uniform", uniform)):
            got = largest_certifiable_radius(family, sigma, n, alpha)
            assert got == pytest.approx(float(exact), rel=1e-9)
    # the figure: R=1 cannot be certified at sigma 0.25, n 1e5, alpha 1e-3
    assert 0.95 < largest_certifiable_radius("gaussian", 0.25, 100_000, 0.001) < 0.96


def test_scorers_in_grid_search_and_cross_validate(digits):
    X, y = digits
    X, y = X[:240], y[:240]
    base = SmoothedClassifier(
        module__hidden_units=(32,), n0=30, n=300, max_epochs=8, lr=0.01, random_state=0
    )
    search = GridSearchCV(
        base,
        {"sigma": [0.05, 2.0]},
        scoring=certified_accuracy_scorer(radius=0.05),
        cv=2,
    ).fit(X, y)
    assert search.best_params_ == {"sigma": 0.05}
    assert search.best_score_ > 0.3
    scores = cross_validate(
        base,
        X,
        y,
        cv=2,
        scoring={
            "ca": certified_accuracy_scorer(radius=0.1),
            "acr": acr_scorer(),
            "acr_p": get_scorer("acr_proxy"),
        },
    )
    assert (
        scores["test_acr"] == scores["test_acr_p"]
    ).all()  # isotropic: proxy = radius
    assert set(get_scorer_names()) >= {"certified_accuracy", "acr"}


def test_a_scoring_dict_certifies_once_per_fold(monkeypatch):
    """Three certificate scorers in one GridSearchCV cost one certification per
    (estimator, X), as scikit-learn's multimetric cache does for predict."""
    from smoothlearn import SmoothedClassifier

    calls = []
    original = SmoothedClassifier.certify

    def certify(self, X, **kwargs):  # scikit-learn calls it by its __name__
        calls.append(len(X))
        return original(self, X, **kwargs)

    monkeypatch.setattr(SmoothedClassifier, "certify", certify)
    rng = np.random.RandomState(0)
    X = rng.randn(60, 2).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    base = SmoothedClassifier(n=200, n0=20, max_epochs=5, lr=0.05, random_state=0)
    grid = {"sigma": [0.1, 0.2]}

    def search(scoring):
        calls.clear()
        GridSearchCV(base, grid, scoring=scoring, refit=False, cv=2).fit(X, y)
        return len(calls)

    one = search({"ca": certified_accuracy_scorer(radius=0.1, sequential=False)})
    three = search(
        {
            "ca@0.1": certified_accuracy_scorer(radius=0.1, sequential=False),
            "acr": get_scorer("acr"),
            "acr~": get_scorer("acr_proxy"),
        }
    )
    assert one == 4  # 2 sigmas x 2 folds
    assert three <= 1.3 * one


def test_scorer_names_take_their_arguments():
    assert get_scorer("acr_proxy")._kwargs == {"proxy": True}
    assert get_scorer("certified_accuracy_proxy", radius=0.5)._kwargs == {
        "radius": 0.5,
        "proxy": True,
    }
    with pytest.raises(TypeError, match="scorer 'acr'"):
        get_scorer("acr", radius=0.5)
    with pytest.warns(FutureWarning, match="make_certificate_scorer"):
        from smoothlearn.metrics import CertificateScorer

        CertificateScorer(certified_accuracy, radius=0.2)


def test_display_from_predictions_and_from_estimator():
    from .conftest import linear_module

    cert = _fixed()
    from_certs = CertifiedAccuracyDisplay.from_certificates(Y, {"a": cert})
    from_preds = CertifiedAccuracyDisplay.from_predictions(
        Y, cert.label, cert.radius, name="a"
    )
    for a, b in zip(
        from_certs.lines_["a"].get_data(), from_preds.lines_["a"].get_data()
    ):
        np.testing.assert_allclose(a, b)

    rng = np.random.RandomState(0)
    X = rng.randn(30, 2).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    clf = SmoothedClassifier(
        linear_module([1.0, 0.0], 0.0), max_epochs=0, n=300, n0=20, random_state=0
    ).fit(X, y)
    display = CertifiedAccuracyDisplay.from_estimator(clf, X, y)
    expected = CertifiedAccuracyDisplay.from_certificates(y, clf.certify(X))
    for a, b in zip(
        display.lines_["cohen"].get_data(), expected.lines_["cohen"].get_data()
    ):
        np.testing.assert_allclose(a, b)
    both = CertifiedAccuracyDisplay.from_estimator(
        {"s=0.25": clf, "s=0.5": clone_with(clf, sigma=0.5)}, X, y
    )
    assert set(both.lines_) == {"s=0.25", "s=0.5"}


def clone_with(clf, **params):
    import copy

    return copy.deepcopy(clf).set_params(**params)
