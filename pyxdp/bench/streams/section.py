# SPDX-License-Identifier: Apache-2.0
"""The `streams` section of `zerolayer bench`: what watching token streams
with `zerolayer streams` costs, on loopback, side by side in one run.

The load (pyxdp/bench/streams/sse_load.py): an asyncio SSE server writing
OpenAI-style chunks, one write() each, in HTTP/1.1 chunked responses, and
a client process reading them; plaintext and TLS (Python's ssl, OpenSSL 3,
a self-signed certificate made for the run in a private directory). Two
phases per transport:
- paced: PACED_STREAMS concurrent streams, PACED_RATE chunks/s in all (by
  default 1,000 streams, 10,000 chunks/s): the clients' chunk-gap p99, and
  CPU per chunk of the server and client processes and of the observer;
- flood: FLOOD_STREAMS streams as fast as they go: the server's chunks/s
  at saturation.
And two loops of a process that streams nothing (pyxdp/bench/streams/
loops.py): send/recv on a TCP connection, and the same through OpenSSL;
plus the bare cost of a uprobe here (a program that only counts, on the
same OpenSSL functions, in that process alone). The loops run once more
outside a selection (OUTSIDE), the observer selecting the SSE server,
which maps the same OpenSSL: by its TLS port (`--port`: the uprobes go
host-wide and return at once in the loop process) and by its pid
(`--pid`: the uprobes go into the server alone).

Each round runs every measurement twice, without and with the observer
(`zerolayer streams --json`, a process of its own, every process watched,
as a user starts it), in alternating order (ABBA over rounds). Ratios are
taken within a round. The unobserved arm also runs the plaintext flood
and the send/recv loop once more under programs that return at once on
the observer's tracepoints: the floor, what any observer built on them
costs here before its own work. The first observed arm ends with one more paced run
per transport with BPF run-time statistics on (not in the figures): the
observer's program runs per chunk, uprobe hits included, and their time.

On a small machine the server, the clients and the observer share the
CPUs: at saturation the observer's CPU is taken from the load's.
"""

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

from pyxdp.bench.drawing import FLOOR, ZEROLAYER, bar, verdicts
from pyxdp.bench.figures import cells, figure
from pyxdp.bench.section import Progress, Rig, Section, Target, judged
from pyxdp.bench.streams.sse_load import STARTED
from pyxdp.human import number, table

TRANSPORTS = ("plain", "tls")
PHASES = ("paced", "flood")
ARMS = ("unobserved", "observed")
# The plaintext flood once more in the unobserved arm, under programs that
# return at once on the observer's tracepoints: the least any observer on
# them costs here (pyxdp/bench/streams/loops.py).
FLOOR_ARM = "bare"
SETTLE_S = 10.0  # how long the observer may take to report a run's streams
ALONE_S = 180.0  # how long an arm waits for another observer on the host to end
EDGE_S = 0.3  # a paced run's steady part leaves out this much after its start and before its end
PER_CALL_ALLOWANCE_US = 2.0  # the "+ 2 us" per chunk over TLS
# The selections the loop process is left out of (zerolayer streams --port, --pid).
OUTSIDE = ("port", "pid")


@dataclass(frozen=True)
class Plan:
    rounds: int
    paced_s: float  # seconds of chunks per paced stream
    paced_streams: int = 1000
    paced_rate: int = 10_000  # chunks/s, all streams together
    flood_streams: int = 64
    flood_chunks: int = 100_000  # all streams together
    loop_turns: int = 100_000  # turns of each loop of the process that streams nothing


FULL = Plan(rounds=2, paced_s=2.0)
QUICK = Plan(rounds=1, paced_s=1.5, flood_chunks=32_000, loop_turns=20_000)


# --- the run ---------------------------------------------------------------------------

