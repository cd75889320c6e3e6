import pickle

import numpy as np
import pytest
from scipy.optimize import linprog
from scipy.stats import ortho_group

from smoothlearn import Certificates, MemoryCertifier
from smoothlearn.geometry import ellipsoids_disjoint
from smoothlearn.metrics import assert_certificates_equal

from .test_geometry import _brute_min_max


def _random_certificates(rng, n, d, kind="diagonal", noise="gaussian", spread=2.0):
    center = rng.uniform(0, spread, size=(n, d))
    gap = rng.uniform(0.2, 1.5, n)
    extra = {}
    if kind == "isotropic":
        scale = rng.uniform(0.2, 0.8, n)
    elif kind == "diagonal":
        scale = rng.uniform(0.1, 0.9, size=(n, d))
    else:
        k = 2
        extra["basis"] = np.stack(
            [ortho_group.rvs(d, random_state=rng)[:, :k] for _ in range(n)]
        )
        scale = rng.uniform(0.1, 0.9, size=(n, k))
        extra["scale_rest"] = rng.uniform(0.1, 0.9, n)
        if kind == "framed":
            extra["scale_frame"] = rng.uniform(0.6, 1.4, size=(n, d))
    label = rng.randint(0, 3, n)
    return Certificates(
        label=label,
        abstained=np.zeros(n, bool),
        p_lower=np.full(n, 0.9),
        gap=gap,
        center=center,
        scale=scale,
        noise=noise,
        class_index=label,
        **extra,
    )


def _region(cert, i):
    return MemoryCertifier._region(cert, i, cert.c * cert.gap[i])


def _l1_regions_meet(a, b):
    """Exact LP: some x with ||(x - a)/t_a||_1 <= 1 and ||(x - b)/t_b||_1 <= 1?"""
    d = a.d
    ta = np.broadcast_to(a.semi_axes(), (d,))
    tb = np.broadcast_to(b.semi_axes(), (d,))
    # variables x (d), u (d) >= |x - a|, v (d) >= |x - b|
    eye, zero = np.eye(d), np.zeros((d, d))
    A = np.block(
        [
            [eye, -eye, zero],
            [-eye, -eye, zero],
            [eye, zero, -eye],
            [-eye, zero, -eye],
            [np.zeros((1, d)), 1 / ta[None], np.zeros((1, d))],
            [np.zeros((1, d)), np.zeros((1, d)), 1 / tb[None]],
        ]
    )
    rhs = np.concatenate([a.center, -a.center, b.center, -b.center, [1.0, 1.0]])
    res = linprog(np.zeros(3 * d), A_ub=A, b_ub=rhs, bounds=[(None, None)] * (3 * d))
    return res.status == 0


def _inside(a, b):
    """Whether region ``a`` lies in region ``b`` (same centre): ``||T_b^-1 T_a||
    <= 1``, densely, to float64 rounding."""
    return np.linalg.norm(np.linalg.solve(b.matrix(), a.matrix()), ord=2) <= 1 + 1e-9


#: (joint, shrink) of the memories every soundness test runs
MEMORIES = [
    (False, "capped"),
    (False, "ball"),
    (False, "cut"),
    (True, "auto"),
    (True, "cut"),
    (True, "capped"),
    (True, "ball"),
]


#: every form under the default and the sequential memories; the joint
#: step's other reductions on two forms (the hypothesis tests of
#: test_joint_memory.py take every form)
CASES = [
    (kind, joint, shrink)
    for kind in ("isotropic", "diagonal", "rotated", "framed")
    for joint, shrink in MEMORIES
    if joint is False or shrink == "auto" or kind in ("diagonal", "framed")
]


