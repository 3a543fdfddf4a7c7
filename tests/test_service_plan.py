# SPDX-License-Identifier: Apache-2.0
"""The plan of `zerolayer apply` (docs/spec.md §10.3): for a given file and
a given observed host, the actions, without a kernel. No root."""

import pytest

from pyxdp.service import config
from pyxdp.service.plan import Link, Observed, matched, plan

FULL = "full"


def ours(name: str, netns: str | None = None, **kw) -> Link:
    settings = {"mode": "native", "parser": FULL, "program": "zerolayer_xdp", "ports": (9977,),
                "on_malformed": "drop", "flows": False, "forward": False, **kw}
    return Link(name, netns, owner="zerolayer", stale_pins=False, **settings)


def foreign(name: str, netns: str | None = None, dispatcher: bool = False) -> Link:
    """Another tool's program: alone (xdp-filter's, where libxdp had to load
    it alone), or libxdp's dispatcher with its programs."""
    program = "xdp_dispatcher" if dispatcher else "xdpfilt_alw_all"
    return Link(name, netns, owner="foreign", program=program, mode="native",
                dispatcher=dispatcher)


def free(name: str, netns: str | None = None, driver: str | None = None) -> Link:
    return Link(name, netns, driver=driver)


def host(*links: Link, namespaces=(None,), tuning: int | None = None) -> Observed:
    by_ns: dict = {ns: [] for ns in namespaces}
    for link in links:
        by_ns.setdefault(link.netns, []).append(link)
    return Observed(by_ns, FULL, tuning)


def actions(text: str, observed: Observed, **kw) -> list[tuple]:
    return [(a.action, a.interface, a.netns) for a in plan(config.parse(text), observed, **kw)]


SMALLEST = '[[interface]]\nname = "eth0"\nports = [9977]\n'


def test_attach_where_nothing_runs_and_keep_what_matches():
    assert actions(SMALLEST, host(free("lo"), free("eth0"))) == [("attach", "eth0", None)]
    steady = plan(config.parse(SMALLEST), host(ours("eth0")))
    assert [a.action for a in steady] == ["keep"]
    assert matched(steady)


def test_configure_names_what_differs():
    (action,) = plan(config.parse(SMALLEST.replace("[9977]", "[9977, 9978]") + "flows = true\n"),
                     host(ours("eth0")))
    assert action.action == "configure"
    assert action.settings == {"ports": [[9977], [9977, 9978]], "flows": [False, True]}
    assert action.reason == "ports 9977 -> 9977,9978, flows off -> on"
    assert not matched([action])


def test_defaults_are_desired_state_too():
    """A key left out means its default: a live flows=on is turned off."""
    (action,) = plan(config.parse(SMALLEST), host(ours("eth0", flows=True, on_malformed="pass")))
    assert action.settings == {"on_malformed": ["pass", "drop"], "flows": [True, False]}


@pytest.mark.parametrize("mode, running, expected", [
    ("auto", "native", "keep"), ("auto", "skb", "keep"), ("skb", "skb", "keep"),
    ("skb", "native", "reattach"), ("native", "skb", "reattach"),
])
def test_mode(mode, running, expected):
    text = SMALLEST + f'mode = "{mode}"\n'
    assert actions(text, host(ours("eth0", mode=running))) == [(expected, "eth0", None)]


def test_another_parser_build_is_upgraded_in_place():
    old = ours("eth0", parser=None, program="zerolayer_old")
    assert actions(SMALLEST, host(old)) == [("upgrade", "eth0", None)]
    assert actions(SMALLEST, host(ours("eth0", parser="direct"))) == [("upgrade", "eth0", None)]


def test_a_foreign_program_is_left_alone_unless_replace():
    assert actions(SMALLEST, host(foreign("eth0"))) == [("foreign", "eth0", None)]
    assert not matched(plan(config.parse(SMALLEST), host(foreign("eth0"))))
    assert actions(SMALLEST + "replace = true\n", host(foreign("eth0"))) == \
        [("replace", "eth0", None)]
    # replace = true says nothing about zerolayer's own program
    assert actions(SMALLEST + "replace = true\n", host(ours("eth0"))) == [("keep", "eth0", None)]


def test_libxdps_dispatcher_is_joined_without_replace():
    (action,) = plan(config.parse(SMALLEST), host(foreign("eth0", dispatcher=True)))
    assert (action.action, action.reason) == (
        "attach", "libxdp's dispatcher runs there: zerolayer joins the programs in it")


