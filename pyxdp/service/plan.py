# SPDX-License-Identifier: Apache-2.0
"""What it takes to make a host match a configuration: a pure function of
the configuration and of what was observed, so it can be checked without
a kernel (docs/spec.md §10.3).

Each interface the file resolves to gets one action:
  attach     nothing runs there, or libxdp's dispatcher with other tools'
             programs: attach zerolayer (joining them)
  rename     zerolayer's program runs there, its pins still under the name the
             interface had (renamed since): the pins follow it
  foreign    another tool's program runs there, outside libxdp's dispatcher:
             left alone (not matching)
  missing    the file names an interface (or namespace) that is not there
  reattach   zerolayer runs in another mode than the file's: detach, attach
  upgrade    zerolayer runs there with another parser build than this
             kernel gets, or at another priority in libxdp's dispatcher
             than the file's: upgrade in place
  configure  zerolayer runs there with other settings: written live
  keep       it matches already
With prune, every other zerolayer attachment (or its stale pins) in the
namespaces in scope (those the file names) gets `detach`, and each of them
that is gone but for zerolayer's pins gets `unpin` (those pins alone hold
its programs); a tuning profile with knobs to change gets `tune`, one that
holds already `keep`.
"""

import fnmatch
from dataclasses import dataclass, field

from pyxdp.service.config import Config, Interface

UNMET = ("foreign", "missing")  # cannot be made to match: apply exits 1
KEEP = "keep"


@dataclass(frozen=True)
class Link:
    """An interface as observed, with zerolayer's settings when it runs there."""

    name: str
    netns: str | None
    exists: bool = True  # False: only zerolayer's stale pins are left of it
    driver: str | None = None
    owner: str | None = None  # "zerolayer", "foreign", or None: no XDP program
    program: str | None = None  # the attached program's name
    mode: str | None = None  # native or skb
    parser: str | None = None  # the parser build of zerolayer's program
    stale_pins: bool = False
    renamed_from: str | None = None  # the name whose stale pins its program uses
    ports: tuple[int, ...] = ()
    on_malformed: str | None = None
    flows: bool | None = None
    forward: bool | None = None
    dispatcher: bool = False  # libxdp's dispatcher runs there
    priority: int | None = None  # zerolayer's in it


@dataclass(frozen=True)
class Observed:
    links: dict[str | None, list[Link]]  # by namespace; a namespace that is not there is absent
    parser: str  # the parser build this kernel gets (pyxdp.xdp.parsers)
    tuning_changes: int | None = None  # knobs the profile would change (None: no [tuning])
    stale_netns: tuple[str, ...] = ()  # namespaces that are gone, their pins left


@dataclass(frozen=True)
class Action:
    action: str
    interface: str | None  # None for tune and unpin
    netns: str | None
    reason: str  # why, one line
    want: Interface | None = None  # the entry that asks for it (None for detach and tune)
    settings: dict = field(default_factory=dict)  # what configure changes: key -> [old, new]
    renamed_from: str | None = None  # rename: the name the pins are under


def _settings_of(want: Interface) -> dict:
    return {"ports": list(want.ports), "on_malformed": want.on_malformed,
            "flows": want.flows, "forward": want.forward}


def _settings_now(link: Link) -> dict:
    return {"ports": list(link.ports), "on_malformed": link.on_malformed,
            "flows": link.flows, "forward": link.forward}


def _matches(want: Interface, link: Link) -> bool:
    if not link.exists:
        return False
    if want.name is not None:
        return link.name == want.name
    assert want.match is not None
    if link.name == "lo":  # a glob never means the loopback device
        return False
    return ((want.match.name is None or fnmatch.fnmatchcase(link.name, want.match.name))
            and (want.match.driver is None or link.driver == want.match.driver))


def resolve(config: Config, observed: Observed) -> tuple[list[tuple[Interface, Link]], list[Interface]]:
    """Each interface the file resolves to, with the entry that claims it
    (an entry by name before any match; among matches, the first in the
    file), and the entries by name whose interface is not there."""
    claimed: dict[tuple, tuple[Interface, Link]] = {}
    missing = []
    ordered = sorted(config.interfaces, key=lambda i: i.name is None)  # stable: file order kept
    for want in ordered:
        links = observed.links.get(want.netns)
        found = [link for link in links or [] if _matches(want, link)]
        if want.name is not None and not found:
            missing.append(want)
        for link in found:
            claimed.setdefault((link.netns, link.name), (want, link))
    return list(claimed.values()), missing


