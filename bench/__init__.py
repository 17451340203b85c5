"""Benchmarks: kscheduler side by side with kube-scheduler (run.py), and the
scheduling cycle alone, in process (cycle.py)."""
