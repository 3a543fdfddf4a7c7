"""Profiles: the shipped ones say true things, and bad ones fail on load."""

import os
import stat
import subprocess

import pytest

from pyxdp.errors import ZerolayerError
from pyxdp.tuning import profile
from pyxdp.tuning.qdisc import kind_known
from tuning_fixtures import namespace


def test_three_profiles_ship():
    assert profile.shipped() == ["inf2", "latency", "throughput"]
    for name in profile.shipped():
        assert profile.load(name).name == name


def test_inf2_answers_every_checklist_item_in_order():
    inf2 = profile.load("inf2")
    items = [step.item for step in inf2.steps if step.item is not None]
    assert items == list(range(1, 13))
    rest = [step.id for step in inf2.steps if step.item is None]
    assert rest == ["congestion", "nodelay", "busy-poll"]


def _knobs(prof):
    return [(step, spec) for step in prof.steps for spec in step.knobs]


def test_inf2_refuses_aslr_and_explains_nodelay():
    knobs = _knobs(profile.load("inf2"))
    refused = {spec["name"]: spec for _, spec in knobs if spec.kind == "refuse"}
    assert refused["kernel.randomize_va_space"]["value"] == "0"
    notes = {spec["name"]: spec["reason"] for _, spec in knobs if spec.kind == "note"}
    assert notes["net.ipv4.tcp_nodelay"].startswith("not a sysctl")
    assert "pyxdp.tuning.sockopts.set_low_latency" in notes["net.ipv4.tcp_nodelay"]
    nodelay = [spec for step, spec in knobs if step.id == "nodelay" and spec.kind == "sysctl"]
    assert [(s["name"], s["value"]) for s in nodelay] == [("net.ipv4.tcp_autocorking", "0")]
    assert "pyxdp.tuning.sockopts" in nodelay[0].why
    kinds = {spec.kind for _, spec in knobs}
    assert kinds >= {"sysctl", "qdisc", "nic", "irq_affinity", "governor", "refuse", "note"}


def test_every_reason_is_one_line():
    for name in profile.shipped():
        for step, spec in _knobs(profile.load(name)):
            for text in (step.why, spec.why, spec.get("reason")):
                assert text is None or "\n" not in text


def test_the_helper_the_reasons_name_exists():
    from pyxdp.tuning import sockopts

    assert callable(sockopts.set_low_latency) and callable(sockopts.rearm_quickack)


@pytest.mark.root
def test_declared_scopes_match_this_kernel():
    # A per-netns knob must exist and be writable in a fresh namespace; a
    # global net.* knob must be absent there, or read-only.
    declared = {}
    for name in profile.shipped():
        for _, spec in _knobs(profile.load(name)):
            if spec.kind == "sysctl" and spec["name"].startswith("net."):
                declared[spec["name"]] = spec["scope"]
    with namespace(with_devices=False) as ns:
        listing = subprocess.run(
            ["ip", "netns", "exec", ns, "sh", "-c",
             "for f in $(find /proc/sys/net -type f); do stat -c '%n %a' $f; done"],
            capture_output=True, text=True, check=True).stdout
    modes = {}
    for line in listing.splitlines():
        path, mode = line.rsplit(" ", 1)
        modes[path[len("/proc/sys/"):].replace("/", ".")] = int(mode, 8)
    for key, scope in declared.items():
        writable = key in modes and bool(modes[key] & stat.S_IWUSR)
        assert writable == (scope == "netns"), (key, scope, oct(modes.get(key, 0)))


@pytest.mark.root
def test_qdisc_probe_asks_the_kernel_and_leaves_nothing():
    before = sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else []
    assert kind_known("pfifo") is True
    assert kind_known("no_such_qdisc") is False
    after = sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else []
    assert after == before


BASE = 'name = "x"\n[[step]]\nid = "s"\nwhy = "w"\n  [[step.knob]]\n'


@pytest.mark.parametrize("knob, message", [
    ('  kind = "sysctl"\n  name = "kernel.randomize_va_space"\n  value = "0"\n  scope = "netns"\n',
     "cannot be per-netns"),
    ('  kind = "sysctl"\n  name = "net.core.rmem_max"\n  value = 1\n  scope = "global"\n',
     "must be a string"),
    ('  kind = "sysctl"\n  name = "net.core.rmem_max"\n  vaule = "1"\n  scope = "global"\n',
     "needs value"),
    ('  kind = "sysctl"\n  name = "../etc/passwd"\n  value = "1"\n  scope = "global"\n',
     "is not a sysctl name"),
    ('  kind = "nic"\n  attr = "../../x"\n  value = "1"\n', "not a /sys/class/net"),
    ('  kind = "irq_affinity"\n  value = "0-3"\n', "numa-local"),
    ('  kind = "teleport"\n', "`kind` must be one of"),
    ('  kind = "note"\n  name = "x"\n  reason = "r"\n  extra = 1\n', "unknown field"),
])
def test_bad_profiles_fail_on_load_with_the_place(knob, message):
    with pytest.raises(ZerolayerError, match=message) as caught:
        profile.parse(BASE + knob, "bad.toml")
    assert str(caught.value).startswith("profile bad.toml: step 's' knob 1:")


def test_unknown_profile_name_lists_the_choices():
    with pytest.raises(ZerolayerError, match="choose one of inf2, latency, throughput"):
        profile.load("turbo")
    with pytest.raises(ZerolayerError, match="cannot read profile /nonexistent.toml"):
        profile.load("/nonexistent.toml")
    with pytest.raises(ZerolayerError, match="not valid TOML"):
        profile.parse("name = ", "broken.toml")
