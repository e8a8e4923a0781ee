"""diagnose: bottleneck diagnosis for AI inference and training services."""
__version__ = "0.1.0"
