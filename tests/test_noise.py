import math

import numpy as np
import pytest
import torch
from scipy import stats

from smoothlearn.noise import NOISES, get_noise


@pytest.mark.parametrize("name", sorted(NOISES))
def test_standard_form_has_zero_mean_unit_variance(name):
    family = get_noise(name)
    gen = torch.Generator().manual_seed(0)
    z = family.sample((200_000, 3), generator=gen, dtype=torch.float64).numpy()
    assert np.abs(z.mean(axis=0)).max() < 0.01
    assert np.abs(z.std(axis=0) - 1.0).max() < 0.01


@pytest.mark.parametrize(
    "name, scipy_dist",
    [
        ("gaussian", stats.norm()),
        ("uniform", stats.uniform(loc=-math.sqrt(3), scale=2 * math.sqrt(3))),
        ("laplace", stats.laplace(scale=1 / math.sqrt(2))),
    ],
)
def test_standard_form_is_the_named_distribution(name, scipy_dist):
    gen = torch.Generator().manual_seed(1)
    z = get_noise(name).sample((50_000,), generator=gen).numpy()
    assert stats.kstest(z, scipy_dist.cdf).pvalue > 0.001


def test_gap_formulas_match_scipy():
    p = np.array([0.5, 0.6, 0.9, 0.999])
    np.testing.assert_allclose(get_noise("gaussian").gap(p), stats.norm.ppf(p))
    np.testing.assert_allclose(get_noise("uniform").gap(p), 2 * p - 1)
    np.testing.assert_allclose(get_noise("laplace").gap(p), -np.log(2 * (1 - p)))


@pytest.mark.parametrize("name", sorted(NOISES))
def test_torch_and_soft_gaps_equal_gap(name):
    family = get_noise(name)
    p = np.array([0.55, 0.7, 0.95])
    t = torch.as_tensor(p)
    np.testing.assert_allclose(family.torch_gap(t).numpy(), family.gap(p), rtol=1e-10)
    # with the runner-up at 1 - top, the soft gap is the certificate's gap
    np.testing.assert_allclose(
        family.soft_gap(t, 1 - t).numpy(), family.gap(p), rtol=1e-10
    )


def test_soft_gap_is_the_papers_two_probability_gap():
    top, second = torch.tensor([0.7]), torch.tensor([0.2])
    expected = 0.5 * (stats.norm.ppf(0.7) - stats.norm.ppf(0.2))
    assert get_noise("gaussian").soft_gap(top, second).item() == pytest.approx(expected)
    assert get_noise("uniform").soft_gap(top, second).item() == pytest.approx(0.5)


def test_isotropic_radii_are_the_published_formulas():
    p, sigma = 0.8, 0.5
    # Cohen et al.: R = sigma Phi^-1(p)
    assert get_noise("gaussian").radius(p, sigma) == pytest.approx(
        sigma * stats.norm.ppf(p)
    )
    # RS4A / ANCER Cor. 2: half-width lam = sqrt(3) sigma, R = 2 lam (p - 1/2)
    lam = math.sqrt(3) * sigma
    assert get_noise("uniform").radius(p, sigma) == pytest.approx(2 * lam * (p - 0.5))
    # Teng et al.: Laplace scale b = sigma / sqrt(2), R = -b log(2(1 - p))
    b = sigma / math.sqrt(2)
    assert get_noise("laplace").radius(p, sigma) == pytest.approx(
        -b * np.log(2 * (1 - p))
    )


def test_unknown_noise_raises():
    with pytest.raises(ValueError, match="noise must be one of"):
        get_noise("cauchy")
