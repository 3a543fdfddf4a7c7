# SPDX-License-Identifier: Apache-2.0
"""Watching zerolayer run: the Prometheus exporter and `zerolayer top`."""
