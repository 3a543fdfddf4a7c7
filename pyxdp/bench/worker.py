# SPDX-License-Identifier: Apache-2.0
"""A bench process of its own, spoken to over a pipe: the relay section's
generator, receiver and asyncio relay, the latency section's consumer."""


class Worker:
    """TARGET(conn, *ARGS) in a process started from CTX (a multiprocessing
    context); self.conn is this side of the pipe."""

    def __init__(self, ctx, target, *args):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(child, *args), daemon=True)
        self.proc.start()
        child.close()

    def stop(self) -> None:
        """Tell the process to end (None), then make sure it has."""
        if self.proc.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        self.conn.close()
