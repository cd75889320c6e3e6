"""The smoothing noise: sigma- and mu-maps beside the input (UCAN figure 7)."""

import numpy as np

__all__ = ["NoiseMapDisplay"]


def _as_image(row):
    """One input as a 2-D image: (C, H, W) -> channel mean, flat -> near-square."""
    row = np.asarray(row, dtype=np.float64)
    if row.ndim == 3:
        return row.mean(axis=0)
    if row.ndim == 2:
        return row
    d = row.size
    side = int(np.floor(np.sqrt(d)))
    while d % side:
        side -= 1
    return row.reshape(side, d // side)


class NoiseMapDisplay:
    """Inputs next to their noise scale (sigma-map) and mean offset (mu-map).

    Build it with :meth:`from_estimator`; one row per input, columns: the input,
    its per-coordinate scale and, when any is non-zero, its offset. Flat inputs
    are folded into the most square image their size allows; colour images
    show the mean over channels.

    Parameters
    ----------
    inputs, scales, offsets : ndarray
        Of the same shape: one row per input.

    Attributes
    ----------
    axes_ : ndarray of matplotlib Axes, shape (n_inputs, n_columns)
    images_ : ndarray of matplotlib AxesImage, same shape
    figure_ : matplotlib Figure
    """

    def __init__(self, inputs, scales, offsets):
        self.inputs = inputs
        self.scales = scales
        self.offsets = offsets

    @classmethod
    def from_estimator(cls, estimator, X, *, axes=None):
        """Plot the noise a fitted ``SmoothedClassifier`` uses on ``X``.

        Parameters
        ----------
        estimator : SmoothedClassifier
            Fitted.
        X : array-like of shape (n_inputs, ...)
            A few inputs (one figure row each).
        axes : array of matplotlib Axes of shape (n_inputs, n_columns), default=None

        Returns
        -------
        NoiseMapDisplay
        """
        offsets, scales = estimator.noise_parameters(X)
        inputs = np.asarray(X, dtype=np.float32).reshape(scales.shape)
        return cls(inputs, scales, offsets).plot(axes=axes)

    def plot(self, axes=None):
        """Draw on ``axes`` (a new figure when None) and return ``self``."""
        import matplotlib.pyplot as plt

        columns = [("input", self.inputs, "gray"), ("sigma", self.scales, "magma")]
        if np.any(self.offsets):
            columns.append(("mu", self.offsets, "coolwarm"))
        n = len(self.inputs)
        if axes is None:
            _, axes = plt.subplots(
                n, len(columns), figsize=(2.2 * len(columns), 2.2 * n), squeeze=False
            )
        axes = np.asarray(axes).reshape(n, len(columns))
        images = np.empty(axes.shape, dtype=object)
        for i in range(n):
            for j, (title, maps, cmap) in enumerate(columns):
                ax = axes[i, j]
                image = _as_image(maps[i])
                if title == "mu":
                    bound = max(float(np.abs(image).max()), 1e-12)
                    images[i, j] = ax.imshow(image, cmap=cmap, vmin=-bound, vmax=bound)
                else:
                    images[i, j] = ax.imshow(image, cmap=cmap)
                ax.figure.colorbar(images[i, j], ax=ax, fraction=0.046)
                ax.set_xticks([])
                ax.set_yticks([])
                if i == 0:
                    ax.set_title(title)
        self.axes_ = axes
        self.images_ = images
        self.figure_ = axes[0, 0].figure
        return self
