"""One smoothing, one memory: memories are keyed by the smoothing's values.

Two settings that make the engine run the same smoothing (a number of another
type, a default given, a renamed parameter under its old name, another
``print_changed_only``) must share one memory: with two, the slab network's
x2 = (0.3, 0) is certified class 0 with a region holding x1 = (0, 0), which the
same estimator certified class 1 (``test_memory_state``'s failure).
"""

import contextlib
import pickle

import numpy as np
import pytest
import sklearn
from hypothesis import given, settings
from hypothesis import strategies as st

from smoothlearn.noise import get_noise
from smoothlearn.strategies import ANCER, RANCER, IsotropicDD, describe_smoothing

from .test_memory_state import X1, X2, slab_classifier

GAUSSIAN = get_noise("gaussian")


def _spellings(value):
    """The ways a user may write a number of this value (all exact)."""
    out = [float(value), np.float64(value)]
    if float(np.float32(value)) == value:  # numpy 2 compares in float32
        out.append(np.float32(value))
    if float(value).is_integer():
        out += [int(value), np.int64(value), np.int32(value)]
    return out


def _integral_spellings(value):
    return [int(value), np.int64(value), np.int32(value)]


@st.composite
def _spelled(draw, values, integral=False):
    """``(value, spelling)``: a value and one way of writing it."""
    value = draw(st.sampled_from(values))
    spell = _integral_spellings if integral else _spellings
    return value, draw(st.sampled_from(spell(value)))


# each parameter: (integral, values a grid might hold)
ISOTROPIC_PARAMS = {
    "lr": (False, [0.04, 0.05, 1.0, 2.0]),
    "n_iter": (True, [30, 40, 300]),
    "min_sigma": (False, [1e-3, 0.5, 1.0]),
    "clip": (False, [1e-3, 0.25]),
}
ANCER_PARAMS = {
    "kappa": (False, [1.0, 2.0, 2.5, 3.0]),
    "n_iter": (True, [20, 100]),
    "lr": (False, [0.04, 0.5]),
}


@st.composite
def _isotropic(draw):
    """``(values, IsotropicDD spelled some way)``; ``n_draws`` perhaps under
    its old name ``n_samples``, defaults perhaps left out."""
    values, given_params = {}, {}
    for name, (integral, choices) in ISOTROPIC_PARAMS.items():
        value, spelling = draw(_spelled(choices, integral))
        values[name] = value
        if draw(st.booleans()) or value != IsotropicDD().get_params()[name]:
            given_params[name] = spelling
    n_draws = draw(st.sampled_from([64, 100]))
    values["n_draws"] = n_draws
    alias = draw(st.sampled_from(["n_draws", "n_samples", "default"]))
    if alias == "default" and n_draws != 100:
        alias = "n_draws"
    if alias != "default":
        given_params[alias] = draw(st.sampled_from(_integral_spellings(n_draws)))
    return values, IsotropicDD(**given_params)


@st.composite
def _ancer(draw):
    values, given_params = {}, {}
    for name, (integral, choices) in ANCER_PARAMS.items():
        value, spelling = draw(_spelled(choices, integral))
        values[name] = value
        given_params[name] = spelling
    isotropic_values, isotropic = draw(_isotropic())
    values["isotropic"] = isotropic_values
    defaults = IsotropicDD().get_params()
    if all(v == defaults[k] for k, v in isotropic_values.items()) and draw(
        st.booleans()
    ):
        isotropic = None  # None stands for IsotropicDD()
    return values, ANCER(isotropic=isotropic, **given_params)


def _key(strategy, sigma=0.25):
    return describe_smoothing(strategy, GAUSSIAN, sigma)


def _resolved(values):
    """The reference: every value as the engine runs it (compared with ==)."""
    defaults = {
        name: value
        for name, value in IsotropicDD().get_params().items()
        if name != "n_samples"
    }
    if "isotropic" in values:
        return {**values, "isotropic": {**defaults, **values["isotropic"]}}
    return {**defaults, **values}


@settings(max_examples=300, deadline=None)
@given(a=_isotropic(), b=_isotropic(), changed_only=st.booleans())
def test_isotropic_dd_keys_are_equal_exactly_when_the_values_are(a, b, changed_only):
    (values_a, strategy_a), (values_b, strategy_b) = a, b
    with sklearn.config_context(print_changed_only=changed_only):
        same = _key(strategy_a) == _key(strategy_b)
    assert same == (_resolved(values_a) == _resolved(values_b))


@settings(max_examples=300, deadline=None)
@given(a=_ancer(), b=_ancer(), changed_only=st.booleans())
def test_ancer_keys_are_equal_exactly_when_the_values_are(a, b, changed_only):
    (values_a, strategy_a), (values_b, strategy_b) = a, b
    with sklearn.config_context(print_changed_only=changed_only):
        same = _key(strategy_a) == _key(strategy_b)
    assert same == (_resolved(values_a) == _resolved(values_b))


