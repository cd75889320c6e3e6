"""Curvature of the loss in the input: Hessians, their eigenvectors, Lanczos.

RANCER (rancer.md section 3) rotates the smoothing noise into the eigenbasis of
the Hessian of the cross-entropy loss with respect to the input at ``x``, taken
at the base network's predicted label (certification never sees the true label).

* Dense: ``torch.func.hessian(loss)`` input by input (so that a row's
  Hessian does not depend on its neighbours' rounding), symmetrised, then one
  batched ``eigh``: O(d^2) memory per input.
* Rank k: batched Lanczos with full reorthogonalisation on Hessian-vector
  products (one double backward pass for the whole block per iteration):
  O(d k) memory per input. For piecewise-linear (ReLU) networks the Hessian is
  ``J^T (diag(p) - p p^T) J`` almost everywhere, of rank at most K - 1, so
  Lanczos exhausts its range within K steps; it then restarts from a new
  direction orthogonal to what it has (eigenvalue 0 there).

Eigenvectors come in decreasing order of eigenvalue (largest curvature first).
"""

import numpy as np
import scipy.linalg
import torch
import torch.nn.functional as F
from sklearn.base import clone

from .._checkpoint import row_digest

__all__ = [
    "AUTO_DENSE_MAX_FEATURES",
    "curvature_basis",
    "hessian_seed",
    "input_hessians",
    "predicted_labels",
    "resolve_rank",
]


def predicted_labels(network, X_t):
    """The base network's predicted class at each clean input."""
    network.module.eval()
    with torch.no_grad():  # not inference mode: the labels enter autograd graphs
        return network.logits(X_t).argmax(dim=1)


#: Copies of one input differentiated at once by :func:`input_hessians`.
HESSIAN_ROWS = 256


def input_hessians(network, X_t, labels):
    """Dense, symmetrised Hessians of the cross-entropy in the input, (m, d, d).

    Each input's Hessian is ``d`` Hessian-vector products with the axes, taken
    as one double backward pass through ``HESSIAN_ROWS`` copies of the input
    at a time (eval mode: the copies are independent); ``torch.func.hessian``
    took 27 times as long on the MNIST-slice MLP (0.38 s per input at
    d = 784). One input at a time, in blocks of a fixed shape: batched over
    inputs, the float32 products run in kernels chosen by the batch's shape,
    so a row's Hessian moved with the rows beside it (by 4e-6 on a 3-feature
    MLP), and RANCER's optimiser turned that into a different scale (0.52
    against 0.60). Alone, each row is computed by the same operations
    whatever its neighbours.
    """
    m, d = X_t.shape
    eye = torch.eye(d, dtype=X_t.dtype, device=X_t.device)
    H = torch.empty((m, d, d), dtype=X_t.dtype, device=X_t.device)
    for i in range(m):
        for r0 in range(0, d, HESSIAN_ROWS):
            r1 = min(r0 + HESSIAN_ROWS, d)
            copies = X_t[i].expand(r1 - r0, d)
            hvp = hessian_vector_products(network, copies, labels[i].expand(r1 - r0))
            H[i, r0:r1] = hvp(eye[r0:r1])
    return (H + H.transpose(1, 2)) / 2


def hessian_vector_products(network, X_t, labels):
    """``hvp(V)``: ``H_i v_i`` for each input, ``V`` of shape (m, d)."""
    network.module.eval()
    x = X_t.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        # inputs are independent (eval mode): the gradient of the summed loss
        # holds each input's own gradient
        loss = F.cross_entropy(network.logits(x), labels, reduction="sum")
        (grad,) = torch.autograd.grad(loss, x, create_graph=True)

    def hvp(V):
        with torch.enable_grad():
            (out,) = torch.autograd.grad(grad, x, grad_outputs=V, retain_graph=True)
        return out.detach()

    return hvp


def _orthogonalise(w, Q):
    """``w`` minus its projection on the columns already in ``Q`` (twice: stable)."""
    for _ in range(2):
        w = w - torch.einsum("mjd,mj->md", Q, torch.einsum("mjd,md->mj", Q, w))
    return w


#: Largest input dimension at which ``rank='auto'`` keeps the dense Hessian
#: eigenbasis. Dense costs O(d^3) per input and O(d^2) memory per
#: certificate; at d = 784, n = 100,000 on the MNIST-slice MLP, dense rancer
#: took 0.98 s per input against ancer's 0.24 (4x: most of it is counting,
#: which costs what a per-input diagonal's does, where most of ANCER's rows
#: keep their isotropic start and count through the shared first layer), and
#: dense rddrs 3.7 s; below this it is a fraction of a second.
AUTO_DENSE_MAX_FEATURES = 256


def resolve_rank(rank, n_features, n_classes):
    """The rank a curvature strategy uses: None (dense) or a number of directions.

    ``'auto'`` is dense up to :data:`AUTO_DENSE_MAX_FEATURES` input features
    and ``K - 1`` (classes minus one) above: for piecewise-linear (ReLU)
    networks the input Hessian of the cross-entropy is ``J^T (diag(p) - p
    p^T) J``, of rank at most ``K - 1``, so those directions hold all its
    curvature (DESIGN.md section 5); the rest share one isotropic scale.
    """
    if isinstance(rank, str):  # 'auto'
        if n_features <= AUTO_DENSE_MAX_FEATURES:
            return None
        return max(1, min(n_classes - 1, n_features - 1))
    if rank is not None and rank >= n_features:
        return None
    return rank


