"""Full forward passes across blocks (:mod:`smoothlearn.passes`): the blocks a
process holds run as one stream, and every input keeps its draws, looks and
bound.

The exact networks of ``test_batch_fill`` (a row's logits never depend on the
other rows of its pass) make "the same certificates" an exact check; the
digits MLP checks the float path the estimator runs.
"""

import joblib
import numpy as np
import pytest
import torch

from smoothlearn import banks, first_layer
from smoothlearn import passes as passes_module
from smoothlearn.blocks import INPUT_BLOCK, BlockResult, run_blocks
from smoothlearn.counting import count_classes
from smoothlearn.grid import Grid
from smoothlearn.noise import get_noise
from smoothlearn.passes import certify_blocks
from smoothlearn.scale import Scale

from .test_batch_fill import (
    _coordinates,
    _inputs,
    _place_reading_network,
    _task,
    count_alone,
)

GAUSSIAN = get_noise("gaussian")
SETTINGS = [{"radius": 0.3}, {"radius_tolerance": 0.05}, {}]
BATCH = 300  # _task's batch_size


def _stream(network, **params):
    """A task whose blocks run as one stream (the default off the CPU)."""
    return _task(network, True, pack_blocks=True, **params)


def _blocks(X):
    return [X[i : i + INPUT_BLOCK] for i in range(0, len(X), INPUT_BLOCK)]


def _same(a, b):
    np.testing.assert_array_equal(a.class_index, b.class_index)
    np.testing.assert_array_equal(a.n_draws, b.n_draws)
    np.testing.assert_array_equal(a.p_lower, b.p_lower)
    np.testing.assert_array_equal(a.gap, b.gap)
    assert a.scale.equals(b.scale)


@pytest.fixture
def fill_ahead(monkeypatch):
    """Rows ahead of a look fill the sequential tail's passes, as on a GPU."""
    monkeypatch.setattr(passes_module, "FILL_AHEAD", True)


@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("params", SETTINGS)
def test_blocks_share_passes_with_each_inputs_certificate_unchanged(
    params, reuse, fill_ahead
):
    network, passes = _coordinates(reuse)
    X = _inputs(3 * INPUT_BLOCK - 9, seed=3)  # three blocks, the last short
    by_block = [_stream(network, **params).certify(Xb, 7) for Xb in _blocks(X)]
    within = list(passes)
    passes.clear()
    read_at = []  # the passes run when each block was read

    def blocks():
        for Xb in _blocks(X):
            read_at.append(len(passes))
            yield Xb

    shared = list(_stream(network, **params).certify_blocks(blocks(), 7))
    assert len(shared) == len(by_block) == 3
    for a, b in zip(shared, by_block):
        _same(a, b)
    draws = np.concatenate([b.n_draws for b in by_block])
    if params:
        assert len(np.unique(draws)) > 1  # inputs did stop at different sizes
    # every row counted, every pass full until the last block is read; then
    # short ones only where the inputs left need fewer rows than a pass (rows
    # counted ahead of a look, to fill a pass, are dropped if the input stops)
    needed = len(X) * 64 + draws.sum()
    assert needed <= sum(passes) < needed + BATCH * (1 + 4 * ("radius" in params))
    assert all(p <= BATCH for p in passes)
    short = [i for i, p in enumerate(passes) if p < BATCH]
    assert all(i >= read_at[-1] for i in short)
    # the selection's last pass and the stream's last: the sequential
    # decision's tail is filled with rows ahead of each input's look (each
    # step between looks, 500 rows or more, is more than a pass)
    assert len(short) <= 2
    assert len(short) < sum(p < BATCH for p in within)
    assert len(passes) < len(within)


def test_pack_blocks_false_is_block_by_block():
    network, passes = _coordinates(False)
    X = _inputs(2 * INPUT_BLOCK, seed=4)
    task = _stream(network, radius=0.3)
    task.pack_blocks = False
    passes.clear()
    results = list(task.certify_blocks(_blocks(X), 7))
    off = list(passes)
    passes.clear()
    for a, Xb in zip(results, _blocks(X)):
        _same(a, task.certify(Xb, 7))
    assert off == passes  # the same passes, block after block
    assert sum(p < BATCH for p in off) > 2  # and short ones within the run


def test_the_stream_admits_blocks_only_when_passes_run_short():
    # blocks enter as work runs out and leave in order as soon as decided, so
    # a checkpoint still gets the first blocks before the last are read
    network, _ = _coordinates(False)
    X = _inputs(6 * INPUT_BLOCK, seed=5)
    pulled = []

    def blocks():
        for i, Xb in enumerate(_blocks(X)):
            pulled.append(i)
            yield Xb

    task = _stream(network, radius=0.3)
    seen = []
    for result in task.certify_blocks(blocks(), 7):
        seen.append((len(result.class_index), len(pulled)))
    assert [m for m, _ in seen] == [INPUT_BLOCK] * 6
    assert seen[0][1] < 6  # the first block came back before the last was read


