"""The live capture: the target process, the capture loop over the collectors, its stop signals and progress line."""
