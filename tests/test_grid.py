"""Smoothing on the inputs' grid (issue 49): the sampler, the radius, the
estimator's grid path, and a base classifier that reads float rounding.

Exact truths: the rounded law ``P(k) = F((k + 1/2) / rho) - F((k - 1/2) / rho)``
in mpmath; a linear classifier whose scores are exact in float32 (dyadic
weights on the 1/16 grid), whose smoothed probability under the rounded noise
is a one-dimensional lattice sum.
"""

import math
import pickle

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from smoothlearn import SmoothedClassifier
from smoothlearn.banks import ESTIMATION, NoiseBank
from smoothlearn.counting import count_classes
from smoothlearn.grid import (
    Grid,
    RawWords,
    RoundedTable,
    quantised_scale,
    resolve_grid,
    rounded_table,
    sampling_slack,
)
from smoothlearn.network import FlatInputNetwork
from smoothlearn.noise import get_noise
from smoothlearn.scale import Scale

from .conftest import linear_module

GAUSSIAN = get_noise("gaussian")
H = 1.0 / 16


def _exact_pmf(family, scale, step, atoms):
    """The rounded law of ``round(scale z / step)`` at ``atoms``, in mpmath."""
    from smoothlearn.grid import _standard_cdf

    cdf, _ = _standard_cdf(family.name)
    with mpmath.workprec(120):
        rho = mpmath.mpf(scale) / mpmath.mpf(step)
        return [
            cdf((int(k) + mpmath.mpf(0.5)) / rho)
            - cdf((int(k) - mpmath.mpf(0.5)) / rho)
            for k in atoms
        ]


@pytest.mark.parametrize(
    "noise, scale, step",
    [
        ("gaussian", 0.25, H),
        ("gaussian", 0.3, 1 / 255),
        ("gaussian", 0.03, H),  # rho < 1: the atom 0 holds over 1/2
        ("gaussian", 1.7, 1 / 255),  # K = 4128: many Taylor blocks
        ("laplace", 0.25, H),
        ("uniform", 0.5, H),
    ],
)
def test_table_law_is_within_its_bound_of_the_rounded_law(noise, scale, step):
    family = get_noise(noise)
    table = RoundedTable(family, scale, step)
    atoms, weights = table.pmf()
    assert sum(weights) == 2**64
    exact = _exact_pmf(family, scale, step, atoms)
    with mpmath.workprec(120):
        sampled = [mpmath.mpf(w) / mpmath.mpf(2) ** 64 for w in weights]
        outside = 1 - mpmath.fsum(exact)  # the rounded law's mass beyond the table
        tv = (mpmath.fsum(abs(a - b) for a, b in zip(sampled, exact)) + outside) / 2
        assert outside < mpmath.mpf(2) ** -69
        assert tv <= table.tv
        # moments: the mean is 0 and the variance that of the rounded law
        mean = mpmath.fsum(k * p for k, p in zip(atoms, sampled))
        var = mpmath.fsum(int(k) ** 2 * p for k, p in zip(atoms, sampled))
        var_exact = mpmath.fsum(int(k) ** 2 * p for k, p in zip(atoms, exact))
        assert abs(mean) < 1e-15
        assert abs(var - var_exact) <= 1e-15 * var_exact
        rho = mpmath.mpf(scale) / mpmath.mpf(step)
        if noise == "gaussian" and rho > 2:  # Sheppard: to exp(-2 pi^2 rho^2)
            assert abs(var_exact - rho**2 - mpmath.mpf(1) / 12) < 1e-10


@pytest.mark.parametrize(
    "scale, step",
    [(0.25, H), (0.03, H), (0.3, 1 / 255), (1.7, 1 / 255), (0.25, 1.0), (3.0, 1.0)],
)
def test_gaussian_thresholds_are_the_mpmath_floors(scale, step):
    """The fixed-point Taylor tables against ``floor(2^64 Phi)`` in mpmath at
    120 bits: each threshold within 2^-63 of ``2^64 Phi`` (what the total
    variation bound allows), and equal to the floor here; the fast sampler
    draws from them exactly (an atom over 1/2 included, ``rho < 1``)."""
    from fractions import Fraction

    from smoothlearn.grid import TAYLOR_BITS, RowSampler, _gaussian_cdf_fixed

    table = RoundedTable(GAUSSIAN, scale, step)
    K = table.half_width
    fixed = _gaussian_cdf_fixed(Fraction(scale) / Fraction(step), K)
    with mpmath.workprec(120):
        rho = mpmath.mpf(scale) / mpmath.mpf(step)
        cdf = [mpmath.ncdf((j + mpmath.mpf(0.5)) / rho) for j in range(-K, K)]
        # the fixed-point values within their stated 2^-90
        error = max(
            abs(mpmath.mpf(v) / mpmath.mpf(2) ** TAYLOR_BITS - c)
            for v, c in zip(fixed, cdf[:K])
        )
        assert error < mpmath.mpf(2) ** -90
        scaled = [c * mpmath.mpf(2) ** 64 for c in cdf]
        ours = [int(t) + 2**63 for t in table.thresholds]
        assert max(abs(t - v) for t, v in zip(ours, scaled)) < 2
        assert ours == [int(mpmath.floor(v)) for v in scaled]
    rng = np.random.RandomState(2)
    words = rng.randint(-(2**63), 2**63 - 1, size=(2000, 3), dtype=np.int64)
    words[:10, 0] = table.thresholds[rng.randint(0, 2 * K, 10)]
    sampler = RowSampler(GAUSSIAN, np.full(3, scale), step, "cpu")
    k = sampler.sample(torch.from_numpy(words)).numpy()
    np.testing.assert_array_equal(k, table.sample(torch.from_numpy(words)).numpy())