@pytest.mark.parametrize("params", [{"radius": 0.3}, {"radius_tolerance": 0.05}])
def test_grid_certificates_are_the_same_across_blocks(params):
    network, _ = _coordinates(False)
    X = _inputs(2 * INPUT_BLOCK + 5, seed=3)
    grid = Grid(1 / 16)
    by_block = [
        _stream(network, grid=grid, **params).certify(Xb, 7) for Xb in _blocks(X)
    ]
    shared = _stream(network, grid=grid, **params).certify_blocks(_blocks(X), 7)
    for a, b in zip(shared, by_block, strict=True):
        _same(a, b)


@pytest.mark.parametrize("params", [{"radius": 0.3}, {"radius_tolerance": 0.05}])
def test_pinned_estimation_counts_are_untouched(params):
    # on the grid each estimation draw keeps its pinned place (r mod the
    # pass): summed over the stream's rounds, an input's estimation counts
    # are its pinned count alone over [0, n_draws), even for a network that
    # reads its row's place in the pass (whose packed selection may differ)
    network, _ = _place_reading_network()
    X = _inputs(2 * INPUT_BLOCK + 5, seed=3)
    task = _stream(network, grid=Grid(1 / 16), **params)
    index = {x.tobytes(): i for i, x in enumerate(X)}
    assert len(index) == len(X)
    counted = np.zeros((len(X), 3), dtype=np.int64)
    count = task.count

    def spy(X_count, run, bank, n_draws, **kwargs):
        out = count(X_count, run, bank, n_draws, **kwargs)
        if bank.bank == banks.ESTIMATION:
            first = np.broadcast_to(kwargs["first_row"], len(X_count))
            stop = first + n_draws
            # looks and sizes are multiples of the pass below n
            assert (first % BATCH == 0).all()
            assert ((stop % BATCH == 0) | (stop == task.n)).all()
            for x, row in zip(X_count, out):
                counted[index[x.tobytes()]] += row
        return out

    task.count = spy
    results = list(certify_blocks(task, _blocks(X), 7))
    n_draws = np.concatenate([r.n_draws for r in results])
    bank = task.bank(7, banks.ESTIMATION, X.shape[1])
    run, _ = task.prepare(X, 7)
    alone = [
        count_alone(
            network,
            X,
            run,
            bank,
            n_draws,
            i,
            batch_size=BATCH,
            grid=task.grid,
            pinned=True,
        )
        for i in range(len(X))
    ]
    np.testing.assert_array_equal(counted, np.stack(alone))


def test_run_blocks_grouped_on_workers_gives_the_same_results(tmp_path):
    network, _ = _coordinates(False)
    X = _inputs(5 * INPUT_BLOCK + 3, seed=7)
    task = _stream(network, radius=0.3)
    reference = BlockResult.concatenate([task.certify(Xb, 7) for Xb in _blocks(X)])
    for n_jobs in (1, 2):
        with joblib.parallel_config(backend="threading"):
            results = run_blocks(task.certify_blocks, X, 7, n_jobs=n_jobs, grouped=True)
        assert len(results) == 6
        _same(BlockResult.concatenate(results), reference)


@pytest.fixture(scope="module")
def fitted_mlp(digits):
    from smoothlearn import SmoothedClassifier

    X, y = digits
    return SmoothedClassifier(
        n=2000, n0=64, module__hidden_units=(32,), max_epochs=3, random_state=0
    ).fit(X[:600], y[:600])


@pytest.mark.parametrize("params", SETTINGS)
def test_float_certificates_are_the_same_across_blocks(fitted_mlp, digits, params):
    # the digits MLP, three blocks, as SmoothedClassifier.certify runs them
    # (first-layer reuse where the network allows): the stream against block
    # by block
    X, _ = digits
    clf = fitted_mlp
    task = clf._task(clf._certification_strategy(), radius=params.get("radius"))
    task.radius_tolerance = params.get("radius_tolerance")
    task.batch_size = 500
    task.pack_blocks = True  # the stream, as off the CPU
    X_flat = clf._inputs(X[:150])
    stream = BlockResult.concatenate(list(task.certify_blocks(_blocks(X_flat), 3)))
    task.pack_blocks = False
    alone = BlockResult.concatenate(list(task.certify_blocks(_blocks(X_flat), 3)))
    _same(stream, alone)


