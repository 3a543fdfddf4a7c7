# SPDX-License-Identifier: Apache-2.0
"""The "with" arm of the tune section: a shipped profile applied to the
bench's lab (pyxdp.tuning.engine), and reverted when the arm ends, whatever
happened in it.

- The dut namespace gets the profile's own knobs of a namespace (scope
  "netns": its per-namespace sysctls, and the per-device knobs, root qdisc
  and NIC attributes, on the dut's interface).
- The peer gets nothing: it stands for the network the tokens come from,
  and the profiles tune the host that serves them. Their per-namespace
  knobs are TCP's, which the UDP sender does not use, and a qdisc on the
  peer would shape the load itself.
- Host-wide knobs (scope "global": host-wide sysctls, the CPU governor and
  idle states, IRQ affinity) change the machine outside the lab: they are
  applied, on the host, only when the bench is told it may
  (--tune-host-wide); otherwise each is listed as not applied.

The engine's state goes to STATE_DIR, a directory of the run, never tune's
default one, so a user's own `zerolayer tune` state is neither read nor
replaced.
"""

import contextlib
import subprocess
from collections.abc import Iterator

from pyxdp.errors import ZerolayerError

HOST_WIDE = "not applied: host-wide (`zerolayer bench --tune-host-wide` applies it)"
NOT_SEEN = "host-wide, but it acts on the lab's device, which the host's namespace does not have"


def _passes(lab, host_wide: bool) -> list[tuple[str | None, list[str], set[str]]]:
    """(netns, interfaces, scopes) of each apply, in order; reverts go backwards."""
    passes: list[tuple[str | None, list[str], set[str]]] = [
        (lab.dut.netns, [lab.dut.ifname], {"netns"})]
    if host_wide:
        passes.append((None, [], {"global"}))
    return passes


def effect_of(reports: list, host_wide: bool) -> dict:
    """What the arm changed ("applied": knob names) and what it did not
    ("skipped": knob and why), from the engine's reports of each pass."""
    host = {row.knob for rep in reports[1:] for row in rep.rows if row.scope == "global"}
    rows = [row for row in reports[0].rows if not (row.scope == "global" and row.knob in host)]
    rows += [row for rep in reports[1:] for row in rep.rows if row.scope == "global"]
    applied, skipped = [], []
    for row in rows:
        if row.status == "applied":
            applied.append(row.knob)
        elif row.scope == "global" and row.knob not in host:
            skipped.append({"knob": row.knob, "why": NOT_SEEN if host_wide else HOST_WIDE})
        elif row.status == "unchanged":
            skipped.append({"knob": row.knob, "why": f"holds the profile's value ({row.after}) "
                            "already: the arms do not differ in it"})
        else:
            skipped.append({"knob": row.knob, "why": f"{row.status}: {row.reason}"})
    return {"applied": applied, "skipped": skipped}


@contextlib.contextmanager
def applied(chosen, lab, state_dir: str, host_wide: bool) -> Iterator[dict]:
    """CHOSEN (a pyxdp.tuning.profile.Profile) applied to LAB while the
    block runs: yields what it applied and skipped. On exit every pass is
    reverted, the last first; a knob that cannot be put back fails the
    bench, naming the state file that still holds its original value."""
    from pyxdp.tuning import engine

    passes = _passes(lab, host_wide)
    reports = []
    try:
        for netns, interfaces, scopes in passes:
            reports.append(engine.apply(chosen, netns=netns, interfaces=interfaces,
                                        state_dir=state_dir, scopes=scopes))
        yield effect_of(reports, host_wide)
    finally:
        failed = []
        for netns, _, _ in reversed(passes):
            try:
                undo = engine.revert(netns=netns, state_dir=state_dir)
            except ZerolayerError as exc:
                failed.append(str(exc))
                continue
            if undo.error:
                failed.append(undo.error)
        if failed:
            raise ZerolayerError(f"reverting profile {chosen.name} after its arm failed: "
                                 + "; ".join(failed))


def touched(names) -> tuple[list[str], list[str]]:
    """The sysctls and the device attributes profiles NAMES may set, sorted."""
    from pyxdp.tuning import profile

    sysctls, attrs = set(), set()
    for name in names:
        for step in profile.load(name).steps:
            for spec in step.knobs:
                if spec.kind == "sysctl":
                    sysctls.add(spec["name"])
                elif spec.kind == "qdisc":
                    sysctls.add("net.core.default_qdisc")
                elif spec.kind == "nic":
                    attrs.add(spec["attr"])
    return sorted(sysctls), sorted(attrs)


def lab_state(lab, sysctls: list[str], attrs: list[str]) -> dict[str, str]:
    """What SYSCTLS read in the dut namespace, the dut device's ATTRS, and
    its qdiscs (`tc qdisc show`): read directly, not through the engine,
    so a revert the engine got wrong shows here."""
    from pyxdp.tuning.host import opened

    out = {}
    with opened(lab.dut.netns) as host:  # this thread in the dut namespace, its sysfs
        for name in sysctls:
            out[name] = _read(host.sysctl_path(name))
        for attr in attrs:
            out[f"{lab.dut.ifname}/{attr}"] = _read(host.sys_path("class", "net",
                                                                  lab.dut.ifname, attr))
        # A child starts in the namespace of the thread that forks it.
        tc = subprocess.run(["tc", "qdisc", "show", "dev", lab.dut.ifname],
                            capture_output=True, text=True)
    shown = " | ".join(line.strip() for line in tc.stdout.splitlines() if line.strip())
    out[f"{lab.dut.ifname} qdiscs"] = shown if tc.returncode == 0 else f"tc failed: {tc.stderr}"
    return out


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return " ".join(f.read().split())
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
