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


# -------------------------------------------------------------- bank tails
#: Where float32 samplers stop: torch's CPU randn and exponential take 24-bit
#: uniforms, so |z| <= sqrt(-2 log 2^-24) (gaussian) and e <= 24 log 2.
FLOAT32_GAUSSIAN_LIMIT = math.sqrt(-2 * math.log(2.0**-24))


def test_gaussian_quantile_reaches_far_beyond_float32_samplers():
    from smoothlearn.noise import gaussian_quantile

    grid_ends = torch.tensor([0.0, 2.0**-53, 0.5, 1 - 2.0**-53], dtype=torch.float64)
    z = gaussian_quantile(grid_ends).numpy()
    np.testing.assert_allclose(
        z, [stats.norm.ppf(2.0**-53), stats.norm.ppf(2.0**-53), 0.0, -z[1]]
    )
    assert np.isfinite(z).all() and -z[0] > 8.2 > FLOAT32_GAUSSIAN_LIMIT
    # the mass no draw can reach is negligible next to 1 - p_max (7e-5 at
    # n = 100,000) even for CIFAR-sized inputs
    assert 3072 * 2 * stats.norm.sf(-z[0]) < 1e-12
    u = torch.rand(100_000, dtype=torch.float64)
    np.testing.assert_allclose(
        gaussian_quantile(u).numpy(), stats.norm.ppf(u.numpy()), atol=1e-12
    )


@pytest.mark.parametrize("name", sorted(NOISES))
def test_banks_are_float64_draws_rounded_once_to_float32(name):
    """Each chunk is the float32 rounding of 53-bit-uniform draws, whose tails
    reach far past where float32 samplers stop."""
    from smoothlearn.banks import CHUNK_ROWS, NoiseBank, draw_rows

    family = get_noise(name)
    bank = NoiseBank(key=7, bank=1, family=family, n_features=5)
    seed = np.random.SeedSequence(7, spawn_key=(1, 0)).generate_state(1, np.uint64)
    gen = torch.Generator().manual_seed(int(seed[0]))
    step = draw_rows(5)
    exact = torch.cat(
        [
            family.sample(
                (min(step, CHUNK_ROWS - s), 5), generator=gen, dtype=torch.float64
            )
            for s in range(0, CHUNK_ROWS, step)
        ]
    )
    chunk = bank.chunk(0)
    assert chunk.dtype == torch.float32
    torch.testing.assert_close(chunk, exact.to(torch.float32), rtol=0, atol=0)
    # the draws rest on 53-bit uniforms: their uniforms are not on 2^-24 grid
    gen = torch.Generator().manual_seed(int(seed[0]))
    u = torch.rand(1000, generator=gen, dtype=torch.float64).numpy()
    assert np.mean((u * 2**24) % 1 != 0) > 0.99


def test_gaussian_bank_tail_matches_the_normal_tail():
    """Bank draws beyond |z| = 4.5: as many as N(0, 1) puts there (a float32
    sampler's tail is right here too; the quantile test above covers beyond
    5.77, where counting would need 10^9 draws)."""
    from smoothlearn.banks import NoiseBank

    bank = NoiseBank(key=3, bank=1, family=get_noise("gaussian"), n_features=784)
    z = bank.rows(0, 8 * 1024).numpy()
    observed = int((np.abs(z) > 4.5).sum())
    expected = z.size * 2 * stats.norm.sf(4.5)
    assert stats.poisson(expected).cdf(observed) > 1e-4
    assert stats.poisson(expected).sf(observed - 1) > 1e-4