def test_a_bank_keeps_chunks_up_to_its_bytes_with_the_same_rows():
    d = 7
    chunk_bytes = banks.CHUNK_ROWS * d * 4
    kept = banks.NoiseBank(3, banks.ESTIMATION, GAUSSIAN, d, keep_bytes=3 * chunk_bytes)
    plain = banks.NoiseBank(3, banks.ESTIMATION, GAUSSIAN, d)
    drawn = []
    chunk = kept.family.bank_sample
    kept.family = type(kept.family)()
    kept.family.bank_sample = lambda n, bits: drawn.append(n) or chunk(n, bits)
    spans = [(0, 3000), (1100, 1900), (2100, 2200), (5000, 5100), (0, 10)]
    for a, b in spans:
        np.testing.assert_array_equal(kept.rows(a, b), plain.rows(a, b))
    # chunks 0-2, then 4 (evicting the least recent, 0), 0 again: five drawn
    assert len(drawn) == 5 and len(kept._kept) == 3


@pytest.mark.parametrize("ahead", [True, False])
def test_rows_ahead_fill_the_tail_off_the_cpu_only(monkeypatch, ahead):
    network, passes = _coordinates(False)
    X = _inputs(INPUT_BLOCK, seed=3)
    reference = _stream(network, radius=0.3).certify(X, 7)
    monkeypatch.setattr(passes_module, "FILL_AHEAD", ahead if ahead else None)
    passes.clear()
    (result,) = _stream(network, radius=0.3).certify_blocks([X], 7)
    _same(result, reference)
    needed = len(X) * 64 + reference.n_draws.sum()
    short = sum(p < BATCH for p in passes)
    if ahead:  # the selection's last pass and the stream's last
        assert short <= 2 and sum(passes) >= needed
    else:  # the CPU: no row counted that the decisions do not use
        assert sum(passes) == needed and short > 2


def test_kept_first_layer_windows_give_the_same_counts(monkeypatch):
    # a stream keeps the first layer's response to each window it counts;
    # counting the same rows again takes it from there, with the same counts
    network, _ = _coordinates(True)
    X = _inputs(9, seed=8)
    scale = Scale(np.full(9, 0.5))
    bank = banks.NoiseBank(0, banks.ESTIMATION, GAUSSIAN, 5)
    windows = banks.Kept(2**20)
    computed = []
    window = first_layer._FusedResponse.window
    monkeypatch.setattr(
        first_layer._FusedResponse,
        "window",
        lambda self, z: computed.append(len(z)) or window(self, z),
    )
    kwargs = {"batch_size": 100, "first_row": 50}
    fresh = count_classes(network, X, scale, bank, 300, **kwargs)
    first = count_classes(network, X, scale, bank, 300, windows=windows, **kwargs)
    again = count_classes(network, X, scale, bank, 300, windows=windows, **kwargs)
    np.testing.assert_array_equal(first, fresh)
    np.testing.assert_array_equal(again, fresh)
    assert computed == [100, 100, 100] * 2  # fresh, then once for the kept ones


def test_the_stream_is_the_default_off_the_cpu_only():
    """On the CPU a pass costs about its rows and the stream redraws some:
    block by block there by default; off it the stream (the same
    certificates either way, tested above)."""
    from types import SimpleNamespace

    for device, streams in (("cpu", False), ("cuda", True), ("mps", True)):
        network = SimpleNamespace(device=torch.device(device))
        task = _task(network, True, radius=0.3)
        assert task.streams_blocks is streams
        assert _task(network, True, pack_blocks=True).streams_blocks
        assert not _task(network, True, pack_blocks=False).streams_blocks
        assert not _task(network, False, pack_blocks=True).streams_blocks


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("params", SETTINGS)
def test_on_a_gpu_certify_streams_with_the_certificates_of_block_by_block(
    digits, params
):
    # the default on a GPU is the stream: certify against certify with the
    # task made block by block, same device and draws (the network's float
    # rounding may differ with a pass's layout: draws equal, labels and
    # bounds up to that)
    import dataclasses
    from unittest import mock

    from smoothlearn import SmoothedClassifier

    X, y = digits
    clf = SmoothedClassifier(
        n=2000,
        n0=64,
        batch_size=500,
        module__hidden_units=(32,),
        max_epochs=3,
        device="cuda",
        random_state=0,
        radius_tolerance=params.get("radius_tolerance"),
    ).fit(X[:600], y[:600])
    assert clf._task(clf._certification_strategy()).streams_blocks
    build = type(clf)._task

    def block_by_block(self, *args, **kwargs):
        return dataclasses.replace(build(self, *args, **kwargs), pack_blocks=False)

    stream = clf.certify(X[600:750], radius=params.get("radius"))
    with mock.patch.object(type(clf), "_task", block_by_block):
        alone = clf.certify(X[600:750], radius=params.get("radius"))
    np.testing.assert_array_equal(stream.n_draws, alone.n_draws)
    assert np.mean(stream.label == alone.label) >= 0.98
    np.testing.assert_allclose(stream.p_lower, alone.p_lower, atol=1e-6)
