# SPDX-License-Identifier: Apache-2.0
"""Every section of `zerolayer bench`, in the order they run and report.

The runner, the CLI and the plot loop over SECTIONS; a new section is its
module and one line here (docs/bench-sections.md).
"""

from pyxdp.bench import forward, parser, xdp_path, zerocopy
from pyxdp.bench.core import section as core
from pyxdp.bench.delivery import section as delivery
from pyxdp.bench.latency import section as latency
from pyxdp.bench.relay import section as relay
from pyxdp.bench.section import Section
from pyxdp.bench.streams import section as streams
from pyxdp.bench.tune import section as tune
from pyxdp.bench.tx import section as tx

SECTIONS: dict[str, Section] = {s.name: s for s in (
    parser.SECTION, xdp_path.SECTION, delivery.SECTION, tx.SECTION, forward.SECTION,
    relay.SECTION, core.SECTION, zerocopy.SECTION, streams.SECTION, latency.SECTION,
    tune.SECTION)}
DEFAULT_SECTIONS = tuple(name for name, s in SECTIONS.items() if s.default)
