# SPDX-License-Identifier: Apache-2.0
"""The `relay` section of `zerolayer bench`, the TCP relay benchmark:
frames/s and frame latency through zerolayer's
relays and their peers, side by side in one run, on loopback:
- sockmap: zerolayer's in-kernel relay (sockhash + stream parser), which
  cuts whole frames and counts malformed streams;
- sockmap_unframed: the same sockhash with a verdict alone, no parser:
  segments redirected as they came, nothing framed or counted. Not a relay
  anyone should run; it is the ceiling of any program on this kernel path,
  so the figures say how much is framing and how much is sockmap itself;
- asyncio: zerolayer's userspace reference relay, same rules;
- splice, socat, haproxy: relays that know nothing of frames
  (pyxdp/bench/relay/peers.py); one that cannot run here is skipped with a
  note;
- direct: no relay, the generator straight to the receiver.

Every engine gets the same load (pyxdp/bench/relay/load.py): 13-byte frames
(5-byte header, 8-byte payload), about one token's text each, from one
generator process to one receiver process. The CPU time of each process and
the host's busy fraction are reported, to show which part ran out of CPU.

Two phases per engine and stream count (by default 1, 64 and 512
concurrent streams):
- flood: a fixed number of frames (split over the streams) as fast as they
  go; frames/s from the first byte received to the last DONE, and latency
  under that load (mostly time queued on the way);
- paced: 10,000 frames/s in total, a load every engine carries, for the
  latency of the path itself.
Then, per round, the gateway's load (cadence): many slow streams, by
default 1,000 streams at 20 frames/s each (20,000 frames/s), their phases
spread, through sockmap, asyncio and haproxy, and through sockmap
unframed: a verdict that redirects each segment as it came, the least any
sockmap relay does, so that what the kernel's redirect path costs at
cadence is told apart from what framing adds. Besides p50/p99 it reports
the CPU a frame cost the whole machine (the busy time of every CPU over the
run, over the frames): sockmap's work is the kernel's, in softirq and
kworker context, so no process's own CPU time holds it, and the generator
and receiver are the same for every engine.
Rounds interleave the engines; each figure is the median of the rounds
(cpu_s is the last round's), and ratios are taken within a round (the
machine is shared and noisy).

Each round ends with a write-size sweep: one more flood per size at 1
stream, the generator sending that many frames per send, through every
engine but asyncio. On loopback a send arrives as one skb, and sockmap's
cost is per skb (each is cloned, queued to a kworker and sent on by its own
tcp_sendmsg), while a userspace relay reads many sends at once: so the
ratio to the peers depends on the sender's write size, and the sweep shows
by how much.

After the rounds, one more sockmap flood per stream count runs with the
kernel's BPF run-time statistics on (for that flood only: they cost a clock
read per program run), to say where the relay's time goes: runs, ns per run
and frames per run of its parser and verdict programs. It is not in the
figures.

measure() returns what the section reports under `relay`, targets() the
section's targets.
"""

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyxdp.bench.drawing import FLOOR, ZEROLAYER, bar, verdicts
from pyxdp.bench.figures import cells, figure, figure_of
from pyxdp.bench.relay import peers as relay_peers
from pyxdp.bench.relay.load import FRAME_LEN, generator_main, raise_fd_limit, receiver_main
from pyxdp.bench.section import Progress, Rig, Section
from pyxdp.bench.worker import Worker
from pyxdp.human import number, table
from pyxdp.kernel import bpfsys

ENGINES = ("sockmap", "sockmap_unframed", "asyncio", "splice", "socat", "haproxy", "direct")
# The write-size sweep leaves out the asyncio relay: slow, and not the question.
SWEEP_ENGINES = tuple(e for e in ENGINES if e != "asyncio")
PEERS = relay_peers.PEERS
# The stream counts the targets against the peers are set for.
PEER_TARGET_STREAMS = ("1", "64")


