"""Certificate logs as the TSV that Cohen et al.'s certify.py writes.

Columns ``idx label predict radius correct time`` as in Cohen's logs (``label``
the true label, ``predict`` the smoothed prediction, ``time`` a
``datetime.timedelta`` string), then smoothlearn's extra columns
``proxy_radius abstained strategy n_draws smoothing space`` (``n_draws``: the
estimation draws behind the input's bound, -1 where unknown; ``smoothing``:
the smoothing written whole, strategy with its parameters, noise family and
sigma, as ``Certificates.smoothing``; ``space``: the units of the radii,
``input`` or ``model``, as ``Certificates.space``; ``classifier``, the
model's space's earlier name, is read as ``model``). Floats are written with
``repr`` so a log reads back exactly.
"""

import datetime
import io
import os

import numpy as np

__all__ = ["CertificateLog", "read_certificates_tsv", "write_certificates_tsv"]

COLUMNS = (
    "idx",
    "label",
    "predict",
    "radius",
    "correct",
    "time",
    "proxy_radius",
    "abstained",
    "strategy",
    "n_draws",
    "smoothing",
    "space",
)


class CertificateLog:
    """A certificate log read from TSV: the per-input results without the regions.

    Works with every function of :mod:`smoothlearn.metrics` that needs labels
    and radii only.

    Attributes
    ----------
    idx, y_true, label, abstained, radius, proxy_radius, correct, time : ndarray
    strategy : ndarray of str
    n_draws : ndarray of int
        Estimation draws behind each bound (-1 where the log does not say).
    smoothing : ndarray of str
        The smoothing of each row written whole ('' where the log does not say).
    space : ndarray of str
        The units of each row's radii, ``'input'`` or ``'model'``
        (``'input'`` where the log does not say).
    """

    def __init__(
        self,
        idx,
        y_true,
        label,
        abstained,
        radius,
        proxy_radius,
        correct,
        time,
        strategy,
        n_draws=None,
        smoothing=None,
        space=None,
    ):
        self.idx = np.asarray(idx, dtype=np.int64)
        self.y_true = np.asarray(y_true)
        self.label = np.asarray(label)
        self.abstained = np.asarray(abstained, dtype=bool)
        self.radius = np.asarray(radius, dtype=np.float64)
        self.proxy_radius = np.asarray(proxy_radius, dtype=np.float64)
        self.correct = np.asarray(correct, dtype=bool)
        self.time = np.asarray(time, dtype=np.float64)
        self.strategy = np.asarray(strategy, dtype=str)
        self.n_draws = (
            np.full(len(self.idx), -1, dtype=np.int64)
            if n_draws is None
            else np.asarray(n_draws, dtype=np.int64)
        )
        self.smoothing = np.asarray(
            [""] * len(self.idx) if smoothing is None else smoothing, dtype=str
        )
        space = np.asarray(
            ["input"] * len(self.idx) if space is None else space, dtype=str
        )
        # the model's space's earlier name
        self.space = np.where(space == "classifier", "model", space)

    def __len__(self):
        return len(self.idx)

    def __repr__(self):
        accuracy = self.correct.mean() if len(self) else 0.0
        return f"CertificateLog(n={len(self)}, accuracy={accuracy:.4g})"


def _format_time(seconds):
    return (
        "nan"
        if not np.isfinite(seconds)
        else str(datetime.timedelta(seconds=float(seconds)))
    )


def _parse_time(text):
    if text == "nan":
        return np.nan
    hours, minutes, seconds = text.split(":")
    if "day" in hours:
        days, hours = hours.split(" day")[0], hours.split(", ")[-1]
    else:
        days = 0
    return int(days) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _parse_labels(values):
    try:
        return np.array([int(v) for v in values], dtype=np.int64)
    except ValueError:
        return np.array(values, dtype=object)


