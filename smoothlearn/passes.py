"""CERTIFY for a stream of blocks, with forward passes kept full across them.

:meth:`SmoothingTask.certify <smoothlearn.certify.SmoothingTask.certify>`
runs one block: its selection count, then its estimation counts (one count
to a fixed or planned size, or the sequential decision's looks, one count
per look). Each count ends in a short forward pass, and at a GPU-sized
``batch_size`` a look of a block's 64 inputs often fills no pass at all.
:func:`certify_blocks` runs the blocks a process holds as one stream of
work instead, so that one block's last looks share passes with the next
block's first ones:

* **Each input is its own state machine.** It counts its selection draws
  (bank rows ``[0, n0)``), then its estimation draws up to its next target
  (a look, a planned size, or ``n``), and is decided at each target from its
  own count alone, exactly as :meth:`~smoothlearn.certify.SmoothingTask.certify`
  decides it (:func:`smoothlearn.bounds.sequential_looks`' looks and levels,
  the same Clopper-Pearson bounds, the same stopping rule). An input's
  decision never waits for another's.
* **Rounds of whole passes.** Each round lays the pending rows of every
  live input end to end, in input order, and counts the longest prefix that
  fills whole passes of ``batch_size`` rows (one
  :func:`~smoothlearn.counting.count_classes` per bank, packed); the rest
  (fewer than ``batch_size`` rows, the last inputs' in order) waits for the
  next round, where inputs just decided add their next look's rows. An
  input's range cut between two rounds is counted on the same bank rows.
* **Blocks are admitted when work runs short.** While no bank has a full
  pass of pending rows, the next block is admitted: its strategy chooses
  its scales (:meth:`~smoothlearn.certify.SmoothingTask.prepare`, on the
  block alone, as block by block) and its inputs start their selection
  draws. Only when no block is left to admit does a round run a short pass.
* **The tail.** A short pass of the sequential decision is filled, off the
  CPU (:data:`FILL_AHEAD`), with rows past the current look of inputs not at
  their last look, counted aside: added to the input's count if it goes on
  to its next look, dropped if it stopped, so each look's bound is of that
  look's rows alone.
* **Blocks leave in order**, each as its
  :class:`~smoothlearn.blocks.BlockResult` as soon as it and every block
  before it are decided, so checkpoints and progress still move by blocks.

Every input sees the same bank rows (selection ``[0, n0)``, estimation
``[0, n_draws)``) as block by block, and is decided at the same looks on the
same counts: only which rows share a forward pass changes, as with packing
within a count (certificates differ only where a row's float logits depend
on the other rows of its pass). On the grid the estimation counts stay
pinned (:func:`~smoothlearn.counting.count_classes`' ``pinned``): each
round counts every pending estimation range whole, in its pinned places,
never cut (those passes are one input's whole window already).
"""

import time

import numpy as np

from . import banks, bounds
from .scale import Scale

__all__ = ["certify_blocks"]

SELECTING, ESTIMATING, DECIDED = 0, 1, 2

#: Bytes of drawn bank chunks a stream keeps per bank, and of first-layer
#: responses to windows of them: inputs of one block that reach a look in
#: different rounds, and each block admitted, come back to the same rows
#: (80 chunks of 784 features, 20 of 3x32x32, one, the last, as any count,
#: of 3x224x224). With 64 MiB the MNIST slice drew 40% more chunks than
#: block by block; with 256 MiB about as many.
KEPT_BANK_BYTES = 256 * 2**20

#: Whether a short pass of the sequential decision is filled with rows ahead
#: of each input's look; None: off the CPU only. On a CPU a pass costs about
#: its rows, so the rows an input that stops never uses are pure cost there
#: (4% more rows on the MNIST slice at ``batch_size=10000``); where a short
#: pass costs what a full one does (a GPU) they are free.
FILL_AHEAD = None


class _Block:
    """One admitted block: its inputs, scales and each input's state."""

    def __init__(self, task, X, key):
        start = time.perf_counter()
        self.X = X
        self.run, self.recorded = task.prepare(X, key)
        m, n_classes = len(X), task.network.n_classes
        self.phase = np.full(m, SELECTING, dtype=np.int8)
        self.done = np.zeros(m, dtype=np.int64)  # rows counted in this phase
        self.target = np.full(m, task.n0, dtype=np.int64)
        self.selection = np.zeros((m, n_classes), dtype=np.int64)
        self.top = np.zeros(m, dtype=np.intp)
        self.k = np.zeros(m, dtype=np.int64)
        self.look = np.zeros(m, dtype=np.intp)
        # estimation rows counted past the current look, for the next one
        self.ahead = np.zeros(m, dtype=np.int64)
        self.ahead_k = np.zeros(m, dtype=np.int64)
        self.n_draws = np.zeros(m, dtype=np.int64)
        self.p_lower = np.zeros(m)
        self.needed = None
        if task.radius is not None:
            self.needed = task.family.probability_for_gap(
                task.radius / (task.family.c * self.recorded.smallest())
            )
        self.form = _form(self.run)
        self.seconds = time.perf_counter() - start

    def pending(self, phase):
        """Inputs in ``phase`` with rows still to count, and how many each."""
        rows = np.flatnonzero((self.phase == phase) & (self.done < self.target))
        return rows, self.target[rows] - self.done[rows]


