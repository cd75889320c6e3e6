"""Full forward passes under adaptive sampling: packing keeps every input's draws.

The network here selects coordinates (a one-hot first layer, then a ReLU):
each row's logits are exact whatever rows share its pass, so packed and
unpacked counts must agree exactly, and with votes computed draw by draw
from the bank's rows. (A general network's float32 logits may differ in the
last bits with the batch's composition; then so may a count near a tie.)
"""

import math

import numpy as np
import pytest
import torch

from smoothlearn import banks
from smoothlearn.bounds import sequential_looks
from smoothlearn.certify import SmoothingTask
from smoothlearn.counting import count_classes
from smoothlearn.grid import Grid, RawWords
from smoothlearn.network import FlatInputNetwork
from smoothlearn.noise import get_noise
from smoothlearn.scale import Scale
from smoothlearn.strategies import get_strategy

GAUSSIAN = get_noise("gaussian")
D, K = 5, 3


def _coordinates(reuse):
    """Logits ``relu(x[:K])``: exact per row (one nonzero term per sum), on
    the plain path or through first-layer reuse."""
    linear = torch.nn.Linear(D, K)
    with torch.no_grad():
        linear.weight.zero_()
        linear.weight[torch.arange(K), torch.arange(K)] = 1.0
        linear.bias.zero_()
    relu = torch.nn.ReLU()
    network = FlatInputNetwork(
        torch.nn.Sequential(linear, relu), (D,), K, reuse_first_layer=reuse
    )
    assert (network.first_linear is not None) == reuse
    passes = []
    relu.register_forward_pre_hook(lambda _, args: passes.append(len(args[0])))
    return network, passes


def _inputs(m, seed=0):
    """On the grid of step 1/16, margins between the first coordinates spread."""
    rng = np.random.RandomState(seed)
    return np.round(rng.uniform(0, 1.5, size=(m, D)) * 16).astype(np.float32) / 16


def _ranges(m, seed=1):
    rng = np.random.RandomState(seed)
    return rng.randint(0, 700, size=m), rng.randint(0, 900, size=m)


@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("batch_size", [64, 250, 1000])
def test_packed_counts_are_each_inputs_votes_on_its_own_rows(reuse, batch_size):
    m = 23
    network, passes = _coordinates(reuse)
    X = _inputs(m)
    values = np.array([0.25, 0.5, 1.0, 2.0] * 6)[:m]  # powers of 2: s z exact
    scale = Scale(values)
    bank = banks.NoiseBank(0, banks.ESTIMATION, GAUSSIAN, D)
    first, n_draws = _ranges(m)
    n_draws[3] = 0  # an input with nothing to count
    packed = count_classes(
        network, X, scale, bank, n_draws, batch_size=batch_size, first_row=first
    )
    assert passes[:-1] == [batch_size] * (len(passes) - 1)
    assert 0 < passes[-1] <= batch_size
    assert len(passes) == math.ceil(n_draws.sum() / batch_size)
    assert sum(passes) == n_draws.sum()
    # the truth: each input's votes on bank rows [first_i, first_i + n_i)
    fresh = banks.NoiseBank(0, banks.ESTIMATION, GAUSSIAN, D)
    expected = np.zeros((m, K), dtype=np.int64)
    for i in range(m):
        z = fresh.rows(first[i], first[i] + n_draws[i]).numpy() if n_draws[i] else None
        if z is not None:
            noisy = X[i] + np.float32(values[i]) * z
            votes = np.argmax(np.maximum(noisy[:, :K], 0), axis=1)
            expected[i] = np.bincount(votes, minlength=K)
    np.testing.assert_array_equal(packed, expected)
    unpacked = count_classes(
        network,
        X,
        scale,
        bank,
        n_draws,
        batch_size=batch_size,
        first_row=first,
        pack=False,
    )
    np.testing.assert_array_equal(unpacked, expected)


def test_each_window_of_the_bank_is_drawn_once_per_count():
    network, _ = _coordinates(False)
    bank = banks.NoiseBank(0, banks.ESTIMATION, GAUSSIAN, D)
    drawn = []
    rows = bank.rows
    bank.rows = lambda a, b: drawn.append((a, b)) or rows(a, b)
    first, n_draws = _ranges(17)
    count_classes(
        network,
        _inputs(17),
        Scale(np.full(17, 0.5)),
        bank,
        n_draws,
        batch_size=128,
        first_row=first,
    )
    starts, stops = zip(*drawn)
    assert starts[0] == first.min() and stops[-1] == (first + n_draws).max()
    assert list(starts[1:]) == list(stops[:-1])  # consecutive, none repeated
    assert max(b - a for a, b in drawn) <= 128


