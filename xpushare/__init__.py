"""xpushare: a remote test orchestrator for GPU-sharing Kubernetes clusters (nvshare / xpushare)."""

__version__ = "0.1.0"
