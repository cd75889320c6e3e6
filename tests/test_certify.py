import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from smoothlearn.banks import CHUNK_ROWS, ESTIMATION, SELECTION, NoiseBank
from smoothlearn.bounds import (
    certify_from_counts,
    clopper_pearson_lower,
    predict_from_counts,
    top_two_pvalue,
)
from smoothlearn.certify import BaseNetwork
from smoothlearn.counting import count_classes
from smoothlearn.network import FlatInputNetwork
from smoothlearn.noise import get_noise
from smoothlearn.scale import Scale


@pytest.mark.parametrize("k, n", [(1, 10), (55, 100), (990, 1000), (100_000, 100_000)])
@pytest.mark.parametrize("alpha", [0.001, 0.05])
def test_clopper_pearson_lower_is_exact(k, n, alpha):
    p = clopper_pearson_lower(k, n, alpha)
    # The one-sided bound is the p at which seeing >= k successes has probability alpha.
    assert stats.binom.sf(k - 1, n, p) == pytest.approx(alpha, rel=1e-6)
    assert p == pytest.approx(stats.beta.ppf(alpha, k, n - k + 1))


def test_clopper_pearson_of_zero_successes_is_zero():
    assert clopper_pearson_lower(0, 50, 0.001) == 0.0


def test_top_two_pvalue_matches_scipy_binomtest():
    rng = np.random.RandomState(0)
    counts = rng.randint(0, 60, size=(200, 4))
    counts[:5, :2] = 30  # ties
    counts[5] = [40, 0, 0, 0]
    expected = []
    for row in counts:
        b, a = np.sort(row)[-2:]
        expected.append(stats.binomtest(a, a + b, 0.5).pvalue if a + b else 1.0)
    np.testing.assert_allclose(top_two_pvalue(counts), expected, rtol=1e-9)


def test_predict_abstains_on_a_tie_and_decides_a_clear_majority():
    counts = np.array([[50, 50, 0], [0, 90, 10]])
    np.testing.assert_array_equal(predict_from_counts(counts, 0.001), [-1, 1])


def test_certify_from_counts_abstains_below_one_half():
    family = get_noise("gaussian")
    selection = np.array([[10, 0], [0, 10]])
    estimation = np.array([[99_000, 1_000], [52_000, 48_000]])
    top, p, gap, abstained = certify_from_counts(
        selection, estimation, 100_000, 0.001, family
    )
    np.testing.assert_array_equal(abstained, [False, True])
    np.testing.assert_array_equal(top, [0, -1])
    assert gap[0] == pytest.approx(stats.norm.ppf(p[0]))
    assert gap[1] == 0.0


def test_bank_rows_are_independent_of_how_they_are_read():
    bank = NoiseBank(7, ESTIMATION, get_noise("gaussian"), 5)
    whole = bank.rows(0, 3 * CHUNK_ROWS)
    pieces = torch.cat(
        [
            bank.rows(a, min(a + 700, 3 * CHUNK_ROWS))
            for a in range(0, 3 * CHUNK_ROWS, 700)
        ]
    )
    torch.testing.assert_close(whole, pieces, rtol=0, atol=0)
    other = NoiseBank(7, SELECTION, get_noise("gaussian"), 5).rows(0, 100)
    assert not torch.equal(other, whole[:100])


def _toy_network():
    torch.manual_seed(3)
    module = torch.nn.Sequential(
        torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)
    )
    return FlatInputNetwork(module, (4,), 3)


@pytest.mark.parametrize("batch_size", [1, 37, 1000, 5000])
def test_counts_do_not_depend_on_batch_size_order_or_neighbours(batch_size):
    network = _toy_network()
    X = np.random.RandomState(0).randn(6, 4).astype(np.float32)
    scale = Scale(np.full(6, 0.7))
    bank = NoiseBank(11, ESTIMATION, get_noise("gaussian"), 4)
    reference = count_classes(network, X, scale, bank, 3000, batch_size=2048)
    counts = count_classes(network, X, scale, bank, 3000, batch_size=batch_size)
    np.testing.assert_array_equal(counts, reference)
    order = np.array([4, 1, 5, 0])
    subset = count_classes(
        network, X[order], scale[order], bank, 3000, batch_size=batch_size
    )
    np.testing.assert_array_equal(subset, reference[order])
    assert (reference.sum(axis=1) == 3000).all()


# batch 4096 carries two inputs' 1500 draws per forward pass (their votes are
# added by one scatter over both rows of the counts)
@pytest.mark.parametrize("batch_size", [256, 4096])
def test_counts_match_a_plain_loop_over_the_bank(batch_size):
    network = _toy_network()
    X = np.random.RandomState(1).randn(3, 4).astype(np.float32)
    scale = np.random.RandomState(2).uniform(0.2, 1.0, size=(3, 4))
    bank = NoiseBank(5, ESTIMATION, get_noise("laplace"), 4)
    counts = count_classes(network, X, Scale(scale), bank, 1500, batch_size=batch_size)
    z = bank.rows(0, 1500)
    for i in range(3):
        noisy = (
            torch.as_tensor(X[i]) + torch.as_tensor(scale[i], dtype=torch.float32) * z
        )
        with torch.no_grad():
            pred = network.logits(noisy).argmax(1)
        np.testing.assert_array_equal(counts[i], np.bincount(pred.numpy(), minlength=3))


