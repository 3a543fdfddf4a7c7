# SPDX-License-Identifier: Apache-2.0
"""Profiles: the shipped ones say true things, and bad ones fail on load."""

import os
import stat
import subprocess

import pytest

from pyxdp.errors import ZerolayerError
from pyxdp.tuning import profile
from pyxdp.tuning.kind import FieldError, KnobSpec
from pyxdp.tuning.qdisc import kind_known
from pyxdp.tuning.registry import KINDS
from support.tuning_fixtures import namespace, profile_text, write_profile


def test_three_profiles_ship():
    assert profile.shipped() == ["inf2", "latency", "throughput"]
    for name in profile.shipped():
        assert profile.load(name).name == name


def test_inf2_answers_every_checklist_item_in_order():
    inf2 = profile.load("inf2")
    items = [step.item for step in inf2.steps if step.item is not None]
    assert items == list(range(1, 13))
    rest = [step.id for step in inf2.steps if step.item is None]
    assert rest == ["congestion", "nodelay", "busy-poll", "napi-deferral"]


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
    assert kinds >= {"sysctl", "qdisc", "irq_affinity", "governor", "refuse", "note"}


def test_inf2_turns_numa_balancing_off_in_its_numa_step():
    numa = next(step for step in profile.load("inf2").steps if step.id == "numa")
    assert numa.item == 4 and numa.why == "checklist: process binding with numactl"
    assert [spec.kind for spec in numa.knobs] == ["note", "sysctl", "irq_affinity"]
    assert numa.knobs[0]["name"] == "process binding (numactl)"  # numactl stays advice
    balancing = numa.knobs[1]
    assert (balancing["name"], balancing["value"], balancing["scope"]) == (
        "kernel.numa_balancing", "0", "global")
    assert "unmaps pages" in balancing.why and "tuned" in balancing.why
    assert "CONFIG_NUMA_BALANCING" in balancing["if_missing"]


def test_inf2_takes_latency_knobs_and_keeps_its_own_order():
    inf2, latency = profile.load("inf2"), profile.load("latency")
    steps = {step.id: step for step in inf2.steps}
    for step in latency.steps:
        assert step.id in steps  # each one named, so none jumps to the front
        assert steps[step.id].knobs == step.knobs


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
    with pytest.raises(ZerolayerError, match=r"^profile broken.toml:1: Invalid value"):
        profile.parse("name = ", "broken.toml")


# One valid entry of each kind, with every field it requires.
VALID = {
    "sysctl": {"name": "net.core.rmem_max", "value": "1", "scope": "global"},
    "qdisc": {"value": "fq"},
    "nic": {"attr": "gro_flush_timeout", "value": "0"},
    "irq_affinity": {"value": "numa-local"},
    "governor": {"value": "performance"},
    "cpuidle": {"max_latency_us": 2},
    "refuse": {"name": "kernel.randomize_va_space", "value": "0", "reason": "r"},
    "note": {"name": "TCP_QUICKACK", "reason": "r"},
}


def test_the_registry_has_every_kind_once():
    assert list(KINDS) == list(VALID)
    assert all(cls.kind == name for name, cls in KINDS.items())


@pytest.mark.parametrize("kind", VALID)
def test_each_kind_checks_its_own_fields(kind):
    fields = VALID[kind]
    cls = KINDS[kind]
    assert cls.spec({"kind": kind, **fields, "why": "w"}) == KnobSpec(kind, fields, "w")
    for left_out in fields:
        rest = {key: value for key, value in fields.items() if key != left_out}
        with pytest.raises(FieldError, match=f"^{kind} knob needs {left_out}$"):
            cls.spec({"kind": kind, **rest})
    with pytest.raises(FieldError, match=f"^unknown field\\(s\\) extra for a {kind} knob$"):
        cls.spec({"kind": kind, **fields, "extra": "x"})
    with pytest.raises(FieldError, match="`why` must be a string"):
        cls.spec({"kind": kind, **fields, "why": 1})
    # The loader checks an entry with the same class.
    loaded = profile.parse(profile_text("p", ("s", {"kind": kind, **fields})))
    assert loaded.steps[0].knobs == (KnobSpec(kind, fields),)


@pytest.mark.parametrize("kind, fields, message", [
    ("sysctl", {"scope": "host"}, '`scope` must be "netns" or "global"'),
    ("sysctl", {"if_missing": 1}, "`if_missing` must be a string"),
    ("qdisc", {"value": 1}, "`value` must be a string"),
    ("governor", {"value": 1}, "`value` must be a string"),
    ("cpuidle", {"max_latency_us": -1}, "non-negative integer"),
    ("cpuidle", {"max_latency_us": True}, "non-negative integer"),
    ("refuse", {"name": "no spaces"}, "is not a sysctl name"),
    ("note", {"reason": 1}, "`reason` must be a string"),
    ("nic", {"if_missing": "x"}, "unknown field(s) if_missing"),
])
def test_each_kind_rejects_bad_values(kind, fields, message):
    with pytest.raises(FieldError) as caught:
        KINDS[kind].spec({"kind": kind, **VALID[kind], **fields})
    assert message in str(caught.value)


def _note(origin: str) -> dict:
    return {"kind": "note", "name": "n", "reason": origin}


def _written(directory, name: str, *ids: str, include: str | None = None) -> str:
    """Profile file NAME.toml: one step per id, each a note whose reason is NAME."""
    text = profile_text(name, *((step_id, _note(name)) for step_id in ids), include=include)
    return write_profile(directory / f"{name}.toml", text)


