"""Comparing two sets of certificates field by field, with tolerances.

``cert_a == cert_b`` is identity for :class:`~smoothlearn.regions.Certificates`
(its arrays make elementwise equality ambiguous); these functions say whether
two sets agree on what a certificate states (labels, abstentions, bounds,
radii, regions), and where they first differ.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["CertificateComparison", "assert_certificates_equal", "compare_certificates"]

#: Fields compared exactly, per row.
EXACT_FIELDS = ("label", "abstained")
#: Fields compared within ``rtol`` and ``atol``, per row.
NUMERIC_FIELDS = ("p_lower", "radius", "proxy_radius")
#: What a region adds: its gap and its scale's arrays (and its centre).
REGION_FIELDS = ("gap", "center")


@dataclass(frozen=True)
class CertificateComparison:
    """Whether two certificate sets agree, and where they first differ.

    True in a boolean context when they agree.

    Attributes
    ----------
    equal : bool
    differences : list of str
        One line per differing field: how many rows differ, the first rows
        and their two values (at most ``max_rows`` rows each).
    compared : tuple of str
        The fields compared.
    """

    equal: bool
    differences: list
    compared: tuple

    def __bool__(self):
        return self.equal

    def __str__(self):
        if self.equal:
            return f"certificates agree on {', '.join(self.compared)}"
        return "certificates differ:\n  " + "\n  ".join(self.differences)


def _rows_text(rows, a, b, max_rows):
    shown = ", ".join(f"[{i}] {a[i]!r} != {b[i]!r}" for i in rows[:max_rows])
    more = f", ... ({len(rows) - max_rows} more)" if len(rows) > max_rows else ""
    return shown + more


def _numeric_rows(a, b, rtol, atol):
    """Rows (first axis) where ``a`` and ``b`` differ beyond the tolerance."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    close = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    return np.flatnonzero(~close.reshape(len(a), -1).all(axis=1))


