# SPDX-License-Identifier: Apache-2.0
"""An OTLP/HTTP metrics receiver for the tests, on loopback: each request's
body decoded with OpenTelemetry's own protobuf classes (opentelemetry-
proto), kept raw too (to look for content that must not be there). It
answers as MODE says: "ok" (200, an empty ExportMetricsServiceResponse),
"500", "huge" (200 and 10 MB of garbage), "hang" (no answer until the mode
changes or the receiver stops)."""

import contextlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

HUGE = 10 * 1024 * 1024


class Receiver:
    def __init__(self, port: int, mode: str = "ok") -> None:
        self.mode = mode
        self.raw: list[bytes] = []
        self.requests: list[ExportMetricsServiceRequest] = []
        self.answered: dict[str, int] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                mode = receiver.mode
                with receiver._lock:
                    receiver.raw.append(body)
                    receiver.answered[mode] = receiver.answered.get(mode, 0) + 1
                    if mode == "ok":
                        receiver.requests.append(ExportMetricsServiceRequest.FromString(body))
                with contextlib.suppress(OSError):  # the exporter may hang up first
                    if mode == "hang":
                        while receiver.mode == "hang" and not receiver._closing.wait(0.1):
                            pass
                        return
                    if mode == "500":
                        self._answer(500, b"no")
                    elif mode == "huge":
                        self._answer(200, b"\xff" * HUGE)
                    else:
                        self._answer(200, ExportMetricsServiceResponse().SerializeToString())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{port}/v1/metrics"

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    def latest(self) -> ExportMetricsServiceRequest | None:
        with self._lock:
            return self.requests[-1] if self.requests else None

    def wait(self, pick, timeout: float = 30.0):
        """The latest accepted request once PICK(request) is true."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            latest = self.latest()
            if latest is not None and pick(latest):
                return latest
            time.sleep(0.2)
        raise AssertionError(f"no export as wanted within {timeout} s; "
                             f"answered so far: {self.answered}")


def attrs(kvs) -> dict:
    """OTLP KeyValues as a dict of plain values."""
    out = {}
    for kv in kvs:
        v = kv.value
        out[kv.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


def points(request, name: str) -> list[tuple[dict, dict, object]]:
    """(resource attributes, point attributes, point) of metric NAME."""
    out = []
    for rm in request.resource_metrics:
        res = attrs(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name != name:
                    continue
                data = m.histogram.data_points if m.HasField("histogram") else m.sum.data_points
                out.extend((res, attrs(p.attributes), p) for p in data)
    return out


def summary(request) -> dict:
    """What the service suite checks of the latest export: per metric, per
    service.name, the points' count (histograms) or value (sums), and each
    resource's executable."""
    out: dict = {"metrics": {}, "executables": {}}
    for rm in request.resource_metrics:
        res = attrs(rm.resource.attributes)
        service = res.get("service.name", "")
        out["executables"][service] = res.get("process.executable.name")
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.HasField("histogram"):
                    for p in m.histogram.data_points:
                        side = attrs(p.attributes).get("zerolayer.stream.side", "")
                        key = f"{m.name}|{service}|{side}"
                        out["metrics"][key] = out["metrics"].get(key, 0) + p.count
    return out


if __name__ == "__main__":
    # otlp_receiver.py PORT SUMMARY.json: serve until killed, the latest
    # export's summary() rewritten at each one (the service suite's receiver).
    import json
    import os
    import sys

    port, path = int(sys.argv[1]), sys.argv[2]
    receiver = Receiver(port)
    seen = 0
    while True:
        time.sleep(0.2)
        with receiver._lock:
            latest = receiver.requests[-1] if receiver.requests else None
            count = len(receiver.requests)
        if latest is not None and count != seen:
            seen = count
            with open(path + ".tmp", "w") as f:
                json.dump(summary(latest), f)
            os.replace(path + ".tmp", path)
