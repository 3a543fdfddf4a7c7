"""`zerolayer bench`: every performance figure zerolayer quotes, each against its floor, side by side in one run.

The sections, in the order they run and report (pyxdp.bench.runner):
parser (parser cost), xdp (XDP path throughput), delivery (delivery into
Python) and relay (the TCP relay). Kept here, light, for the CLI to list.
"""

SECTIONS = ("parser", "xdp", "delivery", "relay")
DEFAULT_SECTIONS = ("parser", "xdp", "delivery")
