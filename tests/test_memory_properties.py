"""Property-based tests of the memory: random streams of certificates, checked
pair by pair against the 60-digit reference, and bad inputs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smoothlearn import Certificates, MemoryCertifier, SmoothedClassifier
from smoothlearn.geometry import contains_point

from . import _reference as reference
from .conftest import linear_module
from .test_memory import _inside


def _stream(seed, n, d, kind):
    rng = np.random.RandomState(seed)
    extra = {}
    if kind == "isotropic":
        scale = 10 ** rng.uniform(-1.5, 0, n)
    elif kind == "diagonal":
        scale = 10 ** rng.uniform(-1.5, 0, (n, d))
    else:
        k = rng.randint(1, d + 1)
        extra["basis"] = np.stack([np.linalg.qr(rng.randn(d, k))[0] for _ in range(n)])
        scale = 10 ** rng.uniform(-1.5, 0, (n, k))
        extra["scale_rest"] = 10 ** rng.uniform(-1.5, 0, n)
        if kind == "framed":
            extra["scale_frame"] = 10 ** rng.uniform(-0.3, 0.3, (n, d))
    label = rng.randint(0, 3, n)
    return Certificates(
        label=label,
        abstained=rng.rand(n) < 0.1,
        p_lower=np.full(n, 0.9),
        gap=rng.uniform(0.3, 2.0, n),
        center=rng.uniform(0, 1.5, (n, d)),
        scale=scale,
        noise="gaussian",
        class_index=label,
        **extra,
    )


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 8),
    st.integers(2, 3),
    st.sampled_from(["isotropic", "diagonal", "rotated", "framed"]),
    st.sampled_from(["capped", "ball"]),
)
def test_no_two_remembered_regions_of_different_labels_overlap(
    seed, n, d, kind, shrink
):
    given_certs = _stream(seed, n, d, kind)
    out = MemoryCertifier(shrink=shrink).fit_transform(given_certs)
    regions = {}
    for i in np.flatnonzero(~out.abstained):
        regions[i] = MemoryCertifier._region(out, i, out.c * out.gap[i])
        original = MemoryCertifier._region(given_certs, i, out.c * given_certs.gap[i])
        # the memory only ever shrinks a region, into one inside the original
        assert not given_certs.abstained[i]
        if out.reduced[i]:
            assert _inside(regions[i], original)
        else:
            assert out.gap[i] == given_certs.gap[i]
    for i in regions:
        for j in regions:
            if j <= i or out.label[i] == out.label[j]:
                continue
            a, b = regions[i], regions[j]
            if np.linalg.norm(a.center - b.center) > a.circumradius + b.circumradius:
                continue  # circumscribed balls apart: disjoint
            assert reference.min_k(a, b) < 0, (i, j)
            assert not contains_point(a, b.center) and not contains_point(b, a.center)
    assert out.abstained.sum() >= given_certs.abstained.sum()


@pytest.fixture(scope="module")
def linear_classifier():
    X = np.random.RandomState(0).randn(6, 3).astype(np.float32)
    return SmoothedClassifier(
        linear_module([1.0, -1.0, 0.5], 0.0),
        strategy="isotropic_dd",
        max_epochs=0,
        n=200,
        n0=20,
        random_state=0,
    ).fit(X, [0, 1, 0, 1, 0, 1])


bad_rows = st.one_of(
    st.tuples(st.just("nan"), st.integers(1, 4)),
    st.tuples(st.just("inf"), st.integers(1, 4)),
    st.tuples(st.just("features"), st.sampled_from([1, 2, 4, 9])),
    st.tuples(st.just("empty"), st.just(0)),
    st.tuples(st.just("3d"), st.integers(1, 3)),
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(bad_rows, st.sampled_from(["certify", "predict", "predict_proba"]))
def test_bad_inputs_raise_a_clear_error_and_leave_the_memory(
    linear_classifier, bad, method
):
    clf = linear_classifier
    clf.certify(np.zeros((1, 3), np.float32))  # the memory holds something
    before = {k: m.n_seen_ for k, m in clf.memories_.items()}
    what, size = bad
    if what in ("nan", "inf"):
        X = np.zeros((size, 3), np.float32)
        X[-1, size % 3] = np.nan if what == "nan" else np.inf
    elif what == "features":
        X = np.zeros((2, size), np.float32)
    elif what == "empty":
        X = np.zeros((0, 3), np.float32)
    else:
        X = np.zeros((2, 3, size), np.float32)
    with pytest.raises(ValueError):
        getattr(clf, method)(X)
    assert {k: m.n_seen_ for k, m in clf.memories_.items()} == before


def test_one_row_is_certified_like_in_a_batch(linear_classifier):
    X = np.random.RandomState(1).randn(5, 3).astype(np.float32)
    clf = linear_classifier
    together = clf.set_params(memory=None)
    with pytest.warns(UserWarning):
        batch = together.certify(X)
        one = together.certify(X[2:3])
    clf.set_params(memory="auto")
    assert one.label[0] == batch.label[2]
    assert one.radius[0] == pytest.approx(batch.radius[2], rel=1e-5)
