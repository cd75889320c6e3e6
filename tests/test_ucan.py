"""UCAN's pattern-fixed anisotropic noise."""

import pickle
import warnings

import numpy as np
import pytest
import torch

from smoothlearn import SmoothedClassifier
from smoothlearn.estimators._noisy_net import _per_row
from smoothlearn.strategies import UCANInput, UCANPattern, UCANUniversal
from smoothlearn.strategies.ucan_pattern import spatial_pattern

from ._factories import linear_classifier
from .conftest import linear_module


@pytest.mark.parametrize("p", [1, 2, np.inf])
@pytest.mark.parametrize("size", [(7, 7), (8, 8), (5, 9)])
def test_pattern_has_geometric_mean_one_and_its_minimum_at_the_centre(p, size):
    m = spatial_pattern(*size, p=p)
    assert np.exp(np.log(m).mean()) == pytest.approx(1.0, abs=1e-12)
    h, w = size
    centre = m[(h - 1) // 2 : h // 2 + 1, (w - 1) // 2 : w // 2 + 1]
    assert centre.max() == pytest.approx(m.min())


@pytest.mark.parametrize("p, ratio", [(2, 3.0), (np.inf, 2.0), (1, 5.0)])
def test_default_pattern_is_materially_anisotropic(p, ratio):
    m = spatial_pattern(7, 7, p=p)  # odd size: a true centre pixel
    assert m[0, 0] / m[3, 3] == pytest.approx(ratio)


def test_flat_inputs_get_a_clear_error(digits):
    X, y = digits
    with pytest.raises(ValueError, match=r"\(n_samples, C, H, W\)"):
        SmoothedClassifier(strategy="ucan_pattern", max_epochs=1).fit(X[:20], y[:20])


@pytest.mark.parametrize("noise", ["gaussian", "uniform", "laplace"])
def test_pattern_certificates_are_sound_on_a_linear_classifier(noise):
    rng = np.random.RandomState(0)
    shape = (1, 5, 5)
    d = 25
    w = rng.randn(d)
    X = rng.randn(30, *shape).astype(np.float32)
    clf = SmoothedClassifier(
        torch.nn.Sequential(torch.nn.Flatten(), linear_module(w, 0.1)),
        strategy="ucan_pattern",
        noise=noise,
        sigma=0.3,
        max_epochs=0,
        n=20_000,
        random_state=0,
    ).fit(X[:2], [0, 1])
    cert = clf.certify(X)
    flat = X.reshape(30, -1)
    margin = np.abs(flat @ w + 0.1)
    ok = ~cert.abstained
    assert ok.mean() > 0.7 and cert.kind == "diagonal"
    multipliers = UCANPattern().multipliers(shape).reshape(-1)
    # the recorded scale is the float32 pattern the engine ran
    expected = np.tile(0.3 * multipliers, (30, 1)).astype(np.float32)
    np.testing.assert_array_equal(cert.scale, expected.astype(np.float64))
    rho = cert.c * cert.gap
    if noise == "gaussian":
        reach = rho * np.linalg.norm(cert.scale * w, axis=1)
    else:
        reach = rho * np.max(np.abs(w) * cert.scale, axis=1)
    assert (reach[ok] <= margin[ok]).all()
    # UCAN Corollary 3.3: the inscribed radius is min sigma_i * R; proxy radius is ALM
    np.testing.assert_allclose(cert.radius[ok], rho[ok] * cert.scale[ok].min(axis=1))
    # geometric mean of the pattern is 1 (up to its float32 rounding)
    np.testing.assert_allclose(cert.proxy_radius[ok], rho[ok] * 0.3, rtol=1e-7)


def test_training_uses_the_pattern_and_parameters_are_tunable(digits):
    X, y = digits
    X = X.reshape(-1, 1, 8, 8)
    clf = SmoothedClassifier(
        strategy=UCANPattern(border_weight=2.0, p="inf"),
        sigma=0.2,
        n=300,
        max_epochs=2,
        random_state=0,
    ).fit(X[:200], y[:200])
    expected = 0.2 * UCANPattern(border_weight=2.0, p="inf").multipliers((1, 8, 8))
    np.testing.assert_allclose(clf.net_.noise_scale.numpy(), expected, rtol=1e-6)
    assert clf.get_params()["strategy__border_weight"] == 2.0
    assert clf.certify(X[200:204]).kind == "diagonal"


# ---------------------------------------------------------------- generators
def _trained_linear(strategy, noise, shape, seed=0):
    """A linear base classifier trained with a UCAN generator on separable data."""
    rng = np.random.RandomState(seed)
    d = int(np.prod(shape))
    w_true = rng.randn(d)
    X = rng.randn(300, *shape).astype(np.float32)
    y = (X.reshape(300, -1) @ w_true > 0).astype(int)
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(d, 2))
    clf = SmoothedClassifier(
        module,
        strategy=strategy,
        noise=noise,
        sigma=0.3,
        max_epochs=4,
        lr=0.02,
        n=20_000,
        random_state=seed,
    ).fit(X, y)
    layer = clf.net_.module_[1]
    w = (layer.weight[1] - layer.weight[0]).detach().double().numpy()
    b = float((layer.bias[1] - layer.bias[0]).detach())
    return clf, X[:40], w, b


