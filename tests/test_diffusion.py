"""Diffusion denoised smoothing: one step of a pretrained diffusion model in front
of a frozen classifier (Carlini et al., 2023), against exact truths.

For clean data ``x0 ~ N(mu, s^2 I)`` (in the model's [-1, 1] units) and
``x_t = sqrt(a) x0 + sqrt(1 - a) eps``, ``Cov(eps, x_t) = sqrt(1 - a) I`` and
``Var(x_t) = (a s^2 + 1 - a) I``, so the optimal (MMSE) predictors are::

    E[eps | x_t] = sqrt(1 - a) (x_t - sqrt(a) mu) / (a s^2 + 1 - a)
    E[x0  | x_t] = mu + sqrt(a) s^2 (x_t - sqrt(a) mu) / (a s^2 + 1 - a)
    E[v   | x_t] = sqrt(a) E[eps | x_t] - sqrt(1 - a) E[x0 | x_t]

With ``x_t = sqrt(a) y`` and ``L^2 = (1 - a) / a``, each makes the one-step
estimate ``mu + s^2 / (s^2 + L^2) (y - mu)``: the Wiener filter at level ``L``.
"""

import io
import pickle
import warnings

import joblib
import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from torch import nn

from smoothlearn import SmoothedClassifier
from smoothlearn.denoisers import (
    DenoisedNetwork,
    DiffusionDenoiser,
    batch_that_fits,
    noise_levels,
)
from smoothlearn.network import FlatInputNetwork
from smoothlearn.scale import Scale

from ._factories import fast_strategy
from .conftest import linear_module
from .test_denoised import _assert_unchanged, _snapshot

#: DDPM's linear schedule (Ho et al. 2020), 1000 steps.
DDPM = np.cumprod(1 - np.linspace(1e-4, 0.02, 1000))


class GaussianOptimal(nn.Module):
    """The exact MMSE predictor for data ``N(mu, s^2 I)`` in the model's units."""

    def __init__(self, mu, s, alphas_cumprod, prediction="epsilon"):
        super().__init__()
        self.register_buffer("mu", torch.as_tensor(mu, dtype=torch.float64))
        self.s = float(s)
        self.register_buffer("a", torch.as_tensor(alphas_cumprod, dtype=torch.float64))
        self.prediction = prediction
        # a parameter, so that "frozen and untouched" has something to check
        self.unused = nn.Parameter(torch.zeros(1))

    def forward(self, x_t, t):
        shape = (len(t),) + (1,) * (x_t.dim() - 1)
        a = self.a[t].reshape(shape)
        x = x_t.double()
        eps = (1 - a).sqrt() * (x - a.sqrt() * self.mu) / (a * self.s**2 + 1 - a)
        x0 = self.mu + a.sqrt() * self.s**2 * (x - a.sqrt() * self.mu) / (
            a * self.s**2 + 1 - a
        )
        out = {
            "epsilon": eps,
            "sample": x0,
            "v_prediction": a.sqrt() * eps - (1 - a).sqrt() * x0,
        }[self.prediction]
        return out.to(x_t.dtype)


class EchoSample(nn.Module):
    """Predicts the clean input as ``x_t`` itself (prediction='sample')."""

    def forward(self, x_t, t):
        return x_t


def _nearest_timestep(sigma, data_range, alphas=DDPM):
    """The timestep rule computed by hand: nearest level, the first on a tie."""
    lo, hi = data_range
    levels = np.sqrt((1 - alphas) / alphas)
    t = int(np.argmin(np.abs(levels - 2 * sigma / (hi - lo))))
    return t, levels[t] * (hi - lo) / 2


def _wiener(y, mu_data, s_data, level_data):
    return mu_data + s_data**2 / (s_data**2 + level_data**2) * (y - mu_data)


