import copy
import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from smoothlearn import SmoothedClassifier

from .conftest import linear_module

FAST = {"n0": 50, "n": 2000, "batch_size": 5000, "max_epochs": 15, "random_state": 0}


@pytest.fixture(scope="module")
def fitted(digits):
    X, y = digits
    return SmoothedClassifier(sigma=0.25, module__hidden_units=(64,), **FAST).fit(
        X[:800], y[:800]
    )


def test_digits_flat_certifies_most_inputs_correctly(fitted, digits):
    X, y = digits
    cert = fitted.certify(X[800:900])
    assert len(cert) == 100
    assert (cert.label == y[800:900]).mean() > 0.8
    assert cert.norm == "l2" and cert.kind == "isotropic"
    np.testing.assert_allclose(cert.scale, 0.25)
    # radius = sigma * Phi^-1(p_lower) wherever certified
    from scipy.stats import norm

    ok = ~cert.abstained
    np.testing.assert_allclose(cert.radius[ok], 0.25 * norm.ppf(cert.p_lower[ok]))
    assert (cert.radius[cert.abstained] == 0).all()


def test_predict_agrees_with_vote_shares_where_it_decides(fitted, digits):
    X, y = digits
    pred = fitted.predict(X[800:900])
    proba = fitted.predict_proba(X[800:900])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    decided = pred != -1
    assert decided.mean() > 0.9
    np.testing.assert_array_equal(
        pred[decided], fitted.classes_[proba[decided].argmax(1)]
    )
    assert fitted.score(X[800:900], y[800:900]) > 0.8


def test_image_shaped_input_uses_a_cnn(digits):
    X, y = digits
    X_img = X.reshape(-1, 1, 8, 8)
    clf = SmoothedClassifier(sigma=0.25, lr=3e-3, **FAST).fit(X_img[:600], y[:600])
    assert type(clf.net_.module_).__name__ == "SmallCNN"
    cert = clf.certify(X_img[400:420])
    assert cert.center.shape == (20, 64)
    assert (cert.label == y[400:420]).mean() > 0.5
    with pytest.raises(ValueError, match="shape"):
        clf.certify(X_img[:5].reshape(5, 1, 4, 16))
    # every pixel of every channel is a feature, as scikit-learn counts them
    assert clf.n_features_in_ == 64 and clf.input_shape_ == (1, 8, 8)
    with pytest.raises(ValueError, match="shape"):
        clf.certify(X[:5])  # the right number of values, flat
    with pytest.raises(ValueError, match="features"):
        clf.certify(X_img[:5, :, :4])


def test_string_labels_and_abstain_label():
    rng = np.random.RandomState(0)
    X = rng.randn(120, 2).astype(np.float32)
    y = np.where(X[:, 0] > 0, "right", "left")
    clf = SmoothedClassifier(sigma=0.5, lr=0.05, **FAST).fit(X, y)
    np.testing.assert_array_equal(clf.classes_, ["left", "right"])
    near = np.array([[0.0, 0.0], [3.0, 0.0]], dtype=np.float32)
    pred = clf.predict(near)
    assert pred[1] == "right"
    cert = clf.set_params(abstain_label="none").certify(near)
    assert cert.label[1] == "right"
    # the given label marks exactly the abstentions; elsewhere the class's label
    np.testing.assert_array_equal(cert.label == "none", cert.abstained)
    decided = ~cert.abstained
    np.testing.assert_array_equal(
        cert.label[decided], clf.classes_[cert.class_index[decided]]
    )


def _string_slab_data():
    """Two string classes split by x0 = 0; the first rows sit on the boundary."""
    rng = np.random.RandomState(0)
    X = rng.randn(40, 2).astype(np.float32)
    X[:4, 0] = 0.0  # the base classifier's vote there is a fair coin
    y = np.where(X[:, 0] > 0, "dog", "cat")  # class index 1 where w.x > 0
    return X, y


def test_string_classes_score_and_report_with_abstentions():
    from sklearn.metrics import classification_report

    X, y = _string_slab_data()
    clf = SmoothedClassifier(
        linear_module([1.0, 0.0], 0.0), max_epochs=0, n=400, random_state=0
    ).fit(X, y)
    pred = clf.predict(X)
    assert (pred[:4] == "abstain").all()  # abstentions of the classes' kind
    assert clf.score(X, y) == pytest.approx(np.mean(pred == y))
    report = classification_report(y, pred, zero_division=0)
    assert "abstain" in report and "cat" in report
    search = GridSearchCV(clf, {"sigma": [0.1, 0.2]}, cv=2).fit(X, y)
    assert 0.5 < search.best_score_ <= 1.0


@pytest.mark.parametrize(
    "label, y, error",
    [
        (-1, ["a", "b"], TypeError),
        ("none", [0, 1], TypeError),
        ("a", ["a", "b"], ValueError),
        (1, [0, 1], ValueError),
    ],
)
def test_abstain_label_must_fit_the_classes(label, y, error):
    X = np.zeros((2, 2), np.float32)
    clf = SmoothedClassifier(abstain_label=label, max_epochs=0)
    with pytest.raises(error, match="abstain_label"):
        clf.fit(X, y)
    assert not hasattr(clf, "classes_")


