# SPDX-License-Identifier: Apache-2.0
"""The `latency` section of `zerolayer bench` (section.py): one-way latency
at token cadence, a paced C sender (paced_sender.c, built and run by
sender.py) against five consumers in a process of their own (consumer.py),
the runs in measure.py, their percentiles in stats.py."""

# The consumers (consumer.py), in their order in every report: here, so
# that the section names them without importing what they need.
PATHS = ("af_xdp", "af_xdp_busy_poll", "af_xdp_asyncio", "udp", "udp_busy_poll")
