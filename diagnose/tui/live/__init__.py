"""The live dashboard during a capture: capture thread, partial-bundle readers, background analysis,
pure adapters and the screen."""
