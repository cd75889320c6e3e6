"""The grid's gaussian draws by arithmetic, decided with proved margins.

:class:`~smoothlearn.grid.RowSampler` finds each coordinate's ``k`` by a
gather from its table's guide: a row of ANCER's per-coordinate scales reads
784 guides of up to 128 KiB each per window, about 5 ms per 1,000 noisy
images, most of it cache misses and the exact steps of busy buckets. This
module finds the same ``k`` (the same function of the word: the draws, hence
the certificates, do not change) by arithmetic that every row shares.

Per window, once for all rows (:class:`QuantileBounds`): each word ``U``
(``u = U + 2^63`` unsigned) gets an interval ``[lo, hi]`` (float32) holding
``Psi(u - 1)`` and ``Psi(u + 2)``, ``Psi(v) = Phi^-1(v / 2^64)``. It comes from
the knot table, the :class:`~smoothlearn.grid.RoundedTable` of ``rho* =
KNOT_RHO``: its exact draw ``c`` (the guide sampler) says ``A = T*_(c-1) <= u <
B = T*_c``, and the chord ``L(u) = (c - 1/2 + (u - A) / (B - A)) / rho*``
through the knots ``(A, (c - 1/2) / rho*)`` and ``(B, (c + 1/2) / rho*)``
is within ``E_c`` of ``Psi`` on ``[A - 1, B + 1]``:

* the chord through the exact points ``(2^64 Phi(s), s)`` misses ``Psi``
  (convex for ``z > 0``, ``Psi'' = z / (2^128 phi(z)^2)``) by at most
  ``W^2 / 8 max Psi''`` with ``W <= 2^64 phi_max / rho*``: at most ``1.02
  Z_c / (8 rho*^2)``, ``Z_c = (|c| + 1/2) / rho* + 0.001`` bounding ``|z|``
  on the cell (``(phi_max / phi_min)^2 <= exp(2 Z_c / rho*) < 1.012``: the
  factor 1.02 has 2% to spare, checked to 0.980 of it);
* a knot is off its exact point by at most ``1 + 2^-26`` in ``u`` (a
  threshold is the floor of a value within ``2^-90`` of ``2^64 Phi``), which
  with the shifts ``u - 1``, ``u + 2`` and the chord's slope moves ``L`` by at
  most ``16 / (2^64 phi(Z_c + 1 / rho*))``: below ``1.5e-10`` wherever
  ``|c| <= KNOT_Z rho* - 1/2``; other cells (and the knot table's two ends)
  are left to the exact search;
* float64 arithmetic adds under ``2^-48``.

Per row (:meth:`QuantileBounds.sample`), with ``j`` the input's integer
vector: ``y_lo = fl32(fl32(r * lo) + c_lo)``, ``c_lo`` the float32 at or
below ``j + 1/2 - 2^-22 (|j| + 1)``, ``y_hi`` likewise from ``hi`` and ``c_hi``
at or above ``j + 1/2 + 2^-22 (|j| + 1)``, ``r = fl32(rho_t) / rho*`` (``rho_t =
s / h`` of the coordinate's table; ``lo``, ``hi`` are in cells, ``rho*`` times
the quantile). Where ``floor(y_lo) = floor(y_hi)``, that is ``j + k``: the
thresholds give ``k >= floor(rho_t Psi(u - 1) + 1/2)`` (a word at or past
``2^64 Phi(tau_i) + 1`` is past ``T_i``) and ``k <= floor(rho_t Psi(u + 2) +
1/2)`` (a word at or below ``2^64 Phi(tau_i) - 2`` is below it), and ``y_lo``,
``y_hi`` bound ``j`` plus those from below and above: ``lo`` and ``hi`` carry,
besides ``E_c``, a relative ``2^-21`` of themselves, which covers float32's
roundings of ``r``, of the product and of the sum's part in ``|r lo|`` (``2^-24``
relative each) and ``lo``'s own rounding to float32; ``2^-22 (|j| + 1)`` covers
the sum's rounding of ``j + 1/2``. Elsewhere (about ``2^-20 |y|`` of the words,
and every word beyond ``KNOT_Z``) the coordinate's exact search decides.
A row takes this path only where every
table's ``K`` holds every ``m`` this can give (:func:`bounded_row`).
"""

import numpy as np
import torch

from .grid import RowSampler, rounded_table

__all__ = ["KNOT_RHO", "KNOT_Z", "QuantileBounds", "bounded_row"]

#: The knot table's ``rho*`` (a power of two: ``L``'s division is exact).
KNOT_RHO = 1024

#: The knot table's guide has ``2^KNOT_GUIDE_BITS`` buckets (2 MiB): finer
#: than the guides of :mod:`smoothlearn.grid`, since every row shares it
#: (0.7% of words need a compare, against 9% at 2^16).
KNOT_GUIDE_BITS = 20

#: Cells whose knots lie within ``|s| <= KNOT_Z`` are decided by arithmetic.
KNOT_Z = 6.0

#: The relative slack of ``lo`` and ``hi`` for float32's roundings; the sum's
#: rounding of ``j + 1/2`` takes ``CENTRE_SLACK (|j| + 1)``.
RELATIVE_SLACK = 2.0**-21
CENTRE_SLACK = -22  # as a power of two

