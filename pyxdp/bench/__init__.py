# SPDX-License-Identifier: Apache-2.0
"""`zerolayer bench`: every performance figure zerolayer quotes, each
against its floor, side by side in one run.

Each section is one unit (pyxdp.bench.section), listed in
pyxdp.bench.registry in the order they run and report: parser (parser
cost), xdp (XDP path throughput), delivery (delivery into Python), tx
(sending over AF_XDP), forward (XDP forwarding through a router), relay
(the TCP relay), core (what a batch costs Python's receive and send
paths, pure core against compiled), zerocopy (zero-copy AF_XDP against
copy mode), streams (what the stream observer costs the processes it
watches), latency (token latency at a cadence, in percentiles) and tune
(what a tuning profile changes). pyxdp.bench.runner runs them,
pyxdp.bench.plot draws them. docs/bench-sections.md says how to add one.
"""
