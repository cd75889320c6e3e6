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


def _reference_chunk(name, key, bank, j, n_values):
    """The float64 transform of the bits a chunk draws (the bank's reference).

    Recomputed from the chunk's own PCG64 stream in numpy float64: what each
    family's ``bank_sample`` computes, with no float32 step.
    """
    seed = np.random.SeedSequence(key, spawn_key=(bank, j))
    stream = np.random.PCG64(seed)

    def exponential(u):
        # -log u, with u <= 2^-12 drawn again as 2^-12 U (U of 53 bits)
        e = -np.log(u)
        tail = np.flatnonzero(u <= 2.0**-12)
        deep = ((stream.random_raw(len(tail)) >> np.uint64(11)) + 1) * 2.0**-53
        e[tail] = 12 * np.log(2.0) - np.log(deep)
        return e

    half = n_values // 2
    if name == "gaussian":
        words = stream.random_raw(half).view(np.int32)
        r = np.sqrt(2.0 * exponential(np.abs(words[:half] + 0.5) * 2.0**-31))
        angle = words[half:] * (2 * np.pi * 2.0**-32)
        return np.concatenate([r * np.cos(angle), r * np.sin(angle)])
    t = stream.random_raw((n_values + 1) // 2).view(np.int32)[:n_values] + 0.5
    if name == "uniform":
        return t * 2.0**-31 * np.sqrt(3.0)
    return np.copysign(exponential(np.abs(t) * 2.0**-31) / np.sqrt(2.0), t)


@pytest.mark.parametrize("name", sorted(NOISES))
def test_bank_chunks_are_the_float64_transform_of_their_bits(name):
    """Every value is within 2e-7 max(1, |z|) of the float64 transform of the
    same random bits, in the body and the tails alike; a gaussian value within
    4e-7 max(1, r), r the radius of its Box-Muller pair (its float32 angle is
    rounded by about 1e-7)."""
    from smoothlearn.banks import CHUNK_ROWS, NoiseBank

    d = 97  # odd: pairs straddle rows
    bank = NoiseBank(key=7, bank=1, family=get_noise(name), n_features=d)
    for j in (0, 3):
        chunk = bank.chunk(j)
        assert chunk.dtype == torch.float32 and chunk.shape == (CHUNK_ROWS, d)
        reference = _reference_chunk(name, 7, 1, j, CHUNK_ROWS * d)
        error = np.abs(chunk.numpy().ravel().astype(np.float64) - reference)
        scale, tolerance = np.abs(reference), 2e-7
        if name == "gaussian":
            half = len(reference) // 2
            scale = np.tile(np.hypot(reference[:half], reference[half:]), 2)
            tolerance = 4e-7
        assert (error <= tolerance * np.maximum(1.0, scale)).all(), error.max()


@pytest.mark.parametrize(
    "name, cdf",
    [
        ("gaussian", stats.norm.cdf),
        ("uniform", stats.uniform(loc=-math.sqrt(3), scale=2 * math.sqrt(3)).cdf),
        ("laplace", stats.laplace(scale=1 / math.sqrt(2)).cdf),
    ],
)
def test_bank_draws_are_the_named_distribution(name, cdf):
    from smoothlearn.banks import NoiseBank

    bank = NoiseBank(key=11, bank=1, family=get_noise(name), n_features=500)
    z = bank.rows(0, 4096).numpy().ravel()  # 2 million values, 4 chunks
    assert stats.kstest(z, cdf).pvalue > 1e-3
    # rows are independent of one another: neighbouring and paired rows
    # (Box-Muller's cosine and sine halves) are uncorrelated
    rows = bank.rows(0, 1024).numpy()
    for a, b in ((rows[:-1], rows[1:]), (rows[:512], rows[512:])):
        assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 5 / np.sqrt(a.size)


def test_laplace_tails_beyond_the_float32_body_are_exact():
    """Magnitudes past 12 log(2) / sqrt(2) come from the float64 path: given
    that they are there, the excess is exponential of rate sqrt(2)
    (memoryless), out to where 53-bit uniforms reach."""
    from smoothlearn.banks import NoiseBank
    from smoothlearn.noise import DEEP_TAIL

    start = math.log(1 / DEEP_TAIL) / math.sqrt(2)
    bank = NoiseBank(key=5, bank=2, family=get_noise("laplace"), n_features=1000)
    z = np.abs(bank.rows(0, 40 * 1024).numpy().ravel())  # 41 million values
    excess = z[z > start] - start
    assert len(excess) > 5000
    assert stats.kstest(excess, stats.expon(scale=1 / math.sqrt(2)).cdf).pvalue > 1e-3
    assert z.max() > start + 5  # beyond the float32 body's reach


def test_gaussian_bank_radii_are_exact_past_eight_sigma():
    """Box-Muller's squared radius is exponential of mean 2; past 24 log 2
    (radii above 4.08) it comes from the refined 53-bit path, and given that
    it is there its excess is exponential of mean 2 again (memoryless); the
    refined uniforms reach r^2 = 130 log 2 (|z| = 9.49)."""
    from smoothlearn.banks import NoiseBank
    from smoothlearn.noise import DEEP_TAIL

    bank = NoiseBank(key=3, bank=1, family=get_noise("gaussian"), n_features=1000)
    expon2 = stats.expon(scale=2.0).cdf
    for j in range(40):  # 41 million values, 20 million radii
        z = bank.chunk(j).double().ravel()
        half = len(z) // 2
        r2 = (z[:half] ** 2 + z[half:] ** 2).numpy()
        if j == 0:
            assert stats.kstest(r2, expon2).pvalue > 1e-3
            excess = []
        excess.append(r2[r2 > 2 * math.log(1 / DEEP_TAIL)])
    excess = np.concatenate(excess) - 2 * math.log(1 / DEEP_TAIL)
    assert len(excess) > 4000
    assert stats.kstest(excess, expon2).pvalue > 1e-3
    # the deepest radius the construction can give, and its mass beyond
    deepest = math.sqrt(-2 * math.log(DEEP_TAIL * 2.0**-53))
    assert deepest > 9.4 and math.exp(-(deepest**2) / 2) < 1e-19


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(NOISES))
def test_banks_are_drawn_on_the_certifying_device(name):
    from smoothlearn.banks import NoiseBank

    bank = NoiseBank(
        key=1, bank=1, family=get_noise(name), n_features=64, device="cuda"
    )
    rows = bank.rows(0, 2048)
    assert rows.device.type == "cuda" and rows.dtype == torch.float32
    cdf = {
        "gaussian": stats.norm.cdf,
        "uniform": stats.uniform(loc=-math.sqrt(3), scale=2 * math.sqrt(3)).cdf,
        "laplace": stats.laplace(scale=1 / math.sqrt(2)).cdf,
    }[name]
    assert stats.kstest(rows.cpu().numpy().ravel(), cdf).pvalue > 1e-3
    torch.testing.assert_close(bank.rows(0, 2048), rows, rtol=0, atol=0)


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