def with_resolved_rank(strategy, n_features, n_classes):
    """``strategy`` (rancer or rddrs) with its rank as :func:`resolve_rank`
    resolves it: ``'auto'``, and any rank of at least ``n_features``, become the
    number of directions or None (dense) that actually runs."""
    rank = resolve_rank(strategy.rank, n_features, n_classes)
    if rank is strategy.rank or (
        rank is not None
        and not isinstance(strategy.rank, str)
        and rank == strategy.rank
    ):
        return strategy
    return clone(strategy).set_params(rank=rank)


#: Relative size below which a Lanczos residual or Ritz value is rounding noise:
#: Hessian-vector products run in the network's float32, so ``sqrt`` of its
#: epsilon (3.5e-4), not float64's (1.5e-8, which took float32 noise for
#: curvature and built bases on it).
HVP_NOISE = torch.finfo(torch.float32).eps ** 0.5


def row_generators(seed, X_t):
    """One CPU generator per input, seeded by ``seed`` and the input's bytes.

    A row's random start and restart vectors then depend on nothing but the
    call's key and the row itself: not on the rows certified beside it, their
    order or the block size.
    """
    generators = []
    for row in X_t.detach().cpu().numpy():
        entropy = (int(seed), int(row_digest(row), 16))
        state = np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0]
        generators.append(torch.Generator().manual_seed(int(state)))
    return generators


def lanczos_top_eigenvectors(
    hvp, m, d, rank, generators, n_steps=None, dtype=None, device="cpu"
):
    """Top-``rank`` eigenpairs of symmetric operators by batched Lanczos.

    Parameters
    ----------
    hvp : callable
        ``(m, d) -> (m, d)``, the products ``H_i v_i``.
    m, d : int
    rank : int
    generators : list of torch.Generator
        One per input (CPU): its start vector and restarts, drawn only when
        that input needs them (:func:`row_generators`).
    n_steps : int, default=None
        Krylov dimension; ``min(d, 2 * rank + 20)`` when None.
    dtype : torch.dtype, default=None
        Of the Krylov vectors; float64 when None.
    device : torch.device, default='cpu'
        Where the Krylov vectors live: the network's (the per-row generators
        stay on the CPU, so a row's start vector is the same on any device).

    Returns
    -------
    eigenvalues : torch.Tensor of shape (m, rank), decreasing
    eigenvectors : torch.Tensor of shape (m, d, rank), orthonormal columns
    """
    dtype = dtype or torch.float64
    q = min(d, n_steps or 2 * rank + 20)
    Q = torch.zeros(m, q, d, dtype=dtype, device=device)
    alpha = torch.zeros(m, q, dtype=dtype, device=device)
    beta = torch.zeros(m, q, dtype=dtype, device=device)

    def fresh(j, rows):
        v = torch.stack(
            [torch.randn(d, generator=generators[i], dtype=dtype) for i in rows]
        ).to(device)
        v = _orthogonalise(v, Q[rows, :j])
        return v / v.norm(dim=1, keepdim=True)

    Q[:, 0] = fresh(0, list(range(m)))
    for j in range(q):
        v = Q[:, j]
        w = hvp(v.to(torch.float32)).to(dtype)
        alpha[:, j] = (w * v).sum(dim=1)
        w = _orthogonalise(w, Q[:, : j + 1])
        if j + 1 == q:
            break
        norm = w.norm(dim=1)
        # an exhausted Krylov space (e.g. the K - 1 dimensional range of a ReLU
        # network's Hessian): restart orthogonally; the coupling is then 0
        scale = HVP_NOISE * alpha[:, : j + 1].abs().amax(dim=1)
        broke = norm <= torch.clamp(scale, min=1e-30)
        beta[:, j] = torch.where(broke, torch.zeros_like(norm), norm)
        safe = torch.where(broke, torch.ones_like(norm), norm)
        nxt = w / safe[:, None]
        if broke.any():
            rows = torch.nonzero(broke).flatten().tolist()
            nxt[rows] = fresh(j + 1, rows)
        Q[:, j + 1] = nxt
    T = torch.diag_embed(alpha) + torch.diag_embed(beta[:, :-1], 1)
    T = T + torch.diag_embed(beta[:, :-1], -1)
    theta, S = torch.linalg.eigh(T)
    ritz = torch.einsum("mqd,mqk->mkd", Q, S)  # (m, q, d), rows orthonormal
    values = torch.empty(m, rank, dtype=dtype, device=device)
    vectors = torch.empty(m, d, rank, dtype=dtype, device=device)
    for i in range(m):
        values[i], vectors[i] = _top_ritz_pairs(theta[i], ritz[i], Q[i], rank)
    # re-orthonormalise (Ritz vectors are orthonormal up to rounding)
    vectors, _ = torch.linalg.qr(vectors)
    return values, vectors