def _certificate(workdir: str) -> tuple[str, str]:
    """A self-signed P-256 certificate for 127.0.0.1 (cheap handshakes: a
    thousand of them per TLS run), in WORKDIR."""
    cert, key = os.path.join(workdir, "cert.pem"), os.path.join(workdir, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def _job(plan: Plan, phase: str) -> tuple[int, int, int]:
    """(streams, chunks per stream, interval in us) of a PHASE run."""
    if phase == "paced":
        streams = plan.paced_streams
        return (streams, max(2, round(plan.paced_s * plan.paced_rate / streams)),
                round(streams * 1e6 / plan.paced_rate))
    streams = plan.flood_streams
    return streams, max(2, plan.flood_chunks // streams), 0


def _one(workers: dict, ports: dict, observer, transport: str, phase: str, plan: Plan) -> dict:
    """One run of the load; what the clients read, what the server wrote, the
    CPU of each process and, observed, what the observer reported of it."""
    from pyxdp.bench.streams.observer import cpu_s

    streams, chunks, interval_us = _job(plan, phase)
    tls = transport == "tls"
    server, clients = workers["server"], workers["clients"]
    pids = {"server": server.proc.pid, "clients": clients.proc.pid}
    if observer is not None:
        pids["observer"] = observer.pid
    since = len(observer.streams) if observer is not None else 0
    server.conn.send("reset")
    server.conn.recv()
    cpu0 = {name: cpu_s(pid) for name, pid in pids.items()}
    start = time.monotonic()
    clients.conn.send({"port": ports[transport], "tls": tls, "streams": streams,
                       "chunks": chunks, "interval_us": interval_us, "connect_s": 120.0})
    res = clients.conn.recv()
    steady = None
    if res == STARTED:
        if observer is not None and interval_us:
            steady = _steady(server, observer.pid, chunks * interval_us / 1e6)
        res = clients.conn.recv()
    seconds = time.monotonic() - start
    server.conn.send("count")
    wrote = server.conn.recv()
    seen = None
    if observer is not None:
        ours = {pids["server"]: "server", pids["clients"]: "client"}
        reported = observer.wait_streams(
            since, lambda s: s.get("pid") in ours and s.get("tls") == tls, 2 * res["streams"],
            SETTLE_S)
        sides = {side: [s for s in reported if s["side"] == side] for side in ("client", "server")}
        seen = {f"{side}_streams": len(found) for side, found in sides.items()}
        seen |= {f"{side}_chunks": sum(s["chunks"] for s in found) for side, found in sides.items()}
        seen["done"] = sum(1 for s in reported if s["status"] == "done")
    cpu = {name: round(cpu_s(pid) - cpu0[name], 6) for name, pid in pids.items()}
    span = (wrote["last_ns"] - wrote["first_ns"]) / 1e9
    return {"transport": transport, "phase": phase, "streams": streams,
            "chunks_per_stream": chunks, "interval_us": interval_us,
            "streams_whole": res["streams"], "chunks": res["chunks"],
            "server_chunks": wrote["chunks"],
            "server_chunks_per_s": round(wrote["chunks"] / span, 1) if span > 0 else 0.0,
            "seconds": round(seconds, 3), "gap_p50_ms": res["gap_p50_ms"],
            "gap_p99_ms": res["gap_p99_ms"], "cpu_s": cpu, "observer": seen, "steady": steady,
            "errors": [f"{transport} {phase}: {e}" for e in res["errors"]]}


def _steady(server, observer_pid: int, paced_s: float) -> dict | None:
    """The observer's CPU in the steady part of a paced run that has just
    started: every stream under way, none starting or ending, the chunks at
    the paced rate. What the streams' start and end cost is what the whole
    run costs beyond it."""
    from pyxdp.bench.streams.observer import cpu_s

    span = paced_s - 2 * EDGE_S
    if span < 0.5:
        return None
    time.sleep(EDGE_S)
    marks = []
    for wait in (0.0, span):
        time.sleep(wait)
        server.conn.send("count")
        marks.append((time.monotonic(), cpu_s(observer_pid), server.conn.recv()["chunks"]))
    (t0, c0, n0), (t1, c1, n1) = marks
    return {"seconds": round(t1 - t0, 3), "observer_cpu_s": round(c1 - c0, 6),
            "server_chunks": n1 - n0}


def _loops(loop, plan: Plan, bare_pid: int | None) -> dict:
    """CPU ns per turn of each loop; with BARE_PID (the loop process), the
    ssl loop once more under the bare uprobes, and the calls they counted."""
    out = {}
    for kind in ("write", "ssl"):
        loop.conn.send({"kind": kind, "turns": plan.loop_turns})
        out[f"{kind}_ns"] = loop.conn.recv()
    if bare_pid is not None:
        from pyxdp.bench.streams.loops import BareProbes

        bare = BareProbes(bare_pid)
        try:
            loop.conn.send({"kind": "ssl", "turns": plan.loop_turns})
            out["ssl_bare_ns"] = loop.conn.recv()
            # each probed call runs the program twice: on entry and on return
            out["bare_calls_per_turn"] = bare.hits() / 2 / plan.loop_turns
        finally:
            bare.close()
    return out


def _outside(workers: dict, ports: dict, kind: str, plan: Plan) -> dict:
    """The loops while `zerolayer streams` selects the SSE server instead
    (KIND: by its TLS port, or by its pid), which maps the same OpenSSL as
    the loop process: CPU ns per turn, as write_port_ns, ssl_port_ns (or
    _pid_)."""
    from pyxdp.bench.streams.observer import Observer

    if kind == "port":
        args = ["--port", str(ports["tls"])]
    else:
        args = ["--pid", str(workers["server"].proc.pid)]
    observer = Observer(*args)
    try:
        return {f"{k.split('_')[0]}_{kind}_ns": v
                for k, v in _loops(workers["loop"], plan, None).items()}
    finally:
        observer.stop()


def _floor(workers: dict, ports: dict, plan: Plan) -> tuple[dict, float]:
    """The plaintext flood and the send/recv loop under the bare tracepoints
    (one load of them): the run, and the loop's CPU ns per turn."""
    from pyxdp.bench.streams.loops import BareTracepoints

    with BareTracepoints():
        run = _one(workers, ports, None, "plain", "flood", plan)
        workers["loop"].conn.send({"kind": "write", "turns": plan.loop_turns})
        return run, workers["loop"].conn.recv()


def _profile(workers: dict, ports: dict, observer, plan: Plan) -> dict:
    """One paced run per transport with BPF run-time statistics on: the
    observer's program runs and their ns per chunk the server wrote; its
    uprobe entries ("hits", one a probed call) per chunk."""
    from pyxdp.kernel import bpfsys
    from pyxdp.streams.probes import BPF_PROG_TYPE_KPROBE
    from pyxdp.streams.tls_libraries import TLS_LIBRARIES

    names: dict[int, str] = {}
    for prog_id in observer.programs():
        fd = bpfsys.prog_fd_by_id(prog_id)
        try:
            names[prog_id] = bpfsys.prog_info(fd).name
        finally:
            os.close(fd)
    out = {}
    for transport in TRANSPORTS:
        with bpfsys.run_stats_on():
            before = observer.programs()
            run = _one(workers, ports, observer, transport, "paced", plan)
            after = observer.programs()
        chunks = max(1, run["server_chunks"])
        delta = {prog: {k: after[prog][k] - before.get(prog, {}).get(k, 0)
                        for k in ("run_cnt", "run_time_ns")} | {"type": after[prog]["type"]}
                 for prog in after}
        # the uprobe programs but the return ones (the kernel keeps 15 characters of a name)
        returns = {f.ret for library in TLS_LIBRARIES for f in library.functions}
        hits = sum(d["run_cnt"] for prog, d in delta.items() if d["type"] == BPF_PROG_TYPE_KPROBE
                   and not any(r.startswith(names.get(prog, "?")) for r in returns))
        out[transport] = {
            "server_chunks": run["server_chunks"],
            "runs_per_chunk": round(sum(d["run_cnt"] for d in delta.values()) / chunks, 3),
            "bpf_ns_per_chunk": round(sum(d["run_time_ns"] for d in delta.values()) / chunks, 1),
            "uprobe_hits_per_chunk": round(hits / chunks, 3),
            "errors": run["errors"]}
    return out


def _alone(own: int | None, progress: Progress) -> list[int]:
    """Wait (up to ALONE_S) until no other `zerolayer streams` runs on the
    host: its probes would be on the load too. The pids still there."""
    from pyxdp.bench.streams.observer import others

    deadline = time.monotonic() + ALONE_S
    found = others(own)
    if found:
        progress(f"waiting for another zerolayer streams to end (pid {', '.join(map(str, found))})")
    while found and time.monotonic() < deadline:
        time.sleep(1.0)
        found = others(own)
    return found


def _intruders(own: int | None, where: str) -> list[str]:
    """An error when another observer ran during WHERE (its figures are not clean)."""
    from pyxdp.bench.streams.observer import others

    found = others(own)
    return [f"{where}: another zerolayer streams ran (pid {', '.join(map(str, found))}): "
            "its probes were on the load too"] if found else []


def measure(plan: Plan, progress: Progress) -> dict:
    """Measure as PLAN says (module doc). Needs root."""
    import multiprocessing

    from pyxdp.bench.streams import loops, sse_load
    from pyxdp.bench.streams.observer import Observer
    from pyxdp.bench.worker import Worker
    from pyxdp.streams import probes

    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding BPF objects
    workdir = tempfile.mkdtemp(prefix="zerolayer-bench-streams-")  # mode 0700
    workers: dict = {}
    runs: list[dict] = []
    loop_runs: list[dict] = []
    profile: dict = {}
    errors: list[str] = []
    try:
        cert, key = _certificate(workdir)
        workers["server"] = Worker(ctx, sse_load.server_main, cert, key)
        ports = workers["server"].conn.recv()
        workers["clients"] = Worker(ctx, sse_load.client_main)
        workers["loop"] = Worker(ctx, loops.loop_main, cert, key)
        workers["loop"].conn.recv()
        probes.ensure_tracefs()  # for the bare uprobes; the observers see it too
        for r in range(plan.rounds):
            for arm in (ARMS if r % 2 == 0 else ARMS[::-1]):
                observer = None
                _alone(None, progress)
                if arm == "observed":
                    progress(f"round {r + 1}/{plan.rounds}: starting zerolayer streams --json")
                    observer = Observer()
                try:
                    progress(f"round {r + 1}/{plan.rounds}, {arm}: loops of a process that "
                             "streams nothing" + ("" if observer else ", and under bare uprobes"))
                    bare_pid = None if observer else workers["loop"].proc.pid
                    own = observer.pid if observer is not None else None
                    loop_runs.append({"round": r, "arm": arm,
                                      **_loops(workers["loop"], plan, bare_pid)})
                    errors += _intruders(own, f"round {r + 1}, {arm}, loops")
                    for transport in TRANSPORTS:
                        for phase in PHASES:
                            progress(f"round {r + 1}/{plan.rounds}, {arm}: {transport}, {phase}")
                            runs.append({"round": r, "arm": arm, **_one(
                                workers, ports, observer, transport, phase, plan)})
                            errors += _intruders(own, f"round {r + 1}, {arm}, {transport} {phase}")
                    if observer is None:
                        progress(f"round {r + 1}/{plan.rounds}, {FLOOR_ARM}: plain, flood, "
                                 "and the send/recv loop, under bare tracepoints")
                        run, loop_runs[-1]["write_bare_ns"] = _floor(workers, ports, plan)
                        runs.append({"round": r, "arm": FLOOR_ARM, **run})
                        for kind in OUTSIDE:
                            progress(f"round {r + 1}/{plan.rounds}, outside --{kind}: loops of "
                                     "a process the observer does not select")
                            loop_runs[-1] |= _outside(workers, ports, kind, plan)
                    if observer is not None and not profile:
                        progress(f"round {r + 1}/{plan.rounds}, observed: paced runs with "
                                 "BPF run-time statistics on")
                        profile = _profile(workers, ports, observer, plan)
                finally:
                    if observer is not None:
                        code = observer.stop()
                        if code != 0:
                            errors.append(f"zerolayer streams exited {code}: "
                                          + "".join(observer.stderr[-1:]).strip())
    finally:
        for worker in workers.values():
            worker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"load": _load(plan), "cpus": os.cpu_count(), "runs": runs, "loops": loop_runs,
            "profile": profile,
            "errors": sorted({*errors, *(e for run in (*runs, *profile.values())
                                         for e in run["errors"])})}


def _load(plan: Plan) -> dict:
    from pyxdp.bench.streams.sse_load import CHUNK

    paced, flood = _job(plan, "paced"), _job(plan, "flood")
    return {"paced_streams": paced[0], "paced_chunks_per_stream": paced[1],
            "paced_interval_us": paced[2], "paced_rate": plan.paced_rate,
            "flood_streams": flood[0], "flood_chunks_per_stream": flood[1],
            "loop_turns": plan.loop_turns, "rounds": plan.rounds,
            "chunk_bytes": len(CHUNK)}


# --- the report ------------------------------------------------------------------------

def _pick(runs: list[dict], r: int, arm: str, transport: str, phase: str) -> dict | None:
    return next((x for x in runs if x["round"] == r and x["arm"] == arm
                 and x["transport"] == transport and x["phase"] == phase), None)


def _load_us_per_chunk(run: dict) -> float:
    """CPU us of the server and client processes per chunk written."""
    return (run["cpu_s"]["server"] + run["cpu_s"]["clients"]) * 1e6 / max(1, run["server_chunks"])


def _transport(measured: dict, transport: str, rounds: int) -> dict:
    """The figures of TRANSPORT: each arm's, and the within-round ratios."""
    runs = measured["runs"]
    per: dict[str, list[float]] = {k: [] for k in (
        "sat_u", "sat_o", "sat_ratio", "sat_floor", "p99_u", "p99_o", "p99_ratio", "load_u",
        "load_o", "added", "obs_us", "steady_pct", "steady_rate", "steady_us", "stream_us")}
    for r in range(rounds):
        pu, po = (_pick(runs, r, a, transport, "paced") for a in ARMS)
        fu, fo = (_pick(runs, r, a, transport, "flood") for a in ARMS)
        if not (pu and po and fu and fo and pu["gap_p99_ms"] and po["gap_p99_ms"]
                and fu["server_chunks_per_s"] and po["server_chunks"]):
            continue
        per["sat_u"].append(fu["server_chunks_per_s"])
        per["sat_o"].append(fo["server_chunks_per_s"])
        per["sat_ratio"].append(fo["server_chunks_per_s"] / fu["server_chunks_per_s"])
        fb = _pick(runs, r, FLOOR_ARM, transport, "flood")
        if fb:
            per["sat_floor"].append(fb["server_chunks_per_s"] / fu["server_chunks_per_s"])
        per["p99_u"].append(pu["gap_p99_ms"])
        per["p99_o"].append(po["gap_p99_ms"])
        per["p99_ratio"].append(po["gap_p99_ms"] / pu["gap_p99_ms"])
        per["load_u"].append(_load_us_per_chunk(pu))
        per["load_o"].append(_load_us_per_chunk(po))
        per["added"].append(_load_us_per_chunk(po) - _load_us_per_chunk(pu))
        obs_us = po["cpu_s"]["observer"] * 1e6 / po["server_chunks"]
        per["obs_us"].append(obs_us)
        steady = po.get("steady")
        if steady and steady["server_chunks"] and steady["seconds"]:
            # the observer's share of one CPU while every stream is under way
            per["steady_pct"].append(100 * steady["observer_cpu_s"] / steady["seconds"])
            per["steady_rate"].append(steady["server_chunks"] / steady["seconds"])
            steady_us = steady["observer_cpu_s"] * 1e6 / steady["server_chunks"]
            per["steady_us"].append(steady_us)
            # the rest of the run's observer CPU: its streams beginning and ending
            per["stream_us"].append((obs_us - steady_us) * po["server_chunks"]
                                    / max(1, po["streams_whole"]))
    if not per["sat_ratio"]:
        return {}
    return {
        "saturation_chunks_per_s": {"unobserved": figure(per["sat_u"]),
                                    "observed": figure(per["sat_o"])},
        "saturation_ratio": figure(per["sat_ratio"]),
    } | ({"saturation_floor_ratio": figure(per["sat_floor"])} if per["sat_floor"] else {}) | {
        "paced_gap_p99_ms": {"unobserved": figure(per["p99_u"]),
                             "observed": figure(per["p99_o"])},
        "paced_gap_p99_ratio": figure(per["p99_ratio"]),
        "load_cpu_us_per_chunk": {"unobserved": figure(per["load_u"]),
                                  "observed": figure(per["load_o"])},
        "added_us_per_chunk": figure(per["added"]),
        "observer_cpu_us_per_chunk": figure(per["obs_us"]),
    } | ({
        "steady_chunks_per_s": figure(per["steady_rate"]),
        "observer_steady_us_per_chunk": figure(per["steady_us"]),
        "observer_cpu_pct_of_one_cpu": figure(per["steady_pct"]),
        "observer_us_per_stream": figure(per["stream_us"]),
    } if per["steady_pct"] else {})


def _idle(measured: dict) -> dict:
    """The process that streams nothing, and the bare uprobe's cost."""
    loops = measured["loops"]
    rounds = sorted({x["round"] for x in loops})
    per: dict[str, list[float]] = {k: [] for k in (
        "write_u", "write_o", "write_ratio", "write_floor", "ssl_u", "ssl_o", "ssl_ratio",
        "ssl_floor", "hit_us", "calls",
        *(f"{k}_{o}_ratio" for k in ("write", "ssl") for o in OUTSIDE))}
    for r in rounds:
        u = next((x for x in loops if x["round"] == r and x["arm"] == "unobserved"), None)
        o = next((x for x in loops if x["round"] == r and x["arm"] == "observed"), None)
        if not (u and o):
            continue
        for kind in ("write", "ssl"):
            per[f"{kind}_u"].append(u[f"{kind}_ns"])
            per[f"{kind}_o"].append(o[f"{kind}_ns"])
            per[f"{kind}_ratio"].append(o[f"{kind}_ns"] / u[f"{kind}_ns"])
        for kind in ("write", "ssl"):
            for o in OUTSIDE:
                if f"{kind}_{o}_ns" in u:
                    per[f"{kind}_{o}_ratio"].append(u[f"{kind}_{o}_ns"] / u[f"{kind}_ns"])
        per["write_floor"].append(u["write_bare_ns"] / u["write_ns"])
        per["ssl_floor"].append(u["ssl_bare_ns"] / u["ssl_ns"])
        calls = u["bare_calls_per_turn"]
        per["calls"].append(calls)
        if calls:
            per["hit_us"].append((u["ssl_bare_ns"] - u["ssl_ns"]) / calls / 1e3)
    if not per["write_ratio"]:
        return {}
    out = {"write_ns": {"unobserved": figure(per["write_u"]), "observed": figure(per["write_o"])},
           "write_ratio": figure(per["write_ratio"]),
           "write_floor_ratio": figure(per["write_floor"]),
           "ssl_ns": {"unobserved": figure(per["ssl_u"]), "observed": figure(per["ssl_o"])},
           "ssl_ratio": figure(per["ssl_ratio"]),
           "ssl_floor_ratio": figure(per["ssl_floor"]),
           "bare_calls_per_turn": figure(per["calls"])}
    out |= {f"{k}_outside_{o}_ratio": figure(per[f"{k}_{o}_ratio"])
            for k in ("write", "ssl") for o in OUTSIDE if per[f"{k}_{o}_ratio"]}
    if per["hit_us"]:
        out["uprobe_hit_us"] = figure(per["hit_us"])
    return out


def report(plan: Plan, measured: dict) -> dict:
    """The `streams` entry of the JSON report (docs/spec.md §5.9)."""
    out: dict = {"load": measured["load"], "cpus": measured["cpus"]}
    for transport in TRANSPORTS:
        out[transport] = _transport(measured, transport, plan.rounds)
    out["idle_process"] = _idle(measured)
    hit = out["idle_process"].get("uprobe_hit_us")
    hits = measured["profile"].get("tls", {}).get("uprobe_hits_per_chunk")
    tls = out["tls"]
    if hit and hits is not None and tls:
        bound = hit["median"] * hits + PER_CALL_ALLOWANCE_US
        tls["uprobe_hits_per_chunk"] = hits
        tls["bound_us_per_chunk"] = round(bound, 3)
        tls["added_vs_bound"] = figure(v / bound for v in tls["added_us_per_chunk"]["values"])
    out["observer_saw"] = [
        {"round": x["round"], "transport": x["transport"], "phase": x["phase"],
         "streams": x["streams_whole"], **x["observer"]}
        for x in measured["runs"] if x["observer"] is not None]
    out["profile"] = measured["profile"]
    out["runs"] = measured["runs"]
    out["loops"] = measured["loops"]
    out["errors"] = measured["errors"]
    return {"streams": out}


TARGETS = [
    Target("observed server's chunks/s at saturation, plaintext, against unobserved",
           "streams.plain.saturation_ratio", ">=", 0.95),
    Target("clients' chunk-gap p99 at the paced load, plaintext, observed against unobserved",
           "streams.plain.paced_gap_p99_ratio", "<=", 1.10),
    Target("observer's CPU at 10,000 chunks/s (steady: every stream under way), plaintext, "
           "of one CPU", "streams.plain.observer_cpu_pct_of_one_cpu", "<=", 10.0, unit="%"),
    Target("observer's CPU at 10,000 chunks/s (steady: every stream under way), TLS, "
           "of one CPU", "streams.tls.observer_cpu_pct_of_one_cpu", "<=", 10.0, unit="%"),
    Target("CPU added per chunk over TLS, against uprobe hits x hit cost + 2 us",
           "streams.tls.added_vs_bound", "<=", 1.0),
    Target("a process that streams nothing: send/recv loop, observed against unobserved",
           "streams.idle_process.write_ratio", "<=", 1.05),
    Target("a process that streams nothing: SSL_write/SSL_read loop, observed against "
           "unobserved", "streams.idle_process.ssl_ratio", "<=", 1.05),
    *(Target(f"a process outside the selection (--{o} of another): {loop} loop, against "
             "unobserved", f"streams.idle_process.{k}_outside_{o}_ratio", "<=", 1.02)
      for o in OUTSIDE for k, loop in (("write", "send/recv"), ("ssl", "SSL_write/SSL_read"))),
]


# --- the text and the plot -------------------------------------------------------------

def _render(r: dict) -> str:
    s = r["streams"]
    load = s["load"]
    out = [f"Token streams on loopback: cost of `zerolayer streams` (every process watched) to "
           f"an SSE server and its clients; {load['paced_streams']:,} streams at "
           f"{load['paced_rate']:,} chunks/s (paced), {load['flood_streams']} streams flooding; "
           f"server, clients and observer share {s['cpus']} CPUs"]
    rows = []
    for transport in TRANSPORTS:
        t = s[transport]
        if not t:
            continue
        for label, key, fmt in (("server chunks/s at saturation", "saturation_chunks_per_s",
                                 "{:,.0f}"),
                                ("client chunk-gap p99, ms (paced)", "paced_gap_p99_ms", "{:,.2f}"),
                                ("server+client CPU us/chunk (paced)", "load_cpu_us_per_chunk",
                                 "{:,.2f}")):
            rows.append([transport, label, fmt.format(t[key]["unobserved"]["median"]),
                         *cells(t[key]["observed"], fmt)])
        rows.append([transport, "saturation observed/unobserved", "",
                     *cells(t["saturation_ratio"], "{:.3f}x")])
        if "saturation_floor_ratio" in t:
            rows.append([transport, "saturation under bare tracepoints/unobserved (floor)", "",
                         *cells(t["saturation_floor_ratio"], "{:.3f}x")])
        rows.append([transport, "gap p99 observed/unobserved", "",
                     *cells(t["paced_gap_p99_ratio"], "{:.3f}x")])
        rows.append([transport, "CPU added per chunk, us", "",
                     *cells(t["added_us_per_chunk"], "{:,.2f}")])
        rows.append([transport, "observer CPU us/chunk, whole run", "",
                     *cells(t["observer_cpu_us_per_chunk"], "{:,.2f}")])
        if "observer_cpu_pct_of_one_cpu" in t:
            rows.append([transport, "chunks/s, steady part (every stream under way)", "",
                         *cells(t["steady_chunks_per_s"], "{:,.0f}")])
            rows.append([transport, "observer CPU us/chunk, steady part", "",
                         *cells(t["observer_steady_us_per_chunk"], "{:,.2f}")])
            rows.append([transport, "observer % of one CPU, steady part", "",
                         *cells(t["observer_cpu_pct_of_one_cpu"], "{:,.1f}")])
            rows.append([transport, "observer CPU us per stream begun and ended", "",
                         *cells(t["observer_us_per_stream"], "{:,.0f}")])
        if "added_vs_bound" in t:
            rows.append([transport, f"added / ({t['uprobe_hits_per_chunk']:.2f} hits x hit "
                         f"+ 2 us = {t['bound_us_per_chunk']:.2f} us)", "",
                         *cells(t["added_vs_bound"], "{:.2f}x")])
    out.append(table(["", "FIGURE", "UNOBSERVED", "OBSERVED", "MIN", "MAX"], rows))
    idle = s["idle_process"]
    if idle:
        rows = [[label, f"{idle[key]['unobserved']['median']:,.0f}",
                 f"{idle[key]['observed']['median']:,.0f}",
                 *cells(idle[ratio], "{:.3f}x"), *cells(idle[floor], "{:.3f}x")[:1]]
                for label, key, ratio, floor in (
                    ("send+recv", "write_ns", "write_ratio", "write_floor_ratio"),
                    ("SSL_write_ex+SSL_read_ex", "ssl_ns", "ssl_ratio", "ssl_floor_ratio"))]
        out += ["a process that streams nothing, CPU ns per turn of its loop (FLOOR: under "
                "bare tracepoints, and bare uprobes for SSL, against unobserved):",
                table(["LOOP", "UNOBSERVED", "OBSERVED", "RATIO", "MIN", "MAX", "FLOOR"], rows)]
        rows = [[f"--{o}", loop, *cells(idle[f"{k}_outside_{o}_ratio"], "{:.3f}x")]
                for o in OUTSIDE for k, loop in (("write", "send+recv"),
                                                 ("ssl", "SSL_write_ex+SSL_read_ex"))
                if f"{k}_outside_{o}_ratio" in idle]
        if rows:
            out += ["the same loops outside the selection (the observer selecting the SSE "
                    "server by its port, or by its pid), against unobserved:",
                    table(["SELECTION", "LOOP", "RATIO", "MIN", "MAX"], rows)]
        if "uprobe_hit_us" in idle:
            out.append("one uprobe hit (entry and return of a probed call, a program that only "
                       "counts): " + " / ".join(cells(idle["uprobe_hit_us"], "{:,.2f}"))
                       + " us (median / min / max)")
    seen = s["observer_saw"]
    if seen:
        rows = [[x["round"] + 1, x["transport"], x["phase"], number(x["streams"]),
                 number(x["client_streams"]), number(x["server_streams"]),
                 number(x["client_chunks"]), number(x["done"])] for x in seen]
        out += ["what the observer reported of each observed run:",
                table(["ROUND", "", "PHASE", "STREAMS RUN", "CLIENT SIDE", "SERVER SIDE",
                       "CLIENT CHUNKS", "DONE"], rows)]
    for transport, p in s["profile"].items():
        out.append(f"profile, {transport} paced: {p['runs_per_chunk']:.2f} program runs and "
                   f"{p['bpf_ns_per_chunk']:,.0f} ns in BPF per chunk, "
                   f"{p['uprobe_hits_per_chunk']:.2f} uprobe hits per chunk")
    if s["errors"]:
        out.append("errors: " + "; ".join(s["errors"]))
    return "\n".join(out)


def _panel(ax, report):
    s = report["streams"]
    ticks, notes = [], []
    for i, transport in enumerate(t for t in TRANSPORTS if s[t]):
        sat = s[transport]["saturation_chunks_per_s"]
        bar(ax, i - 0.2, sat["unobserved"], FLOOR, "unobserved" if i == 0 else None, 1e3)
        bar(ax, i + 0.2, sat["observed"], ZEROLAYER, "observed" if i == 0 else None, 1e3)
        ticks.append(transport)
        key = f"streams.{transport}.saturation_ratio"
        note = f"{transport}: {s[transport]['saturation_ratio']['median']:.2f}x"
        judged_ = verdicts(report, key)
        notes.append(note + (f" ({judged_})" if judged_ else ""))
    ax.set_xticks(range(len(ticks)), ticks)
    ax.set_title("SSE server at saturation, k chunks/s, with and without zerolayer streams",
                 fontsize=10)
    ax.set_xlabel("observed/unobserved, " + "; ".join(notes), fontsize=8)
    if ticks:
        ax.legend(fontsize=8)


def _measure(plan: Plan, rig: Rig | None, progress: Progress) -> dict:
    progress(f"token streams: {plan.rounds} round{'s' if plan.rounds > 1 else ''}, each "
             "without and with zerolayer streams: SSE over plaintext and TLS, paced and "
             "flooding, on loopback")
    return measure(plan, progress)


SECTION = Section(
    name="streams", full=FULL, quick=QUICK, measure=_measure, report=report, render=_render,
    panel=_panel, targets=lambda report: judged(TARGETS, report),
    errors=lambda report: report["streams"]["errors"], default=False)
