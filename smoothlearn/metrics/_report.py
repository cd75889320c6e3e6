"""Paper-style tables and certified-accuracy plots for several strategies."""

import numpy as np

from ..pipeline import certify_estimator
from ._certified import (
    average_certified_radius,
    certified_accuracy,
    certified_accuracy_curve,
)

__all__ = [
    "CertifiedAccuracyDisplay",
    "certified_accuracy_caption",
    "certified_accuracy_table",
]

DEFAULT_RADII = (0.0, 0.25, 0.5, 0.75, 1.0)


def _as_mapping(certificates):
    if isinstance(certificates, dict):
        if not certificates:
            raise ValueError("need at least one certificate set")
        return certificates
    return {getattr(certificates, "strategy", "") or "certificates": certificates}


def certified_accuracy_table(y_true, certificates, radii=DEFAULT_RADII, *, proxy=False):
    """A text table of certified accuracy at radii, ACR and AC R-tilde per strategy.

    The layout of ANCER's Table 1: one row per certificate set, certified
    accuracy (in %) at each radius, then ACR and the average proxy radius.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    certificates : Certificates or dict of str to Certificates
        One set, or several keyed by the row name.
    radii : sequence of float, default=(0.0, 0.25, 0.5, 0.75, 1.0)
    proxy : bool, default=False
        Columns by proxy radius instead of radius.

    Returns
    -------
    str

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> cert = SimpleNamespace(label=[0, 1], abstained=[False, False],
    ...                        radius=[0.3, 0.9], proxy_radius=[0.5, 1.2])
    >>> print(certified_accuracy_table([0, 1], {"cohen": cert}, [0.0, 0.5]))
    strategy    R=0  R=0.5    ACR   ACR~
    cohen     100.0   50.0  0.600  0.850
    """
    sets = _as_mapping(certificates)
    radii = np.asarray(radii, dtype=float).reshape(-1)
    symbol = "R~" if proxy else "R"
    header = ["strategy"] + [f"{symbol}={r:g}" for r in radii] + ["ACR", "ACR~"]
    rows = []
    for name, cert in sets.items():
        acc = certified_accuracy(y_true, cert, radii, proxy=proxy)
        rows.append(
            [str(name)]
            + [f"{100 * a:.1f}" for a in acc]
            + [
                f"{average_certified_radius(y_true, cert):.3f}",
                f"{average_certified_radius(y_true, cert, proxy=True):.3f}",
            ]
        )
    widths = [max(len(r[j]) for r in [header] + rows) for j in range(len(header))]
    lines = []
    for r in [header] + rows:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:])
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def certified_accuracy_caption(norm="l2", *, proxy=False, max_radius=None):
    """The caption that says what :func:`certified_accuracy_table` shows.

    Parameters
    ----------
    norm : {'l2', 'l1'}, default='l2'
    proxy : bool, default=False
    max_radius : float, default=None
        The largest radius certifiable at the run's settings
        (:func:`smoothlearn.bounds.largest_certifiable_radius`): said, so that
        a column beyond it reads as the settings' limit, not the model's.

    Returns
    -------
    str

    Examples
    --------
    >>> print(certified_accuracy_caption("l2"))  # doctest: +NORMALIZE_WHITESPACE
    certified accuracy (%) at l2 radius R; ACR: average certified radius,
    ACR~: average proxy radius (d-th root of the region's volume in d dimensions)
    >>> print(certified_accuracy_caption("l2", max_radius=0.9529))
    ... # doctest: +NORMALIZE_WHITESPACE
    certified accuracy (%) at l2 radius R; ACR: average certified radius,
    ACR~: average proxy radius (d-th root of the region's volume in d dimensions);
    largest radius certifiable at these settings: 0.953 (noise of scale sigma,
    all n draws agreeing)
    """
    column = "proxy radius R~" if proxy else f"{norm} radius R"
    caption = (
        f"certified accuracy (%) at {column}; ACR: average certified radius, "
        "ACR~: average proxy radius (d-th root of the region's volume in d "
        "dimensions)"
    )
    if max_radius is not None:
        caption += (
            f"; largest radius certifiable at these settings: {max_radius:.3g} "
            "(noise of scale sigma, all n draws agreeing)"
        )
    return caption


