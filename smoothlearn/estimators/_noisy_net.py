"""The skorch network trained under smoothing noise, and the denoised network
(a denoiser in front of a user's frozen network) it trains with a denoiser."""

import copy
import threading
import weakref

import numpy as np
import torch
from skorch import NeuralNetClassifier
from skorch.dataset import unpack_data

from .._checkpoint import network_digest
from ..denoisers import DenoisedNetwork, DiffusionDenoiser, default_denoiser_for
from ..network import FlatInputNetwork, check_output_size, first_output
from ..noise import get_noise
from ..training import DenoiserTraining, GaussianAugmentation
from ._networks import default_module_for

__all__ = [
    "DENOISER_PREFIX",
    "NETWORK_PREFIXES",
    "NoisyNeuralNetClassifier",
    "build_denoised_network",
    "build_noisy_net",
    "check_denoised_module",
    "certification_network",
    "is_denoiser_param",
    "is_network_param",
    "outputs_probabilities",
]

#: Prefixes of the estimator parameters routed to the network, e.g.
#: ``module__hidden_units`` or ``optimizer__weight_decay``: skorch's own
#: ``prefixes_`` and those of the module, criterion and optimiser, which skorch
#: adds to ``prefixes_`` when it initialises them.
NETWORK_PREFIXES = (
    "module",
    "criterion",
    "optimizer",
    *NeuralNetClassifier.prefixes_,
)

#: Prefix of the parameters of a denoiser built by the estimator
#: (``denoiser__hidden_units``): they size the denoiser, not skorch's net.
DENOISER_PREFIX = "denoiser"


def is_network_param(name):
    """Whether an estimator parameter goes to the network (``<prefix>__<name>``),
    its denoiser's included."""
    return "__" in name and name.split("__", 1)[0] in (
        *NETWORK_PREFIXES,
        DENOISER_PREFIX,
    )


def is_denoiser_param(name):
    """Whether an estimator parameter sizes the denoiser (``denoiser__<name>``)."""
    return name.startswith(f"{DENOISER_PREFIX}__")


def build_noisy_net(
    module,
    input_shape,
    n_classes,
    *,
    family,
    training,
    noise_scale,
    network_params,
    strategy_params,
    **net_params,
):
    """The skorch network ``SmoothedClassifier.fit`` trains.

    Parameters
    ----------
    module : torch.nn.Module class or instance, or None
        The user's module (an instance is copied, so fitting never changes
        it); the built-in MLP or CNN for ``input_shape`` when None.
    input_shape : tuple of int
    n_classes : int
    family : NoiseFamily
    training : BaseTraining
    noise_scale : float or ndarray of ``input_shape``
        The strategy's training scale.
    network_params : dict
        The estimator's ``<prefix>__<name>`` parameters.
    strategy_params : dict
        What the strategy adds to the network (a UCAN noise generator).
    **net_params
        Other :class:`NoisyNeuralNetClassifier` parameters (``max_epochs``,
        ``lr``, ``device`` ...).
    """
    module_params = {}
    if module is None:
        module, module_params = default_module_for(input_shape, n_classes)
    elif isinstance(module, torch.nn.Module):
        module = copy.deepcopy(module)
    params = {
        "iterator_train__shuffle": True,
        **{f"module__{k}": v for k, v in module_params.items()},
        **network_params,
        **strategy_params,
        **net_params,
    }
    return NoisyNeuralNetClassifier(
        module,
        noise=family,
        training=training,
        noise_scale=torch.as_tensor(noise_scale, dtype=torch.float32).reshape(
            input_shape if np.ndim(noise_scale) else ()
        ),
        **params,
    )


#: The certification view of each fitted skorch net, with the digest of the
#: weights it was built for; gone with the net.
_networks = weakref.WeakKeyDictionary()
_networks_lock = threading.Lock()


def certification_network(net, input_shape, n_classes, precision="fp32", compile=False):
    """The fitted ``net`` as the engine and the strategies see it.

    Built once per fitted network (its channels-last copy, its first-layer
    split and that split's check), and again only if the network's weights
    or device changed since (``net_`` trained further, weights loaded): a
    digest of the weights is checked on every call.

    Parameters
    ----------
    net : skorch.NeuralNet
        Initialised or fitted.
    input_shape : tuple of int
    n_classes : int
    precision : {'fp32', 'bf16', 'fp16'}, default='fp32'
    compile : bool or dict, default=False
        How the base classifier runs (:class:`~smoothlearn.network.FlatInputNetwork`).

    Returns
    -------
    FlatInputNetwork
    """
    key = (
        network_digest(net.module_),
        str(net.device),
        tuple(input_shape),
        n_classes,
        precision,
        repr(compile),
    )
    with _networks_lock:
        cached = _networks.get(net)
    if cached is not None and cached[0] == key:
        return cached[1]
    network = FlatInputNetwork(
        net.module_,
        input_shape,
        n_classes,
        device=net.device,
        nonlinearity=net._get_predict_nonlinearity(),
        outputs_probabilities=outputs_probabilities(net),
        precision=precision,
        compile=compile,
    )
    with _networks_lock:
        _networks[net] = (key, network)
    return network


