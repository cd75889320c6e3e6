"""CERTIFY and PREDICT for a block of inputs: :class:`SmoothingTask`.

CERTIFY and PREDICT are those of Cohen et al. (2019), DESIGN.md section 4::

    CERTIFY(f, S, x, n0, n, alpha):
        c = argmax counts(f, x, S, n0)        # selection draws
        k = counts(f, x, S, n)[c]             # independent estimation draws
        p = beta.ppf(alpha, k, n - k + 1)     # one-sided Clopper-Pearson bound
        p < 1/2 -> ABSTAIN, else (c, gap(p))
    PREDICT(f, S, x, n, alpha):
        nA, nB = top two counts(f, x, S, n)
        binomtest(nA, nA + nB, 1/2) p-value <= alpha -> cA, else ABSTAIN

A :class:`SmoothingTask` is one smoothed classifier as the engine runs it: the
strategy's :class:`~smoothlearn.scale.Scale` for a block, run in float32
(:meth:`~smoothlearn.scale.Scale.as_run`), counted by the kernel
(:func:`~smoothlearn.counting.count_classes`) on the call's noise banks
(:mod:`smoothlearn.banks`), decided by the bounds (:mod:`smoothlearn.bounds`),
block by block (:mod:`smoothlearn.blocks`).
"""

import time
import warnings
from dataclasses import dataclass

import numpy as np

# by module: the names that lived here before are not this module's own
from . import banks, blocks, bounds, counting, passes
from .grid import RawWords, quantised_scale, sampling_slack
from .network import FlatInputNetwork
from .scale import Scale

__all__ = ["SmoothingTask"]


