"""Metrics papers report beside certified accuracy: its confidence interval,
the l-inf accuracy l2 and l1 certificates imply, the distribution of p_lower,
and the comparison of two certificate sets."""

import matplotlib
import numpy as np
import pytest
from scipy import stats

from smoothlearn import Certificates
from smoothlearn.metrics import (
    PLowerDisplay,
    assert_certificates_equal,
    certified_accuracy,
    certified_accuracy_interval,
    compare_certificates,
    linf_certified_accuracy,
    linf_certified_radius,
    p_lower_distribution,
)

matplotlib.use("Agg")


def _certificates(n, correct, radius, d=4, noise="gaussian", scale=None):
    """``n`` certificates of class 0, the first ``correct`` right (y = 0)."""
    radius = np.broadcast_to(np.asarray(radius, dtype=np.float64), (n,))
    c = (
        1.0
        if noise == "gaussian"
        else {"uniform": np.sqrt(3), "laplace": 0.5**0.5}[noise]
    )
    scale = np.ones(n) if scale is None else scale
    smallest = scale if scale.ndim == 1 else scale.min(axis=1)
    label = np.where(np.arange(n) < correct, 0, 1)
    return Certificates(
        label=label,
        abstained=np.zeros(n, dtype=bool),
        p_lower=np.linspace(0.55, 0.999, n),
        gap=radius / (c * smallest),
        center=np.zeros((n, d)),
        scale=scale,
        noise=noise,
    ), np.zeros(n, dtype=int)


# ------------------------------------------------------------------ intervals
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_clopper_pearson_interval_is_scipys_exact_binomial_interval(confidence):
    for n, k in [(40, 0), (40, 13), (40, 40), (7, 3), (500, 421)]:
        cert, y = _certificates(n, k, 1.0)
        got = certified_accuracy_interval(y, cert, 0.5, confidence=confidence)
        ref = stats.binomtest(k, n).proportion_ci(confidence, method="exact")
        assert got.estimate == k / n
        # scipy's (found by root search to about 1e-12), up to the margin
        # that puts each end on its side of the exact value (checked against
        # 50 digits in test_bound_rounding.py)
        assert got.low == pytest.approx(ref.low, abs=1e-11)
        assert got.high == pytest.approx(ref.high, abs=1e-11)
        assert got.n_samples == n and got.method == "clopper-pearson"


def test_clopper_pearson_interval_covers_at_least_its_confidence_exactly():
    # the coverage of an interval rule is a finite sum over the binomial's k
    n, confidence = 30, 0.9
    intervals = []
    for k in range(n + 1):
        cert, y = _certificates(n, k, 1.0)
        r = certified_accuracy_interval(y, cert, confidence=confidence)
        intervals.append((r.low, r.high))
    low, high = np.array(intervals).T
    for p in np.linspace(0.01, 0.99, 41):
        covered = (low <= p) & (p <= high)
        coverage = stats.binom.pmf(np.arange(n + 1), n, p)[covered].sum()
        assert coverage >= confidence - 1e-12


def test_intervals_per_radius_and_the_bootstrap():
    radius = np.concatenate([np.full(60, 0.8), np.full(60, 0.3), np.zeros(80)])
    cert, y = _certificates(200, 200, radius)
    radii = [0.0, 0.25, 0.5, 1.0]
    cp = certified_accuracy_interval(y, cert, radii)
    np.testing.assert_allclose(cp.estimate, certified_accuracy(y, cert, radii))
    assert (cp.low <= cp.estimate).all() and (cp.estimate <= cp.high).all()
    boot = certified_accuracy_interval(
        y, cert, radii, method="bootstrap", n_resamples=500, random_state=0
    )
    again = certified_accuracy_interval(
        y, cert, radii, method="bootstrap", n_resamples=500, random_state=0
    )
    np.testing.assert_array_equal(boot.low, again.low)
    # 200 inputs: the percentile bootstrap is within a few points of the exact one
    np.testing.assert_allclose(boot.low[1:3], cp.low[1:3], atol=0.03)
    np.testing.assert_allclose(boot.high[1:3], cp.high[1:3], atol=0.03)
    assert "clopper-pearson" in repr(cp)


@pytest.mark.parametrize(
    "params", [{"confidence": 1.0}, {"confidence": 0}, {"method": "wald"}]
)
def test_interval_parameters_are_checked(params):
    cert, y = _certificates(5, 3, 1.0)
    with pytest.raises(ValueError):
        certified_accuracy_interval(y, cert, **params)