def format_log_row(
    i,
    y_true,
    label,
    abstained,
    radius,
    proxy_radius,
    time,
    strategy,
    n_draws,
    smoothing="",
    space="input",
):
    """One TSV line of a certificate log (no trailing newline)."""
    correct = int((not abstained) and label == y_true)
    return "\t".join(
        [
            str(int(i)),
            str(y_true),
            str(label),
            repr(float(radius)),
            str(correct),
            _format_time(time),
            repr(float(proxy_radius)),
            str(int(abstained)),
            str(strategy),
            str(int(n_draws)),
            str(smoothing),
            str(space),
        ]
    )


def write_certificates_tsv(file, certificates, y_true, *, idx=None):
    """Write certificates as a Cohen-style TSV log.

    Parameters
    ----------
    file : str, path-like or text file object
    certificates : Certificates or CertificateLog
    y_true : array-like of shape (n_samples,)
        True labels (the log's ``label`` column).
    idx : array-like of int, default=None
        Input indices (``0..n-1`` by default).
    """
    y_true = np.asarray(y_true)
    n = len(certificates.label)
    if y_true.shape != (n,):
        raise ValueError(f"y_true has {len(y_true)} labels for {n} certificates.")
    idx = np.arange(n) if idx is None else np.asarray(idx)
    strategies, smoothings = (
        np.broadcast_to(np.asarray(getattr(certificates, name, ""), dtype=object), (n,))
        for name in ("strategy", "smoothing")
    )
    space = getattr(certificates, "space", "input")
    spaces = np.broadcast_to(np.asarray(space, dtype=object), (n,))
    n_draws = getattr(certificates, "n_draws", np.full(n, -1))
    lines = ["\t".join(COLUMNS)]
    for i in range(n):
        lines.append(
            format_log_row(
                idx[i],
                y_true[i],
                certificates.label[i],
                certificates.abstained[i],
                certificates.radius[i],
                certificates.proxy_radius[i],
                certificates.time[i],
                strategies[i],
                n_draws[i],
                smoothings[i],
                spaces[i],
            )
        )
    text = "\n".join(lines) + "\n"
    if isinstance(file, (str, os.PathLike)):
        with open(file, "w") as handle:
            handle.write(text)
    else:
        file.write(text)


def read_certificates_tsv(file):
    """Read a certificate log written by :func:`write_certificates_tsv`.

    Cohen et al.'s own logs (six columns, ``-1`` for an abstention) read too.

    Parameters
    ----------
    file : str, path-like or text file object

    Returns
    -------
    CertificateLog
    """
    if isinstance(file, (str, os.PathLike)):
        with open(file) as handle:
            text = handle.read()
    else:
        text = file.read()
    rows = [line.split("\t") for line in io.StringIO(text).read().splitlines() if line]
    if not rows:
        raise ValueError("empty certificate log")
    header, body = rows[0], rows[1:]
    if tuple(header[:6]) != COLUMNS[:6]:
        raise ValueError(f"not a certificate log: header {header!r}")
    columns = {name: [r[j] for r in body] for j, name in enumerate(header)}
    for r in body:
        if len(r) != len(header):
            raise ValueError(f"malformed log row {r!r}")
    predict = _parse_labels(columns["predict"])
    if "abstained" in columns:
        abstained = np.array([v == "1" for v in columns["abstained"]])
    else:  # Cohen's logs: -1 marks an abstention
        abstained = np.array([v == "-1" for v in columns["predict"]])
    radius = np.array([float(v) for v in columns["radius"]])
    return CertificateLog(
        idx=[int(v) for v in columns["idx"]],
        y_true=_parse_labels(columns["label"]),
        label=predict,
        abstained=abstained,
        radius=radius,
        proxy_radius=[float(v) for v in columns.get("proxy_radius", columns["radius"])],
        correct=[v == "1" for v in columns["correct"]],
        time=[_parse_time(v) for v in columns["time"]],
        strategy=columns.get("strategy", [""] * len(body)),
        n_draws=[int(v) for v in columns["n_draws"]] if "n_draws" in columns else None,
        smoothing=columns.get("smoothing"),
        space=columns.get("space"),
    )