class CertifiedAccuracyDisplay:
    """Certified accuracy against (proxy) radius for several strategies on one axes.

    The figure of ANCER (figure 2) and RANCER (figure 3). Build it as
    scikit-learn's displays are built: :meth:`from_estimator` (certifies ``X``),
    :meth:`from_certificates` (certificates at hand) or
    :meth:`from_predictions` (labels and radii, e.g. read from a log); save it
    with ``display.figure_.savefig(...)``. Certified accuracy is drawn in
    percent, as :func:`certified_accuracy_table` prints it.

    Parameters
    ----------
    curves : dict of str to (radii, accuracy)
        Accuracy as a fraction (as :func:`certified_accuracy_curve` gives it).
    proxy : bool
    space : {'input', 'model'}, default='input'
        The units of the radii (``Certificates.space``): the input's, or the
        model's (the axis says so).
    norm : {'l2', 'l1'} or None, default=None
        The radii's norm, named on the axis (``Certificates.norm``).
    caption : str, default=None
        The plot's title: what was certified and how (data, noise and sigma,
        n, alpha, norm), as the command line writes it.
    max_radius : float, default=None
        The largest radius certifiable at these settings
        (:func:`smoothlearn.bounds.largest_certifiable_radius`), marked by a
        dashed line: no curve of noise at ``sigma`` goes beyond it.

    Attributes
    ----------
    ax_ : matplotlib Axes
    figure_ : matplotlib Figure
    lines_ : dict of str to matplotlib Line2D
        The curves, in percent.
    max_radius_line_ : matplotlib Line2D or None
        The largest certifiable radius's dashed line (None without
        ``max_radius``).
    """

    def __init__(
        self,
        curves,
        *,
        proxy=False,
        space="input",
        norm=None,
        caption=None,
        max_radius=None,
    ):
        self.curves = curves
        self.proxy = proxy
        self.space = "model" if space == "classifier" else space  # its old name
        self.norm = norm
        self.caption = caption
        self.max_radius = max_radius

    @classmethod
    def from_certificates(
        cls,
        y_true,
        certificates,
        *,
        proxy=False,
        ax=None,
        caption=None,
        max_radius=None,
        norm=None,
    ):
        """Plot the step curves of one or several certificate sets.

        Parameters
        ----------
        y_true : array-like of shape (n_samples,)
        certificates : Certificates or dict of str to Certificates
        proxy : bool, default=False
            Against proxy radius (ANCER's anisotropic certified accuracy, UCAN's
            ALM) instead of radius.
        ax : matplotlib Axes, default=None
        caption : str, default=None
            The plot's title (data, noise, sigma, n, alpha, norm).
        max_radius : float, default=None
            The largest certifiable radius, marked.
        norm : {'l2', 'l1'}, default=None
            The radii's norm; None takes the certificates' own
            (``Certificates.norm``) where they have one.

        Returns
        -------
        CertifiedAccuracyDisplay
        """
        certificates = _as_mapping(certificates)
        curves = {
            name: certified_accuracy_curve(y_true, cert, proxy=proxy)
            for name, cert in certificates.items()
        }
        # a Certificates' space, or a log's per row
        spaces = {
            str(space)
            for cert in certificates.values()
            for space in np.atleast_1d(getattr(cert, "space", "input"))
        }
        spaces = {"model" if s == "classifier" else s for s in spaces}
        if len(spaces) > 1:
            raise ValueError(
                "certificates in the input's units and in the model's space "
                "cannot share one axis"
            )
        space = spaces.pop() if spaces else "input"
        if norm is None:
            norms = {getattr(c, "norm", None) for c in certificates.values()}
            norm = norms.pop() if len(norms) == 1 else None
        return cls(
            curves,
            proxy=proxy,
            space=space,
            norm=norm,
            caption=caption,
            max_radius=max_radius,
        ).plot(ax=ax)

    @classmethod
    def from_estimator(
        cls, estimator, X, y, *, name=None, proxy=False, ax=None, space="input"
    ):
        """Certify ``X`` with a fitted estimator (or several) and plot the curves.

        Parameters
        ----------
        estimator : estimator or dict of str to estimator
            Fitted: a SmoothedClassifier, a pipeline ending in one or a fitted
            search (certified by :func:`smoothlearn.pipeline.certify_estimator`,
            in ``X``'s units where it can); a dict draws one curve per entry.
        X : array-like of shape (n_samples, n_features) or (n_samples, C, H, W)
        y : array-like of shape (n_samples,)
        name : str, default=None
            The curve's label for a single estimator (its strategy's name by
            default).
        proxy : bool, default=False
        ax : matplotlib Axes, default=None
        space : {'input', 'model'}, default='input'
            The radii's units (:func:`~smoothlearn.pipeline.certify_estimator`).

        Returns
        -------
        CertifiedAccuracyDisplay
        """
        if isinstance(estimator, dict):
            certificates = {
                key: certify_estimator(est, X, space=space)
                for key, est in estimator.items()
            }
        else:
            certified = certify_estimator(estimator, X, space=space)
            certificates = {name or certified.strategy or "certificates": certified}
        return cls.from_certificates(y, certificates, proxy=proxy, ax=ax)

    @classmethod
    def from_predictions(
        cls, y_true, y_pred, radius, *, abstained=None, name="certificates", ax=None
    ):
        """Plot the curve of predicted labels and their certified radii.

        For results held as plain arrays, such as Cohen et al.'s logs.

        Parameters
        ----------
        y_true : array-like of shape (n_samples,)
        y_pred : array-like of shape (n_samples,)
            Smoothed predictions (any marker where abstained).
        radius : array-like of shape (n_samples,)
            Certified radius of each prediction.
        abstained : array-like of bool, default=None
            Where the classifier abstained; where ``radius <= 0`` when None
            (a certified prediction has a positive radius).
        name : str, default='certificates'
        ax : matplotlib Axes, default=None

        Returns
        -------
        CertifiedAccuracyDisplay
        """
        from types import SimpleNamespace

        radius = np.asarray(radius, dtype=float)
        if abstained is None:
            abstained = radius <= 0
        certificates = SimpleNamespace(
            label=np.asarray(y_pred),
            abstained=np.asarray(abstained, dtype=bool),
            radius=radius,
            proxy_radius=radius,
        )
        return cls.from_certificates(y_true, {name: certificates}, ax=ax)

    def plot(self, ax=None):
        """Draw on ``ax`` (a new figure when None) and return ``self``."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots()
        self.lines_ = {}
        self.max_radius_line_ = None
        for name, (radii, acc) in self.curves.items():
            (self.lines_[name],) = ax.step(
                radii, 100.0 * np.asarray(acc), where="post", label=str(name)
            )
        if self.max_radius is not None:
            self.max_radius_line_ = ax.axvline(
                self.max_radius,
                color="0.4",
                linestyle="--",
                linewidth=1,
                label=f"largest certifiable radius {self.max_radius:.3g}",
            )
        label = "proxy radius" if self.proxy else "radius"
        if self.norm and not self.proxy:
            label = f"{self.norm} {label}"
        if self.space == "model":
            label += " (in the model's space)"
        ax.set_xlabel(label)
        ax.set_ylabel("certified accuracy (%)")
        ax.set_ylim(0, 102)
        ax.set_xlim(left=0)
        if self.caption:
            ax.set_title(self.caption, fontsize="small")
        ax.legend()
        self.ax_ = ax
        self.figure_ = ax.figure
        return self
