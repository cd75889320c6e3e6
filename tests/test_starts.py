"""Starts (the isotropic sigma, ANCER's answer) are computed once per key, and
only where nothing changed."""

import numpy as np
import pytest
import torch

from smoothlearn.strategies import ANCER, RANCER, RDDRS, IsotropicDD, _starts

from ._factories import FAST_ISOTROPIC, FAST_OPTIMISER, fast_classifier, fresh_copy


class _Counting(IsotropicDD):
    """IsotropicDD that counts the inputs it optimises."""

    calls = 0

    def optimise(self, network, X, sigma_start, **kwargs):
        type(self).calls += len(X)
        return super().optimise(network, X, sigma_start, **kwargs)


@pytest.fixture
def counting():
    _starts._starts.clear()
    _Counting.calls = 0
    yield _Counting
    _starts._starts.clear()


def _fast(counting):
    return counting(**FAST_ISOTROPIC, compare_draws=0)


def _ancer(isotropic, **params):
    return ANCER(**FAST_OPTIMISER, isotropic=isotropic, compare_draws=0, **params)


def _starting_from(counting):
    """Strategies that start from ``counting``'s isotropic sigma."""
    return (
        _ancer(_fast(counting)),
        _ancer(_fast(counting), kappa=4.0),
        RANCER(**FAST_OPTIMISER, isotropic=_fast(counting), rank=3, compare_draws=0),
        RDDRS(**FAST_OPTIMISER, isotropic=_fast(counting), rank=3, compare_draws=0),
    )


def test_strategies_share_the_start_and_certify_exactly_as_without_it(digits, counting):
    X, y = digits
    clf = fast_classifier(strategy=_fast(counting)).fit(X[:300], y[:300])
    X_test = X[300:320]
    clf.certify(X_test)
    assert counting.calls == 20
    shared = [
        fresh_copy(clf, strategy=strategy).certify(X_test)
        for strategy in _starting_from(counting)
    ]
    assert counting.calls == 20  # isotropic_dd's starts served them all
    _starts._starts.clear()
    for strategy, cert in zip(_starting_from(counting), shared):
        alone = fresh_copy(clf, strategy=strategy).certify(X_test)
        np.testing.assert_array_equal(alone.label, cert.label)
        np.testing.assert_array_equal(alone.radius, cert.radius)
        np.testing.assert_array_equal(alone.scale, cert.scale)
    # once the cache was cleared the first computed them again, for the rest
    assert counting.calls == 20 * 2


@pytest.mark.parametrize("kind", [RANCER, RDDRS])
def test_rank_k_reuses_ancers_answer_and_certifies_as_without_it(
    digits, counting, monkeypatch, kind
):
    """Rank-k RANCER's and RDDRS's frame is ANCER's answer for the same
    inputs: computed by ``ancer`` certified first, it is not computed again,
    and they certify exactly as they do when they compute it themselves."""
    X, y = digits
    calls = []
    optimise = ANCER.optimise

    def counted(self, network, X, *args, **kwargs):
        calls.append(len(X))
        return optimise(self, network, X, *args, **kwargs)

    monkeypatch.setattr(ANCER, "optimise", counted)
    ancer = ANCER(**FAST_OPTIMISER, isotropic=_fast(counting))
    clf = fast_classifier(strategy=ancer).fit(X[:300], y[:300])
    X_test = X[300:320]
    clf.certify(X_test)
    assert sum(calls) == 20
    rancer = kind(**FAST_OPTIMISER, isotropic=_fast(counting), rank=3)
    shared = fresh_copy(clf, strategy=rancer).certify(X_test)
    assert sum(calls) == 20
    _starts._starts.clear()
    alone = fresh_copy(clf, strategy=rancer).certify(X_test)
    assert sum(calls) == 40
    assert (alone.scale_frame != 1.0).any()
    for name in ("label", "radius", "scale", "scale_frame", "basis"):
        np.testing.assert_array_equal(getattr(alone, name), getattr(shared, name))


@pytest.fixture(scope="module")
def fitted(digits):
    X, y = digits
    return fast_classifier(strategy="isotropic_dd").fit(X[:300], y[:300])


@pytest.mark.parametrize(
    "change",
    ["sigma", "random_state", "isotropic_params", "weights", "inputs", "patched"],
)
def test_anything_the_start_depends_on_computes_it_again(
    digits, fitted, counting, monkeypatch, change
):
    X_test = digits[0][300:308]
    fresh_copy(fitted, strategy=_fast(counting)).certify(X_test)
    assert counting.calls == 8
    again = fresh_copy(fitted, strategy=_fast(counting))
    if change == "sigma":
        again.set_params(sigma=0.12)
    elif change == "random_state":
        again.set_params(random_state=1)
    elif change == "isotropic_params":
        again.set_params(strategy=counting(**FAST_ISOTROPIC, lr=0.05, compare_draws=0))
    elif change == "weights":  # in place, as a warm start would
        with torch.no_grad():
            next(again.net_.module_.parameters()).add_(1e-3)
    elif change == "inputs":
        X_test = X_test.copy()
        X_test[0, 10] += 1e-3
    elif change == "patched":  # a patched optimiser is another function
        original = _Counting.optimise
        monkeypatch.setattr(
            _Counting, "optimise", lambda *args, **kwargs: original(*args, **kwargs)
        )
    again.certify(X_test)
    assert counting.calls == 16
    again.certify(X_test)
    assert counting.calls == 16  # and is kept for the next call
