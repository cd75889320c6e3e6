"""The skorch network trained under smoothing noise (Gaussian augmentation)."""

import torch
from skorch import NeuralNetClassifier
from skorch.dataset import unpack_data

from ..noise import get_noise

__all__ = ["NoisyNeuralNetClassifier"]


class NoisyNeuralNetClassifier(NeuralNetClassifier):
    """A skorch classifier whose training batches carry smoothing noise.

    Each training batch ``X`` becomes ``X + scale * z`` with ``z`` drawn fresh
    from the noise family's standard form (Cohen et al.'s training for
    randomized smoothing). Validation and inference see clean inputs.

    Parameters
    ----------
    module : torch.nn.Module class or instance
    noise : str or NoiseFamily, default='gaussian'
    noise_scale : float or torch.Tensor, default=0.0
        Broadcastable to one input's shape (a scalar for isotropic noise).
    **kwargs
        Passed to :class:`skorch.NeuralNetClassifier`.
    """

    def __init__(self, module, *args, noise="gaussian", noise_scale=0.0, **kwargs):
        super().__init__(module, *args, **kwargs)
        self.noise = noise
        self.noise_scale = noise_scale

    def add_noise(self, Xi):
        """``Xi`` plus one fresh noise draw per row (on ``Xi``'s device)."""
        family = get_noise(self.noise)
        z = family.sample(tuple(Xi.shape), device=Xi.device, dtype=Xi.dtype)
        scale = torch.as_tensor(self.noise_scale, dtype=Xi.dtype, device=Xi.device)
        return Xi + scale * z

    def train_step_single(self, batch, **fit_params):
        self._set_training(True)
        Xi, yi = unpack_data(batch)
        Xi = self.add_noise(torch.as_tensor(Xi, device=self.device))
        y_pred = self.infer(Xi, **fit_params)
        loss = self.get_loss(y_pred, yi, X=Xi, training=True)
        loss.backward()
        return {"loss": loss, "y_pred": y_pred}