def test_auto_abstain_label_avoids_the_classes():
    X = np.zeros((3, 2), np.float32)
    clf = SmoothedClassifier(max_epochs=0, n=200, n0=10, random_state=0)
    assert clf.fit(X, [-1, 0, 1])._abstain_label() == -2
    assert clf.fit(X, ["abstain", "b", "c"])._abstain_label() == "<abstain>"


def test_certificates_are_reproducible_and_survive_pickling(fitted, digits):
    X, _ = digits
    first = fitted.certify(X[900:920])
    again = fitted.certify(X[900:920])
    restored = pickle.loads(pickle.dumps(fitted)).certify(X[900:920])
    for other in (again, restored):
        np.testing.assert_array_equal(first.label, other.label)
        np.testing.assert_array_equal(first.p_lower, other.p_lower)


def test_a_row_does_not_depend_on_its_neighbours(fitted, digits):
    X, _ = digits
    whole = fitted.certify(X[900:930])
    part = fitted.certify(X[[925, 903, 911]])
    np.testing.assert_array_equal(part.p_lower, whole.p_lower[[25, 3, 11]])


def test_fit_is_reproducible(digits):
    X, y = digits
    a = SmoothedClassifier(module__hidden_units=(16,), **{**FAST, "max_epochs": 2}).fit(
        X[:200], y[:200]
    )
    b = SmoothedClassifier(module__hidden_units=(16,), **{**FAST, "max_epochs": 2}).fit(
        X[:200], y[:200]
    )
    for pa, pb in zip(a.net_.module_.parameters(), b.net_.module_.parameters()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)


def test_network_parameters_are_parameters():
    clf = SmoothedClassifier(module__hidden_units=(8,), optimizer__weight_decay=1e-4)
    params = clf.get_params()
    assert params["module__hidden_units"] == (8,)
    twin = clone(clf)
    assert twin.get_params()["optimizer__weight_decay"] == 1e-4
    twin.set_params(module__hidden_units=(4, 4), sigma=0.5)
    assert twin.module__hidden_units == (4, 4) and twin.sigma == 0.5
    assert clf.module__hidden_units == (8,)


def test_unknown_network_parameter_is_a_type_error(digits):
    X, y = digits
    with pytest.raises(TypeError, match="hidden_units"):
        SmoothedClassifier(hidden_units=(8,), max_epochs=1).fit(X[:50], y[:50])


def test_pretrained_module_instance_is_used_as_given_and_not_modified():
    module = linear_module([1.0, -1.0], 0.0)
    before = [p.detach().clone() for p in module.parameters()]
    X = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    clf = SmoothedClassifier(module, max_epochs=0, n=500, random_state=0).fit(X, [1, 0])
    for p, q in zip(clf.net_.module_.parameters(), before):
        torch.testing.assert_close(p.detach(), q)
    np.testing.assert_array_equal(clf.predict(X * 3), [1, 0])
    # training a module instance trains a copy, never the caller's object
    SmoothedClassifier(module, max_epochs=3, n=100, random_state=0).fit(X, [1, 0])
    for p, q in zip(module.parameters(), before):
        torch.testing.assert_close(p.detach(), q)


def test_module_with_wrong_output_size_is_rejected():
    X = np.random.RandomState(0).randn(10, 2).astype(np.float32)
    y = np.arange(10) % 3
    with pytest.raises(ValueError, match="one score per class"):
        SmoothedClassifier(linear_module([1.0, 1.0], 0.0), max_epochs=0).fit(X, y)


def test_pipeline_and_grid_search_over_sigma(digits):
    X, y = digits
    raw = X[:300] * 16  # unscaled: the pipeline's scaler brings it to [0, 1]
    pipe = make_pipeline(
        MinMaxScaler(),
        SmoothedClassifier(module__hidden_units=(32,), lr=0.01, **{**FAST, "n": 300}),
    )
    pipe.fit(raw[:200], y[:200])
    assert pipe.score(raw[200:], y[200:300]) > 0.5
    search = GridSearchCV(
        SmoothedClassifier(
            module__hidden_units=(32,), **{**FAST, "n": 300, "max_epochs": 5}
        ),
        {"sigma": [0.1, 1.5]},
        cv=2,
    ).fit(X[:200], y[:200])
    assert search.best_params_ == {"sigma": 0.1}


@pytest.mark.parametrize(
    "params, match",
    [
        ({"sigma": -1.0}, "sigma"),
        ({"sigma": 0}, "sigma"),
        ({"n": 0}, "'n'"),
        ({"alpha": 0.7}, "alpha"),
        ({"strategy": "bogus"}, "strategy"),
        ({"noise": "cauchy"}, "noise"),
        ({"batch_size": 0}, "batch_size"),
        ({"memory": "always"}, "memory"),
    ],
)
def test_invalid_parameters_raise_before_training(params, match, digits):
    X, y = digits
    with pytest.raises(ValueError, match=match):
        SmoothedClassifier(**params).fit(X[:20], y[:20])


