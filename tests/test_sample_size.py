"""Input-specific sample sizes and sequential decisions keep every guarantee.

The truths are a linear base classifier's: for f(x) = 1[w.x + b > 0] under
isotropic Gaussian noise p_A = Phi(dist / sigma), and the smoothed classifier
is exactly robust to the distance ``dist`` to the boundary, so a certificate
claiming a larger radius (or the wrong class) is a failure of its
``1 - alpha`` guarantee. Soundness is counted over many seeds at a large
``alpha`` (0.1), where failures are frequent enough to count, and a rule that
spends ``alpha`` wrongly is shown to fail the same count.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from smoothlearn import SmoothedClassifier
from smoothlearn.bounds import (
    SMALLEST_SIZE,
    clopper_pearson_lower,
    clopper_pearson_upper,
    expected_gap,
    plan_sample_sizes,
    sample_size_grid,
    sequential_looks,
)
from smoothlearn.metrics import certified_accuracy, certified_accuracy_scorer
from smoothlearn.noise import get_noise

from ._factories import fresh_copy
from .conftest import linear_module

SIGMA = 0.5
W, B = np.array([1.0, -2.0]), 0.1


def _linear_inputs(distances, seed=0):
    """Inputs at signed distances from the boundary of w.x + b, spread along it."""
    unit = W / np.linalg.norm(W)
    rng = np.random.RandomState(seed)
    along = rng.randn(len(distances), 2)
    along -= np.outer(along @ unit, unit)
    on_boundary = along - B * unit / np.linalg.norm(W)
    return (on_boundary + np.outer(distances, unit)).astype(np.float32)


def _linear_classifier(**params):
    params = {"n": 4000, "n0": 100, "batch_size": 4000, **params}
    X = _linear_inputs(np.array([-1.0, 1.0]))
    clf = SmoothedClassifier(linear_module(W, B), sigma=SIGMA, max_epochs=0, **params)
    return clf.fit(X, np.array([0, 1]))


def _failures(cert, X):
    """Certificates wrong about the exact smoothed classifier: a wrong class, or
    a radius beyond the distance to the boundary."""
    signed = (X @ W + B) / np.linalg.norm(W)
    wrong = cert.label != (signed > 0).astype(int)
    return (~cert.abstained) & (wrong | (cert.radius > np.abs(signed) + 1e-9))


def _failure_rate(clf, X, seeds, **certify_params):
    failures = [
        _failures(clf.set_params(random_state=s).certify(X, **certify_params), X)
        for s in seeds
    ]
    return np.mean(failures)


def _binomial_ceiling(alpha, seeds):
    """alpha plus three standard deviations of a failure rate over ``seeds`` calls.

    The inputs of one call share its noise bank, so their failures are
    correlated (for a linear classifier, inputs at one distance fail
    together); the mean over inputs has a standard deviation of at most one
    input's, so the independent trials counted are the seeds.
    """
    return alpha + 3 * np.sqrt(alpha * (1 - alpha) / seeds)


# ----------------------------------------------------------------- the bounds
@pytest.mark.parametrize("noise", ["gaussian", "uniform", "laplace"])
@given(p=st.floats(0.5, 0.999999))
def test_probability_for_gap_inverts_the_gap(noise, p):
    family = get_noise(noise)
    assert family.probability_for_gap(family.gap(p)) == pytest.approx(p, abs=1e-12)


@given(n=st.integers(1, 10**6), data=st.data(), alpha=st.floats(1e-6, 0.4))
def test_clopper_pearson_upper_is_the_mirrored_lower_bound(n, data, alpha):
    k = data.draw(st.integers(0, n))
    upper = clopper_pearson_upper(k, n, alpha)
    assert upper == pytest.approx(1 - clopper_pearson_lower(n - k, n, alpha), abs=1e-12)
    if k < n:  # exact: the binomial's tail at the bound is alpha
        assert stats.binom.cdf(k, n, upper) == pytest.approx(alpha, rel=1e-6)


# ------------------------------------------------------------------ the plan
def _exact_expected_gap(p, n, alpha, family):
    """E[gap] over the binomial count (not its mean): the reference."""
    sd = np.sqrt(n * p * (1 - p))
    ks = np.arange(
        max(0, int(n * p - 10 * sd) - 1), min(n, int(n * p + 10 * sd) + 1) + 1
    )
    lower = clopper_pearson_lower(ks, n, alpha)
    gaps = np.where(lower >= 0.5, family.gap(np.maximum(lower, 0.5)), 0.0)
    return float(np.sum(stats.binom.pmf(ks, n, p) * gaps))


@pytest.mark.parametrize("noise", ["gaussian", "uniform", "laplace"])
@given(p=st.floats(0.55, 0.9999), tolerance=st.sampled_from([0.01, 0.02, 0.05]))
def test_a_plan_keeps_the_exact_expected_radius_within_its_tolerance(
    noise, p, tolerance
):
    # a pilot so large that the posterior is p itself: the plan's size keeps
    # the exact expected gap (binomial sum, not the plug-in count) within the
    # tolerance, and one grid step less would not keep the plug-in gap
    family, n, alpha = get_noise(noise), 20_000, 0.001
    n_pilot = 10**8
    (size,) = plan_sample_sizes(
        [round(p * n_pilot)], n_pilot, n, alpha, tolerance, family
    )
    grid = sample_size_grid(n)
    assert size in grid
    full = _exact_expected_gap(p, n, alpha, family)
    kept = _exact_expected_gap(p, size, alpha, family)
    assert kept >= (1 - tolerance) * full - 0.002 * full - 1e-9
    smaller = grid[grid < size]
    if len(smaller):
        assert expected_gap(p, smaller[-1], alpha, family) < (1 - tolerance) * (
            expected_gap(p, n, alpha, family)
        )


def test_plans_spend_little_on_clear_inputs_and_all_near_one_half_and_one():
    family = get_noise("gaussian")
    sizes = plan_sample_sizes(
        [0, 30, 52, 80, 90, 100], 100, 100_000, 0.001, 0.01, family
    )
    grid = sample_size_grid(100_000)
    assert sizes[0] == sizes[1] == grid[0] >= SMALLEST_SIZE  # will abstain
    assert sizes[2] > 80_000  # near 1/2 the radius is tiny: nearly every draw counts
    assert sizes[3] < 60_000 and sizes[4] < 60_000  # the middle saves most
    assert sizes[5] > sizes[4]  # near 1 the bound keeps growing with n
    looser = plan_sample_sizes([90], 100, 100_000, 0.001, 0.05, family)
    assert looser[0] < sizes[4]


def test_sequential_looks_halve_from_n_and_spend_alpha_exactly():
    looks, alphas = sequential_looks(100_000, 0.001)
    assert looks[-1] == 100_000 and looks[0] == 390
    np.testing.assert_array_equal(looks[1:] // 2, looks[:-1])
    assert alphas.sum() == pytest.approx(0.001, rel=1e-12)
    assert alphas[-1] == 0.0005
    single, level = sequential_looks(400, 0.01)
    assert single.tolist() == [400] and level.tolist() == [0.01]


# ------------------------------------------------------- soundness, by counting
def test_adaptive_certificates_fail_no_more_often_than_alpha():
    alpha = 0.1
    # from near the boundary (p_A near 1/2, where plans take every draw) to
    # far out (p_A near 1, where they take every draw again), both sides,
    # and the middle where the pilot's plan varies most
    distances = np.concatenate([[0.02, 0.05, 0.1, 0.2], np.linspace(0.3, 1.6, 16)])
    X = _linear_inputs(np.concatenate([distances, -distances]) * SIGMA)
    clf = _linear_classifier(alpha=alpha, radius_tolerance=0.05)
    seeds = range(300)
    rate = _failure_rate(clf, X, seeds)
    assert rate <= _binomial_ceiling(alpha, len(seeds))
    cert = clf.set_params(random_state=0).certify(X)
    assert len(np.unique(cert.n_draws)) > 2  # the plans did vary


def test_sequential_decisions_fail_no_more_often_than_alpha(monkeypatch):
    alpha, radius = 0.1, 0.5 * SIGMA
    # just inside the radius: the hardest, a false "certified" needs only a
    # small overshoot at any of the six looks
    distances = np.array([0.98, 0.99, 0.995]) * radius
    X = _linear_inputs(np.concatenate([distances, -distances]))
    clf = _linear_classifier(alpha=alpha, n=16_000, batch_size=16_000)
    seeds = range(300)
    ceiling = _binomial_ceiling(alpha, len(seeds))
    assert _failure_rate(clf, X, seeds, radius=radius) <= ceiling
    # the count can fail: the same looks with the whole alpha at each look
    import smoothlearn.bounds

    def unspent(n, alpha, multiple=1):
        looks, _ = sequential_looks(n, alpha, multiple)
        return looks, np.full(len(looks), alpha)

    monkeypatch.setattr(smoothlearn.bounds, "sequential_looks", unspent)
    assert _failure_rate(clf, X, seeds, radius=radius) > ceiling


# -------------------------------------------------------------- what they cost
def test_fixed_certificates_record_n_and_adaptive_ones_their_own_size():
    distances = np.linspace(-1.5, 1.5, 24) * SIGMA
    X = _linear_inputs(distances)
    clf = _linear_classifier(n=20_000, random_state=0)
    fixed = clf.certify(X)
    assert (fixed.n_draws == 20_000).all()
    adaptive = clf.set_params(radius_tolerance=0.02).certify(X)
    assert set(adaptive.n_draws) <= set(sample_size_grid(20_000))
    assert adaptive.n_draws.mean() < 0.6 * 20_000
    # the same selection draws, so the same classes; bounds from fewer draws
    np.testing.assert_array_equal(
        adaptive.label[~fixed.abstained], fixed.label[~fixed.abstained]
    )
    assert adaptive.to_frame()["n_draws"].tolist() == adaptive.n_draws.tolist()


def test_sequential_decisions_agree_with_the_full_certificate_away_from_the_radius():
    radius = 0.5 * SIGMA
    far = np.concatenate([np.linspace(0.1, 0.5, 6), np.linspace(1.6, 3.0, 6)])
    X = _linear_inputs(np.concatenate([far, -far]) * radius)
    clf = _linear_classifier(n=20_000, batch_size=20_000, random_state=3)
    full = clf.certify(X)
    decided = clf.certify(X, radius=radius)
    np.testing.assert_array_equal(decided.radius >= radius, full.radius >= radius)
    assert certified_accuracy(
        (X @ W + B > 0).astype(int), decided, radius
    ) == certified_accuracy((X @ W + B > 0).astype(int), full, radius)
    looks, _ = sequential_looks(20_000, clf.alpha)
    assert set(decided.n_draws) <= set(looks)
    assert decided.n_draws.mean() < 20_000 / 5


def test_sequential_certificates_are_valid_certificates_of_their_look():
    X = _linear_inputs(np.linspace(-2, 2, 16) * SIGMA)
    clf = _linear_classifier(random_state=1)
    decided = clf.certify(X, radius=0.3)
    looks, alphas = sequential_looks(clf.n, clf.alpha)
    level = dict(zip(looks.tolist(), alphas.tolist()))
    # the bound recorded is a Clopper-Pearson bound at the look's level for
    # some count: inverting it gives an integer count
    for i in np.flatnonzero(~decided.abstained):
        m = decided.n_draws[i]
        ks = np.arange(m + 1)
        bounds = clopper_pearson_lower(ks, m, level[int(m)])
        assert np.isclose(bounds, decided.p_lower[i], rtol=0, atol=1e-12).any()


# ---------------------------------------------------- the rest of the estimator
@pytest.fixture
def fitted_dd(fitted_isotropic_dd):
    """The shared digits classifier, certifying with n = 2,000 from a pilot of 100."""
    return fresh_copy(fitted_isotropic_dd, n=2000, n0=100)


@pytest.mark.parametrize("mode", [{"radius_tolerance": 0.05}, {"radius": 0.2}])
def test_adaptive_runs_go_through_the_memory_workers_and_checkpoints(
    fitted_dd, digits, tmp_path, mode
):
    X, _ = digits
    X = X[400:560]
    tolerance = mode.get("radius_tolerance")
    kwargs = {k: v for k, v in mode.items() if k == "radius"}
    one = fresh_copy(fitted_dd, radius_tolerance=tolerance)
    cert = one.certify(X, **kwargs)
    # every answer given is remembered, as in a full certification
    assert one.memory_.n_seen_ == len(X)
    assert one.memory_.n_entries_ == int((~cert.abstained).sum())
    assert (cert.n_draws < 2000).any()
    two = fresh_copy(fitted_dd, radius_tolerance=tolerance, n_jobs=2).certify(
        X, **kwargs
    )
    np.testing.assert_array_equal(cert.label, two.label)
    np.testing.assert_array_equal(cert.n_draws, two.n_draws)
    np.testing.assert_allclose(cert.radius, two.radius, rtol=1e-4)
    path = tmp_path / "run.jsonl"
    logged = fresh_copy(fitted_dd, radius_tolerance=tolerance).certify(
        X, checkpoint=path, **kwargs
    )
    resumed = fresh_copy(fitted_dd, radius_tolerance=tolerance).certify(
        X, checkpoint=path, **kwargs
    )
    np.testing.assert_array_equal(logged.n_draws, resumed.n_draws)
    np.testing.assert_array_equal(logged.p_lower, resumed.p_lower)
    with pytest.raises(ValueError, match="another run"):
        other = {"radius": 0.3} if "radius" in kwargs else {}
        fresh_copy(fitted_dd, radius_tolerance=0.1 if tolerance else None).certify(
            X, checkpoint=path, **other
        )


@pytest.mark.parametrize("radius", [-0.1, float("nan"), float("inf"), "0.5"])
def test_a_bad_radius_raises_before_any_work_and_changes_nothing(
    fitted_dd, digits, radius
):
    X, _ = digits
    clf = fresh_copy(fitted_dd)
    clf.certify(X[400:410])
    seen = clf.memory_.n_seen_
    with pytest.raises(ValueError, match="radius"):
        clf.certify(X[400:410], radius=radius)
    assert clf.memory_.n_seen_ == seen


@pytest.mark.parametrize("tolerance", [0.0, 1.0, -0.5, "0.01"])
def test_a_bad_radius_tolerance_raises_in_fit_and_in_certify(
    fitted_dd, digits, tolerance
):
    X, y = digits
    with pytest.raises((ValueError, TypeError), match="radius_tolerance"):
        SmoothedClassifier(radius_tolerance=tolerance).fit(X[:20], y[:20])
    clf = fresh_copy(fitted_dd)
    clf.certify(X[400:410])
    seen = clf.memory_.n_seen_
    clf.set_params(radius_tolerance=tolerance)
    with pytest.raises((ValueError, TypeError), match="radius_tolerance"):
        clf.certify(X[400:410])
    assert clf.memory_.n_seen_ == seen


def test_the_certified_accuracy_scorer_decides_sequentially(monkeypatch):
    X = _linear_inputs(np.linspace(-2, 2, 20) * SIGMA)
    y = (X @ W + B > 0).astype(int)
    clf = _linear_classifier(random_state=0)
    calls = []
    original = SmoothedClassifier.certify

    def certify(self, X, **kwargs):
        calls.append(kwargs)
        return original(self, X, **kwargs)

    monkeypatch.setattr(SmoothedClassifier, "certify", certify)
    score = certified_accuracy_scorer(radius=0.25)(clf, X, y)
    assert calls == [{"radius": 0.25}]
    expected = certified_accuracy(y, original(clf, X, radius=0.25), 0.25)
    assert score == expected
    calls.clear()
    certified_accuracy_scorer(radius=0.25, sequential=False)(clf, X, y)
    assert calls == [{}]


def test_a_model_saved_before_radius_tolerance_existed_loads_with_its_default():
    clf = _linear_classifier()
    state = clf.__getstate__()
    del state["radius_tolerance"]
    loaded = SmoothedClassifier.__new__(SmoothedClassifier)
    loaded.__setstate__(state)
    assert loaded.radius_tolerance is None
    assert loaded.get_params()["n"] == 4000
