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

Banks are drawn on the device that certifies (:class:`ChunkBits`): on the CPU
from numpy's PCG64, elsewhere from that device's own generator, so a chunk is
a pure function of ``(key, bank, chunk index)`` on one kind of device (a CPU
and a GPU give different, equally valid draws). The family maps the bits to
noise with exact tails (:meth:`~smoothlearn.noise.NoiseFamily.bank_sample`).
"""

from collections import OrderedDict

import numpy as np
import torch

__all__ = [
    "CHUNK_ROWS",
    "ChunkBits",
    "ESTIMATION",
    "NoiseBank",
    "OPTIMISATION",
    "SELECTION",
    "bank_key",
]

#: Rows per generated chunk of a noise bank. Part of the draws' definition:
#: changing it changes which numbers a seed gives.
CHUNK_ROWS = 1024

#: The banks of one call.
SELECTION, ESTIMATION, OPTIMISATION = 0, 1, 2


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


class ChunkBits:
    """The random bits of one chunk, on the device that certifies.

    On the CPU, numpy's PCG64 (its raw words cost two thirds of torch's CPU
    generator's); on any other device, that device's torch generator. Either
    is seeded by the chunk's seed sequence alone.

    Parameters
    ----------
    seed : numpy.random.SeedSequence
    device : torch.device
    workspace : dict, default=None
        Scratch tensors kept across chunks (the bank's): fresh memory for each
        chunk's temporaries costs page faults.
    """

    def __init__(self, seed, device, workspace=None):
        self.device = torch.device(device)
        self.workspace = {} if workspace is None else workspace
        if self.device.type == "cpu":
            self._numpy = np.random.PCG64(seed)
        else:
            state = int(seed.generate_state(1, np.uint64)[0])
            self._torch = torch.Generator(device=self.device).manual_seed(state)

    def words(self, n):
        """``n`` signed 64-bit words of uniform random bits (int64)."""
        if self.device.type == "cpu":
            return torch.from_numpy(self._numpy.random_raw(n).view(np.int64))
        high, low = (
            torch.empty(n, dtype=torch.int64, device=self.device).random_(
                generator=self._torch
            )
            for _ in range(2)
        )
        # random_() gives 63 bits: a 64th from the second draw
        return (high << 1) | (low & 1)

    def scratch(self, name, n, dtype):
        """A kept tensor of ``n`` values for a family's temporaries (its
        contents are whatever the last chunk left)."""
        buffer = self.workspace.get(name)
        if buffer is None or buffer.dtype != dtype or len(buffer) < n:
            buffer = torch.empty(n, dtype=dtype, device=self.device)
            self.workspace[name] = buffer
        return buffer[:n]

    def uniform53(self, n):
        """``n`` float64 uniforms on ``(0, 1]``, of 53 random bits each."""
        if self.device.type == "cpu":
            k = self._numpy.random_raw(n) >> np.uint64(11)
            return torch.from_numpy((k + 1).astype(np.float64) * 2.0**-53)
        u = torch.rand(
            n, dtype=torch.float64, device=self.device, generator=self._torch
        )
        return 1.0 - u


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
    device : str or torch.device, default='cpu'
        Where the rows are drawn and held: the device that certifies.
    keep_bytes : int, default=0
        Keep the chunks drawn last, up to this many bytes, for counts that
        come back to the same rows (the stream of
        :func:`~smoothlearn.passes.certify_blocks`); the last chunk is always
        kept. A chunk is ``CHUNK_ROWS * n_features`` float32 values.
    """

    def __init__(self, key, bank, family, n_features, device="cpu", keep_bytes=0):
        self.key = key
        self.bank = bank
        self.family = family
        self.n_features = n_features
        self.device = torch.device(device)
        self._kept = Kept(keep_bytes)
        self._workspace = {}

    def chunk(self, j):
        """Chunk ``j``: rows ``[j * CHUNK_ROWS, (j + 1) * CHUNK_ROWS)``."""
        return self._kept.get(j, lambda: self._draw(j))

    def _draw(self, j):
        seed = np.random.SeedSequence(self.key, spawn_key=(self.bank, j))
        bits = ChunkBits(seed, self.device, self._workspace)
        z = self.family.bank_sample(CHUNK_ROWS * self.n_features, bits)
        return z.view(CHUNK_ROWS, self.n_features)

    def rows(self, start, stop):
        """Rows ``[start, stop)`` as a float32 tensor on the bank's device."""
        first, last = start // CHUNK_ROWS, (stop - 1) // CHUNK_ROWS
        # each chunk's part is cut before joining: a window straddling two
        # chunks copies its own rows, not both chunks whole
        parts = [
            self.chunk(j)[
                max(start - j * CHUNK_ROWS, 0) : min(stop - j * CHUNK_ROWS, CHUNK_ROWS)
            ]
            for j in range(first, last + 1)
        ]
        return parts[0] if len(parts) == 1 else torch.cat(parts)


class Kept:
    """Tensors kept by key, the least recently used dropped past ``max_bytes``
    (the last one always kept): a bank's chunks, a stream's first-layer
    responses to windows of them."""

    def __init__(self, max_bytes):
        self.max_bytes = max_bytes
        self._items = OrderedDict()
        self._bytes = 0

    def __len__(self):
        return len(self._items)

    def __contains__(self, key):
        return key in self._items

    def get(self, key, make):
        """The tensor kept under ``key``, or ``make()``'s, kept."""
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        value = make()
        self._items[key] = value
        self._bytes += _nbytes(value)
        while len(self._items) > 1 and self._bytes > self.max_bytes:
            _, dropped = self._items.popitem(last=False)
            self._bytes -= _nbytes(dropped)
        return value


def _nbytes(value):
    if value is None:
        return 0
    if isinstance(value, tuple):
        return sum(_nbytes(v) for v in value)
    return value.element_size() * value.nelement()