@pytest.mark.parametrize("prediction", ["epsilon", "sample", "v_prediction"])
@pytest.mark.parametrize(
    "data_range, sigma", [((0, 1), 0.25), ((0, 1), 0.5), ((0, 255), 40.0)]
)
def test_the_one_step_estimate_is_the_wiener_filter(prediction, data_range, sigma):
    lo, hi = data_range
    rng = np.random.RandomState(0)
    d, s = 6, 0.3
    mu = rng.uniform(-0.5, 0.5, d)
    model = GaussianOptimal(mu, s, DDPM, prediction)
    denoiser = DiffusionDenoiser(
        model, DDPM, data_range=data_range, prediction=prediction
    )
    t, level = _nearest_timestep(sigma, data_range)
    assert denoiser.timestep(sigma) == t
    assert denoiser.level(t) == pytest.approx(level, rel=1e-12)
    assert denoiser.level_mismatch(sigma) == pytest.approx(abs(level - sigma))
    mu_data, s_data = lo + (hi - lo) * (mu + 1) / 2, s * (hi - lo) / 2
    x0 = mu_data + s_data * rng.randn(50, d)
    y = x0 + sigma * rng.randn(50, d)
    exact = _wiener(y, mu_data, s_data, level)
    got = denoiser(torch.as_tensor(y, dtype=torch.float32), noise_level=sigma)
    np.testing.assert_allclose(got.double().numpy(), exact, rtol=1e-5, atol=0)
    # per-row levels: each row's own timestep
    sigmas = np.array([sigma / 2, sigma, 2 * sigma] * 2)
    got = denoiser(
        torch.as_tensor(y[:6], dtype=torch.float32),
        noise_level=torch.as_tensor(sigmas),
    )
    for row, sig in enumerate(sigmas):
        _, lev = _nearest_timestep(sig, data_range)
        np.testing.assert_allclose(
            got[row].double().numpy(),
            _wiener(y[row], mu_data, s_data, lev),
            rtol=1e-5,
        )


def test_the_timestep_rule_and_the_range_maps_by_hand():
    levels = np.array([0.1, 0.2, 0.4, 0.8])
    alphas = 1 / (1 + levels**2)

    class Constant(nn.Module):
        def __init__(self, value):
            super().__init__()
            self.value = value

        def forward(self, x, t):
            return torch.full_like(x, self.value)

    d = DiffusionDenoiser(Constant(0.0), alphas)  # data in [0, 1]: sigma' = 2 sigma
    # nearest level, the lower on a tie, the ends outside
    for sigma, t in [(0.01, 0), (0.075, 0), (0.1499, 1), (0.15, 1), (0.1501, 2),
                     (0.3, 2), (0.3001, 3), (5.0, 3)]:  # fmt: skip
        assert d.timestep(sigma) == t, sigma
    np.testing.assert_array_equal(d.timestep([0.01, 0.2, 5.0]), [0, 2, 3])
    assert d.level(2) == pytest.approx(0.2)  # 0.4 in [-1, 1] is 0.2 in [0, 1]
    assert d.level_mismatch(0.17) == pytest.approx(0.03)
    np.testing.assert_allclose(d.levels.numpy(), levels, rtol=1e-12)
    y = torch.tensor([[0.0, 100.0, 255.0]], dtype=torch.float64)
    # epsilon = 0: x0 = y' exactly, the two maps inverse to each other
    eps = DiffusionDenoiser(Constant(0.0), alphas, data_range=(0, 255))
    torch.testing.assert_close(eps(y, noise_level=40.0), y)
    # sample = 0.5 in [-1, 1]: 3/4 of the range, whatever y
    sample = DiffusionDenoiser(
        Constant(0.5), alphas, data_range=(0, 255), prediction="sample"
    )
    torch.testing.assert_close(sample(y, noise_level=40.0), torch.full_like(y, 191.25))
    # v = 0: x0 = sqrt(a) x_t = a y'
    v = DiffusionDenoiser(
        Constant(0.0), alphas, data_range=(-1, 3), prediction="v_prediction"
    )
    t = v.timestep(0.3)  # sigma' = 0.15: level 0.1 or 0.2, the first
    assert t == 0
    mapped = (y - (-1)) * 2 / 4 - 1
    torch.testing.assert_close(v(y, noise_level=0.3), (alphas[t] * mapped + 1) * 2 - 1)