def test_windows_are_the_bank_rows_they_cut_across_chunks():
    """A window cut from one, two or three chunks holds the same rows as one
    long read of the bank (its parts are cut from each chunk before joining)."""
    bank = NoiseBank(3, ESTIMATION, get_noise("gaussian"), 5)
    whole = bank.rows(0, 3 * CHUNK_ROWS).clone()
    for start, stop in [
        (0, 1),
        (7, CHUNK_ROWS),
        (CHUNK_ROWS - 1, CHUNK_ROWS + 1),
        (1000, 2000),
        (CHUNK_ROWS, 2 * CHUNK_ROWS),
        (5, 3 * CHUNK_ROWS - 5),
    ]:
        window = NoiseBank(3, ESTIMATION, get_noise("gaussian"), 5).rows(start, stop)
        assert window.shape == (stop - start, 5)
        torch.testing.assert_close(window, whole[start:stop], rtol=0, atol=0)


def test_top_class_is_argmax_on_ties_and_nans():
    """The vote a forward pass casts is argmax's: the first of tied scores,
    a NaN counted as the largest (the CPU takes max(dim=1)'s indices)."""
    from smoothlearn.counting import _top_class

    rng = torch.Generator().manual_seed(0)
    for n_classes in (1, 2, 3, 10, 17, 1000):
        scores = torch.randint(0, 3, (2000, n_classes), generator=rng).float()
        scores[torch.rand(scores.shape, generator=rng) < 0.02] = float("nan")
        scores[:100] = 1.0  # every class tied
        strided = scores.t().contiguous().t()
        for s in (scores, strided):
            torch.testing.assert_close(_top_class(s), s.argmax(dim=1), rtol=0, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_counting_loop_never_waits_for_the_device():
    """On a GPU the loop's forward passes, votes and bank chunks are queued
    without a host round-trip: the synchronising calls of a count (moving the
    inputs there, the counts back) do not grow with its forward batches."""
    import warnings

    module = _toy_network().module.cuda()
    network = FlatInputNetwork(module, (4,), 3)
    X = np.random.RandomState(1).randn(3, 4).astype(np.float32)
    bank = NoiseBank(5, ESTIMATION, get_noise("gaussian"), 4, device="cuda")

    def synchronising_calls(n_draws):
        count_classes(network, X, Scale(np.full(3, 0.5)), bank, 64, batch_size=64)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                count_classes(
                    network, X, Scale(np.full(3, 0.5)), bank, n_draws, batch_size=64
                )
            finally:
                torch.cuda.set_sync_debug_mode(0)
        return sum("called a synchronizing CUDA" in str(w.message) for w in caught)

    assert synchronising_calls(64 * 40) == synchronising_calls(64)


# ------------------------------------------------- the smoothing that was run
def test_certificates_record_the_float32_scale_the_engine_ran():
    from smoothlearn import SmoothedClassifier

    from .conftest import linear_module

    X = np.random.RandomState(0).randn(5, 3).astype(np.float32)
    clf = SmoothedClassifier(
        linear_module([1.0, -1.0, 0.5], 0.0), sigma=0.12, n=500, max_epochs=0
    ).fit(X, [0, 1, 0, 1, 0])
    cert = clf.certify(X)
    assert float(np.float32(0.12)) != 0.12
    np.testing.assert_array_equal(cert.scale, float(np.float32(0.12)))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 12),
    st.integers(1, 12),
    st.floats(-2.5, 1.5),
    st.booleans(),
)
def test_a_recorded_rotated_region_lies_inside_the_one_run(
    seed, d, k, log_spread, framed
):
    """The engine runs S~ = r I + U~ diag(s - r) U~^T with the float32 basis U~
    (in a diagonal frame, F S~ F with the float32 frame); the recorded
    (orthonormal basis, shrunk) S_rec must satisfy ||S~^-1 S_rec|| <= 1, i.e.
    its region is inside the certified one."""
    rng = np.random.RandomState(seed)
    k = min(k, d)
    basis = np.linalg.qr(rng.randn(d, k))[0]
    scale = 10 ** rng.uniform(log_spread, 0.5, k)
    rest = 10 ** rng.uniform(log_spread, 0.5)
    frame = 10 ** rng.uniform(-1.0, 0.5, (1, d)) if framed else None
    run, rec = Scale(scale[None], basis[None], np.array([rest]), frame=frame).as_run()
    u_run, s_run, r_run = run.basis[0], run.values[0], run.rest[0]
    assert np.array_equal(u_run, u_run.astype(np.float32))  # float32 values
    f_run = np.ones(d) if frame is None else run.frame[0]
    assert np.array_equal(f_run, f_run.astype(np.float32))
    S_run = r_run * np.eye(d) + (u_run * (s_run - r_run)) @ u_run.T
    S_run = f_run[:, None] * S_run * f_run
    u, s, r = rec.basis[0], rec.values[0], rec.rest[0]
    np.testing.assert_allclose(u.T @ u, np.eye(k), atol=1e-14)
    f_rec = np.ones(d) if frame is None else rec.frame[0]
    np.testing.assert_array_equal(f_rec, f_run)  # the frame runs as recorded
    S_rec = r * np.eye(d) + (u * (s - r)) @ u.T
    S_rec = f_rec[:, None] * S_rec * f_rec
    assert np.linalg.norm(np.linalg.solve(S_run, S_rec), 2) <= 1.0
    # and only just: the shrink is float32's rounding times the spread of scales
    spread = max(s_run.max(), r_run) / min(s_run.min(), r_run)
    spread *= (f_run.max() / f_run.min()) ** 2
    np.testing.assert_allclose(s, s_run, rtol=1e-5 * spread)