def _origins(prof) -> list[tuple[str, str]]:
    """(id, the profile its knobs came from) of each step."""
    return [(step.id, step.knobs[0]["reason"]) for step in prof.steps]


def test_included_steps_come_first(tmp_path):
    _written(tmp_path, "base", "a", "b")
    top = profile.load(_written(tmp_path, "top", "c", include="base.toml"))
    assert top.name == "top"
    assert _origins(top) == [("a", "base"), ("b", "base"), ("c", "top")]


def test_a_step_with_an_included_id_replaces_it_where_it_stands(tmp_path):
    _written(tmp_path, "base", "a", "b", "c", "d")
    text = profile_text("top", ("x", _note("top")), ("a", _note("top")), include="base.toml")
    text += '[[step]]\nid = "b"\nitem = 7\n'  # moved here and numbered
    text += '[[step]]\nid = "d"\nwhy = "mine"\n'  # moved here, with a why of its own
    top = profile.load(write_profile(tmp_path / "top.toml", text))
    # c, which top does not name, stays ahead; the rest are where top puts them,
    # with top's knobs where it gives some and base's where it does not.
    assert _origins(top) == [("c", "base"), ("x", "top"), ("a", "top"), ("b", "base"),
                             ("d", "base")]
    b, d = top.steps[3], top.steps[4]
    assert (b.item, b.why) == (7, "test step b")
    assert (d.item, d.why) == (None, "mine")


def test_an_own_step_still_needs_why_and_knobs(tmp_path):
    _written(tmp_path, "base", "a")
    top = write_profile(tmp_path / "t.toml", 'name = "t"\ninclude = "base.toml"\n'
                        '[[step]]\nid = "z"\n')
    with pytest.raises(ZerolayerError, match="step 'z': needs a one-line `why`"):
        profile.load(top)


def test_includes_nest_and_paths_are_relative_to_the_including_file(tmp_path, monkeypatch):
    (tmp_path / "lib").mkdir()
    _written(tmp_path / "lib", "one", "a")
    _written(tmp_path / "lib", "two", "b", include="one.toml")
    three = _written(tmp_path, "three", "c", include="lib/two.toml")
    monkeypatch.chdir("/")
    assert _origins(profile.load(three)) == [("a", "one"), ("b", "two"), ("c", "three")]


def test_a_profile_file_can_include_a_shipped_one(tmp_path):
    mine = profile.load(_written(tmp_path, "mine", "extra", include="latency"))
    assert mine.steps[:-1] == profile.load("latency").steps
    extra = mine.steps[-1]
    assert (extra.id, extra.knobs[0]["reason"]) == ("extra", "mine")


def test_include_cycles_fail_on_load_with_the_files(tmp_path):
    a = _written(tmp_path, "a", "s", include="b.toml")
    b = _written(tmp_path, "b", "t", include="a.toml")
    with pytest.raises(ZerolayerError) as caught:
        profile.load(a)
    assert str(caught.value) == f"profile {b}: top level: include cycle: {a} -> {b} -> {a}"
    me = _written(tmp_path, "me", "s", include="me.toml")
    with pytest.raises(ZerolayerError) as caught:
        profile.load(me)
    assert str(caught.value) == f"profile {me}: top level: include cycle: {me} -> {me}"


def test_missing_includes_fail_on_load_with_the_file(tmp_path):
    by_name = _written(tmp_path, "n", "s", include="turbo")
    with pytest.raises(ZerolayerError) as caught:
        profile.load(by_name)
    assert str(caught.value).startswith(
        f"profile {by_name}: top level: include: no profile named 'turbo': "
        "choose one of inf2, latency, throughput")
    by_path = _written(tmp_path, "p", "s", include="gone.toml")
    with pytest.raises(ZerolayerError) as caught:
        profile.load(by_path)
    assert str(caught.value) == (f"profile {by_path}: top level: include: "
                                 f"cannot read profile {tmp_path}/gone.toml: No such file or directory")
    with pytest.raises(ZerolayerError, match="`include` must be the name or path of a profile"):
        profile.parse("include = 3\n" + profile_text("x", ("s", _note("x"))))


def test_an_error_in_an_included_profile_names_that_file(tmp_path):
    broken = write_profile(tmp_path / "broken.toml",
                           profile_text("broken", ("s", {"kind": "nope"})))
    top = _written(tmp_path, "top", "t", include="broken.toml")
    with pytest.raises(ZerolayerError, match=f"^profile {broken}: step 's' knob 1: `kind`"):
        profile.load(top)


def test_a_bound_needs_integers(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text('name = "b"\n[[step]]\nid = "s"\nwhy = "w"\n  [[step.knob]]\n'
                    '  kind = "sysctl"\n  name = "net.ipv4.tcp_congestion_control"\n'
                    '  value = "bbr"\n  scope = "netns"\n  bound = "at-least"\n')
    with pytest.raises(ZerolayerError, match="`bound` needs a value of integers"):
        profile.load(str(path))
    path.write_text(path.read_text().replace('"at-least"', '"higher"'))
    with pytest.raises(ZerolayerError, match='`bound` must be "at-least" or "at-most"'):
        profile.load(str(path))


def test_throughput_limits_are_floors():
    limits = [spec for step in profile.load("throughput").steps for spec in step.knobs
              if spec.kind == "sysctl" and spec["name"] != "net.ipv4.tcp_congestion_control"]
    assert limits and all(spec.get("bound") == "at-least" for spec in limits)