@dataclass(frozen=True)
class Plan:
    rounds: int
    flood_frames: int  # all streams together
    paced_s: float
    streams: tuple[int, ...] = (1, 64, 512)
    paced_rate: int = 10_000  # frames/s, all streams together
    flood_batch: int = 256
    write_sizes: tuple[int, ...] = (16, 1024, 4096)  # frames per send of the sweep
    peers: tuple[str, ...] = PEERS  # which peers to run, when they can
    cadence_streams: int = 1_000  # the gateway's load: many slow streams...
    cadence_rate: int = 20  # ...this many frames/s each...
    cadence_s: float = 5.0  # ...for this long


FULL = Plan(rounds=5, flood_frames=2_000_000, paced_s=2.0)
QUICK = Plan(rounds=1, flood_frames=200_000, paced_s=0.2, cadence_streams=200, cadence_s=1.0)
# The engines the cadence runs compare: zerolayer's two, what a gateway runs,
# and the bare redirect under the sockmap relay.
CADENCE_ENGINES = ("sockmap", "asyncio", "haproxy", "sockmap_unframed")


# --- the asyncio relay process ------------------------------------------------------------

def _asyncio_relay_main(conn, upstream: str) -> None:
    from pyxdp.relay.asyncio_relay import AsyncioRelay

    raise_fd_limit()
    relay = AsyncioRelay("127.0.0.1:0", upstream).start()
    conn.send(relay.address)
    conn.recv()  # until told to stop
    relay.stop()


# --- the run ----------------------------------------------------------------------------

def _cpu_s(pid: int) -> float:
    """CPU seconds of process PID and its children, live or reaped (socat
    forks one per connection)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        t = proc.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in proc.children(recursive=True):
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.NoSuchProcess:
                pass
        return total
    except psutil.NoSuchProcess:
        return 0.0


def _host_busy() -> tuple[int, int]:
    """Busy and all clock ticks of every CPU so far (/proc/stat)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _params(streams: int, phase: str, plan: Plan, batch: int | None) -> tuple[dict, float]:
    """The generator's REQUEST for one run, and how long it may take. A
    flood sends BATCH frames a send (the plan's flood_batch when None)."""
    if phase in ("flood", "write_size"):
        return ({"frames": plan.flood_frames // streams, "batch": batch or plan.flood_batch,
                 "interval": 0}, 60.0)
    if phase == "cadence":
        return ({"seconds": plan.cadence_s, "interval": 1 / plan.cadence_rate, "batch": 1,
                 "spread": True}, plan.cadence_s)
    interval = max(0.001, streams / plan.paced_rate)
    return ({"seconds": plan.paced_s, "interval": interval,
             "batch": max(1, round(plan.paced_rate * interval / streams))}, plan.paced_s)


def _one(engine: str, streams: int, phase: str, plan: Plan, address: str, workers: dict,
         relay_pid: int | None, batch: int | None = None) -> dict:
    """One run through ENGINE at ADDRESS; RELAY_PID is its process, if it has one."""
    params, seconds = _params(streams, phase, plan, batch)
    pids = {"generator": workers["generator"].proc.pid, "receiver": workers["receiver"].proc.pid}
    if relay_pid is not None:
        pids["relay"] = relay_pid
    cpu0 = {name: _cpu_s(pid) for name, pid in pids.items()}
    own0, busy0 = _own_cpu_s(), _host_busy()
    workers["receiver"].conn.send({"address": address, "streams": streams, "params": params,
                                   "timeout": seconds + 60})
    result = workers["receiver"].conn.recv()
    busy1, own1 = _host_busy(), _own_cpu_s()
    if "error" in result:
        result = {"frames": 0, "seconds": 0, "frames_per_s": 0.0, "latency_us": None,
                  "errors": [f"{engine}: {result['error']}"]}
    else:
        result["errors"] = [f"{engine}: {e}" for e in result["errors"]]
    cpu = {name: round(_cpu_s(pid) - cpu0[name], 3) for name, pid in pids.items()}
    if engine.startswith("sockmap"):
        cpu["relay"] = round(own1 - own0, 3)  # its control plane; the kernel's work is not in it
    cpu["host_busy"] = round((busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]), 3)
    cpu["host"] = round((busy1[0] - busy0[0]) / os.sysconf("SC_CLK_TCK"), 3)
    result["cpu_s"] = cpu
    if phase == "paced":
        result["offered_per_s"] = plan.paced_rate
    if phase == "cadence":
        result["offered_per_s"] = plan.cadence_streams * plan.cadence_rate
        result["host_cpu_per_frame_us"] = (round(cpu["host"] / result["frames"] * 1e6, 2)
                                           if result["frames"] else 0.0)
    return result


