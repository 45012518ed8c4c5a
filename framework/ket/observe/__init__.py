"""Watching a running ket from outside: logs as JSON lines, metrics for Prometheus.

    logs.py      the JSON log formatter, and the third-party loggers kept at WARNING
    labels.py    bounded label values: declared queue and job names, tenants only when asked
    metrics.py   lifecycle events -> counters and histograms; the registry and its exposition
    tally.py     those counters and histograms: plain lists, no lock, read at scrape time
    gauges.py    the tenants' job stats (runtime/stats.py) -> gauges, read at scrape time
    exporter.py  prometheus_client's own HTTP server for `ket worker --metrics-port`

It watches the runtime through what the runtime already offers (lifecycle hooks, `job_stats`),
so the runtime never imports it. prometheus_client is the optional `metrics` extra:
only metrics.py, tally.py, gauges.py and exporter.py import it, and only a process that asked
for metrics imports them.
"""