def test_a_learned_variance_is_cut_and_a_wrong_shape_refused():
    class Doubled(nn.Module):
        def forward(self, x, t):
            return torch.cat([torch.zeros_like(x), torch.ones_like(x)], dim=1)

    d = DiffusionDenoiser(Doubled(), DDPM)
    x = torch.rand(2, 3, 4, 4)
    torch.testing.assert_close(d(x, noise_level=0.25), x)

    class Flat(nn.Module):
        def forward(self, x, t):
            return x.reshape(len(x), -1)

    with pytest.raises(ValueError, match="input's shape"):
        DiffusionDenoiser(Flat(), DDPM)(x, noise_level=0.25)
    with pytest.raises(ValueError, match="noise level"):
        DiffusionDenoiser(Flat(), DDPM)(x)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"alphas_cumprod": [[0.5]]}, "1-D"),
        ({"alphas_cumprod": [0.9, 0.0]}, r"\(0, 1\]"),
        ({"alphas_cumprod": [0.5, 0.9]}, "non-increasing"),
        ({"data_range": (1, 1)}, "lo < hi"),
        ({"prediction": "noise"}, "prediction"),
        ({"noise_level_rule": "max"}, "noise_level_rule"),
        ({"sigma": -1.0}, "sigma"),
    ],
)
def test_bad_settings_raise(kwargs, match):
    args = {"alphas_cumprod": DDPM, **kwargs}
    with pytest.raises(ValueError, match=match):
        DiffusionDenoiser(nn.Identity(), args.pop("alphas_cumprod"), **args)
    with pytest.raises(TypeError, match="Module"):
        DiffusionDenoiser(lambda x, t: x, DDPM)


def test_noise_levels_of_each_scale_form():
    rng = np.random.RandomState(1)
    d, k = 5, 2
    diag = rng.uniform(0.1, 1.0, (3, d))
    basis = np.stack([np.linalg.qr(rng.randn(d, k))[0] for _ in range(3)])
    values, rest = rng.uniform(0.1, 1.0, (3, k)), rng.uniform(0.1, 1.0, 3)
    frame = rng.uniform(0.5, 2.0, (3, d))
    for scale in (
        Scale(diag),
        Scale(values, basis, rest),
        Scale(values, basis, rest, frame=frame),
    ):
        for i in range(3):
            S = scale.dense(i, d)
            eig = np.linalg.eigvalsh(S)
            assert noise_levels(scale, d, "rms")[i] == pytest.approx(
                np.sqrt(np.mean(eig**2)), rel=1e-10
            )
            assert noise_levels(scale, d, "geometric")[i] == pytest.approx(
                np.exp(np.mean(np.log(eig))), rel=1e-10
            )
    iso = Scale(np.array([0.3, 0.7]))
    for rule in ("rms", "geometric"):
        np.testing.assert_array_equal(noise_levels(iso, d, rule), [0.3, 0.7])
    with pytest.raises(ValueError, match="rule"):
        noise_levels(iso, d, "max")


class _Recording(DiffusionDenoiser):
    """A diffusion denoiser that records the levels it is given."""

    seen = []

    def forward(self, X, noise_level=None):
        if noise_level is not None:
            _Recording.seen.append(torch.as_tensor(noise_level).reshape(-1).clone())
        return super().forward(X, noise_level)


def _linear_setup(sigma, d=4, s=0.35, seed=0):
    """Inputs whose composed margins at ``sigma`` spread over +-2.5 sigma ||u||."""
    rng = np.random.RandomState(seed)
    mu = rng.uniform(-0.3, 0.3, d)
    w, b = rng.randn(d), 0.1
    m_data, s_data = (mu + 1) / 2, s / 2
    k = s_data**2 / (s_data**2 + _nearest_timestep(sigma, (0, 1))[1] ** 2)
    u, b_prime = k * w, (1 - k) * (w @ m_data) + b
    X = rng.uniform(0, 1, (30, d))
    target = rng.uniform(-2.5, 2.5, 30) * sigma * np.linalg.norm(u)
    X += ((target - X @ u - b_prime) / (u @ u))[:, None] * u
    return mu, s, w, b, X.astype(np.float32)


