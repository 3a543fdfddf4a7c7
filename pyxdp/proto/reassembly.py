# SPDX-License-Identifier: Apache-2.0
"""Reassemble one flow's token frames (REQUEST ... TOKEN text ... DONE), as
`zerolayer listen` receives them over AF_XDP."""

import json
from dataclasses import dataclass

from pyxdp.proto.frames import Frame, FrameType


@dataclass
class Reassembled:
    flow: str
    request: str = ""
    text: str = ""
    tokens: int = 0
    done: bool = False

    def add(self, frame: Frame) -> None:
        body = frame.payload.decode("utf-8", errors="replace")
        if frame.type is FrameType.REQUEST:
            self.request = body
        elif frame.type is FrameType.TOKEN:
            self.text += body
            self.tokens += 1
        elif frame.type is FrameType.DONE:
            self.done = True

    @property
    def prompt(self) -> str:
        try:
            return json.loads(self.request).get("prompt", self.request)
        except (ValueError, AttributeError):
            return self.request
