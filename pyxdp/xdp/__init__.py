# SPDX-License-Identifier: Apache-2.0
"""zerolayer's XDP program on an interface: compile, load, attach through netlink, pin, own, configure live, and read its counters and flows."""
