# SPDX-License-Identifier: Apache-2.0
"""Hostile configurations and profiles, made by hypothesis: random bytes,
random TOML documents of the right and the wrong shapes (any key, any
type, NUL and odd Unicode in strings, numbers of any size, deep nesting),
and good files with bytes changed. Every one is a configuration or one
line naming the file; never another exception (docs/spec.md §10.1). The
bulk runs in-process; a few through `zerolayer apply --dry-run` check the
exit status and that stderr is one line."""

import json
import re
import subprocess

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyxdp import toml_file
from pyxdp.service import config
from pyxdp.tuning import profile
from support.cli_runner import ZEROLAYER

FILE = "fuzz.toml"
GOOD = """version = 1
[[interface]]
name = "eth0"
ports = [9977, 9978]
on_malformed = "pass"
[[interface]]
match = { name = "ens*", driver = "ice" }
netns = "lab"
flows = true
[tuning]
profile = "latency"
interfaces = ["eth0"]
[exporter]
address = "::1"
port = 9435
[service]
detach_on_stop = true
"""
KEYS = ["version", "interface", "tuning", "exporter", "service", "name", "match", "netns",
        "ports", "on_malformed", "mode", "flows", "forward", "replace", "driver", "profile",
        "interfaces", "strict", "state_dir", "address", "port", "detach_on_stop",
        # a profile's
        "summary", "include", "step", "id", "why", "item", "knob", "kind", "value", "scope",
        "bound", "if_missing", "attr", "reason", "max_latency_us"]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=8))
scalars = st.one_of(
    st.booleans(), st.integers(), st.integers(min_value=-(10 ** 400), max_value=10 ** 400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["eth0", "lo", "a:b", "a/b", "x\0y", "..", "ens*", "inf2", "p.toml",
                     "/dev/zero", "|/bin/sh", "kernel.core_pattern", "drop", "native"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=20)
documents = st.dictionaries(keys, st.one_of(values, st.lists(st.dictionaries(keys, values,
                                                                             max_size=6),
                                                             min_size=1, max_size=3)),
                            max_size=6)



def table_of(*names: str):
    """Tables of mostly known keys NAMES, with values of any type."""
    known = st.sampled_from(names)
    return st.dictionaries(st.one_of(known, known, known, keys), values, max_size=len(names))


# Shaped as a configuration, so that the checks past the top level are reached.
configurations = st.fixed_dictionaries({}, optional={
    "version": st.one_of(st.just(1), st.just(1), st.just(1), values),
    "interface": st.lists(table_of("name", "match", "netns", "ports", "on_malformed", "mode",
                                   "flows", "forward", "replace"), min_size=1, max_size=3),
    "tuning": table_of("profile", "interfaces", "netns", "strict", "state_dir"),
    "exporter": table_of("address", "port"),
    "service": table_of("detach_on_stop"),
})
profiles = st.fixed_dictionaries({"name": st.one_of(st.just("p"), values)}, optional={
    "summary": values, "include": values,
    "step": st.lists(st.fixed_dictionaries({"id": st.one_of(st.just("s"), values)}, optional={
        "why": values, "item": values,
        "knob": st.lists(table_of("kind", "name", "value", "scope", "bound", "if_missing",
                                  "attr", "reason", "max_latency_us"), max_size=3)}),
        max_size=3)})


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_value(key)


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, str):  # JSON's escapes are TOML's; TOML escapes DEL too
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(data: dict) -> str:
    """DATA as TOML: lists of tables as [[tables]], the rest inline."""
    plain = [f"{toml_key(k)} = {toml_value(v)}" for k, v in data.items()
             if not (isinstance(v, list) and v and all(isinstance(t, dict) for t in v))]
    tables = [f"[[{toml_key(k)}]]\n" + "".join(f"{toml_key(tk)} = {toml_value(tv)}\n"
                                                for tk, tv in table.items())
              for k, v in data.items() if k not in plain and isinstance(v, list) and v
              and all(isinstance(t, dict) for t in v) for table in v]
    return "\n".join(plain) + "\n" + "".join(tables)


def one_line(message: str) -> str:
    assert message and "\n" not in message and "Traceback" not in message, message
    return message


def outcome_of_config(text: str) -> None:
    try:
        config.parse(text, FILE)
    except config.ConfigError as exc:
        assert one_line(str(exc)).startswith(f"{FILE}:"), str(exc)


def outcome_of_profile(text: str) -> None:
    try:
        profile.parse(text, FILE)
    except profile.ProfileError as exc:
        assert one_line(str(exc)).startswith(f"profile {FILE}"), str(exc)


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(raw):
    try:
        text = toml_file.decode(raw, FILE, config.ConfigError)
    except config.ConfigError as exc:
        assert one_line(str(exc)).startswith(f"{FILE}:")
        return
    outcome_of_config(text)
    outcome_of_profile(text)


@FUZZ
@given(documents)
def test_random_documents(data):
    text = toml_document(data)
    outcome_of_config(text)
    outcome_of_profile(text)


@FUZZ
@given(configurations)
def test_random_configurations(data):
    outcome_of_config(toml_document(data))


@FUZZ
@given(profiles)
def test_random_profiles(data):
    text = toml_document({k: v for k, v in data.items() if k != "step"})
    for step in data.get("step", []):  # [[step]] then its [[step.knob]] tables
        text += "[[step]]\n" + "".join(f"{toml_key(k)} = {toml_value(v)}\n"
                                       for k, v in step.items() if k != "knob")
        text += "".join("[[step.knob]]\n" + "".join(f"{toml_key(k)} = {toml_value(v)}\n"
                                                     for k, v in knob.items())
                        for knob in step.get("knob", []))
    outcome_of_profile(text)


@FUZZ
@given(st.data())
def test_good_files_with_bytes_changed(data):
    text = GOOD
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 3))
        text = text[:at] + data.draw(st.text(max_size=3)) + text[at + cut:]
    outcome_of_config(text)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000), st.sampled_from(["[", "{a = ", "[{a = ", "{a.b = ["]))
def test_deep_nesting(depth, opening):
    outcome_of_config(f"x = {opening * depth}")
    outcome_of_profile(f"name = {opening * depth}")


def test_the_good_file_is_good():
    assert config.parse(GOOD, FILE).interfaces[1].match == config.Match("ens*", "ice")


def test_the_command_exits_0_1_or_2_with_one_line(tmp_path):
    tmp_path.chmod(0o755)
    cases = {
        "deep": "x = " + "[" * 5000, "bytes": b"\xff\xfe[[interface]]\0",
        "huge": "version = " + "9" * 5000, "nul": '[[interface]]\nname = "a\\u0000b"\n',
        "colon": '[[interface]]\nname = "eth0"\nnetns = "a:b"\n',
        "empty": "",
    }
    for name, content in cases.items():
        path = tmp_path / f"{name}.toml"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        done = subprocess.run([ZEROLAYER, "apply", "--dry-run", str(path)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode in (0, 1, 2) and "Traceback" not in done.stderr, (name, done)
        if done.returncode:
            assert done.stderr.count("\n") == 1 and "internal error" not in done.stderr, done
        assert (done.returncode == 2) == (name != "empty"), (name, done)