@pytest.mark.parametrize("strategy", ["cohen", "ancer"])
def test_certificates_through_the_denoiser_hold_the_composed_linear_truth(strategy):
    """f(x) = 1[w.x + b > 0] behind the Wiener filter D(y) = m + k (y - m),
    k = s^2 / (s^2 + L^2) at the level L of the input's timestep: f(D(x + S z))
    is 1[u.(x + S z) + b' > 0] with u = k w, b' = (1 - k) w.m + b, so the
    smoothed probability is Phi(|u.x + b'| / ||S u||) exactly."""
    mu, s, w, b, X = _linear_setup(0.3)
    lo, hi = 0.0, 1.0
    _Recording.seen = []
    denoiser = _Recording(GaussianOptimal(mu, s, DDPM), DDPM)
    clf = SmoothedClassifier(
        linear_module(w, b),
        denoiser=denoiser,
        strategy=fast_strategy(strategy),
        sigma=0.3,
        n=100_000,
        batch_size=20_000,
        memory=None,
        random_state=0,
    )
    m_data, s_data = lo + (hi - lo) * (mu + 1) / 2, s * (hi - lo) / 2
    if strategy == "cohen":
        cert = clf.fit(X, np.arange(len(X)) % 2).certify(X)
    else:
        with pytest.warns(UserWarning):
            cert = clf.fit(X, np.arange(len(X)) % 2).certify(X)
    S = [cert.scale_matrix(i) for i in range(len(X))]
    rms = np.array([np.sqrt(np.mean(np.linalg.eigvalsh(M) ** 2)) for M in S])
    levels = np.array([_nearest_timestep(r, (lo, hi))[1] for r in rms])
    k = s_data**2 / (s_data**2 + levels**2)
    u = k[:, None] * w
    b_prime = (1 - k) * (w @ m_data) + b
    margin = np.abs((X * u).sum(1) + b_prime)
    spread = np.array([np.linalg.norm(M @ ui) for M, ui in zip(S, u)])
    exact = stats.norm.cdf(margin / spread)
    # the engine gave the denoiser each input's own level (the strategy's
    # counts of its candidate scales gave theirs too)
    given = torch.cat(_Recording.seen).numpy()
    assert np.isin(np.round(rms, 5), np.round(given, 5)).all()
    if strategy == "ancer":
        assert np.ptp(rms) > 0.01  # the levels did differ between inputs
    ok = ~cert.abstained
    assert ok.mean() > 0.7
    label = ((X * u).sum(1) + b_prime > 0).astype(int)
    assert (cert.label[ok] == label[ok]).all()
    assert (cert.p_lower[ok] <= exact[ok] + 1e-9).all()
    reach = cert.gap * spread
    assert (reach[ok] <= margin[ok] + 1e-6).all()
    if strategy == "cohen":  # tight: at n = 100,000 the bound sits near the truth
        inner = ok & (exact < 0.999)
        assert inner.sum() > 5
        assert np.median(reach[inner] / margin[inner]) > 0.9
    # (ANCER grows the scales, the level with them, and the Wiener filter
    # shrinks each input towards the mean: f o D tends to a constant, certified
    # far out, soundly; every input's exact probability is then near 1)


def test_fit_trains_nothing_and_leaves_both_models_bit_identical(digits):
    X, y = digits
    torch.manual_seed(0)
    classifier = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
    classifier.train()  # an unusual state fit must not "fix"
    model = GaussianOptimal(np.full(64, -0.3), 0.5, DDPM)
    model.train()
    denoiser = DiffusionDenoiser(model, DDPM)
    snapshots = [_snapshot(classifier), _snapshot(model)]
    clf = SmoothedClassifier(
        classifier, denoiser=denoiser, max_epochs=20, n0=20, n=200, random_state=0
    ).fit(X[:50], y[:50])
    assert len(clf.net_.history) == 0  # no epoch ran
    assert clf.net_.optimizer_ is None
    assert denoiser.sigma is None  # the copy was told the level
    assert clf.denoiser_.sigma == clf.sigma
    # the fitted denoiser reports the timestep and level it uses
    t, level = _nearest_timestep(clf.sigma, (0, 1))
    assert clf.denoiser_.timestep() == t
    assert clf.denoiser_.level() == pytest.approx(level, rel=1e-12)
    assert clf.denoiser_.level_mismatch() == pytest.approx(abs(level - clf.sigma))
    with pytest.raises(ValueError, match="give sigma"):
        denoiser.timestep()
    assert not any(p.requires_grad for p in clf.denoiser_.parameters())
    clf.certify(X[50:55])
    clf.predict(X[50:55])
    clf.net_.module_.train()  # the diffusion model stays in eval mode
    assert not clf.denoiser_.model.training
    _assert_unchanged(classifier, snapshots[0])
    _assert_unchanged(model, snapshots[1])