def test_the_grid_path_packs_with_the_same_counts():
    m, batch_size = 19, 100
    network, passes = _coordinates(False)
    X = _inputs(m)
    scale = Scale(np.array([0.25, 0.5] * 10)[:m])
    bank = banks.NoiseBank(0, banks.ESTIMATION, RawWords(GAUSSIAN), D)
    first, n_draws = _ranges(m, seed=2)
    grid = Grid(1 / 16)
    kwargs = {"batch_size": batch_size, "first_row": first, "grid": grid}
    packed = count_classes(network, X, scale, bank, n_draws, **kwargs)
    assert passes[:-1] == [batch_size] * (len(passes) - 1)
    assert len(passes) == math.ceil(n_draws.sum() / batch_size)
    passes.clear()
    unpacked = count_classes(network, X, scale, bank, n_draws, pack=False, **kwargs)
    assert len(passes) > math.ceil(n_draws.sum() / batch_size)
    np.testing.assert_array_equal(packed, unpacked)
    # and input by input, alone
    for i in range(0, m, 5):
        alone = count_alone(
            network,
            X,
            scale,
            bank,
            n_draws,
            i,
            batch_size=batch_size,
            first_row=first,
            grid=grid,
        )
        np.testing.assert_array_equal(alone, packed[i])


def count_alone(network, X, scale, bank, n_draws, i, first_row=None, **kwargs):
    """Input ``i``'s counts, counted alone (``first_row`` per input, or None)."""
    first = 0 if first_row is None else first_row[i]
    return count_classes(
        network,
        X[i : i + 1],
        scale[i : i + 1],
        bank,
        n_draws[i],
        first_row=first,
        **kwargs,
    )[0]


def _task(network, pack, **params):
    return SmoothingTask(
        network=network,
        strategy=get_strategy("cohen"),
        family=GAUSSIAN,
        sigma=0.5,
        n0=64,
        n=4000,
        alpha=0.001,
        batch_size=300,
        pack_batches=pack,
        **params,
    )


