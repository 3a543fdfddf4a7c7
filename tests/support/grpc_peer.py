# SPDX-License-Identifier: Apache-2.0
"""A gRPC server-streaming peer for the streams tests, with grpcio and no
protoc step: the service is a generic handler whose messages are bytes.

    grpc_peer.py server PORT GAP_MS      serves /zl.Tokens/Stream on 127.0.0.1:PORT
    grpc_peer.py client PORT N [FAIL]    asks for N messages (the server fails after
                                         FAIL of them, if given) and prints, as JSON,
                                         its pid, the messages it received, when each
                                         came (CLOCK_MONOTONIC, ns) and the status

A request is "N FAIL PROMPT": the server answers N messages GAP_MS apart
(each a few bytes of filler, never the prompt), then ends with status OK,
or with ABORTED after FAIL messages."""

import json
import os
import sys
import time
from concurrent import futures

import grpc

METHOD = "/zl.Tokens/Stream"


def serve(port: int, gap_ms: float) -> None:
    def stream(request: bytes, context):
        n, fail = (int(x) for x in request.split()[:2])
        for i in range(n):
            if fail >= 0 and i == fail:
                context.abort(grpc.StatusCode.ABORTED, "failed on purpose")
            time.sleep(gap_ms / 1000)
            yield b"token-%04d" % i

    handler = grpc.method_handlers_generic_handler(
        "zl.Tokens", {"Stream": grpc.unary_stream_rpc_method_handler(stream)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def call(port: int, n: int, fail: int, prompt: str) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = channel.unary_stream(METHOD)
        got, status, times = 0, "OK", []
        try:
            for _ in stub(f"{n} {fail} {prompt}".encode(), timeout=30):
                times.append(time.clock_gettime_ns(time.CLOCK_MONOTONIC))
                got += 1
        except grpc.RpcError as e:
            status = e.code().name
    print(json.dumps({"pid": os.getpid(), "messages": got, "status": status, "times": times}))


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(int(sys.argv[2]), float(sys.argv[3]))
    else:
        call(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else -1,
             sys.argv[5] if len(sys.argv) > 5 else "zl-private-prompt")