def _top_ritz_pairs(theta, ritz, krylov, rank):
    """The ``rank`` largest Ritz pairs, with a canonical basis for a zero cluster.

    Ritz values within ``HVP_NOISE * max|theta|`` of 0 (a ReLU network's null
    space, reached through restarts) are one degenerate eigenvalue: any basis
    of their span is as good, and the one ``eigh`` returns turns with rounding
    noise (so with the rows batched beside this one). Where the top ``rank``
    reach into that cluster, its part of the basis is instead the Krylov
    vectors, in order, projected onto the cluster's span: continuous in
    rounding, and fixed by the row's own start and restart vectors.
    """
    tol = HVP_NOISE * theta.abs().max().clamp_min(1e-30)
    order = torch.argsort(theta, descending=True)
    positive = order[theta[order] > tol]
    zero = order[theta[order].abs() <= tol]
    negative = order[theta[order] < -tol]
    chosen = list(positive[:rank])
    vecs = [ritz[j] for j in chosen]
    vals = [theta[j] for j in chosen]
    if len(vecs) < rank and len(zero):
        span = ritz[zero]  # (z, d), orthonormal rows
        for candidate in krylov:
            if len(vecs) == rank:
                break
            v = span.T @ (span @ candidate)
            for w in vecs[len(chosen) :]:
                v = v - (w @ v) * w
            norm = v.norm()
            if norm > 0.5:
                vecs.append(v / norm)
                vals.append(theta.new_zeros(()))
        # a cluster the Krylov vectors barely touch: its Ritz vectors as they are
        for j in zero[: rank - len(vecs)]:
            vecs.append(ritz[j])
            vals.append(theta[j])
    for j in negative[: rank - len(vecs)]:
        vecs.append(ritz[j])
        vals.append(theta[j])
    return torch.stack(vals), torch.stack(vecs, dim=1)


def _canonical_zero_cluster(values, vectors):
    """Give a dense eigenbasis's zero cluster a canonical basis, in place.

    Eigenvalues within ``HVP_NOISE * max|values|`` of 0 (a ReLU network's
    null space) are one degenerate eigenvalue, and the basis ``eigh`` returns
    for it turns with rounding noise, so with the inputs batched beside this
    one. It is replaced by pivoted Gram-Schmidt on the cluster's projector
    ``P = V V^T``: at each step the coordinate axis with the largest residual,
    normalised with a positive entry there. That depends on ``P`` alone (up to
    ties between axes), which rounding moves only by noise over the gap to
    the non-zero eigenvalues. The cluster's eigenvalues become 0.
    """
    tol = HVP_NOISE * values.abs().max().clamp_min(1e-30)
    zero = torch.nonzero(values.abs() <= tol).flatten()
    if len(zero) == 0:
        return
    span = vectors[:, zero]
    projector = (span @ span.T).cpu().numpy()
    # LAPACK's QR with column pivoting is that Gram-Schmidt: it takes the
    # column of largest residual norm next, and Q's column j is that residual
    # normalised (up to sign); 0.8 s per input as a Python loop over the 775
    # axes of a ReLU MLP's cluster at d = 784
    q, _, pivots = scipy.linalg.qr(projector, mode="economic", pivoting=True)
    c = len(zero)
    q = q[:, :c] * np.sign(q[pivots[:c], np.arange(c)])
    vectors[:, zero] = torch.as_tensor(q, dtype=vectors.dtype, device=vectors.device)
    values[zero] = 0.0


def curvature_basis(network, X_t, rank, *, seed=0):
    """The eigenbasis of the input Hessian of the loss at the predicted label.

    Parameters
    ----------
    network : FlatInputNetwork
    X_t : torch.Tensor of shape (m, d)
    rank : int or None
        None: every eigenvector (dense Hessians); k: the top k (Lanczos).
    seed : int
        With each input's bytes, seeds its Lanczos start and restart vectors.

    Returns
    -------
    eigenvalues : torch.Tensor of shape (m, k), decreasing
    basis : torch.Tensor of shape (m, d, k), float32, orthonormal columns
    """
    m, d = X_t.shape
    labels = predicted_labels(network, X_t)
    if rank is None or rank >= d:
        H = input_hessians(network, X_t, labels).double()
        values, vectors = torch.linalg.eigh(H)
        values, vectors = values.flip(1), vectors.flip(2)
        for i in range(m):
            _canonical_zero_cluster(values[i], vectors[i])
    else:
        hvp = hessian_vector_products(network, X_t, labels)
        generators = row_generators(seed, X_t)
        values, vectors = lanczos_top_eigenvectors(
            hvp, m, d, rank, generators, device=X_t.device
        )
    return values, vectors.to(device=X_t.device, dtype=torch.float32)


def hessian_seed(bank):
    """Lanczos start vectors: a pure function of the call's key."""
    seed = np.random.SeedSequence(bank.key, spawn_key=(bank.bank, 1 << 20))
    return int(seed.generate_state(1, np.uint32)[0])
