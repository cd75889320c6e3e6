"""The counting kernel: the base network's votes on ``x + S z`` over a bank's rows.

Every count the library makes (selection, estimation, a sequential decision's
looks, a strategy comparing candidate smoothings) goes through
:func:`count_classes`: one loop over windows of a noise bank, with

* a pluggable scale: the :class:`~smoothlearn.scale.Scale` perturbs the noise
  centres (:meth:`~smoothlearn.scale.Scale.perturb`), whatever its form;
* a pluggable response: the plain forward pass of every noisy input, the
  grid's integer noise (:mod:`smoothlearn.grid`), or, when the network starts
  with a linear map and the scale's rows share structure
  (:meth:`~smoothlearn.scale.Scale.shared_parts`), the fused first layer kept
  inside :class:`~smoothlearn.first_layer.FirstLinear`, which reuses the
  map's response to each window for every input;
* full forward passes (``pack=True``): the noisy inputs of a window are laid
  end to end, input after input, and cut into passes of exactly
  ``batch_size`` rows, an input's rows split across two passes where the cut
  falls inside them, so only a count's last pass runs short however many
  draws each input counts. Each input still sees its own bank rows, at the
  same row indices: packing changes which rows share a pass, never the draws.

Memory: a call holds one chunk of a bank and one window of it
(``CHUNK_ROWS + min(n, batch_size)`` rows of ``n_features`` float32) plus one
forward batch (at most ``batch_size`` noisy inputs, or first-layer responses
on the reuse path, written in place into one buffer; after a convolution
the pieces of a packed batch are joined, twice that while they are), its
activations and logits, whatever ``n`` and however many inputs are counted.
"""

import numpy as np
import torch

from .denoisers import noise_levels
from .scale import Scale

__all__ = ["count_classes"]

#: The fewest distinct scale rows for which the grid path draws by shared
#: quantile bounds (:mod:`smoothlearn._grid_quantiles`): a window's bounds
#: cost about two rows' guide gathers, each row then a sixth of one
#: (``benchmarks/bench_grid_sampler.py``); the same draws either way.
BOUNDED_MIN_ROWS = 4


