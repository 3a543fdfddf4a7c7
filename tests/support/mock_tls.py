# SPDX-License-Identifier: Apache-2.0
"""llm-mock-api's server, served with TLS by uvicorn itself (asyncio's
TLS: memory BIOs, so OpenSSL makes no system call of its own): the
mock's application, in uvicorn with a certificate.

  mock_tls.py PORT CERT KEY REPLY CHUNK_CHARS LATENCY_MS
"""

import sys

import uvicorn
from llm_mock_api.mock_server import MockServer, MockServerOptions


def main() -> None:
    port, cert, key, reply, chunk, latency = sys.argv[1:7]
    mock = MockServer(MockServerOptions(host="127.0.0.1", port=int(port), log_level="error",
                                        default_latency=int(latency),
                                        default_chunk_size=int(chunk)))
    mock.fallback(reply)
    # the package serves its application only without TLS
    uvicorn.run(mock._app, host="127.0.0.1", port=int(port), ssl_certfile=cert,
                ssl_keyfile=key, log_level="error")


if __name__ == "__main__":
    main()