# --------------------------------------------------------------------- l-inf
@pytest.mark.parametrize("noise", ["gaussian", "uniform", "laplace"])
@pytest.mark.parametrize("diagonal", [False, True])
def test_the_implied_linf_ball_is_inside_each_region_and_the_largest(noise, diagonal):
    d = 9
    rng = np.random.RandomState(0)
    scale = rng.uniform(0.5, 2.0, (6, d)) if diagonal else rng.uniform(0.5, 2.0, 6)
    cert, y = _certificates(
        6, 6, rng.uniform(0.1, 2.0, 6), d=d, noise=noise, scale=scale
    )
    t = linf_certified_radius(cert)
    factor = np.sqrt(d) if cert.norm == "l2" else d
    np.testing.assert_allclose(t, cert.radius / factor, rtol=1e-14)
    for i in range(6):
        # every corner of the cube of half-width t lies in the region
        signs = rng.choice([-1.0, 1.0], size=(64, d))
        assert cert.contains(i, t[i] * signs).all()
        if not diagonal:  # isotropic: a slightly larger cube's corner does not
            assert not cert.contains(i, t[i] * (1 + 1e-9) * np.ones(d))
    assert linf_certified_accuracy(y, cert, t.min()) == 1.0
    np.testing.assert_allclose(
        linf_certified_accuracy(y, cert, [0.0, 0.05, 0.1]),
        certified_accuracy(y, cert, np.array([0.0, 0.05, 0.1]) * factor * (1 + 1e-12)),
    )


def test_linf_radius_is_zero_where_abstained():
    cert, y = _certificates(3, 3, 1.0)
    cert.abstained[1] = True
    assert linf_certified_radius(cert)[1] == 0.0


# ---------------------------------------------------------- p_lower (Sun et al.)
def test_p_lower_distribution_by_outcome():
    cert, y = _certificates(10, 6, 0.5)
    cert.abstained[9] = True
    cert.p_lower[9] = 0.3
    dist = p_lower_distribution(y, cert, levels=[0.0, 0.5, 1.0])
    p = cert.p_lower
    np.testing.assert_array_equal(dist.p_lower["correct"], p[:6])
    np.testing.assert_array_equal(dist.p_lower["wrong"], p[6:9])
    np.testing.assert_array_equal(dist.p_lower["abstained"], [0.3])
    np.testing.assert_allclose(
        dist.quantiles["correct"], [p[0], np.median(p[:6]), p[5]]
    )
    assert dist.share_at_least(p[3]) == pytest.approx(0.3)
    np.testing.assert_allclose(dist.share_at_least([0.0, 1.0]), [0.6, 0.0])
    empty = p_lower_distribution(np.ones(10, int) * 7, cert)
    assert np.isnan(empty.quantiles["correct"]).all()


def test_p_lower_display_draws_every_input_once():
    cert, y = _certificates(40, 25, 0.5)
    cert.abstained[-5:] = True
    display = PLowerDisplay.from_certificates(y, cert, bins=10, name="cohen")
    drawn = sum(sum(bar.get_height() for bar in bars) for bars in display.bars_)
    assert drawn == 40 and len(display.bars_) == 3
    assert display.ax_.get_title().startswith("cohen")
    again = PLowerDisplay.from_predictions(
        y, cert.label, cert.p_lower, abstained=cert.abstained, bins=10
    )
    for a, b in zip(display.bars_, again.bars_):
        np.testing.assert_array_equal(
            [r.get_height() for r in a], [r.get_height() for r in b]
        )
    with pytest.raises(ValueError, match="bins"):
        PLowerDisplay.from_certificates(y, cert, bins=0)


def test_p_lower_display_from_an_estimator(digits):
    from ._factories import fast_classifier

    X, y = digits
    clf = fast_classifier(max_epochs=5).fit(X[:200], y[:200])
    display = PLowerDisplay.from_estimator(clf, X[200:230], y[200:230])
    assert display.distribution.n_samples == 30


# ------------------------------------------------------------------- compare
def test_compare_certificates_reports_the_first_differences():
    a, _ = _certificates(8, 8, np.linspace(0.1, 0.8, 8), scale=np.ones((8, 4)))
    assert compare_certificates(a, a)
    assert_certificates_equal(a, a[np.arange(8)])
    b = a._replace(label=np.where(np.arange(8) == 5, 1, a.label))
    result = compare_certificates(b, a)
    assert not result and "label: 1 of 8 rows differ: [5] 1 != 0" in str(result)
    with pytest.raises(AssertionError, match=r"label: 1 of 8 rows differ: \[5\]"):
        assert_certificates_equal(b, a)
    scale = a.scale.copy()
    scale[2, 3] *= 1 + 1e-6
    c = a._replace(scale=scale)
    # a longer axis leaves the inscribed radius alike, not the proxy radius
    # (a volume) nor the region
    labels_and_radii = str(compare_certificates(c, a, regions=False))
    assert "proxy_radius: 1 of 8 rows differ: [2]" in labels_and_radii
    assert "radius: 1 of" not in labels_and_radii.replace("proxy_radius", "")
    assert "scale" not in labels_and_radii
    report = str(compare_certificates(c, a))
    assert "scale.values: 1 of 8 rows differ: 2" in report
    assert compare_certificates(c, a, rtol=1e-5)
    assert not compare_certificates(a[:7], a)
    with pytest.raises(ValueError, match="rtol"):
        compare_certificates(a, a, rtol=-1)
