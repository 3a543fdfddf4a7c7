# SPDX-License-Identifier: Apache-2.0
"""The table of counters and metrics (pyxdp.proto.counters) is the one
place a counter is defined: the exporter and the streams' metrics serve its
rows as they are, and what is not made from it is held to it here, without
root: struct zl_counters in bpf/zl_structs.h, the Grafana dashboard (every
metric on a panel, no panel on an unknown metric) and docs/spec.md §3 and
§11.5 (the lists of counters and of the streams' metrics)."""

import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from pyxdp import cli
from pyxdp.human import number
from pyxdp.observe import exporter, top, xsk_sockets
from pyxdp.proto import counters
from pyxdp.proto.counters import COUNTERS
from pyxdp.streams.metric_rows import STREAM_METRICS
from pyxdp.streams.metrics import StreamMetrics
from pyxdp.xdp import compiler, flows
from pyxdp.xdp import stats as stats_mod

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "grafana" / "zerolayer-dashboard.json"
STREAMS_ROW = "Token streams"
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


# --- the exporter and the streams' metrics serve the table ----------------------

def _observation() -> flows.Observation:
    values = {key: 10 + i for i, key in enumerate(counters.FIELDS)}
    return flows.Observation("eth9", "ns9", 9, "native", 1, "full", True, values, [0] * 22, 0,
                             False, 16384, [], 0)


def families(registry) -> dict:
    """REGISTRY's families by name, read back from OpenMetrics (which has units)."""
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def exported(monkeypatch) -> dict:
    """The exporter's families, for one made-up interface."""
    monkeypatch.setattr(flows, "observe_all", lambda only_netns=None: ([_observation()], []))
    monkeypatch.setattr(xsk_sockets, "bound", lambda seen: xsk_sockets.Found([], {}, []))
    return families(exporter.registry())


def streamed() -> dict:
    """The streams' families by name, each with a series."""
    m = StreamMetrics(counters=lambda: {}, health=lambda: (0.05, False))
    labels = ("client", "openai", "false", "gpt")
    m.first_chunk(labels, 0.1)
    m.gap(labels, 0.01, True)
    m.finished(labels, "done", 3)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(m.collector())
    return families(registry)


def test_the_exporter_serves_every_counter_as_its_row_says(monkeypatch):
    served = exported(monkeypatch)
    values = _observation().counters
    for c in COUNTERS:
        fam = served[c.prometheus]
        assert (fam.type, fam.documentation, fam.unit) == (c.kind, c.help, c.unit), c.name
        for s in fam.samples:
            assert s.name == c.prometheus + "_total"
            assert {k for k in s.labels if k not in ("interface", "netns")} == ({c.by} - {""})
            key = f"{c.name}.{s.labels[c.by]}" if c.by else c.name
            assert s.value == values[key], key
        assert len(fam.samples) == max(1, len(c.reasons)), c.name


def test_the_streams_serve_every_metric_as_its_row_says():
    served = streamed()
    assert set(served) == {m.prometheus for m in STREAM_METRICS}
    for m in STREAM_METRICS:
        fam = served[m.prometheus]
        assert (fam.type, fam.documentation, fam.unit) == (m.kind, m.help, m.unit), m.name
        want = set(m.labels) | ({m.by} - {""})
        assert all(set(s.labels) - {"le"} == want for s in fam.samples), m.name


def test_every_row_is_named_once_and_ends_with_its_unit():
    names = [m.prometheus for m in (*COUNTERS, *STREAM_METRICS)]
    assert len(names) == len(set(names))
    for m in (*COUNTERS, *STREAM_METRICS):
        assert m.kind in SUFFIXES and (not m.unit or m.prometheus.endswith("_" + m.unit)), m
        assert bool(m.by) == bool(m.reasons), m
        assert m.view_reason in ("", *m.reasons), m


# --- the C struct ------------------------------------------------------------------