class _PlainResponse:
    """Class scores of the whole network on every noisy input; with
    ``levels``, each input's noise level goes with its noisy copies (a
    denoiser in front that must know how much noise to remove).

    A response splits a forward pass in two so that passes can be packed:
    :meth:`inputs` forms what the network's (rest) takes for inputs ``i0:i1``
    and a window's rows, input-major; :meth:`forward` runs it on rows of any
    inputs, ``owners`` naming each row's input.
    """

    def __init__(self, network, centres, scale, levels=None):
        self.network, self.centres, self.scale = network, centres, scale
        self.levels = levels
        # every window takes the same slices of inputs: each slice's Scale is
        # built once, not once per forward pass
        self._rows = {}

    def window(self, z):
        return None

    def part(self, shared, a, b):
        """What :meth:`window` shares, for the window's rows ``[a, b)``."""
        return shared

    def batch(self, size):
        """An empty forward batch of ``size`` rows that :meth:`inputs` can
        write into (None: a batch's pieces are joined instead)."""
        return self.centres.new_empty((size, self.network.n_features))

    def inputs(self, i0, i1, z, shared, out=None):
        scale = self._rows.get((i0, i1))
        if scale is None:
            scale = self._rows[i0, i1] = self.scale[i0:i1]
        if out is None or scale.kind == "rotated":
            noisy = scale.perturb(self.centres[i0:i1], z)
            noisy = noisy.reshape(-1, self.network.n_features)
            return noisy if out is None else out.copy_(noisy)
        # Scale.perturb's sum, written straight into the forward batch
        return torch.addcmul(
            self.centres[i0:i1, None],
            scale.values.reshape(i1 - i0, 1, -1),
            z[None],
            out=out.view(i1 - i0, len(z), -1),
        ).view(out.shape)

    def forward(self, rows, owners):
        level = None if self.levels is None else self.levels[owners]
        return self.network.logits(rows, noise_level=level)


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
    pack=True,
    pinned=False,
    windows=None,
):
    """Count the base network's predictions on ``x_i + S_i z`` over a bank's rows.

    Processing is chunk-major: one window of the bank (at most
    ``batch_size`` rows) serves every input before the next window is drawn,
    so each draw is generated once per call. With ``pack``, every forward
    pass but the call's last carries exactly ``batch_size`` noisy inputs
    (``ceil(sum(n_draws) / batch_size)`` passes); without, each carries
    ``batch_size // window`` whole inputs (at least one) times the window's
    rows. Either way input ``i`` is counted on bank rows ``[first_row_i,
    first_row_i + n_draws_i)``; the counts differ only where the network's
    float results for a row depend on which rows share its pass.

    Parameters
    ----------
    network : FlatInputNetwork
    X : ndarray of shape (m, n_features)
        Flat inputs.
    scale : Scale
        The scale of each input, run in float32; its offset, if any, moves
        each input's noise centre to ``x + offset``.
    bank : NoiseBank
    n_draws : int or array-like of int, shape (m,)
        Rows of the bank to use for each input: ``n_draws`` rows from
        ``first_row``.
    batch_size : int
        Noisy inputs per forward pass.
    first_row : int or array-like of int, shape (m,), default=0
        The first row of the bank used: a later call from ``first_row = a``
        extends counts of rows ``[0, a)`` without repeating them.
    progress : callable, default=None
        ``progress(n_inputs, n_draws)`` after each forward pass, once per
        piece of it: that many inputs counted that many more draws each
        (:func:`~smoothlearn.blocks.report_draws`).
    grid : smoothlearn.grid.Grid, default=None
        Count on the grid instead (:class:`_GridResponse`): ``bank`` then
        holds raw 64-bit words and ``scale`` the values the tables are for.
    pack : bool, default=True
        Fill every forward pass but the last (above); False runs whole
        inputs per pass, the kernel before packing.
    pinned : bool, default=False
        Pin each draw to one place in one shape of forward pass
        (:func:`_count_pinned`): every pass is ``batch_size`` rows of one
        input's draws, bank row ``r`` at row ``r mod batch_size`` (windows
        aligned to multiples of ``batch_size``; rows of a window the input
        does not need are run and not counted). A row's float result may
        depend on its place in its pass; pinned, that place depends on ``r``
        alone, never on the other inputs, on when the count runs or on how
        far earlier counts went. Overrides ``pack``.
    windows : smoothlearn.banks.Kept, default=None
        Keeps the first layer's response to each window of the bank, where
        the response shares one across inputs
        (:meth:`~smoothlearn.first_layer.FirstLinear.fused_response`), for
        later counts of the same rows (a stream of blocks,
        :mod:`smoothlearn.passes`): computed once, the same values.

    Returns
    -------
    counts : ndarray of int64, shape (m, n_classes)
    """
    if not isinstance(scale, Scale):
        raise TypeError(
            f"count_classes takes a smoothlearn.scale.Scale; got {type(scale).__name__}"
        )
    m = len(X)
    first = np.broadcast_to(np.asarray(first_row, dtype=np.int64), (m,))
    n_draws = np.broadcast_to(np.asarray(n_draws, dtype=np.int64), (m,))
    if (first < 0).any() or (n_draws < 0).any():
        raise ValueError("first_row and n_draws must be non-negative")
    device, K = network.device, network.n_classes
    counts = torch.zeros((m, K), dtype=torch.int64, device=device)
    if m == 0 or not n_draws.any():
        return counts.cpu().numpy()
    if grid is None and scale.kind == "diagonal" and scale.shared_parts() is None:
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
                        n_draws[rows],
                        batch_size=batch_size,
                        first_row=first[rows],
                        progress=progress,
                        pack=pack,
                        windows=windows,
                    )
            return out
    batch_size = network.batch_size_for(batch_size)
    if grid is not None:
        response = _GridResponse(network, X, scale, bank, grid)
    else:
        response = _float_response(network, X, scale)
    network.module.eval()
    with torch.inference_mode():
        if pinned:
            stop = first + n_draws
            _count_pinned(response, bank, first, stop, batch_size, counts, progress)
        else:
            batch = _Batch(response, counts, batch_size, progress)
            kept = None
            if windows is not None and hasattr(response, "window_key"):
                key = response.window_key()
                if key is not None:
                    kept = (windows, (bank.key, bank.bank, key))
            _count_windows(response, bank, first, first + n_draws, batch, pack, kept)
    return counts.cpu().numpy()