def test_bad_input_raises_and_changes_no_state(fitted, digits):
    X, y = digits
    weights = [p.detach().clone() for p in fitted.net_.module_.parameters()]
    bad = X[:30].copy()
    bad[3, 5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fitted.certify(bad)
    bad[3, 5] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        fitted.predict(bad)
    with pytest.raises(ValueError, match="features"):
        fitted.certify(X[:5, :10])
    with pytest.raises(ValueError, match="0 sample"):
        fitted.certify(X[:0])
    with pytest.raises(ValueError, match="1 class"):
        clone(fitted).fit(X[:10], np.zeros(10))
    net_before = fitted.net_
    with pytest.raises(ValueError):
        fitted.fit(bad, y[:30])
    assert fitted.net_ is net_before
    for p, q in zip(fitted.net_.module_.parameters(), weights):
        torch.testing.assert_close(p.detach(), q)


def test_certify_before_fit_is_not_fitted_error():
    with pytest.raises(NotFittedError):
        SmoothedClassifier().certify(np.zeros((2, 3), np.float32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "strategy",
    ["cohen", "isotropic_dd", "ancer", "rancer", "rddrs"],
)
def test_cuda_device(strategy, digits):
    """Banks, counts, optimisers and curvature run on the GPU; the CPU's
    certificates of the same network agree up to Monte Carlo error (the two
    devices draw different banks)."""
    from smoothlearn.strategies import get_strategy

    X, y = digits
    fast = get_strategy(strategy)
    if strategy != "cohen":
        fast.set_params(n_iter=20)
    if strategy in ("rancer", "rddrs"):
        fast.set_params(rank=9)
    clf = SmoothedClassifier(device="cuda", **FAST).fit(X[:200], y[:200])
    clf.set_params(strategy=fast)
    cert = clf.certify(X[:20])
    assert cert.label.shape == (20,)
    # the same trained weights certified on the CPU (max_epochs=0 keeps them)
    module = copy.deepcopy(clf.net_.module_).cpu()
    settings = {**FAST, "max_epochs": 0}
    on_cpu = SmoothedClassifier(module, strategy=fast, **settings)
    on_cpu.fit(X[:200], y[:200])
    agree = np.mean(on_cpu.certify(X[:20]).label == cert.label)
    assert agree >= 0.9


def test_the_network_view_is_built_once_and_follows_the_weights():
    # the certification view of the fitted network (its first-layer split and
    # check) is built once per fitted network, and again when its weights change
    from smoothlearn.estimators._noisy_net import certification_network

    X = np.random.RandomState(0).randn(6, 3).astype(np.float32)
    clf = SmoothedClassifier(
        linear_module([1.0, 0.0, 0.0], 0.0), n=500, max_epochs=0, random_state=0
    ).fit(X, [0, 1, 0, 1, 0, 1])
    first = certification_network(clf.net_, clf.input_shape_, 2)
    assert certification_network(clf.net_, clf.input_shape_, 2) is first
    before = clf.predict(np.array([[2.0, 0.0, 0.0]], dtype=np.float32))
    with torch.no_grad():  # the fitted network changes in place: flip its sign
        clf.net_.module_.weight[1].neg_()
    assert certification_network(clf.net_, clf.input_shape_, 2) is not first
    after = clf.predict(np.array([[2.0, 0.0, 0.0]], dtype=np.float32))
    assert before.tolist() == [1] and after.tolist() == [0]


def test_a_parameter_of_another_strategy_names_the_strategies_it_belongs_to():
    clf = SmoothedClassifier(strategy="cohen", max_epochs=1)
    with pytest.raises(ValueError) as raised:
        clf.set_params(strategy__kappa=2.0)
    message = str(raised.value)
    assert "Invalid parameter 'kappa' for strategy='cohen'" in message
    assert "strategy='ancer'" in message and "strategy='rancer'" in message
    assert "strategy='cohen'" not in message.split("belongs to")[1]
    assert clf.strategy == "cohen"  # nothing set
    with pytest.raises(ValueError, match="it belongs to strategy='rancer', "):
        clf.set_params(strategy__rank=3)
    with pytest.raises(ValueError, match="did you mean 'kappa'"):
        clf.set_params(strategy="ancer", strategy__kapa=1.0)
    with pytest.raises(ValueError, match="training='macer'"):
        clf.set_params(training__beta=1.0)
    # given to the constructor, the same message before any training
    X = np.zeros((4, 2), dtype=np.float32)
    with pytest.raises(ValueError, match="it belongs to strategy='ancer'"):
        SmoothedClassifier(strategy="cohen", strategy__kappa=2.0).fit(X, [0, 1, 0, 1])
    with pytest.raises(TypeError, match="strategy=ANCER"):
        SmoothedClassifier(strategy="ancer", strategy__kappa=2.0).fit(X, [0, 1, 0, 1])