def test_the_priority_in_the_dispatcher_is_desired_state():
    """Left out it is 20; zerolayer's program alone has none to differ."""
    in_dispatcher = ours("eth0", dispatcher=True, priority=60)
    (action,) = plan(config.parse(SMALLEST), host(in_dispatcher))
    assert (action.action, action.reason) == (
        "upgrade", "zerolayer runs at priority 60 in libxdp's dispatcher, the file asks for 20")
    assert actions(SMALLEST + "priority = 60\n", host(in_dispatcher)) == [("keep", "eth0", None)]
    assert actions(SMALLEST + "priority = 60\n", host(ours("eth0"))) == [("keep", "eth0", None)]


def test_missing_interface_and_namespace():
    assert actions(SMALLEST, host(free("lo"))) == [("missing", "eth0", None)]
    text = '[[interface]]\nname = "dut0"\nnetns = "gone"\n'
    (action,) = plan(config.parse(text), host(free("lo")))
    assert (action.action, action.reason) == ("missing", "network namespace gone does not exist")
    # stale pins of a vanished interface do not make it present
    assert actions(SMALLEST, host(Link("eth0", None, exists=False, stale_pins=True))) == \
        [("missing", "eth0", None)]


def test_match_by_glob_and_driver_never_lo():
    text = '[[interface]]\nmatch = { name = "*" }\n[[interface]]\nmatch = { driver = "veth" }\nnetns = "ns"\n'
    observed = host(free("lo"), free("eth0", driver="virtio_net"), free("lo", "ns"),
                    free("v0", "ns", driver="veth"), free("d0", "ns", driver="dummy"),
                    namespaces=(None, "ns"))
    assert actions(text, observed) == [("attach", "eth0", None), ("attach", "v0", "ns")]


def test_a_name_claims_an_interface_before_a_match():
    text = ('[[interface]]\nmatch = { name = "eth*" }\nports = [1]\n'
            '[[interface]]\nname = "eth1"\nports = [2]\n')
    got = {a.interface: a.want.ports for a in plan(config.parse(text),
                                                   host(free("eth0"), free("eth1")))}
    assert got == {"eth0": (1,), "eth1": (2,)}


def test_prune_detaches_only_zerolayer_and_only_in_scope():
    observed = host(ours("eth0"), ours("eth1"), foreign("eth2"), free("eth3"),
                    Link("gone0", None, exists=False, stale_pins=True),
                    ours("x0", "elsewhere"), namespaces=(None, "elsewhere"))
    assert actions(SMALLEST, observed) == [("keep", "eth0", None)]
    assert actions(SMALLEST, observed, prune=True) == [
        ("keep", "eth0", None), ("detach", "eth1", None), ("detach", "gone0", None)]
    # only the namespaces the file names are in scope; one it named before can be added
    assert actions('[[interface]]\nname = "x0"\nnetns = "elsewhere"\n', observed, prune=True) \
        == [("keep", "x0", "elsewhere")]
    assert ("detach", "x0", "elsewhere") in actions(SMALLEST, observed, prune=True,
                                                    scope={None, "elsewhere"})


def test_tuning_is_one_action():
    text = SMALLEST + '[tuning]\nprofile = "latency"\n'
    assert actions(text, host(ours("eth0"), tuning=3))[-1] == ("tune", None, None)
    steady = plan(config.parse(text), host(ours("eth0"), tuning=0))
    assert [a.action for a in steady] == ["keep", "keep"] and matched(steady)


def test_pins_follow_a_renamed_interface():
    """Pin dirs are named after the interface: a renamed one's program looks
    like another tool's until its pins follow it (the observation names the
    old name); a prune never removes the pins being followed."""
    renamed = Link("w9", None, owner="foreign", program="zerolayer_xdp", mode="native",
                   renamed_from="w0")
    old = Link("w0", None, exists=False, stale_pins=True)
    text = '[[interface]]\nmatch = { name = "w*" }\n'
    (action,) = plan(config.parse(text), host(renamed, old), prune=True)
    assert (action.action, action.interface, action.renamed_from) == ("rename", "w9", "w0")
    # unnamed: its pins follow it first, so that the next round can detach it
    assert actions(SMALLEST, host(renamed, old), prune=True) == [
        ("missing", "eth0", None), ("rename", "w9", None)]
