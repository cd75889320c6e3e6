"""The memory is fitted state: sound through pickle, joblib, deepcopy, switches.

The slab network (class 1 iff |x0| < 0.1) is where a data-dependent smoothing
goes wrong without its memory: far from the slab ``isotropic_dd`` grows its
sigma until x2 = (0.3, 0) gets a huge class-0 region that covers x1 = (0, 0),
certified class 1 just before.
"""

import copy
import io
import pickle

import joblib
import numpy as np
import pytest
import torch

from smoothlearn import Certificates, MemoryCertifier, SmoothedClassifier
from smoothlearn.metrics import assert_certificates_equal
from smoothlearn.strategies import ANCER, IsotropicDD

X1 = np.array([[0.0, 0.0]], dtype=np.float32)
X2 = np.array([[0.3, 0.0]], dtype=np.float32)


def slab_module():
    """Logits (0, 10 (0.1 - |x0|)): class 1 iff |x0| < 0.1."""
    first = torch.nn.Linear(2, 2)
    last = torch.nn.Linear(2, 2)
    with torch.no_grad():
        first.weight.copy_(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))
        first.bias.zero_()
        last.weight.copy_(torch.tensor([[0.0, 0.0], [-10.0, -10.0]]))
        last.bias.copy_(torch.tensor([0.0, 1.0]))
    return torch.nn.Sequential(first, torch.nn.ReLU(), last)


def slab_classifier(strategy=None):
    rng = np.random.RandomState(0)
    X = rng.uniform(-1, 1, (40, 2)).astype(np.float32)
    y = (np.abs(X[:, 0]) < 0.1).astype(int)
    y[:2] = [0, 1]
    return SmoothedClassifier(
        slab_module(),
        strategy=strategy or IsotropicDD(n_iter=40, n_draws=64),
        sigma=0.03,
        n0=64,
        n=4000,
        max_epochs=0,
        random_state=0,
    ).fit(X, y)


def _joblib_round_trip(clf):
    buf = io.BytesIO()
    joblib.dump(clf, buf)
    buf.seek(0)
    return joblib.load(buf)


ROUND_TRIPS = {
    "pickle": lambda clf: pickle.loads(pickle.dumps(clf)),
    "joblib": _joblib_round_trip,
    "deepcopy": copy.deepcopy,
}


def _certifies_x1_then_x2(clf_after_x1):
    cert = clf_after_x1.certify(X2)
    assert cert.label[0] == 0
    return cert


def test_without_the_memory_x2_would_cover_x1():
    # the failure the memory exists for: x2's own region holds x1
    clf = slab_classifier().set_params(memory=None)
    with pytest.warns(UserWarning, match="not sound"):
        cert = clf.certify(X2)
    assert cert.label[0] == 0
    assert cert.contains(0, X1 - X2)


@pytest.mark.parametrize("round_trip", sorted(ROUND_TRIPS))
def test_memory_survives_saving_and_loading(round_trip):
    clf = slab_classifier()
    first = clf.certify(X1)
    assert first.label[0] == 1 and first.radius[0] > 0
    loaded = ROUND_TRIPS[round_trip](clf)
    cert = _certifies_x1_then_x2(loaded)
    assert not cert.contains(0, X1 - X2)
    assert cert.reduced[0]
    # the original, certified the same way, agrees with the loaded copy
    np.testing.assert_array_equal(clf.certify(X2).radius, cert.radius)


def test_switching_strategy_and_back_continues_the_first_memory():
    clf = slab_classifier()
    assert clf.certify(X1).label[0] == 1
    clf.set_params(strategy=ANCER(n_iter=10, n_draws=32))
    clf.certify(np.array([[0.0, 0.5]], dtype=np.float32))
    assert len(clf.memories_) == 2
    clf.set_params(strategy=IsotropicDD(n_iter=40, n_draws=64))
    cert = _certifies_x1_then_x2(clf)
    assert not cert.contains(0, X1 - X2)


def test_each_smoothing_keeps_its_own_memory():
    clf = slab_classifier()
    clf.certify(X1)
    # another smoothing (another sigma) is another classifier: its own memory
    clf.set_params(sigma=0.031)
    clf.certify(X2)
    keys = list(clf.memories_)
    assert len(keys) == 2
    assert [clf.memories_[k].n_entries_ for k in keys] == [1, 1]


def test_refitting_empties_the_memory():
    clf = slab_classifier()
    clf.certify(X1)
    rng = np.random.RandomState(0)
    X = rng.uniform(-1, 1, (40, 2)).astype(np.float32)
    y = (np.abs(X[:, 0]) < 0.1).astype(int)
    clf.fit(X, y)
    assert clf.memories_ == {}
    assert not clf.certify(X2).reduced[0]


def test_a_given_memory_instance_is_used_and_saved_with_the_estimator():
    memory = MemoryCertifier()
    clf = slab_classifier().set_params(memory=memory)
    clf.certify(X1)
    assert memory.n_entries_ == 1
    loaded = pickle.loads(pickle.dumps(clf))
    assert not _certifies_x1_then_x2(loaded).contains(0, X1 - X2)


def _rotated_certificates():
    rng = np.random.RandomState(0)
    basis = np.stack([np.linalg.qr(rng.randn(3, 2))[0] for _ in range(2)])
    return Certificates(
        label=[0, 1],
        abstained=[False, False],
        p_lower=[0.9, 0.9],
        gap=[1.0, 1.0],
        center=[[0.0, 0.0, 0.0], [5.0, 0.0, 0.0]],
        scale=[[1.0, 0.5], [1.0, 0.5]],
        basis=basis,
        scale_rest=[0.7, 0.7],
        noise="gaussian",
        class_index=[0, 1],
    )


def test_remembered_regions_own_their_arrays():
    probe = Certificates(
        label=[1],
        abstained=[False],
        p_lower=[0.9],
        gap=[1.0],
        center=[[1.2, 0.0, 0.0]],
        scale=[1.0],
        noise="gaussian",
        class_index=[1],
    )
    pristine = MemoryCertifier()
    pristine.fit(_rotated_certificates())
    expected = pristine.transform(probe)
    assert expected.reduced[0]

    memory = MemoryCertifier()
    given = _rotated_certificates()
    returned = memory.fit_transform(given)
    # a caller edits both what it passed in and what it got back
    for cert in (given, returned):
        cert.scale[:] *= 1e-3
        cert.scale_rest[:] *= 1e-3
        cert.basis[:] = 0.0
        cert.center[:] += 100.0
        cert.gap[:] = 1e-6
    got = memory.transform(probe)
    assert_certificates_equal(got, expected)


def test_predict_proba_agrees_with_the_memory_based_predict():
    """Where the memory-based predict decides, predict_proba's argmax is that
    class; predict_proba neither abstains nor touches the memory."""
    clf = slab_classifier()
    X = np.array([[0.0, 0.0], [0.3, 0.0], [-0.5, 0.2], [0.05, 1.0]], np.float32)
    proba = clf.predict_proba(X)
    assert clf.memories_ == {}  # predict_proba remembers nothing
    pred = clf.predict(X)
    decided = pred != -1
    assert decided.sum() >= 3
    np.testing.assert_array_equal(pred[decided], proba[decided].argmax(1))
    (memory,) = clf.memories_.values()
    assert memory.n_seen_ == len(X)
