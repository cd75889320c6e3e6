"""Denoised smoothing: a frozen, pretrained network behind a trained denoiser."""

import copy
import io
import pickle

import joblib
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import nn

from smoothlearn import SmoothedClassifier, certify_estimator
from smoothlearn.denoisers import (
    DenoisedNetwork,
    ResidualCNNDenoiser,
    ResidualMLPDenoiser,
)
from smoothlearn.metrics import certified_accuracy

from ._factories import fast_strategy
from .conftest import linear_module

FAST = {"n0": 50, "n": 1000, "batch_size": 5000, "random_state": 0}


def _trained_clean(X, y, hidden=64, epochs=40, seed=0):
    """A user's MLP trained on clean inputs with a plain loop."""
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Linear(X.shape[1], hidden), nn.ReLU(), nn.Linear(hidden, len(np.unique(y)))
    )
    optimiser = torch.optim.Adam(net.parameters(), lr=1e-2)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    for _ in range(epochs):
        optimiser.zero_grad()
        F.cross_entropy(net(Xt), yt).backward()
        optimiser.step()
    return net


@pytest.fixture(scope="module")
def pretrained(digits):
    X, y = digits
    return _trained_clean(X[:600], y[:600])


def _snapshot(module):
    return (
        {k: v.clone() for k, v in module.state_dict().items()},
        [p.requires_grad for p in module.parameters()],
        [m.training for m in module.modules()],
        [None if p.grad is None else p.grad.clone() for p in module.parameters()],
    )


def _assert_unchanged(module, snapshot):
    state, flags, modes, grads = snapshot
    now = module.state_dict()
    assert state.keys() == now.keys()
    for key, value in state.items():
        assert torch.equal(value, now[key]), key  # bit-identical
    assert [p.requires_grad for p in module.parameters()] == flags
    assert [m.training for m in module.modules()] == modes
    for p, grad in zip(module.parameters(), grads):  # no gradient reached it
        assert (p.grad is None and grad is None) or torch.equal(p.grad, grad)


@pytest.mark.parametrize("training", ["stability", "mse", "gaussian"])
def test_the_pretrained_network_is_left_bit_identical(digits, training):
    X, y = digits
    net = copy.deepcopy(_trained_clean(X[:300], y[:300], epochs=5))
    # an unusual state that fit must not "fix": training mode, one frozen layer
    net.train()
    net[0].bias.requires_grad_(False)
    before = _snapshot(net)
    clf = SmoothedClassifier(
        net, denoiser="auto", training=training, max_epochs=2, sigma=0.5, **FAST
    ).fit(X[:300], y[:300])
    _assert_unchanged(net, before)
    # the fitted copy is frozen and in eval mode; the denoiser trained
    frozen = clf.net_.module_.classifier
    assert not any(p.requires_grad for p in frozen.parameters())
    assert not frozen.training
    for key, value in before[0].items():
        assert torch.equal(value, frozen.state_dict()[key])
    assert clf.denoiser_ is clf.net_.module_.denoiser
    assert any(p.abs().sum() > 0 for p in clf.denoiser_.tail[-1].parameters())


def test_a_given_denoiser_instance_is_copied_not_trained(digits, pretrained):
    X, y = digits
    denoiser = ResidualMLPDenoiser(64, hidden_units=(32,))
    before = _snapshot(denoiser)
    clf = SmoothedClassifier(
        pretrained, denoiser=denoiser, training="mse", max_epochs=2, **FAST
    ).fit(X[:300], y[:300])
    _assert_unchanged(denoiser, before)
    assert clf.denoiser_ is not denoiser