def measure(plan: Plan = FULL, progress: Callable[[str], None] = lambda line: None) -> dict:
    """Measure as PLAN says; returns the `relay` section of the bench report
    (see the module doc). Needs root (the sockmap relay) and loopback."""
    import multiprocessing

    from pyxdp.relay.datapath import RelayDataPath
    from pyxdp.relay.sockmap_relay import Relay, serve_in_thread

    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding BPF objects and threads
    workers: dict[str, Worker] = {}
    peers: dict[str, relay_peers.Peer] = {}
    runs: list[dict] = []
    old_limit = raise_fd_limit()  # the sockmap relay holds two sockets a stream
    try:
        workers["generator"] = Worker(ctx, generator_main)
        upstream = workers["generator"].conn.recv()
        workers["receiver"] = Worker(ctx, receiver_main)
        workers["asyncio"] = Worker(ctx, _asyncio_relay_main, upstream)
        addresses = {"asyncio": workers["asyncio"].conn.recv(), "direct": upstream}
        pids = {"asyncio": workers["asyncio"].proc.pid}
        progress("starting the peers: " + ", ".join(plan.peers))
        peers, skipped = relay_peers.start_all(upstream, plan.peers)
        for name, note in skipped.items():
            progress(f"skipped {name}: {note}")
        for name, peer in peers.items():
            addresses[name], pids[name] = peer.address, peer.proc.pid
        engines = [e for e in ENGINES if e in addresses or e.startswith("sockmap")]
        progress("compiling and loading the sockmap relay, framed and unframed")
        # The flood outruns any relay: its backlog must not count as a slow reader.
        # Room for twice the streams: a run's pairs may still be closing when
        # the next run connects (on a busy machine), and must not refuse it.
        max_pairs = 2 * max(*plan.streams, plan.cadence_streams)
        relay = Relay("127.0.0.1:0", upstream, max_pairs=max_pairs,
                      max_backlog=2 * plan.flood_frames * FRAME_LEN)
        unframed_path = RelayDataPath(max_socks=2 * max_pairs, framing=False)
        unframed = Relay("127.0.0.1:0", upstream, max_pairs=max_pairs,
                         max_backlog=2 * plan.flood_frames * FRAME_LEN, datapath=unframed_path)
        try:
            thread = serve_in_thread(relay)
            unframed_thread = serve_in_thread(unframed)
            try:
                addresses["sockmap"] = relay.address
                addresses["sockmap_unframed"] = unframed.address
                for r in range(plan.rounds):
                    for streams in plan.streams:
                        for phase in ("flood", "paced"):
                            for engine in engines:
                                progress(f"round {r + 1}/{plan.rounds}: {streams} stream"
                                         f"{'s' if streams > 1 else ''}, {phase}, {engine}")
                                res = _one(engine, streams, phase, plan, addresses[engine],
                                           workers, pids.get(engine))
                                runs.append({"round": r, "streams": streams, "phase": phase,
                                             "way": engine, **res})
                    for engine in (e for e in CADENCE_ENGINES if e in engines):
                        progress(f"round {r + 1}/{plan.rounds}: {plan.cadence_streams} streams "
                                 f"at {plan.cadence_rate} frames/s each, {engine}")
                        res = _one(engine, plan.cadence_streams, "cadence", plan,
                                   addresses[engine], workers, pids.get(engine))
                        runs.append({"round": r, "streams": plan.cadence_streams,
                                     "phase": "cadence", "way": engine, **res})
                    for batch in plan.write_sizes:
                        for engine in (e for e in engines if e in SWEEP_ENGINES):
                            progress(f"round {r + 1}/{plan.rounds}: 1 stream, {batch} frames "
                                     f"a send, {engine}")
                            res = _one(engine, 1, "write_size", plan, addresses[engine],
                                       workers, pids.get(engine), batch)
                            runs.append({"round": r, "streams": 1, "phase": "write_size",
                                         "way": engine, "batch": batch, **res})
                profile = {}
                for streams in plan.streams:
                    progress(f"profile: {streams} stream{'s' if streams > 1 else ''}, flood, "
                             "sockmap, with BPF run-time statistics")
                    profile[str(streams)] = _profile(relay, streams, plan, workers)
                relay_stats = _settled(relay)
            finally:
                for r_, t in ((relay, thread), (unframed, unframed_thread)):
                    r_.stop()
                    t.join(10)
        finally:
            relay.close()
            unframed.close()
            unframed_path.close()
    finally:
        for peer in peers.values():
            peer.stop()
        for worker in workers.values():
            worker.stop()
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, old_limit)
    results = _summarize(runs, plan, engines)
    return {
        "load": {"frame_bytes": FRAME_LEN, "payload_bytes": 8, "streams": list(plan.streams),
                 "flood_batch": plan.flood_batch, "write_sizes": list(plan.write_sizes),
                 "flood_frames": plan.flood_frames,
                 "paced_rate": plan.paced_rate, "paced_s": plan.paced_s, "rounds": plan.rounds,
                 "cadence_streams": plan.cadence_streams, "cadence_rate": plan.cadence_rate,
                 "cadence_s": plan.cadence_s},
        "results": results,
        "cadence": _summarize_cadence(runs),
        "sockmap_relay": {"pairs": relay_stats["pairs"], "closed": relay_stats["closed"],
                          "malformed": relay_stats["counters"]["malformed"]},
        "errors": sorted({e for run_ in (*runs, *profile.values()) for e in run_["errors"]}),
        "runs": runs,
        "engines": _engine_entries(results, plan),
        "skipped": skipped,
        "sockmap_profile": profile,
        "write_sizes": _summarize_sweep(runs, plan, engines),
    }


