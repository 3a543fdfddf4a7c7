# SPDX-License-Identifier: Apache-2.0
"""Sending on what was received, without copying it: a receiving XskSocket
and a transmitting XskTxSocket on the same queue share one UMEM
(XDP_SHARED_UMEM), so a datagram the kernel wrote into a chunk is sent
from that chunk by descriptor.

    with XskSocket("eth0", 0, completion_size=2048) as rx, \\
            XskTxSocket("eth0", 0, share_umem_of=rx) as tx:
        t = headers.template(...)           # where the datagrams go next
        while True:
            send_on(rx.recv(256, timeout=1.0), tx, t)
            tx.reap()                       # sent chunks back to rx's fill ring

send_on() leaves each UDP payload where it is and writes the template's
headers in front of it, in the chunk: in copy mode the kernel puts a
packet 256 bytes into its chunk (XDP_PACKET_HEADROOM), so headers longer
than the received ones (IPv4 in, IPv6 out) still fit. Lengths and
checksums are computed for the whole batch at once (pyxdp/xsk/headers.py),
the checksum from the payload bytes in place. A chunk sent is the transmit
socket's until its completion comes back; reap() then hands it to the
receiving socket's fill ring, so the kernel can fill it again.
"""

import numpy as np

from pyxdp.xsk import headers
from pyxdp.xsk.batch import Batch
from pyxdp.xsk.headers import Template
from pyxdp.xsk.tx import XskTxSocket


def send_on(batch: Batch, tx: XskTxSocket, t: Template) -> np.ndarray:
    """Send every datagram of BATCH to T's destination, its payload in
    place; releases the batch. Returns the frame addresses submitted (each
    inside the chunk its datagram arrived in); a datagram the TX ring had
    no room for, or whose chunk has no room in front of its payload for
    T's headers, goes back to the fill ring unsent."""
    if not len(batch):
        return np.empty(0, np.uint64)
    h = batch.headers
    payload = batch.addr.astype(np.int64) + h.payload_offset
    frame = payload - t.length
    fits = frame >= (batch.addr & tx.memory.chunk_mask).astype(np.int64)
    room = tx.room(int(fits.sum()))
    take = fits & (np.cumsum(fits) <= room)
    addr = frame[take].astype(np.uint64)
    length = h.payload_length[take]
    sums = headers.payload_sums(headers.read_rows(tx.umem, payload[take], length), length)
    frame_len = headers.write(tx.umem, addr, length, sums, t)
    tx.submit(addr, frame_len.astype(np.uint32))
    batch.release_except(take)
    tx.push()
    return addr
