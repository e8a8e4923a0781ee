"""Several ranks of one job: per-rank results (traces/ranktime.py), the job analysis (job.py,
pure), its typed results (model.py), and where per-rank tasks run (fanout.py)."""
