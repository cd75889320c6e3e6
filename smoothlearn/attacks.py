"""Empirical robustness of a smoothed classifier: PGD on its soft output.

Certified accuracy at a radius is a lower bound of the smoothed classifier's
accuracy under any perturbation of that size; an attack gives an upper bound
(what papers print beside it) and a cross-check of soundness: inside a
certified region no attack may change the smoothed prediction.

The attack is SmoothAdv's (Salman et al., NeurIPS 2019): projected gradient
ascent on the cross-entropy of the *soft* smoothed classifier, whose
probability of class ``y`` at ``x'`` is estimated, at each step, by the
average softmax of the base network over ``n_draws`` fresh noise draws::

    loss(x') = -log( (1/m) sum_j softmax(f(x' + offset + S z_j))_y )

with the same noise family and scale ``S`` (and UCAN's offset) that the
estimator's strategy chose at the clean input ``x``: the smoothed classifier
whose certificate at ``x`` states its prediction on a region around ``x``.
For data-dependent strategies (``isotropic_dd``, ``ancer``, ``rancer``,
``rddrs``, ``ucan_input``) this is the natural attack on the certificate; the
scale the strategy would choose at the attacked point is not used. Steps are
l2 PGD (normalised gradient, projection onto the l2 ball) for the gaussian
family, and sparse l1 steps (Tramer and Boneh, 2019: the sign of the
gradient on its largest coordinates, normalised in l1) with the exact
projection onto the l1 ball (Duchi et al., 2008) for the uniform and laplace
families.

The prediction at the clean and at the attacked point is Cohen et al.'s
PREDICT with the estimator's ``alpha`` on ``n_predict`` draws of the
estimator's estimation bank, run with the clean input's scale, so it is the
smoothed classifier the certificate speaks of (the memory of data-dependent
strategies is not consulted). An input counts as robust at radius ``r`` when
PREDICT returns the true label at ``x`` and at ``x + delta``; an abstention
counts as wrong.

:func:`attack_certified_regions` attacks each certified prediction anywhere in
its own certified region (anisotropic, rotated or cut by the memory), not
only in the ball of its inscribed radius: a check of soundness of the whole
region.
"""

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .banks import ESTIMATION, bank_key
from .blocks import INPUT_BLOCK
from .bounds import predict_from_counts

__all__ = [
    "AttackResult",
    "attack_certified_regions",
    "empirical_robust_accuracy",
    "project_l1_ball",
    "smoothed_pgd_attack",
]


@dataclass(frozen=True)
class AttackResult:
    """What a PGD attack on a smoothed classifier found at one radius.

    Attributes
    ----------
    radius : float
        The attack's radius, in ``norm`` (1 for
        :func:`attack_certified_regions`: the unit ball each region maps).
    norm : {'l2', 'l1'}
    y_true : ndarray of shape (n_samples,)
    clean_label, attacked_label : ndarray of shape (n_samples,)
        PREDICT at ``x`` and at ``x + perturbation`` (the abstain label where
        it abstained).
    clean_abstained, attacked_abstained : ndarray of bool, shape (n_samples,)
    perturbation : ndarray of shape (n_samples, n_features)
        The perturbation evaluated, as the float32 inputs differ from the clean
        ones (in float64); its norm is at most ``radius`` (it lies in the
        certified region, for :func:`attack_certified_regions`).
    robust : ndarray of bool, shape (n_samples,)
        Correct at ``x`` and at ``x + perturbation``.
    """

    radius: float
    norm: str
    y_true: np.ndarray
    clean_label: np.ndarray
    attacked_label: np.ndarray
    clean_abstained: np.ndarray
    attacked_abstained: np.ndarray
    perturbation: np.ndarray
    robust: np.ndarray

    @property
    def accuracy(self):
        """Empirical robust accuracy: the share of robust inputs."""
        return float(self.robust.mean()) if len(self.robust) else 0.0

    def flips_inside(self, certificates):
        """Inputs whose certified prediction the attack changed inside its region.

        A flip is an input that ``certificates`` certify (not abstained), whose
        perturbation lies in its certified region
        (:meth:`~smoothlearn.regions.Certificates.contains`) and at which
        PREDICT returns another class (an abstention is not a flip: PREDICT
        abstains where the top two classes are close, which a certificate
        allows). For a sound certificate this is rare: each certificate and
        each PREDICT fail with probability at most ``alpha``.

        Parameters
        ----------
        certificates : Certificates
            Of the same inputs, in the same order.

        Returns
        -------
        ndarray of bool, shape (n_samples,)
        """
        if len(certificates) != len(self.robust):
            raise ValueError("certificates must be of the attacked inputs")
        label = np.asarray(certificates.label).astype(object)
        flips = np.zeros(len(self.robust), dtype=bool)
        for i in np.flatnonzero(~np.asarray(certificates.abstained, dtype=bool)):
            if self.attacked_abstained[i]:
                continue
            if self.attacked_label[i] != label[i] and certificates.contains(
                int(i), self.perturbation[i]
            ):
                flips[i] = True
        return flips

    def __repr__(self):
        return (
            f"AttackResult(radius={self.radius:g}, norm={self.norm!r}, "
            f"n={len(self.robust)}, accuracy={self.accuracy:.4g}, "
            f"clean_accuracy={float(np.mean(self.clean_correct)):.4g})"
        )

    @property
    def clean_correct(self):
        """PREDICT at ``x`` returns the true label."""
        return (~self.clean_abstained) & (
            self.clean_label.astype(object) == self.y_true.astype(object)
        )