def _count_pinned(response, bank, first, stop, size, counts, progress):
    """Count input ``i`` over bank rows ``[first[i], stop[i])``, each draw in its
    pinned place (:func:`count_classes`'s ``pinned``).

    Window-major, windows ``[w size, (w + 1) size)``: each is drawn once and
    serves every input that needs any of its rows, one whole pass per input.
    The base classifier of a count is then the mixture over places ``h =
    (1 / n) sum_r f_(r mod size)``, one fixed function for each ``(first,
    n)``, and the same ``h`` for every input and every extension when the
    sizes are multiples of ``size`` (design notes, "The network as one
    function").
    """
    device, K = counts.device, counts.shape[1]
    lo = int(first.min()) // size * size
    hi = int(stop.max())
    batch = response.batch(size)  # one buffer for every pass (None: fresh)
    for start in range(lo, hi, size):
        a = np.clip(first - start, 0, size)
        b = np.clip(stop - start, 0, size)
        needed = np.flatnonzero(b > a)
        if len(needed) == 0:
            continue
        z = bank.rows(start, start + size).to(device)
        shared = response.window(z)
        for i in needed:
            i = int(i)
            owners = torch.full((size,), i, device=device, dtype=torch.int64)
            rows = response.inputs(i, i + 1, z, shared, batch)
            pred = _top_class(response.forward(rows, owners))
            lo_i, hi_i = int(a[i]), int(b[i])
            _add_votes(counts, owners[lo_i:hi_i], pred[lo_i:hi_i], K)
            if progress is not None:
                progress(1, hi_i - lo_i)


def _float_response(network, X, scale):
    """The plain or first-layer-reuse response of float noise ``S z``."""
    device = network.device
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
    if first is None:
        return _PlainResponse(network, centres, scale, levels)
    network.module.eval()
    with torch.inference_mode():
        return first.fused_response(centres, parts)


