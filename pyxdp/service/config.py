# SPDX-License-Identifier: Apache-2.0
"""The configuration file (docs/spec.md §10.1): read, check, and turn into
frozen values. Every error is one line naming the file, the line and the
key; unknown keys are refused, with the nearest known one suggested."""

import difflib
import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Any

from pyxdp import toml_file, trusted_file
from pyxdp.errors import ZerolayerError
from pyxdp.kernel import link_names
from pyxdp.observe.exporter import DEFAULT_LISTEN, parse_listen
from pyxdp.proto import frames
from pyxdp.service.positions import key_lines
from pyxdp.streams.otlp import TEMPORALITIES, OtlpOptions, check_url
from pyxdp.xdp.dispatcher import DEFAULT_PRIORITY, MAX_PRIORITY
from pyxdp.xdp.loader import MODES
from pyxdp.xdp.maps import MAX_PORTS, POLICIES

DEFAULT_PATH = "/etc/zerolayer/zerolayer.toml"
VERSION = 1  # the schema this zerolayer reads; `version` may be left out

_TOP = ("version", "interface", "tuning", "exporter", "streams", "service")
_INTERFACE = ("name", "match", "netns", "ports", "on_malformed", "mode", "flows", "forward",
              "replace", "priority")
_MATCH = ("name", "driver")
_TUNING = ("profile", "interfaces", "netns", "strict", "state_dir")
_EXPORTER = ("address", "port")
_STREAMS = ("enabled", "stall_ms", "max_streams", "ports", "exes", "cgroups", "otlp")
_OTLP = ("url", "interval_s", "timeout_s", "ca_file", "headers_file", "temporality")
_SERVICE = ("detach_on_stop",)
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ConfigError(trusted_file.BadFile):
    """The file is not a configuration this zerolayer can apply (exit 2)."""


@dataclass(frozen=True)
class Match:
    name: str | None  # a shell-style glob on the interface name
    driver: str | None  # the driver's name, as `ethtool -i` says it


@dataclass(frozen=True)
class Interface:
    """One [[interface]] table, defaults filled in."""

    name: str | None
    match: Match | None
    netns: str | None
    ports: tuple[int, ...]
    on_malformed: str
    mode: str
    flows: bool
    forward: bool
    replace: bool
    priority: int  # its place in libxdp's dispatcher, where one runs
    line: int | None  # of its [[interface]] header


@dataclass(frozen=True)
class Tuning:
    profile: str  # a shipped name, or a path (relative ones taken from the file's directory)
    interfaces: tuple[str, ...]
    netns: str | None
    strict: bool
    state_dir: str | None  # where tune keeps what it changed (None: its default)


