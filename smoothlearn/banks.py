"""Noise banks: the standard-form draws one call shares among its inputs.

One call draws its standard noise once, as banks shared by every input of the
call: bank 0 holds selection draws, bank 1 estimation draws, bank 2
optimisation draws (for strategies that choose a scale per input). Row ``r``
of bank ``b`` lies in chunk ``r // CHUNK_ROWS``, and a chunk is a pure function
of ``(key, b, chunk index)``: the same key gives the same draws whatever the
batch size, the other inputs of the call, their order, or the worker that
computes them.

Why a shared bank keeps every certificate's guarantee: the draws are
independent of the inputs (the key is fixed before the inputs are seen), so
for each input ``x`` the estimation count is Binomial(n, p_x) and its
Clopper-Pearson bound holds with probability ``1 - alpha``, exactly as with
noise drawn for ``x`` alone. Inputs share draws, so their failures are not
independent of each other; a guarantee per certificate never needed that.
What the guarantee does need is that the inputs do not depend on the draws:
with a published fixed ``random_state`` whoever chooses the inputs can search
for inputs whose draws are lucky. Where inputs may be chosen adversarially,
leave ``random_state=None`` (fresh OS entropy per call) or keep the seed secret.
"""

import numpy as np
import torch

__all__ = [
    "CHUNK_ROWS",
    "DRAW_VALUES",
    "ESTIMATION",
    "NoiseBank",
    "OPTIMISATION",
    "SELECTION",
    "bank_key",
    "draw_rows",
]

#: Rows per generated chunk of a noise bank. Part of the draws' definition:
#: changing it changes which numbers a seed gives.
CHUNK_ROWS = 1024

#: Float64 values drawn at once inside a chunk (about 0.5 MB): bounds the
#: float64 temporaries without paying per-call overhead on small inputs. Part
#: of the draws' definition, with CHUNK_ROWS.
DRAW_VALUES = 65_536

#: The banks of one call.
SELECTION, ESTIMATION, OPTIMISATION = 0, 1, 2


def draw_rows(n_features):
    """Rows of a chunk drawn in float64 at once for inputs of ``n_features``."""
    return max(1, min(CHUNK_ROWS, DRAW_VALUES // n_features))


def bank_key(random_state):
    """The key of one call's noise banks.

    ``None`` gives fresh OS entropy; an int always gives the same key; a
    :class:`numpy.random.RandomState` or :class:`numpy.random.Generator` gives
    the next key of its stream.
    """
    if random_state is None:
        return int(np.random.SeedSequence().entropy)
    if isinstance(random_state, (int, np.integer)):
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**63 - 1, dtype=np.int64))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    raise ValueError(
        f"random_state must be None, an int or a RandomState; got {random_state!r}"
    )


class NoiseBank:
    """Standard-form noise rows of one bank, generated chunk by chunk.

    Parameters
    ----------
    key : int
        The call's key (see :func:`bank_key`).
    bank : int
        Which bank: 0 selection, 1 estimation, 2 optimisation.
    family : NoiseFamily
        The family whose standard form is drawn.
    n_features : int
        Columns of each row.
    """

    def __init__(self, key, bank, family, n_features):
        self.key = key
        self.bank = bank
        self.family = family
        self.n_features = n_features
        self._cached = (None, None)

    def chunk(self, j):
        """Chunk ``j``: rows ``[j * CHUNK_ROWS, (j + 1) * CHUNK_ROWS)``, on the CPU."""
        if self._cached[0] == j:
            return self._cached[1]
        seed = np.random.SeedSequence(self.key, spawn_key=(self.bank, j))
        gen = torch.Generator().manual_seed(int(seed.generate_state(1, np.uint64)[0]))
        # drawn in float64 (53-bit uniforms, tails exact far beyond where
        # float32 samplers stop) and rounded once to the network's float32,
        # a few rows at a time so that the float64 temporaries stay small
        z = torch.empty((CHUNK_ROWS, self.n_features), dtype=torch.float32)
        step = draw_rows(self.n_features)
        for start in range(0, CHUNK_ROWS, step):
            rows = min(step, CHUNK_ROWS - start)
            z[start : start + rows] = self.family.sample(
                (rows, self.n_features), generator=gen, dtype=torch.float64
            )
        self._cached = (j, z)
        return z

    def rows(self, start, stop):
        """Rows ``[start, stop)`` as a float32 CPU tensor."""
        first, last = start // CHUNK_ROWS, (stop - 1) // CHUNK_ROWS
        parts = [self.chunk(j) for j in range(first, last + 1)]
        z = parts[0] if len(parts) == 1 else torch.cat(parts)
        offset = first * CHUNK_ROWS
        return z[start - offset : stop - offset]