def outputs_probabilities(net):
    """Whether the module outputs probabilities: skorch's rule, an NLLLoss criterion."""
    return isinstance(net.criterion_, torch.nn.NLLLoss)


def check_denoised_module(module, denoiser, network_params, denoiser_params):
    """With a denoiser: ``module`` is a trained instance, denoiser settings fit.

    Raises before any work (a model built, a batch trained).
    """
    if denoiser is None:
        if denoiser_params:
            raise ValueError(
                f"denoiser parameters {sorted(denoiser_params)} need a denoiser; "
                "got denoiser=None."
            )
        return
    if not isinstance(module, torch.nn.Module):
        got = "None" if module is None else f"the class {module!r}"
        raise TypeError(
            "with a denoiser, module must be a trained torch.nn.Module instance "
            f"(the network to certify, used frozen); got {got}."
        )
    module_params = sorted(k for k in network_params if k.startswith("module__"))
    if module_params:
        raise ValueError(
            f"with a denoiser the module is used as given (frozen); "
            f"{module_params} would rebuild it."
        )
    if denoiser_params and isinstance(denoiser, torch.nn.Module):
        raise ValueError(
            f"denoiser parameters {sorted(denoiser_params)} size a denoiser that "
            "the estimator builds: give denoiser='auto' or a class, not an "
            "instance."
        )


def build_denoised_network(
    module, denoiser, denoiser_params, X, n_classes, *, sigma, max_epochs, device
):
    """The :class:`DenoisedNetwork` ``fit`` trains, checked on ``X[:2]``:
    ``denoiser`` as the estimator takes it (a class, ``'auto'``, an instance
    or a :class:`DiffusionDenoiser`), built with ``denoiser_params``."""
    input_shape = tuple(X.shape[1:])
    params = denoiser_params
    if isinstance(denoiser, DiffusionDenoiser):
        # pretrained, never trained here: frozen, and told the level to
        # use where the engine gives none (a strategy's optimisation)
        denoiser = copy.deepcopy(denoiser).requires_grad_(False)
        if denoiser.sigma is None:
            denoiser.sigma = sigma
    elif isinstance(denoiser, torch.nn.Module):
        denoiser = copy.deepcopy(denoiser)
    else:
        cls = denoiser
        if isinstance(cls, str):  # 'auto'
            cls, sizing = default_denoiser_for(input_shape)
            params = {**sizing, **params}
        try:
            denoiser = cls(**params)
        except TypeError as exc:
            raise TypeError(f"cannot build the denoiser {cls!r}: {exc}") from None
        if not isinstance(denoiser, torch.nn.Module):
            raise TypeError(
                f"denoiser must build a torch.nn.Module; {cls!r} gave "
                f"{type(denoiser).__name__}."
            )
    trained = max_epochs > 0 and not isinstance(denoiser, DiffusionDenoiser)
    if trained and not any(p.requires_grad for p in denoiser.parameters()):
        raise ValueError(
            f"the denoiser {type(denoiser).__name__} has no trainable parameters "
            f"to train for max_epochs={max_epochs}."
        )
    network = DenoisedNetwork(denoiser, module).to(device)
    probe = torch.as_tensor(X[:2], device=device)
    with torch.inference_mode():
        network.eval()
        out = network.denoiser(probe)
    if not isinstance(out, torch.Tensor) or out.shape != probe.shape:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out)
        raise ValueError(
            "the denoiser must map inputs to inputs of the same shape: "
            f"{tuple(probe.shape)} gave {got}."
        )
    check_output_size(network, X[:1], n_classes, device=device)
    return network


