"""The Monte Carlo engine: noise banks, class counts, CERTIFY and PREDICT.

CERTIFY and PREDICT are those of Cohen et al. (2019), DESIGN.md section 4::

    CERTIFY(f, S, x, n0, n, alpha):
        c = argmax counts(f, x, S, n0)        # selection draws
        k = counts(f, x, S, n)[c]             # independent estimation draws
        p = beta.ppf(alpha, k, n - k + 1)     # one-sided Clopper-Pearson bound
        p < 1/2 -> ABSTAIN, else (c, gap(p))
    PREDICT(f, S, x, n, alpha):
        nA, nB = top two counts(f, x, S, n)
        binomtest(nA, nA + nB, 1/2) p-value <= alpha -> cA, else ABSTAIN

Noise banks
-----------
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

Memory: a call holds one chunk of a bank and one window of it
(``CHUNK_ROWS + min(n, batch_size)`` rows of ``n_features`` float32) plus one
forward batch (at most ``max(batch_size, min(n, batch_size))`` noisy inputs,
their activations and logits), whatever ``n`` and however many inputs are
certified.
"""

import time
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from joblib import Parallel, delayed
from scipy.stats import binom as _binom
from tqdm.auto import tqdm

from .bounds import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    plan_sample_sizes,
    sequential_looks,
)
from .network import FlatInputNetwork, first_output
from .regions import Scale

__all__ = [
    "BlockResult",
    "CHUNK_ROWS",
    "INPUT_BLOCK",
    "SmoothingTask",
    "run_blocks",
    "NoiseBank",
    "bank_key",
    "count_classes",
    "smoothing_as_run",
    "certify_from_counts",
    "certificate_from_bound",
    "predict_from_counts",
]

#: Rows per generated chunk of a noise bank. Part of the draws' definition:
#: changing it changes which numbers a seed gives.
CHUNK_ROWS = 1024

#: Float64 values drawn at once inside a chunk (about 0.5 MB): bounds the
#: float64 temporaries without paying per-call overhead on small inputs. Part
#: of the draws' definition, with CHUNK_ROWS.
DRAW_VALUES = 65_536


