"""Metrics, scorers, logs and plots of certificates (DESIGN.md section 7)."""

from ._certified import (
    average_certified_radius,
    average_radius_improvement,
    certified_accuracy,
    certified_accuracy_curve,
    clean_accuracy,
    superset_share,
)
from ._io import CertificateLog, read_certificates_tsv, write_certificates_tsv
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
    "CertificateLog",
    "CertificateMetricScorer",
    "CertificateScorer",
    "CertifiedAccuracyDisplay",
    "SequentialCertifiedAccuracy",
    "acr_scorer",
    "average_certified_radius",
    "average_radius_improvement",
    "certified_accuracy",
    "certified_accuracy_caption",
    "certified_accuracy_curve",
    "certified_accuracy_scorer",
    "certified_accuracy_table",
    "clean_accuracy",
    "get_scorer",
    "get_scorer_names",
    "make_certificate_scorer",
    "read_certificates_tsv",
    "superset_share",
    "write_certificates_tsv",
]
