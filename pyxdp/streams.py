"""Reassemble token streams from frames, per flow: REQUEST ... TOKEN text ... DONE."""

import json
from dataclasses import dataclass, field

from .frames import Frame, FrameType


@dataclass
class Stream:
    flow: str
    request: str = ""
    text: str = ""
    tokens: int = 0
    done: bool = False
    usage: dict = field(default_factory=dict)

    def add(self, frame: Frame) -> None:
        body = frame.payload.decode("utf-8", errors="replace")
        if frame.type is FrameType.REQUEST:
            self.request = body
        elif frame.type is FrameType.TOKEN:
            self.text += body
            self.tokens += 1
        elif frame.type is FrameType.DONE:
            self.done = True
            try:
                self.usage = json.loads(body) if body else {}
            except ValueError:
                self.usage = {"raw": body}

    @property
    def prompt(self) -> str:
        try:
            return json.loads(self.request).get("prompt", self.request)
        except (ValueError, AttributeError):
            return self.request


class Streams:
    """Streams by flow, in order of first appearance."""

    def __init__(self):
        self._by_flow: dict[str, Stream] = {}

    def add(self, flow: str, frame: Frame) -> Stream:
        stream = self._by_flow.setdefault(flow, Stream(flow))
        stream.add(frame)
        return stream

    def __iter__(self):
        return iter(self._by_flow.values())

    def __len__(self):
        return len(self._by_flow)