def _objective(name, clf, X, y, sigma, seed=0):
    """The objective ``name`` of the fitted denoiser, on fixed noise, written out."""
    f = clf.net_.module_.classifier
    D = clf.net_.module_.denoiser.eval()
    Xt = torch.as_tensor(X)
    noise = sigma * torch.randn(Xt.shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        denoised = D(Xt + noise)
        if name == "mse":
            return float(((denoised - Xt) ** 2).mean())
        target = f(Xt).argmax(1) if name == "stability" else torch.as_tensor(y)
        return float(F.cross_entropy(f(denoised), target))


@pytest.mark.parametrize("training", ["stability", "mse", "gaussian"])
def test_each_objective_decreases_its_loss(digits, pretrained, training):
    X, y = digits
    sigma = 0.5
    fits = {
        epochs: SmoothedClassifier(
            pretrained,
            denoiser="auto",
            training=training,
            max_epochs=epochs,
            sigma=sigma,
            lr=3e-3,
            **FAST,
        ).fit(X[:600], y[:600])
        for epochs in (0, 20)
    }
    # untrained, the residual denoiser is the identity: f o D = f
    Xt = torch.as_tensor(X[:5])
    assert torch.equal(fits[0].denoiser_(Xt), Xt)
    before, after = (
        _objective(training, fits[e], X[600:900], y[600:900], sigma) for e in (0, 20)
    )
    assert after < 0.8 * before, (before, after)
    if training == "mse":
        assert before == pytest.approx(sigma**2, rel=0.05)  # D = I leaves the noise


def test_stability_needs_no_labels_beyond_the_classes(digits, pretrained):
    X, y = digits
    kwargs = dict(denoiser="auto", training="stability", max_epochs=3, **FAST)
    a = SmoothedClassifier(pretrained, **kwargs).fit(X[:300], y[:300])
    shuffled = np.random.RandomState(1).permutation(y[:300])
    b = SmoothedClassifier(pretrained, **kwargs).fit(X[:300], shuffled)
    for p, q in zip(a.denoiser_.parameters(), b.denoiser_.parameters()):
        assert torch.equal(p, q)


def _affine_denoiser(A, c):
    layer = nn.Linear(len(c), len(c))
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(A, dtype=torch.float32))
        layer.bias.copy_(torch.as_tensor(c, dtype=torch.float32))
    return layer


@pytest.mark.parametrize("strategy", ["cohen", "ancer"])
def test_certificates_of_f_after_an_affine_denoiser_hold_the_exact_truth(strategy):
    """f(x) = 1[w.x + b > 0] behind D(x) = A x + c: ``f(D(x + S z))`` is
    ``1[u.(x + S z) + b' > 0]`` with ``u = A^T w``, ``b' = w.c + b``, so the
    smoothed probability is ``Phi(|u.x + b'| / ||S u||)`` exactly and a sound
    region ``{S delta : ||delta|| <= gap}`` never crosses ``u.x + b' = 0``:
    ``gap * ||S u|| <= |u.x + b'|``, with equality at the limit."""
    rng = np.random.RandomState(0)
    d = 4
    A = np.eye(d) + 0.4 * rng.randn(d, d)
    c, w, b = 0.3 * rng.randn(d), rng.randn(d), 0.2
    u, b_prime = A.T @ w, w @ c + b
    X = rng.uniform(-1, 1, (40, d)).astype(np.float32)
    clf = SmoothedClassifier(
        linear_module(w, b),
        denoiser=_affine_denoiser(A, c),
        strategy=fast_strategy(strategy),
        sigma=0.5,
        max_epochs=0,  # the denoiser is used as given
        n=100_000,
        batch_size=20_000,
        memory=None,
        random_state=0,
    )
    with pytest.warns(UserWarning) if strategy != "cohen" else _nothing():
        cert = clf.fit(X, (X @ u + b_prime > 0).astype(int)).certify(X)
    margin = np.abs(X @ u + b_prime)
    S = [cert.scale_matrix(i) for i in range(len(X))]
    reach = np.array([g * np.linalg.norm(s @ u) for g, s in zip(cert.gap, S)])
    exact = stats.norm.cdf(margin / np.array([np.linalg.norm(s @ u) for s in S]))
    ok = ~cert.abstained
    assert ok.mean() > 0.8
    # sound: the label is f o D's, the bound below the exact probability and
    # the region on the right side of the boundary (alpha = 0.001, 40 inputs)
    assert (cert.label[ok] == (X[ok] @ u + b_prime > 0)).all()
    assert (cert.p_lower[ok] <= exact[ok] + 1e-9).all()
    assert (reach[ok] <= margin[ok] + 1e-6).all()
    # and tight: at n = 100,000 the bound sits near the exact probability
    inner = ok & (exact < 0.999)
    assert inner.sum() > 10
    assert np.median(reach[inner] / margin[inner]) > 0.9


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_certify_predict_and_proba_smooth_f_after_d(digits, pretrained):
    X, y = digits
    clf = SmoothedClassifier(
        pretrained, denoiser="auto", training="stability", max_epochs=5, **FAST
    ).fit(X[:600], y[:600])
    # the same network without the denoiser votes otherwise on noisy inputs
    proba = clf.predict_proba(X[600:700])
    f_d = clf.net_.module_
    with torch.no_grad():
        noisy = torch.as_tensor(X[600:700]) + 0.25 * torch.randn(100, 64)
        through = f_d(noisy).argmax(1).numpy()
    # vote shares are those of f(D(x + noise)): its label on a noisy copy is
    # the top class or near it
    assert (proba[np.arange(100), through] > 0.05).mean() > 0.95
    cert = clf.certify(X[600:700])
    pred = clf.predict(X[600:700])
    decided = pred != -1
    np.testing.assert_array_equal(pred[decided], proba[decided].argmax(1))
    assert (cert.label[~cert.abstained] == proba[~cert.abstained].argmax(1)).all()


