"""report.md: the ticket-sized Markdown report (report), with its GPU and kernel-timeline sections."""
