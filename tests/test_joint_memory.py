"""The memory's joint step: one call's certificates made disjoint together.

Soundness on random calls of every region form (isotropic, diagonal, rotated,
rotated in a frame, cut regions remembered from an earlier call, l1), judged
by the 60-digit references of ``_reference``; the same answer for any order
of the inputs; no abstention within a call; and mutations of the rule that
these checks must catch.
"""

import copy

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import smoothlearn.estimators._joint as joint_module
from smoothlearn import Certificates, MemoryCertifier

from . import _reference as reference
from .test_memory import _l1_regions_meet, _random_certificates, _region


def _call(seed, n, d, kind, noise="gaussian"):
    """``n`` certificates of ``kind`` around a few centres, so regions of
    different labels meet often."""
    rng = np.random.RandomState(seed)
    cert = _random_certificates(rng, n, d, kind, noise=noise, spread=1.5)
    return cert


def _overlaps(out):
    """Pairs of different labels whose final regions meet (60 digits; an
    exact LP for l1 cross-polytopes)."""
    kept = np.flatnonzero(~out.abstained)
    found = []
    for p, i in enumerate(kept):
        for j in kept[p + 1 :]:
            if out.label[i] == out.label[j]:
                continue
            a, b = _region(out, i), _region(out, j)
            if np.linalg.norm(a.center - b.center) > a.circumradius + b.circumradius:
                continue
            if out.norm == "l1":
                meet = _l1_regions_meet(a, b)
            else:
                meet = reference.min_k(a, b) >= 0
            if meet:
                found.append((i, j))
    return found


def _check_inside_and_stated(out, given):
    """Every final region lies in its original, and its stated radius and proxy
    radius are at most its own (60 digits)."""
    for i in np.flatnonzero(~out.abstained):
        final, original = _region(out, i), _region(given, i)
        if out.norm == "l1":
            assert np.all(
                np.broadcast_to(final.semi_axes(), (final.d,))
                <= np.broadcast_to(original.semi_axes(), (final.d,))
            )
            continue
        assert reference.largest_ratio(final, original) <= 1 + 1e-12, i
        assert out.radius[i] <= reference.smallest_semi_axis(final) * (1 + 1e-12)
        exact = float(mpmath.exp(reference.log_volume_mean(final)))
        assert out.proxy_radius[i] == pytest.approx(exact, rel=1e-9)


FORMS = ["isotropic", "diagonal", "rotated", "framed"]


@settings(max_examples=20, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 7),
    st.integers(2, 3),
    st.sampled_from(FORMS),
    st.sampled_from(["auto", "cut", "capped", "ball"]),
    st.sampled_from(["volume", "radius"]),
)
def test_a_call_leaves_no_regions_of_different_labels_meeting(
    seed, n, d, kind, shrink, objective
):
    given_certs = _call(seed, n, d, kind)
    out = MemoryCertifier(shrink=shrink, objective=objective).fit_transform(given_certs)
    # no certificate abstains because of another certificate of the call
    assert not out.abstained.any()
    assert _overlaps(out) == []
    _check_inside_and_stated(out, given_certs)


@settings(max_examples=10, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 5),
    st.integers(2, 3),
    st.sampled_from(FORMS),
    st.sampled_from(FORMS),
    st.booleans(),
)
def test_a_later_call_avoids_remembered_cut_regions(
    seed, n, d, first_kind, second_kind, joint
):
    """Cut regions remembered from one call against any form in the next: no
    two regions of the two calls meet (K(t) in every combination with cuts)."""
    memory = MemoryCertifier()
    first = memory.transform(_call(seed, n, d, first_kind))
    second_given = _call(seed + 1, n, d, second_kind)
    memory.set_params(joint=joint)
    second = memory.transform(second_given)
    both = Certificates.concatenate(
        [first, second] if first.kind == second.kind else [second]
    )
    assert _overlaps(both) == []
    _check_inside_and_stated(second, second_given)
    kept_first = np.flatnonzero(~first.abstained)
    for i in np.flatnonzero(~second.abstained):
        for j in kept_first:
            if second.label[i] == first.label[j]:
                continue
            a, b = _region(second, i), _region(first, j)
            if np.linalg.norm(a.center - b.center) <= a.circumradius + b.circumradius:
                assert reference.min_k(a, b) < 0


