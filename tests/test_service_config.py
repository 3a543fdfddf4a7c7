# SPDX-License-Identifier: Apache-2.0
"""The configuration file of `zerolayer apply` (docs/spec.md §10.1): what it
reads, and that every error names the file, the line and the key. No root."""

import re
import textwrap

import pytest

from pyxdp.service import config
from pyxdp.service.positions import key_lines


def write(tmp_path, text: str) -> str:
    path = tmp_path / "zerolayer.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def error(tmp_path, text: str) -> tuple[int, str]:
    """The line and the rest of the one-line error loading TEXT gives."""
    path = write(tmp_path, text)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    message = str(caught.value)
    assert "\n" not in message
    m = re.match(rf"^{re.escape(path)}:(\d+): (.*)$", message)
    assert m, message
    return int(m.group(1)), m.group(2)


def test_the_smallest_file(tmp_path):
    got = config.load(write(tmp_path, """\
        [[interface]]
        name = "eth0"
        ports = [9977]
    """))
    assert got.version == config.VERSION
    (iface,) = got.interfaces
    assert (iface.name, iface.match, iface.netns, iface.ports) == ("eth0", None, None, (9977,))
    assert (iface.on_malformed, iface.mode, iface.flows, iface.forward, iface.replace) == \
        ("drop", "auto", False, False, False)
    assert got.tuning is None and got.detach_on_stop is False
    assert got.exporter.listen == "127.0.0.1:9435"
    assert got.namespaces() == {None}


def test_every_key(tmp_path):
    got = config.load(write(tmp_path, """\
        version = 1

        [[interface]]
        name = "dut0"
        netns = "lab"
        ports = [9978, 9977, 9978]
        on_malformed = "pass"
        mode = "skb"
        flows = true
        forward = true
        replace = true

        [[interface]]
        match = { name = "veth*", driver = "veth" }

        [tuning]
        profile = "latency"
        interfaces = ["dut0"]
        strict = true

        [exporter]
        address = "::1"
        port = 9500

        [service]
        detach_on_stop = true

        [streams]
        enabled = true
        ports = [8000, "9000-9010"]
        exes = ["*/vllm"]
        cgroups = ["system.slice/litellm.service"]
    """))
    first, second = got.interfaces
    assert first.ports == (9977, 9978)  # a set, sorted
    assert (first.netns, first.on_malformed, first.mode, first.flows, first.forward,
            first.replace, first.line) == ("lab", "pass", "skb", True, True, True, 3)
    assert second.match == config.Match("veth*", "veth") and second.name is None
    assert got.tuning == config.Tuning("latency", ("dut0",), None, True, None)
    assert got.exporter.listen == "[::1]:9500"
    assert got.detach_on_stop is True
    assert got.namespaces() == {"lab", None}
    assert got.streams == config.Streams(True, 1000, 10000, ((8000, 8000), (9000, 9010)),
                                         ("*/vllm",), ("system.slice/litellm.service",))


def test_a_tuning_profile_path_is_taken_from_the_files_directory(tmp_path):
    (tmp_path / "mine.toml").write_text('name = "mine"\nsummary = "x"\ninclude = "latency"\n')
    got = config.load(write(tmp_path, '[tuning]\nprofile = "mine.toml"\nstate_dir = "st"\n'))
    assert got.tuning is not None and got.tuning.profile == str(tmp_path / "mine.toml")
    assert got.tuning.state_dir == str(tmp_path / "st")


