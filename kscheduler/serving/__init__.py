"""Secure serving of /metrics and /debug/*: TLS (tls.py) and delegated
authentication and authorization against the cluster's apiserver (auth.py)."""