def project_l1_ball(v, radius):
    """Euclidean projection of each row of ``v`` onto the l1 ball of ``radius``.

    The exact sort-based projection of Duchi et al. (ICML 2008): rows inside
    the ball are unchanged; others become ``sign(v) max(|v| - theta, 0)``
    with the ``theta`` that puts them on the sphere. Rounding may leave a row
    a few ulps outside; a final rescale puts it inside.

    Parameters
    ----------
    v : torch.Tensor of shape (m, d)
    radius : float

    Returns
    -------
    torch.Tensor of shape (m, d)

    Examples
    --------
    >>> import torch
    >>> project_l1_ball(torch.tensor([[3.0, 1.0], [0.2, -0.3]]), 1.0)
    tensor([[ 1.0000,  0.0000],
            [ 0.2000, -0.3000]])
    """
    magnitude = v.abs()
    outside = magnitude.sum(dim=1) > radius
    if not bool(outside.any()):
        return v
    u = magnitude[outside].sort(dim=1, descending=True).values
    cumulative = u.cumsum(dim=1) - radius
    ranks = torch.arange(1, u.shape[1] + 1, device=v.device, dtype=v.dtype)
    # the largest rank j with u_j > (cumsum_j - radius) / j (j = 1 always holds)
    positive = u * ranks > cumulative
    rho = positive.to(v.dtype).mul(ranks).argmax(dim=1, keepdim=True)
    theta = cumulative.gather(1, rho) / (rho + 1).to(v.dtype)
    projected = torch.sign(v[outside]) * (magnitude[outside] - theta).clamp_min(0)
    out = v.clone()
    out[outside] = _rescaled_inside(projected, radius, 1)
    return out


def _rescaled_inside(v, radius, p):
    """``v`` with each row whose ``p``-norm exceeds ``radius`` scaled onto it,
    a little inside (rounding of the norm and the product)."""
    norm = torch.linalg.vector_norm(v, ord=p, dim=1, keepdim=True)
    factor = torch.where(
        norm > radius, radius * (1 - 4 * torch.finfo(v.dtype).eps) / norm, 1.0
    )
    return v * factor


def _check_attack_params(radii, n_steps, step_size, n_restarts, n_draws, n_predict):
    radii = np.asarray(radii, dtype=np.float64)
    if radii.ndim > 1 or not np.all(np.isfinite(radii)) or np.any(radii < 0):
        raise ValueError(
            f"radius must be a finite number >= 0 or a list of them; got {radii!r}."
        )
    for name, value in (
        ("n_steps", n_steps),
        ("n_restarts", n_restarts),
        ("n_draws", n_draws),
    ):
        if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {value!r}.")
    if n_predict is not None and (
        not isinstance(n_predict, Integral)
        or isinstance(n_predict, bool)
        or n_predict < 1
    ):
        raise ValueError(
            f"n_predict must be an integer >= 1 or None; got {n_predict!r}."
        )
    if step_size is not None and not (
        isinstance(step_size, Real) and np.isfinite(step_size) and step_size > 0
    ):
        raise ValueError(f"step_size must be a number > 0 or None; got {step_size!r}.")
    return radii