def test_drawn_noise_passes_a_chi_square_test_and_a_wrong_law_fails():
    table = rounded_table(GAUSSIAN, 0.25, H)  # rho = 4
    bank = NoiseBank(7, ESTIMATION, RawWords(GAUSSIAN), 16)
    k = table.sample(bank.rows(0, 8192)).numpy().ravel()  # 131,072 draws
    atoms, weights = table.pmf()
    expected = np.array(weights, dtype=np.float64) / 2.0**64 * len(k)
    observed = np.bincount(k + table.half_width, minlength=len(atoms))
    keep = expected >= 5  # pool the thin tails into one bin
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    wrong = rounded_table(GAUSSIAN, 0.25 * 1.02, H)
    _, w_weights = wrong.pmf()
    w_exp = np.array(w_weights, dtype=np.float64) / 2.0**64 * len(k)
    w_obs = np.bincount(k + wrong.half_width, minlength=len(w_weights))
    keep = w_exp >= 5
    assert (
        stats.chisquare(
            np.append(w_obs[keep], w_obs[~keep].sum()),
            np.append(w_exp[keep], w_exp[~keep].sum()),
        ).pvalue
        < 1e-6
    )


def _linear_probability(w, b, j, scales, step):
    """Exact ``P(w . step (j + k) + b > 0)``, ``k_i`` independent rounded
    gaussians of scale ``scales[i]``, ``w`` integers, 2-D: the sum over ``k_1``
    of ``k_2``'s tail."""
    w1, w2 = (int(v) for v in w)
    assert w2 > 0
    with mpmath.workprec(100):
        rho1, rho2 = (mpmath.mpf(s) / mpmath.mpf(step) for s in scales)
        # w . (j + k) > -b / step  <=>  w2 k2 > c - w1 k1
        c = -mpmath.mpf(b) / mpmath.mpf(step) - (w1 * int(j[0]) + w2 * int(j[1]))
        total = mpmath.mpf(0)
        span = int(12 * rho1) + 2
        for k1 in range(-span, span + 1):
            p1 = mpmath.ncdf((k1 + mpmath.mpf(0.5)) / rho1) - mpmath.ncdf(
                (k1 - mpmath.mpf(0.5)) / rho1
            )
            least = int(mpmath.floor((c - w1 * k1) / w2)) + 1  # k2 >= least
            total += p1 * mpmath.ncdf(-(least - mpmath.mpf(0.5)) / rho2)
        return total