@pytest.mark.parametrize("noise", ["gaussian", "uniform", "laplace"])
@pytest.mark.parametrize(
    "strategy, shape",
    [
        # a light variance term: on separable data the defaults saturate every
        # multiplier at gamma, and the test wants anisotropic noise
        (UCANUniversal(variance_weight=0.01, lr=None), (25,)),
        # the generator's noise as the paper certifies it (compare_draws=0):
        # the comparison with the start has a test of its own
        (UCANInput(variance_weight=0.01, lr=None, compare_draws=0), (25,)),
        (UCANInput(variance_weight=0.01, lr=None, compare_draws=0), (1, 5, 5)),
    ],
    ids=["universal", "input-flat", "input-image"],
)
def test_generator_certificates_are_sound_on_a_linear_classifier(
    strategy, shape, noise
):
    clf, X, w, b = _trained_linear(strategy, noise, shape)
    offset, scale = clf.noise_parameters(X)
    assert np.ptp(scale) > 1e-3  # the trained generator made the noise anisotropic
    cert = clf.certify(X)
    flat = X.reshape(len(X), -1).astype(np.float64)
    # g(x') = 1[w.(x' + mu) + b > 0]: the offset shifts the smoothed boundary,
    # the region stays centred on x
    shifted = flat @ w + offset.reshape(len(X), -1) @ w + b
    ok = ~cert.abstained
    assert ok.mean() > 0.6
    np.testing.assert_array_equal(cert.label[ok], (shifted[ok] > 0).astype(int))
    np.testing.assert_allclose(cert.center, flat, rtol=0, atol=0)
    np.testing.assert_allclose(cert.scale, scale.reshape(len(X), -1), rtol=1e-6)
    rho = cert.c * cert.gap
    if noise == "gaussian":
        reach = rho * np.linalg.norm(cert.scale * w, axis=1)
    else:
        reach = rho * np.max(np.abs(w) * cert.scale, axis=1)
    assert (reach[ok] <= np.abs(shifted[ok])).all()
    # UCAN Corollary 3.3 (inscribed radius) and the ALM (proxy radius)
    np.testing.assert_allclose(cert.radius[ok], rho[ok] * cert.scale[ok].min(axis=1))
    alm = rho * np.exp(np.log(cert.scale).mean(axis=1))
    np.testing.assert_allclose(cert.proxy_radius[ok], alm[ok], rtol=1e-9)


def test_universal_generator_raises_mean_sigma_and_keeps_accuracy(digits):
    """Trained on digits, the universal generator raises the mean noise by more than
    half while the smoothed accuracy stays within 5 points of the isotropic net's."""
    X, y = digits
    fit = {"sigma": 0.25, "max_epochs": 20, "n": 2000, "random_state": 0}
    cohen = SmoothedClassifier(**fit).fit(X[:1500], y[:1500])
    ucan = SmoothedClassifier(strategy="ucan_universal", **fit).fit(X[:1500], y[:1500])
    offset, scale = ucan.noise_parameters(X[1500:1501])
    assert scale.mean() > 1.5 * 0.25
    assert (scale <= 0.25 * 5.0).all() and (scale >= 0.25 * 0.05).all()
    assert ucan.strategy_.generator_ is ucan.noise_generator_
    acc = [(clf.predict(X[1500:1700]) == y[1500:1700]).mean() for clf in (cohen, ucan)]
    assert acc[1] >= acc[0] - 0.05, acc


def test_input_generator_is_data_dependent_and_memory_checked(digits):
    X, y = digits
    # the generator's own noise (compare_draws=0): two epochs' generator
    # certifies less than sigma, which the comparison would pick everywhere
    clf = SmoothedClassifier(
        strategy=UCANInput(compare_draws=0), max_epochs=2, n=500, random_state=0
    ).fit(X[:300], y[:300])
    assert clf.strategy_.data_dependent
    cert = clf.certify(X[300:340])
    assert clf.memory_.n_seen_ == 40
    assert cert.kind == "diagonal"
    offset, scale = clf.noise_parameters(X[300:302])
    assert not np.allclose(scale[0], scale[1])  # one scale per input
    with pytest.warns(UserWarning, match="not sound"):
        clf.set_params(memory=None).certify(X[300:302])