def _class_indices(classes, y):
    """Index of each label in ``classes`` (-1 for labels not among them)."""
    position = {label: i for i, label in enumerate(np.asarray(classes).tolist())}
    return np.array([position.get(label, -1) for label in np.asarray(y).tolist()])


class _SoftLoss:
    """The attack's objective for one block: ``-log`` of the soft smoothed
    probability of the target class, each input under its own clean scale."""

    def __init__(self, network, family, run, centres, target, n_draws, generator):
        device = network.device
        self.network, self.family = network, family
        self.scale = run.map(
            lambda a: torch.as_tensor(np.asarray(a, np.float32), device=device),
            offset=False,
        )
        offset = 0.0 if run.offset is None else np.asarray(run.offset, np.float32)
        # the noise is centred at x + offset (UCAN's generators), moved by delta
        self.centres = network.inputs(np.asarray(centres, np.float32) + offset)
        self.target = torch.as_tensor(np.maximum(target, 0), device=device)
        self.n_draws, self.generator = n_draws, generator

    def draws(self):
        return self.family.sample(
            (self.n_draws, self.network.n_features),
            generator=self.generator,
            device=self.network.device,
        )

    def __call__(self, delta, z):
        """Per-input loss, shape (m,), at ``x + delta`` on draws ``z``."""
        m, d = delta.shape
        noisy = self.scale.perturb(self.centres + delta, z)  # (m, w, d)
        probs = self.network.probabilities(noisy.reshape(-1, d)).reshape(
            m, z.shape[0], -1
        )
        soft = probs.mean(dim=1).gather(1, self.target[:, None])[:, 0]
        return -torch.log(soft.clamp_min(torch.finfo(soft.dtype).tiny))


def _ascent_step(grad, norm, sparsity):
    """The steepest-ascent direction of unit ``norm`` for ``grad`` (m, d)."""
    if norm == "l2":
        length = torch.linalg.vector_norm(grad, dim=1, keepdim=True)
        return grad / length.clamp_min(torch.finfo(grad.dtype).tiny)
    # l1: the sign on the largest |grad| coordinates (a share 1 - sparsity of
    # them, at least one), normalised in l1 (SLIDE's sparse step)
    magnitude = grad.abs()
    keep = max(1, int(round((1.0 - sparsity) * grad.shape[1])))
    threshold = magnitude.topk(keep, dim=1).values[:, -1:]
    direction = torch.sign(grad) * (magnitude >= threshold) * (magnitude > 0)
    count = direction.abs().sum(dim=1, keepdim=True)
    return direction / count.clamp_min(1.0)


def _project(delta, radius, norm):
    if norm == "l2":
        return _rescaled_inside(delta, radius, 2)
    return project_l1_ball(delta, radius)


def _random_start(shape, radius, norm, generator, device):
    """A random point of the ball (uniform direction, radius scaled by U^(1/d))."""
    m, d = shape
    u = torch.rand((m, 1), generator=generator, device=device) ** (1.0 / d)
    if norm == "l2":
        v = torch.randn(shape, generator=generator, device=device)
        v = v / torch.linalg.vector_norm(v, dim=1, keepdim=True)
    else:
        e = torch.empty(shape, device=device).exponential_(generator=generator)
        sign = torch.randint(0, 2, shape, generator=generator, device=device) * 2 - 1
        v = sign * e / e.sum(dim=1, keepdim=True)
    return v * u * radius


def _pgd(
    loss, m, d, radius, norm, n_steps, step_size, n_restarts, generator, shape=None
):
    """The ``u`` of each input with the largest loss over the restarts.

    PGD over ``u`` in the ball of ``radius`` (in ``norm``); the classifier's
    input is perturbed by ``shape(u)`` (a region's linear map ``T_i u``, so
    that the ball maps onto the region; a pipeline's linear part ``A u``), or
    by ``u`` itself when ``shape`` is None.
    """
    device = loss.network.device
    shape = (lambda u: u) if shape is None else shape
    best = torch.zeros((m, d), device=device)
    if radius == 0:
        return best
    best_loss = torch.full((m,), -np.inf, device=device)
    judge = loss.draws()  # one set of draws to compare the restarts on
    for restart in range(n_restarts):
        u = (
            torch.zeros((m, d), device=device)
            if restart == 0
            else _random_start((m, d), radius, norm, generator, device)
        )
        for _ in range(n_steps):
            u.requires_grad_(True)
            with torch.enable_grad():
                value = loss(shape(u), loss.draws()).sum()
                (grad,) = torch.autograd.grad(value, u)
            with torch.no_grad():
                u = u + step_size * _ascent_step(grad, norm, 0.99)
                u = _project(u, radius, norm)
        with torch.no_grad():
            final = loss(shape(u), judge)
            better = final > best_loss
            best[better], best_loss[better] = u[better], final[better]
    return best


