# SPDX-License-Identifier: Apache-2.0
"""What one run of the observer could not see or report, a line each, for
the end of `zerolayer streams` (docs/spec.md §11.3): a record never claims
more than was seen, so what was not is said here, counted by reason."""


def lines(counters: dict, ends_missed: int, behind: int, failures: dict[str, int],
          refused: dict[str, int] | None = None, skipped: int = 0) -> list[str]:
    """The closing lines, from the tracker's COUNTERS and the session's
    own counts."""
    c = counters
    out = [f"streams ended: {c['streams_done']} done, {c['streams_cancelled']} cancelled, "
           f"{c['streams_error']} error, {c['streams_incomplete']} incomplete; "
           f"{c['streams_open']} still open"]
    if c["evicted"]:
        out.append(f"{c['evicted']} streams were evicted to stay within --max-streams "
                   f"({c['evicted_client']} client, {c['evicted_server']} server): not "
                   "reported, their connections ignored until closed")
    if c.get("unconfirmed"):
        out.append(f"{c['unconfirmed']} connections joined mid-way looked like an event stream "
                   "but gave no well-formed event (a binary protocol): not reported")
    if c.get("http2_unreadable"):
        why = ", ".join(f"{reason} {c[key]}" for reason, key in (
            ("joined mid-way", "http2_midway"), ("bytes lost", "http2_lost"),
            ("HPACK", "http2_hpack"), ("framing", "http2_framing"),
            ("a header block too long", "http2_oversized")) if c.get(key))
        out.append(f"{c['http2_unreadable']} HTTP/2 connections could not be read ({why}): "
                   "HPACK's context was lost, so their streams end incomplete or, joined "
                   "mid-way, are not reported")
    if c["lost_bytes"]:
        out.append(f"{c['lost_bytes']} bytes never reached the observer (a call longer than it "
                   "copies, or the ring full): the streams they belonged to are incomplete")
    refused = refused or {}
    if refused.get("data"):
        out.append(f"{refused['data']} pieces of data found the ring full: their bytes are "
                   "counted lost above")
    if refused.get("described"):
        out.append(f"{refused['described']} new connections found the ring full: each was "
                   "described at a later call of its own, once the ring had room")
    if skipped:
        out.append(f"{skipped} system calls and function calls ran none of the observer's "
                   "programs (the kernel skips a program while the CPU is inside another BPF "
                   "program or a BPF system call): what they carried was not seen")
    if ends_missed:
        out.append(f"{ends_missed} closes, exits and forks found the ring full: they were kept "
                   "aside and counted in their place")
    if behind:
        out.append(f"{behind} events came behind bytes already seen and were dropped: a bug, "
                   "please report it")
    for name, n in failures.items():
        out.append(f"{n} events not parsed ({name}): a bug, please report it")
    return out