def test_exponential_draws_take_the_same_law_on_a_device_as_on_the_cpu():
    """Off the CPU every value draws its tail refinement and ``torch.where``
    keeps the tail's (no data-dependent count: the host would wait for the
    device); checked here on CPU tensors under a device's branch: the body is
    the CPU's, value for value, and the tail's excess is exponential."""
    from types import SimpleNamespace

    from smoothlearn.banks import ChunkBits
    from smoothlearn.noise import DEEP_TAIL, _exponential_

    rng = np.random.RandomState(0)
    t = rng.randint(-(2**31), 2**31, size=2**23).astype(np.int64)
    u = torch.as_tensor(np.abs(t + 0.5) * 2.0**-31)
    on_cpu = _exponential_(u.clone(), ChunkBits(np.random.SeedSequence(1), "cpu"), 1.0)
    device_bits = SimpleNamespace(
        device=SimpleNamespace(type="cuda"),
        uniform53=lambda n: torch.as_tensor(1.0 - rng.random_sample(n)),
    )
    on_device = _exponential_(u.clone(), device_bits, 1.0)
    body = u > DEEP_TAIL
    torch.testing.assert_close(on_device[body], on_cpu[body], rtol=0, atol=0)
    start = math.log(1 / DEEP_TAIL)
    for e in (on_cpu[~body], on_device[~body]):
        assert len(e) > 1500 and (e > start).all()
        assert stats.kstest(e.numpy() - start, stats.expon.cdf).pvalue > 1e-3


def test_the_old_name_of_the_tail_bound_still_works_with_a_warning():
    import smoothlearn.noise as noise

    with pytest.warns(FutureWarning, match="DEEP_TAIL"):
        assert noise.LAPLACE_TAIL == noise.DEEP_TAIL == 2.0**-12
