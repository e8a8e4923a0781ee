"""The one error a bundle reader raises, and what malformed records raise in the code reading them."""
from __future__ import annotations


class BundleError(Exception):
    """The path is not a readable bundle (missing manifest, unreadable JSON)."""


# What malformed stream content raises in code that reads its records (wrong types, missing keys,
# absurd values): a hand-edited or corrupt record costs what it feeds, never the command.
MALFORMED = (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError,
             RecursionError, ZeroDivisionError)


__all__ = ["MALFORMED", "BundleError"]