def _count_windows(response, bank, first, stop, batch, pack, kept=None):
    """Count input ``i`` over bank rows ``[first[i], stop[i])``, window by window.

    Within a window, consecutive inputs needing the same rows form a run, the
    run's noisy inputs a stream (input-major); with ``pack`` the stream is cut
    into the batch wherever it fills, across runs and windows, and a run's
    pieces are formed a few inputs at a time (a partial input at each end,
    the whole ones between in one call), never more than the batch takes.
    ``kept``, ``(Kept, key)`` or None, keeps each window's shared response.
    """
    lo, hi = int(first.min()), int(stop.max())
    group = max(1, batch.size // min(hi - lo, batch.size))  # whole inputs, unpacked
    for start, end in _windows(first, stop, batch.size):
        a = np.clip(first - start, 0, end - start)
        b = np.clip(stop - start, 0, end - start)
        z = bank.rows(start, end).to(batch.counts.device)
        if kept is None:
            shared = response.window(z)
        else:
            shared = kept[0].get((*kept[1], start, end), lambda: response.window(z))
        for i0, i1 in _runs(a, b):
            r0, r1 = int(a[i0]), int(b[i0])
            rows = r1 - r0
            zr, sr = z, shared
            if rows < len(z):
                zr, sr = z[r0:r1], response.part(shared, r0, r1)
            if not pack:
                for g0 in range(i0, i1, group):
                    batch.add(g0, min(g0 + group, i1), zr, sr)
                    batch.flush()
                continue
            done, total = 0, (i1 - i0) * rows
            while done < total:
                take = min(batch.free, total - done)
                _add_span(batch, response, i0, rows, done, done + take, zr, sr)
                done += take
                if batch.free == 0:
                    batch.flush()
    batch.flush()


def _windows(first, stop, size):
    """``(start, end)`` of the windows a count draws: each stretch of bank rows
    that some input needs (the union of the ranges ``[first_i, stop_i)``) cut
    into windows of ``min(stretch, size)`` rows from its start; rows no input
    needs (between the looks of inputs at different stages) are never drawn.
    A single stretch gives the windows from ``min(first)`` of the kernel
    before."""
    live = stop > first
    order = np.argsort(first[live], kind="stable")
    starts, stops = first[live][order], stop[live][order]
    reach = np.maximum.accumulate(stops)
    new = np.concatenate([[True], starts[1:] > reach[:-1]])
    ends = np.concatenate([reach[np.flatnonzero(new)[1:] - 1], reach[-1:]])
    for lo, hi in zip(starts[new].tolist(), ends.tolist()):
        window = min(hi - lo, size)
        for start in range(lo, hi, window):
            yield start, min(start + window, hi)


def _runs(a, b):
    """``(i0, i1)`` of the maximal runs of consecutive inputs with equal,
    non-empty row ranges ``[a_i, b_i)``."""
    live = b > a
    change = np.flatnonzero(
        (a[1:] != a[:-1]) | (b[1:] != b[:-1]) | (live[1:] != live[:-1])
    )
    starts = np.concatenate([[0], change + 1])
    ends = np.concatenate([change + 1, [len(a)]])
    return [(int(s), int(e)) for s, e in zip(starts, ends) if live[s]]


def _add_span(batch, response, i0, rows, p, q, z, shared):
    """Add flat rows ``[p, q)`` of the stream of inputs ``i0, i0 + 1, ...``,
    ``rows`` rows each: a partial input at each end, whole inputs between."""
    head, offset = i0 + p // rows, p % rows
    tail, cut = i0 + q // rows, q % rows
    if head == tail:  # inside one input
        batch.add(head, head + 1, z[offset:cut], response.part(shared, offset, cut))
        return
    if offset:
        batch.add(head, head + 1, z[offset:], response.part(shared, offset, rows))
        head += 1
    if tail > head:
        batch.add(head, tail, z, shared)
    if cut:
        batch.add(tail, tail + 1, z[:cut], response.part(shared, 0, cut))


class _Batch:
    """One forward pass being filled with pieces ``(inputs i0:i1, w rows
    each)`` of a response's inputs, run and counted together by :meth:`flush`.

    Pieces are written into one batch where the response gives one
    (:meth:`_PlainResponse.batch`), so a packed pass costs no copy; else
    (first-layer reuse after a convolution) they are joined when it runs.
    """

    def __init__(self, response, counts, size, progress):
        self.response, self.counts, self.size = response, counts, size
        self.progress = progress
        self.rows = response.batch(size)
        self.pieces, self.free = [], size

    def add(self, i0, i1, z, shared):
        n = (i1 - i0) * len(z)
        out = None
        if self.rows is not None:
            at = self.size - self.free
            out = self.rows[at : at + n]
        self.pieces.append(
            (self.response.inputs(i0, i1, z, shared, out), i0, i1, len(z))
        )
        self.free -= n

    def flush(self):
        if not self.pieces:
            return
        device, K = self.counts.device, self.counts.shape[1]
        owners = torch.cat(
            [
                torch.arange(i0, i1, device=device).repeat_interleave(w)
                for _, i0, i1, w in self.pieces
            ]
        )
        if self.rows is not None:
            rows = self.rows[: self.size - self.free]
        elif len(self.pieces) == 1:
            rows = self.pieces[0][0]
        else:
            rows = torch.cat([piece[0] for piece in self.pieces])
        pred = _top_class(self.response.forward(rows, owners))
        _add_votes(self.counts, owners, pred, K)
        if self.progress is not None:
            for _, i0, i1, w in self.pieces:
                self.progress(i1 - i0, w)
        self.pieces, self.free = [], self.size


class _GridResponse(_PlainResponse):
    """The network on the grid (:mod:`smoothlearn.grid`).

    Each input's noisy inputs are ``j + k`` in integers, ``k`` drawn from the
    bank's words by the input's rounded tables; the network sees
    :meth:`~smoothlearn.grid.Grid.inputs` of them and nothing else (no
    first-layer reuse: ``L x + L (S z)`` is not a function of the sum).
    Inputs with the same scale share each window's ``k``. The integers are
    held as float32, exact below ``2^24`` (checked), so ``j + k`` is the
    integer sum and ``fl32(j + k) * fl32(h)`` one rounding of it, as
    :meth:`~smoothlearn.grid.Grid.inputs` computes.
    """

    def __init__(self, network, X, scale, bank, grid):
        from ._grid_quantiles import QuantileBounds, bounded_row
        from .grid import RowSampler, TableSet

        if scale.kind == "rotated" or scale.offset is not None:
            raise ValueError(
                "on the grid, scales are isotropic or diagonal and carry no offset"
            )
        device = network.device
        d = X.shape[1]
        j = grid.indices(X)
        per = np.asarray(scale.per_coordinate(d), dtype=np.float64)
        family = bank.family.rounded
        tables = TableSet(family, np.unique(per), grid.step, device)
        self.samplers, self.row_keys = {}, []
        for row in per:
            key = row.tobytes()
            if key not in self.samplers:
                self.samplers[key] = RowSampler(family, row, grid.step, device, tables)
            self.row_keys.append(key)
        largest = np.abs(j).max()
        reach = max(s.reach for s in self.samplers.values())
        if largest + reach >= 2**24:
            raise ValueError(
                "on the grid, |x / step| plus the noise's reach must stay below 2^24"
            )
        # rows decided by arithmetic on quantile bounds every row shares,
        # where enough rows share them to pay for them (the same k either way)
        bounded = {
            key
            for key, s in self.samplers.items()
            if s.cpu
            and bounded_row(family, [s.tables[t] for t in np.unique(s.which)], largest)
        }
        self.quantiles = None
        if len(bounded) >= BOUNDED_MIN_ROWS:
            self.quantiles = (QuantileBounds(family, d), bounded)
        self.j = torch.as_tensor(j.astype(np.float32), device=device)
        levels = None
        if network.noise_level_rule is not None:  # a denoiser told each level
            levels = torch.as_tensor(noise_levels(scale, d, network.noise_level_rule))
            levels = levels.to(device)
        self.network, self.grid, self.levels = network, grid, levels

    def window(self, words):
        """One ``k`` per distinct scale and window, drawn when first asked."""
        return _GridWindow(self.samplers, words, 0, len(words), self.quantiles)

    def part(self, shared, a, b):
        return shared.part(a, b)

    def batch(self, size):
        return self.j.new_empty((size, self.j.shape[1]))

    def inputs(self, i0, i1, words, shared, out=None):
        if out is None:
            out = self.j.new_empty(((i1 - i0) * len(words), self.j.shape[1]))
        # j + k formed in the forward batch itself, input by input: a k on
        # the shared-bounds path lives in a buffer the next input reuses
        rows = out.view(i1 - i0, len(words), -1)
        for i in range(i0, i1):
            shared.noisy(self.row_keys[i], self.j[i], rows[i - i0])
        return self.grid.inputs(out)


class _GridWindow:
    """A window's ``k`` per scale, seen through rows ``[a, b)`` of it: sampled
    once for the whole window by the guides, or, for the rows of
    ``quantiles`` (``(QuantileBounds, keys)``), ``j + k`` formed from the
    window's shared quantile bounds each time asked, in place."""

    def __init__(self, samplers, words, a, b, quantiles=None, drawn=None):
        self.samplers, self.words, self.a, self.b = samplers, words, a, b
        self.quantiles = quantiles
        self.drawn = {} if drawn is None else drawn

    def part(self, a, b):
        return _GridWindow(
            self.samplers,
            self.words,
            self.a + a,
            self.a + b,
            self.quantiles,
            self.drawn,
        )

    def noisy(self, key, j, out):
        """``j + k`` of the row ``key`` into ``out`` (float32, exact integers)."""
        if self.quantiles is not None and key in self.quantiles[1]:
            bounds = self.quantiles[0]
            return bounds.sample(
                self.samplers[key], self.words, j, out, (self.a, self.b)
            )
        return torch.add(j, self.k(key), out=out)

    def k(self, key):
        if key not in self.drawn:
            self.drawn[key] = self.samplers[key].sample(self.words)
        return self.drawn[key][self.a : self.b]


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


def _add_votes(counts, owners, pred, K):
    """Add each row's prediction ``pred`` to its input's (``owners``) counts.

    ``index_add_`` rather than ``bincount``: on a GPU, ``bincount`` reads its
    input's range back to the host to size its output, a round-trip per
    forward batch; ``index_add_`` writes into the counts' fixed shape and
    stays on the device (on a CPU both cost the same).
    """
    counts.view(-1).index_add_(0, pred + K * owners, torch.ones_like(pred))