def _in_ball(radius, norm):
    """A membership test of the ball of ``radius``: rows of (m, d) -> (m,)."""
    ord_ = 2 if norm == "l2" else 1
    return lambda actual: np.linalg.norm(actual, ord=ord_, axis=1) <= radius


def _evaluated(X, delta, inside, dtype=np.float32):
    """``(attacked, perturbation)``: the attacked inputs (of ``dtype``, as
    the classifier or a pipeline takes them) and how they differ from ``X`` in
    float64, shrunk until ``inside`` holds of that difference (the set is
    convex and holds 0)."""
    delta = np.array(delta, dtype=np.float64)
    # shrinks of 2^-20, 2^-19, ..., 1/2, then 0 (always inside)
    for k in range(22):
        attacked = (X + delta).astype(dtype)
        actual = attacked.astype(np.float64) - X.astype(np.float64)
        over = ~inside(actual)
        if not over.any():
            break
        delta[over] *= 1.0 - 2.0 ** (k - 20)
    return attacked, actual


def _attack_seed(seed, radius):
    """The attack's torch seed at ``radius`` (a pure function of both)."""
    bits = int(np.float64(radius).view(np.uint64))
    return int(
        np.random.SeedSequence([seed, bits]).generate_state(1, np.uint64)[0] >> 1
    )


def smoothed_pgd_attack(
    estimator,
    X,
    y,
    radius,
    *,
    space="input",
    n_steps=20,
    step_size=None,
    n_restarts=1,
    n_draws=16,
    n_predict=None,
    random_state=None,
):
    """Attack a fitted smoothed classifier by PGD on its soft output (SmoothAdv).

    See the module docstring for the objective, the scale used at the
    attacked point and what counts as robust. The attack runs on the
    estimator's device, in blocks of 64 inputs.

    Parameters
    ----------
    estimator : SmoothedClassifier, Pipeline or fitted search
        Fitted: a :class:`~smoothlearn.SmoothedClassifier`, or a pipeline
        (or refit ``GridSearchCV``) ending in one, as
        :func:`~smoothlearn.certify_estimator` takes.
    X : array-like of shape (n_samples, n_features) or (n_samples, C, H, W)
        Inputs as the estimator takes them (before its preprocessing).
    y : array-like of shape (n_samples,)
        True labels.
    radius : float or array-like of floats
        The attack's radius (or radii), in the noise family's norm (l2 for
        gaussian, l1 for uniform and laplace), in ``space``'s units.
    space : {'input', 'model'}, default='input'
        Behind a pipeline's steps, where the attacker perturbs, as
        :func:`~smoothlearn.certify_estimator`'s certificates speak:
        ``'input'``, ``X`` itself (the steps must be affine maps smoothlearn
        knows; PGD searches ``u`` in ``X``'s units, the classifier seeing
        ``z + A u``, and each attacked point is judged at the steps'
        transform of ``x + u``); ``'model'``, the inputs the classifier sees
        (exactly an attack on ``pipe[-1]`` of ``pipe[:-1].transform(X)``).
        Without steps both are ``X``'s units.
    n_steps : int, default=20
        Gradient steps per restart.
    step_size : float, default=None
        Length of each step in the family's norm; ``2.5 * radius / n_steps``
        when None (Madry et al.'s rule: the ball's far side is reachable).
    n_restarts : int, default=1
        The first restart starts at ``x``, later ones at random points of the
        ball; each input keeps the restart with the largest loss.
    n_draws : int, default=16
        Noise draws per step (``m`` of SmoothAdv), fresh at each step.
    n_predict : int, default=None
        Draws of PREDICT at the clean and the attacked point; the estimator's
        ``n`` when None. Fewer draws abstain more (counted as wrong).
    random_state : int, RandomState instance or None, default=None
        Seed of the attack's draws and restarts (the estimator's own
        ``random_state`` keys the strategy's choices and PREDICT's bank).

    Returns
    -------
    AttackResult or list of AttackResult
        One per radius (a list for a list of radii).
    """
    radii = _check_attack_params(
        radius, n_steps, step_size, n_restarts, n_draws, n_predict
    )
    estimator, X_flat, preimage = _attack_target(
        estimator, X, space, "smoothed_pgd_attack"
    )
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != len(X_flat):
        raise ValueError(
            f"y must be 1-d with one label per input; got {y.shape} for "
            f"{len(X_flat)} inputs."
        )
    balls = [_Ball(float(r), None) for r in radii.reshape(-1)]
    settings = (n_steps, step_size, n_restarts, n_draws, n_predict, random_state)
    target = _class_indices(estimator.classes_, y)
    clean_index, attacked, perturbation, norm = _attack(
        estimator, X_flat, target, balls, *settings, preimage=preimage
    )
    results = [
        _result(
            estimator, y, target, clean_index, attacked[j], perturbation[j], r, norm
        )
        for j, r in enumerate(radii.reshape(-1))
    ]
    return results[0] if radii.ndim == 0 else results