#: ``16 / (2^64 phi(KNOT_Z + 0.002))``, rounded up: a knot's offset, the
#: ``u - 1`` and ``u + 2`` shifts (scipy's ``norm.pdf(6.002)`` is 6.0034e-9).
KNOT_FUZZ = 1.5e-10


def _cell_margins(K, cells):
    """Per knot cell, indexed by ``c + K``: ``E_c`` plus the relative slack of
    ``|q| <= |c| + 1/2``, plus the float64 roundings, in cell units (``q = rho*
    L``); infinite for cells beyond ``cells`` (left to the exact search)."""
    c = np.abs(np.arange(2 * K + 1, dtype=np.float64) - K)
    delta = 1.0 / KNOT_RHO
    chord = 1.02 * delta**2 / 8 * ((c + 0.5) * delta + 0.001)
    margin = (chord + KNOT_FUZZ + 2.0**-40) * KNOT_RHO + RELATIVE_SLACK * (c + 1)
    # the relative slack on the margin too; 1% for the float64 arithmetic
    margin *= (1 + RELATIVE_SLACK) * 1.01
    margin[c > cells] = np.inf
    return margin


def bounded_row(family, tables, largest=0):
    """Whether a row whose coordinates draw from ``tables`` may take the
    arithmetic path, for inputs with ``|j| <= largest``: a gaussian's, and
    every table's ``K`` at least every ``floor(y) - j`` a word of an eligible
    cell gives (else the count of thresholds, which stops at ``K``, and the
    arithmetic could differ), ``|y|`` far below ``2^24``."""
    if family.name != "gaussian":
        return False
    spare = 2.0**-21 * (largest + 1) + 2.0**-19
    for table in tables:
        rho = table.scale / table.step
        reach = rho * (KNOT_Z + 2.0 / KNOT_RHO) * (1 + 2**-19) + 0.5 + spare
        if not (reach < table.half_width + 1 and reach < 2**22):
            return False
        # j + k and y exactly representable in float32 (an independent check
        # found j = 2^24 - 1 accepted before, where they are not)
        if not largest + reach + 1 < 2**22:
            return False
    return True


