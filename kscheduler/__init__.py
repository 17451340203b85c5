"""kscheduler: a Kubernetes scheduler written in Python asyncio."""

__version__ = "0.1.0"
