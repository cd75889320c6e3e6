"""SmoothedClassifier: a certifiably robust classifier by randomized smoothing."""

import inspect
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from .._checkpoint import CheckpointLog, run_fingerprint
from ..banks import bank_key
from ..blocks import BlockResult, run_blocks
from ..bounds import predict_from_counts
from ..certify import SmoothingTask
from ..denoisers import DenoisedNetwork, DiffusionDenoiser
from ..grid import Grid, resolve_grid
from ..network import check_output_size, network_arithmetic
from ..noise import NOISES, get_noise
from ..regions import Certificates, class_labels, resolve_abstain_label
from ..strategies import STRATEGIES, certification_strategy, get_strategy
from ..strategies._base import describe_smoothing
from ..training import TRAININGS, get_training
from ..utils._sklearn_compat import (
    HasMethods,
    Interval,
    StrOptions,
    _fit_context,
    validate_data,
)
from ._memory import MemoryCertifier
from ._memory_keys import key_by_smoothing, remembered, resolved_rank_key
from ._noisy_net import (
    DENOISER_PREFIX,
    build_denoised_network,
    build_noisy_net,
    certification_network,
    check_denoised_module,
    is_denoiser_param,
    is_network_param,
)
from ._validation import (
    check_grid_strategy,
    check_nested_params,
    check_network_param_names,
    flatten_images,
    on_grid,
)

__all__ = ["SmoothedClassifier"]