def _fitted_flat(digits, **params):
    X, y = digits
    torch.manual_seed(0)
    classifier = nn.Sequential(nn.Linear(64, 10))
    denoiser = DiffusionDenoiser(GaussianOptimal(np.full(64, -0.5), 0.5, DDPM), DDPM)
    settings = {"n0": 20, "n": 300, "random_state": 0, **params}
    return SmoothedClassifier(classifier, denoiser=denoiser, **settings).fit(
        X[:40], y[:40]
    )


def test_pickles_pipelines_and_scorers_work_through_the_denoiser(digits):
    X, y = digits
    clf = _fitted_flat(digits)
    cert = clf.certify(X[40:46])
    for dump, load in (
        (pickle.dumps, pickle.loads),
        (
            lambda o: (joblib.dump(o, buf := io.BytesIO()), buf.getvalue())[1],
            lambda b: joblib.load(io.BytesIO(b)),
        ),
    ):
        again = load(dump(clf))
        assert isinstance(again.denoiser_, DiffusionDenoiser)
        again.memories_ = {}
        np.testing.assert_array_equal(again.certify(X[40:46]).gap, cert.gap)
    pipe = make_pipeline(
        FunctionTransformer(lambda a: a.astype(np.float32)),
        SmoothedClassifier(
            nn.Sequential(nn.Linear(64, 10)),
            denoiser=DiffusionDenoiser(EchoSample(), DDPM, prediction="sample"),
            n0=20,
            n=200,
            random_state=0,
        ),
    ).fit(X[:40], y[:40])
    assert 0.0 <= pipe.score(X[40:60], y[40:60]) <= 1.0
    assert pipe.predict(X[40:45]).shape == (5,)


def test_the_batch_fits_the_free_memory():
    # 1 GB free, 80% usable, 100 MB fixed: (800 - 100) MB / 7 MB = 100 inputs
    assert batch_that_fits(1000, 7e6, 1e8, 1e9) == 100
    assert batch_that_fits(50, 7e6, 1e8, 1e9) == 50  # the asked batch fits
    assert batch_that_fits(1000, 7e6, 1e9, 1e9) == 1  # never below one input
    assert batch_that_fits(1000, 0.0, 0.0, 1e9) == 1000


def test_only_a_denoised_network_on_a_gpu_is_sized_to_memory(monkeypatch):
    import smoothlearn.denoisers as denoisers

    calls = []

    def figures(network):
        calls.append(network)
        return 7e6, 1e8, 1e9

    monkeypatch.setattr(denoisers, "cuda_memory_figures", figures)
    diffusion = DenoisedNetwork(
        DiffusionDenoiser(EchoSample(), DDPM, prediction="sample", sigma=0.25),
        nn.Linear(4, 2),
    )
    on_gpu = FlatInputNetwork(diffusion, (4,), 2, device="cuda")
    assert on_gpu.batch_size_for(1000) == 100
    assert on_gpu.batch_size_for(1000) == 100 and len(calls) == 1  # measured once
    assert on_gpu.noise_level_rule == "rms"
    on_cpu = FlatInputNetwork(diffusion, (4,), 2, device="cpu")
    assert on_cpu.batch_size_for(1000) == 1000
    plain = FlatInputNetwork(nn.Linear(4, 2), (4,), 2, device="cuda")
    assert plain.batch_size_for(1000) == 1000 and plain.noise_level_rule is None
    assert len(calls) == 1