@pytest.mark.parametrize(
    "params, reuse, grid",
    [
        ({"radius": 0.3}, False, None),
        ({"radius": 0.3}, True, None),
        ({"radius_tolerance": 0.05}, False, None),
        ({"radius_tolerance": 0.05}, True, None),
    ],
)
def test_adaptive_certificates_are_the_same_packed_and_every_pass_is_full(
    params, reuse, grid
):
    network, passes = _coordinates(reuse)
    X = _inputs(40, seed=3)
    results, counted = {}, {}
    for pack in (True, False):
        passes.clear()
        task = _task(network, pack, grid=grid, **params)
        results[pack] = task.certify(X, 7)
        counted[pack] = list(passes)
    on, off = results[True], results[False]
    np.testing.assert_array_equal(on.class_index, off.class_index)
    np.testing.assert_array_equal(on.n_draws, off.n_draws)
    np.testing.assert_array_equal(on.p_lower, off.p_lower)
    assert len(np.unique(on.n_draws)) > 1  # inputs did stop at different sizes
    # packed: one count for the selection, then one per look (radius) or one
    # for every planned size (radius_tolerance), each full but its last pass
    m, bs = len(X), 300
    sizes = [m * 64]
    if "radius" in params:
        looks, _ = sequential_looks(4000, 0.001)
        previous = 0
        for look in looks:
            active = int((on.n_draws >= look).sum())
            if active:
                sizes.append(active * (look - previous))
            previous = look
    else:
        sizes.append(int(on.n_draws.sum()))
    expected = []
    for rows in sizes:
        expected += [bs] * (rows // bs) + ([rows % bs] if rows % bs else [])
    assert counted[True] == expected
    assert len(counted[False]) > len(expected)  # what packing saves here
    assert sum(counted[False]) == sum(expected)


def test_packing_is_on_by_default():
    network, _ = _coordinates(False)
    task = SmoothingTask(
        network, get_strategy("cohen"), GAUSSIAN, 0.5, 64, 100, 0.01, 10
    )
    assert task.pack_batches is True


@pytest.mark.parametrize("k", [1, 2])  # first-layer reuse by L B_i, or folded
def test_rotated_scales_pack_through_first_layer_reuse(k):
    """Axis-aligned bases and power-of-2 scales keep every product exact, so
    the low-rank (k = 1) and folded (k = 2) responses are exact per row."""
    m, batch_size = 13, 90
    network, passes = _coordinates(True)
    rng = np.random.RandomState(4)
    basis = np.zeros((m, D, k), dtype=np.float32)
    for i in range(m):
        axes = rng.choice(D, size=k, replace=False)
        basis[i, axes, np.arange(k)] = 1.0
    scale = Scale(
        rng.choice([0.25, 1.0, 2.0], size=(m, k)),
        basis,
        rng.choice([0.5, 1.0], size=m),
    )
    bank = banks.NoiseBank(0, banks.ESTIMATION, GAUSSIAN, D)
    first, n_draws = _ranges(m, seed=5)
    kwargs = {"batch_size": batch_size, "first_row": first}
    X = _inputs(m, seed=6)
    packed = count_classes(network, X, scale, bank, n_draws, **kwargs)
    assert passes[:-1] == [batch_size] * (len(passes) - 1)
    assert len(passes) == math.ceil(n_draws.sum() / batch_size)
    unpacked = count_classes(network, X, scale, bank, n_draws, pack=False, **kwargs)
    np.testing.assert_array_equal(packed, unpacked)
    assert packed.sum() == n_draws.sum()
    for i in np.flatnonzero(n_draws)[:6]:  # alone, in one pass: nothing sliced
        alone = count_alone(
            network,
            X,
            scale,
            bank,
            n_draws,
            i,
            batch_size=int(n_draws[i]),
            first_row=first,
        )
        np.testing.assert_array_equal(alone, packed[i])


class _PlaceReading(torch.nn.Module):
    """A network whose vote depends on its row's place in its forward pass:
    class 2 at every 7th place, else the coordinates' argmax. It stands for
    any float network whose kernels sum in an order that follows the batch
    (one found 939 of 1,000 logits changed between batches of 64 and 1)."""

    def forward(self, x):
        out = torch.relu(x[:, :K]).clone()
        out[torch.arange(len(x)) % 7 == 0, 2] = 1e6
        return out


def _place_reading_network():
    network = FlatInputNetwork(_PlaceReading(), (D,), K, reuse_first_layer=False)
    passes = []
    network.module.register_forward_pre_hook(
        lambda _, args: passes.append(len(args[0]))
    )
    return network, passes


def _grid_count(network, X, scale, first, n_draws, **kwargs):
    bank = banks.NoiseBank(0, banks.ESTIMATION, RawWords(GAUSSIAN), D)
    return count_classes(
        network,
        X,
        scale,
        bank,
        n_draws,
        batch_size=100,
        first_row=first,
        grid=Grid(1 / 16),
        **kwargs,
    )


def test_pinned_draws_keep_their_place_whatever_else_is_counted():
    # the place of draw r is r mod batch_size, whatever the other inputs,
    # their sizes, or how the count was split into extensions: so an input's
    # counts are the same alone, among others, and extended in steps; packed,
    # a place-reading network gives other counts in each of those
    network, passes = _place_reading_network()
    X = _inputs(9, seed=5)
    scale = Scale(np.full(9, 0.5))
    first, n_draws = np.zeros(9, dtype=np.int64), np.arange(9) * 37 + 130
    together = _grid_count(network, X, scale, first, n_draws, pinned=True)
    assert set(passes) == {100}  # one shape of pass, partial windows run whole
    alone = np.stack(
        [
            _grid_count(
                network, X[i : i + 1], scale[i : i + 1], 0, n_draws[i], pinned=True
            )[0]
            for i in range(9)
        ]
    )
    np.testing.assert_array_equal(together, alone)
    half = n_draws // 2
    stepped = _grid_count(network, X, scale, first, half, pinned=True)
    stepped += _grid_count(network, X, scale, half, n_draws - half, pinned=True)
    np.testing.assert_array_equal(together, stepped)
    # the place-reading network does tell layouts apart: packed, the same
    # counts depend on the other inputs and on the split
    packed = _grid_count(network, X, scale, first, n_draws)
    packed_alone = np.stack(
        [
            _grid_count(network, X[i : i + 1], scale[i : i + 1], 0, n_draws[i])[0]
            for i in range(9)
        ]
    )
    assert not np.array_equal(packed, packed_alone)


@pytest.mark.parametrize("params", [{"radius": 0.3}, {"radius_tolerance": 0.05}])
def test_grid_certificates_do_not_depend_on_the_other_inputs(params):
    # the adaptive counts on the grid (sequential looks, planned sizes)
    # extend from earlier counts and regroup the inputs still drawing; with
    # the estimation draws pinned, an input's certificate is the same alone
    # as among others, even for a network that reads its place in a pass
    network, passes = _place_reading_network()
    X = _inputs(12, seed=3)
    together = _task(network, True, grid=Grid(1 / 16), **params).certify(X, 7)
    for i in (0, 5, 11):
        alone = _task(network, True, grid=Grid(1 / 16), **params).certify(
            X[i : i + 1], 7
        )
        assert alone.class_index[0] == together.class_index[i]
        assert alone.n_draws[0] == together.n_draws[i]
        assert alone.p_lower[0] == together.p_lower[i]


def test_on_the_grid_every_estimation_size_is_a_multiple_of_the_pass():
    # so that every look's and every planned size's base classifier is the
    # same mixture over places (an independent check: with looks at other
    # sizes the certificate is for a classifier chosen by the stopping look)
    looks, alphas = sequential_looks(100_000, 0.001, 1000)
    assert looks.tolist() == [1000, 2000, 4000, 7000, 13000, 25000, 50000, 100000]
    assert alphas.sum() == pytest.approx(0.001) and alphas[-1] == 0.0005
    network, _ = _place_reading_network()
    X = _inputs(12, seed=3)
    for params in ({"radius": 0.3}, {"radius_tolerance": 0.05}):
        task = _task(network, True, grid=Grid(1 / 16), **params)
        out = task.certify(X, 7)
        assert ((out.n_draws % 300 == 0) | (out.n_draws == 4000)).all()
        assert len(np.unique(out.n_draws)) > 1