def c_counters(header: str) -> list[tuple[str, str]]:
    """(field, array size macro or "") of struct zl_counters, in order."""
    body = re.search(r"struct zl_counters \{(.*?)\};", header, re.S)
    assert body, "no struct zl_counters"
    return re.findall(r"__u64\s+(\w+)(?:\[(\w+)\])?;", body.group(1))


def test_the_c_struct_has_the_table_s_counters_in_its_order():
    fields = c_counters((REPO / "bpf" / "zl_structs.h").read_text())
    assert [name for name, _ in fields] == [c.name for c in COUNTERS]
    defines = compiler.shared_defines()
    for (name, size), c in zip(fields, COUNTERS):
        # an array per counter by reason, as long as its reasons
        assert (defines[size] if size else 0) == len(c.reasons), name


def test_the_c_check_sees_a_missing_field():
    header = "struct zl_counters {\n\t__u64 packets;\n\t__u64 frames[ZL_FRAME_TYPES];\n};"
    assert c_counters(header) == [("packets", ""), ("frames", "ZL_FRAME_TYPES")]


# --- the Grafana dashboard ---------------------------------------------------------

def dashboard_problems(dashboard: dict, known: set[str]) -> list[str]:
    """Metrics a panel queries that nothing serves, and rows of the table no
    panel shows (the streams' on the streams' row, the XDP counters above it)."""
    rows: dict[str, set[str]] = {}
    row = ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        for target in panel.get("targets", []):
            rows.setdefault(row, set()).update(re.findall(r"\bzerolayer_\w+", target["expr"]))
    variables = {v["definition"] for v in dashboard["templating"]["list"] if "definition" in v}
    used = set().union(*rows.values(), *(re.findall(r"\bzerolayer_\w+", v) for v in variables))
    problems = [f"unknown metric {m}" for m in sorted(used - known)]
    streams = rows.get(STREAMS_ROW, set())
    xdp = set().union(*(names for title, names in rows.items() if title != STREAMS_ROW))
    for m, panels in [(m, streams) for m in STREAM_METRICS] + [(c, xdp) for c in COUNTERS]:
        if not any(m.prometheus + suffix in panels for suffix in SUFFIXES[m.kind]):
            problems.append(f"no panel shows {m.prometheus}")
    return problems


def known_metrics(monkeypatch) -> set[str]:
    """Every series name the exporter can serve, with and without streams."""
    served = {**exported(monkeypatch), **streamed()}
    names = {s.name for f in served.values() for s in f.samples}
    # AF_XDP sockets' series exist only while one is open
    names |= {f"zerolayer_xsk_{n}_total" for n in xsk_sockets.XSK_STATS} | {"zerolayer_xsk_info"}
    return names | set(served)


def test_the_dashboard_shows_every_row_and_queries_only_served_metrics(monkeypatch):
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard_problems(dashboard, known_metrics(monkeypatch)) == []


def test_the_dashboard_check_sees_a_missing_panel_and_an_unknown_metric(monkeypatch):
    dashboard = json.loads(DASHBOARD.read_text())
    known = known_metrics(monkeypatch)
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            target["expr"] = target["expr"].replace("zerolayer_beyond_window_total",
                                                    "zerolayer_beyond_windows_total")
            target["expr"] = target["expr"].replace("zerolayer_stream_stalls_total", "1")
    assert dashboard_problems(dashboard, known) == [
        "unknown metric zerolayer_beyond_windows_total",
        "no panel shows zerolayer_stream_stalls", "no panel shows zerolayer_beyond_window"]


# --- docs/spec.md ------------------------------------------------------------------

def spec_section(number: str) -> str:
    text = (REPO / "docs" / "spec.md").read_text()
    start = re.search(rf"^###+ {re.escape(number)} .*$", text, re.M)
    assert start, f"no §{number}"
    end = re.search(r"^###? ", text[start.end():], re.M)
    return text[start.end():start.end() + end.start() if end else None]