@settings(max_examples=15, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 8),
    st.sampled_from(["isotropic", "diagonal"]),
)
def test_l1_calls_leave_no_cross_polytopes_meeting(seed, n, kind):
    given_certs = _call(seed, n, 3, kind, noise="laplace")
    out = MemoryCertifier().fit_transform(given_certs)
    assert not out.abstained.any()
    assert _overlaps(out) == []
    _check_inside_and_stated(out, given_certs)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 12),
    st.sampled_from(FORMS),
    st.sampled_from(["volume", "radius"]),
    st.randoms(use_true_random=False),
)
def test_the_answer_does_not_depend_on_the_order_of_the_inputs(
    seed, n, kind, objective, random
):
    given_certs = _call(seed, n, 3, kind)
    order = np.array(random.sample(range(n), n))
    out = MemoryCertifier(objective=objective).fit_transform(given_certs)
    again = MemoryCertifier(objective=objective).fit_transform(given_certs[order])
    back = np.argsort(order)
    # the same pairs, oriented and applied in the same order: equal exactly
    # but for the BallTree's and numpy's own rounding, far below this
    np.testing.assert_allclose(again.radius[back], out.radius, rtol=1e-12, atol=0)
    np.testing.assert_allclose(
        again.proxy_radius[back], out.proxy_radius, rtol=1e-12, atol=0
    )
    np.testing.assert_array_equal(again.reduced[back], out.reduced)
    np.testing.assert_array_equal(again.abstained[back], out.abstained)


def _mutated_overlaps(monkeypatch, shrink, excess):
    """Overlapping pairs left when every pair's extents sum to ``excess``
    times the centres' separation along its direction."""

    def wrong_split(total, h_a, h_b, r_a, r_b, objective):
        separation = (total + 1e-6) / (1.0 - joint_module.SLAB_MARGIN)
        g_a, g_b = right_split(total, h_a, h_b, r_a, r_b, objective)
        grow = excess * separation / (g_a + g_b)
        return g_a * grow, g_b * grow

    right_split = joint_module.split
    monkeypatch.setattr(joint_module, "split", wrong_split)
    for seed in range(6):
        for kind in ("isotropic", "diagonal"):
            out = MemoryCertifier(shrink=shrink).fit_transform(_call(seed, 8, 2, kind))
            if _overlaps(out):
                return True
    return False


@pytest.mark.parametrize("shrink", ["cut", "capped"])
def test_a_rule_that_leaves_no_separation_is_caught(monkeypatch, shrink):
    """Mutations: extents summing slightly past the separation (a plane moved
    past it; caps with rho_i + rho_j above the distance) leave regions that
    the 60-digit check finds meeting."""
    assert _mutated_overlaps(monkeypatch, shrink, 1.0 + 1e-4)


def test_coincident_centres_of_two_labels_both_abstain():
    cert = Certificates(
        label=[0, 1, 0],
        abstained=[False] * 3,
        p_lower=[0.9] * 3,
        gap=[1.0, 0.5, 1.0],
        center=[[0.0, 0.0], [0.0, 0.0], [5.0, 0.0]],
        scale=[1.0, 1.0, 1.0],
        noise="gaussian",
        class_index=[0, 1, 0],
    )
    out = MemoryCertifier().fit_transform(cert)
    assert out.abstained.tolist() == [True, True, False]


def test_the_joint_step_tests_only_pairs_the_index_finds():
    """Far-apart certificates: the pairs looked at grow with the call, not with
    its square."""
    inspected = []
    for n in (200, 800):
        rng = np.random.RandomState(0)
        cert = _random_certificates(rng, n, 3, spread=10.0 * (n / 200) ** (1 / 3))
        memory = MemoryCertifier().fit(cert)
        inspected.append(memory.n_inspected_)
    assert inspected[1] < 8 * inspected[0]  # 16x the pairs of a full scan


def test_certify_answers_the_same_for_any_order_and_split_of_a_call():
    """End to end: a data-dependent estimator's certificates of a shuffled call
    are the shuffled certificates, and a call split over workers gives the
    same; nothing abstains because of another input of the call."""
    from sklearn.datasets import make_moons

    from smoothlearn import SmoothedClassifier

    X, y = make_moons(200, noise=0.25, random_state=0)
    X = X.astype(np.float32)
    rng = np.random.RandomState(0)
    net = SmoothedClassifier(max_epochs=20, random_state=0, sigma=0.3).fit(X, y)

    def fitted(**params):
        # a curved boundary: balls tuned per input (isotropic_dd) can cross
        # each other's side where no single ball crosses the boundary; each
        # copy starts with an empty memory
        return copy.deepcopy(net).set_params(
            strategy="isotropic_dd", n=2000, n0=64, **params
        )

    with pytest.warns(UserWarning, match="not sound"):
        alone = fitted(memory=None).certify(X)
    out = fitted().certify(X)
    order = rng.permutation(len(X))
    shuffled = fitted().certify(X[order])
    split = fitted(n_jobs=2).certify(X)
    assert out.reduced.any()  # the call's regions met and were made disjoint
    np.testing.assert_array_equal(out.abstained, alone.abstained)
    np.testing.assert_array_equal(shuffled.label, out.label[order])
    np.testing.assert_allclose(shuffled.radius, out.radius[order], rtol=1e-9)
    np.testing.assert_allclose(split.radius, out.radius, rtol=1e-5)