def test_the_old_network_name_still_works_with_a_warning():
    module = torch.nn.Linear(4, 3)
    with pytest.warns(FutureWarning, match="FlatInputNetwork"):
        old = BaseNetwork(module, (4,), 3)
    assert isinstance(old, FlatInputNetwork)
    x = torch.randn(5, 4)
    torch.testing.assert_close(old.logits(x), module(x))


@pytest.mark.parametrize(
    "name, home",
    [
        ("NoiseBank", "banks"),
        ("bank_key", "banks"),
        ("CHUNK_ROWS", "banks"),
        ("count_classes", "counting"),
        ("certify_from_counts", "bounds"),
        ("predict_from_counts", "bounds"),
        ("BlockResult", "blocks"),
        ("run_blocks", "blocks"),
    ],
)
def test_names_that_moved_out_of_certify_still_answer_with_a_warning(name, home):
    import importlib

    import smoothlearn.certify

    with pytest.warns(FutureWarning, match=f"smoothlearn.{home}.{name}"):
        old = getattr(smoothlearn.certify, name)
    assert old is getattr(importlib.import_module(f"smoothlearn.{home}"), name)
    with pytest.raises(AttributeError):
        smoothlearn.certify.no_such_name  # noqa: B018


def test_the_old_dict_forms_still_work_with_a_warning():
    from smoothlearn import SmoothedClassifier
    from smoothlearn.certify import smoothing_as_run
    from smoothlearn.strategies import Cohen

    from .conftest import linear_module

    fields = {"scale": np.array([0.12, 0.3])}
    with pytest.warns(FutureWarning, match="as_run"):
        run, recorded = smoothing_as_run(fields)
    expected, _ = Scale(fields["scale"]).as_run()
    np.testing.assert_array_equal(run["scale"], expected.values)

    class DictCohen(Cohen):  # a strategy written for smoothlearn 0.1
        def scales(self, network, X, *, sigma, family, bank, p_max=None):
            return {"scale": np.full(len(X), float(sigma))}

    X = np.random.RandomState(0).randn(5, 3).astype(np.float32)
    y = [0, 1, 0, 1, 0]
    module = linear_module([1.0, -1.0, 0.5], 0.0)
    settings = {"n": 500, "max_epochs": 0, "random_state": 0}
    new = SmoothedClassifier(module, **settings).fit(X, y).certify(X)
    old = SmoothedClassifier(module, strategy=DictCohen(), **settings).fit(X, y)
    with pytest.warns(FutureWarning, match="returned a dict"):
        cert = old.certify(X)
    np.testing.assert_array_equal(cert.radius, new.radius)


def test_certificates_pickled_with_the_scale_apart_load():
    import pickle

    from smoothlearn import Certificates

    u = np.linalg.qr(np.random.RandomState(0).randn(3, 2))[0]
    cert = Certificates(
        label=[0, 1],
        abstained=[False, False],
        p_lower=[0.9, 0.8],
        gap=[1.0, 0.5],
        center=np.zeros((2, 3)),
        scale=np.array([[0.5, 2.0], [1.0, 1.0]]),
        basis=np.stack([u, u]),
        scale_rest=np.array([1.5, 1.0]),
        noise="gaussian",
    )
    # what an earlier version pickled: the scale's arrays as attributes
    old_state = {k: v for k, v in cert.__dict__.items() if k != "scales"}
    old_state.update(scale=cert.scale, basis=cert.basis, scale_rest=cert.scale_rest)
    old = Certificates.__new__(Certificates)
    old.__setstate__(old_state)
    loaded = pickle.loads(pickle.dumps(old))
    np.testing.assert_array_equal(loaded.radius, cert.radius)
    np.testing.assert_array_equal(loaded.scale_matrix(0), cert.scale_matrix(0))
