# SPDX-License-Identifier: Apache-2.0
"""`zerolayer bench`: every performance figure zerolayer quotes, each
against its floor side by side, in sections run one after the other.

- parser (pyxdp.bench.parser): parser cost in ns per datagram, zerolayer's
  program against an XDP_PASS-only program, through BPF_PROG_TEST_RUN, for
  1, 4 and 16 frames per datagram.
- xdp (pyxdp.bench.xdp_path): XDP path throughput on veth, datagrams/s
  counted by zerolayer against a count-and-pass program, under the same
  generator load.
- delivery (pyxdp.bench.delivery): delivery into Python, frames/s and
  frames lost, pyxdp's AF_XDP socket against a UDP socket at three tiers of
  work per frame (count, touch, act), and against a C consumer on libxdp at
  the touch tier.
- tx (pyxdp.bench.tx): sending, datagrams/s counted at the lab's dut0,
  TokenSender (AF_XDP) against a socket.sendto loop and sendmmsg(2), the
  same datagrams, with two things for dut0 to do with them after XDP.
- forward (pyxdp.bench.forward): XDP forwarding, datagrams/s through a
  router (three namespaces) with zerolayer forwarding against the kernel's
  own IP forwarding, under the same generator load.
- relay (pyxdp.bench.relay): the TCP relay, frames/s and frame latency
  through the sockmap relay against the asyncio relay and a direct
  connection, on loopback.
- core (pyxdp.bench.core): what a batch of 16, 256 and 1,024
  datagrams costs Python's receive and send paths, fixed per batch and per
  frame, the pure core against the compiled one, on synthetic rings.

The first four share one veth lab, built for the run, with zerolayer
attached to its dut0; forward builds a routed lab of its own; the relay
and core need none. Without a choice, all but the relay run. Every figure
is the median of several rounds, with the min and the max; ratios are
taken within a round, then their median. Quick mode (for CI) runs each
section with fewer and shorter rounds: it produces every key, and its
numbers are not meant to be quoted.

The runner knows a section only as pyxdp.bench.section describes one, from
pyxdp.bench.registry: it measures each, then builds the report from what
each measured (assemble, which needs no kernel).
"""

import dataclasses
import os
import platform
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from pyxdp.bench.registry import DEFAULT_SECTIONS, SECTIONS
from pyxdp.bench.section import Progress, Rig, Section


@dataclass(frozen=True)
class Plan:
    quick: bool
    sections: dict[str, Any]  # each section's own plan, by name


FULL = Plan(quick=False, sections={name: s.full for name, s in SECTIONS.items()})
QUICK = Plan(quick=True, sections={name: s.quick for name, s in SECTIONS.items()})


def plan(quick: bool = False, *, rounds: int | None = None, **options) -> Plan:
    """FULL or QUICK, with what is given in place of its own: ROUNDS for
    every section, and OPTIONS, each a section's (its Section.options, by
    the CLI option's name: delivery_frames=5000)."""
    base = QUICK if quick else FULL
    plans = {}
    for name, section in SECTIONS.items():
        own = base.sections[name]
        if rounds is not None:
            own = dataclasses.replace(own, rounds=rounds)
        for option, field in section.options.items():
            value = options.pop(option, None)
            if isinstance(value, (list, tuple)):  # a repeated option: in the order given, once each
                value = tuple(dict.fromkeys(value)) or None
            if value is not None:
                own = dataclasses.replace(own, **{field: value})
        plans[name] = own
    if options:
        raise TypeError(f"no bench section takes {', '.join(options)}")
    return Plan(quick=base.quick, sections=plans)


