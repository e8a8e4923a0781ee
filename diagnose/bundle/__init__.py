"""The capture bundle: the on-disk contract between capture and analysis.

A bundle is a directory ``diagnose-<pid>-<UTC time>/`` (mode 0700) holding ``manifest.json``,
one stream per collector (JSON Lines, flushed as records arrive, or the producer's own format),
and after analysis the generated documents. Every file is created 0600.

- files.py: private (0600, no-follow, atomic) writes;
- manifest.py: the typed Manifest, collector states, validation;
- streams.py: every stream declared once (name, collector, record shape, reader);
- writer.py: the bundle directory and its streams while capturing;
- reader.py: Bundle, with each stream parsed once and cached.

Standard library only (the in-target agent imports it); importers/ is host-side and may not be.
"""
from __future__ import annotations

from diagnose.bundle.errors import BundleError
from diagnose.bundle.files import write_private_bytes, write_private_text
from diagnose.bundle.manifest import (
                                      MANIFEST,
                                      SCHEMA_VERSION,
                                      CollectorState,
                                      CollectorStatus,
                                      Manifest,
                                      manifest_problem,
)
from diagnose.bundle.reader import Bundle
from diagnose.bundle.streams import FINDINGS, REPORT, StreamSpec
from diagnose.bundle.writer import IMPORT_LABEL, BundleWriter, JsonlStream, bundle_dir_name, create_bundle_dir

__all__ = ["FINDINGS", "IMPORT_LABEL", "MANIFEST", "REPORT", "SCHEMA_VERSION", "Bundle", "BundleError",
           "BundleWriter", "CollectorState", "CollectorStatus", "JsonlStream", "Manifest", "StreamSpec",
           "bundle_dir_name", "create_bundle_dir", "manifest_problem", "write_private_bytes",
           "write_private_text"]
