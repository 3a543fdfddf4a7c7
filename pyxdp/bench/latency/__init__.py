# SPDX-License-Identifier: Apache-2.0
"""The `latency` section of `zerolayer bench` (section.py): one-way latency
at token cadence, a paced C sender (paced_sender.c, built and run by
sender.py) against four consumers in a process of their own (consumer.py),
the runs in measure.py, their percentiles in stats.py."""
