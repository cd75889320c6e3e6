"""The counting kernel: the base network's votes on ``x + S z`` over a bank's rows.

Every count the library makes (selection, estimation, a sequential decision's
looks, a strategy comparing candidate smoothings) goes through
:func:`count_classes`: one loop over windows of a noise bank, with

* a pluggable scale: the :class:`~smoothlearn.scale.Scale` perturbs the noise
  centres (:meth:`~smoothlearn.scale.Scale.perturb`), whatever its form;
* a pluggable response: the plain forward pass of every noisy input, or, when
  the network starts with a linear map and the scale's rows share structure
  (:meth:`~smoothlearn.scale.Scale.shared_parts`), the fused first layer kept
  inside :class:`~smoothlearn.first_layer.FirstLinear`, which reuses the
  map's response to each window for every input.

Memory: a call holds one chunk of a bank and one window of it
(``CHUNK_ROWS + min(n, batch_size)`` rows of ``n_features`` float32) plus one
forward batch (at most ``max(batch_size, min(n, batch_size))`` noisy inputs,
their activations and logits), whatever ``n`` and however many inputs are
counted.
"""

import numpy as np
import torch

from .denoisers import noise_levels
from .scale import Scale

__all__ = ["count_classes"]


class _PlainResponse:
    """Class scores of the whole network on every noisy input; with
    ``levels``, each input's noise level goes with its noisy copies (a
    denoiser in front that must know how much noise to remove)."""

    def __init__(self, network, centres, scale, levels=None):
        self.network, self.centres, self.scale = network, centres, scale
        self.levels = levels
        # every window takes the same slices of inputs: each slice's Scale is
        # built once, not once per forward pass
        self._rows = {}

    def window(self, z):
        return None

    def scores(self, i0, i1, z, shared):
        rows = self._rows.get((i0, i1))
        if rows is None:
            rows = self._rows[i0, i1] = self.scale[i0:i1]
        noisy = rows.perturb(self.centres[i0:i1], z)
        level = None
        if self.levels is not None:  # input-major, as the noisy copies
            level = self.levels[i0:i1].repeat_interleave(z.shape[0])
        return self.network.logits(
            noisy.reshape(-1, self.network.n_features), noise_level=level
        )