@pytest.mark.parametrize("text, line, message", [
    # unknown keys, with the nearest known one
    ('[[interface]]\nname = "a"\nport = [1]\n', 3, "interface[1].port: unknown key (did you mean ports?)"),
    ('verison = 1\n', 1, "verison: unknown key (did you mean version?)"),
    ('[[interface]]\nname = "a"\n[[interface]]\nmatch = { name = "x", drive = "veth" }\n', 4,
     "interface[2].match.drive: unknown key (did you mean driver?)"),
    ('[services]\n', 1, "services: unknown key (did you mean service?)"),
    ('[service]\ndetach = true\n', 2, "service.detach: unknown key (did you mean detach_on_stop?)"),
    # values
    ('[[interface]]\nname = "a"\nports = [\n  9977,\n  70000,\n]\n', 5,
     "interface[1].ports[2]: 70000 is not a UDP port (1-65535)"),
    ('[[interface]]\nname = "a"\nports = []\n', 3, "interface[1].ports: must be a list"),
    ('[[interface]]\nname = "a"\nflows = "yes"\n', 3, "interface[1].flows: must be true or false"),
    ('[[interface]]\nname = "a"\nmode = "fast"\n', 3, "interface[1].mode: 'fast': use one of auto, native, skb"),
    ('[[interface]]\nname = "a"\non_malformed = 1\n', 3, "interface[1].on_malformed: must be a string"),
    ('[[interface]]\nname = "a"\npriority = -1\n', 3, "interface[1].priority: -1: use 0 to 2147483647"),
    ('[[interface]]\nname = "a"\npriority = 2147483648\n', 3, "interface[1].priority: 2147483648: use 0"),
    ('[[interface]]\nname = "a"\npriority = true\n', 3, "interface[1].priority: must be an integer"),
    ('[[interface]]\nname = "a/b"\n', 2, "interface[1].name: 'a/b' is not a valid interface name"),
    ('[[interface]]\nname = "abcdefghijklmnop"\n', 2, "interface[1].name: 'abcdefghijklmnop' is longer"),
    ('[[interface]]\nports = [1]\n', 1, "interface[1]: give either name or match"),
    ('\n[[interface]]\nname = "a"\nmatch = { name = "a*" }\n', 2, "interface[1]: give name or match, not both"),
    ('[[interface]]\nmatch = {}\n', 2, "interface[1].match: give name (a glob), driver, or both"),
    ('[[interface]]\nname = "a"\n\n[[interface]]\nname = "a"\n', 5,
     "interface[2].name: a is named already, on line 1"),
    ('version = 2\n', 1, "version: 2: this zerolayer reads version 1"),
    ('version = true\n', 1, "version: must be an integer"),
    ('interface = 3\n', 1, "interface: must be [[interface]] tables"),
    ('[tuning]\nstrict = true\n', 1, "tuning: needs profile"),
    ('[tuning]\nprofile = "nope"\n', 2, "tuning.profile: no profile named 'nope'"),
    ('[exporter]\naddress = "localhost"\n', 2, "exporter.address: 'localhost' is not a numeric"),
    ('[exporter]\nport = 65536\n', 2, "exporter.port: 65536 is not a TCP port"),
    ('[streams]\nports = [0]\n', 2, "streams.ports[1]: 0: ports are 1 to 65535"),
    ('[streams]\nports = ["http"]\n', 2, "streams.ports[1]: http is not a port"),
    ('[streams]\nports = 8000\n', 2, "streams.ports: must be a list of ports"),
    ('[streams]\nexes = [1]\n', 2, "streams.exes: must be a list of strings"),
    ('[streams]\ncgroup = ["a"]\n', 2, "streams.cgroup: unknown key (did you mean cgroups?)"),
    # TOML itself
    ('[[interface]]\nname = "a"\nports = [9977\n', 4, "Unclosed array"),
    ('[[interface]]\nname = eth0\n', 2, "Invalid value"),
])
def test_errors_name_the_file_the_line_and_the_key(tmp_path, text, line, message):
    got_line, got = error(tmp_path, text)
    assert (got_line, got[:len(message)]) == (line, message), got


def test_a_file_that_cannot_be_read(tmp_path):
    with pytest.raises(config.ConfigError, match=r"cannot read the configuration .*nothere"):
        config.load(str(tmp_path / "nothere.toml"))
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'# \xe9\n')
    with pytest.raises(config.ConfigError, match="not UTF-8"):
        config.load(str(path))


