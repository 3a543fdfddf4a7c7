"""Watching zerolayer run: the Prometheus exporter and `zerolayer top`."""