def count_classes(
    network,
    X,
    scale,
    bank,
    n_draws,
    *,
    batch_size,
    first_row=0,
    progress=None,
    grid=None,
):
    """Count the base network's predictions on ``x_i + S_i z`` over a bank's rows.

    Processing is chunk-major: one window of the bank (``min(n_draws,
    batch_size)`` rows) serves every input before the next window is drawn,
    so each draw is generated once per call; each forward pass carries
    ``batch_size // window`` inputs (at least one) times the window's rows.

    Parameters
    ----------
    network : FlatInputNetwork
    X : ndarray of shape (m, n_features)
        Flat inputs.
    scale : Scale
        The scale of each input, run in float32; its offset, if any, moves
        each input's noise centre to ``x + offset``.
    bank : NoiseBank
    n_draws : int
        Rows of the bank to use: ``n_draws`` rows from ``first_row``.
    batch_size : int
        Noisy inputs per forward pass.
    first_row : int, default=0
        The first row of the bank used: a later call from ``first_row = a``
        extends counts of rows ``[0, a)`` without repeating them.
    progress : callable, default=None
        ``progress(n_inputs, n_draws)`` after each forward pass: that many
        inputs counted that many more draws each
        (:func:`~smoothlearn.blocks.report_draws`).
    grid : smoothlearn.grid.Grid, default=None
        Count on the grid instead (:func:`_count_on_grid`): ``bank`` then
        holds raw 64-bit words and ``scale`` the values the tables are for.

    Returns
    -------
    counts : ndarray of int64, shape (m, n_classes)
    """
    if not isinstance(scale, Scale):
        raise TypeError(
            f"count_classes takes a smoothlearn.scale.Scale; got {type(scale).__name__}"
        )
    m = len(X)
    device, K = network.device, network.n_classes
    counts = torch.zeros((m, K), dtype=torch.int64, device=device)
    if m == 0 or n_draws == 0:
        return counts.cpu().numpy()
    if grid is not None:
        _count_on_grid(
            network,
            X,
            scale,
            bank,
            n_draws,
            counts,
            batch_size,
            first_row,
            grid,
            progress,
        )
        return counts.cpu().numpy()
    if scale.kind == "diagonal" and scale.shared_parts() is None:
        # per-input diagonals share no structure, but a row whose values are
        # all equal is isotropic (a strategy kept its isotropic start): those
        # rows take the isotropic path, with first-layer reuse where it exists
        flat = scale.isotropic_rows()
        if flat.any() and network.first_linear is not None:
            out = np.empty((m, K), dtype=np.int64)
            for rows, part in ((flat, _isotropic), (~flat, None)):
                if rows.any():
                    out[rows] = count_classes(
                        network,
                        X[rows],
                        scale[rows] if part is None else part(scale[rows]),
                        bank,
                        n_draws,
                        batch_size=batch_size,
                        first_row=first_row,
                        progress=progress,
                    )
            return out
    batch_size = network.batch_size_for(batch_size)
    window = min(n_draws, batch_size)
    group = max(1, batch_size // window)
    levels = None
    if network.noise_level_rule is not None:
        levels = torch.as_tensor(
            noise_levels(scale, network.n_features, network.noise_level_rule),
            device=device,
        )
    if scale.offset is not None:  # UCAN's mean offset moves the noise's centre
        X = X + np.asarray(scale.offset, dtype=np.float32)
    centres = network.inputs(X)
    scale = scale.map(
        lambda a: torch.as_tensor(np.asarray(a, dtype=np.float32), device=device),
        offset=False,
    )
    parts = scale.shared_parts()
    first = network.first_linear if parts is not None and levels is None else None
    network.module.eval()
    with torch.inference_mode():
        if first is None:
            response = _PlainResponse(network, centres, scale, levels)
        else:
            response = first.fused_response(centres, parts)
        stop = first_row + n_draws
        for start in range(first_row, stop, window):
            z = bank.rows(start, min(start + window, stop)).to(device)
            shared = response.window(z)
            for i0 in range(0, m, group):
                i1 = min(i0 + group, m)
                pred = _top_class(response.scores(i0, i1, z, shared))
                _add_votes(counts, i0, i1, pred, z.shape[0], K)
                if progress is not None:
                    progress(i1 - i0, z.shape[0])
    return counts.cpu().numpy()


def _count_on_grid(
    network, X, scale, bank, n_draws, counts, batch_size, first, grid, progress
):
    """:func:`count_classes` on the grid (:mod:`smoothlearn.grid`), into ``counts``.

    Each input's noisy inputs are ``j + k`` in integers, ``k`` drawn from the
    bank's words by the input's rounded tables; the network sees
    :meth:`~smoothlearn.grid.Grid.inputs` of them and nothing else (no
    first-layer reuse: ``L x + L (S z)`` is not a function of the sum).
    Inputs with the same scale share each window's ``k``. The integers are
    held as float32, exact below ``2^24`` (checked), so ``j + k`` is the
    integer sum and ``fl32(j + k) * fl32(h)`` one rounding of it, as
    :meth:`~smoothlearn.grid.Grid.inputs` computes.
    """
    from .grid import RowSampler, TableSet

    if scale.kind == "rotated" or scale.offset is not None:
        raise ValueError(
            "on the grid, scales are isotropic or diagonal and carry no offset"
        )
    device, K = network.device, network.n_classes
    m, d = X.shape
    j = grid.indices(X)
    per = np.asarray(scale.per_coordinate(d), dtype=np.float64)
    family = bank.family.rounded
    tables = TableSet(family, np.unique(per), grid.step, device)
    samplers = {}
    row_keys = []
    for row in per:
        key = row.tobytes()
        if key not in samplers:
            samplers[key] = RowSampler(family, row, grid.step, device, tables)
        row_keys.append(key)
    reach = max(s.reach for s in samplers.values())
    if np.abs(j).max() + reach >= 2**24:
        raise ValueError(
            "on the grid, |x / step| plus the noise's reach must stay below 2^24"
        )
    j = torch.as_tensor(j.astype(np.float32), device=device)
    levels = None
    if network.noise_level_rule is not None:  # a denoiser told each input's level
        levels = torch.as_tensor(noise_levels(scale, d, network.noise_level_rule))
        levels = levels.to(device)
    batch_size = network.batch_size_for(batch_size)
    window = min(n_draws, batch_size)
    group = max(1, batch_size // window)
    network.module.eval()
    with torch.inference_mode():
        stop = first + n_draws
        for start in range(first, stop, window):
            words = bank.rows(start, min(start + window, stop)).to(device)
            drawn = {}  # one k per distinct scale and window
            for i0 in range(0, m, group):
                i1 = min(i0 + group, m)
                ks = []
                for key in row_keys[i0:i1]:
                    if key not in drawn:
                        drawn[key] = samplers[key].sample(words)
                    ks.append(drawn[key])
                k = ks[0][None] if len(ks) == 1 else torch.stack(ks)
                noisy = grid.inputs(torch.add(j[i0:i1, None], k))
                level = None
                if levels is not None:  # input-major, as the noisy copies
                    level = levels[i0:i1].repeat_interleave(words.shape[0])
                scores = network.logits(noisy.reshape(-1, d), noise_level=level)
                _add_votes(counts, i0, i1, _top_class(scores), words.shape[0], K)
                if progress is not None:
                    progress(i1 - i0, words.shape[0])


def _isotropic(scale):
    """A diagonal scale whose rows are each constant, as the isotropic scale it is."""
    return Scale(np.asarray(scale.values)[:, 0], offset=scale.offset)


def _top_class(scores):
    """Each row's top class: argmax's, the first of tied (or NaN) scores.

    On the CPU ``max(dim=1).indices`` gives the same indices in half
    ``argmax``'s time when there are few classes (12 against 26 us for 1000
    rows of 10 scores, a tenth of a small MLP's forward pass); elsewhere
    ``argmax``.
    """
    if scores.device.type == "cpu":
        return scores.max(dim=1).indices
    return scores.argmax(dim=1)


def _add_votes(counts, i0, i1, pred, w, K):
    """Add the predictions of inputs ``i0:i1`` (``w`` draws each, input-major).

    ``index_add_`` rather than ``bincount``: on a GPU, ``bincount`` reads its
    input's range back to the host to size its output, a round-trip per
    forward batch; ``index_add_`` writes into the counts' fixed shape and
    stays on the device (on a CPU both cost the same).
    """
    index = pred
    if i1 - i0 > 1:
        index = pred + K * torch.arange(i1 - i0, device=pred.device).repeat_interleave(
            w
        )
    counts[i0:i1].view(-1).index_add_(0, index, torch.ones_like(pred))
