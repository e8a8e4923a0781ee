"""Compare two captures: metrics side by side with their run-to-run noise, a regression gate, the
performance file. ``diff.compare`` is pure; ``document`` renders a comparison (Markdown, JSON); ``perf_file``
reads and writes the user's file."""