@pytest.mark.parametrize(("kind", "joint", "shrink"), CASES)
def test_no_two_regions_of_different_labels_meet_after_memory(kind, joint, shrink):
    rng = np.random.RandomState(0)
    cert = _random_certificates(rng, 40, 3, kind)
    before = sum(
        not ellipsoids_disjoint(_region(cert, i), _region(cert, j))
        for i in range(40)
        for j in range(i)
        if cert.label[i] != cert.label[j]
    )
    assert before > 20  # the input really overlaps
    out = MemoryCertifier(joint=joint, shrink=shrink).fit_transform(cert)
    assert out.reduced.any()
    # the sequential memory abstains where a centre lies in an earlier region;
    # the joint step never abstains for another certificate of the call
    assert out.abstained.any() != joint
    kept = np.flatnonzero(~out.abstained)
    for i in kept:
        for j in kept:
            if j >= i or out.label[i] == out.label[j]:
                continue
            a, b = _region(out, i), _region(out, j)
            assert out.contains(i, out.center[j] - out.center[i]) is False
            assert out.contains(j, out.center[i] - out.center[j]) is False
            assert _brute_min_max(a, b) > 1.0 - 1e-7
    # a reduced region lies in the original, its inscribed radius no larger
    red = np.flatnonzero(out.reduced & ~out.abstained)
    assert len(red)
    for i in red:
        original = _region(cert, i)
        assert _inside(_region(out, i), original)
        # against the exact inscribed radius (a frame's certificate states a
        # bound below it; the capped region's axes are computed)
        exact = np.linalg.svd(original.matrix(), compute_uv=False).min()
        assert out.radius[i] <= exact * (1 + 1e-9)
        # and the stated one is no more than the region's own
        lowest = np.linalg.eigvalsh(_region(out, i).covariance())[0]
        assert out.radius[i] <= np.sqrt(max(lowest, 0.0)) * (1 + 1e-9)
    if shrink == "ball":  # the papers' balls
        np.testing.assert_allclose(out.radius[red], out.proxy_radius[red])
        return
    # capped and cut regions: some longer than a ball
    assert (out.proxy_radius[red] >= out.radius[red] * (1 - 1e-12)).all()
    if kind != "isotropic" or shrink in ("cut", "auto"):
        assert (out.proxy_radius[red] > out.radius[red] * 1.01).any()


@pytest.mark.parametrize("joint", [False, True])
def test_l1_memory_leaves_no_cross_polytopes_of_different_labels_meeting(joint):
    rng = np.random.RandomState(1)
    cert = _random_certificates(rng, 30, 3, "diagonal", noise="uniform")
    out = MemoryCertifier(joint=joint).fit_transform(cert)
    assert out.abstained.any() != joint
    assert out.norm == "l1" and out.reduced.any()
    kept = np.flatnonzero(~out.abstained)
    for i in kept:
        for j in kept:
            if j < i and out.label[i] != out.label[j]:
                assert not _l1_regions_meet(_region(out, i), _region(out, j))


def test_same_label_regions_are_left_alone():
    rng = np.random.RandomState(2)
    cert = _random_certificates(rng, 20, 3)
    cert.label[:] = 1
    out = MemoryCertifier().fit_transform(cert)
    assert not out.reduced.any() and not out.abstained.any()
    np.testing.assert_array_equal(out.radius, cert.radius)


@pytest.mark.parametrize("joint", [False, True])
def test_index_gives_the_brute_force_answers_with_fewer_candidates(joint):
    rng = np.random.RandomState(3)
    cert = _random_certificates(rng, 400, 4, spread=30.0)
    pruned = MemoryCertifier(joint=joint)
    brute = MemoryCertifier(joint=joint, index=False)
    a, b = pruned.fit_transform(cert), brute.fit_transform(cert)
    assert_certificates_equal(a, b, rtol=1e-7)
    assert pruned.n_inspected_ < brute.n_inspected_ / 5


def test_state_survives_pickling_and_order_matters_to_the_sequential_memory():
    rng = np.random.RandomState(4)
    cert = _random_certificates(rng, 60, 3)
    straight = MemoryCertifier(joint=False)
    first_half = straight.transform(cert[:30])
    restored = pickle.loads(pickle.dumps(straight))
    assert restored.n_entries_ == straight.n_entries_
    a, b = straight.transform(cert[30:]), restored.transform(cert[30:])
    assert_certificates_equal(a, b)
    whole = MemoryCertifier(joint=False).fit_transform(cert)
    np.testing.assert_array_equal(
        Certificates.concatenate([first_half, a]).radius, whole.radius
    )
    reversed_ = MemoryCertifier(joint=False).fit_transform(cert[::-1])
    assert not np.array_equal(reversed_.radius[::-1], whole.radius)
    assert straight.n_seen_ == 60
    assert straight.n_abstained_ == int(whole.abstained.sum())
    assert straight.n_reduced_ == int(whole.reduced.sum())


