# SPDX-License-Identifier: Apache-2.0
"""Every kind a profile may name, by the name it is given there.

The profile loader checks an entry with its kind's class, the engine expands
it with the same class, and --revert rebuilds a recorded knob from KNOBS.
"""

from pyxdp.tuning.advice import Note, Refuse
from pyxdp.tuning.cpu import CpuIdle, Governor
from pyxdp.tuning.irq import IrqAffinity
from pyxdp.tuning.kind import Kind
from pyxdp.tuning.knobs import Knob
from pyxdp.tuning.nic import NicAttr
from pyxdp.tuning.qdisc import RootQdisc
from pyxdp.tuning.sysctl import Sysctl

KNOBS: dict[str, type[Knob]] = {
    cls.kind: cls for cls in (Sysctl, RootQdisc, NicAttr, IrqAffinity, Governor, CpuIdle)
}
KINDS: dict[str, type[Kind]] = {**KNOBS, Refuse.kind: Refuse, Note.kind: Note}
