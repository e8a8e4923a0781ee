"""Compare two captures: metrics side by side with their run-to-run noise, a regression gate, the
performance file. ``diff.compare`` is pure; ``perf_file`` reads and writes the user's file."""