class QuantileBounds:
    """Each word's quantile interval ``[lo, hi]`` for a window (shared by its
    rows), and each row's ``k`` from it (module docstring).

    Parameters
    ----------
    family : NoiseFamily
        The gaussian (the knots are its quantiles).
    n_features : int
    """

    def __init__(self, family, n_features):
        self.knots = RowSampler(
            family, np.full(n_features, float(KNOT_RHO)), 1.0, "cpu"
        )
        table = rounded_table(family, float(KNOT_RHO), 1.0)
        self.thresholds = table.thresholds
        self.half_width = table.half_width
        # per knot cell c, at c + K: T*_(c-1), 1 / (T*_c - T*_(c-1)), and
        # c - 1/2 -+ its margin (infinite beyond the eligible cells |c| <=
        # cells, whose knots lie within KNOT_Z, and at the two ends)
        K, T = self.half_width, self.thresholds
        self._guide = table.guide(KNOT_GUIDE_BITS)
        self._crowded = table.crowded(KNOT_GUIDE_BITS)
        self._previous = np.concatenate([T[:1], T])
        width = np.concatenate([T, T[-1:]]) - self._previous
        cells = int(KNOT_Z * KNOT_RHO - 0.5)
        margin = _cell_margins(K, cells)
        eligible = np.isfinite(margin)
        self._inverse = np.zeros(2 * K + 1)
        self._inverse[eligible] = 1.0 / width[eligible].astype(np.float64)
        centre = np.arange(-K, K + 1, dtype=np.float64) - 0.5
        self._low, self._high = centre - margin, centre + margin
        self._bounds = (None, None)
        self._scratch = {}

    def bounds(self, words):
        """``(lo, hi)`` in cell units (``rho*`` times the quantile), float32
        tensors shaped as ``words`` (int64, (w, d)); infinite or NaN where the
        arithmetic does not decide. Kept for the window: every row of it asks
        for the same words."""
        if self._bounds[0] is words:
            return self._bounds[1]
        c = self._knot_draws(words)
        shape = c.shape
        # the cell's tables at c + K (in range: the knot draws are -K .. K)
        at = np.add(c, self.half_width, out=self._buffer("at", shape, np.int64).numpy())
        u = words.numpy()
        # u - T*_(c-1): exact in int64 where the cell is eligible (a cell is
        # far narrower than 2^63); elsewhere the offsets are infinite
        below = np.take(
            self._previous,
            at,
            mode="clip",
            out=self._buffer("below", shape, np.int64).numpy(),
        )
        np.subtract(u, below, out=below)
        inverse = np.take(
            self._inverse,
            at,
            mode="clip",
            out=self._buffer("inverse", shape, np.float64).numpy(),
        )
        # the fraction (u - A) / (B - A) in four roundings; lo, hi = it plus
        # c - 1/2 -+ the margin (one rounding each, then float32's)
        fraction = np.multiply(below, inverse, out=inverse)
        lo = self._buffer("lo", shape, np.float32)
        hi = self._buffer("hi", shape, np.float32)
        offset = self._buffer("offset", shape, np.float64).numpy()
        with np.errstate(invalid="ignore"):
            np.take(self._low, at, mode="clip", out=offset)
            np.add(fraction, offset, out=lo.numpy(), casting="same_kind")
            np.take(self._high, at, mode="clip", out=offset)
            np.add(fraction, offset, out=hi.numpy(), casting="same_kind")
        self._bounds = (words, (lo, hi))
        return lo, hi

    def _knot_draws(self, words):
        """The knot table's exact draws ``c`` (int16, (w, d)): its guide of
        ``2^KNOT_GUIDE_BITS`` buckets read row-major (one table: no cache to
        keep by coordinate), flagged buckets settled by
        :meth:`~smoothlearn.grid.RowSampler._exact`."""
        bits = KNOT_GUIDE_BITS
        u = words.numpy()
        index = self._buffer("index", u.shape, np.int64).numpy()
        np.right_shift(u, 64 - bits, out=index)
        np.add(index, 2 ** (bits - 1), out=index)  # the words' top bits, signed
        guide = self._buffer("guide", u.shape, self._guide.dtype).numpy()
        np.take(self._guide, index, mode="clip", out=guide)
        flags = self._buffer("flags", u.shape, guide.dtype).numpy()
        np.bitwise_and(guide, 1, out=flags)
        unsure = np.flatnonzero(flags.view(np.bool_)) // guide.itemsize
        c = np.right_shift(guide, 1, out=guide)
        if len(unsure):
            flat = c.reshape(-1)
            flat[unsure] = self.knots._exact(
                u.reshape(-1)[unsure],
                flat[unsure],
                np.zeros(len(unsure), dtype=np.int64),  # every coordinate's table
                self._crowded.take(index.reshape(-1)[unsure]),
            )
        return c

    def sample(self, sampler, words, centre=None, out=None, rows=None):
        """``j + k`` (float32 integers, (w, d)) of the row ``sampler`` for the
        window's ``words`` (its rows ``rows = (a, b)`` only, if given), ``k``
        the same values as ``sampler.sample(words)`` and ``j`` the integer
        vector ``centre`` (a float32 tensor (d,); None: 0), written into
        ``out`` (by default a kept buffer the next call reuses)."""
        lo, hi = self.bounds(words)
        if rows is not None:
            lo, hi, words = (v[rows[0] : rows[1]] for v in (lo, hi, words))
        rho = self._rho(sampler)
        low, high = self._centres(centre)
        if out is None:
            out = self._buffer("out", lo.shape, np.float32)
        torch.addcmul(low, lo, rho, out=out).floor_()
        high = torch.addcmul(
            high, hi, rho, out=self._buffer("high", lo.shape, np.float32)
        )
        high.floor_()
        unsure = self._buffer("unsure", lo.shape, np.bool_).numpy()
        unsure = np.flatnonzero(np.not_equal(out.numpy(), high.numpy(), out=unsure))
        if len(unsure):
            at, cols = np.divmod(unsure, lo.shape[1])
            k = sampler.exact_count(words.numpy()[at, cols], cols)
            if centre is not None:
                k = k + centre.numpy()[cols]
            out.view(-1)[torch.from_numpy(unsure)] = torch.from_numpy(
                np.asarray(k, dtype=np.float32)
            )
        return out

    def _centres(self, centre):
        """``(j + 1/2 - e, j + 1/2 + e)`` rounded outward to float32, ``e =
        2^-22 (|j| + 1)``: what ``y_lo`` and ``y_hi`` add (module docstring)."""
        j = np.zeros(1) if centre is None else centre.numpy().astype(np.float64)
        slack = np.ldexp(
            np.abs(j) + 1, CENTRE_SLACK
        )  # exact: j is an integer below 2^24
        out = []
        for target, toward in ((j + 0.5 - slack, -np.inf), (j + 0.5 + slack, np.inf)):
            rounded = target.astype(np.float32)
            past = (rounded > target) if toward < 0 else (rounded < target)
            rounded[past] = np.nextafter(rounded[past], np.float32(toward))
            out.append(
                torch.from_numpy(rounded if centre is not None else rounded.reshape(()))
            )
        return out

    @staticmethod
    def _rho(sampler):
        """``fl32(rho_t)`` per coordinate, (1, d), kept by the row."""
        rho = getattr(sampler, "_rho32", None)
        if rho is None:
            values = np.array([t.scale / t.step for t in sampler.tables])
            # rho_t / rho* (an exact power-of-two scaling of fl32(rho_t))
            rho = values[sampler.which].astype(np.float32) / np.float32(KNOT_RHO)
            rho = torch.from_numpy(rho[None])
            sampler._rho32 = rho
        return rho

    def _buffer(self, name, shape, dtype):
        buffer = self._scratch.get(name)
        if buffer is None or tuple(buffer.shape) != tuple(shape):
            buffer = self._scratch[name] = torch.from_numpy(np.empty(shape, dtype))
        return buffer
