"""Optimisers that stop when they are done, and a comparison that stops when
its winner is clear."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from smoothlearn.banks import OPTIMISATION, NoiseBank
from smoothlearn.network import FlatInputNetwork
from smoothlearn.noise import get_noise
from smoothlearn.scale import Scale
from smoothlearn.strategies import ANCER, RANCER, RDDRS, IsotropicDD, _soft
from smoothlearn.strategies._soft import (
    STOP_PATIENCE,
    STOP_WINDOW,
    Convergence,
    better_of,
    comparison_looks,
)

from .conftest import linear_module

GAUSSIAN = get_noise("gaussian")


def test_an_input_stops_when_its_objective_stops_improving():
    rng = np.random.RandomState(0)
    n_iter, m = 200, 3
    steps = np.arange(n_iter)
    objectives = np.stack(
        [
            0.01 * steps + rng.normal(0, 0.01, n_iter),  # keeps improving
            1.0 + rng.normal(0, 0.05, n_iter),  # flat noise from the start
            np.minimum(steps, 60) / 60 + rng.normal(0, 0.01, n_iter),  # then flat
        ],
        axis=1,
    )
    converging = Convergence(m, 1e-3, "cpu")
    for it in range(n_iter):
        rows = converging.active
        if not len(rows):
            break
        converging.record(it, torch.as_tensor(objectives[it, rows.numpy()]))
    taken = converging.steps.numpy()
    assert taken[0] == n_iter
    # flat: the first window counts, then STOP_PATIENCE windows without one
    assert taken[1] == STOP_WINDOW * (1 + STOP_PATIENCE)
    assert 60 <= taken[2] <= 60 + STOP_WINDOW * (2 + STOP_PATIENCE)
    # tol=None: the papers' fixed number of steps
    never = Convergence(m, None, "cpu")
    for it in range(n_iter):
        never.record(it, torch.as_tensor(objectives[it]))
    assert (never.steps.numpy() == n_iter).all() and len(never.active) == m


def _problem(d=6, m=5):
    """A linear classifier and inputs at various distances from its boundary."""
    w = np.zeros(d)
    w[0] = 1.0
    network = FlatInputNetwork(linear_module(w, 0.0), (d,), 2)
    X = np.zeros((m, d), dtype=np.float32)
    X[:, 0] = np.linspace(0.05, 1.5, m)
    X[:, 1:] = np.random.RandomState(1).randn(m, d - 1) * 0.3
    return network, X


@pytest.mark.parametrize("make", [IsotropicDD, ANCER, RANCER, RDDRS])
def test_a_stopped_input_keeps_the_parameters_it_had_then(make):
    """With a tol no window can beat, every input stops after the first window
    and STOP_PATIENCE more: exactly the parameters of STOP_WINDOW * (1 +
    STOP_PATIENCE) steps of the fixed-step optimiser."""
    network, X = _problem()
    steps = STOP_WINDOW * (1 + STOP_PATIENCE)
    bank = NoiseBank(0, OPTIMISATION, GAUSSIAN, X.shape[1])

    def run(**params):
        strategy = make(n_draws=16, **params)
        kwargs = {"family": GAUSSIAN, "bank": bank}
        start = np.full(len(X), 0.25)
        if make in (RANCER, RDDRS):
            kwargs["basis"] = torch.linalg.qr(torch.randn(len(X), X.shape[1], 2))[0]
        return strategy.optimise(network, X, start, **kwargs)

    torch.manual_seed(0)
    stopped = run(n_iter=10 * steps, tol=1e9)
    torch.manual_seed(0)
    fixed = run(n_iter=steps, tol=None)
    # IsotropicDD and ANCER answer an array, RANCER and RDDRS a tuple of them
    stopped, fixed = (r if isinstance(r, tuple) else (r,) for r in (stopped, fixed))
    for a, b in zip(stopped, fixed):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_adam_leaves_a_stopped_row_where_it_stopped(monkeypatch):
    """Rows that stop early keep their parameters while the others move on."""
    network, X = _problem(m=4)
    bank = NoiseBank(0, OPTIMISATION, GAUSSIAN, X.shape[1])
    start = np.full(len(X), 0.25)

    class StopEvenRowsAtTen(Convergence):
        def record(self, it, objective):
            super().record(it, objective)
            if it != 9:
                return self.active[:0]
            even = self.active[self.active % 2 == 0]
            self.active = self.active[self.active % 2 == 1]
            return even

    def optimise(n_iter):
        return ANCER(n_draws=16, n_iter=n_iter, tol=None).optimise(
            network, X, start, family=GAUSSIAN, bank=bank
        )

    at_ten = optimise(10)
    monkeypatch.setattr("smoothlearn.strategies.ancer.Convergence", StopEvenRowsAtTen)
    mixed = optimise(40)
    monkeypatch.undo()
    full = optimise(40)
    np.testing.assert_array_equal(mixed[::2], at_ten[::2])
    np.testing.assert_allclose(mixed[1::2], full[1::2], rtol=1e-6)
    assert not np.allclose(full[::2], at_ten[::2])  # the even rows would have moved


def test_an_inputs_steps_do_not_depend_on_its_neighbours():
    network, X = _problem(m=6)
    bank = NoiseBank(3, OPTIMISATION, GAUSSIAN, X.shape[1])
    strategy = IsotropicDD(n_draws=32, n_iter=300)
    together = strategy.optimise(network, X, 0.25, family=GAUSSIAN, bank=bank)
    alone = np.concatenate(
        [
            strategy.optimise(network, X[i : i + 1], 0.25, family=GAUSSIAN, bank=bank)
            for i in range(len(X))
        ]
    )
    np.testing.assert_allclose(together, alone, rtol=1e-5)


def test_optimisers_stop_early_where_done():
    """On inputs far from the boundary the surrogate flattens quickly: they take
    far fewer than n_iter steps."""
    network, X = _problem(m=5)
    taken = {}

    class Counted(Convergence):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            taken["steps"] = self.steps

    import smoothlearn.strategies.isotropic_dd as module

    original = module.Convergence
    module.Convergence = Counted
    try:
        IsotropicDD(n_draws=64, n_iter=300).optimise(
            network,
            X,
            0.25,
            family=GAUSSIAN,
            bank=NoiseBank(0, OPTIMISATION, GAUSSIAN, X.shape[1]),
        )
    finally:
        module.Convergence = original
    assert taken["steps"].max() <= 300
    assert taken["steps"].float().mean() < 150


def test_the_papers_fixed_steps_keep_the_earlier_description():
    """tol=None behaves as before tol existed, so its description (and the
    memory kept under it by an earlier version) is the earlier one."""
    assert "tol" not in IsotropicDD(tol=None).describe()
    assert "tol=0.001" in IsotropicDD().describe()
    assert "tol" not in ANCER(tol=None, isotropic=IsotropicDD(tol=None)).describe()
    assert ANCER(tol=None).describe() != ANCER().describe()


# ------------------------------------------------------ the sequential comparison
def test_comparison_looks_halve_from_compare_draws():
    assert comparison_looks(4000) == [500, 1000, 2000, 4000]
    assert comparison_looks(1000) == [500, 1000]
    assert comparison_looks(600) == [600]


def _candidates(m, rng):
    """Two isotropic candidates per input: the start and a challenger."""
    start = np.full(m, 0.25)
    challenger = start * rng.choice([0.5, 0.8, 1.25, 2.0, 4.0], m)
    return [Scale(start), Scale(challenger)]


def test_the_sequential_comparison_chooses_as_the_full_one(monkeypatch):
    """On a linear classifier, with inputs from the boundary to far from it and
    challengers from half to four times the start, deciding early agrees with
    spending every draw, and where the winner is clear it spends fewer."""
    rng = np.random.RandomState(0)
    d, m = 4, 60
    w = np.zeros(d)
    w[0] = 1.0
    network = FlatInputNetwork(linear_module(w, 0.0), (d,), 2)
    X = np.zeros((m, d), dtype=np.float32)
    X[:, 0] = rng.uniform(0.0, 1.5, m)
    candidates = _candidates(m, rng)

    def score(gap, s):
        return gap * s.smallest()

    counted = []
    original = _soft.count_classes

    def counting(network, X, scale, bank, n_draws, **kwargs):
        counted.append(len(X) * n_draws)
        return original(network, X, scale, bank, n_draws, **kwargs)

    monkeypatch.setattr(_soft, "count_classes", counting)
    agreements, savings = [], []
    for key in range(5):
        settings = {
            "family": GAUSSIAN,
            "bank": NoiseBank(key, OPTIMISATION, GAUSSIAN, d),
            "offset": 0,
            "n_draws": 4000,
            "p_max": 0.001 ** (1 / 100_000),
        }
        counted.clear()
        _, sequential = better_of(network, X, candidates, score, **settings)
        spent = sum(counted)
        monkeypatch.setattr(_soft, "comparison_looks", lambda n: [n])
        counted.clear()
        _, full = better_of(network, X, candidates, score, **settings)
        monkeypatch.undo()
        monkeypatch.setattr(_soft, "count_classes", counting)
        assert sum(counted) == 2 * m * 4000
        savings.append(1 - spent / sum(counted))
        agreements.append(np.mean(sequential == full))
    assert np.mean(agreements) >= 0.97
    assert np.mean(savings) > 0.2, savings  # clear winners stopped early (31-33%)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 12),
    st.integers(0, 2**32 - 1),
)
def test_tied_minima_share_their_gradient_and_an_ulp_does_not_move_it(m, k, seed):
    """Reference: entries of a row either tie with its minimum up to a few
    ulps, or lie at least 1e-3 of it above; the gradient is 1/ties on the
    ties and 0 elsewhere, whatever the ulps, and the value is the minimum."""
    from smoothlearn.strategies._soft import tied_min

    rng = np.random.RandomState(seed)
    low = rng.uniform(0.1, 2.0, size=(m, 1))
    tied = rng.rand(m, k) < 0.5
    tied[np.arange(m), rng.randint(0, k, size=m)] = True  # one at least
    values = np.where(tied, low, low * (1 + rng.uniform(1e-3, 1.0, size=(m, k))))
    for dtype in (torch.float32, torch.float64):
        eps = torch.finfo(dtype).eps
        for jitter in (0.0, 4.0):  # exact ties, then a few ulps apart
            v = torch.as_tensor(values, dtype=dtype)
            v = v * (1 + jitter * eps * torch.as_tensor(rng.uniform(-1, 1, (m, k))))
            v = v.to(dtype).requires_grad_(True)
            out = tied_min(v)
            out.sum().backward()
            expected = tied / tied.sum(axis=1, keepdims=True)
            np.testing.assert_allclose(v.grad.numpy(), expected, rtol=1e-6)
            np.testing.assert_allclose(out.detach().numpy(), low[:, 0], rtol=10 * eps)
