# SPDX-License-Identifier: Apache-2.0
"""`zerolayer listen --json` lines (docs/spec.md §5.7), a batch at a time.

Each line is exactly what json.dumps() prints for the record
{"src", "dst", "type", "payload" | "payload_b64", "queue"}, but made with
string formatting: building a dict and encoding it costs several times
more per frame, and a listener that keeps up has about a microsecond per
frame to spend. The payload goes through the json module's own string
encoder (ASCII-only, as json.dumps by default); addresses, labels and
numbers need no escaping.
"""

import base64
from json.encoder import encode_basestring_ascii

from pyxdp.proto.frames import FRAME_TYPES
from pyxdp.xsk.frame_arrays import FrameArrays

# By type value; index 0 is never used (the walk hands out types 1-5 only).
_LABELS = ("", *(t.label for t in FRAME_TYPES))


def payload_field(payload: memoryview) -> str:
    """'"payload": "…"', or '"payload_b64": "…"' when it is not UTF-8."""
    try:
        return f'"payload": {encode_basestring_ascii(str(payload, "utf-8"))}'
    except UnicodeDecodeError:
        return f'"payload_b64": "{base64.b64encode(payload).decode("ascii")}"'


def json_lines(frames: FrameArrays, sources: list[str], destinations: list[str],
               queue: int) -> list[str]:
    """One line (with its newline) per frame of FRAMES; SOURCES and
    DESTINATIONS are by datagram index, as Batch.sources() gives them."""
    heads = [f'{{"src": "{src}", "dst": "{dst}", "type": "'
             for src, dst in zip(sources, destinations)]
    tail = f', "queue": {queue}}}\n'
    return [f'{heads[d]}{_LABELS[ftype]}", {payload_field(view)}{tail}'
            for d, (ftype, view) in zip(frames.datagram.tolist(), frames)]