@settings(max_examples=100, deadline=None)
@given(
    sigma=st.sampled_from([0.25, 0.5, 1.0, 2.0]),
    other=st.sampled_from([0.25, 0.5, 1.0, 2.0]),
    data=st.data(),
)
def test_sigma_is_compared_by_value(sigma, other, data):
    spelled = data.draw(st.sampled_from(_spellings(sigma)))
    assert (_key(ANCER(), spelled) == _key(ANCER(), other)) == (sigma == other)


def test_settings_that_run_differently_keep_apart():
    base = _key(ANCER())
    assert _key(ANCER(kappa=2.5)) != base
    assert _key(ANCER(compare_draws=0)) != base  # another choice per input
    assert _key(ANCER(isotropic=IsotropicDD(n_iter=10))) != base
    assert _key(RANCER(rank=4)) != _key(RANCER())
    assert describe_smoothing(ANCER(), get_noise("laplace"), 0.25) != base

    class MyANCER(ANCER):  # a user's subclass may run otherwise
        pass

    assert _key(MyANCER()) != base
    # what only the start reads of the nested IsotropicDD: its own comparison
    # with Cohen's sigma is not run by ANCER
    assert _key(ANCER(isotropic=IsotropicDD(compare_draws=0))) == base


# spellings of IsotropicDD(n_iter=40, n_draws=64): the slab's smoothing
SLAB_SPELLINGS = [
    IsotropicDD(n_iter=40, n_draws=64),
    IsotropicDD(n_iter=np.int64(40), n_draws=np.int32(64)),
    IsotropicDD(n_iter=40, n_samples=64),
    # the defaults given, as numpy numbers
    IsotropicDD(
        n_iter=40,
        n_draws=64,
        lr=np.float64(0.04),
        clip=1e-3,
        min_sigma=np.float64(1e-3),
        compare_draws=np.int64(4000),
    ),
]


@pytest.mark.parametrize("second", range(1, len(SLAB_SPELLINGS)))
def test_two_spellings_share_one_memory_and_stay_sound(second):
    clf = slab_classifier(SLAB_SPELLINGS[0])
    first = clf.certify(X1)
    assert first.label[0] == 1
    clf.set_params(strategy=SLAB_SPELLINGS[second])
    renamed = "n_samples" in SLAB_SPELLINGS[second].get_params(deep=False) and (
        SLAB_SPELLINGS[second].n_samples != "deprecated"
    )
    with pytest.warns(FutureWarning) if renamed else contextlib.nullcontext():
        cert = clf.certify(X2)
    assert len(clf.memories_) == 1
    assert cert.smoothing == first.smoothing
    # the same smoothing ran (same scales before the memory), and the memory
    # kept x2's region off x1
    alone = slab_classifier(SLAB_SPELLINGS[0]).certify(X2)
    assert cert.label[0] == 0 and alone.contains(0, X1 - X2)
    assert not cert.contains(0, X1 - X2) and cert.reduced[0]


def test_display_settings_change_no_memory():
    clf = slab_classifier(IsotropicDD(n_iter=40, n_draws=64))
    clf.certify(X1)
    with sklearn.config_context(print_changed_only=False):
        cert = clf.certify(X2)
    assert len(clf.memories_) == 1
    assert not cert.contains(0, X1 - X2)


def test_certificates_record_the_whole_smoothing():
    clf = slab_classifier(IsotropicDD(n_iter=40, n_draws=64))
    cert = clf.certify(X1)
    assert cert.strategy == "isotropic_dd"
    assert cert.smoothing == (
        "isotropic_dd(clip=0.001, compare_draws=4000, lr=0.04, min_sigma=0.001, "
        "n_draws=64, n_iter=40, tol=0.001) gaussian sigma=0.03"
    )
    assert list(clf.memories_) == [cert.smoothing]
    pd = pytest.importorskip("pandas")
    frame = cert.to_frame()
    assert isinstance(frame, pd.DataFrame)
    assert (frame["smoothing"] == cert.smoothing).all()
    # two smoothings are told apart; their concatenation records neither
    other = clf.set_params(sigma=0.05).certify(X2)
    assert other.smoothing.endswith("sigma=0.05") and other.smoothing != cert.smoothing
    both = type(cert).concatenate([cert, other])
    assert both.smoothing == "" and both.strategy == "isotropic_dd"


def test_the_tsv_log_records_the_smoothing(tmp_path):
    from smoothlearn.metrics import read_certificates_tsv, write_certificates_tsv

    cert = slab_classifier(IsotropicDD(n_iter=40, n_draws=64)).certify(
        np.concatenate([X1, X2])
    )
    write_certificates_tsv(tmp_path / "log.tsv", cert, [1, 0])
    log = read_certificates_tsv(tmp_path / "log.tsv")
    assert log.smoothing.tolist() == [cert.smoothing] * 2