def _settled(relay, timeout: float = 15.0) -> dict:
    """RELAY's stats once the last run's pairs have closed: its thread closes
    them a moment after the clients do (drained first), so a snapshot taken
    at once can still count them active. As they are after TIMEOUT."""
    deadline = time.monotonic() + timeout
    stats = relay.stats()
    while stats["pairs"]["active"] and time.monotonic() < deadline:
        time.sleep(0.05)
        stats = relay.stats()
    return stats


def _profile(relay, streams: int, plan: Plan, workers: dict) -> dict:
    """One sockmap flood with BPF run-time statistics on, for it alone: where
    the kernel's time goes, per program."""
    with bpfsys.run_stats_on():
        before = relay.datapath.program_stats()
        res = _one("sockmap", streams, "flood", plan, relay.address, workers, None)
        after = relay.datapath.program_stats()
    frames = res["frames"]
    programs = {}
    for name in after:
        ns, runs = (a - b for a, b in zip(after[name], before[name]))
        programs[name] = {"runs": runs, "ns_per_run": round(ns / runs, 1) if runs else 0.0,
                          "frames_per_run": round(frames / runs, 1) if runs else 0.0,
                          "ns_per_frame": round(ns / frames, 2) if frames else 0.0}
    return {"frames_per_s": res["frames_per_s"], "seconds": res["seconds"],
            "errors": res["errors"], "programs": programs}


