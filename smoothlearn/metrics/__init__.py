"""Metrics, scorers, logs and plots of certificates (DESIGN.md section 7)."""

from ._certified import (
    average_certified_radius,
    average_radius_improvement,
    certified_accuracy,
    certified_accuracy_curve,
    clean_accuracy,
    superset_share,
)
from ._compare import (
    CertificateComparison,
    assert_certificates_equal,
    compare_certificates,
)
from ._interval import (
    CertifiedAccuracyInterval,
    certified_accuracy_interval,
    linf_certified_accuracy,
    linf_certified_radius,
)
from ._io import CertificateLog, read_certificates_tsv, write_certificates_tsv
from ._plower import PLowerDisplay, PLowerDistribution, p_lower_distribution
from ._report import (
    CertifiedAccuracyDisplay,
    certified_accuracy_caption,
    certified_accuracy_table,
)
from ._scorers import (
    CertificateMetricScorer,
    CertificateScorer,
    SequentialCertifiedAccuracy,
    acr_scorer,
    certified_accuracy_scorer,
    get_scorer,
    get_scorer_names,
    make_certificate_scorer,
)

__all__ = [
    "CertificateComparison",
    "CertificateLog",
    "CertificateMetricScorer",
    "CertificateScorer",
    "CertifiedAccuracyDisplay",
    "CertifiedAccuracyInterval",
    "PLowerDisplay",
    "PLowerDistribution",
    "SequentialCertifiedAccuracy",
    "acr_scorer",
    "assert_certificates_equal",
    "average_certified_radius",
    "average_radius_improvement",
    "certified_accuracy",
    "certified_accuracy_caption",
    "certified_accuracy_curve",
    "certified_accuracy_interval",
    "certified_accuracy_scorer",
    "certified_accuracy_table",
    "clean_accuracy",
    "compare_certificates",
    "get_scorer",
    "get_scorer_names",
    "linf_certified_accuracy",
    "linf_certified_radius",
    "make_certificate_scorer",
    "p_lower_distribution",
    "read_certificates_tsv",
    "superset_share",
    "write_certificates_tsv",
]