def _old_key(strategy, sigma):
    """How an earlier version keyed a memory: (name, (param, repr) pairs,
    noise, repr(sigma))."""
    params = sorted(strategy.get_params(deep=False).items())
    return (
        strategy.name,
        tuple((name, repr(value)) for name, value in params),
        "gaussian",
        repr(float(sigma)),
    )


def test_a_model_saved_with_split_memories_loads_with_one():
    """A model saved by an earlier version: its memories, keyed by ``repr``,
    are re-keyed by value on load, and two that are one smoothing's joined."""
    clf = slab_classifier(IsotropicDD(n_iter=40, n_draws=64))
    clf.certify(X1)
    (memory,) = clf.memories_.values()
    # the earlier version's split: the same smoothing under two keys, x1's
    # region remembered under the second
    split = slab_classifier(IsotropicDD(n_iter=40, n_draws=64))
    split.certify(np.array([[0.0, 5.0]], dtype=np.float32))
    (other,) = split.memories_.values()
    clf.memories_ = {
        _old_key(IsotropicDD(n_iter=40, n_draws=64), 0.03): other,
        _old_key(IsotropicDD(n_iter=np.int64(40), n_draws=64), 0.03): memory,
    }
    assert len(set(clf.memories_)) == 2
    with pytest.warns(UserWarning, match="joined"):
        loaded = pickle.loads(pickle.dumps(clf))
    (key,) = loaded.memories_
    assert key == _key(IsotropicDD(n_iter=40, n_draws=64), 0.03)
    assert loaded.memories_[key].n_entries_ == 2
    cert = loaded.certify(X2)
    assert cert.label[0] == 0 and not cert.contains(0, X1 - X2)


def _fast_rancer(**params):
    return RANCER(
        n_iter=20, n_draws=64, isotropic=IsotropicDD(n_iter=40, n_draws=64), **params
    )


@pytest.mark.parametrize("rank", [None, 2, 5])
def test_rank_auto_and_the_rank_it_resolves_to_share_one_memory(rank):
    """On 2 features ``rank='auto'`` runs the dense form, as ``rank=None`` does
    and as any rank of at least 2 does: one smoothing, so one memory, and
    certificates that record the rank that ran."""
    clf = slab_classifier(_fast_rancer())
    first = clf.certify(X1)
    assert "rank=None" in first.smoothing and "'auto'" not in first.smoothing
    clf.set_params(strategy=_fast_rancer(rank=rank))
    cert = clf.certify(X2)
    assert list(clf.memories_) == [first.smoothing] == [cert.smoothing]
    (memory,) = clf.memories_.values()
    assert memory.n_entries_ == (~first.abstained).sum() + (~cert.abstained).sum()
    if first.label[0] != cert.label[0] and not first.abstained[0]:
        assert not cert.contains(0, X1 - X2)


def test_a_model_saved_with_an_auto_rank_key_loads_under_the_rank_that_ran():
    """An earlier version kept ``rank='auto'`` and ``rank=None`` apart on the
    same inputs: on load both are keyed by the rank that ran, and joined."""
    clf = slab_classifier(_fast_rancer())
    clf.certify(X1)
    (key,) = clf.memories_
    (memory,) = clf.memories_.values()
    other = slab_classifier(_fast_rancer(rank=None))
    other.certify(np.array([[0.0, 5.0]], dtype=np.float32))
    (apart,) = other.memories_.values()
    clf.memories_ = {key.replace("rank=None", "rank='auto'"): memory, key: apart}
    with pytest.warns(UserWarning, match="joined"):
        loaded = pickle.loads(pickle.dumps(clf))
    assert list(loaded.memories_) == [key]
    assert loaded.memories_[key].n_entries_ == memory.n_entries_ + apart.n_entries_
    # alone, an 'auto' key is renamed without a warning
    clf.memories_ = {key.replace("rank=None", "rank='auto'"): memory}
    assert list(pickle.loads(pickle.dumps(clf)).memories_) == [key]


def test_the_resolved_rank_is_the_rank_that_runs():
    from smoothlearn.strategies import RDDRS
    from smoothlearn.strategies._curvature import resolve_rank

    for cls in (RANCER, RDDRS):
        for rank in ("auto", None, 3, 9, 64, 300, 784):
            for n_features, n_classes in ((64, 10), (784, 10), (300, 3)):
                resolved = cls(rank=rank).resolved(n_features, n_classes)
                assert resolved.rank == resolve_rank(rank, n_features, n_classes)
                assert resolved.rank == resolve_rank(resolved.rank, n_features, 10)
    assert ANCER().resolved(64, 10).get_params() == ANCER().get_params()