def _summarize(runs: list[dict], plan: Plan, engines: list[str]) -> dict:
    """Per stream count: each engine's figures, and the within-round ratios."""
    out = {}
    for streams in plan.streams:
        by = {}
        for engine in engines:
            sel = {ph: [r for r in runs if r["way"] == engine and r["streams"] == streams
                        and r["phase"] == ph and r["latency_us"]] for ph in ("flood", "paced")}
            if not sel["flood"] or not sel["paced"]:
                continue
            by[engine] = {
                "frames_per_s": figure(r["frames_per_s"] for r in sel["flood"]),
                "flood_latency_us": {q: figure(r["latency_us"][q] for r in sel["flood"])
                                     for q in ("p50", "p99")},
                "paced_latency_us": {q: figure(r["latency_us"][q] for r in sel["paced"])
                                     for q in ("p50", "p99")},
                "cpu_s": {ph: sel[ph][-1]["cpu_s"] for ph in sel},
            }
        peers = [e for e in PEERS if e in by]
        best = max(peers, key=lambda e: by[e]["frames_per_s"]["median"]) if peers else None
        ratios, ceiling = {}, {}
        if "sockmap" in by:
            for other, key, phase, name in [
                    ("asyncio", "frames_per_s", "flood", "throughput_vs_asyncio"),
                    ("direct", "frames_per_s", "flood", "throughput_vs_direct"),
                    ("asyncio", "p99", "paced", "paced_p99_vs_asyncio"),
                    ("asyncio", "p99", "flood", "flood_p99_vs_asyncio"),
                    (best, "frames_per_s", "flood", "throughput_vs_best_peer"),
                    ("haproxy", "p99", "paced", "paced_p99_vs_haproxy"),
                    ("sockmap_unframed", "frames_per_s", "flood", "throughput_vs_unframed")]:
                if other in by:
                    ratios[name] = figure(_per_round(runs, streams, phase, key, other))
        if "sockmap_unframed" in by and best:
            ceiling["throughput_vs_best_peer"] = figure(_per_round(
                runs, streams, "flood", "frames_per_s", best, way="sockmap_unframed"))
        out[str(streams)] = {"ways": by, "sockmap_ratio": ratios, "unframed_ratio": ceiling,
                             "best_peer": best}
    return out


def _cadence_ratios(sel: list[dict], engine: str, other: str) -> dict:
    """ENGINE's within-round p99 and CPU-a-frame ratios to OTHER's, over the
    cadence runs SEL."""
    by_round: dict[int, dict] = {}
    for r in sel:
        by_round.setdefault(r["round"], {})[r["way"]] = r
    pairs = [(rnd[engine], rnd[other]) for rnd in by_round.values()
             if {engine, other} <= rnd.keys()]
    ratios = {}
    for name, value in ((f"p99_vs_{other}", lambda r: r["latency_us"]["p99"]),
                        (f"cpu_per_frame_vs_{other}", lambda r: r["host_cpu_per_frame_us"])):
        per_round = [value(e) / value(o) for e, o in pairs if value(o)]
        if per_round:
            ratios[name] = figure(per_round)
    return ratios


def _summarize_cadence(runs: list[dict]) -> dict:
    """The cadence runs: each engine's latency and CPU a frame, sockmap's
    within-round ratios to haproxy, and the bare redirect's (sockmap
    unframed) to haproxy and to sockmap: where the tail comes from."""
    sel = [r for r in runs if r["phase"] == "cadence" and r["latency_us"]]
    ways = {}
    for engine in CADENCE_ENGINES:
        mine = [r for r in sel if r["way"] == engine]
        if mine:
            ways[engine] = {"p50_us": figure(r["latency_us"]["p50"] for r in mine),
                            "p99_us": figure(r["latency_us"]["p99"] for r in mine),
                            "host_cpu_per_frame_us": figure(r["host_cpu_per_frame_us"]
                                                            for r in mine),
                            "frames": mine[-1]["frames"]}
    out = {"ways": ways, "sockmap_ratio": _cadence_ratios(sel, "sockmap", "haproxy")}
    if "sockmap_unframed" in ways:
        out["unframed_ratio"] = (_cadence_ratios(sel, "sockmap_unframed", "haproxy")
                                 | _cadence_ratios(sel, "sockmap_unframed", "sockmap"))
    return out


