"""Blocks of inputs: what certifying one block returns, and how blocks are run.

Certification advances by blocks of :data:`INPUT_BLOCK` inputs: a block's
noise banks are regenerated once (cheap next to ``n`` forward passes per
input), and progress, checkpoints and parallel work move by whole blocks.
:func:`run_blocks` runs a picklable ``work(X_block, key)`` on each block, in
this process or on joblib workers, reading finished blocks back from a
checkpoint log and appending new ones (:class:`BlockResult` rows).
"""

from dataclasses import dataclass

import numpy as np
from joblib import Parallel, delayed
from tqdm.auto import tqdm

from .scale import Scale

__all__ = ["BlockResult", "INPUT_BLOCK", "run_blocks"]

#: Inputs handled together: the noise banks are regenerated once per block
#: (cheap next to n forward passes per input) and progress, checkpoints and
#: parallel work advance by whole blocks.
INPUT_BLOCK = 64


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


def run_blocks(work, X, key, *, n_jobs=None, verbose=0, checkpoint=None):
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
        From 1, a progress bar over the inputs.
    checkpoint : CheckpointLog, default=None
        A log of :class:`BlockResult`: blocks it holds for unchanged inputs
        are read back, the others computed and appended; the log's own key
        replaces ``key`` when it resumes a run.

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
    with tqdm(total=len(X), unit="input", disable=not verbose, leave=False) as bar:
        bar.update(len(X) - sum(b.stop - b.start for b in todo))
        computed = Parallel(n_jobs=n_jobs, return_as="generator")(
            delayed(work)(X[b], key) for b in todo
        )
        for block, result in zip(todo, computed):
            results[block.start] = result
            if checkpoint is not None:
                checkpoint.append(X, block, result.rows())
            bar.update(block.stop - block.start)
    return [results[b.start] for b in blocks]