def _for(want: Interface, link: Link, parser: str) -> Action:
    def act(action: str, reason: str, **kw) -> Action:
        return Action(action, link.name, link.netns, reason, want, **kw)

    if link.renamed_from is not None:
        return act("rename", f"renamed from {link.renamed_from}: zerolayer's pins follow it",
                   renamed_from=link.renamed_from)
    if link.owner is None:
        why = "no XDP program runs there"
        return act("attach", why + (" (stale pins are removed)" if link.stale_pins else ""))
    if link.owner != "zerolayer":
        if link.dispatcher:
            return act("attach", "libxdp's dispatcher runs there: zerolayer joins the programs in it")
        if want.replace:
            return act("replace", f"'{link.program}' runs there; the file says replace = true")
        return act("foreign", f"another tool's XDP program '{link.program}' runs there: "
                              "left alone (replace = true would replace it)")
    if want.mode not in ("auto", link.mode):
        return act("reattach", f"zerolayer runs in {link.mode} mode, the file asks for "
                               f"{want.mode} (the kernel cannot swap modes in one step)")
    if link.parser != parser:
        return act("upgrade", f"zerolayer runs the {link.parser or 'unknown'} parser build "
                              f"({link.program}), this kernel gets the {parser} one")
    if link.priority is not None and link.priority != want.priority:
        return act("upgrade", f"zerolayer runs at priority {link.priority} in libxdp's "
                              f"dispatcher, the file asks for {want.priority}")
    now, wanted = _settings_now(link), _settings_of(want)
    diff = {k: [now[k], wanted[k]] for k in wanted if now[k] != wanted[k]}
    if diff:
        return act("configure", ", ".join(f"{k} {_show(a)} -> {_show(b)}"
                                          for k, (a, b) in diff.items()), settings=diff)
    return act(KEEP, "matches the file")


def _show(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def plan(config: Config, observed: Observed, prune: bool = False,
         scope: set[str | None] | None = None) -> list[Action]:
    """The actions, in order: the file's interfaces (by namespace, then
    name), the missing ones, the prune's (detach, unpin), the tuning. SCOPE: the
    namespaces --prune looks at (scope_of)."""
    resolved, missing = resolve(config, observed)
    actions = [_for(want, link, observed.parser) for want, link in
               sorted(resolved, key=lambda wl: (wl[1].netns or "", wl[1].name))]
    for want in missing:
        where = want.netns is not None and want.netns not in observed.links
        why = f"network namespace {want.netns} does not exist" if where else "no such interface"
        if where and want.netns in observed.stale_netns and not prune:
            why += " (zerolayer's pins there are stale: --prune removes them)"
        actions.append(Action("missing", want.name, want.netns, why, want))
    if prune:
        named = {(link.netns, link.name) for _, link in resolved}
        for netns in sorted(scope_of(config, scope), key=lambda n: n or ""):
            links = observed.links.get(netns, [])
            followed = {link.renamed_from for link in links}
            for link in links:
                if (netns, link.name) in named or link.name in followed:
                    continue
                if link.renamed_from is not None:  # its pins first; detached at the next round
                    actions.append(Action("rename", link.name, netns,
                                          f"renamed from {link.renamed_from}: zerolayer's "
                                          "pins follow it, to detach it",
                                          renamed_from=link.renamed_from))
                elif link.owner == "zerolayer" or link.stale_pins:
                    why = ("the file does not name it" if link.exists
                           else "stale pins of an interface that is gone")
                    actions.append(Action("detach", link.name, netns, why))
            if netns in observed.stale_netns:
                actions.append(Action("unpin", None, netns,
                                      f"network namespace {netns} is gone: zerolayer's pins "
                                      "there, and the programs they hold, are removed"))
    if observed.tuning_changes is not None:
        assert config.tuning is not None
        n = observed.tuning_changes
        actions.append(Action("tune" if n else KEEP, None, config.tuning.netns,
                              f"profile {config.tuning.profile}: " +
                              (f"{n} knob(s) to change" if n else "every knob holds")))
    return actions


def scope_of(config: Config, scope: set[str | None] | None = None) -> set[str | None]:
    """The namespaces --prune looks at: SCOPE, else each one the file names
    an interface in (the host's when an [[interface]] has no netns). A
    namespace the file does not name is not the file's to prune."""
    return config.namespaces() if scope is None else scope


def matched(actions: list[Action]) -> bool:
    """Whether the host matches the file: nothing left to do or refused."""
    return all(a.action == KEEP for a in actions)
