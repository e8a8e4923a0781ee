"""``diagnose doctor``: what this host, its GPUs and a target's agent offer; each problem with its fix. Reads only."""