def test_lines_survive_what_tomllib_steps_over():
    """Strings of every kind (with brackets, quotes, '#' and '=' inside),
    comments, multi-line arrays, quoted and dotted keys, sub-tables of an
    array of tables: each key is found on its own line."""
    text = textwrap.dedent('''\
        # [[interface]] in a comment, name = "x"
        version = 1 # a comment
        [[interface]]
        "name" = "a"   # quoted key
        netns = 'ns # not a comment'
        ports = [ # a comment in an array
          1, 2,
          3 ]
        [[interface]]
        match.name = "b*"
        match.driver = """
        multi-line "with quotes" \\""" and [brackets]
        """
        mode = \'\'\'
        literal = ''\'
        flows = true
        [interface.x]
        "a.b" = { c = 1, d = [ { e = 2 } ] }
        [exporter]
        port = 1
    ''')
    lines = key_lines(text)
    assert lines[("version",)] == 2
    assert lines[("interface", 0)] == 3
    assert lines[("interface", 0, "name")] == 4
    assert lines[("interface", 0, "netns")] == 5
    assert lines[("interface", 0, "ports", 0)] == 7 and lines[("interface", 0, "ports", 2)] == 8
    assert lines[("interface", 1)] == 9
    assert lines[("interface", 1, "match", "name")] == 10
    assert lines[("interface", 1, "match", "driver")] == 11
    assert lines[("interface", 1, "mode")] == 14
    assert lines[("interface", 1, "flows")] == 16
    assert lines[("interface", 1, "x")] == 17
    assert lines[("interface", 1, "x", "a.b", "d", 0, "e")] == 18
    assert lines[("exporter", "port")] == 20
    assert ("interface", 0, "literal") not in lines  # inside a string, not a key


def _value(r, depth: int = 0) -> str:
    """A random TOML value, of the kinds that hide brackets, quotes, '#',
    '=' and newlines from a line-based reader."""
    kind = r.randrange(8 if depth < 2 else 5)
    if kind == 0:
        return r.choice(["1", "-5", "1.5", "true", "inf", "0x1f", "1979-05-27 07:32:00"])
    if kind == 1:
        return '"' + r.choice(["x", "# no", "[a]", 'q\\"q', "= 1", "\\\\"]) + '"'
    if kind == 2:
        return "'" + r.choice(["x", "# no", "[[b]]", "\\"]) + "'"
    if kind == 3:
        return '"""\n' + r.choice(["a\nb", '"q"', 'x""', "[[t]]\nk = 1"]) + '"""'
    if kind == 4:
        return "'''" + r.choice(["a\nb", "k = 2\n", "''x"]) + "'''"
    if kind in (5, 6):
        sep = r.choice([", ", ",\n  # [c]\n  ", " ,"])
        return "[" + sep.join(_value(r, depth + 1) for _ in range(r.randrange(4))) + \
            r.choice(["", ",", ",\n"]) + "]"
    keys = r.sample(["p", "q", "r-s"], r.randrange(3))
    return "{ " + ", ".join(f"{k} = {_value(r, depth + 1)}" for k in keys) + " }"


def _document(r) -> str:
    lines = []
    for table in range(r.randrange(4)):
        name = r.choice(["t", "u.v", "w"])
        lines.append(f"[[{name}]]" if r.random() < 0.5 else f"[{name}{table}]")
        for key in r.sample(["a", '"b c"', "'d.e'", "f.g"], r.randrange(4)):
            lines.append(f"{key} = {_value(r)}" + r.choice(["", " # [x] = 'y'"]))
    return "\n".join(lines) + "\n"


def _paths(data, prefix=()):
    items = data.items() if isinstance(data, dict) else enumerate(data)
    for key, value in items:
        yield prefix + (key,)
        if isinstance(value, dict | list):
            yield from _paths(value, prefix + (key,))


def test_every_key_tomllib_reads_has_a_line():
    """Random documents that tomllib accepts: each of their keys, tables and
    array items is found (seeded, so a failure is reproducible)."""
    import random
    import tomllib

    r = random.Random(25)
    read = 0
    for _ in range(3000):
        text = _document(r)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            continue  # duplicate keys and the like: not documents positions.py is given
        read += 1
        lines = key_lines(text)
        assert [p for p in _paths(data) if p not in lines] == [], text
    assert read > 1000