@dataclass(frozen=True)
class _Ball:
    """Where one attack searches: the ball of ``radius`` in the family's norm,
    mapped by each row's certified region (``T_i u``) when ``regions`` is a
    Certificates."""

    radius: float
    regions: object

    def shape(self, rows, device):
        """The map ``u -> delta`` of rows ``rows``, or None (the identity)."""
        if self.regions is None:
            return None
        cert = self.regions
        d = cert.n_features
        maps = [
            np.zeros(d)
            if cert.abstained[i]
            else cert.scales.diagonal_or_dense(i, d, factor=cert.c * cert.gap[i])
            for i in range(rows.start, rows.stop)
        ]
        if all(t.ndim == 1 for t in maps):
            diagonal = torch.as_tensor(
                np.stack(maps), dtype=torch.float32, device=device
            )
            return lambda u: u * diagonal
        dense = torch.as_tensor(
            np.stack([np.diag(t) if t.ndim == 1 else t for t in maps]),
            dtype=torch.float32,
            device=device,
        )
        return lambda u: (dense @ u[:, :, None])[:, :, 0]

    def inside(self, rows, norm):
        """The membership test of the attacked set, for rows ``rows``."""
        if self.regions is None:
            return _in_ball(self.radius, norm)
        offset = rows.start
        return lambda actual: np.array(
            [
                self.regions.abstained[offset + j]
                and not np.any(actual[j])
                or bool(self.regions.contains(offset + j, actual[j]))
                for j in range(len(actual))
            ]
        )


class _Preimage:
    """The inputs of a pipeline and its affine steps before the smoothed
    classifier: the attack searches ``u`` in the inputs' units, the classifier
    sees ``z + A u`` while it searches (``A`` the steps' linear part, exact
    for an affine map) and the steps' own transform of ``x + u`` when the
    attacked point is judged."""

    def __init__(self, X, steps, a, classifier):
        self.columns = getattr(X, "columns", None)
        X = np.asarray(X)
        self.dtype = X.dtype if np.issubdtype(X.dtype, np.floating) else np.float64
        self.X = X.reshape(len(X), -1).astype(np.float64)
        self.steps, self.a, self.classifier = steps, a, classifier

    @property
    def n_features(self):
        return self.X.shape[1]

    def shape(self, device):
        """``u -> A u`` on rows of ``u`` (torch)."""
        a = torch.as_tensor(self.a, dtype=torch.float32, device=device)
        if a.ndim == 1:
            return lambda u: u * a
        return lambda u: u @ a.T

    def evaluated(self, rows, u, inside):
        """``(Z, perturbation)``: the classifier's inputs at the attacked
        points of rows ``rows`` and the perturbations in the inputs' units."""
        attacked, actual = _evaluated(self.X[rows], u, inside, dtype=self.dtype)
        Z = attacked
        if self.columns is not None:  # steps fitted on a data frame
            import pandas as pd

            Z = pd.DataFrame(attacked, columns=self.columns)
        for step in self.steps:
            Z = step.transform(Z)
        return self.classifier._validate_X(Z), actual


