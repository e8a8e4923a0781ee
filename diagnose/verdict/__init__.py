"""rules -> findings -> verdict: evaluate the rules over the signals, decide the quadrant and layer,
apply --thresholds overrides."""
