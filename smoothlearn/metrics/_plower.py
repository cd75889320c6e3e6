"""The distribution of the probability bound p_A over a test set, and its plot.

The average certified radius can mislead: Sun et al. (ICML 2025) prove that a
trivial classifier can have an arbitrarily large ACR, and that ACR weighs
improvements on easy inputs far above those on hard ones. They recommend
reporting the empirical distribution of ``p_A`` (the probability of the
right class under noise) and certified accuracy at radii instead. Here
``p_A`` is read through each certificate's Clopper-Pearson lower bound
``p_lower``, the quantity every certificate's radius is computed from.
"""

from dataclasses import dataclass, field
from numbers import Integral

import numpy as np

from ..pipeline import certify_estimator
from ..utils._sklearn_compat import validate_params
from ._certified import _arrays

__all__ = ["PLowerDisplay", "PLowerDistribution", "p_lower_distribution"]

#: The groups of inputs, in the order they are reported and stacked.
GROUPS = ("correct", "wrong", "abstained")


def _p_lower(certificates):
    if not hasattr(certificates, "p_lower"):
        raise TypeError(
            "certificates must have a p_lower array (a smoothlearn Certificates); "
            f"got {type(certificates).__name__}."
        )
    p = np.asarray(certificates.p_lower, dtype=np.float64)
    if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("p_lower must lie in [0, 1]")
    return p


@dataclass(frozen=True)
class PLowerDistribution:
    """The bounds ``p_lower`` of a test set, by the smoothed prediction's outcome.

    Attributes
    ----------
    p_lower : dict of str to ndarray
        Sorted bounds of the inputs predicted right (``'correct'``), predicted
        wrong (``'wrong'``, a bound of the wrong class's probability) and
        abstained on (``'abstained'``).
    quantiles : dict of str to ndarray
        Each group's empirical quantiles at ``levels`` (NaN for an empty group).
    levels : ndarray
        The quantile levels.
    n_samples : int
        Inputs in all.
    """

    p_lower: dict
    quantiles: dict
    levels: np.ndarray
    n_samples: int = field(default=0)

    def share_at_least(self, threshold):
        """Share of all inputs predicted right with ``p_lower >= threshold``.

        The curve Sun et al. recommend: it does not depend on the noise
        level's scale of radii, and it weighs every input alike.

        Parameters
        ----------
        threshold : float or array-like of floats

        Returns
        -------
        float or ndarray
        """
        t = np.asarray(threshold, dtype=np.float64)
        correct = self.p_lower["correct"]
        share = (correct[:, None] >= t.reshape(1, -1)).sum(axis=0) / self.n_samples
        return float(share[0]) if t.ndim == 0 else share

    def __repr__(self):
        counts = ", ".join(f"{g}={len(self.p_lower[g])}" for g in GROUPS)
        median = (
            np.quantile(self.p_lower["correct"], 0.5)
            if len(self.p_lower["correct"])
            else float("nan")
        )
        return f"PLowerDistribution({counts}, median_correct={median:.4g})"


@validate_params(
    {
        "y_true": ["array-like"],
        "certificates": "no_validation",
        "levels": ["array-like"],
    },
    prefer_skip_nested_validation=True,
)
def p_lower_distribution(y_true, certificates, *, levels=(0.1, 0.25, 0.5, 0.75, 0.9)):
    """The empirical distribution of ``p_lower`` by outcome (Sun et al., 2025).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    certificates : Certificates
        Anything with ``label``, ``abstained``, ``radius``, ``proxy_radius``
        and ``p_lower`` arrays.
    levels : array-like of floats in [0, 1], default=(0.1, 0.25, 0.5, 0.75, 0.9)
        Quantile levels to report per group.

    Returns
    -------
    PLowerDistribution

    References
    ----------
    C. Sun, Y. Mao, M. N. Mueller and M. Vechev, "Average Certified Radius is
    a Poor Metric for Randomized Smoothing", ICML 2025.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> cert = SimpleNamespace(label=[0, 1, 1, -1], abstained=[0, 0, 0, 1],
    ...                        radius=[0.5, 0.1, 0.2, 0.0], proxy_radius=[0] * 4,
    ...                        p_lower=[0.99, 0.6, 0.7, 0.4])
    >>> dist = p_lower_distribution([0, 1, 0, 1], cert, levels=[0.5])
    >>> dist.quantiles["correct"], dist.share_at_least(0.9)
    (array([0.795]), 0.25)
    """
    levels = np.asarray(levels, dtype=np.float64).reshape(-1)
    if np.any(~np.isfinite(levels)) or np.any((levels < 0) | (levels > 1)):
        raise ValueError(f"levels must lie in [0, 1]; got {levels!r}.")
    correct, _ = _arrays(y_true, certificates)
    p = _p_lower(certificates)
    abstained = np.asarray(certificates.abstained, dtype=bool)
    masks = {"correct": correct, "wrong": ~correct & ~abstained, "abstained": abstained}
    groups = {g: np.sort(p[masks[g]]) for g in GROUPS}
    quantiles = {
        g: np.quantile(v, levels) if len(v) else np.full(len(levels), np.nan)
        for g, v in groups.items()
    }
    return PLowerDistribution(groups, quantiles, levels, len(p))


