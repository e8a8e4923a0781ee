"""Export a Report's verdict, quadrant shares, key metrics and findings to monitoring systems:
OTLP/HTTP metrics and logs (otlp.py), Prometheus text exposition to a file or on a port
(prometheus.py). ``snapshot.py`` builds what is sent (pure); ``targets.py`` parses ``--export``;
``run.py`` runs the targets and holds a Prometheus server open."""
