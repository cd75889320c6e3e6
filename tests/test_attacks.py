"""The PGD attack on the smoothed soft classifier (smoothlearn.attacks).

On a linear base classifier f(x) = 1[w.x + b > 0] the smoothed probability is
closed-form: p(x) = Phi((w.x + b) / (sigma ||w||)) under gaussian noise, and a
function of x_1 + b alone under l1 families with w = e_1. The strongest
attack in an l2 (l1) ball of radius r moves the margin by r ||w||_2 (r
max|w_j|) towards the boundary. The tests check that the attack finds that
optimum, so that it flips every input closer than r to the boundary and none
that the certificates cover.
"""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from smoothlearn import SmoothedClassifier
from smoothlearn.attacks import (
    AttackResult,
    attack_certified_regions,
    empirical_robust_accuracy,
    project_l1_ball,
    smoothed_pgd_attack,
)
from smoothlearn.metrics import certified_accuracy

from ._factories import FLAT_INPUT_STRATEGIES, fast_classifier, fast_strategy
from .conftest import linear_module

SIGMA = 0.5
RADIUS = 0.25


def _linear(w, b, noise, X, n=20_000):
    y = np.array([0, 1] * (len(X) // 2) + [0] * (len(X) % 2))
    return SmoothedClassifier(
        linear_module(w, b),
        noise=noise,
        sigma=SIGMA,
        max_epochs=0,
        n=n,
        batch_size=20_000,
        random_state=0,
    ).fit(X, y)


def _beside_a_boundary(w, b, n_side=40, seed=0):
    """Inputs at l2 distances 0.02 to 1.5 sigma from w.x + b = 0, both sides."""
    rng = np.random.RandomState(seed)
    unit = w / np.linalg.norm(w)
    signed = np.concatenate(
        [np.linspace(0.02, 1.5, n_side), -np.linspace(0.02, 1.5, n_side)]
    )
    base = rng.randn(len(signed), len(w))
    base -= np.outer(base @ unit + b / np.linalg.norm(w), unit)
    return (base + np.outer(signed * SIGMA, unit)).astype(np.float32)


def test_l2_attack_reaches_the_boundary_and_never_flips_a_certified_input():
    rng = np.random.RandomState(1)
    w, b = rng.randn(5), 0.3
    X = _beside_a_boundary(w, b)
    y = (X @ w + b > 0).astype(int)
    clf = _linear(w, b, "gaussian", X)
    cert = clf.certify(X)
    result = smoothed_pgd_attack(clf, X, y, RADIUS, random_state=0)
    unit = w / np.linalg.norm(w)
    side = np.sign(X @ w + b)
    # the optimum: the whole radius spent against the margin (PGD's normalised
    # steps along the exact gradient direction of a linear truth)
    np.testing.assert_allclose(result.perturbation @ unit * side, -RADIUS, atol=1e-4)
    assert (np.linalg.norm(result.perturbation, axis=1) <= RADIUS).all()
    # the exact smoothed probability of the right class at the attacked point
    margin = ((X + result.perturbation) @ w + b) * side / np.linalg.norm(w)
    p_attacked = stats.norm.cdf(margin / SIGMA)
    certified = ~cert.abstained & (cert.radius >= RADIUS)
    assert certified.sum() >= 40
    # sound certificates: the best attack in the ball stays on the right side
    assert (p_attacked[certified] > 0.5).all()
    assert not result.flips_inside(cert).any()
    # it does flip every input well inside the radius (exact p below 0.45:
    # PREDICT at n = 20,000 decides that against the true class)
    close = p_attacked < 0.45
    assert close.sum() >= 10
    assert (result.attacked_label[close] == 1 - y[close]).all()
    assert not result.robust[close].any()
    assert result.accuracy >= certified_accuracy(y, cert, RADIUS)


@pytest.mark.parametrize("noise", ["uniform", "laplace"])
def test_l1_attack_moves_the_boundary_coordinate_and_never_flips_certified(noise):
    d, b = 6, -0.2
    w = np.eye(d)[0]
    rng = np.random.RandomState(2)
    t = np.concatenate([np.linspace(0.02, 1.5, 30), -np.linspace(0.02, 1.5, 30)])
    X = rng.randn(len(t), d)
    X[:, 0] = t * SIGMA - b
    X = X.astype(np.float32)
    y = (X[:, 0] + b > 0).astype(int)
    clf = _linear(w, b, noise, X)
    cert = clf.certify(X)
    result = smoothed_pgd_attack(clf, X, y, RADIUS, n_restarts=2, random_state=0)
    side = np.sign(X[:, 0] + b)
    # the optimum in the l1 ball: all of it on coordinate 0, against the margin
    np.testing.assert_allclose(result.perturbation[:, 0] * side, -RADIUS, atol=1e-4)
    assert (np.abs(result.perturbation).sum(axis=1) <= RADIUS).all()
    margin = (X[:, 0] + result.perturbation[:, 0] + b) * side
    certified = ~cert.abstained & (cert.radius >= RADIUS)
    assert certified.sum() >= 20
    # every coordinate's noise is symmetric: the attacked point is still on
    # the right side exactly when its margin is positive
    assert (margin[certified] > 0).all()
    assert not result.flips_inside(cert).any()
    close = margin < -0.05 * SIGMA
    assert close.sum() >= 5
    assert (result.attacked_label[close] == 1 - y[close]).all()
    assert result.accuracy >= certified_accuracy(y, cert, RADIUS)


@pytest.fixture(scope="module")
def digits_mlp(digits):
    X, y = digits
    clf = fast_classifier(
        "cohen",
        sigma=0.25,
        n0=50,
        n=2000,
        module__hidden_units=(64,),
        max_epochs=30,
        random_state=0,
    )
    return clf.fit(X[:1000], y[:1000])


def test_no_flip_inside_a_confident_certified_region_of_the_builtin_mlp(
    digits_mlp, digits
):
    X, y = digits
    X, y = X[1000:1100], y[1000:1100]
    cert = digits_mlp.certify(X)
    results = smoothed_pgd_attack(
        digits_mlp, X, y, [0.25, 0.5, 2.0], n_steps=10, n_draws=8, random_state=0
    )
    confident = ~cert.abstained & (cert.p_lower >= 0.7)
    assert confident.sum() >= 50
    for result in results:
        assert not result.flips_inside(cert)[confident].any()
        inside = np.array(
            [cert.contains(i, result.perturbation[i]) for i in range(len(cert))]
        )
        assert result.accuracy >= certified_accuracy(y, cert, result.radius)
    # where the ball is inside no region the attack does flip: it is not idle
    assert results[-1].accuracy < results[0].accuracy - 0.2
    assert not inside[confident].all()


@pytest.mark.parametrize("strategy", FLAT_INPUT_STRATEGIES)
def test_every_strategy_is_attacked_with_its_own_scale(strategy):
    rng = np.random.RandomState(3)
    X = np.concatenate([rng.randn(20, 4) + 1.5, rng.randn(20, 4) - 1.5]).astype(
        np.float32
    )
    y = np.repeat([0, 1], 20)
    noise = "gaussian" if strategy in ("rancer", "rddrs") else "laplace"
    clf = fast_classifier(
        fast_strategy(strategy), noise=noise, sigma=0.5, max_epochs=10
    ).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        cert = clf.certify(X)
    results = smoothed_pgd_attack(
        clf, X, y, [0.0, 0.5, 6.0], n_steps=5, n_draws=4, n_predict=400, random_state=0
    )
    assert all(isinstance(r, AttackResult) for r in results)
    # radius 0: PREDICT at the clean point twice, the same answer
    np.testing.assert_array_equal(results[0].attacked_label, results[0].clean_label)
    assert results[0].norm == cert.norm
    for r in results:
        assert not r.flips_inside(cert).any()
    # a radius far beyond the clusters' gap flips most inputs
    assert results[-1].accuracy < 0.5 * results[0].accuracy


def test_the_attack_is_reproducible_and_runs_where_the_network_runs(digits_mlp, digits):
    X, y = digits
    X, y = X[1100:1120], y[1100:1120]
    params = {"n_steps": 3, "n_draws": 4, "n_predict": 500, "random_state": 7}
    a = smoothed_pgd_attack(digits_mlp, X, y, 0.5, **params)
    b = smoothed_pgd_attack(digits_mlp, X, y, 0.5, **params)
    np.testing.assert_array_equal(a.perturbation, b.perturbation)
    assert empirical_robust_accuracy(digits_mlp, X, y, 0.5, **params) == a.accuracy
    np.testing.assert_array_equal(
        empirical_robust_accuracy(digits_mlp, X, y, [0.5, 0.5], **params),
        [a.accuracy, a.accuracy],
    )


@pytest.mark.parametrize(
    "params, match",
    [
        ({"radius": -1.0}, "radius"),
        ({"radius": [[0.5]]}, "radius"),
        ({"n_steps": 0}, "n_steps"),
        ({"n_restarts": 1.5}, "n_restarts"),
        ({"n_draws": True}, "n_draws"),
        ({"n_predict": 0}, "n_predict"),
        ({"step_size": -0.1}, "step_size"),
    ],
)
def test_bad_parameters_raise_before_any_work(digits_mlp, digits, params, match):
    X, y = digits
    settings = {"radius": 0.5, **params}
    radius = settings.pop("radius")
    with pytest.raises(ValueError, match=match):
        smoothed_pgd_attack(digits_mlp, X[:5], y[:5], radius, **settings)


def test_only_a_fitted_smoothed_classifier_is_attacked(digits):
    from sklearn.linear_model import LogisticRegression

    X, y = digits
    with pytest.raises(TypeError, match="SmoothedClassifier"):
        smoothed_pgd_attack(LogisticRegression(), X[:5], y[:5], 0.5)
    with pytest.raises(ValueError, match="one label per input"):
        smoothed_pgd_attack(fast_classifier().fit(X[:50], y[:50]), X[:5], y[:4], 0.5)


def _projection_by_bisection(v, radius):
    """The l1 projection by bisection on theta in float64 (another algorithm)."""
    if np.abs(v).sum() <= radius:
        return v
    lo, hi = 0.0, np.abs(v).max()
    for _ in range(200):
        theta = (lo + hi) / 2
        if np.maximum(np.abs(v) - theta, 0).sum() > radius:
            lo = theta
        else:
            hi = theta
    return np.sign(v) * np.maximum(np.abs(v) - hi, 0)


@given(
    st.lists(st.floats(-10, 10, allow_nan=False, width=64), min_size=1, max_size=12),
    st.floats(0.01, 5.0),
)
def test_l1_projection_is_the_exact_projection(values, radius):
    v = torch.tensor([values], dtype=torch.float64)
    got = project_l1_ball(v, radius)[0].numpy()
    assert np.abs(got).sum() <= radius or np.abs(values).sum() <= radius
    np.testing.assert_allclose(
        got, _projection_by_bisection(np.array(values), radius), atol=1e-9
    )


def test_the_command_line_prints_the_attack_beside_certified_accuracy(tmp_path, capsys):
    from smoothlearn.__main__ import main

    out = tmp_path / "results"
    args = ["certify", "--n", "500", "--n0", "50", "--n-test", "30"]
    args += ["--max-epochs", "5", "--out", str(out), "--quiet", "--no-plot"]
    assert main([*args, "--attack", "--radii", "0", "0.5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, t in enumerate(lines) if t.startswith("empirical robust"))
    assert "l2 radius R" in lines[start]
    assert lines[start + 1].split() == ["strategy", "R=0", "R=0.5", "flips"]
    certified = lines[start + 2].split()
    attacked = lines[start + 3].split()
    assert certified[:2] == ["cohen", "certified"]
    assert attacked[:2] == ["cohen", "attacked"] and attacked[-1] == "0"
    # at or above certified accuracy at 0.5 (30 inputs, fixed seeds)
    assert float(attacked[3]) >= float(certified[3])
    assert (out / "attack.txt").read_text().splitlines() == lines[start:]


@pytest.mark.parametrize("strategy", ["cohen", "ancer"])
def test_the_region_attack_reaches_each_regions_worst_point_on_a_linear_truth(
    strategy,
):
    # the worst point of the region {x + T u : ||u||_2 <= 1} for the margin
    # w.x + b is at margin - ||T w||_2: PGD in u must get there, and a sound
    # region keeps it on the right side
    rng = np.random.RandomState(4)
    w, b = rng.randn(5), 0.3
    X = _beside_a_boundary(w, b, n_side=15)
    clf = _linear(w, b, "gaussian", X).set_params(
        strategy=fast_strategy(strategy), memory=None
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # memory=None: alone
        cert = clf.certify(X)
    result = attack_certified_regions(clf, X, cert, n_steps=30, random_state=0)
    side = np.sign(X @ w + b)
    margin = (X @ w + b) * side
    attacked = ((X + result.perturbation) @ w + b) * side
    ok = ~cert.abstained
    assert ok.sum() >= 20
    reach = np.array(
        [
            np.linalg.norm(cert.scales.diagonal_or_dense(i, 5) * w) * cert.gap[i]
            if cert.kind != "rotated"
            else 0.0
            for i in range(len(cert))
        ]
    )
    np.testing.assert_allclose(attacked[ok], (margin - reach)[ok], rtol=0, atol=2e-3)
    assert (attacked[ok] > 0).all()
    assert all(cert.contains(i, result.perturbation[i]) for i in np.flatnonzero(ok))
    assert not result.flips_inside(cert).any()
    np.testing.assert_array_equal(result.perturbation[~ok], 0.0)


@pytest.mark.parametrize("strategy", ["cohen", "ancer"])
def test_no_flip_anywhere_in_the_certified_regions_of_the_builtin_mlp(
    digits_mlp, digits, strategy
):
    X, y = digits
    X = X[1000:1064]
    clf = digits_mlp.set_params(strategy=fast_strategy(strategy))
    try:
        cert = clf.certify(X)
        result = attack_certified_regions(
            clf, X, cert, n_steps=10, n_draws=8, random_state=0
        )
    finally:
        digits_mlp.set_params(strategy="cohen")
    assert (~cert.abstained).sum() >= 50
    assert not result.flips_inside(cert).any()
    # the attack does move: the prediction's soft margin falls, so PREDICT
    # abstains on some inputs at their region's edge
    moved = np.linalg.norm(result.perturbation, axis=1)
    assert (moved[~cert.abstained] > 0.5 * cert.radius[~cert.abstained]).all()
    with pytest.raises(ValueError, match="certificates of X"):
        attack_certified_regions(clf, X[:10], cert)


def test_image_inputs_and_ucan_pattern(digits):
    X, y = digits
    X = X.reshape(-1, 1, 8, 8)
    clf = fast_classifier(
        fast_strategy("ucan_pattern"), sigma=0.25, n=500, max_epochs=3
    ).fit(X[:300], y[:300])
    cert = clf.certify(X[300:330])
    results = smoothed_pgd_attack(
        clf, X[300:330], y[300:330], [0.25, 2.0], n_steps=5, n_draws=4, random_state=0
    )
    region = attack_certified_regions(
        clf, X[300:330], cert, n_steps=5, n_draws=4, random_state=0
    )
    assert results[0].perturbation.shape == (30, 64)
    assert not any(r.flips_inside(cert).any() for r in (*results, region))
    assert results[1].accuracy < results[0].accuracy


def test_the_attack_catches_certificates_made_unsound():
    # the same certificates with their gaps tripled claim regions three times
    # too large: both attacks must find the flips the sound ones do not have
    rng = np.random.RandomState(1)
    w, b = rng.randn(5), 0.3
    X = _beside_a_boundary(w, b)
    y = (X @ w + b > 0).astype(int)
    clf = _linear(w, b, "gaussian", X)
    cert = clf.certify(X)
    inflated = cert._replace(gap=cert.gap * 3)
    ball = smoothed_pgd_attack(clf, X, y, RADIUS, random_state=0)
    assert not ball.flips_inside(cert).any()
    assert ball.flips_inside(inflated).sum() >= 10
    region = attack_certified_regions(clf, X, inflated, random_state=0)
    assert region.flips_inside(inflated).mean() > 0.9


def _scaled_linear_pipeline(seed=4):
    """A StandardScaler before a linear truth, on features of spreads 0.1 to
    30: ``(pipe, X, y, w, a)``, ``a`` the scaler's linear part."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.RandomState(seed)
    w, b = rng.randn(4), 0.2
    spread, shift = np.array([0.1, 1.0, 5.0, 30.0]), np.array([0.0, 3.0, -2.0, 10.0])
    Z = _beside_a_boundary(w, b, n_side=30, seed=seed)
    X = Z.astype(np.float64) * spread + shift
    scaler = StandardScaler().fit(X)
    Z = scaler.transform(X)  # the classifier's inputs, on both sides
    y = (Z @ w + b > 0).astype(int)
    classifier = SmoothedClassifier(
        linear_module(w, b),
        sigma=SIGMA,
        max_epochs=0,
        n=20_000,
        batch_size=20_000,
        random_state=0,
    )
    pipe = make_pipeline(scaler, classifier)
    pipe[-1].fit(Z.astype(np.float32), y)  # the scaler fitted above, kept
    return pipe, X, y, w, 1.0 / scaler.scale_


def test_a_pipeline_is_attacked_in_the_units_of_its_inputs():
    """Input units: the optimum of a linear truth behind a scaler is the whole
    radius along ``A w`` (``w.(A delta)`` is largest there), and no input is
    flipped inside its input-units certificate; model units: exactly the
    attack of the last step on the transformed inputs."""
    from smoothlearn import certify_estimator

    pipe, X, y, w, a = _scaled_linear_pipeline()
    params = {"n_steps": 20, "n_draws": 8, "random_state": 0}
    result = smoothed_pgd_attack(pipe, X, y, RADIUS, **params)
    direction = a * w / np.linalg.norm(a * w)
    side = np.sign(pipe[0].transform(X) @ w + 0.2)
    assert result.perturbation.shape == X.shape
    np.testing.assert_allclose(
        result.perturbation, -RADIUS * side[:, None] * direction, atol=1e-4
    )
    assert (np.linalg.norm(result.perturbation, axis=1) <= RADIUS).all()
    cert = certify_estimator(pipe, X)
    assert cert.space == "input"
    assert not result.flips_inside(cert).any()
    certified = ~cert.abstained & (cert.radius >= RADIUS)
    assert result.robust[certified].all()
    # the optimum flips what lies closer than r ||A w|| / ||w|| in the
    # classifier's l2 units, which the attack reaches
    margin = (pipe[0].transform(X) @ w + 0.2) * side / np.linalg.norm(w)
    close = margin < 0.9 * RADIUS * np.linalg.norm(a * w) / np.linalg.norm(w)
    assert close.sum() >= 5
    assert (result.attacked_label[close] == 1 - y[close]).all()

    in_model = smoothed_pgd_attack(pipe, X, y, RADIUS, space="model", **params)
    last = smoothed_pgd_attack(
        pipe[-1], pipe[:-1].transform(X).astype(np.float32), y, RADIUS, **params
    )
    np.testing.assert_array_equal(in_model.perturbation, last.perturbation)
    np.testing.assert_array_equal(in_model.attacked_label, last.attacked_label)
    assert empirical_robust_accuracy(pipe, X, y, RADIUS, **params) == result.accuracy


def test_a_pipeline_step_that_is_no_known_affine_map_is_attacked_in_model_units():
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    pipe, X, y, _, _ = _scaled_linear_pipeline()
    bent = make_pipeline(pipe[0], FunctionTransformer(np.tanh), pipe[-1])
    params = {"n_steps": 2, "n_draws": 4, "n_predict": 200, "random_state": 0}
    with pytest.raises(ValueError, match="FunctionTransformer.*space='model'"):
        smoothed_pgd_attack(bent, X[:4], y[:4], RADIUS, **params)
    result = smoothed_pgd_attack(bent, X[:4], y[:4], RADIUS, space="model", **params)
    assert result.perturbation.shape == (4, 4)
    with pytest.raises(ValueError, match="space"):
        smoothed_pgd_attack(pipe, X[:4], y[:4], RADIUS, space="classifier")
