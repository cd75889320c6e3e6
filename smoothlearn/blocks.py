"""Blocks of inputs: what certifying one block returns, and how blocks are run.

Certification advances by blocks of :data:`INPUT_BLOCK` inputs: a block's
noise banks are regenerated once (cheap next to ``n`` forward passes per
input), and progress, checkpoints and parallel work move by whole blocks.
:func:`run_blocks` runs a picklable ``work(X_block, key)`` on each block, in
this process or on joblib workers, reading finished blocks back from a
checkpoint log and appending new ones (:class:`BlockResult` rows). With
``grouped``, ``work(X_blocks, key)`` takes the blocks a process holds (all
of them in this process, a share of consecutive ones on each worker) and
yields their results in order, so that it can share forward passes across
them (:meth:`~smoothlearn.certify.SmoothingTask.certify_blocks`).
"""

import math
import threading
from dataclasses import dataclass

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs
from tqdm.auto import tqdm

from .scale import Scale

__all__ = ["BlockResult", "INPUT_BLOCK", "report_draws", "report_phase", "run_blocks"]

#: Seconds between two redraws of a progress bar that nothing moved: its
#: elapsed and remaining times keep running through a strategy's optimisation
#: and while blocks run on workers.
TICK_SECONDS = 1.0

#: Inputs handled together: the noise banks are regenerated once per block
#: (cheap next to n forward passes per input) and progress, checkpoints and
#: parallel work advance by whole blocks.
INPUT_BLOCK = 64

#: The most blocks one joblib worker is handed at once under ``grouped``:
#: they share forward passes, and come back (to the checkpoint, the bar)
#: together.
WORKER_BLOCKS = 8


@dataclass
class BlockResult:
    """CERTIFY's answer for one block of inputs, before labels and the memory.

    Attributes
    ----------
    class_index : ndarray of int, shape (m,)
        Selected class index, -1 where abstained.
    p_lower, gap, time : ndarray of shape (m,)
        Probability bound, the family's gap (0 where abstained) and seconds
        per input.
    n_draws : ndarray of int, shape (m,)
        Estimation draws behind each bound.
    scale : Scale
        The recorded scale (:meth:`~smoothlearn.scale.Scale.as_run`).
    """

    class_index: np.ndarray
    p_lower: np.ndarray
    gap: np.ndarray
    time: np.ndarray
    n_draws: np.ndarray
    scale: Scale

    def rows(self):
        """One JSON-ready dict per input (what a checkpoint log stores)."""
        fields = self.scale.fields()
        out = []
        for j in range(len(self.class_index)):
            row = {
                "class_index": int(self.class_index[j]),
                "p_lower": float(self.p_lower[j]),
                "gap": float(self.gap[j]),
                "time": float(self.time[j]),
                "n_draws": int(self.n_draws[j]),
            }
            for name, value in fields.items():
                row[name] = np.asarray(value[j]).tolist()
            out.append(row)
        return out

    @classmethod
    def concatenate(cls, blocks):
        """One result for consecutive blocks."""
        fields = ("class_index", "p_lower", "gap", "time", "n_draws")
        joined = {f: np.concatenate([getattr(b, f) for b in blocks]) for f in fields}
        return cls(**joined, scale=Scale.concatenate(b.scale for b in blocks))

    @classmethod
    def from_rows(cls, rows):
        """The block whose :meth:`rows` are ``rows`` (floats round-trip exactly)."""
        fields = {
            name: np.array([r[name] for r in rows], dtype=np.float64)
            for name in Scale.FIELD_NAMES
            if rows[0].get(name) is not None
        }
        return cls(
            class_index=np.array([r["class_index"] for r in rows], dtype=np.intp),
            p_lower=np.array([r["p_lower"] for r in rows], dtype=np.float64),
            gap=np.array([r["gap"] for r in rows], dtype=np.float64),
            time=np.array([r["time"] for r in rows], dtype=np.float64),
            n_draws=np.array([r["n_draws"] for r in rows], dtype=np.int64),
            scale=Scale.from_fields(**fields),
        )


#: The progress of the call running in this thread (run_blocks sets it while
#: blocks run here; joblib's workers, in other processes or threads, see none)
_running = threading.local()


def report_draws(n_inputs, n_draws):
    """Tell the progress bar of the call running in this thread that
    ``n_inputs`` inputs each counted ``n_draws`` more noise draws.

    The counting kernel calls it after each forward pass
    (:func:`~smoothlearn.counting.count_classes`), so the bar moves per draw
    batch, not per block of :data:`INPUT_BLOCK` inputs; a no-op when no bar
    runs in this thread.
    """
    progress = getattr(_running, "progress", None)
    if progress is not None:
        progress.advance(n_inputs * n_draws)


def report_phase(text):
    """Show ``text`` beside the progress bar of the call running in this thread
    (what a block is doing between forward passes, e.g. a strategy choosing
    its scales); None clears it. A no-op when no bar runs in this thread."""
    progress = getattr(_running, "progress", None)
    if progress is not None:
        progress.bar.set_postfix_str(text or "", refresh=True)


class _Ticker(threading.Thread):
    """Redraws a bar every :data:`TICK_SECONDS` until stopped, so that a long
    step without forward passes does not look like a dead call."""

    def __init__(self, bar):
        super().__init__(daemon=True)
        self.bar, self.stopped = bar, threading.Event()

    def run(self):
        while not self.stopped.wait(TICK_SECONDS):
            self.bar.refresh()

    def stop(self):
        self.stopped.set()
        self.join()