class SmoothedClassifier(ClassifierMixin, BaseEstimator):
    """A neural-network classifier made certifiably robust by randomized smoothing.

    ``fit`` trains the base torch network through skorch on inputs carrying
    smoothing noise. ``predict`` returns the smoothed classifier's prediction
    ``g(x) = argmax_c P(f(x + S z) = c)`` by Cohen et al.'s PREDICT (it may
    abstain). ``certify`` returns, per input, the smoothed label and a region
    around the input on which that label is certified with probability at least
    ``1 - alpha`` (Cohen et al.'s CERTIFY).

    Parameters
    ----------
    module : torch.nn.Module class or instance, default=None
        The base network. ``None`` builds one sized from the data: an MLP for
        flat ``X`` of shape (n_samples, n_features), a small CNN for image
        ``X`` of shape (n_samples, C, H, W). Parameters of the module are set
        as ``module__<name>=value``, as in skorch. An instance is copied, never
        modified; with ``max_epochs=0`` it is used as given (pre-trained).
        With a ``denoiser``, the trained network (an instance) to certify:
        it is used frozen, and only the denoiser is trained.

    denoiser : None, 'auto', torch.nn.Module class or instance, default=None
        Denoised smoothing (Salman et al. 2020): smooth ``module(D(x))``, a
        denoiser ``D`` in front of the frozen, already trained ``module``, so
        that a network trained on clean data certifies well
        (:mod:`smoothlearn.denoisers`). ``fit`` trains only ``D``, with the
        objective ``training`` names (``'stability'``, ``'mse'`` or
        ``'gaussian'``), and never modifies ``module`` (weights,
        ``requires_grad`` flags and train/eval mode stay as they were).
        ``'auto'`` builds a residual denoiser sized from the data: an MLP for
        flat inputs, a DnCNN-style CNN for images. A class is built with the
        ``denoiser__<name>`` parameters; an instance (a fitted ``denoiser_``,
        say) is copied and trained further. A
        :class:`~smoothlearn.denoisers.DiffusionDenoiser` (one step of a
        pretrained diffusion model, Carlini et al. 2023) is copied and never
        trained: ``fit`` only records the classes and the input shape (and
        trains UCAN's noise generator alone, where the strategy has one).
        None (the default) smooths ``module`` itself.

    strategy : {'cohen', 'fixed', 'isotropic_dd', 'ancer', 'rancer', 'rddrs', \
            'ucan_pattern', 'ucan_universal', 'ucan_input'} or BaseStrategy, \
            default='cohen'
        How the smoothing scale is chosen. ``'cohen'`` (alias ``'fixed'``) is
        isotropic noise of standard deviation ``sigma`` for every input;
        ``'isotropic_dd'`` optimises an isotropic scale per input (Alfarra et
        al.), ``'ancer'`` a diagonal one (Eiras et al.), ``'rancer'`` a diagonal
        one in the eigenbasis of the loss's input Hessian and ``'rddrs'`` a full
        SPD one (gaussian only; ``strategy__rank`` for O(d k) scales);
        ``'ucan_pattern'`` is
        UCAN's fixed spatial pattern (image inputs, used in training too);
        ``'ucan_universal'`` and ``'ucan_input'`` are UCAN's noise generators,
        trained with the network in ``fit`` (``noise_generator_``). An instance's
        parameters are reachable as ``strategy__<name>``. A strategy that
        trains nothing can be changed after ``fit`` with ``set_params``: the
        next ``certify`` uses it on the trained network.

    training : {'gaussian', 'consistency', 'macer', 'smoothadv', 'stability', \
            'mse'} or BaseTraining, default='gaussian'
        How the base network is trained (:mod:`smoothlearn.training`):
        ``'gaussian'`` is noise augmentation with the estimator's noise family
        and scale (Cohen et al.); ``'consistency'`` (Jeong & Shin), ``'macer'``
        (Zhai et al.) and ``'smoothadv'`` (Salman et al.) add their terms.
        With a ``denoiser``, how the denoiser is trained: ``'stability'``
        (cross-entropy against the frozen network's label of the clean input;
        ``y`` only gives ``classes_``), ``'mse'`` (reconstruction of the clean
        input) or ``'gaussian'`` (cross-entropy against ``y``). An
        instance's parameters are reachable as ``training__<name>``.

    noise : {'gaussian', 'uniform', 'laplace'}, default='gaussian'
        Noise family: gaussian certifies l2 regions, uniform and laplace l1
        regions.

    sigma : float, default=0.25
        Per-coordinate standard deviation of the noise (for every family).

    grid : None, float or 'auto', default=None
        Smoothing on the inputs' grid (:mod:`smoothlearn.grid`), so that a
        certificate holds for the arithmetic that runs: the inputs lie on
        multiples of this step (``1/255`` for 8-bit images in [0, 1], ``1/16``
        for scikit-learn's digits divided by 16, ``1`` for raw pixels), in the
        space this classifier sees (after any pipeline step before it). Noise
        is drawn exactly on the grid (the rounded family, from random
        integers against thresholds computed in mpmath), added in integers,
        and the network sees a fixed function of the integer vector; the
        certified region is the usual one, and it covers every grid point in
        it. ``'auto'`` detects the coarsest step ``1`` or ``1/q`` (q <= 256) of
        the training inputs in ``fit`` (``grid_``). Isotropic and diagonal
        scales only (cohen, isotropic_dd, ancer, ucan_pattern); per-input
        scale values are rounded to the nearest ``2^(i/256)``. None (the
        default) adds float noise: float32 arithmetic in ``x + S z`` is then
        not covered (Voracek and Hein, ICLR 2023).

    off_grid : {'raise', 'round'}, default='raise'
        With a ``grid``: refuse inputs off the grid (ValueError), or round
        them to the nearest grid point (the certificate is that point's).

    n0 : int, default=100
        Selection draws per input (which class to certify).

    n : int, default=100_000
        Estimation draws per input (the probability bound); also the draws of
        ``predict`` and ``predict_proba``. With ``radius_tolerance`` or
        ``certify(X, radius=r)``, the most an input may use.

    radius_tolerance : float in (0, 1) or None, default=None
        Input-specific sample sizes: each input's estimation size is the
        smallest (on a grid ``n 2^(-j/4)``, at least 100) whose expected
        certified radius is within this fraction of the expected radius at
        ``n``, planned from its ``n0`` selection draws
        (:func:`smoothlearn.bounds.plan_sample_sizes`). The selection draws
        are independent of the estimation draws, so every certificate keeps
        its ``1 - alpha`` guarantee. Inputs whose vote share is far from 1/2
        and from 1 need far fewer than ``n`` draws; ``0.01`` keeps about 99%
        of the mean radius. None spends ``n`` on every input.

    alpha : float, default=0.001
        Failure probability of each certificate and of each prediction.

    batch_size : int, default=1000
        Noisy inputs per forward pass when certifying and predicting. The
        training batch size is skorch's ``iterator_train__batch_size``.

    memory : 'auto', None or MemoryCertifier, default='auto'
        Memory-based certification for data-dependent strategies (those
        choosing the smoothing per input), whose certificates are otherwise
        not sound. ``'auto'`` keeps one :class:`MemoryCertifier` per
        data-dependent smoothing in ``memories_``, across calls, pickling and
        strategy switches (emptied by ``fit``); an instance is used as given
        for every strategy (its state included; ``fit`` leaves it as it is);
        None opts out with a warning. Fixed strategies such
        as ``'cohen'`` need none. ``predict`` of a data-dependent strategy is
        the memory-based decision, and so also updates the memory.

    abstain_label : 'auto' or object, default='auto'
        Label returned where the smoothed classifier abstains. ``'auto'``:
        -1 for numeric classes (one less than the smallest class if -1 is a
        class), ``'abstain'`` for string classes, so that predictions stay of
        one kind and ``score``, ``classification_report`` and scorers work.
        A label given must be of the classes' kind (number or string) and not
        one of them (checked in ``fit``).

    random_state : int, RandomState instance or None, default=None
        Seeds training and the noise banks. With an int, ``certify`` and
        ``predict`` are reproducible. With None every call draws fresh OS
        entropy: where inputs may be chosen adversarially never use a published
        seed (whoever picks the inputs could search for lucky noise).

    n_jobs : int, default=None
        Workers running blocks of inputs in parallel through joblib in
        ``certify``, ``predict``, ``predict_proba`` and ``noise_parameters``
        (None: one, -1: all cores). It changes nothing but float rounding: workers
        run torch with other thread counts, so a data-dependent strategy's
        optimised scales may differ in the last bits (radii before the
        memory agree to a relative 1e-4, and the memory's discrete choices
        may carry an ulp further; labels and abstentions are the same). Any
        joblib backend
        works, e.g. a dask cluster with
        ``joblib.parallel_config(backend="dask")``.

    device : str or torch.device, default='cpu'
        Where the network runs (e.g. ``'cuda'``), as in skorch. Several GPUs
        or a cluster: a Dask cluster with one worker per device and
        ``n_jobs`` (user guide, "Many devices").

    precision : {'fp32', 'bf16', 'fp16'}, default='fp32'
        The precision of the base network's passes in ``certify``,
        ``predict``, ``predict_proba``, ``score`` and a strategy's
        optimisation (autocast on ``device``; convolutions channels-last;
        training stays in float32). The base classifier is then the network
        at that precision: its certificates are as sound as fp32's, since
        every pass of every call runs the same function of the noisy input.
        It is part of the smoothing (``Certificates.smoothing``, the memory's
        key, a checkpoint's fingerprint). On a CPU with AVX-512 BF16, bf16
        certified 1.25x to 4x faster than fp32 with the same certified
        accuracy (user guide, "Speed"); fp16 is for GPUs (on a CPU it is
        emulated, several times slower).
    compile : bool or dict, default=False
        Certify and predict through :func:`torch.compile` of the network (a
        dict: its keyword arguments, e.g. ``{"mode": "max-autotune"}``),
        compiled on the first pass in each process; part of the smoothing,
        as ``precision``. Training runs eagerly.

    verbose : int, default=0
        Passed to skorch (training log: one line per epoch); from 1,
        ``certify``, ``predict``, ``predict_proba``, ``score`` and
        ``noise_parameters`` show a progress bar over inputs with the time
        remaining, and ``certify`` another over the memory step of
        data-dependent strategies. Without ``n_jobs`` workers the bar moves
        with each forward pass of noise draws, so its estimate of the time
        left comes from the first inputs; on workers it moves per block of
        64 inputs. A data-dependent strategy's optimisation of a block's
        noise runs before its draws are counted (the bar waits meanwhile).

    max_epochs : int, default=20
        Training epochs. 0 leaves the module's weights as given.

    lr : float, default=1e-3
        Learning rate.

    optimizer : torch optimizer class, default=torch.optim.Adam

    criterion : torch loss class, default=torch.nn.CrossEntropyLoss
        With ``CrossEntropyLoss`` the module outputs logits; with ``NLLLoss``
        probabilities (skorch's convention).

    callbacks : list or None, default=None
        skorch callbacks.

    train_split : callable or None, default=None
        skorch's validation split; None trains on all of ``X``.

    **kwargs
        skorch parameters with a prefix: ``module__*``, ``optimizer__*``,
        ``criterion__*``, ``iterator_train__*``, ``iterator_valid__*``,
        ``callbacks__*``, ``dataset__*``; and ``denoiser__*``, the built
        denoiser's parameters (``denoiser__hidden_units=(512,)``).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels (any labels; strings included).
    n_features_in_ : int
        Features of one input seen in ``fit``: ``X.shape[1]`` for flat inputs,
        ``C * H * W`` for images (each pixel of each channel is a feature, as
        scikit-learn counts them once images are flattened).
    input_shape_ : tuple of int
        Shape of one input seen in ``fit`` (``X.shape[1:]``).
    grid_ : float or None
        The grid step used: ``grid`` as given, or the one ``'auto'`` detected
        in ``fit`` (None: float noise). A step or None set after ``fit``
        takes effect at the next call; ``'auto'`` set after a ``fit`` with
        another value is refused (ValueError): it is resolved in ``fit``.
    net_ : skorch.NeuralNetClassifier
        The trained skorch network (its torch module is ``net_.module_``).
    noise_ : NoiseFamily
        The resolved noise family.
    strategy_ : BaseStrategy
        The resolved strategy (a fresh object or a clone of ``strategy``).
    training_ : BaseTraining
        The resolved training method.
    noise_generator_ : torch.nn.Module or None
        The trained UCAN noise generator (``'ucan_universal'``, ``'ucan_input'``),
        else None. Saved and restored with the estimator (pickle, joblib).
    denoiser_ : torch.nn.Module or None
        The trained denoiser (with ``denoiser``), else None: the front of
        ``net_.module_``, a :class:`~smoothlearn.denoisers.DenoisedNetwork`.
        Saved and restored with the estimator (pickle, joblib).
    memories_ : dict of str to MemoryCertifier
        The memories of data-dependent certificates, one
        :class:`MemoryCertifier` per smoothing, keyed by the smoothing written
        whole (``Certificates.smoothing``: strategy and parameters by value,
        noise family, ``sigma``), so that settings which run the same smoothing
        (``kappa=2`` and ``kappa=2.0``, a default given or left out, a renamed
        parameter under its old name) share one memory; emptied by ``fit``,
        kept by pickle, joblib and ``copy.deepcopy``, so a saved and reloaded
        classifier stays sound, and switching strategy A -> B -> A continues
        A's memory.
    memory_ : MemoryCertifier
        The memory used by the last data-dependent ``certify`` or ``predict``
        (one of ``memories_``, or the ``memory`` instance given).

    See Also
    --------
    smoothlearn.regions.Certificates : What ``certify`` returns.

    References
    ----------
    J. Cohen, E. Rosenfeld, Z. Kolter. Certified Adversarial Robustness via
    Randomized Smoothing. ICML 2019.

    Examples
    --------
    >>> import numpy as np
    >>> from smoothlearn import SmoothedClassifier
    >>> rng = np.random.RandomState(0)
    >>> X = rng.randn(60, 2).astype(np.float32)
    >>> y = (X[:, 0] > 0).astype(int)
    >>> clf = SmoothedClassifier(n=2000, max_epochs=30, lr=0.01, random_state=0)
    >>> cert = clf.fit(X, y).certify(X[:3])
    >>> cert.label.shape, cert.norm
    ((3,), 'l2')
    """

    _parameter_constraints: dict = {
        "module": [None, type, torch.nn.Module],
        "denoiser": [None, StrOptions({"auto"}), type, torch.nn.Module],
        "strategy": [StrOptions(set(STRATEGIES)), HasMethods(["scales"])],
        "training": [StrOptions(set(TRAININGS)), HasMethods(["loss"])],
        "noise": [StrOptions(set(NOISES)), HasMethods(["sample", "gap"])],
        "sigma": [Interval(Real, 0, None, closed="neither")],
        "grid": [None, StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "off_grid": [StrOptions({"raise", "round"})],
        "n0": [Interval(Integral, 1, None, closed="left")],
        "n": [Interval(Integral, 1, None, closed="left")],
        "radius_tolerance": [None, Interval(Real, 0, 1, closed="neither")],
        "alpha": [Interval(Real, 0, 0.5, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "memory": [
            StrOptions({"auto"}),
            None,
            HasMethods(["partial_fit", "transform"]),
        ],
        "abstain_label": "no_validation",
        "random_state": ["random_state"],
        "n_jobs": [None, Integral],
        "device": [str, torch.device],
        "precision": [StrOptions({"fp32", "bf16", "fp16"})],
        "compile": ["boolean", dict],
        "verbose": ["verbose"],
        "max_epochs": [Interval(Integral, 0, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "optimizer": [callable],
        "criterion": [callable],
        "callbacks": [list, None],
        "train_split": [callable, None],
    }

    def __init__(
        self,
        module=None,
        *,
        denoiser=None,
        strategy="cohen",
        training="gaussian",
        noise="gaussian",
        sigma=0.25,
        grid=None,
        off_grid="raise",
        n0=100,
        n=100_000,
        radius_tolerance=None,
        alpha=0.001,
        batch_size=1000,
        memory="auto",
        abstain_label="auto",
        random_state=None,
        n_jobs=None,
        device="cpu",
        precision="fp32",
        compile=False,
        verbose=0,
        max_epochs=20,
        lr=1e-3,
        optimizer=torch.optim.Adam,
        criterion=torch.nn.CrossEntropyLoss,
        callbacks=None,
        train_split=None,
        **kwargs,
    ):
        self.module = module
        self.denoiser = denoiser
        self.strategy = strategy
        self.training = training
        self.noise = noise
        self.sigma = sigma
        self.grid = grid
        self.off_grid = off_grid
        self.n0 = n0
        self.n = n
        self.radius_tolerance = radius_tolerance
        self.alpha = alpha
        self.batch_size = batch_size
        self.memory = memory
        self.abstain_label = abstain_label
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.device = device
        self.precision = precision
        self.compile = compile
        self.verbose = verbose
        self.max_epochs = max_epochs
        self.lr = lr
        self.optimizer = optimizer
        self.criterion = criterion
        self.callbacks = callbacks
        self.train_split = train_split
        # skorch-style parameters are stored under their own names, as skorch
        # does; their prefixes are checked in fit.
        self._network_param_names = tuple(kwargs)
        for name, value in kwargs.items():
            setattr(self, name, value)

    # ------------------------------------------------------------ parameters
    def _network_params(self):
        """The ``<prefix>__<name>`` parameters, the denoiser's included."""
        return {k: getattr(self, k) for k in self._network_param_names}

    def _skorch_params(self):
        """The ``<prefix>__<name>`` parameters skorch's net takes."""
        return {
            k: v for k, v in self._network_params().items() if not is_denoiser_param(k)
        }

    def _denoiser_params(self):
        """The ``denoiser__<name>`` parameters, without the prefix."""
        prefix = len(DENOISER_PREFIX) + 2
        return {
            k[prefix:]: v
            for k, v in self._network_params().items()
            if is_denoiser_param(k)
        }

    def get_params(self, deep=True):
        params = super().get_params(deep=deep)
        params.update(self._network_params())
        return params

    def set_params(self, **params):
        """Set parameters; ``strategy__<name>`` works with a strategy given by name.

        scikit-learn's nested parameters reach an object's own parameters.
        For ``strategy`` (and ``training``) given by name, ``strategy__kappa=3``
        first makes the name's object with its defaults (``'ancer'`` ->
        ``ANCER()``) and sets ``kappa`` on it, so ``GridSearchCV(clf,
        {"strategy__kappa": [1, 2]})`` and, through a pipeline,
        ``smoothedclassifier__strategy__kappa`` work. Invalid parameters raise
        before anything is set; a parameter of another strategy (or training)
        than the one set names those it belongs to.
        """
        for name, resolve in (("strategy", get_strategy), ("training", get_training)):
            prefix = f"{name}__"
            nested = {
                k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)
            }
            current = params.get(name, getattr(self, name))
            if nested:
                check_nested_params(name, current, nested)
            if nested and isinstance(current, str):
                # a fresh object of the name's defaults (its set_params checks
                # the names), then the nested values on it
                params = {k: v for k, v in params.items() if not k.startswith(prefix)}
                params[name] = resolve(current).set_params(**nested)
        network = {k: v for k, v in params.items() if is_network_param(k)}
        for name, value in network.items():
            setattr(self, name, value)
        new_names = [k for k in network if k not in self._network_param_names]
        self._network_param_names = self._network_param_names + tuple(new_names)
        rest = {k: v for k, v in params.items() if k not in network}
        return super().set_params(**rest) if rest else self

    def __setstate__(self, state):
        # a model saved by an earlier version lacks the parameters added
        # since: they take their defaults, which keep the earlier behaviour
        for name, param in inspect.signature(type(self).__init__).parameters.items():
            if param.default is not param.empty and name not in state:
                state[name] = param.default
        super().__setstate__(state)
        if "memories_" in self.__dict__ and "input_shape_" in self.__dict__:
            # an earlier version's keys: each memory under its smoothing, the
            # rank of rancer and rddrs as it ran ('auto' kept apart before)
            n_features = int(np.prod(self.input_shape_))
            self.memories_, moved = key_by_smoothing(
                self.memories_,
                resolve=lambda key: resolved_rank_key(
                    key, n_features, len(self.classes_)
                ),
            )
            if "memory_" in self.__dict__ and id(self.memory_) in moved:
                self.memory_ = moved[id(self.memory_)]

    # ------------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y):
        """Train the base network under smoothing noise.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, C, H, W)
            Training inputs.
        y : array-like of shape (n_samples,)
            Class labels (at least two classes).

        Returns
        -------
        self : SmoothedClassifier
        """
        check_network_param_names(
            self._network_param_names, self.strategy, self.training
        )
        X, image_shape = flatten_images(X)
        X, y = validate_data(self, X, y, dtype=np.float32)
        input_shape = image_shape or tuple(X.shape[1:])
        grid_step = resolve_grid(self.grid, X)
        if grid_step is not None:  # training inputs on the grid, as checked later
            X = on_grid(X, Grid(grid_step, self.off_grid))
        elif self.grid == "auto":
            warnings.warn(
                "grid='auto' found no grid step 1 or 1/q (q <= 256) that the "
                "training inputs lie on: certification adds float noise "
                "(grid_=None), whose float32 arithmetic is not covered.",
                UserWarning,
                stacklevel=2,
            )
        X = X.reshape(len(X), *input_shape)
        check_classification_targets(y)
        encoder = LabelEncoder()
        y_index = encoder.fit_transform(y).astype(np.int64)
        classes = encoder.classes_
        if len(classes) < 2:
            raise ValueError(
                f"SmoothedClassifier needs samples of at least 2 classes; got 1 class "
                f"({classes[0]!r})."
            )
        self._abstain_label(classes)
        family = get_noise(self.noise)
        strategy = get_strategy(self.strategy)
        strategy.check(family, input_shape)
        check_grid_strategy(grid_step, strategy)
        training = get_training(self.training)
        training.check(denoiser=self.denoiser is not None)
        check_denoised_module(
            self.module, self.denoiser, self._network_params(), self._denoiser_params()
        )

        seed = check_random_state(self.random_state).randint(np.iinfo(np.int32).max)
        # skorch has no random_state: seed torch locally so fit is reproducible
        # without touching the caller's global torch RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = self.module
            if self.denoiser is not None:
                # built under the seed (its initial weights) and checked
                # before any training
                module = build_denoised_network(
                    self.module,
                    self.denoiser,
                    self._denoiser_params(),
                    X,
                    len(classes),
                    sigma=self.sigma,
                    max_epochs=self.max_epochs,
                    device=self.device,
                )
            # built under the seed too: a strategy's modules (UCAN's generator)
            # take their initial weights when built
            net = build_noisy_net(
                module,
                input_shape,
                len(classes),
                family=family,
                training=training,
                noise_scale=strategy.training_scale(self.sigma, input_shape),
                network_params=self._skorch_params(),
                strategy_params=strategy.network_params(input_shape),
                max_epochs=self.max_epochs,
                lr=self.lr,
                optimizer=self.optimizer,
                criterion=self.criterion,
                callbacks=self.callbacks,
                train_split=self.train_split,
                device=self.device,
                verbose=self.verbose,
            )
            # a diffusion denoiser is used as given: nothing is trained but a
            # strategy's noise generator (UCAN's), through the frozen models
            fixed = isinstance(self.denoiser, DiffusionDenoiser)
            if self.max_epochs == 0 or (fixed and net.noise_generator is None):
                net.initialize()
            else:
                net.fit(X, y_index)
        check_output_size(net.module_, X[:1], len(classes), device=net.device)

        # a new base network: certificates of the old one constrain nothing
        self.__dict__.pop("memory_", None)
        self.memories_ = {}
        self.classes_ = classes
        self.input_shape_ = input_shape
        self.grid_ = grid_step
        self._grid_at_fit = self.grid  # 'auto' is resolved here, and only here
        self.noise_ = family
        self.noise_generator_ = getattr(net, "noise_generator_", None)
        strategy.attach(net)
        self.strategy_ = strategy
        self.training_ = training
        self.net_ = net
        return self

    @property
    def denoiser_(self):
        """The trained denoiser, or None without one (see the class docstring)."""
        if "net_" not in self.__dict__:
            raise AttributeError(
                "'SmoothedClassifier' object has no attribute 'denoiser_' (not fitted)"
            )
        # the front of the fitted network itself, not a second reference to it
        # (skorch pickles its module apart, which would split the two)
        network = self.net_.module_
        return network.denoiser if isinstance(network, DenoisedNetwork) else None

    # ---------------------------------------------------------- inference
    def _validate_X(self, X):
        """Check a fitted estimator and ``X``; return flat float32 inputs."""
        check_is_fitted(self)
        X, image_shape = flatten_images(X)
        X = validate_data(self, X, dtype=np.float32, reset=False)
        shape = image_shape or tuple(X.shape[1:])
        if shape != self.input_shape_:
            raise ValueError(
                f"X has inputs of shape {shape}, but SmoothedClassifier "
                f"was fitted on inputs of shape {self.input_shape_}."
            )
        return X

    def _abstain_label(self, classes=None):
        """The abstain marker for ``classes`` (the fitted ones by default)."""
        return resolve_abstain_label(
            self.abstain_label, self.classes_ if classes is None else classes
        )

    def _labels(self, class_index):
        """Class labels for class indices, the abstain label where -1."""
        return class_labels(self.classes_, class_index, self._abstain_label())

    def _certification_strategy(self):
        """The strategy used at certification time
        (:func:`~smoothlearn.strategies.certification_strategy`)."""
        return certification_strategy(
            self.strategy, self.strategy_, self.noise_, self.input_shape_
        )

    def _grid(self):
        """The :class:`~smoothlearn.grid.Grid` certification runs on, or None."""
        if self.grid is None:
            return None
        if self.grid != "auto":
            return Grid(self.grid, self.off_grid)
        # 'auto' names the step fit detected in the training inputs: set after
        # a fit that detected none (grid=None or a step), it is refused, not
        # read as float noise (a classifier pickled before this was recorded
        # is read as fitted with 'auto', the earlier behaviour)
        fitted = self.__dict__.get("_grid_at_fit", "auto")
        if fitted != "auto":
            raise ValueError(
                "grid='auto' is resolved from the training inputs in fit, and this "
                f"classifier was fitted with grid={fitted!r}: fit it again with "
                "grid='auto', or set the step itself (grid=1/255, say)."
            )
        step = self.__dict__.get("grid_")
        return None if step is None else Grid(step, self.off_grid)

    def _inputs(self, X):
        """Checked flat float32 inputs (:meth:`_validate_X`), on the grid where
        there is one: checked there before any work, or rounded to it."""
        X = self._validate_X(X)
        grid = self._grid()
        return X if grid is None else on_grid(X, grid)

    def _task(self, strategy, radius=None):
        """The engine's picture of this classifier under ``strategy``."""
        grid = self._grid()
        check_grid_strategy(grid, strategy)
        return SmoothingTask(
            network=certification_network(
                self.net_,
                self.input_shape_,
                len(self.classes_),
                precision=self.precision,
                compile=self.compile,
            ),
            strategy=strategy,
            family=self.noise_,
            sigma=self.sigma,
            n0=self.n0,
            n=self.n,
            alpha=self.alpha,
            batch_size=self.batch_size,
            radius_tolerance=self.radius_tolerance,
            radius=radius,
            grid=grid,
        )

    def _run_blocks(
        self, work, X_flat, key, checkpoint=None, draws_per_input=None, grouped=False
    ):
        return run_blocks(
            work,
            X_flat,
            key,
            n_jobs=self.n_jobs,
            verbose=self.verbose,
            checkpoint=checkpoint,
            draws_per_input=draws_per_input,
            grouped=grouped,
        )

    def certify(self, X, *, radius=None, checkpoint=None):
        """Certify the smoothed prediction of each input.

        Inputs are certified in blocks of ``INPUT_BLOCK`` (64), spread over
        ``n_jobs`` workers; data-dependent certificates then pass through the
        memory once, all together (:class:`MemoryCertifier`'s joint step:
        the answer depends neither on the order of the inputs nor on how the
        call was split; ``n_jobs`` changes only float rounding, see the
        parameter).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, C, H, W)
        radius : float, default=None
            Decide, for each input, whether it is certified at this radius
            (in the family's norm), spending only the draws that decision
            needs: the estimation draws are looked at after 390, 781, ...,
            ``n`` draws (halving from ``n``, from at least 256) and an input
            stops as soon as its bound reaches what ``radius`` needs, or its
            upper bound falls short of it. The last look spends ``alpha / 2``
            and the others share ``alpha / 2`` (a union bound,
            :mod:`smoothlearn.bounds`), so every returned certificate still
            holds with probability at least ``1 - alpha``; it is the
            certificate at the look where the input stopped, and
            ``certificates.radius >= radius`` is the decision. Certified
            accuracy at ``radius`` then costs a fraction of a full
            certification (``certified_accuracy_scorer`` does this). None
            estimates every bound with ``n`` draws (or ``radius_tolerance``).
        checkpoint : str or path-like, default=None
            A log file: each finished block of inputs is appended to it
            (flushed, fsynced). Calling again with the same file after an
            interruption computes only the missing blocks and returns the same
            certificates as an uninterrupted run. A log of another run
            (another model, strategy or setting) raises ValueError.

        Returns
        -------
        Certificates
            Per input: the label (or ``abstain_label``), the probability bound,
            and the certified region (radius, proxy radius and the scale that
            shapes it). See :class:`smoothlearn.regions.Certificates`.
        """
        if radius is not None and not (
            isinstance(radius, Real) and np.isfinite(radius) and radius >= 0
        ):
            raise ValueError(
                f"radius must be a finite number >= 0 or None; got {radius!r}."
            )
        # settings may have changed since fit (set_params): check them before work
        self._validate_params()
        X_flat = self._inputs(X)
        strategy = self._certification_strategy()
        memory = self._memory_for(strategy)
        # the task holds the network and strategy, not the estimator: workers
        # get no memory, which they never use and which may hold many regions
        task = self._task(strategy, radius=radius)
        log = None
        if checkpoint is not None:
            fingerprint = run_fingerprint(
                task,
                module=self.net_.module_,
                noise_generator=getattr(self, "noise_generator_", None),
                input_shape=self.input_shape_,
                classes=self.classes_,
            )
            log = CheckpointLog(checkpoint, fingerprint)
        # off the CPU the blocks a process holds share passes (one stream)
        streams = task.streams_blocks
        result = BlockResult.concatenate(
            self._run_blocks(
                task.certify_blocks if streams else task.certify,
                X_flat,
                bank_key(self.random_state),
                checkpoint=log,
                draws_per_input=self.n0 + self.n,
                grouped=streams,
            )
        )
        certificates = Certificates(
            label=self._labels(result.class_index),
            abstained=result.class_index < 0,
            p_lower=result.p_lower,
            gap=result.gap,
            center=X_flat,
            noise=self.noise_,
            class_index=result.class_index,
            strategy=strategy.name,
            smoothing=self._smoothing(strategy),
            abstain_label=self._abstain_label(),
            time=result.time,
            n_draws=result.n_draws,
            scale=result.scale,
        )
        if isinstance(memory, MemoryCertifier):
            return memory.transform(certificates, verbose=self.verbose)
        if memory is not None:  # a user's own memory-like object
            return memory.transform(certificates)
        return certificates

    def _memory_for(self, strategy):
        """The memory that makes ``strategy``'s certificates sound, or None.

        Part of the fitted state: one memory per data-dependent smoothing of
        the fitted network, in ``memories_`` under :meth:`_smoothing`, so it
        persists across calls, pickling and strategy switches (every answer
        given must constrain later ones) and only ``fit`` clears it.
        """
        if not strategy.data_dependent:
            return None
        if self.memory is None:
            warnings.warn(
                f"strategy {strategy.name!r} chooses its smoothing per input; with "
                "memory=None its certificates are not sound (an input's region may "
                "overlap another's of a different class). Use memory='auto'.",
                UserWarning,
                stacklevel=3,
            )
            return None
        if not isinstance(self.memory, str):
            # the user's own instance, state included (pickled with the estimator)
            self.memory_ = self.memory
            return self.memory_
        self.memory_ = remembered(self.memories_, self._smoothing(strategy))
        return self.memory_

    def _smoothing(self, strategy):
        """The smoothing ``strategy`` runs on this classifier, written whole.

        Strategy and parameters by value, choices made from the data resolved
        (rancer's ``rank='auto'`` as the rank it runs,
        :meth:`~smoothlearn.strategies.BaseStrategy.resolved`), noise family
        and ``sigma`` (the isotropic start):
        :func:`~smoothlearn.strategies.describe_smoothing`.
        It keys ``memories_`` (never an object's identity, never how a value
        prints) and is what certificates record.
        """
        n_features = int(np.prod(self.input_shape_))
        strategy = strategy.resolved(n_features, len(self.classes_))
        described = describe_smoothing(strategy, self.noise_, self.sigma)
        grid = self._grid()
        # another smoothed classifier (rounded noise, a function of the grid
        # point; another base network's arithmetic): its own memory and record
        if grid is not None:
            described += f" grid={grid.step!r}"
        return described + network_arithmetic(self.precision, self.compile)

    def _estimation_counts(self, X):
        X_flat = self._inputs(X)
        task = self._task(self._certification_strategy())
        counts = self._run_blocks(
            task.estimation_counts,
            X_flat,
            bank_key(self.random_state),
            draws_per_input=self.n,
        )
        return np.concatenate(counts)

    def noise_parameters(self, X):
        """The smoothing noise of each input: its mean offset and per-coordinate scale.

        The noise added to ``x`` when certifying is ``offset + scale * z`` with
        ``z`` from the noise family's standard form. The offset is zero except
        for UCAN's generators; data-dependent strategies run their optimisation
        (on the same draws as ``certify`` under a fixed ``random_state``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, C, H, W)

        Returns
        -------
        offset, scale : ndarray of the shape of ``X``

        Raises
        ------
        ValueError
            For rotated scales (no per-coordinate form); use
            ``certify(X).scale_matrix(i)``.
        """
        X_flat = self._inputs(X)
        task = self._task(self._certification_strategy())
        blocks = self._run_blocks(
            task.noise_parameters, X_flat, bank_key(self.random_state)
        )
        shape = (len(X_flat), *self.input_shape_)
        return (
            np.concatenate([offset for offset, _ in blocks])
            .reshape(shape)
            .astype(np.float32),
            np.concatenate([scale for _, scale in blocks]).reshape(shape),
        )

    def predict(self, X):
        """Smoothed prediction by Cohen et al.'s PREDICT (may abstain).

        The class with the most of ``n`` noisy votes is returned when a
        two-sided binomial test of the top two counts rejects a tie at level
        ``alpha``; otherwise ``abstain_label``.

        Cost: ``n`` forward passes of the base network per input (100,000 by
        default: about what :meth:`certify` costs, not one forward pass like
        an ordinary classifier's ``predict``); a data-dependent strategy adds
        its optimisation and ``n0`` draws, as :meth:`certify`. For a quick
        look at many inputs, ``set_params(n=1000)`` first (more abstentions
        at the same ``alpha``); ``verbose=1`` shows the time left.

        For a data-dependent strategy, predict is the memory-based decision
        (one procedure for certification and inference, ANCER section 6): the
        label of :meth:`certify`, which also remembers each answer in
        ``memories_`` so that later answers stay consistent with it. This is
        the one method besides ``fit`` that changes the estimator (declared to
        scikit-learn's ``check_dict_unchanged``); :meth:`predict_proba`
        changes nothing, and where predict decides, its argmax is predict's
        class.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, C, H, W)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        if self._certification_strategy().data_dependent:
            # one procedure for certification and inference (ANCER section 6):
            # the memory-based decision
            return self.certify(X).label
        return self._labels(predict_from_counts(self._estimation_counts(X), self.alpha))

    def predict_proba(self, X):
        """Smoothed class frequencies: the share of ``n`` noisy votes per class.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, C, H, W)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)

        Notes
        -----
        Cost: ``n`` forward passes per input, as :meth:`predict`.
        """
        return self._estimation_counts(X) / float(self.n)

    def score(self, X, y, sample_weight=None):
        """Accuracy of the smoothed prediction (:meth:`predict`) on ``X``.

        Abstentions count as wrong. Cost: a full noise sampling of every
        input, ``n`` forward passes each (:meth:`predict`), so scoring 100
        digits at the default ``n = 100,000`` takes about a minute on two CPU
        cores; ``verbose=1`` shows the time left. For model selection on
        certified quantities use the certificate scorers of
        :mod:`smoothlearn.metrics`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, C, H, W)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        score : float
        """
        return super().score(X, y, sample_weight=sample_weight)