def _summarize_sweep(runs: list[dict], plan: Plan, engines: list[str]) -> dict:
    """Per write size: each engine's frames/s, and sockmap's (framed and
    unframed) within-round ratio to the best peer at that size."""
    out = {}
    for batch in plan.write_sizes:
        sel = [r for r in runs if r["phase"] == "write_size" and r["batch"] == batch
               and r["latency_us"]]
        ways = {e: figure(r["frames_per_s"] for r in sel if r["way"] == e)
                for e in engines if any(r["way"] == e for r in sel)}
        peers = [e for e in PEERS if e in ways]
        best = max(peers, key=lambda e: ways[e]["median"]) if peers else None
        ratios, ceiling = {}, {}
        for name, other in (("throughput_vs_best_peer", best),
                            ("throughput_vs_unframed", "sockmap_unframed")):
            if "sockmap" in ways and other in ways:
                ratios[name] = figure(_per_round(sel, 1, "write_size", "frames_per_s", other))
        if "sockmap_unframed" in ways and best:
            ceiling["throughput_vs_best_peer"] = figure(_per_round(
                sel, 1, "write_size", "frames_per_s", best, way="sockmap_unframed"))
        out[str(batch)] = {"ways": ways, "sockmap_ratio": ratios, "unframed_ratio": ceiling,
                           "best_peer": best}
    return out


def _per_round(runs, streams, phase, key, other, way="sockmap") -> list[float]:
    """WAY's KEY over OTHER's, within each round."""
    def value(r):
        return r["frames_per_s"] if key == "frames_per_s" else r["latency_us"][key]

    out = []
    for rnd in sorted({r["round"] for r in runs}):
        pick = {r["way"]: r for r in runs if r["round"] == rnd and r["streams"] == streams
                and r["phase"] == phase and r["latency_us"]}
        if way in pick and other in pick and value(pick[other]):
            out.append(value(pick[way]) / value(pick[other]))
    return out or [0.0]


def _engine_entries(results: dict, plan: Plan) -> list[dict]:
    """One flat entry per engine and stream count: its figures."""
    out = []
    for streams in plan.streams:
        for engine, f in results[str(streams)]["ways"].items():
            out.append({"engine": engine, "streams": streams,
                        "frames_per_s": f["frames_per_s"],
                        "paced_p50_us": f["paced_latency_us"]["p50"],
                        "paced_p99_us": f["paced_latency_us"]["p99"],
                        "flood_p99_us": f["flood_latency_us"]["p99"]})
    return out


def targets(section: dict, prefix: str = "") -> list[dict]:
    """The relay's targets against SECTION (what measure() returned), per
    stream count measured; a key is PREFIX plus the ratio's path in SECTION."""
    out = []
    for streams, result in section["results"].items():
        ratios = result["sockmap_ratio"]
        n = f"{streams} stream{'s' if streams != '1' else ''}"
        key = f"{prefix}results.{streams}.sockmap_ratio."
        if "throughput_vs_asyncio" in ratios and "paced_p99_vs_asyncio" in ratios:
            tput = ratios["throughput_vs_asyncio"]["median"]
            p99 = ratios["paced_p99_vs_asyncio"]["median"]
            out.append({"what": f"frames/s through the sockmap relay against the asyncio relay, {n}",
                        "kind": "target", "key": key + "throughput_vs_asyncio",
                        "bound": ">= 3.0", "measured": round(tput, 3), "met": tput >= 3.0})
            out.append({"what": f"p99 frame latency (paced load) against the asyncio relay, {n}",
                        "kind": "target", "key": key + "paced_p99_vs_asyncio",
                        "bound": "< 1.0", "measured": round(p99, 3), "met": 0 < p99 < 1.0})
        if streams not in PEER_TARGET_STREAMS:
            continue
        if "throughput_vs_best_peer" in ratios:
            peer = result["best_peer"]
            tput = ratios["throughput_vs_best_peer"]["median"]
            for kind, bound in (("target", 0.8), ("goal", 1.0)):
                out.append({"what": f"frames/s through the sockmap relay against the best peer "
                                    f"({peer}), {n}",
                            "kind": kind, "key": key + "throughput_vs_best_peer",
                            "bound": f">= {bound}", "measured": round(tput, 3),
                            "met": tput >= bound})
        if "paced_p99_vs_haproxy" in ratios:
            p99 = ratios["paced_p99_vs_haproxy"]["median"]
            out.append({"what": f"p99 frame latency (paced load) against haproxy, {n}",
                        "kind": "target", "key": key + "paced_p99_vs_haproxy",
                        "bound": "<= 1.0", "measured": round(p99, 3), "met": 0 < p99 <= 1.0})
    ratios = section.get("cadence", {}).get("sockmap_ratio", {})  # none: no haproxy
    for name, what in (("p99_vs_haproxy", "p99 frame latency"),
                       ("cpu_per_frame_vs_haproxy", "the machine's CPU a frame")):
        if name in ratios:
            ratio, load = ratios[name], section["load"]
            cadence = f"{load['cadence_streams']:,} streams at {load['cadence_rate']} frames/s each"
            out.append({"what": f"{what} through the sockmap relay against haproxy, {cadence}",
                        "kind": "target", "key": f"{prefix}cadence.sockmap_ratio.{name}",
                        "bound": "<= 1.0", "measured": round(ratio["median"], 3),
                        "met": 0 < ratio["median"] <= 1.0})
    return out


