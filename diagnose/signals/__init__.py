"""signals(Bundle): every typed signal the rules read, with units and provenance.

Reading the bundle's streams happens in ``load``; everything after that is pure.
"""
from diagnose.signals.extract import Extracted, extract

__all__ = ["Extracted", "extract"]