def machine() -> dict:
    """What the figures were measured on."""
    info: dict = {"kernel": platform.release(), "arch": platform.machine(),
                  "cpus": os.cpu_count(), "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
        fields = dict(ln.split(":", 1) for ln in reversed(lines) if ":" in ln)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        info["cpu_model"] = fields.get("model name")
        info["virtualized"] = "hypervisor" in fields.get("flags", "").split()
    except OSError:
        pass
    try:
        with open("/sys/devices/system/cpu/vulnerabilities/spectre_v2") as f:
            info["spectre_v2"] = f.read().strip()
    except OSError:
        pass
    return info


def _quiet(line: str) -> None:
    pass


def run(sections: Collection[str] = DEFAULT_SECTIONS, plan: Plan = FULL,
        progress: Progress = _quiet, pair: tuple[str, str] | None = None) -> dict:
    """Run SECTIONS (names of SECTIONS, in any order; they run and report
    in SECTIONS' order) as PLAN says; returns the report (docs/spec.md §5.9).
    PAIR: (dut, peer), two interfaces of this namespace that reach each
    other, for the sections that run on the lab, in place of a veth pair."""
    unknown = set(sections) - set(SECTIONS)
    if unknown or not sections:
        raise ValueError(f"bench sections are some of {', '.join(SECTIONS)}, not "
                         f"{', '.join(sorted(unknown)) or 'none'}")
    started = time.monotonic()
    info = machine()
    chosen = [s for name, s in SECTIONS.items() if name in sections]
    on_lab = [s for s in chosen if s.on_lab]
    if pair and not on_lab:
        raise ValueError("a pair of interfaces is for the sections that run on the lab")
    measured = _measure_on_lab(on_lab, plan, progress, pair, info) if on_lab else {}
    for s in chosen:
        if not s.on_lab:
            measured[s.name] = s.measure(plan.sections[s.name], None, progress)
    report = assemble(info, plan, measured)
    report["duration_s"] = round(time.monotonic() - started, 1)
    return report


def _measure_on_lab(chosen: list[Section], plan: Plan, progress: Progress,
                    pair: tuple[str, str] | None, info: dict) -> dict[str, Any]:
    """What CHOSEN (sections that run on the lab) measured, side by side on
    one lab with zerolayer attached to its dut: a veth pair, or PAIR moved
    into the lab's namespaces. Each program is compiled once, and only if a
    section chosen needs it. What the lab ran on goes into INFO."""
    from pyxdp.bench.xdp_path import MODE
    from pyxdp.lab import generator
    from pyxdp.lab import veth_lab as lab_mod
    from pyxdp.xdp import loader, pins
    from pyxdp.xdp.testrun import TokenProgram

    lab_mod.sweep_stale()
    needs_gen = any(s.needs_generator for s in chosen)
    progress("compiling the programs (" + ", ".join(
        ["zerolayer"] + [s.compiles for s in chosen if s.compiles]
        + (["generator"] if needs_gen else [])) + ")")
    prepared = {s.name: s.prepare() for s in chosen if s.prepare}
    made: lab_mod.Lab
    if pair:
        from pyxdp.lab.pair_lab import PairLab

        made = PairLab(*pair)
    else:
        made = lab_mod.Lab()
    with made as lab:
        info["lab"] = _lab_info(lab, "pair" if pair else "veth")
        gen = generator.LiveGenerator(lab.peer.ifname, lab.peer.netns) if needs_gen else None
        # Attached once: every section uses this program (the delivery
        # section needs its pinned XSKMAP), so it is compiled once.
        loader.attach(lab.dut.ifname, mode=MODE, netns=lab.dut.netns)
        try:
            token = TokenProgram(pin_dir=pins.pin_dir(lab.dut.ifname, lab.dut.netns))
            try:
                return {s.name: s.measure(plan.sections[s.name],
                                          Rig(lab, token, gen, prepared.get(s.name)), progress)
                        for s in chosen}
            finally:
                token.close()
        finally:
            loader.detach(lab.dut.ifname, lab.dut.netns)


def _lab_info(lab, kind: str) -> dict:
    from pyxdp.kernel import ethtool, netns

    drivers = {}
    for role, end in (("dut", lab.dut), ("peer", lab.peer)):
        with netns.entered(end.netns):
            drivers[role] = ethtool.driver_name(end.ifname)
    return {"kind": kind, "dut": lab.dut.ifname, "peer": lab.peer.ifname, "drivers": drivers}


def assemble(info: dict, plan: Plan, measured: dict[str, Any]) -> dict:
    """The report (without its duration) from what each section MEASURED, by
    name, on the machine INFO describes: each section's entries in SECTIONS'
    order, then the targets."""
    report: dict = {"machine": info, "quick": plan.quick}
    ran = [name for name in SECTIONS if name in measured]
    for name in ran:
        report.update(SECTIONS[name].report(plan.sections[name], measured[name]))
    report["targets"] = targets(report, ran)
    return report


def targets(report: dict, sections: Iterable[str]) -> list[dict]:
    """Each target and goal of SECTIONS (names, of sections in REPORT), with
    the median measured against it, in SECTIONS' order."""
    return [t for name, s in SECTIONS.items() if name in set(sections) for t in s.targets(report)]