def spec_counters(section: str) -> list[tuple[str, list[str]]]:
    """The counters §3.1's table lists, in order, each with the reasons it names."""
    out: list[tuple[str, list[str]]] = []
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) < 3 or not cells[1].strip().startswith("`"):
            continue
        names = re.findall(r"`([a-z_.]+)`", cells[1])
        groups = {n.partition(".")[0] for n in names}
        assert len(groups) == 1, line
        out.append((groups.pop(), [n.partition(".")[2] for n in names if "." in n]))
    return out


def test_spec_lists_exactly_the_table_s_counters():
    listed = spec_counters(spec_section("3.1"))
    assert [name for name, _ in listed] == [c.name for c in COUNTERS]
    for (name, reasons), c in zip(listed, COUNTERS):
        # all its reasons, or the first and last of them around an ellipsis
        assert reasons in (list(c.reasons), [c.reasons[0], c.reasons[-1]] if c.by else []), name


def test_the_spec_check_sees_a_counter_left_out():
    table = spec_section("3.1")
    assert table.count("| `fragments` |") == 1
    listed = spec_counters("\n".join(line for line in table.splitlines()
                                     if not line.startswith("| `fragments` |")))
    assert "fragments" not in [name for name, _ in listed] and len(listed) == len(COUNTERS) - 1


def test_spec_json_shape_is_the_table_s():
    block = re.search(r"```json\n(.*?)```", spec_section("3.2"), re.S)
    assert block, "§3.2 has no JSON example"
    shape = json.loads(block.group(1))
    assert json.dumps(shape) == json.dumps(counters.nest(counters.zero()))


def test_spec_lists_exactly_the_streams_metrics():
    section = spec_section("11.5")
    listed = set()
    for line in section.splitlines():
        if line.startswith("| `zerolayer_"):
            listed |= {re.sub(r"_total$", "", n) for n in re.findall(r"`(zerolayer_\w+)`", line)}
    assert listed == {m.prometheus for m in STREAM_METRICS}


@pytest.mark.parametrize("parser", ["full", "direct"])
def test_views_follow_the_table(parser):
    flat = {key: 1 for key in counters.FIELDS}
    shown = dict(zip((c.view for c in counters.VIEWED), counters.viewed(flat, parser)))
    for c in counters.VIEWED:
        want = 1 if c.view_reason or not c.by else len(c.reasons)
        assert shown[c.view] == (None if c.parser not in ("", parser) else want), c.name


@pytest.mark.parametrize("parser", ["full", "direct"])
def test_stats_watch_and_top_show_the_viewed_counters(monkeypatch, parser):
    from click.testing import CliRunner

    flat = {key: 2 for key in counters.FIELDS}
    snap = {"parser": parser, "rates": counters.nest(flat)}
    monkeypatch.setattr(stats_mod, "watch", lambda iface, netns, interval: iter([snap]))
    cli._register()  # through the group, whose settings the command inherits
    line = CliRunner().invoke(cli.cli, ["stats", "eth9", "--watch", "1"]).output.strip()
    shown = [f"  {number(v)} {c.view}/s" for c, v in
             zip(counters.VIEWED, counters.viewed(flat, parser)) if v is not None]
    assert line.startswith("eth9  ")
    assert [line.find(cell) for cell in shown] == sorted(line.find(cell) for cell in shown)
    assert -1 not in [line.find(cell) for cell in shown] and len(shown) > 5
    assert ("beyond/s" in line) == (parser == "direct")

    now = _observation()
    before = flows.Observation(**{**vars(now), "counters": counters.zero(), "parser": parser})
    now = flows.Observation(**{**vars(now), "parser": parser})
    monkeypatch.setattr(xsk_sockets, "bound", lambda seen: xsk_sockets.Found([], {}, []))
    header, row = top.render([now], {("ns9", "eth9"): before}, 1.0, [], 1.0)[2:4]
    # each column under its heading: the rate since BEFORE (all zero, 1 s ago)
    for heading, want in zip(top.RATE_HEADINGS, counters.viewed(now.counters, parser)):
        cell = row[:header.index(heading) + len(heading)].split()[-1]
        assert cell == ("-" if want is None else number(want)), heading
    assert len(top.RATE_HEADINGS) == len(counters.VIEWED)