def _measure(plan: Plan, rig: Rig | None, progress: Progress) -> dict:
    progress(f"TCP relay: {plan.rounds} round{'s' if plan.rounds > 1 else ''} of "
             f"{', '.join(map(str, plan.streams))} streams, sockmap against asyncio and "
             "direct, on loopback")
    return measure(plan, progress)


def _render(r: dict) -> str:
    relay = r["relay"]
    load = relay["load"]
    out = [f"TCP relay on loopback, {load['frame_bytes']}-byte frames: frames/s flooding "
           f"{number(load['flood_frames'])} frames, p99 latency in us flooding, p50 and p99 "
           f"at {number(load['paced_rate'])} frames/s (paced)"]
    for streams, result in relay["results"].items():
        rows = [[way, *cells(f["frames_per_s"], "{:,.0f}"),
                 f"{f['flood_latency_us']['p99']['median']:,.0f}",
                 f"{f['paced_latency_us']['p50']['median']:,.0f}",
                 f"{f['paced_latency_us']['p99']['median']:,.0f}"]
                for way, f in result["ways"].items()]
        ratio = result["sockmap_ratio"]
        # sockmap's ratios, a row per engine compared with: frames/s, paced p99
        against: dict[str, dict] = {}
        for key, other, column in [("throughput_vs_asyncio", "asyncio", "tput"),
                                   ("paced_p99_vs_asyncio", "asyncio", "p99"),
                                   ("throughput_vs_best_peer", result.get("best_peer"), "tput"),
                                   ("paced_p99_vs_haproxy", "haproxy", "p99"),
                                   ("throughput_vs_unframed", "sockmap_unframed", "tput")]:
            if key in ratio:
                against.setdefault(other, {})[column] = ratio[key]
        for other, cols in against.items():
            rows.append([f"sockmap/{other}",
                         *(cells(cols["tput"], "{:.2f}x") if "tput" in cols else ["", "", ""]),
                         "", "", f"{cols['p99']['median']:.2f}x" if "p99" in cols else ""])
        ceiling = result.get("unframed_ratio", {}).get("throughput_vs_best_peer")
        if ceiling:
            rows.append([f"sockmap_unframed/{result['best_peer']}",
                         *cells(ceiling, "{:.2f}x"), "", "", ""])
        out += [f"{streams} stream{'s' if streams != '1' else ''}:",
                table(["ENGINE", "FRAMES/S", "MIN", "MAX", "FLOOD P99", "PACED P50",
                       "PACED P99"], rows)]
    cadence = relay.get("cadence", {})  # a report recorded before it had one
    if cadence.get("ways"):
        rows = [[way, f"{f['p50_us']['median']:,.0f}", f"{f['p99_us']['median']:,.0f}",
                 f"{f['host_cpu_per_frame_us']['median']:,.1f}", number(f["frames"])]
                for way, f in cadence["ways"].items()]
        for label, ratio, other in (
                ("sockmap/haproxy", cadence["sockmap_ratio"], "haproxy"),
                ("sockmap_unframed/haproxy", cadence.get("unframed_ratio", {}), "haproxy"),
                ("sockmap_unframed/sockmap", cadence.get("unframed_ratio", {}), "sockmap")):
            if f"p99_vs_{other}" in ratio:
                rows.append([label, "", f"{ratio[f'p99_vs_{other}']['median']:.2f}x",
                             f"{ratio[f'cpu_per_frame_vs_{other}']['median']:.2f}x"
                             if f"cpu_per_frame_vs_{other}" in ratio else "", ""])
        out += [f"the gateway's cadence: {load['cadence_streams']:,} streams at "
                f"{load['cadence_rate']} frames/s each for {load['cadence_s']:g} s, phases "
                "spread (medians; CPU: the whole machine's busy time a frame)",
                table(["ENGINE", "P50 US", "P99 US", "CPU US/FRAME", "FRAMES"], rows)]
    sweep = relay.get("write_sizes", {})
    if sweep:
        ways = list(dict.fromkeys(w for res in sweep.values() for w in res["ways"]))
        rows = [[batch, *(f"{res['ways'][w]['median']:,.0f}" if w in res["ways"] else ""
                          for w in ways),
                 *(f"{r[key]['throughput_vs_best_peer']['median']:.2f}x"
                   if "throughput_vs_best_peer" in r[key] else ""
                   for r in (res,) for key in ("sockmap_ratio", "unframed_ratio"))]
                for batch, res in sweep.items()]
        out += ["write sizes, 1 stream flooding: frames/s by frames a send (medians)",
                table(["FRAMES/SEND", *(w.upper() for w in ways), "SOCKMAP/BEST",
                       "UNFRAMED/BEST"], rows)]
    for name, note in relay.get("skipped", {}).items():
        out.append(f"skipped {name}: {note}")
    profile = relay.get("sockmap_profile", {})
    if profile:
        out.append("sockmap relay's programs, one more flood with BPF run-time statistics on:")
        rows = [[streams, name, number(p["runs"]), f"{p['ns_per_run']:,.0f}",
                 f"{p['frames_per_run']:,.1f}", f"{p['ns_per_frame']:,.1f}"]
                for streams, prof in profile.items() for name, p in prof["programs"].items()]
        out.append(table(["STREAMS", "PROGRAM", "RUNS", "NS/RUN", "FRAMES/RUN", "NS/FRAME"],
                         rows))
    if relay["errors"]:
        out.append("errors: " + "; ".join(relay["errors"]))
    return "\n".join(out)


