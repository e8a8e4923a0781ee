"""The one error a bundle reader raises."""
from __future__ import annotations


class BundleError(Exception):
    """The path is not a readable bundle (missing manifest, unreadable JSON)."""


__all__ = ["BundleError"]