def test_round_trips_through_pickle_and_joblib(digits, pretrained):
    X, y = digits
    clf = SmoothedClassifier(
        pretrained, denoiser="auto", training="stability", max_epochs=3, **FAST
    ).fit(X[:300], y[:300])
    expected = clf.certify(X[300:340])
    buffer = io.BytesIO()
    joblib.dump(clf, buffer)
    buffer.seek(0)
    for loaded in (pickle.loads(pickle.dumps(clf)), joblib.load(buffer)):
        assert isinstance(loaded.denoiser_, ResidualMLPDenoiser)
        assert loaded.denoiser_ is loaded.net_.module_.denoiser
        for p, q in zip(clf.denoiser_.parameters(), loaded.denoiser_.parameters()):
            assert torch.equal(p, q)
        got = loaded.certify(X[300:340])
        np.testing.assert_array_equal(got.label, expected.label)
        np.testing.assert_array_equal(got.p_lower, expected.p_lower)


def test_mse_then_stability_continues_from_the_fitted_denoiser(digits, pretrained):
    X, y = digits
    mse = SmoothedClassifier(
        pretrained, denoiser="auto", training="mse", max_epochs=3, **FAST
    ).fit(X[:300], y[:300])
    then = SmoothedClassifier(
        pretrained, denoiser=mse.denoiser_, training="stability", max_epochs=0, **FAST
    ).fit(X[:300], y[:300])
    # zero further epochs: the MSE denoiser as it was, copied
    assert then.denoiser_ is not mse.denoiser_
    for p, q in zip(mse.denoiser_.parameters(), then.denoiser_.parameters()):
        assert torch.equal(p, q)


def test_denoiser_parameters_reach_the_built_denoiser(digits, pretrained):
    X, y = digits
    clf = SmoothedClassifier(
        pretrained,
        denoiser=ResidualMLPDenoiser,
        denoiser__n_features=64,
        denoiser__hidden_units=(16, 8),
        max_epochs=1,
        **FAST,
    ).fit(X[:200], y[:200])
    assert clf.denoiser_.first.out_features == 16
    assert clf.get_params()["denoiser__hidden_units"] == (16, 8)
    clf.set_params(denoiser__hidden_units=(12,), denoiser="auto")
    clf.set_params(denoiser__n_features=64)
    assert clf.fit(X[:200], y[:200]).denoiser_.first.out_features == 12


def test_images_get_the_residual_cnn(digits):
    X, y = digits
    images = X[:300].reshape(-1, 1, 8, 8)
    torch.manual_seed(0)
    cnn = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 10)
    )
    clf = SmoothedClassifier(
        cnn, denoiser="auto", training="stability", max_epochs=2, **FAST
    ).fit(images, y[:300])
    assert isinstance(clf.denoiser_, ResidualCNNDenoiser)
    cert = clf.certify(images[:10])
    assert cert.center.shape == (10, 64)