@dataclass
class SmoothingTask:
    """One smoothed classifier as the engine runs it, block by block.

    Everything a block of inputs needs and nothing else (no estimator, no
    memory), so joblib ships it to workers cheaply; each method is a pure
    function of the task, the block and the call's key.

    Parameters
    ----------
    network : FlatInputNetwork
    strategy : BaseStrategy
        Checked and, where trained in ``fit``, fitted.
    family : NoiseFamily
    sigma : float
    n0, n : int
        Selection draws per input, and the most estimation draws per input.
    alpha : float
    batch_size : int
    radius_tolerance : float, default=None
        Input-specific estimation sizes (:func:`~smoothlearn.bounds.plan_sample_sizes`,
        the selection draws as the pilot); None spends ``n`` on every input.
    radius : float, default=None
        Decide "certified at ``radius``" sequentially
        (:func:`~smoothlearn.bounds.sequential_looks`) instead of estimating
        each bound with ``n`` draws; overrides ``radius_tolerance``.
    grid : smoothlearn.grid.Grid, default=None
        Smooth on the inputs' grid (:mod:`smoothlearn.grid`): selection and
        estimation draw the rounded noise exactly, in integers; the scale's
        values are those of :func:`~smoothlearn.grid.quantised_scale`, and
        each bound gives up the sampler's total-variation slack.
    pack_batches : bool, default=True
        Fill every forward pass of a count with ``batch_size`` noisy inputs
        (:func:`~smoothlearn.counting.count_classes`'s ``pack``), however
        many draws each input still needs: inputs that stopped early (a
        sequential decision) or were planned fewer draws
        (``radius_tolerance``) leave no pass part-empty. Every input sees the
        same bank rows either way; False is the kernel before packing.
    pack_blocks : bool or None, default=None
        :meth:`certify_blocks` runs the blocks it is given as one stream of
        full passes (:func:`~smoothlearn.passes.certify_blocks`): one
        block's last looks share passes with the next block's first ones.
        Every input sees the same bank rows and is decided at the same looks
        either way; False certifies block by block (:meth:`certify`), as
        before. None (the default) streams off the CPU only: there a short
        pass costs what a full one does, while on the CPU a pass costs
        about its rows and the stream took 1.00x to 1.10x block by block's
        CPU time (it draws some rows again). Needs ``pack_batches``.
    """

    network: FlatInputNetwork
    strategy: object
    family: object
    sigma: float
    n0: int
    n: int
    alpha: float
    batch_size: int
    radius_tolerance: float | None = None
    radius: float | None = None
    grid: object = None
    pack_batches: bool = True
    pack_blocks: bool | None = None

    @property
    def streams_blocks(self):
        """Whether :meth:`certify_blocks` runs its blocks as one stream
        (``pack_blocks``; by default off the CPU only)."""
        if not self.pack_batches:
            return False
        if self.pack_blocks is None:
            return self.network.device.type != "cpu"
        return bool(self.pack_blocks)

    def smoothing(self, X, key):
        """The strategy's :class:`~smoothlearn.scale.Scale` for ``X`` (with its
        offset), chosen on the optimisation bank."""
        answer = self.strategy.scales(
            self.network,
            X,
            sigma=self.sigma,
            family=self.family,
            bank=self.bank(key, banks.OPTIMISATION, X.shape[1]),
            p_max=float(bounds.clopper_pearson_lower(self.n, self.n, self.alpha)),
        )
        if isinstance(answer, dict):  # a strategy written for smoothlearn 0.1
            warnings.warn(
                f"{type(self.strategy).__name__}.scales returned a dict; strategies "
                "return a smoothlearn.scale.Scale (Scale(scale, basis, scale_rest, "
                "offset=offset)). Dicts will be refused in 0.3.",
                FutureWarning,
                stacklevel=2,
            )
            answer = Scale(
                answer["scale"],
                answer.get("basis"),
                answer.get("scale_rest"),
                offset=answer.get("offset"),
            )
        return answer

    def bank(self, key, which, n_features, keep_bytes=0):
        """The call's bank ``which``, drawn on the device that certifies: on the
        grid, the selection and estimation banks hold raw words
        (:class:`~smoothlearn.grid.RawWords`); ``keep_bytes`` as
        :class:`~smoothlearn.banks.NoiseBank`'s."""
        family = self.family
        if self.grid is not None and which != banks.OPTIMISATION:
            family = RawWords(self.family)
        return banks.NoiseBank(
            key,
            which,
            family,
            n_features,
            device=self.network.device,
            keep_bytes=keep_bytes,
        )

    def prepare(self, X, key):
        """``(run, recorded)``: the strategy's scale as the engine runs it and
        as a certificate records it (:meth:`~smoothlearn.scale.Scale.as_run`;
        on the grid, both the :func:`~smoothlearn.grid.quantised_scale` of its
        values, exactly)."""
        data_dependent = getattr(self.strategy, "data_dependent", False)
        if data_dependent:  # the bar says why it waits: no forward pass counts yet
            blocks.report_phase(f"{self.strategy.name}: choosing each input's scale")
        try:
            return self._as_run(self.smoothing(X, key))
        finally:
            if data_dependent:
                blocks.report_phase(None)

    def _as_run(self, answer):
        if self.grid is None:
            return answer.as_run()
        if answer.kind == "rotated" or answer.offset is not None:
            raise ValueError(
                f"strategy {self.strategy.name!r} smooths with "
                + ("a rotated scale" if answer.kind == "rotated" else "a mean offset")
                + ", which has no exact sampler on the grid (round(S z / h) is not a "
                "product of one-dimensional laws); use grid=None with it, or an "
                "isotropic or diagonal strategy (cohen, isotropic_dd, ancer, "
                "ucan_pattern) on the grid."
            )
        quantised = Scale(quantised_scale(answer.values))
        return quantised, Scale(quantised.values.copy())

    def count(self, X, run, bank, n_draws, *, rows=None, first_row=0, windows=None):
        """Class counts of rows ``rows`` (all by default) over ``n_draws`` bank rows
        from ``first_row`` (each an int, or one per row):
        :func:`~smoothlearn.counting.count_classes` (``windows`` is its)."""
        if rows is not None:
            X, run = X[rows], run[rows]
        return counting.count_classes(
            self.network,
            X,
            run,
            bank,
            n_draws,
            batch_size=self.batch_size,
            first_row=first_row,
            progress=blocks.report_draws,
            grid=self.grid,
            pack=self.pack_batches,
            # on the grid the estimation draws keep their places in their
            # passes whatever else runs (design notes, "The network as one
            # function"); the selection draws only pick a class
            pinned=self.grid is not None and bank.bank == banks.ESTIMATION,
            windows=windows,
        )

    def counts(self, X, key, which):
        """The recorded scale and the count tables of the banks ``which`` for ``X``."""
        run, recorded = self.prepare(X, key)
        draws = {banks.SELECTION: self.n0, banks.ESTIMATION: self.n}
        counts = [
            self.count(X, run, self.bank(key, b, X.shape[1]), draws[b]) for b in which
        ]
        return recorded, counts

    def certify(self, X, key):
        """CERTIFY each input of ``X``: a :class:`~smoothlearn.blocks.BlockResult`.

        The selection draws pick each input's class; the estimation draws
        then bound its probability with ``n`` draws, with a size planned per
        input (``radius_tolerance``), or with as many as deciding "certified
        at ``radius``" takes (``radius``). Every bound holds with probability
        at least ``1 - alpha`` (:mod:`smoothlearn.bounds`).
        """
        start = time.perf_counter()
        run, recorded = self.prepare(X, key)
        selection_bank, estimation_bank = (
            self.bank(key, b, X.shape[1]) for b in (banks.SELECTION, banks.ESTIMATION)
        )
        selection = self.count(X, run, selection_bank, self.n0)
        top = np.argmax(selection, axis=1)
        counter = _TopCounter(self, X, run, estimation_bank, top)
        if self.radius is not None:
            n_draws, p_lower = self._decide(counter, recorded)
        else:
            n_draws = np.full(len(top), self.n, dtype=np.int64)
            if self.radius_tolerance is not None:
                n_draws = self.planned_sizes(selection[np.arange(len(top)), top])
            if self.pack_batches:  # one count, each input to its own size
                counter.extend_to(np.arange(len(top)), n_draws)
            else:  # ascending sizes: extend the inputs still short
                for size in np.unique(n_draws):
                    counter.extend_to(np.flatnonzero(n_draws >= size), size)
            p_lower = bounds.clopper_pearson_lower(counter.k, n_draws, self.alpha)
        seconds = time.perf_counter() - start
        return self.block_result(X, top, p_lower, n_draws, recorded, seconds)

    def certify_blocks(self, X_blocks, key):
        """CERTIFY each block of ``X_blocks``: one
        :class:`~smoothlearn.blocks.BlockResult` per block, in order, yielded
        as each is decided.

        Where :attr:`streams_blocks`, the blocks run as one stream of full
        forward passes (:func:`~smoothlearn.passes.certify_blocks`);
        otherwise one by one through :meth:`certify`. Each input's draws,
        looks and bound are the same either way.
        """
        if self.streams_blocks:
            yield from passes.certify_blocks(self, X_blocks, key)
        else:
            for X in X_blocks:
                yield self.certify(X, key)

    def planned_sizes(self, pilot):
        """Each input's estimation size under ``radius_tolerance``, from its
        selection count of its class (:func:`~smoothlearn.bounds.plan_sample_sizes`),
        rounded up to the pinned multiple (:meth:`_pinned`) below ``n``."""
        n_draws = bounds.plan_sample_sizes(
            pilot, self.n0, self.n, self.alpha, self.radius_tolerance, self.family
        )
        multiple = self._pinned()
        return np.minimum(-(-n_draws // multiple) * multiple, self.n)

    def block_result(self, X, top, p_lower, n_draws, recorded, seconds):
        """The :class:`~smoothlearn.blocks.BlockResult` of a decided block:
        on the grid each bound gives up the sampler's slack first; abstain
        where it is below 1/2. ``seconds`` is the block's time, shared
        equally by its inputs."""
        if self.grid is not None:
            # the draws' law is within this total variation of the rounded law
            slack = sampling_slack(
                self.family, recorded.per_coordinate(X.shape[1]), self.grid.step
            )
            p_lower = np.maximum(p_lower - slack, 0.0)
        top, p_lower, gap, _ = bounds.certificate_from_bound(top, p_lower, self.family)
        m = len(top)
        return blocks.BlockResult(
            top, p_lower, gap, np.full(m, seconds / max(m, 1)), n_draws, recorded
        )

    def _pinned(self):
        """The multiple every estimation size is rounded up to (below ``n``):
        on the grid, ``batch_size``, so that every pinned count's base
        classifier is the same mixture over places (design notes, "The
        network as one function"); 1 elsewhere."""
        if self.grid is None:
            return 1
        return self.network.batch_size_for(self.batch_size)  # what the count runs

    def _decide(self, counter, recorded):
        """Sequential looks at "certified at ``radius``": ``(n_draws, p_lower)``.

        An input stops at the first look whose bound reaches the probability
        its scale needs for ``radius`` (decided: certified), or whose upper
        bound at the same level falls below it (decided: not certified), or
        at the last look; its bound is the one at the look where it stopped,
        with that look's share of ``alpha``.
        """
        looks, alphas = bounds.sequential_looks(self.n, self.alpha, self._pinned())
        needed = self.family.probability_for_gap(
            self.radius / (self.family.c * recorded.smallest())
        )
        m = len(counter.k)
        n_draws = np.full(m, looks[-1], dtype=np.int64)
        p_lower = np.zeros(m)
        active = np.arange(m)
        for look, level in zip(looks, alphas):
            counter.extend_to(active, look)
            k = counter.k[active]
            stop, lower = bounds.sequential_stop(
                k, look, level, needed[active], look == looks[-1]
            )
            n_draws[active[stop]] = look
            p_lower[active[stop]] = lower[stop]
            active = active[~stop]
            if len(active) == 0:
                break
        return n_draws, p_lower

    def estimation_counts(self, X, key):
        """The estimation bank's class counts, shape (m, n_classes)."""
        return self.counts(X, key, (banks.ESTIMATION,))[1][0]

    def noise_parameters(self, X, key):
        """``(offset, scale)`` of the noise per coordinate, each (m, n_features).

        The float32 values the engine runs. Raises ValueError for rotated
        scales, which have no per-coordinate form.
        """
        answer = self.smoothing(X, key)
        if answer.kind == "rotated":
            raise ValueError(
                f"strategy {self.strategy.name!r} smooths along a rotated basis: "
                "its scale is not per coordinate; use certify(X).scale_matrix(i)."
            )
        run, _ = self._as_run(answer)
        offset = np.zeros_like(X) if run.offset is None else run.offset
        return offset, run.per_coordinate(X.shape[1])


class _TopCounter:
    """Each input's count of its selected class over a growing prefix of a bank.

    Inputs extended together share every window of draws; rows ``[0, a)`` are
    never counted twice, so extending in steps costs what one pass to the
    largest size costs. One extension may take each input from where it is
    to a size of its own: one count, whose passes
    :func:`~smoothlearn.counting.count_classes` packs.
    """

    def __init__(self, task, X, run, bank, top):
        self.task, self.X, self.run, self.bank = task, X, run, bank
        self.top = top
        self.k = np.zeros(len(top), dtype=np.int64)
        self.done = np.zeros(len(top), dtype=np.int64)

    def extend_to(self, rows, size):
        """Count rows ``rows`` up to ``size`` bank rows (an int, or one per row)."""
        if len(rows) == 0:
            return
        first = self.done[rows]
        size = np.broadcast_to(np.asarray(size, dtype=np.int64), first.shape)
        if np.any(size < first):
            raise RuntimeError("an input cannot be extended to fewer draws")
        counts = self.task.count(
            self.X, self.run, self.bank, size - first, rows=rows, first_row=first
        )
        self.k[rows] += counts[np.arange(len(rows)), self.top[rows]]
        self.done[rows] = size


# ------------------------------------------------- names kept for 0.1's users
#: Names this module held before the engine was split by concept, and the
#: module each lives in now; the old place answers until 0.3, with a warning.
_MOVED = {
    "CHUNK_ROWS": banks,
    "ESTIMATION": banks,
    "NoiseBank": banks,
    "OPTIMISATION": banks,
    "SELECTION": banks,
    "bank_key": banks,
    "BlockResult": blocks,
    "INPUT_BLOCK": blocks,
    "run_blocks": blocks,
    "certificate_from_bound": bounds,
    "certify_from_counts": bounds,
    "predict_from_counts": bounds,
    "top_two_pvalue": bounds,
    "count_classes": counting,
}


def __getattr__(name):
    if name in _MOVED:
        module = _MOVED[name]
        warnings.warn(
            f"smoothlearn.certify.{name} is now {module.__name__}.{name}; the old "
            "place will be removed in 0.3.",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def smoothing_as_run(smoothing):
    """The smoothing the engine runs, and the region scale a certificate records.

    .. deprecated:: 0.1
        Use :meth:`smoothlearn.scale.Scale.as_run`; this function, which takes
        and returns the scale's arrays as dicts, will be removed in 0.3.
    """
    warnings.warn(
        "smoothlearn.certify.smoothing_as_run(dict) is Scale.as_run() "
        "(smoothlearn.scale.Scale); it will be removed in 0.3.",
        FutureWarning,
        stacklevel=2,
    )
    run, recorded = Scale.from_fields(**smoothing).as_run()
    return run.fields(), recorded.fields()


class BaseNetwork(FlatInputNetwork):
    """Deprecated alias of :class:`smoothlearn.network.FlatInputNetwork`.

    .. deprecated:: 0.1
        Renamed ``FlatInputNetwork`` (what it is: a torch module taking flat
        inputs); ``BaseNetwork`` will be removed in 0.3.
    """

    def __init__(self, *args, **kwargs):
        warnings.warn(
            "smoothlearn.certify.BaseNetwork is renamed "
            "smoothlearn.network.FlatInputNetwork; the old name will be removed "
            "in 0.3.",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__(*args, **kwargs)


def rotated_noise(z, basis, scale, scale_rest):
    """``U diag(s) U^T z + r (I - U U^T) z`` for each input.

    .. deprecated:: 0.1
        Use ``smoothlearn.scale.Scale(scale, basis, scale_rest).noise(z)``;
        this function will be removed in 0.3.

    Parameters
    ----------
    z : torch.Tensor of shape (w, d)
    basis : torch.Tensor of shape (g, d, k)
    scale : torch.Tensor of shape (g, k)
    scale_rest : torch.Tensor of shape (g,)

    Returns
    -------
    torch.Tensor of shape (g, w, d)
    """
    warnings.warn(
        "smoothlearn.certify.rotated_noise is Scale(scale, basis, scale_rest)"
        ".noise(z) (smoothlearn.scale.Scale); it will be removed in 0.3.",
        FutureWarning,
        stacklevel=2,
    )
    return Scale(scale, basis, scale_rest).noise(z)
