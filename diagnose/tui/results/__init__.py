"""The results browser: pure adapters from a Report to view-models, and the screen."""
