"""Training losses against hand computations, and training end to end."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import norm

from smoothlearn import SmoothedClassifier
from smoothlearn.noise import get_noise
from smoothlearn.training import MACER, Consistency, GaussianAugmentation, SmoothAdv

W = np.array([[1.0, -2.0], [0.5, 1.0], [-1.0, 0.3]])
B = np.array([0.1, -0.2, 0.0])
X = np.array([[0.2, 0.4], [-0.3, 0.1]])
Y = np.array([1, 0])


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _setup(noise_rows):
    """A linear module and a noise sampler returning fixed rows in order."""
    layer = torch.nn.Linear(2, 3).double()
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(W))
        layer.bias.copy_(torch.as_tensor(B))
    noise = torch.as_tensor(noise_rows)

    def sample(shape):
        return noise.reshape(tuple(shape))

    return layer, sample


def _ce(logits, y):
    return -np.log(_softmax(logits)[np.arange(len(y)), y]).mean()


def _kwargs(scale=0.5):
    ce = lambda out, y: F.cross_entropy(out, y)  # noqa: E731
    return {
        "family": get_noise("gaussian"),
        "scale": torch.tensor(scale),
        "epoch": 1,
        "criterion": ce,
    }


def test_gaussian_augmentation_loss():
    z = np.array([[0.1, -0.2], [0.3, 0.05]])
    f, sample = _setup(z)
    loss = GaussianAugmentation().loss(
        f, torch.as_tensor(X), torch.as_tensor(Y), sample, **_kwargs()
    )
    assert loss.item() == pytest.approx(_ce((X + z) @ W.T + B, Y))


def test_gaussian_augmentation_draws_each_inputs_multiplier_from_its_range():
    torch.manual_seed(0)
    n, d, sigma = 400, 4000, 0.5
    seen = []

    def forward(x):
        seen.append(x)
        return torch.zeros(len(x), 2)

    def sample(shape):
        return sigma * torch.randn(shape)

    X0, y0 = torch.zeros(n, d), torch.zeros(n, dtype=torch.long)
    training = GaussianAugmentation(min_multiplier=1.0, max_multiplier=3.0)
    training.loss(forward, X0, y0, sample, **_kwargs(sigma))
    u = (seen[-1].std(dim=1) / sigma).numpy()  # each row's multiplier, sd 1.1%
    assert u.min() > 0.95 and u.max() < 3.15  # 4 sd over 400 rows
    # uniform on [1, 3]: a quarter of the rows in each quarter of the range
    counts = np.histogram(u, bins=[0, 1.5, 2.0, 2.5, 4.0])[0]
    assert (np.abs(counts - n / 4) < 4 * np.sqrt(n * 3 / 16)).all()
    GaussianAugmentation().loss(forward, X0, y0, sample, **_kwargs(sigma))
    np.testing.assert_allclose(seen[-1].std(dim=1).numpy(), sigma, rtol=0.05)


def test_consistency_loss_is_ce_plus_kl_to_the_mean_plus_entropy():
    m = 3
    z = np.random.RandomState(0).randn(2, m, 2) * 0.5
    f, sample = _setup(z)
    method = Consistency(m=m, lbd=2.0, eta=0.7)
    loss = method.loss(f, torch.as_tensor(X), torch.as_tensor(Y), sample, **_kwargs())
    logits = (X[:, None, :] + z) @ W.T + B  # (2, m, 3)
    p = _softmax(logits)
    p_bar = p.mean(1)
    ce = _ce(logits.reshape(-1, 3), np.repeat(Y, m))
    kl = np.mean(
        [
            np.sum(p_bar[i] * (np.log(p_bar[i]) - np.log(p[i, j])))
            for i in range(2)
            for j in range(m)
        ]
    )
    entropy = np.mean(-(p_bar * np.log(p_bar)).sum(-1))
    assert loss.item() == pytest.approx(ce + 2.0 * kl + 0.7 * entropy, rel=1e-9)


def test_macer_loss_is_smoothed_ce_plus_hinge_on_the_gap():
    k = 4
    z = np.random.RandomState(1).randn(2, k, 2) * 0.4
    f, sample = _setup(z)
    method = MACER(n_draws=k, beta=2.0, gamma=8.0, lbd=3.0)
    loss = method.loss(
        f, torch.as_tensor(X), torch.as_tensor(Y), sample, **_kwargs(0.5)
    )
    logits = (X[:, None, :] + z) @ W.T + B
    g = _softmax(logits).mean(1)
    ce = -np.mean(np.log(g[np.arange(2), Y] + 1e-10))
    g_beta = _softmax(2.0 * logits).mean(1)
    robust = 0.0
    for i in range(2):
        order = np.argsort(g_beta[i])[::-1]
        if order[0] != Y[i]:
            continue
        gap = norm.ppf(g_beta[i, order[0]]) - norm.ppf(g_beta[i, order[1]])
        if 0 <= gap <= 8.0:
            robust += 0.5 / 2 * (8.0 - gap)
    assert robust > 0  # the hinge is active for at least one input here
    assert loss.item() == pytest.approx(ce + 3.0 * robust / 2, rel=1e-6)


def test_smoothadv_loss_attacks_then_augments():
    m = 2
    z = np.random.RandomState(2).randn(2, m, 2) * 0.3
    f, sample = _setup(z)
    eps = 0.25
    method = SmoothAdv(epsilon=eps, steps=1, attack_step_size=1.0, n_noise=m)
    loss = method.loss(f, torch.as_tensor(X), torch.as_tensor(Y), sample, **_kwargs())

    def soft_ce(x, i):  # CE of the soft smoothed classifier at x for input i
        probs = _softmax((x + z[i]) @ W.T + B).mean(0)
        return -np.log(probs[Y[i]] + 1e-10)

    expected = 0.0
    for i in range(2):
        h = 1e-6
        grad = (
            np.array(
                [
                    (soft_ce(X[i] + h * e, i) - soft_ce(X[i] - h * e, i)) / (2 * h)
                    for e in np.eye(2)
                ]
            )
            / 2
        )
        step = 1.0 * grad / np.linalg.norm(grad)
        delta = step * min(1.0, eps / np.linalg.norm(step))
        x_adv = X[i] + delta
        expected += _ce((x_adv + z[i]) @ W.T + B, np.repeat(Y[i], m)) * m
    assert loss.item() == pytest.approx(expected / (2 * m), rel=1e-5)
    # the attack raised the loss over plain augmentation at the same noise
    plain = np.mean(
        [_ce((X[i] + z[i]) @ W.T + B, np.repeat(Y[i], m)) for i in range(2)]
    )
    assert loss.item() > plain


def test_smoothadv_warmup_ramps_epsilon():
    method = SmoothAdv(epsilon=1.0, warmup=4)
    assert [method.current_epsilon(e) for e in (1, 2, 4, 9)] == [0.25, 0.5, 1.0, 1.0]


@pytest.mark.parametrize("training", ["gaussian", "consistency", "macer", "smoothadv"])
@pytest.mark.parametrize("image", [False, True])
def test_every_method_trains_on_flat_and_image_digits(training, image, digits):
    X_d, y_d = digits
    X_d = X_d[:300].reshape(-1, 1, 8, 8) if image else X_d[:300]
    params = {
        "training": training,
        "n": 200,
        "n0": 20,
        "max_epochs": 2,
        "random_state": 0,
        "lr": 3e-3,
    }
    a = SmoothedClassifier(**params).fit(X_d, y_d[:300])
    b = SmoothedClassifier(**params).fit(X_d, y_d[:300])
    for pa, pb in zip(a.net_.module_.parameters(), b.net_.module_.parameters()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)  # reproducible
    assert type(a.training_).__name__.lower().startswith(training[:4])
    assert a.certify(X_d[:5]).label.shape == (5,)


@pytest.mark.parametrize(
    "training, match",
    [
        ("adversarial", "training"),
        (Consistency(m=1), "m"),
        (SmoothAdv(attack_step_size=-1.0), "attack_step_size"),
        (MACER(gamma=0), "gamma"),
        (GaussianAugmentation(min_multiplier=2.0, max_multiplier=1.0), "multiplier"),
        (GaussianAugmentation(max_multiplier=0.0), "max_multiplier"),
    ],
)
def test_bad_training_parameters_raise(training, match, digits):
    X_d, y_d = digits
    with pytest.raises(ValueError, match=match):
        SmoothedClassifier(training=training, max_epochs=1).fit(X_d[:20], y_d[:20])


def test_training_parameters_are_tunable():
    clf = SmoothedClassifier(training=MACER())
    clf.set_params(training__lbd=6.0)
    assert clf.get_params()["training__lbd"] == 6.0
