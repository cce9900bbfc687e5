"""Package data of xpushare (YAML tables kept as data, read with :mod:`importlib.resources`).

``required_metrics.yaml``: the metric families MET-002 and ``invoke metrics-check`` require.
"""