def _attack_target(estimator, X, space, name):
    """``(classifier, X_flat, preimage)``: the smoothed classifier that
    ``estimator`` ends in, its inputs (after the steps before it) and, for
    ``space='input'`` behind steps, the :class:`_Preimage` the attack
    searches in."""
    from .estimators import SmoothedClassifier
    from .pipeline import SPACES, _compose, affine_map, smoothed_classifier_of

    if not (isinstance(space, str) and space in SPACES):
        raise ValueError(f"space must be 'input' or 'model'; got {space!r}.")
    try:
        steps, classifier = smoothed_classifier_of(estimator)
    except TypeError:
        steps, classifier = [], None
    if not isinstance(classifier, SmoothedClassifier):
        raise TypeError(
            f"{name} attacks a fitted SmoothedClassifier, or a Pipeline or fitted "
            f"search ending in one; got {type(estimator).__name__}."
        )
    if not steps:
        return classifier, classifier._validate_X(X), None
    check_is_fitted(classifier)
    Z = X
    for step in steps:
        Z = step.transform(Z)
    Z_flat = classifier._validate_X(Z)
    if space == "model":
        return classifier, Z_flat, None
    a = _compose([affine_map(step) for step in steps])
    if a is None:
        unknown = [type(s).__name__ for s in steps if affine_map(s) is None]
        raise ValueError(
            f"space='input' attacks in X's units through the steps before the "
            f"classifier, and {', '.join(unknown)} is not an affine map "
            "smoothlearn knows; attack with space='model' (radii in the "
            "classifier's space)."
        )
    return classifier, Z_flat, _Preimage(X, steps, a, classifier)


def _attack(
    estimator,
    X_flat,
    target,
    balls,
    n_steps,
    step_size,
    n_restarts,
    n_draws,
    n_predict,
    random_state,
    preimage=None,
):
    """The attack of each ball in ``balls``: ``(clean_index, attacked_index,
    perturbation, norm)``, the indices -1 where PREDICT abstained.

    ``X_flat`` are the classifier's inputs; with ``preimage`` (a
    :class:`_Preimage`) the balls and the perturbations are in the units of
    the pipeline's inputs."""
    strategy = estimator._certification_strategy()
    task = estimator._task(strategy)
    network, family = task.network, task.family
    norm = family.norm
    key = bank_key(estimator.random_state)
    n_predict = estimator.n if n_predict is None else int(n_predict)
    seed = check_random_state(random_state).randint(2**31 - 1)
    generator = torch.Generator(device=network.device)
    bank = task.bank(key, ESTIMATION, X_flat.shape[1])
    n_inputs = len(X_flat)
    d = X_flat.shape[1] if preimage is None else preimage.n_features
    clean_index = np.empty(n_inputs, dtype=np.intp)
    attacked_index = np.empty((len(balls), n_inputs), dtype=np.intp)
    perturbation = np.empty((len(balls), n_inputs, d))
    network.module.eval()
    for start in range(0, n_inputs, INPUT_BLOCK):
        rows = slice(start, min(start + INPUT_BLOCK, n_inputs))
        Xb = X_flat[rows]
        # the scale chosen at the clean input, as the engine runs it
        run, _ = task.prepare(Xb, key)
        clean_index[rows] = predict_from_counts(
            task.count(Xb, run, bank, n_predict), estimator.alpha
        )
        loss = _SoftLoss(network, family, run, Xb, target[rows], n_draws, generator)
        for j, ball in enumerate(balls):
            # every block and ball starts from the same draws: an input's
            # attack depends on its block position, not on the other blocks
            # or on the other radii asked for
            generator.manual_seed(_attack_seed(seed, ball.radius))
            r = ball.radius
            size = 2.5 * r / n_steps if step_size is None else step_size
            if preimage is None:
                shape = ball.shape(rows, network.device)
            else:
                shape = preimage.shape(network.device)
            u = _pgd(
                loss,
                len(Xb),
                d,
                r,
                norm,
                n_steps,
                size,
                n_restarts,
                generator,
                shape=shape,
            )
            inside = ball.inside(rows, norm)
            if preimage is not None:  # judged at the steps' transform of x + u
                attacked, actual = preimage.evaluated(
                    rows, u.detach().cpu().numpy(), inside
                )
            else:
                delta = u if shape is None else shape(u)
                attacked, actual = _evaluated(Xb, delta.detach().cpu().numpy(), inside)
            perturbation[j, rows] = actual
            attacked_index[j, rows] = predict_from_counts(
                task.count(attacked, run, bank, n_predict), estimator.alpha
            )
    return clean_index, attacked_index, perturbation, norm