def test_generator_parameters_are_tunable_and_validated(digits):
    X, y = digits
    clf = SmoothedClassifier(strategy=UCANUniversal(), max_epochs=3, n=200)
    clf.set_params(
        strategy__max_multiplier=2.0, strategy__min_multiplier=0.5, random_state=0
    )
    assert clf.get_params()["strategy__max_multiplier"] == 2.0
    clf.fit(X[:200], y[:200])
    assert clf.noise_generator_.bounds.gamma == 2.0
    _, scale = clf.noise_parameters(X[:1])
    assert (scale > 0.25 * 0.5).all() and (scale < 0.25 * 2.0).all()
    bad = SmoothedClassifier(
        strategy=UCANInput(max_multiplier=1.0, min_multiplier=1.0), max_epochs=1
    )
    with pytest.raises(
        ValueError, match="min_multiplier must be smaller than max_multiplier"
    ):
        bad.fit(X[:20], y[:20])
    assert not hasattr(bad, "net_")


def test_generators_are_saved_and_restored_with_the_estimator(digits, tmp_path):
    X, y = digits
    clf = SmoothedClassifier(
        strategy="ucan_input", max_epochs=2, n=500, random_state=0
    ).fit(X[:200], y[:200])
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps(clf))
    restored = pickle.loads(path.read_bytes())
    for a, b in zip(
        clf.noise_generator_.state_dict().values(),
        restored.noise_generator_.state_dict().values(),
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert restored.strategy_.generator_ is restored.noise_generator_
    first, second = clf.certify(X[200:210]), restored.certify(X[200:210])
    np.testing.assert_array_equal(first.label, second.label)
    np.testing.assert_array_equal(first.scale, second.scale)


def test_other_training_methods_see_per_input_noise(digits):
    """Consistency, MACER and SmoothAdv draw noise for copies of the batch; an
    input-dependent scale must follow each input to its copies."""
    base = torch.arange(3.0).reshape(3, 1) + torch.zeros(3, 4)
    flat = _per_row(base, (6, 4), 3)  # input-major copies, as training._repeat
    np.testing.assert_array_equal(flat[:, 0].numpy(), [0, 0, 1, 1, 2, 2])
    stacked = _per_row(base, (3, 2, 4), 3)
    assert stacked.shape == (3, 1, 4) and stacked[2, 0, 0] == 2
    assert _per_row(base[:1], (6, 4), 3).shape == (1, 4)
    X, y = digits
    for training in ("consistency", "macer", "smoothadv"):
        SmoothedClassifier(
            strategy="ucan_input", training=training, max_epochs=1, n=100
        ).fit(X[:64], y[:64])


def test_noise_map_display_shows_sigma_and_mu(digits):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from smoothlearn.inspection import NoiseMapDisplay

    X, y = digits
    X = X.reshape(-1, 1, 8, 8)
    clf = SmoothedClassifier(
        strategy="ucan_input", max_epochs=2, n=200, random_state=0
    ).fit(X[:200], y[:200])
    display = NoiseMapDisplay.from_estimator(clf, X[:3])
    assert display.axes_.shape == (3, 3)
    _, scale = clf.noise_parameters(X[:3])
    np.testing.assert_allclose(display.images_[1, 1].get_array(), scale[1, 0])
    cohen = SmoothedClassifier(max_epochs=1, n=200).fit(X[:100], y[:100])
    assert NoiseMapDisplay.from_estimator(cohen, X[:2]).axes_.shape == (2, 2)


def test_a_new_generator_strategy_after_fit_is_refused_not_ignored(digits):
    X, y = digits
    clf = SmoothedClassifier(
        strategy=UCANUniversal(), max_epochs=1, n=200, n0=20, random_state=0
    ).fit(X[:100], y[:100])
    before = clf.certify(X[:2])
    # the same parameters (a new object) are the fitted generator
    clf.set_params(strategy=UCANUniversal())
    np.testing.assert_array_equal(clf.certify(X[:2]).radius, before.radius)
    # other parameters would need another trained generator
    clf.set_params(strategy=UCANUniversal(max_multiplier=3.0))
    with pytest.raises(ValueError, match="trained in fit; refit"):
        clf.certify(X[:2])
    clf.set_params(strategy__max_multiplier=4.0)
    with pytest.raises(ValueError, match="trained in fit; refit"):
        clf.predict(X[:2])


@pytest.mark.parametrize("strategy", ["ucan_universal", "ucan_input"])
def test_random_state_fixes_the_generator_whatever_torch_ran_before(digits, strategy):
    # the generator's initial weights come from the seeded RNG of fit, not from
    # the global torch RNG (which the caller's earlier work moves)
    X, y = digits
    X = X.reshape(-1, 1, 8, 8)

    def fitted_generator():
        torch.randn(7)  # the caller's own use of torch
        clf = SmoothedClassifier(strategy=strategy, max_epochs=0, random_state=3)
        return clf.fit(X[:50], y[:50]).noise_generator_.state_dict()

    first, second = fitted_generator(), fitted_generator()
    for a, b in zip(first.values(), second.values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _overshooting_ucan(compare_draws, w):
    """ucan_input on a linear classifier, its generator held at multipliers 10-12
    (scales 3 to 3.6 for sigma 0.3) and no offset: a generator gone wrong."""
    strategy = UCANInput(
        min_multiplier=10.0,
        max_multiplier=12.0,
        offset_bound=0.0,
        compare_draws=compare_draws,
    )
    return linear_classifier(w, 0.0, "gaussian", strategy, memory=None)


def test_ucan_input_is_never_worse_than_its_isotropic_start():
    # near a linear boundary scales of 3 certify far less than sigma = 0.3;
    # the comparison on optimisation draws must fall back to sigma there
    rng = np.random.RandomState(0)
    w = rng.randn(5)
    X = rng.randn(45, 5) * 0.5
    # and five inputs 4 from the boundary, where sigma's certificate is capped
    # (0.3 * 3.8 at n = 20,000) and the generator's scales of 3 certify more
    X[40:] += (4.0 - X[40:] @ w / np.linalg.norm(w))[:, None] * w / np.linalg.norm(w)
    X = X.astype(np.float32)

    def certify(clf):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # memory=None
            return clf.certify(X)

    cohen = certify(linear_classifier(w, 0.0, "gaussian", "cohen"))
    paper = certify(_overshooting_ucan(0, w))
    kept = certify(_overshooting_ucan(1000, w))
    assert paper.min_scale.min() >= 3.0 - 1e-6  # the generator's noise
    # the paper's method follows the generator: abstains near the boundary (the
    # closed form expects 4.2 abstentions at scale 3 and 0.4 at sigma 0.3 on
    # these inputs at n = 20,000; one bank shifts all of them alike)
    assert paper.abstained.sum() >= cohen.abstained.sum() + 2
    near = slice(0, 40)
    assert paper.proxy_radius[near].mean() < 0.9 * cohen.proxy_radius[near].mean()
    assert not kept.abstained[~cohen.abstained].any()
    start = np.isclose(kept.scale, 0.3, rtol=1e-6).all(axis=1)
    assert start[near].mean() > 0.5
    # where the start was kept the certificate is Cohen's exactly (same draws)
    np.testing.assert_array_equal(kept.radius[start], cohen.radius[start])
    # far from the boundary the generator's noise was chosen for a larger one
    assert not start[40:].any()
    assert (kept.proxy_radius[40:] > 2 * cohen.proxy_radius[40:]).all()
    assert (kept.proxy_radius >= cohen.proxy_radius - 0.05).all()
    assert kept.proxy_radius.mean() >= cohen.proxy_radius.mean()


def test_compare_draws_changes_after_fit_without_training_again(digits):
    X, y = digits
    strategy = UCANInput(compare_draws=0)
    clf = SmoothedClassifier(
        strategy=strategy, max_epochs=1, n=200, n0=20, random_state=0
    ).fit(X[:100], y[:100])
    fitted = clf.strategy_
    _, generated = clf.noise_parameters(X[100:110])
    clf.set_params(strategy__compare_draws=500)
    cert = clf.certify(X[100:110])
    # the trained generator certified, with the new value; strategy_ is as fitted
    assert clf.strategy_ is fitted and fitted.compare_draws == 0
    start = np.isclose(cert.scale, 0.25, rtol=1e-6).all(axis=1)
    assert 0 < start.sum() < 10, start  # both candidates were taken
    np.testing.assert_allclose(cert.scale[~start], generated[~start], rtol=1e-6)
    _, scale = clf.noise_parameters(X[100:110])  # the noise certify used
    np.testing.assert_allclose(cert.scale, scale, rtol=1e-6)
    # a parameter that training reads still needs a refit
    clf.set_params(strategy__min_multiplier=0.1)
    with pytest.raises(ValueError, match="trained in fit; refit"):
        clf.certify(X[:2])
    clf.set_params(strategy__min_multiplier=0.05, strategy__compare_draws=-1)
    with pytest.raises(ValueError, match="compare_draws"):
        clf.certify(X[:2])