def test_bad_input_raises_and_leaves_the_memory_unchanged():
    rng = np.random.RandomState(5)
    memory = MemoryCertifier()
    memory.transform(_random_certificates(rng, 10, 3))
    state = pickle.dumps(memory)
    with pytest.raises(ValueError, match="features"):
        memory.transform(_random_certificates(rng, 5, 4))
    with pytest.raises(ValueError, match="family"):
        memory.transform(_random_certificates(rng, 5, 3, noise="uniform"))
    with pytest.raises(TypeError, match="Certificates"):
        memory.transform(np.zeros((3, 3)))
    assert pickle.dumps(memory) == state
    memory.reset()
    assert not hasattr(memory, "n_entries_")


def test_a_centre_inside_another_label_region_abstains_in_the_sequential_memory():
    cert = Certificates(
        label=[0, 1],
        abstained=[False, False],
        p_lower=[0.9, 0.9],
        gap=[1.0, 1.0],
        center=[[0.0, 0.0], [0.5, 0.0]],
        scale=[1.0, 0.1],
        noise="gaussian",
        class_index=[0, 1],
        abstain_label="none",
    )
    out = MemoryCertifier(joint=False).fit_transform(cert)
    assert out.abstained.tolist() == [False, True]
    assert out.label[1] == "none" and out.radius[1] == 0.0
    # one call's certificates, made disjoint together: neither abstains; the
    # small ball keeps its radius (0.1, well inside the half distance) and
    # the large one is cut short of it along the centres' line
    joint = MemoryCertifier().fit_transform(cert)
    assert not joint.abstained.any() and joint.reduced.tolist() == [True, False]
    assert joint.radius[1] == cert.radius[1]
    assert joint.contains(0, [0.25, 0.0]) and not joint.contains(0, [0.4, 0.0])
    assert joint.contains(0, [0.0, 0.99])  # the cut keeps the rest of the ball
    # a later call's centre inside a remembered region of another class abstains
    later = MemoryCertifier().fit(cert[:1]).transform(cert[1:])
    assert later.abstained.tolist() == [True]


def test_reduced_ball_touches_but_does_not_enter_the_other_region():
    cert = Certificates(
        label=[0, 1],
        abstained=[False, False],
        p_lower=[0.9, 0.9],
        gap=[1.0, 1.0],
        center=[[0.0, 0.0], [0.0, 1.5]],
        scale=[[2.0, 0.5], [3.0, 3.0]],
        noise="gaussian",
        class_index=[0, 1],
    )
    out = MemoryCertifier(eps=1e-9, joint=False).fit_transform(cert)
    # nearest point of the first ellipse to (0, 1.5) is (0, 0.5): distance 1
    assert out.reduced[1] and out.radius[1] == pytest.approx(1.0, abs=1e-6)


def test_memory_step_shows_progress_and_never_tests_far_pairs(capsys, monkeypatch):
    """verbose draws a bar; pairs whose circumscribed balls cannot meet are never
    given to the intersection test."""
    import smoothlearn.estimators._memory as memory_module

    rng = np.random.RandomState(0)
    cert = _random_certificates(rng, 60, 3, kind="rotated", spread=8.0)
    calls = []
    original = memory_module.ellipsoids_disjoint

    def counting(a, b):
        calls.append(
            np.linalg.norm(a.center - b.center) - a.circumradius - b.circumradius
        )
        return original(a, b)

    monkeypatch.setattr(memory_module, "ellipsoids_disjoint", counting)
    MemoryCertifier(verbose=1).fit_transform(cert)
    assert "memory" in capsys.readouterr().err
    # some pairs were close enough to test, and only those were
    assert 0 < len(calls) < 60 * 59 / 2
    assert all(gap <= 0 for gap in calls)