def compare_certificates(
    actual, expected, *, rtol=0.0, atol=0.0, regions=True, max_rows=5
):
    """Compare two certificate sets of the same inputs, field by field.

    Labels and abstentions must be equal; ``p_lower``, ``radius`` and
    ``proxy_radius`` agree within ``|actual - expected| <= atol + rtol *
    |expected|`` (numpy's ``isclose``); with ``regions=True`` so do the
    regions: ``gap``, ``center`` and every array of the scale (its form,
    ``scale``, ``basis``, ``scale_rest``, frame and cuts), and the noise
    family, ``reduced`` flags and units (``space``, ``input_map``) are equal.
    The default tolerances ask for bitwise equality (what one seed gives).

    Parameters
    ----------
    actual, expected : Certificates
    rtol, atol : float, default=0.0
        Relative and absolute tolerance of the numeric fields.
    regions : bool, default=True
        Compare the regions, not only labels, bounds and radii.
    max_rows : int, default=5
        Differing rows reported per field.

    Returns
    -------
    CertificateComparison
        Truthy when the sets agree; ``str()`` of it is a readable report.

    See Also
    --------
    assert_certificates_equal : The same, raising AssertionError (for tests).

    Examples
    --------
    >>> import numpy as np
    >>> from smoothlearn import Certificates
    >>> a = Certificates([0, 1], [False, False], [0.9, 0.8], [1.0, 0.5],
    ...                  np.zeros((2, 3)), np.array([0.25, 0.25]), "gaussian")
    >>> b = Certificates([0, 1], [False, False], [0.9, 0.8], [1.0, 0.6],
    ...                  np.zeros((2, 3)), np.array([0.25, 0.25]), "gaussian")
    >>> bool(compare_certificates(a, a)), bool(compare_certificates(a, b))
    (True, False)
    >>> print(compare_certificates(a, b, regions=False))
    certificates differ:
      radius: 1 of 2 rows differ: [1] 0.125 != 0.15
      proxy_radius: 1 of 2 rows differ: [1] 0.125 != 0.15
    """
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be finite and non-negative; got {value!r}.")
    differences = []
    if len(actual) != len(expected):
        differences.append(f"length: {len(actual)} != {len(expected)}")
        return CertificateComparison(False, differences, ("length",))
    n = len(actual)
    compared = list(EXACT_FIELDS + NUMERIC_FIELDS)
    for name in EXACT_FIELDS:
        a = np.asarray(getattr(actual, name))
        b = np.asarray(getattr(expected, name))
        rows = np.flatnonzero(a.astype(object) != b.astype(object))
        if len(rows):
            differences.append(
                f"{name}: {len(rows)} of {n} rows differ: "
                + _rows_text(rows, a.tolist(), b.tolist(), max_rows)
            )
    numeric = list(NUMERIC_FIELDS)
    if regions:
        for name in ("noise", "kind", "space"):
            a, b = getattr(actual, name), getattr(expected, name)
            compared.append(name)
            if a != b:
                differences.append(f"{name}: {a!r} != {b!r}")
        compared.append("reduced")
        a, b = np.asarray(actual.reduced), np.asarray(expected.reduced)
        rows = np.flatnonzero(a != b)
        if len(rows):
            differences.append(
                f"reduced: {len(rows)} of {n} rows differ: "
                + _rows_text(rows, a.tolist(), b.tolist(), max_rows)
            )
        numeric += list(REGION_FIELDS)
        map_a, map_b = actual.input_map, expected.input_map
        compared.append("input_map")
        if (map_a is None) != (map_b is None) or (
            map_a is not None
            and (
                map_a.shape != map_b.shape
                or not np.allclose(map_a, map_b, rtol=rtol, atol=atol)
            )
        ):
            differences.append("input_map: the preprocessing maps differ")
    for name in numeric:
        a, b = getattr(actual, name), getattr(expected, name)
        if np.shape(a) != np.shape(b):
            differences.append(f"{name}: shapes {np.shape(a)} != {np.shape(b)}")
            continue
        rows = _numeric_rows(a, b, rtol, atol)
        if len(rows):
            a1, b1 = np.asarray(a), np.asarray(b)
            if a1.ndim > 1:  # whole rows do not print well: say which rows
                text = ", ".join(str(i) for i in rows[:max_rows])
            else:
                text = _rows_text(rows, a1.tolist(), b1.tolist(), max_rows)
            differences.append(f"{name}: {len(rows)} of {n} rows differ: {text}")
    if regions and actual.kind == expected.kind:
        arrays_a, arrays_b = actual.scales._arrays(), expected.scales._arrays()
        for part, a in arrays_a.items():
            b = arrays_b[part]
            label = f"scale.{part}"
            compared.append(label)
            if (a is None) != (b is None):
                differences.append(f"{label}: present in one set only")
            elif a is not None:
                if np.shape(a) != np.shape(b):
                    differences.append(
                        f"{label}: shapes {np.shape(a)} != {np.shape(b)}"
                    )
                    continue
                rows = _numeric_rows(a, b, rtol, atol)
                if len(rows):
                    text = ", ".join(str(i) for i in rows[:max_rows])
                    differences.append(
                        f"{label}: {len(rows)} of {n} rows differ: {text}"
                    )
    return CertificateComparison(not differences, differences, tuple(compared))


def assert_certificates_equal(
    actual, expected, *, rtol=0.0, atol=0.0, regions=True, max_rows=5
):
    """Raise AssertionError unless two certificate sets agree (for tests).

    :func:`compare_certificates` with its report as the error message.

    Parameters
    ----------
    actual, expected : Certificates
    rtol, atol : float, default=0.0
    regions : bool, default=True
    max_rows : int, default=5

    Raises
    ------
    AssertionError
        Where they differ, naming the fields and the first differing rows.
    """
    comparison = compare_certificates(
        actual, expected, rtol=rtol, atol=atol, regions=regions, max_rows=max_rows
    )
    if not comparison:
        raise AssertionError(str(comparison))
