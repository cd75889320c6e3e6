"""UCAN's pattern-fixed anisotropic noise."""

import numpy as np
import pytest
import torch

from smoothlearn import SmoothedClassifier
from smoothlearn.strategies import UCANPattern
from smoothlearn.strategies.ucan_pattern import spatial_pattern

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
    assert m[0, 0] / m[3, 3] >= 2.0


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
    np.testing.assert_allclose(cert.scale, np.tile(0.3 * multipliers, (30, 1)))
    rho = cert.c * cert.gap
    if noise == "gaussian":
        reach = rho * np.linalg.norm(cert.scale * w, axis=1)
    else:
        reach = rho * np.max(np.abs(w) * cert.scale, axis=1)
    assert (reach[ok] <= margin[ok]).all()
    # UCAN Corollary 3.3: the inscribed radius is min sigma_i * R; proxy radius is ALM
    np.testing.assert_allclose(cert.radius[ok], rho[ok] * cert.scale[ok].min(axis=1))
    np.testing.assert_allclose(
        cert.proxy_radius[ok], rho[ok] * 0.3, rtol=1e-9
    )  # geometric mean of the pattern is 1


def test_training_uses_the_pattern_and_parameters_are_tunable(digits):
    X, y = digits
    X = X.reshape(-1, 1, 8, 8)
    clf = SmoothedClassifier(
        strategy=UCANPattern(kappa=2.0, p="inf"),
        sigma=0.2,
        n=300,
        max_epochs=2,
        random_state=0,
    ).fit(X[:200], y[:200])
    expected = 0.2 * UCANPattern(kappa=2.0, p="inf").multipliers((1, 8, 8))
    np.testing.assert_allclose(clf.net_.noise_scale.numpy(), expected, rtol=1e-6)
    assert clf.get_params()["strategy__kappa"] == 2.0
    assert clf.certify(X[200:204]).kind == "diagonal"