class NoisyNeuralNetClassifier(NeuralNetClassifier):
    """A skorch classifier whose training batches carry smoothing noise.

    Each training step computes the loss of a :mod:`smoothlearn.training`
    method on the batch, with noise ``scale * z``, ``z`` drawn fresh from the
    noise family's standard form (by default noise augmentation, Cohen et
    al.'s training for randomized smoothing). Validation and inference see
    clean inputs.

    Parameters
    ----------
    module : torch.nn.Module class or instance
    noise : str or NoiseFamily, default='gaussian'
    noise_scale : float or torch.Tensor, default=0.0
        Broadcastable to one input's shape (a scalar for isotropic noise).
    training : BaseTraining, default=None
        The loss of a training batch (:mod:`smoothlearn.training`); noise
        augmentation when None.
    noise_generator : torch.nn.Module, default=None
        A UCAN noise parameter generator (:mod:`smoothlearn.strategies._generators`)
        trained jointly with the module: the noise becomes
        ``mu + noise_scale * m * z`` with ``(mu, m) = noise_generator(X)`` and the
        loss gets ``-variance_weight * mean(m)`` (ucan.md section 4.2). Registered
        as skorch's ``noise_generator_`` (moved to ``device``, in the optimiser,
        saved with ``save_params``).
    variance_weight : float, default=1.0
        Weight of UCAN's variance term.
    generator_lr : float, default=None
        Learning rate of the noise generator's parameters (their own parameter
        group); the network's ``lr`` when None.
    **kwargs
        Passed to :class:`skorch.NeuralNetClassifier`.
    """

    def __init__(
        self,
        module,
        *args,
        noise="gaussian",
        noise_scale=0.0,
        training=None,
        noise_generator=None,
        variance_weight=1.0,
        generator_lr=None,
        **kwargs,
    ):
        # set before skorch's __init__: afterwards skorch refuses a module
        # attribute outside initialize_module
        self.noise = noise
        self.noise_scale = noise_scale
        self.training = training
        self.noise_generator = noise_generator
        self.variance_weight = variance_weight
        self.generator_lr = generator_lr
        super().__init__(module, *args, **kwargs)

    def initialize_module(self):
        super().initialize_module()
        if self.noise_generator is not None:
            generator = self.initialized_instance(
                self.noise_generator, self.get_params_for("noise_generator")
            )
            self.noise_generator_ = generator.to(self.device)
        return self

    def initialize_optimizer(self, *args, **kwargs):
        if next(self.get_all_learnable_params(), None) is None:
            # nothing to learn (a frozen network behind a fixed denoiser, used
            # with max_epochs=0): torch's optimisers refuse an empty list
            self.optimizer_ = None
            return self
        super().initialize_optimizer(*args, **kwargs)
        if self.noise_generator is not None and self.generator_lr is not None:
            generator = list(self.noise_generator_.parameters())
            ids = {id(p) for p in generator}
            for group in self.optimizer_.param_groups:
                group["params"] = [p for p in group["params"] if id(p) not in ids]
            self.optimizer_.add_param_group(
                {"params": generator, "lr": self.generator_lr}
            )
        return self

    def get_all_learnable_params(self):
        # a frozen network behind a denoiser (requires_grad off) is no
        # optimiser's business: weight decay would otherwise reach it
        for name, param in super().get_all_learnable_params():
            if param.requires_grad:
                yield name, param

    def train_step_single(self, batch, **fit_params):
        self._set_training(True)
        Xi, yi = unpack_data(batch)
        Xi = torch.as_tensor(Xi, device=self.device)
        yi = torch.as_tensor(yi, device=self.device)
        family = get_noise(self.noise)
        scale = torch.as_tensor(self.noise_scale, dtype=Xi.dtype, device=Xi.device)
        offset = None
        if self.noise_generator is not None:
            self.noise_generator_.train()
            offset, multiplier = self.noise_generator_(Xi)
            scale = scale * multiplier

        def sample_noise(shape):
            z = family.sample(tuple(shape), device=Xi.device, dtype=Xi.dtype)
            if offset is None:
                return scale * z
            return _per_row(scale, shape, len(Xi)) * z + _per_row(
                offset, shape, len(Xi)
            )

        seen = []
        probabilities = outputs_probabilities(self)

        def as_scores(out):
            """Class scores: log-probabilities for a probability-output module."""
            if probabilities:
                # skorch's own conversion in get_loss, done here once so that the
                # training methods' softmax and cross-entropy are the right ones
                return torch.log(out + torch.finfo(out.dtype).eps)
            return out

        def forward(x):
            out = first_output(self.infer(x, **fit_params))
            if not seen and len(out) % len(Xi) == 0:
                # for callbacks: the batch's (noisy) predictions, copies averaged
                seen.append(out.detach().reshape(len(Xi), -1, *out.shape[1:]).mean(1))
            return as_scores(out)

        def criterion(scores, y):
            if probabilities:  # already log-probabilities: NLLLoss takes them
                return self.criterion_(scores, y)
            return self.get_loss(scores, y, X=Xi, training=True)

        training = (
            self.training if self.training is not None else GaussianAugmentation()
        )
        denoiser_parts = {}
        if isinstance(training, DenoiserTraining):
            # the module is a DenoisedNetwork: its two halves, the frozen
            # network's scores read as forward reads them
            network = self.module_
            denoiser_parts = {
                "denoise": network.denoiser,
                "classify": lambda x: as_scores(first_output(network.classifier(x))),
            }
        loss = training.loss(
            forward,
            Xi,
            yi,
            sample_noise,
            family=family,
            scale=scale,
            epoch=max(len(self.history), 1),
            criterion=criterion,
            **denoiser_parts,
        )
        if self.noise_generator is not None:
            # UCAN's variance term: the multipliers' mean, pushed up
            loss = loss - self.variance_weight * multiplier.mean()
        loss.backward()
        return {"loss": loss, "y_pred": seen[0] if seen else None}


def _per_row(values, shape, n_inputs):
    """Per-input ``values`` (n_inputs or 1, *input) laid out for noise of ``shape``.

    Training methods draw noise for copies of the batch either flat and
    input-major, ``(n_inputs * k, *input)``, or as ``(n_inputs, k, *input)``.
    """
    if values.shape[0] == 1:  # the same for every input: broadcasts
        return values if len(shape) == values.dim() else values.unsqueeze(1)
    if len(shape) == values.dim():
        return values.repeat_interleave(shape[0] // n_inputs, dim=0)
    return values.unsqueeze(1)