def draw_rows(n_features):
    """Rows of a chunk drawn in float64 at once for inputs of ``n_features``."""
    return max(1, min(CHUNK_ROWS, DRAW_VALUES // n_features))


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
        Use ``smoothlearn.regions.Scale(scale, basis, scale_rest).noise(z)``;
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
        ".noise(z) (smoothlearn.regions.Scale); it will be removed in 0.3.",
        FutureWarning,
        stacklevel=2,
    )
    return Scale(scale, basis, scale_rest).noise(z)


def smoothing_as_run(smoothing):
    """The smoothing the engine runs, and the region scale a certificate records.

    The network and the noise run in float32, so the engine smooths with the
    float32 values of a strategy's answer, not its float64 ones (``sigma=0.12``
    runs as 0.1199999973). This returns ``(run, recorded)``:

    * ``run``: every value rounded to float32 (held as float64 arrays), what
      :func:`count_classes` is given;
    * ``recorded``: the scale the certificate states. Isotropic and diagonal
      scales are exactly the values run. A rotated scale runs as
      ``S~ = r I + U~ diag(s - r) U~^T`` with ``U~`` the float32 basis, whose
      columns are orthonormal only to about 1e-7; the record keeps the
      orthonormalised basis ``U`` (QR of ``U~``) and shrinks ``s`` and ``r`` by
      ``1 - 2 Delta / s_min`` with ``Delta = max|s - r| (2 e + e^2)``,
      ``e = ||U - U~||_F``. Then ``||S~^-1 S_rec|| <= 1`` (Weyl's bound on
      ``S~``'s smallest singular value), so the recorded region lies inside the
      one the draws certify.

    Parameters
    ----------
    smoothing : dict
        A strategy's answer: ``scale`` and optionally ``basis`` and
        ``scale_rest`` (no ``offset``).

    Returns
    -------
    run, recorded : dict
    """
    as_run = {
        name: np.asarray(value, dtype=np.float32).astype(np.float64)
        for name, value in smoothing.items()
    }
    if "basis" not in as_run:
        return as_run, dict(as_run)
    basis, scale, rest = as_run["basis"], as_run["scale"], as_run["scale_rest"]
    q, r = np.linalg.qr(basis)
    q = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
    e = np.linalg.norm(q - basis, axis=(1, 2))
    delta = np.abs(scale - rest[:, None]).max(axis=1) * (2 * e + e**2)
    full = basis.shape[2] >= basis.shape[1]
    smallest = scale.min(axis=1) if full else np.minimum(scale.min(axis=1), rest)
    if np.any(2 * delta >= smallest):
        raise ValueError(
            "a rotated scale is too ill-conditioned for float32 noise: its basis "
            "rounds to columns far from orthonormal"
        )
    shrink = 1.0 - 2.0 * delta / smallest
    recorded = {
        "scale": scale * shrink[:, None],
        "basis": q,
        "scale_rest": rest * shrink,
    }
    return as_run, recorded


def count_classes(
    network,
    X,
    scale,
    bank,
    n_draws,
    *,
    batch_size,
    basis=None,
    scale_rest=None,
    first_row=0,
):
    """Count the base network's predictions on ``x_i + S_i z`` over a bank's rows.

    Processing is chunk-major: one window of the bank (``min(n_draws,
    batch_size)`` rows) serves every input before the next window is drawn,
    so each draw is generated once per call; each forward pass carries
    ``batch_size // window`` inputs (at least one) times the window's rows.
    When the network starts with a linear map and the scale is isotropic or
    shared by all inputs, the map's response to the window is computed once
    and reused (:mod:`smoothlearn.first_layer`).

    Parameters
    ----------
    network : BaseNetwork
    X : ndarray of shape (m, n_features)
        Flat inputs.
    scale : ndarray of shape (m,), (m, n_features) or (m, k)
        Isotropic or diagonal scale of each input, or the in-basis scale of a
        rotated one.
    bank : NoiseBank
    n_draws : int
        Rows of the bank to use: ``n_draws`` rows from ``first_row``.
    batch_size : int
        Noisy inputs per forward pass.
    basis : ndarray of shape (m, n_features, k), default=None
        Orthonormal columns of a rotated scale ``U diag(s) U^T + r (I - U U^T)``.
    scale_rest : ndarray of shape (m,), default=None
        ``r``, the isotropic scale on the complement of ``basis``.
    first_row : int, default=0
        The first row of the bank used: a later call from ``first_row = a``
        extends counts of rows ``[0, a)`` without repeating them.

    Returns
    -------
    counts : ndarray of int64, shape (m, n_classes)
    """
    m, d = X.shape
    device = network.device
    K = network.n_classes
    counts = torch.zeros((m, K), dtype=torch.int64, device=device)
    if m == 0 or n_draws == 0:
        return counts.cpu().numpy()
    window = min(n_draws, batch_size)
    group = max(1, batch_size // window)
    X_t = network.inputs(X)
    if basis is not None:
        return _count_rotated(
            network, X_t, scale, basis, scale_rest, bank, n_draws, batch_size, first_row
        )
    scale = np.asarray(scale, dtype=np.float32)
    shared = scale.ndim == 2 and bool((scale == scale[:1]).all())
    first = network.first_linear if (scale.ndim == 1 or shared) else None
    # (m, 1, 1) or (m, 1, d): broadcasts against a window of z, (1, w, d)
    scale_t = torch.as_tensor(scale, device=device).reshape(m, 1, -1)
    network.module.eval()
    with torch.inference_mode():
        if first is not None:
            Lx = first.apply(X_t)[:, None]  # (m, 1, *hidden)
            hidden_shape = Lx.shape[2:]
            if not shared:  # per-input isotropic: s_i L z
                iso = scale_t.reshape(m, 1, *([1] * len(hidden_shape)))
        stop = first_row + n_draws
        for start in range(first_row, stop, window):
            z = bank.rows(start, min(start + window, stop)).to(device)
            w = z.shape[0]
            if first is not None:
                # the bank's response to the first linear map, once per window
                Lz = first.apply_linear_part(z * scale_t[0] if shared else z)[None]
            for i0 in range(0, m, group):
                i1 = min(i0 + group, m)
                if first is None:
                    noisy = torch.addcmul(X_t[i0:i1, None], scale_t[i0:i1], z[None])
                    pred = network.logits(noisy.reshape(-1, d)).argmax(dim=1)
                else:
                    if shared:
                        hidden = Lx[i0:i1] + Lz
                    else:
                        hidden = torch.addcmul(Lx[i0:i1], iso[i0:i1], Lz)
                    out = first.rest(hidden.reshape(-1, *hidden_shape))
                    pred = first_output(out).argmax(dim=1)
                _add_votes(counts, i0, i1, pred, w, K)
    return counts.cpu().numpy()


def _add_votes(counts, i0, i1, pred, w, K):
    """Add the predictions of inputs ``i0:i1`` (``w`` draws each, input-major)."""
    if i1 - i0 == 1:
        counts[i0] += torch.bincount(pred, minlength=K)
    else:
        rows = torch.arange(i1 - i0, device=pred.device).repeat_interleave(w)
        block = torch.bincount(rows * K + pred, minlength=(i1 - i0) * K)
        counts[i0:i1] += block.view(i1 - i0, K)


def _count_rotated(
    network, X_t, scale, basis, scale_rest, bank, n_draws, batch_size, first_row
):
    """count_classes for rotated scales ``r z + U ((s - r) * U^T z)``.

    With a first linear map ``L`` the response is ``L x + r L z + (L U)((s - r) *
    U^T z)``: ``L z`` once per window for all inputs and ``L U`` once per input,
    so a draw costs O(k (d + hidden)) instead of a pass through ``L``.
    """
    m, d = X_t.shape
    device, K = network.device, network.n_classes
    counts = torch.zeros((m, K), dtype=torch.int64, device=device)
    as_t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float32), device=device)  # noqa: E731
    basis, scale, rest = as_t(basis), as_t(scale), as_t(scale_rest)
    window = min(n_draws, batch_size)
    group = max(1, batch_size // window)
    first = network.first_linear
    network.module.eval()
    with torch.inference_mode():
        if first is not None:
            Lx = first.apply(X_t)[:, None]  # (m, 1, *hidden)
            hidden_shape = Lx.shape[2:]
            k = basis.shape[2]
            # (L U_i) for every input: (m, k, hidden)
            LU = first.apply_linear_part(basis.transpose(1, 2).reshape(m * k, d))
            LU = LU.reshape(m, k, -1)
            stretch = scale - rest[:, None]  # (m, k)
        stop = first_row + n_draws
        for start in range(first_row, stop, window):
            z = bank.rows(start, min(start + window, stop)).to(device)
            w = z.shape[0]
            if first is not None:
                Lz = first.apply_linear_part(z).reshape(w, -1)  # (w, hidden)
            for i0 in range(0, m, group):
                i1 = min(i0 + group, m)
                if first is None:
                    noise = Scale(scale, basis, rest)[i0:i1].noise(z)
                    noisy = X_t[i0:i1, None] + noise
                    pred = network.logits(noisy.reshape(-1, d)).argmax(dim=1)
                else:
                    coef = torch.einsum("wd,gdk->gwk", z, basis[i0:i1])
                    coef = coef * stretch[i0:i1, None]
                    hidden = rest[i0:i1, None, None] * Lz[None] + torch.einsum(
                        "gwk,gkh->gwh", coef, LU[i0:i1]
                    )
                    hidden = Lx[i0:i1] + hidden.reshape(i1 - i0, w, *hidden_shape)
                    out = first.rest(hidden.reshape(-1, *hidden_shape))
                    pred = first_output(out).argmax(dim=1)
                _add_votes(counts, i0, i1, pred, w, K)
    return counts.cpu().numpy()


def certify_from_counts(selection_counts, estimation_counts, n, alpha, family):
    """CERTIFY from the two count tables.

    Returns
    -------
    top : ndarray of int, shape (m,)
        Selected class index (-1 where abstained).
    p_lower : ndarray of shape (m,)
    gap : ndarray of shape (m,)
        ``family.gap(p_lower)``, 0 where abstained.
    abstained : ndarray of bool, shape (m,)
    """
    top = np.argmax(selection_counts, axis=1)
    k = estimation_counts[np.arange(len(top)), top]
    return certificate_from_bound(top, clopper_pearson_lower(k, n, alpha), family)


def certificate_from_bound(top, p_lower, family):
    """CERTIFY's answer for a selected class and its probability bound.

    Returns ``(top, p_lower, gap, abstained)`` as :func:`certify_from_counts`:
    abstain where ``p_lower < 1/2``.
    """
    abstained = p_lower < 0.5
    return (
        np.where(abstained, -1, top),
        p_lower,
        family.certified_gap(p_lower),
        abstained,
    )


def top_two_pvalue(counts):
    """Two-sided binomial test p-value of the top two counts against 1/2.

    Equals ``scipy.stats.binomtest(nA, nA + nB, 0.5).pvalue`` for each row:
    the null distribution is symmetric, so the two-sided p-value is
    ``min(1, 2 P(X >= nA))``.
    """
    order = np.sort(counts, axis=1)
    n_a, n_b = order[:, -1], order[:, -2] if counts.shape[1] > 1 else 0 * order[:, -1]
    total = n_a + n_b
    p = 2.0 * _binom.sf(n_a - 1, total, 0.5)
    return np.where(n_a == n_b, 1.0, np.minimum(p, 1.0))


def predict_from_counts(counts, alpha):
    """PREDICT from a count table: the top class index, or -1 where abstained."""
    top = np.argmax(counts, axis=1)
    return np.where(top_two_pvalue(counts) <= alpha, top, -1)


# ------------------------------------------------------------------ blocks
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
    scale : dict
        The recorded scale (:func:`smoothing_as_run`): ``scale`` and, for
        rotated scales, ``basis`` and ``scale_rest``.
    """

    class_index: np.ndarray
    p_lower: np.ndarray
    gap: np.ndarray
    time: np.ndarray
    n_draws: np.ndarray
    scale: dict

    def rows(self):
        """One JSON-ready dict per input (what a checkpoint log stores)."""
        out = []
        for j in range(len(self.class_index)):
            row = {
                "class_index": int(self.class_index[j]),
                "p_lower": float(self.p_lower[j]),
                "gap": float(self.gap[j]),
                "time": float(self.time[j]),
                "n_draws": int(self.n_draws[j]),
            }
            for name, value in self.scale.items():
                row[name] = np.asarray(value[j]).tolist()
            out.append(row)
        return out

    @classmethod
    def concatenate(cls, blocks):
        """One result for consecutive blocks."""
        fields = ("class_index", "p_lower", "gap", "time", "n_draws")
        joined = {f: np.concatenate([getattr(b, f) for b in blocks]) for f in fields}
        scale = {
            name: np.concatenate([b.scale[name] for b in blocks])
            for name in blocks[0].scale
        }
        return cls(**joined, scale=scale)

    @classmethod
    def from_rows(cls, rows):
        """The block whose :meth:`rows` are ``rows`` (floats round-trip exactly)."""
        scale = {
            name: np.array([r[name] for r in rows], dtype=np.float64)
            for name in ("scale", "basis", "scale_rest")
            if rows[0].get(name) is not None
        }
        return cls(
            class_index=np.array([r["class_index"] for r in rows], dtype=np.intp),
            p_lower=np.array([r["p_lower"] for r in rows], dtype=np.float64),
            gap=np.array([r["gap"] for r in rows], dtype=np.float64),
            time=np.array([r["time"] for r in rows], dtype=np.float64),
            n_draws=np.array([r["n_draws"] for r in rows], dtype=np.int64),
            scale=scale,
        )


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

    def smoothing(self, X, key):
        """The strategy's answer for ``X``: ``scale`` [``basis``, ``scale_rest``,
        ``offset``], from the optimisation bank."""
        return self.strategy.scales(
            self.network,
            X,
            sigma=self.sigma,
            family=self.family,
            bank=NoiseBank(key, OPTIMISATION, self.family, X.shape[1]),
            p_max=float(clopper_pearson_lower(self.n, self.n, self.alpha)),
        )

    def prepare(self, X, key):
        """``(noise_centre, run, recorded)``: where the noise is centred, the
        scale the engine runs and the scale a certificate records.

        The engine runs the strategy's answer in float32; ``recorded`` is the
        scale the certificate may state (:func:`smoothing_as_run`).
        """
        smoothing = self.smoothing(X, key)
        # UCAN's mean offset shifts the noise, not the certified region's centre
        offset = smoothing.pop("offset", None)
        noise_centre = X if offset is None else X + offset
        run, recorded = smoothing_as_run(smoothing)
        return noise_centre, run, recorded

    def count(self, noise_centre, run, bank, n_draws, *, rows=None, first_row=0):
        """Class counts of rows ``rows`` (all by default) over ``n_draws`` bank rows
        from ``first_row``: :func:`count_classes` on the prepared smoothing."""
        if rows is not None:
            noise_centre = noise_centre[rows]
            run = {name: value[rows] for name, value in run.items()}
        return count_classes(
            self.network,
            noise_centre,
            run["scale"],
            bank,
            n_draws,
            batch_size=self.batch_size,
            basis=run.get("basis"),
            scale_rest=run.get("scale_rest"),
            first_row=first_row,
        )

    def counts(self, X, key, banks):
        """The recorded scale and the count tables of ``banks`` for ``X``."""
        noise_centre, run, recorded = self.prepare(X, key)
        draws = {SELECTION: self.n0, ESTIMATION: self.n}
        counts = [
            self.count(
                noise_centre,
                run,
                NoiseBank(key, bank, self.family, X.shape[1]),
                draws[bank],
            )
            for bank in banks
        ]
        return recorded, counts

    def certify(self, X, key):
        """CERTIFY each input of ``X``: a :class:`BlockResult`.

        The selection draws pick each input's class; the estimation draws
        then bound its probability with ``n`` draws, with a size planned per
        input (``radius_tolerance``), or with as many as deciding "certified
        at ``radius``" takes (``radius``). Every bound holds with probability
        at least ``1 - alpha`` (:mod:`smoothlearn.bounds`).
        """
        start = time.perf_counter()
        noise_centre, run, recorded = self.prepare(X, key)
        banks = [
            NoiseBank(key, b, self.family, X.shape[1]) for b in (SELECTION, ESTIMATION)
        ]
        selection = self.count(noise_centre, run, banks[0], self.n0)
        top = np.argmax(selection, axis=1)
        counter = _TopCounter(self, noise_centre, run, banks[1], top)
        if self.radius is not None:
            n_draws, p_lower = self._decide(counter, recorded)
        else:
            n_draws = np.full(len(top), self.n, dtype=np.int64)
            if self.radius_tolerance is not None:
                pilot = selection[np.arange(len(top)), top]
                n_draws = plan_sample_sizes(
                    pilot,
                    self.n0,
                    self.n,
                    self.alpha,
                    self.radius_tolerance,
                    self.family,
                )
            for size in np.unique(n_draws):  # ascending: extend the inputs still short
                counter.extend_to(np.flatnonzero(n_draws >= size), size)
            p_lower = clopper_pearson_lower(counter.k, n_draws, self.alpha)
        top, p_lower, gap, _ = certificate_from_bound(top, p_lower, self.family)
        seconds = (time.perf_counter() - start) / len(top)
        return BlockResult(
            top, p_lower, gap, np.full(len(top), seconds), n_draws, recorded
        )

    def _decide(self, counter, recorded):
        """Sequential looks at "certified at ``radius``": ``(n_draws, p_lower)``.

        An input stops at the first look whose bound reaches the probability
        its scale needs for ``radius`` (decided: certified), or whose upper
        bound at the same level falls below it (decided: not certified), or
        at the last look; its bound is the one at the look where it stopped,
        with that look's share of ``alpha``.
        """
        looks, alphas = sequential_looks(self.n, self.alpha)
        smallest = Scale(
            recorded["scale"], recorded.get("basis"), recorded.get("scale_rest")
        ).smallest()
        needed = self.family.probability_for_gap(
            self.radius / (self.family.c * smallest)
        )
        m = len(counter.k)
        n_draws = np.full(m, looks[-1], dtype=np.int64)
        p_lower = np.zeros(m)
        active = np.arange(m)
        for look, level in zip(looks, alphas):
            counter.extend_to(active, look)
            k = counter.k[active]
            lower = clopper_pearson_lower(k, look, level)
            stop = (look == looks[-1]) | (lower >= needed[active])
            stop |= clopper_pearson_upper(k, look, level) < needed[active]
            n_draws[active[stop]] = look
            p_lower[active[stop]] = lower[stop]
            active = active[~stop]
            if len(active) == 0:
                break
        return n_draws, p_lower

    def estimation_counts(self, X, key):
        """The estimation bank's class counts, shape (m, n_classes)."""
        return self.counts(X, key, (ESTIMATION,))[1][0]

    def noise_parameters(self, X, key):
        """``(offset, scale)`` of the noise per coordinate, each (m, n_features).

        The float32 values the engine runs. Raises ValueError for rotated
        scales, which have no per-coordinate form.
        """
        answer = self.smoothing(X, key)
        if "basis" in answer:
            raise ValueError(
                f"strategy {self.strategy.name!r} smooths along a rotated basis: "
                "its scale is not per coordinate; use certify(X).scale_matrix(i)."
            )
        scale = np.asarray(answer["scale"], dtype=np.float32).astype(np.float64)
        scale = np.broadcast_to(scale.reshape(len(X), -1), X.shape)
        offset = answer.get("offset", np.zeros_like(X))
        return offset, scale