def test_a_small_diffusers_unet_runs_end_to_end(digits):
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    unet = diffusers.UNet2DModel(
        sample_size=8,
        in_channels=1,
        out_channels=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        layers_per_block=1,
        norm_num_groups=4,
    )
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=1000)
    denoiser = DiffusionDenoiser.from_diffusers(unet, scheduler)
    assert denoiser.prediction == "epsilon"
    np.testing.assert_allclose(
        denoiser.alphas_cumprod.numpy(), scheduler.alphas_cumprod.numpy(), rtol=1e-7
    )
    v = DiffusionDenoiser.from_diffusers(
        unet, diffusers.DDPMScheduler(prediction_type="v_prediction")
    )
    assert v.prediction == "v_prediction"
    X, y = digits
    images = X[:60].reshape(-1, 1, 8, 8)
    classifier = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    snapshot = _snapshot(unet)
    clf = SmoothedClassifier(
        classifier, denoiser=denoiser, n0=10, n=100, batch_size=500, random_state=0
    ).fit(images[:50], y[:50])
    cert = clf.certify(images[50:53])
    assert len(cert) == 3 and clf.predict(images[50:53]).shape == (3,)
    _assert_unchanged(unet, snapshot)
    again = pickle.loads(pickle.dumps(clf))
    again.memories_ = {}
    np.testing.assert_array_equal(again.certify(images[50:53]).gap, cert.gap)
    with pytest.raises(TypeError, match="alphas_cumprod"):
        DiffusionDenoiser.from_diffusers(unet, object())


def test_the_worst_level_mismatch_under_ddpm_is_half_the_largest_gap():
    """Under DDPM's schedule the levels for sigma' in [0.1, 2] are at most
    0.0100 apart: the level used is within 0.0050 of sigma' (0.0025 in the
    units of [0, 1]), the bound the user guide states."""
    denoiser = DiffusionDenoiser(EchoSample(), DDPM, prediction="sample")
    sigmas = np.linspace(0.05, 1.0, 2001)
    worst = max(denoiser.level_mismatch(s) for s in sigmas)
    levels = np.sqrt((1 - DDPM) / DDPM)
    inside = np.flatnonzero((levels >= 0.1) & (levels <= 2.0))
    gap = np.diff(levels[inside[0] - 1 : inside[-1] + 2]).max()
    assert gap < 0.0101
    assert gap / 4 * 0.9 < worst <= gap / 4 + 1e-12  # half the gap, halved to [0, 1]


@pytest.mark.parametrize("strategy", ["isotropic_dd", "rancer", "ucan_universal"])
def test_every_strategy_runs_and_only_a_noise_generator_is_trained(strategy):
    """Strategies run through the denoiser; a UCAN generator is the one thing
    fit trains (through the frozen models), and the models stay untouched."""
    mu, s, w, b, X = _linear_setup(0.3)
    classifier = linear_module(w, b)
    model = GaussianOptimal(mu, s, DDPM)
    snapshots = [_snapshot(classifier), _snapshot(model)]
    clf = SmoothedClassifier(
        classifier,
        denoiser=DiffusionDenoiser(model, DDPM),
        strategy=fast_strategy(strategy),
        sigma=0.3,
        max_epochs=2,
        n0=20,
        n=500,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # few draws for the strategies
        clf.fit(X, np.arange(len(X)) % 2)
        cert = clf.certify(X[:5])
    assert len(cert) == 5
    trained_epochs = len(clf.net_.history)
    assert trained_epochs == (2 if strategy.startswith("ucan") else 0)
    if strategy.startswith("ucan"):
        fresh = SmoothedClassifier(
            linear_module(w, b),
            denoiser=DiffusionDenoiser(model, DDPM),
            strategy=fast_strategy(strategy),
            sigma=0.3,
            max_epochs=0,
            random_state=0,
        ).fit(X, np.arange(len(X)) % 2)
        moved = [
            not torch.equal(p, q)
            for p, q in zip(
                clf.noise_generator_.parameters(), fresh.noise_generator_.parameters()
            )
        ]
        assert any(moved)
    _assert_unchanged(classifier, snapshots[0])
    _assert_unchanged(model, snapshots[1])
