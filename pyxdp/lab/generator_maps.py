"""The generator program's side in Python (bpf/xdp_tx.c): its name, maps,
sizes and layouts. Kept apart from pyxdp.lab.generator so that the loader,
which passes the sizes to the C (pyxdp.xdp.compiler.shared_defines), can
import them without importing the generator."""

import struct

from pyxdp.cstruct import Layout

GENERATOR_PROGRAM = ("xdp_tx.c", "xdp_tx_gen")
GENERATOR_MAPS = {"templates": "zl_gen_templates", "schedule": "zl_gen_schedule",
                  "state": "zl_gen_state"}
MAX_TEMPLATE_LEN = 1536  # ZL_GEN_MAX_LEN: >= 1500-byte MTU + Ethernet + two VLAN tags
MAX_TEMPLATES = 16  # ZL_GEN_TEMPLATES
MAX_SLOTS = 4096  # ZL_GEN_SLOTS: schedule slots

# Map values (bpf/xdp_tx.c): change both together.
TEMPLATE = Layout("zl_gen_template", ("len", "I"), ("data", f"{MAX_TEMPLATE_LEN}s"))
STATE = Layout("zl_gen_state", ("slots", "I"), ("next", "I"), ("errors", "Q"))
INDEX = struct.Struct("=I")
# A test run's context: the kernel's struct xdp_md (uapi/linux/bpf.h).
XDP_MD = Layout(
    "xdp_md",
    ("data", "I"),
    ("data_end", "I"),
    ("data_meta", "I"),
    ("ingress_ifindex", "I"),
    ("rx_queue_index", "I"),
    ("egress_ifindex", "I"),
)