@dataclass(frozen=True)
class Exporter:
    address: str
    port: int

    @property
    def listen(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class Streams:
    """`[streams]`: whether the exporter observes token streams too, as
    `zerolayer exporter --streams` (docs/spec.md §11)."""

    enabled: bool = False
    stall_ms: int = 1000
    max_streams: int = 10000
    # the selection (`zerolayer streams --port/--exe/--cgroup`): empty, every process
    ports: tuple[tuple[int, int], ...] = ()
    exes: tuple[str, ...] = ()
    cgroups: tuple[str, ...] = ()
    # [streams.otlp]: push the streams' metrics over OTLP too (pyxdp.streams.otlp)
    otlp: OtlpOptions | None = None


@dataclass(frozen=True)
class Config:
    path: str
    version: int
    interfaces: tuple[Interface, ...]
    tuning: Tuning | None
    exporter: Exporter
    detach_on_stop: bool
    streams: Streams = Streams()

    def namespaces(self) -> set[str | None]:
        """The namespaces the file names interfaces in (None: the host's)."""
        return {i.netns for i in self.interfaces}

    def unmatched(self, claimed: list[Interface | None]) -> list[str]:
        """A line for each `match` entry not among CLAIMED (the entries that
        resolved to an interface): a glob that matches nothing says so."""
        lines = []
        for n, entry in enumerate(self.interfaces, 1):
            if entry.match is None or any(entry is c for c in claimed):
                continue
            what = " and ".join(f"{key} {_show(value)}" for key, value in
                                (("name", entry.match.name), ("driver", entry.match.driver))
                                if value is not None)
            where = f" in netns {entry.netns}" if entry.netns else ""
            lines.append(f"interface[{n}].match ({what}) matches no interface{where}")
        return lines


def load(path: str) -> Config:
    """The configuration in PATH (a file only root, or the user running
    the command, can change: pyxdp.trusted_file), or ConfigError."""
    try:
        raw = trusted_file.read(path, "the configuration")
    except trusted_file.BadFile as exc:
        raise ConfigError(str(exc)) from None
    return parse(toml_file.decode(raw, path, ConfigError), path)


def parse(text: str, path: str = "<string>") -> Config:
    data = toml_file.parse(text, path, ConfigError)
    try:
        lines: dict[tuple, int] | None = key_lines(text)
    except (AssertionError, IndexError, ValueError, RecursionError):  # what positions.py misreads
        lines = None  # errors then name the file and the key, without a line
    return _Checker(path, lines).config(data)


def _show(value: Any) -> str:
    """VALUE in a message: a string or a number as written, anything else
    by its kind (a table nested 5,000 deep has no repr, an integer of
    5,000 digits no str)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 64 else repr(value[:64]) + "..."
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value.bit_length() <= 64 else "an integer that large"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return "a table"
    return "an array" if isinstance(value, list) else "a date or time"


def _dotted(path: tuple) -> str:
    out = ""
    for part in path:
        if isinstance(part, str) and not _BARE_KEY.fullmatch(part):
            part = _show(part)  # a quoted key may hold a newline, or be 1 MiB long
        out += f"[{part + 1}]" if isinstance(part, int) else f".{part}" if out else part
    return out


class _Checker:
    def __init__(self, path: str, lines: dict[tuple, int] | None):
        self.path = path
        self.lines = lines

    def line(self, where: tuple) -> int | None:
        """The line of WHERE, else of the nearest enclosing key or table."""
        if self.lines is None:
            return None
        for n in range(len(where), 0, -1):
            if where[:n] in self.lines:
                return self.lines[where[:n]]
        return 1

    def error(self, where: tuple, what: str) -> ConfigError:
        key = f"{_dotted(where)}: " if where else ""
        line = self.line(where)
        return ConfigError(f"{self.path}{'' if line is None else f':{line}'}: {key}{what}")

    def table(self, data: Any, where: tuple, known: tuple[str, ...]) -> dict:
        if not isinstance(data, dict):
            raise self.error(where, "must be a table")
        for key in data:
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean {near[0]}?)" if near else ""
                raise self.error(where + (key,),
                                 f"unknown key{hint}; known here: {', '.join(known)}")
        return data

    def typed(self, data: dict, where: tuple, key: str, kind: type, default: Any) -> Any:
        if key not in data:
            return default
        value = data[key]
        # bool is an int in Python, not in TOML
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            words = {str: "a string", bool: "true or false", int: "an integer"}
            raise self.error(where + (key,), f"must be {words[kind]}")
        return value

    def choice(self, data: dict, where: tuple, key: str, choices: tuple[str, ...]) -> str:
        value = self.typed(data, where, key, str, choices[0])
        if value not in choices:
            raise self.error(where + (key,), f"{_show(value)}: use one of {', '.join(choices)}")
        return value

    def name(self, data: dict, where: tuple, key: str, interface: bool) -> str | None:
        """An interface's name (a network namespace's when not INTERFACE)."""
        value = self.typed(data, where, key, str, None)
        problem = None if value is None else link_names.problem(value, interface)
        if problem:
            raise self.error(where + (key,), problem)
        return value

    def beside(self, data: dict, where: tuple, key: str) -> str | None:
        """A path, a relative one taken from the file's directory."""
        value = self.typed(data, where, key, str, None)
        if value is None:
            return None
        if not value or any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise self.error(where + (key,), f"{_show(value)} is not a path")
        return os.path.join(os.path.dirname(os.path.abspath(self.path)), value)

    def config(self, data: dict) -> Config:
        self.table(data, (), _TOP)
        version = self.typed(data, (), "version", int, VERSION)
        if version != VERSION:
            raise self.error(("version",),
                             f"{_show(version)}: this zerolayer reads version {VERSION}")
        raw_interfaces = data.get("interface", [])
        if not isinstance(raw_interfaces, list):
            raise self.error(("interface",), "must be [[interface]] tables")
        interfaces = tuple(self.interface(raw, ("interface", i))
                           for i, raw in enumerate(raw_interfaces))
        seen: dict[tuple, Interface] = {}
        for i, iface in enumerate(interfaces):
            if iface.name is None:
                continue
            other = seen.setdefault((iface.netns, iface.name), iface)
            if other is not iface:
                on = f", on line {other.line}" if other.line else ""
                raise self.error(("interface", i, "name"), f"{iface.name} is named already{on}")
        return Config(
            path=self.path, version=version, interfaces=interfaces,
            tuning=self.tuning(data["tuning"]) if "tuning" in data else None,
            exporter=self.exporter(data.get("exporter", {})),
            detach_on_stop=self.typed(self.table(data.get("service", {}), ("service",), _SERVICE),
                                      ("service",), "detach_on_stop", bool, False),
            streams=self.streams(data.get("streams", {})),
        )

    def interface(self, raw: Any, where: tuple) -> Interface:
        data = self.table(raw, where, _INTERFACE)
        name = self.name(data, where, "name", interface=True)
        match = self.match(data["match"], where + ("match",)) if "match" in data else None
        if (name is None) == (match is None):
            raise self.error(where, "give either name or match" if name is None
                             else "give name or match, not both")
        return Interface(
            name=name, match=match, netns=self.name(data, where, "netns", interface=False),
            ports=self.ports(data, where), on_malformed=self.choice(data, where, "on_malformed", POLICIES),
            mode=self.choice(data, where, "mode", MODES),
            flows=self.typed(data, where, "flows", bool, False),
            forward=self.typed(data, where, "forward", bool, False),
            replace=self.typed(data, where, "replace", bool, False),
            priority=self.priority(data, where),
            line=self.line(where),
        )

    def priority(self, data: dict, where: tuple) -> int:
        value = self.typed(data, where, "priority", int, DEFAULT_PRIORITY)
        if not 0 <= value <= MAX_PRIORITY:
            raise self.error(where + ("priority",), f"{value}: use 0 to {MAX_PRIORITY} "
                                                     "(lower runs first)")
        return value

    def match(self, raw: Any, where: tuple) -> Match:
        data = self.table(raw, where, _MATCH)
        match = Match(self.typed(data, where, "name", str, None),
                      self.typed(data, where, "driver", str, None))
        if match.name is None and match.driver is None:
            raise self.error(where, "give name (a glob), driver, or both")
        if match.name == "" or match.driver == "":
            raise self.error(where + ("name" if match.name == "" else "driver",), "is empty")
        return match

    def ports(self, data: dict, where: tuple) -> tuple[int, ...]:
        if "ports" not in data:
            return (frames.DEFAULT_PORT,)
        value = data["ports"]
        if not isinstance(value, list) or not value:
            raise self.error(where + ("ports",), "must be a list of UDP ports, e.g. [9977]")
        for i, port in enumerate(value):
            if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
                raise self.error(where + ("ports", i),
                                 f"{_show(port)} is not a UDP port (1-65535)")
        ports = tuple(sorted(set(value)))
        if len(ports) > MAX_PORTS:
            raise self.error(where + ("ports",), f"{len(ports)} ports: at most {MAX_PORTS}")
        return ports

    def tuning(self, raw: Any) -> Tuning:
        from pyxdp.tuning import profile as profiles

        where = ("tuning",)
        data = self.table(raw, where, _TUNING)
        if "profile" not in data:
            raise self.error(where, "needs profile (a shipped name, or the path of a .toml file)")
        name = self.typed(data, where, "profile", str, None)
        if os.sep in name or name.endswith(".toml"):
            name = self.beside(data, where, "profile")
        try:
            profiles.load(name)  # a bad profile is a bad file: found now, not at apply
        except ZerolayerError as exc:
            raise self.error(where + ("profile",), str(exc)) from None
        interfaces = data.get("interfaces", [])
        if not isinstance(interfaces, list):
            raise self.error(where + ("interfaces",), "must be a list of interface names")
        for i, iface in enumerate(interfaces):
            problem = (link_names.problem(iface) if isinstance(iface, str)
                       else "must be an interface name")
            if problem:
                raise self.error(where + ("interfaces", i), problem)
        return Tuning(name, tuple(interfaces), self.name(data, where, "netns", interface=False),
                      self.typed(data, where, "strict", bool, False),
                      self.beside(data, where, "state_dir"))

    def exporter(self, raw: Any) -> Exporter:
        where = ("exporter",)
        data = self.table(raw, where, _EXPORTER)
        default_address, default_port = parse_listen(DEFAULT_LISTEN)
        address = self.typed(data, where, "address", str, default_address)
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise self.error(where + ("address",),
                             f"{_show(address)} is not a numeric IPv4 or IPv6 address") from None
        port = self.typed(data, where, "port", int, default_port)
        if not 0 <= port <= 65535:
            raise self.error(where + ("port",), f"{_show(port)} is not a TCP port (0-65535)")
        return Exporter(address, port)

    def streams(self, raw: Any) -> Streams:
        where = ("streams",)
        data = self.table(raw, where, _STREAMS)
        default = Streams()
        stall_ms = self.typed(data, where, "stall_ms", int, default.stall_ms)
        if not 1 <= stall_ms <= 3_600_000:
            raise self.error(where + ("stall_ms",), f"{_show(stall_ms)}: use 1 to 3600000")
        max_streams = self.typed(data, where, "max_streams", int, default.max_streams)
        if not 1 <= max_streams <= 1_000_000:
            raise self.error(where + ("max_streams",), f"{_show(max_streams)}: use 1 to 1000000")
        ports = tuple(self._port_range(where + ("ports", i), p)
                      for i, p in enumerate(self._strings_or_ints(data, where, "ports")))
        exes = tuple(self._strings_or_ints(data, where, "exes", strings_only=True))
        cgroups = tuple(self._strings_or_ints(data, where, "cgroups", strings_only=True))
        otlp = self._otlp(data["otlp"]) if "otlp" in data else None
        return Streams(self.typed(data, where, "enabled", bool, default.enabled), stall_ms,
                       max_streams, ports, exes, cgroups, otlp)

    def _otlp(self, raw: Any) -> OtlpOptions:
        where = ("streams", "otlp")
        data = self.table(raw, where, _OTLP)
        if "url" not in data:
            raise self.error(where, "needs url, the receiver's (http://HOST:4318/v1/metrics)")
        url = self.typed(data, where, "url", str, "")
        try:
            check_url(url)
        except ZerolayerError:
            raise self.error(where + ("url",), f"{_show(url)}: give an http:// or https:// "
                             "URL") from None
        times = {}
        for key, low, high in (("interval_s", 1, 3600), ("timeout_s", 1, 60)):
            value = data.get(key, getattr(OtlpOptions, key))
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not low <= value <= high:
                raise self.error(where + (key,), f"{_show(value)}: use {low} to {high} seconds")
            times[key] = float(value)
        return OtlpOptions(url, times["interval_s"], times["timeout_s"],
                           self.typed(data, where, "ca_file", str, None) or None, (),
                           self.typed(data, where, "headers_file", str, None) or None,
                           self.choice(data, where, "temporality", TEMPORALITIES))

    def _strings_or_ints(self, data: dict, where: tuple, key: str,
                         strings_only: bool = False) -> list:
        value = data.get(key, [])
        kinds = (str,) if strings_only else (str, int)
        if not isinstance(value, list) or not all(
                isinstance(v, kinds) and not isinstance(v, bool) and v != "" for v in value):
            what = "strings" if strings_only else "ports (8000) or ranges (\"8000-8010\")"
            raise self.error(where + (key,), f"must be a list of {what}")
        return value

    def _port_range(self, where: tuple, value) -> tuple[int, int]:
        from pyxdp.streams.selection import parse_port_range

        try:
            return parse_port_range(str(value))
        except ValueError as exc:
            raise self.error(where, str(exc)) from None
