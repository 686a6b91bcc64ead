"""Moved to :mod:`lit_gpu.files.build` (the one door for file content); these names stay importable here."""

from lit_gpu.files.build import (
    NESTED_KINDS,
    TRUST_ENV,
    TRUSTED_ROOTS,
    UNTRUSTED_MODULES,
    UnsafeBuildError,
    build,
    check,
    check_hparams,
    is_true_subclass,
    lightning_base,
    resolve_class,
    trusted_roots,
)

__all__ = [
    "NESTED_KINDS",
    "TRUSTED_ROOTS",
    "TRUST_ENV",
    "UNTRUSTED_MODULES",
    "UnsafeBuildError",
    "build",
    "check",
    "check_hparams",
    "is_true_subclass",
    "lightning_base",
    "resolve_class",
    "trusted_roots",
]