class _TopCounter:
    """Each input's count of its selected class over a growing prefix of a bank.

    Inputs extended together share every window of draws; rows ``[0, a)`` are
    never counted twice, so extending in steps costs what one pass to the
    largest size costs.
    """

    def __init__(self, task, noise_centre, run, bank, top):
        self.task, self.noise_centre, self.run, self.bank = (
            task,
            noise_centre,
            run,
            bank,
        )
        self.top = top
        self.k = np.zeros(len(top), dtype=np.int64)
        self.done = np.zeros(len(top), dtype=np.int64)

    def extend_to(self, rows, size):
        """Count rows ``rows`` (inputs that have counted equally far) up to ``size``."""
        if len(rows) == 0:
            return
        first = int(self.done[rows[0]])
        if np.any(self.done[rows] != first):
            raise RuntimeError("inputs extended together must have counted as far")
        counts = self.task.count(
            self.noise_centre,
            self.run,
            self.bank,
            int(size) - first,
            rows=rows,
            first_row=first,
        )
        self.k[rows] += counts[np.arange(len(rows)), self.top[rows]]
        self.done[rows] = size


def run_blocks(work, X, key, *, n_jobs=None, verbose=0, checkpoint=None):
    """``work(X_block, key)`` on each block of ``INPUT_BLOCK`` inputs, in order.

    Blocks run in this process or on ``n_jobs`` joblib workers (any joblib
    backend); each is a pure function of its inputs and the key, so the
    results do not depend on ``n_jobs`` beyond float reduction order.

    Parameters
    ----------
    work : callable
        Picklable, e.g. a bound method of :class:`SmoothingTask`.
    X : ndarray of shape (m, n_features)
    key : int
        The call's noise key (:func:`bank_key`).
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