def _panel(ax, report):
    results = report["relay"]["results"]
    counts = [n for n in results if {"sockmap", "asyncio"} <= results[n]["ways"].keys()]
    ratios, judged = [], []
    for i, n in enumerate(counts):
        ways = results[n]["ways"]
        bar(ax, i - 0.2, ways["sockmap"]["frames_per_s"], ZEROLAYER,
            "sockmap relay" if i == 0 else None, 1e6)
        bar(ax, i + 0.2, ways["asyncio"]["frames_per_s"], FLOOR,
            "asyncio relay" if i == 0 else None, 1e6)
        key = f"relay.results.{n}.sockmap_ratio.throughput_vs_asyncio"
        ratio = figure_of(report, key)
        if ratio is not None:
            ratios.append(f"{n}: {ratio['median']:.2f}x")
            judged.append(f"{n}: {verdicts(report, key)}")
    ax.set_xticks(range(len(counts)), [f"{n} stream{'s' if n != '1' else ''}" for n in counts])
    ax.set_title("TCP relay on loopback, M frames/s", fontsize=10)
    ax.set_xlabel("ratio by streams, " + ", ".join(ratios) + "\n" + "; ".join(judged),
                  fontsize=8)
    if counts:
        ax.legend(fontsize=8)


SECTION = Section(
    name="relay", full=FULL, quick=QUICK, measure=_measure,
    report=lambda plan, relay: {"relay": relay}, render=_render, panel=_panel,
    targets=lambda report: targets(report["relay"], prefix="relay."),
    errors=lambda report: report["relay"]["errors"], default=False,
    options={"relay_streams": "streams", "relay_frames": "flood_frames"})