class _DrawProgress:
    """A bar over inputs that moves with the draws counted inside a block.

    Between two finished blocks the bar is credited ``draws /
    draws_per_input`` inputs as draws are counted (at most a block's worth);
    each finished block sets it to the inputs finished. The remaining time
    tqdm shows is then estimated from the first forward passes, not from
    whole blocks.
    """

    def __init__(self, bar, draws_per_input):
        self.bar, self.draws_per_input = bar, draws_per_input
        self.done, self.partial = float(bar.n), 0.0

    def _show(self, position):
        if position > self.bar.n:
            self.bar.update(position - self.bar.n)

    def advance(self, draws):
        self.partial = min(self.partial + draws / self.draws_per_input, INPUT_BLOCK)
        self._show(min(self.done + self.partial, self.bar.total))

    def finish(self, size):
        self.done, self.partial = self.done + size, 0.0
        self._show(self.done)


def run_blocks(
    work,
    X,
    key,
    *,
    n_jobs=None,
    verbose=0,
    checkpoint=None,
    draws_per_input=None,
    grouped=False,
):
    """``work(X_block, key)`` on each block of ``INPUT_BLOCK`` inputs, in order.

    Blocks run in this process or on ``n_jobs`` joblib workers (any joblib
    backend); each is a pure function of its inputs and the key, so the
    results do not depend on ``n_jobs`` beyond float reduction order.

    Parameters
    ----------
    work : callable
        Picklable, e.g. a bound method of
        :class:`~smoothlearn.certify.SmoothingTask`.
    X : ndarray of shape (m, n_features)
    key : int
        The call's noise key (:func:`~smoothlearn.banks.bank_key`).
    n_jobs : int, default=None
    verbose : int, default=0
        From 1, a progress bar over the inputs, with the time remaining.
    checkpoint : CheckpointLog, default=None
        A log of :class:`BlockResult`: blocks it holds for unchanged inputs
        are read back, the others computed and appended; the log's own key
        replaces ``key`` when it resumes a run.
    draws_per_input : int, default=None
        The noise draws ``work`` counts per input (``n0 + n`` to certify):
        with it, blocks run in this process move the bar per forward pass
        (:func:`report_draws`); without it, or on workers, per block.
    grouped : bool, default=False
        ``work(X_blocks, key)`` takes a list of blocks and yields one result
        per block, in order. In this process (``n_jobs`` of one effective
        worker) it is given every block still to compute, and each result is
        checkpointed as it is yielded; on workers, each task is a run of
        consecutive blocks, an equal share of them per worker and at most
        :data:`WORKER_BLOCKS`.

    Returns
    -------
    list
        ``work``'s result for each block, in input order.
    """
    blocks = [
        slice(i, min(i + INPUT_BLOCK, len(X))) for i in range(0, len(X), INPUT_BLOCK)
    ]
    results = {}
    if checkpoint is not None:
        key = checkpoint.open(key)
        for block in blocks:
            logged = checkpoint.finished(X, block)
            if logged is not None:
                results[block.start] = BlockResult.from_rows(logged)
    todo = [b for b in blocks if b.start not in results]
    bar = tqdm(
        total=len(X),
        unit="input",
        disable=not verbose,
        leave=False,
        # tqdm's own format, the inputs done shown whole while draws move it
        bar_format="{l_bar}{bar}| {n:.0f}/{total_fmt} "
        "[{elapsed}<{remaining}, {rate_fmt}{postfix}]",
    )
    bar.update(len(X) - sum(b.stop - b.start for b in todo))
    progress = None
    if verbose and draws_per_input:
        progress = _DrawProgress(bar, draws_per_input)
    previous = getattr(_running, "progress", None)
    _running.progress = progress
    ticker = _Ticker(bar) if verbose and todo else None
    if ticker is not None:
        ticker.start()
    try:
        computed = _computed(work, X, key, todo, n_jobs, grouped)
        for block, result in zip(todo, computed):
            results[block.start] = result
            if checkpoint is not None:
                checkpoint.append(X, block, result.rows())
            if progress is not None:
                progress.finish(block.stop - block.start)
            else:
                bar.update(block.stop - block.start)
    finally:
        if ticker is not None:
            ticker.stop()
        _running.progress = previous
        bar.close()
    return [results[b.start] for b in blocks]


def _computed(work, X, key, todo, n_jobs, grouped):
    """``work``'s result for each block of ``todo``, in order, as they come."""
    if not grouped:
        return Parallel(n_jobs=n_jobs, return_as="generator")(
            delayed(work)(X[b], key) for b in todo
        )
    if not todo:
        return iter(())
    workers = effective_n_jobs(n_jobs)
    if workers == 1:  # this process holds every block
        return work([X[b] for b in todo], key)
    size = min(WORKER_BLOCKS, math.ceil(len(todo) / workers))
    groups = [todo[i : i + size] for i in range(0, len(todo), size)]
    listed = Parallel(n_jobs=n_jobs, return_as="generator")(
        delayed(_listed)(work, [X[b] for b in group], key) for group in groups
    )
    return (result for results in listed for result in results)


def _listed(work, X_blocks, key):
    """``work``'s results as a list (a generator does not travel back from a
    worker)."""
    return list(work(X_blocks, key))