def _form(scale):
    """What must match for two blocks' scales to run in one count: the kind,
    the offset's presence and each array's shape past the rows."""
    arrays = tuple(
        (name, None if a is None else np.shape(a)[1:])
        for name, a in scale._arrays().items()
    )
    return scale.kind, scale.offset is None, arrays


def certify_blocks(task, X_blocks, key):
    """CERTIFY each block of ``X_blocks`` through one stream of full passes.

    Parameters
    ----------
    task : SmoothingTask
    X_blocks : iterable of ndarray of shape (m_b, n_features)
    key : int
        The call's noise key.

    Yields
    ------
    BlockResult
        One per block, in order: the certificates
        :meth:`~smoothlearn.certify.SmoothingTask.certify` gives the block.
    """
    return _Stream(task, X_blocks, key).run()


class _Stream:
    def __init__(self, task, X_blocks, key):
        self.task, self.key = task, key
        self.todo = iter(X_blocks)
        self.exhausted = False
        self.live = []
        self.banks = {}
        # the first layer's response to windows the stream comes back to
        self.windows = banks.Kept(KEPT_BANK_BYTES)
        self.size = task.network.batch_size_for(task.batch_size)
        self.pinned = task.grid is not None
        self.fill_ahead = FILL_AHEAD
        if FILL_AHEAD is None:
            self.fill_ahead = task.network.device.type != "cpu"
        if task.radius is not None:
            self.looks, self.levels = bounds.sequential_looks(
                task.n, task.alpha, task._pinned()
            )

    def bank(self, which, n_features):
        if which not in self.banks:
            self.banks[which] = self.task.bank(
                self.key, which, n_features, keep_bytes=KEPT_BANK_BYTES
            )
        return self.banks[which]

    def run(self):
        while True:
            while not self.exhausted and not self._full_pass_waits():
                self._admit()
            # whole passes while any wait; a short one only when nothing is
            # left to admit and no bank has a full pass of pending rows
            if not self._round(short=False) and not self._round(short=True):
                break
            while self.live and (self.live[0].phase == DECIDED).all():
                yield self._finish(self.live.pop(0))
        if self.live:
            raise RuntimeError("the stream ended with inputs left undecided")

    def _admit(self):
        X = next(self.todo, None)
        if X is None:
            self.exhausted = True
            return
        block = _Block(self.task, X, self.key)
        self.live.append(block)
        self._advance(block)

    def _streams(self):
        """Pending work, by bank and scale form: ``{(bank, form): [(block,
        rows, lengths), ...]}`` in input order."""
        streams = {}
        for block in self.live:
            for phase, which in (
                (SELECTING, banks.SELECTION),
                (ESTIMATING, banks.ESTIMATION),
            ):
                rows, lengths = block.pending(phase)
                if len(rows):
                    streams.setdefault((which, block.form), []).append(
                        (block, rows, lengths)
                    )
        return streams

    def _full_pass_waits(self):
        for (which, _), parts in self._streams().items():
            if self.pinned and which == banks.ESTIMATION:
                return True  # pinned passes are whole windows of one input
            if sum(int(lengths.sum()) for _, _, lengths in parts) >= self.size:
                return True
        return False

    def _round(self, short):
        """Count one round: of each stream, the prefix of its pending rows that
        fills whole passes, or with ``short`` all of the first stream that has
        any (selection first: deciding it adds estimation rows). Pinned
        estimation ranges are counted whole either way. Returns whether
        anything was counted."""
        counted = False
        start = time.perf_counter()
        rows_by_block = {}
        for (which, _), parts in sorted(self._streams().items(), key=_bank_first):
            total = sum(int(lengths.sum()) for _, _, lengths in parts)
            pinned = self.pinned and which == banks.ESTIMATION
            take = total if (short or pinned) else total // self.size * self.size
            if take == 0:
                continue
            ahead = []
            if short and which == banks.ESTIMATION and not pinned:
                ahead = self._ahead(parts, -total % self.size)
            self._count(which, parts, take, ahead, rows_by_block)
            counted = True
            if short:
                break
        if counted:
            seconds = time.perf_counter() - start
            total = sum(rows_by_block.values())
            for block, rows in rows_by_block.items():
                block.seconds += seconds * rows / total
            for block in self.live:
                self._advance(block)
        return counted

    def _ahead(self, parts, free):
        """Up to ``free`` rows past the current look of the sequential
        decision's inputs in ``parts`` (in input order, at most to each one's
        next look): parts that fill a pass that would run short, counted
        aside (:attr:`_Block.ahead`) and used only if the input goes on."""
        if self.task.radius is None or free == 0 or not self.fill_ahead:
            return []
        out = []
        for block, rows, _ in parts:
            going = rows[block.look[rows] < len(self.looks) - 1]
            room = self.looks[block.look[going] + 1] - block.target[going]
            before = np.concatenate([[0], np.cumsum(room)[:-1]])
            n = np.minimum(room, np.maximum(free - before, 0))
            keep = n > 0
            if keep.any():
                out.append((block, going[keep], n[keep]))
                free -= int(n[keep].sum())
            if free == 0:
                break
        return out

    def _count(self, which, parts, take, ahead, rows_by_block):
        """Count the first ``take`` pending rows of ``parts``, and the rows
        ``ahead`` (:meth:`_ahead`), in one count."""
        chosen = []
        left = take
        for block, rows, lengths in parts:
            if left == 0:
                break
            before = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            n = np.minimum(lengths, np.maximum(left - before, 0))
            keep = n > 0
            chosen.append((block, rows[keep], n[keep], block.done[rows[keep]], False))
            left -= int(n.sum())
        for block, rows, n in ahead:
            chosen.append((block, rows, n, block.target[rows], True))
        X = np.concatenate([b.X[r] for b, r, *_ in chosen])
        run = [b.run[r] for b, r, *_ in chosen]
        run = run[0] if len(run) == 1 else Scale.concatenate(run)
        first = np.concatenate([f for *_, f, _ in chosen])
        n_draws = np.concatenate([n for _, _, n, *_ in chosen])
        bank = self.bank(which, X.shape[1])
        counts = self.task.count(
            X, run, bank, n_draws, first_row=first, windows=self.windows
        )
        at = 0
        for block, rows, n, _, is_ahead in chosen:
            part = counts[at : at + len(rows)]
            at += len(rows)
            rows_by_block[block] = rows_by_block.get(block, 0) + int(n.sum())
            if is_ahead:
                block.ahead_k[rows] += part[np.arange(len(rows)), block.top[rows]]
                block.ahead[rows] += n
                continue
            if which == banks.SELECTION:
                block.selection[rows] += part
            else:
                block.k[rows] += part[np.arange(len(rows)), block.top[rows]]
            block.done[rows] += n

    def _advance(self, block):
        """Decide every input of ``block`` that reached its target."""
        task = self.task
        while True:
            ready = np.flatnonzero(
                (block.phase != DECIDED) & (block.done >= block.target)
            )
            if len(ready) == 0:
                return
            # the selected ones start their estimation (decided below only
            # if their first target is 0 rows, at the next pass of this loop)
            estimated = ready[block.phase[ready] == ESTIMATING]
            self._select(block, ready[block.phase[ready] == SELECTING])
            if len(estimated) == 0:
                continue
            k, n = block.k[estimated], block.done[estimated]
            if task.radius is None:
                block.p_lower[estimated] = bounds.clopper_pearson_lower(
                    k, n, task.alpha
                )
                block.n_draws[estimated] = n
                block.phase[estimated] = DECIDED
                continue
            look = block.look[estimated]
            stop, lower = bounds.sequential_stop(
                k,
                n,
                self.levels[look],
                block.needed[estimated],
                look == len(self.looks) - 1,
            )
            decided = estimated[stop]
            block.p_lower[decided] = lower[stop]
            block.n_draws[decided] = n[stop]
            block.phase[decided] = DECIDED
            going = estimated[~stop]
            block.look[going] += 1
            block.target[going] = self.looks[block.look[going]]
            # rows counted ahead are the next look's first ones: kept if the
            # input goes on, dropped if it stopped (they decided nothing)
            block.done[going] += block.ahead[going]
            block.k[going] += block.ahead_k[going]
            block.ahead[estimated] = 0
            block.ahead_k[estimated] = 0

    def _select(self, block, rows):
        """The selected class of ``rows`` and their first estimation target."""
        task = self.task
        if len(rows) == 0:
            return
        block.top[rows] = np.argmax(block.selection[rows], axis=1)
        block.phase[rows] = ESTIMATING
        block.done[rows] = 0
        if task.radius is not None:
            block.target[rows] = self.looks[0]
        elif task.radius_tolerance is not None:
            pilot = block.selection[rows, block.top[rows]]
            block.target[rows] = task.planned_sizes(pilot)
        else:
            block.target[rows] = task.n

    def _finish(self, block):
        return self.task.block_result(
            block.X,
            block.top,
            block.p_lower,
            block.n_draws,
            block.recorded,
            block.seconds,
        )


def _bank_first(item):
    (which, _), _ = item
    return which
