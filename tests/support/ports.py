# SPDX-License-Identifier: Apache-2.0
"""Free TCP ports on 127.0.0.1 for servers the tests start."""

import contextlib
import socket


def free_ports(n: int) -> list[int]:
    """N distinct ports free now. Every socket stays bound until all are
    picked: closed one by one, the kernel may hand the same port out twice,
    and two servers on one port make a TLS client talk to the plaintext one."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def free_port() -> int:
    return free_ports(1)[0]
