"""The skorch network trained under smoothing noise."""

import torch
from skorch import NeuralNetClassifier
from skorch.dataset import unpack_data

from ..noise import get_noise
from ..training import GaussianAugmentation

__all__ = ["NoisyNeuralNetClassifier"]


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
    **kwargs
        Passed to :class:`skorch.NeuralNetClassifier`.
    """

    def __init__(
        self, module, *args, noise="gaussian", noise_scale=0.0, training=None, **kwargs
    ):
        super().__init__(module, *args, **kwargs)
        self.noise = noise
        self.noise_scale = noise_scale
        self.training = training

    def train_step_single(self, batch, **fit_params):
        self._set_training(True)
        Xi, yi = unpack_data(batch)
        Xi = torch.as_tensor(Xi, device=self.device)
        yi = torch.as_tensor(yi, device=self.device)
        family = get_noise(self.noise)
        scale = torch.as_tensor(self.noise_scale, dtype=Xi.dtype, device=Xi.device)

        def sample_noise(shape):
            z = family.sample(tuple(shape), device=Xi.device, dtype=Xi.dtype)
            return scale * z

        seen = []

        def forward(x):
            out = self.infer(x, **fit_params)
            out = out[0] if isinstance(out, tuple) else out
            if not seen and len(out) % len(Xi) == 0:
                # for callbacks: the batch's (noisy) predictions, copies averaged
                seen.append(out.detach().reshape(len(Xi), -1, *out.shape[1:]).mean(1))
            return out

        training = (
            self.training if self.training is not None else GaussianAugmentation()
        )
        loss = training.loss(
            forward,
            Xi,
            yi,
            sample_noise,
            family=family,
            scale=scale,
            epoch=max(len(self.history), 1),
            criterion=lambda y_pred, y: self.get_loss(y_pred, y, X=Xi, training=True),
        )
        loss.backward()
        return {"loss": loss, "y_pred": seen[0] if seen else None}