W, B = np.array([3.0, 2.0]), 1.0 / 32  # scores exact in float32 on the 1/16 grid


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_grid_counts_match_the_exact_probability_of_a_linear_classifier(device):
    network = FlatInputNetwork(linear_module(W, B).to(device), (2,), 2, device=device)
    grid = Grid(H)
    X = np.array([[0.25, 0.125], [-0.5, 0.75], [0.0, -0.0625]], dtype=np.float32)
    scale = Scale(np.array([[0.25, 0.5], [0.3, 0.3], [0.6, 0.2]]))  # diagonal
    n = 40_000
    bank = NoiseBank(3, ESTIMATION, RawWords(GAUSSIAN), 2, device=device)
    counts = count_classes(network, X, scale, bank, n, batch_size=8192, grid=grid)
    for i, x in enumerate(X):
        p = float(_linear_probability(W, B, x / H, scale.values[i], H))
        # a 5-sigma binomial band around the exact probability
        assert abs(counts[i, 1] / n - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-9


def test_certified_grid_points_keep_their_class_exactly():
    """Cohen's radius for g = f o round: every grid point the certificate
    holds has exact smoothed probability above 1/2 (the derivation), and the
    engine's bound is below the exact probability."""
    sigma = 0.25
    x = np.array([[0.25, 0.125]], dtype=np.float32)
    clf = SmoothedClassifier(
        linear_module(W, B),
        sigma=sigma,
        grid=H,
        max_epochs=0,
        n=20_000,
        batch_size=20_000,
        random_state=0,
    ).fit(np.vstack([x, -x]), [1, 0])
    cert = clf.certify(x)
    p = _linear_probability(W, B, x[0] / H, (sigma, sigma), H)
    assert cert.label[0] == 1 and cert.p_lower[0] <= float(p)
    radius = cert.radius[0]
    assert radius == pytest.approx(
        sigma * float(mpmath.sqrt(2) * mpmath.erfinv(2 * cert.p_lower[0] - 1)), rel=1e-9
    )
    j0 = np.rint(x[0] / H).astype(int)
    reach = int(radius / H) + 1
    checked = 0
    for a in range(-reach, reach + 1):
        for c in range(-reach, reach + 1):
            if H * math.hypot(a, c) <= radius:
                q = _linear_probability(W, B, j0 + [a, c], (sigma, sigma), H)
                assert q > 0.5
                checked += 1
    assert checked > 20


def _fit(module, X, **params):
    y = np.arange(len(X)) % 2
    return SmoothedClassifier(module, max_epochs=0, **params).fit(X, y)


class RoundingReader(torch.nn.Module):
    """A base classifier that reads float rounding (after Voracek and Hein).

    Class 1 when some coordinate lies in (-1/2, 0) and is an odd multiple of
    2^-24, else class 0. Around x = 1 with float noise n: a noisy value in
    (-1/2, 0) is ``1 + n`` with ``n`` in (-3/2, -1], a multiple of 2^-23, and the
    float sum is exact (Sterbenz): an even multiple of 2^-24, so class 0 always.
    Around x' = 1 - 2^-24 (the float just below 1, 6e-8 away) the same sums are
    odd multiples of 2^-24: class 1 whenever some n_i lies in (-3/2, -1].
    """

    def forward(self, y):
        q = y * 2.0**24  # exact: a power of two, no underflow
        odd = (q == torch.round(q)) & (torch.remainder(q, 2.0) == 1.0)
        hit = ((y > -0.5) & (y < 0) & odd).any(dim=1)
        return torch.stack([(~hit).float(), hit.float()], dim=1)


def test_rounding_reader_gets_a_false_certificate_on_floats_and_none_on_the_grid():
    d = 32
    x = np.ones((1, d), dtype=np.float32)
    near = np.full((1, d), np.float32(1 - 2.0**-24), dtype=np.float32)
    distance = float(np.linalg.norm(near.astype(np.float64) - 1.0))  # 3.4e-7
    train = np.vstack([x, near])
    floats = _fit(RoundingReader(), train, sigma=1.0, n=2000, random_state=0)
    cert = floats.certify(x)
    assert cert.label[0] == 0 and cert.radius[0] > 2.0 > distance
    # the point 3.4e-7 away is inside the region, yet its smoothed class is 1
    assert floats.predict_proba(near)[0, 1] > 0.9
    assert floats.predict(near)[0] == 1

    grid = _fit(
        RoundingReader(), train.round(), sigma=1.0, n=2000, random_state=0, grid=H
    )
    cert = grid.certify(x)
    assert cert.label[0] == 0 and cert.radius[0] > 2.0
    # the grid path's region covers grid points, and every one tried keeps class 0
    rng = np.random.RandomState(0)
    steps = rng.randint(-4, 5, size=(20, d)) * H
    steps *= np.minimum(1.0, 0.9 * cert.radius[0] / np.linalg.norm(steps, axis=1))[
        :, None
    ]
    points = (x + np.round(steps / H) * H).astype(np.float32)
    assert np.all(np.linalg.norm(points - x, axis=1) <= cert.radius[0])
    assert np.all(grid.predict(points) == 0)
    # the float neighbour is read as its grid point (within 1e-3 of a step):
    # the network sees the same integers, so the same class
    assert grid.predict(near)[0] == 0
    with pytest.raises(ValueError, match="not on the grid"):
        grid.certify(x + np.float32(0.01))


def test_off_grid_inputs_are_refused_or_rounded_when_asked(digits):
    X, y = digits
    clf = SmoothedClassifier(
        grid=H, n=200, n0=20, max_epochs=1, random_state=0, module__hidden_units=(16,)
    ).fit(X[:200], y[:200])
    state = pickle.dumps(clf)
    off = X[:3] + np.float32(0.01)
    with pytest.raises(ValueError, match="not on the grid of step 0.0625"):
        clf.certify(off)
    with pytest.raises(ValueError, match="not on the grid"):
        clf.predict(off)
    assert pickle.dumps(clf) == state
    rounded = clf.set_params(off_grid="round").certify(off)
    np.testing.assert_array_equal(rounded.center, X[:3])
    with pytest.raises(ValueError, match="not on the grid"):
        SmoothedClassifier(grid=H, max_epochs=0).fit(off, y[:3])


def test_auto_finds_the_coarsest_step(digits):
    X, _ = digits
    assert resolve_grid("auto", X) == H
    assert resolve_grid("auto", X * 16) == 1.0
    assert resolve_grid("auto", np.round(X * 16) / 255) == 1 / 255
    assert resolve_grid("auto", X + 0.001) is None
    with pytest.warns(UserWarning, match="found no grid"):
        clf = SmoothedClassifier(grid="auto", max_epochs=0).fit(
            X[:10] + 0.001, [0, 1] * 5
        )
    assert clf.grid_ is None


def test_scales_on_the_grid_are_quantised_and_slack_is_tiny():
    assert quantised_scale(0.25) == 0.25
    v = np.geomspace(0.1, 3, 50)
    q = quantised_scale(v)
    assert np.all(np.abs(np.log2(q / v)) <= 0.5 / 256 + 1e-15)
    slack = sampling_slack(GAUSSIAN, np.full((1, 784), 0.25), 1 / 255)
    assert 0 < slack[0] < 1e-12


@pytest.mark.parametrize("strategy", ["rancer", "ucan_universal"])
def test_rotated_and_offset_strategies_are_refused_on_the_grid(strategy, digits):
    X, y = digits
    with pytest.raises(ValueError, match="grid"):
        SmoothedClassifier(strategy=strategy, grid=H, max_epochs=0).fit(X[:20], y[:20])


def test_grid_counts_ignore_first_layer_reuse():
    """On the grid the network sees only fl32(j + k) * h: reuse of ``L x + L (S z)``
    (a function of x and z apart) is never taken, whatever the setting."""
    X = np.array([[0.25, 0.125], [-0.5, 0.75]], dtype=np.float32)
    scale = Scale(np.array([0.25, 0.25]))
    bank = NoiseBank(5, ESTIMATION, RawWords(GAUSSIAN), 2)
    counts = [
        count_classes(
            FlatInputNetwork(linear_module(W, B), (2,), 2, reuse_first_layer=reuse),
            X,
            scale,
            bank,
            3000,
            batch_size=1000,
            grid=Grid(H),
        )
        for reuse in (True, False)
    ]
    np.testing.assert_array_equal(*counts)


@pytest.fixture(scope="module")
def grid_digits(digits):
    X, y = digits
    return SmoothedClassifier(
        grid=H,
        n=300,
        n0=30,
        max_epochs=20,
        lr=0.005,
        random_state=0,
        module__hidden_units=(32,),
    ).fit(X[:400], y[:400])


def test_n_jobs_and_checkpoints_give_the_same_grid_certificates(
    grid_digits, digits, tmp_path
):
    import copy

    X, _ = digits
    one = copy.deepcopy(grid_digits).certify(X[400:530])
    two = copy.deepcopy(grid_digits).set_params(n_jobs=2).certify(X[400:530])
    np.testing.assert_array_equal(one.label, two.label)
    np.testing.assert_allclose(one.radius, two.radius, rtol=1e-12)
    log = tmp_path / "log.jsonl"
    first = copy.deepcopy(grid_digits).certify(X[400:530], checkpoint=log)
    again = copy.deepcopy(grid_digits).certify(X[400:530], checkpoint=log)
    np.testing.assert_array_equal(first.radius, again.radius)
    np.testing.assert_array_equal(first.radius, one.radius)
    # the grid is part of the run: a float-noise run may not resume this log
    with pytest.raises(ValueError):
        copy.deepcopy(grid_digits).set_params(grid=None).certify(
            X[400:530], checkpoint=log
        )


@pytest.mark.parametrize("strategy", ["isotropic_dd", "ancer"])
def test_data_dependent_strategies_on_the_grid_keep_their_own_memory(
    grid_digits, digits, strategy
):
    import copy

    from smoothlearn.strategies import ANCER, IsotropicDD

    X, y = digits
    smoothing = (
        IsotropicDD(n_iter=5, n_draws=16)
        if strategy == "isotropic_dd"
        else ANCER(n_iter=5, n_draws=16)
    )
    clf = copy.deepcopy(grid_digits).set_params(strategy=smoothing)
    cert = clf.certify(X[400:464])
    assert cert.smoothing.endswith("grid=0.0625")
    # the scales run are on the 2^(i/256) ladder, and recorded as run (the
    # memory may shrink a region after)
    values = np.asarray(cert.scale)[~cert.reduced]
    levels = np.log2(values) * 256
    assert np.allclose(levels, np.rint(levels), atol=1e-6)
    assert (cert.label == y[400:464]).mean() > 0.5
    clf.set_params(grid=None).certify(X[400:420])
    assert len(clf.memories_) == 2  # float noise and grid: two smoothed classifiers


def test_pipelines_give_the_grid_in_the_classifier_space(digits):
    from sklearn.datasets import load_digits
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, MinMaxScaler

    X, y = load_digits(return_X_y=True)
    pipe = make_pipeline(
        FunctionTransformer(lambda v: v / 16.0),
        SmoothedClassifier(
            grid=H,
            n=200,
            n0=20,
            max_epochs=1,
            random_state=0,
            module__hidden_units=(16,),
        ),
    ).fit(X[:100], y[:100])
    assert pipe.predict(X[100:105]).shape == (5,)
    # MinMaxScaler maps digits' columns to steps 1/max: no single grid of 1/16
    with pytest.raises(ValueError, match="not on the grid"):
        make_pipeline(MinMaxScaler(), SmoothedClassifier(grid=H, max_epochs=0)).fit(
            X, y
        )


def test_command_line_grid(tmp_path):
    import subprocess
    import sys

    run = [
        sys.executable,
        "-m",
        "smoothlearn",
        "certify",
        "--n",
        "300",
        "--n0",
        "30",
        "--n-test",
        "20",
        "--max-epochs",
        "2",
        "-q",
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(
        [*run, "--grid", "1/16"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "grid=0.0625" in proc.stdout
    bad = subprocess.run(
        [*run, "--grid", "-1"], capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 2 and "grid" in bad.stderr


@pytest.mark.parametrize("noise", ["gaussian", "laplace", "uniform"])
@pytest.mark.parametrize("step", [H, 1 / 255])
def test_the_fast_sampler_is_the_exact_search(noise, step):
    """The guide only speeds the search: every k equals the threshold count,
    the extreme words and words on thresholds included."""
    from smoothlearn.grid import RowSampler, TableSet

    family = get_noise(noise)
    rng = np.random.RandomState(1)
    scales = quantised_scale(rng.uniform(0.1, 0.8, 16))
    sampler = RowSampler(family, scales, step, "cpu")
    words = rng.randint(-(2**63), 2**63 - 1, size=(4000, 16), dtype=np.int64)
    words[0] = np.iinfo(np.int64).max
    words[1] = np.iinfo(np.int64).min
    for c in range(16):  # words on a threshold and one below it
        t = sampler.tables[sampler.which[c]].thresholds
        words[2:12, c] = t[rng.randint(0, len(t), 10)]
        words[12:22, c] = words[2:12, c] - 1
    k = sampler.sample(torch.from_numpy(words)).numpy()
    for c in range(16):
        table = sampler.tables[sampler.which[c]]
        exact = table.sample(torch.from_numpy(words[:, c])).numpy()
        np.testing.assert_array_equal(k[:, c], exact)
    # the torch ops a GPU runs, here on the CPU's tensors
    tables = TableSet(family, np.unique(scales), step, "cpu")
    tables.cpu, tables.guides = False, torch.as_tensor(tables.guides)
    device_path = RowSampler(family, scales, step, "cpu", tables)
    np.testing.assert_array_equal(device_path.sample(torch.from_numpy(words)), k)


def test_adaptive_sampling_runs_on_the_grid(grid_digits, digits):
    import copy

    X, _ = digits
    full = copy.deepcopy(grid_digits).certify(X[400:464])
    decided = copy.deepcopy(grid_digits).certify(X[400:464], radius=0.25)
    planned = (
        copy.deepcopy(grid_digits).set_params(radius_tolerance=0.05).certify(X[400:464])
    )
    assert (decided.n_draws <= 300).all() and (planned.n_draws <= 300).all()
    # the same inputs certified at 0.25, but for the few the looks' alpha split
    # or a smaller sample moves across it
    agree = (decided.radius >= 0.25) == (full.radius >= 0.25)
    assert agree.mean() > 0.9
    assert np.all(planned.p_lower <= 1) and np.all(planned.radius >= 0)


@pytest.mark.parametrize("noise", ["laplace", "uniform"])
def test_l1_families_certify_on_the_grid_below_the_exact_probability(noise):
    """f = 1[x_1 + b > 0]: under the rounded noise its smoothed probability is
    a tail of the rounded law; the bound stays below it and the l1 radius is
    the family's formula."""
    family = get_noise(noise)
    sigma, b = 0.5, 1.0 / 32
    x = np.array([[0.25, 0.0]], dtype=np.float32)
    clf = SmoothedClassifier(
        linear_module([1.0, 0.0], b),
        noise=noise,
        sigma=sigma,
        grid=H,
        max_epochs=0,
        n=20_000,
        batch_size=20_000,
        random_state=0,
    ).fit(np.vstack([x, -x]), [1, 0])
    cert = clf.certify(x)
    table = rounded_table(family, sigma, H)
    atoms = np.arange(-table.half_width, table.half_width + 1)
    exact = _exact_pmf(family, sigma, H, atoms)
    j = int(round(float(x[0, 0]) / H))
    p = float(mpmath.fsum(q for k, q in zip(atoms, exact) if H * (j + k) + b > 0))
    assert cert.label[0] == 1 and cert.p_lower[0] <= p
    assert p - cert.p_lower[0] < 0.02
    assert cert.norm == "l1"
    assert cert.radius[0] == pytest.approx(
        family.c * family.gap(cert.p_lower[0]) * sigma, rel=1e-12
    )


def test_ucan_pattern_runs_on_the_grid(digits):
    X, y = digits
    images = X[:40].reshape(-1, 1, 8, 8)
    clf = SmoothedClassifier(
        strategy="ucan_pattern", grid=H, n=200, n0=20, max_epochs=0, random_state=0
    ).fit(images, y[:40])
    cert = clf.certify(images[:5])
    levels = np.log2(np.asarray(cert.scale)) * 256
    assert np.allclose(levels, np.rint(levels), atol=1e-6)
    assert cert.smoothing.endswith("grid=0.0625")


def test_grid_set_after_fit_takes_effect_or_is_refused(digits):
    """A step (or None) set after fit runs at the next call; 'auto', resolved
    only in fit, is refused after a fit with another value, before any work
    and with the state unchanged (never read as float noise)."""
    X, y = digits
    clf = SmoothedClassifier(
        n=100, n0=20, max_epochs=1, random_state=0, module__hidden_units=(8,)
    ).fit(X[:100], y[:100])
    state = pickle.dumps(clf)
    for method in ("certify", "predict"):
        with pytest.raises(ValueError, match="fitted with grid=None"):
            getattr(clf.set_params(grid="auto"), method)(X[:2])
    clf.set_params(grid=None)
    assert pickle.dumps(clf) == state
    on_grid = clf.set_params(grid=H).certify(X[:2])
    assert on_grid.smoothing.endswith(f"grid={H!r}")
    assert (
        clf.set_params(grid=None).certify(X[:2]).smoothing
        == on_grid.smoothing[: -len(f" grid={H!r}")]
    )
    auto = SmoothedClassifier(
        grid="auto", n=100, n0=20, max_epochs=1, random_state=0
    ).fit(X[:100], y[:100])
    assert auto.grid_ == H
    auto.set_params(grid=None).set_params(grid="auto")
    assert auto.certify(X[:2]).smoothing.endswith(f"grid={H!r}")


def _hard_words(rng, tables, n_random):
    """Random words, and for each table the words on each threshold and one
    either side of it (where a count changes), the extreme words, and the
    knot table's thresholds and their neighbours."""
    from smoothlearn._grid_quantiles import KNOT_RHO

    knots = rounded_table(GAUSSIAN, float(KNOT_RHO), 1.0).thresholds
    words = [rng.randint(-(2**63), 2**63 - 1, size=n_random, dtype=np.int64)]
    for t in [*tables, knots]:
        picked = t[rng.randint(0, len(t), 200)] if len(t) else t
        for shift in (-1, 0, 1):
            words.append(np.clip(picked.astype(object) + shift, -(2**63), 2**63 - 1))
    words.append(np.array([-(2**63), -(2**63) + 1, 2**63 - 2, 2**63 - 1]))
    return np.concatenate([np.asarray(w, dtype=np.int64) for w in words])


@pytest.mark.parametrize("step", [H, 1 / 255])
def test_shared_quantile_bounds_give_the_exact_count(step):
    """The arithmetic path decides the same k as the count of thresholds at or
    below each word (the table's own searchsorted), for scales from rho ~ 1 to
    ~ 2000 in one row, on random words and on every kind of edge word."""
    from smoothlearn._grid_quantiles import QuantileBounds, bounded_row
    from smoothlearn.grid import RowSampler

    rng = np.random.RandomState(3)
    d = 12
    scales = quantised_scale(np.geomspace(1.2 * step, 2000 * step, d))
    sampler = RowSampler(GAUSSIAN, scales, step, "cpu")
    tables = [sampler.tables[i] for i in sampler.which]
    assert bounded_row(GAUSSIAN, tables)
    words = _hard_words(rng, [t.thresholds for t in tables], 4000)
    words = words[: len(words) // d * d].reshape(-1, d)
    rng.shuffle(words)  # each column sees every kind of word
    bounds = QuantileBounds(GAUSSIAN, d)
    k = bounds.sample(sampler, torch.from_numpy(words)).numpy().copy()  # a kept buffer
    # and j + k for an input's integer vector j, formed in the same step
    centre = rng.randint(-5000, 5000, d).astype(np.float32)
    assert bounded_row(GAUSSIAN, tables, 5000)
    noisy = bounds.sample(sampler, torch.from_numpy(words), torch.from_numpy(centre))
    for c, table in enumerate(tables):
        exact = table.sample(torch.from_numpy(np.ascontiguousarray(words[:, c])))
        np.testing.assert_array_equal(k[:, c], exact.numpy())
        np.testing.assert_array_equal(noisy.numpy()[:, c] - centre[c], exact.numpy())
    # the arithmetic, not the exact search, decides nearly all random words
    words = rng.randint(-(2**63), 2**63 - 1, size=(2000, d), dtype=np.int64)
    lo, hi = bounds.bounds(torch.from_numpy(words))
    rho = bounds._rho(sampler)
    below, above = bounds._centres(None)
    low = torch.addcmul(below, lo, rho).floor_()
    high = torch.addcmul(above, hi, rho).floor_()
    assert (low != high).float().mean() < 0.002


@given(
    scale=st.floats(0.004, 8.0),
    seed=st.integers(0, 2**31 - 1),
    step=st.sampled_from([H, 1 / 255, 1.0]),
)
@settings(max_examples=25, deadline=None)
def test_shared_quantile_bounds_equal_the_guides_for_any_scale(scale, seed, step):
    """Any scale: rows the arithmetic path accepts draw what the guide
    sampler draws; rows it refuses (a table too narrow for its bounds) are
    left to the guides."""
    from smoothlearn._grid_quantiles import QuantileBounds, bounded_row
    from smoothlearn.grid import RowSampler

    rng = np.random.RandomState(seed)
    scales = quantised_scale(scale * rng.uniform(0.5, 2.0, 4))
    sampler = RowSampler(GAUSSIAN, scales, step, "cpu")
    if not bounded_row(GAUSSIAN, [sampler.tables[i] for i in sampler.which]):
        return
    words = rng.randint(-(2**63), 2**63 - 1, size=(500, 4), dtype=np.int64)
    words = torch.from_numpy(words)
    k = QuantileBounds(GAUSSIAN, 4).sample(sampler, words)
    np.testing.assert_array_equal(k.numpy(), sampler.sample(words).numpy())


def test_quantile_bounds_hold_the_exact_quantiles():
    """Each word's interval holds rho* Phi^-1((u - 1) / 2^64) and rho*
    Phi^-1((u + 2) / 2^64) (mpmath at 100 bits), on words at both ends of
    knot cells and inside them, from the centre to |z| = 6, and is open
    (infinite or NaN) beyond."""
    from smoothlearn._grid_quantiles import KNOT_RHO, QuantileBounds

    bounds = QuantileBounds(GAUSSIAN, 1)
    T, K = bounds.thresholds, bounds.half_width
    rng = np.random.RandomState(4)
    cells = np.concatenate(
        [np.arange(-3, 4), rng.randint(-6143, 6144, 40), [6143, -6143]]
    )
    words, expect_open = [], []
    for c in cells:
        a, b = int(T[c + K - 1]), int(T[c + K])
        inside = a + int(rng.randint(0, 2**62) % (b - a))
        words += [a, b - 1, inside]
        expect_open += [False] * 3
    for c in (6144, -6144, K - 1):  # cells beyond |z| = 6: from T*_(c-1)
        words.append(int(T[c + K - 1]))
        expect_open.append(True)
    words = np.array(words, dtype=np.int64)[:, None]
    lo, hi = (
        v.numpy()[:, 0].astype(np.float64)
        for v in bounds.bounds(torch.from_numpy(words))
    )
    with mpmath.workprec(100):
        for word, low, high, open_ in zip(words[:, 0], lo, hi, expect_open):
            if open_:
                assert not (np.isfinite(low) and np.isfinite(high) and low <= high)
                continue
            u = int(word) + 2**63
            quantile = [
                KNOT_RHO * mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(v) / 2**64 - 1)
                for v in (u - 1, u + 2)
            ]
            assert low <= quantile[0] and quantile[1] <= high
            assert high - low <= 2.0**-18 * (abs(low) + 1)  # narrow: it decides


def test_grid_counts_are_the_same_on_either_path(monkeypatch):
    """count_classes with enough distinct diagonal rows takes the shared
    bounds: the same counts as the guides, and the exact linear probability."""
    from smoothlearn import counting

    network = FlatInputNetwork(linear_module(W, B), (2,), 2)
    X = np.array(
        [[0.25, 0.125], [-0.5, 0.75], [0.0, -0.0625], [0.5, -0.25]], np.float32
    )
    scale = Scale(np.array([[0.25, 0.5], [0.3, 0.3], [0.6, 0.2], [1.7, 0.9]]))
    run = Scale(quantised_scale(scale.values))
    n = 20_000

    def count(least_rows):
        monkeypatch.setattr(counting, "BOUNDED_MIN_ROWS", least_rows)
        bank = NoiseBank(3, ESTIMATION, RawWords(GAUSSIAN), 2)
        return count_classes(network, X, run, bank, n, batch_size=4096, grid=Grid(H))

    shared = count(1)
    np.testing.assert_array_equal(shared, count(10**6))
    for i, x in enumerate(X):
        p = float(_linear_probability(W, B, x / H, run.values[i], H))
        assert abs(shared[i, 1] / n - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-9


def test_only_gaussian_rows_with_room_take_the_shared_bounds():
    from smoothlearn._grid_quantiles import bounded_row

    assert not bounded_row(
        get_noise("laplace"), [rounded_table(get_noise("laplace"), 0.25, H)]
    )
    assert bounded_row(GAUSSIAN, [rounded_table(GAUSSIAN, 0.25, H)])
    # rho = 2^22: |y| would leave float32's exact integers
    from types import SimpleNamespace

    huge = SimpleNamespace(scale=2.0**22, step=1.0, half_width=10**9)
    assert not bounded_row(GAUSSIAN, [huge])
    # inputs far from 0: j + k must stay an exact float32 integer (an
    # independent check found j = 2^24 - 1 accepted, where it is not)
    table = rounded_table(GAUSSIAN, 1.0, H)
    assert bounded_row(GAUSSIAN, [table], 2**21)
    assert not bounded_row(GAUSSIAN, [table], 2**24 - 1)


def test_shared_bounds_draws_pass_the_chi_square_test():
    """The arithmetic path's draws from a bank at a fixed seed against the
    table's exact law (rho = 64 on the 1/255 grid and rho = 4 on 1/16)."""
    from smoothlearn._grid_quantiles import QuantileBounds
    from smoothlearn.grid import RowSampler

    bank = NoiseBank(11, ESTIMATION, RawWords(GAUSSIAN), 16)
    words = bank.rows(0, 8192)  # 131,072 words
    for scale, step in ((0.25, 1 / 255), (0.25, H)):
        table = rounded_table(GAUSSIAN, scale, step)
        sampler = RowSampler(GAUSSIAN, np.full(16, scale), step, "cpu")
        k = QuantileBounds(GAUSSIAN, 16).sample(sampler, words).numpy().ravel()
        atoms, weights = table.pmf()
        expected = np.array(weights, dtype=np.float64) / 2.0**64 * len(k)
        observed = np.bincount(
            k.astype(np.int64) + table.half_width, minlength=len(atoms)
        )
        keep = expected >= 5
        obs = np.append(observed[keep], observed[~keep].sum())
        exp = np.append(expected[keep], expected[~keep].sum())
        assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_without_its_margins_the_arithmetic_errs_on_edge_words():
    """The margins are what make the arithmetic exact: with ``lo = hi`` the
    chord itself (no margin), words on and beside thresholds get wrong k."""
    from smoothlearn._grid_quantiles import QuantileBounds
    from smoothlearn.grid import RowSampler

    rng = np.random.RandomState(3)
    d, step = 12, 1 / 255
    scales = quantised_scale(np.geomspace(1.2 * step, 2000 * step, d))
    sampler = RowSampler(GAUSSIAN, scales, step, "cpu")
    tables = [sampler.tables[i] for i in sampler.which]
    words = _hard_words(rng, [t.thresholds for t in tables], 0)
    words = words[: len(words) // d * d].reshape(-1, d)
    bounds = QuantileBounds(GAUSSIAN, d)
    K = bounds.half_width
    chord = np.arange(-K, K + 1, dtype=np.float64) - 0.5
    finite = np.isfinite(bounds._low)
    bounds._low[finite] = bounds._high[finite] = chord[finite]
    k = bounds.sample(sampler, torch.from_numpy(words)).numpy()
    wrong = sum(
        int(np.sum(k[:, c] != t.sample(torch.from_numpy(words[:, c].copy())).numpy()))
        for c, t in enumerate(tables)
    )
    assert wrong > 10