class _FirstHalf(nn.Module):
    """Not a denoiser: its output is half its input."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.scale * x[:, : x.shape[1] // 2]


@pytest.mark.parametrize(
    "params, error, match",
    [
        ({"module": None}, TypeError, "trained torch.nn.Module instance"),
        ({"module": nn.Linear}, TypeError, "trained torch.nn.Module instance"),
        ({"training": "consistency"}, ValueError, "only the denoiser is trained"),
        ({"training": "macer"}, ValueError, "only the denoiser is trained"),
        ({"denoiser": nn.Linear(64, 3)}, ValueError, "same shape"),
        ({"denoiser": _FirstHalf}, ValueError, "same shape"),
        ({"denoiser": nn.Identity}, ValueError, "no trainable parameters"),
        ({"denoiser": nn.Flatten, "denoiser__width": 3}, TypeError, "cannot build"),
        (
            {"denoiser": ResidualMLPDenoiser(64), "denoiser__hidden_units": (8,)},
            ValueError,
            "not an instance",
        ),
        ({"module__hidden": 3}, ValueError, "would rebuild it"),
    ],
)
def test_bad_settings_raise_before_training_and_leave_the_state(
    digits, pretrained, params, error, match
):
    X, y = digits
    clf = SmoothedClassifier(
        pretrained, denoiser="auto", training="stability", max_epochs=1, **FAST
    ).fit(X[:100], y[:100])
    net, state = clf.net_, dict(clf.__dict__)
    clf.set_params(**params)
    before = _snapshot(pretrained)
    with pytest.raises(error, match=match):
        clf.fit(X[:100], y[:100])
    assert clf.net_ is net
    fitted = {k: v for k, v in state.items() if k.endswith("_") and k != "net_"}
    for key, value in fitted.items():
        assert clf.__dict__[key] is value, key
    _assert_unchanged(pretrained, before)


def test_denoiser_objectives_need_a_denoiser_and_denoiser_params_too(digits):
    X, y = digits
    with pytest.raises(ValueError, match="give SmoothedClassifier a denoiser"):
        SmoothedClassifier(training="stability", **FAST).fit(X[:50], y[:50])
    with pytest.raises(ValueError, match="need a denoiser"):
        SmoothedClassifier(denoiser__hidden_units=(8,), **FAST).fit(X[:50], y[:50])


def test_a_classifier_of_other_classes_is_refused_before_training(digits, pretrained):
    X, y = digits
    binary = y[:100] % 2
    with pytest.raises(ValueError, match="one score per class"):
        SmoothedClassifier(pretrained, denoiser="auto", **FAST).fit(X[:100], binary)


def test_in_a_pipeline_a_search_and_with_other_noise_and_strategies(digits):
    X, y = digits
    scaler = StandardScaler().fit(X[:600])
    net = _trained_clean(scaler.transform(X[:600]).astype(np.float32), y[:600])
    pipe = make_pipeline(
        StandardScaler(),
        SmoothedClassifier(
            net, denoiser="auto", training="stability", max_epochs=3, **FAST
        ),
    )
    search = GridSearchCV(pipe, {"smoothedclassifier__sigma": [0.25, 0.5]}, cv=2)
    search.fit(X[:400], y[:400])
    cert = certify_estimator(search, X[600:620])
    assert cert.space == "input" and len(cert) == 20
    assert certified_accuracy(y[600:620], cert, 0.0) > 0.5
    for noise in ("uniform", "laplace"):
        clf = SmoothedClassifier(
            net, denoiser="auto", noise=noise, sigma=0.5, max_epochs=2, **FAST
        ).fit(scaler.transform(X[:300]).astype(np.float32), y[:300])
        assert clf.certify(scaler.transform(X[600:605]).astype(np.float32)).norm == "l1"
    clf = SmoothedClassifier(
        net,
        denoiser="auto",
        strategy=fast_strategy("isotropic_dd"),
        max_epochs=2,
        n_jobs=2,
        **FAST,
    ).fit(scaler.transform(X[:300]).astype(np.float32), y[:300])
    cert = clf.certify(scaler.transform(X[600:610]).astype(np.float32))
    assert clf.memory_.n_entries_ == (~cert.abstained).sum()


def test_the_built_in_denoisers_start_as_the_identity():
    torch.manual_seed(0)
    x = torch.randn(3, 2, 7, 9)
    assert torch.equal(ResidualCNNDenoiser(2)(x), x)
    assert torch.equal(ResidualCNNDenoiser(2, factor=1, depth=4)(x), x)
    assert torch.equal(ResidualCNNDenoiser(2, factor=3)(x), x)
    assert torch.equal(ResidualMLPDenoiser(126, (8, 8))(x), x)


def test_the_frozen_network_stays_in_eval_mode_while_the_denoiser_trains():
    classifier = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 2))
    network = DenoisedNetwork(ResidualMLPDenoiser(4, (4,)), classifier)
    network.train()
    assert network.denoiser.training and not network.classifier.training
    x = torch.randn(8, 4)
    assert torch.equal(network(x), network(x))  # dropout off
    assert classifier.training  # the one given, untouched
    assert all(p.requires_grad for p in classifier.parameters())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_denoiser_trained_on_the_gpu_certifies_there(digits, pretrained):
    """Training and certification of f o D run on the GPU; the CPU's
    certificates of the same two networks agree up to Monte Carlo error (the
    two devices draw different banks)."""
    X, y = digits
    kwargs = dict(training="stability", max_epochs=5, **FAST)
    gpu = SmoothedClassifier(pretrained, denoiser="auto", device="cuda", **kwargs)
    gpu.fit(X[:300], y[:300])
    assert next(gpu.denoiser_.parameters()).is_cuda
    cert = gpu.certify(X[300:340])
    denoiser = copy.deepcopy(gpu.denoiser_).cpu()
    cpu = SmoothedClassifier(
        pretrained, denoiser=denoiser, **{**kwargs, "max_epochs": 0}
    )
    on_cpu = cpu.fit(X[:300], y[:300]).certify(X[300:340])
    assert np.mean(on_cpu.label == cert.label) >= 0.9


def test_behind_a_no_op_denoiser_the_network_certifies_as_it_is(digits, pretrained):
    """``f o I`` runs the plain path (the network's first layer sees D's output,
    so it is not reused) and ``f`` the fused one: on the same banks the counts
    are the same draws' votes, so the certificates agree but for float32 ties."""
    X, y = digits
    kwargs = {"max_epochs": 0, "sigma": 0.5, **FAST, "n": 4000}
    as_is = SmoothedClassifier(pretrained, **kwargs).fit(X[:100], y[:100])
    no_op = SmoothedClassifier(pretrained, denoiser=nn.Identity(), **kwargs)
    no_op.fit(X[:100], y[:100])
    a, b = as_is.certify(X[600:700]), no_op.certify(X[600:700])
    np.testing.assert_array_equal(a.label, b.label)
    assert np.abs(a.p_lower - b.p_lower).max() < 1e-3