def _result(estimator, y, target, clean_index, attacked_index, perturbation, r, norm):
    clean_ok = (clean_index >= 0) & (clean_index == target)
    attacked_ok = (attacked_index >= 0) & (attacked_index == target)
    return AttackResult(
        radius=float(r),
        norm=norm,
        y_true=y,
        clean_label=estimator._labels(clean_index),
        attacked_label=estimator._labels(attacked_index),
        clean_abstained=clean_index < 0,
        attacked_abstained=attacked_index < 0,
        perturbation=perturbation,
        robust=clean_ok & attacked_ok & (target >= 0),
    )


def attack_certified_regions(
    estimator,
    X,
    certificates,
    *,
    n_steps=20,
    step_size=None,
    n_restarts=1,
    n_draws=16,
    n_predict=None,
    random_state=None,
):
    """Attack each certified prediction inside its own certified region.

    A check of soundness over the whole region, not only its inscribed ball:
    PGD (as :func:`smoothed_pgd_attack`) on ``u`` in the unit ball of the
    family's norm, the perturbation being ``T_i u`` with ``T_i = c gap_i S_i``,
    which maps that ball onto row ``i``'s region as certified (after the
    memory, cuts included); the target is the certified class. Abstained rows
    are not attacked.

    Parameters
    ----------
    estimator : SmoothedClassifier
        Fitted; ``certificates`` are its certificates of ``X``.
    X : array-like of shape (n_samples, n_features) or (n_samples, C, H, W)
    certificates : Certificates
        Of ``X``, in its units (no preprocessing map).
    n_steps, step_size, n_restarts, n_draws, n_predict, random_state
        As :func:`smoothed_pgd_attack`; ``step_size`` is in ``u``'s unit ball
        (``2.5 / n_steps`` when None).

    Returns
    -------
    AttackResult
        ``radius`` 1 (the unit ball of ``u``), ``y_true`` the certified
        labels: ``robust`` says the prediction held at the attacked point,
        and ``flips_inside(certificates)`` where it changed (none, for sound
        certificates, up to each PREDICT's and certificate's ``alpha``).
    """
    from .estimators import SmoothedClassifier

    if not isinstance(estimator, SmoothedClassifier):
        raise TypeError(
            "attack_certified_regions attacks a fitted SmoothedClassifier; got "
            f"{type(estimator).__name__}."
        )
    _check_attack_params(1.0, n_steps, step_size, n_restarts, n_draws, n_predict)
    X_flat = estimator._validate_X(X)
    if (
        getattr(certificates, "input_map", None) is not None
        or len(certificates) != len(X_flat)
        or not np.allclose(certificates.center, X_flat)
    ):
        raise ValueError(
            "certificates must be the estimator's certificates of X, in X's units"
        )
    target = np.asarray(certificates.class_index, dtype=np.intp)
    settings = (n_steps, step_size, n_restarts, n_draws, n_predict, random_state)
    clean_index, attacked, perturbation, norm = _attack(
        estimator, X_flat, target, [_Ball(1.0, certificates)], *settings
    )
    return _result(
        estimator,
        np.asarray(certificates.label),
        target,
        clean_index,
        attacked[0],
        perturbation[0],
        1.0,
        norm,
    )


def empirical_robust_accuracy(estimator, X, y, radius, **attack_params):
    """Share of inputs the smoothed classifier keeps right under a PGD attack.

    An upper bound (up to the attack's strength and PREDICT's ``alpha``) of
    the accuracy at ``radius``, where certified accuracy is a lower bound:
    :func:`smoothed_pgd_attack`'s ``accuracy``.

    Parameters
    ----------
    estimator : SmoothedClassifier, Pipeline or fitted search
    X : array-like of shape (n_samples, n_features) or (n_samples, C, H, W)
    y : array-like of shape (n_samples,)
    radius : float or array-like of floats
    **attack_params
        ``space``, ``n_steps``, ``step_size``, ``n_restarts``, ``n_draws``,
        ``n_predict``, ``random_state`` of :func:`smoothed_pgd_attack`.

    Returns
    -------
    float or ndarray
        One per radius.
    """
    results = smoothed_pgd_attack(estimator, X, y, radius, **attack_params)
    if isinstance(results, AttackResult):
        return results.accuracy
    return np.array([r.accuracy for r in results])