class PLowerDisplay:
    """Histogram of ``p_lower`` over a test set, stacked by outcome.

    Where the average certified radius hides how robustness is spread over
    inputs (Sun et al., ICML 2025), this shows it: how many inputs are
    predicted right with a bound near 1/2 (hard inputs) and how many near 1.
    Build it as scikit-learn's ``CalibrationDisplay``: :meth:`from_estimator`
    (certifies ``X``), :meth:`from_certificates` or :meth:`from_predictions`
    (plain arrays); needs matplotlib.

    Parameters
    ----------
    distribution : PLowerDistribution
    bins : int, default=20
        Equal bins over [0, 1].
    name : str, default=None
        Shown in the title.

    Attributes
    ----------
    ax_ : matplotlib Axes
    figure_ : matplotlib Figure
    bars_ : list of matplotlib BarContainer
        One per group drawn (correct, wrong, abstained).
    """

    def __init__(self, distribution, *, bins=20, name=None):
        self.distribution = distribution
        self.bins = bins
        self.name = name

    @classmethod
    def from_certificates(cls, y_true, certificates, *, bins=20, name=None, ax=None):
        """Plot the bounds of a set of certificates.

        Parameters
        ----------
        y_true : array-like of shape (n_samples,)
        certificates : Certificates
        bins : int, default=20
        name : str, default=None
            The title's name (the certificates' strategy by default).
        ax : matplotlib Axes, default=None

        Returns
        -------
        PLowerDisplay
        """
        _check_bins(bins)
        name = name if name is not None else getattr(certificates, "strategy", None)
        distribution = p_lower_distribution(y_true, certificates)
        return cls(distribution, bins=bins, name=name or None).plot(ax=ax)

    @classmethod
    def from_estimator(cls, estimator, X, y, *, bins=20, name=None, ax=None):
        """Certify ``X`` with a fitted estimator and plot the bounds.

        Parameters
        ----------
        estimator : estimator
            A fitted SmoothedClassifier, a pipeline ending in one or a fitted
            search (:func:`smoothlearn.pipeline.certify_estimator`).
        X : array-like of shape (n_samples, n_features) or (n_samples, C, H, W)
        y : array-like of shape (n_samples,)
        bins : int, default=20
        name : str, default=None
        ax : matplotlib Axes, default=None

        Returns
        -------
        PLowerDisplay
        """
        _check_bins(bins)
        certificates = certify_estimator(estimator, X)
        return cls.from_certificates(y, certificates, bins=bins, name=name, ax=ax)

    @classmethod
    def from_predictions(
        cls, y_true, y_pred, p_lower, *, abstained=None, bins=20, name=None, ax=None
    ):
        """Plot bounds held as plain arrays (a log, say).

        Parameters
        ----------
        y_true : array-like of shape (n_samples,)
        y_pred : array-like of shape (n_samples,)
            Smoothed predictions.
        p_lower : array-like of shape (n_samples,)
            Each prediction's lower bound of its probability.
        abstained : array-like of bool, default=None
            Where the classifier abstained; where ``p_lower < 1/2`` when None.
        bins : int, default=20
        name : str, default=None
        ax : matplotlib Axes, default=None

        Returns
        -------
        PLowerDisplay
        """
        from types import SimpleNamespace

        _check_bins(bins)
        p_lower = np.asarray(p_lower, dtype=np.float64)
        if abstained is None:
            abstained = p_lower < 0.5
        zeros = np.zeros(len(p_lower))
        certificates = SimpleNamespace(
            label=np.asarray(y_pred),
            abstained=np.asarray(abstained, dtype=bool),
            p_lower=p_lower,
            radius=zeros,
            proxy_radius=zeros,
        )
        return cls.from_certificates(y_true, certificates, bins=bins, name=name, ax=ax)

    def plot(self, ax=None):
        """Draw on ``ax`` (a new figure when None) and return ``self``."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots()
        edges = np.linspace(0.0, 1.0, self.bins + 1)
        bottom = np.zeros(self.bins)
        self.bars_ = []
        for group in GROUPS:
            values = self.distribution.p_lower[group]
            if not len(values):
                continue
            counts, _ = np.histogram(values, bins=edges)
            self.bars_.append(
                ax.bar(
                    edges[:-1],
                    counts,
                    width=np.diff(edges),
                    bottom=bottom,
                    align="edge",
                    label=f"{group} ({len(values)})",
                )
            )
            bottom = bottom + counts
        ax.axvline(0.5, color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("p_lower: Clopper-Pearson lower bound of the top class's p_A")
        ax.set_ylabel("inputs")
        ax.set_xlim(0, 1)
        title = f"{self.distribution.n_samples} inputs"
        if self.name:
            title = f"{self.name}: {title}"
        ax.set_title(title)
        ax.legend(loc="upper left")
        self.ax_ = ax
        self.figure_ = ax.figure
        return self


def _check_bins(bins):
    if not isinstance(bins, Integral) or isinstance(bins, bool) or bins < 1:
        raise ValueError(f"bins must be a positive integer; got {bins!r}.")