@pytest.mark.parametrize(
    "hidden, folded", [((256,), True), ((32, 16), True), ((128,), False)]
)
def test_the_network_first_layer_folds_into_the_denoiser_where_it_pays(hidden, folded):
    """``L D(y) = L y + (L W) a(y) + L c`` behind the residual MLP denoiser: the
    stacked map holds the network's first layer where ``L W`` costs less per
    draw than ``W`` then ``L``, and the split reproduces ``f o D`` either way."""
    from smoothlearn.first_layer import find_first_linear

    torch.manual_seed(0)
    d = 64 if not folded else 196
    classifier = nn.Sequential(
        nn.Flatten(), nn.Linear(d, 256), nn.ReLU(), nn.Linear(256, 10)
    )
    denoiser = ResidualMLPDenoiser(d, hidden_units=hidden)
    nn.init.normal_(denoiser.tail[-1].weight, std=0.1)
    network = DenoisedNetwork(denoiser, classifier).eval()
    for shape in ((d,), (1, 14, 14) if d == 196 else (1, 8, 8)):
        split = find_first_linear(network, shape, d)
        out = split.linear.out_features
        assert out == (256 if folded else d) + denoiser.first.out_features
        x = torch.rand(9, *shape)
        with torch.no_grad():
            got = split.rest(split.apply(x.reshape(9, -1)))
            np.testing.assert_allclose(got, network(x), rtol=1e-4, atol=1e-5)
