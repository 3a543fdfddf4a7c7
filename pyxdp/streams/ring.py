# SPDX-License-Identifier: Apache-2.0
"""A BPF ring buffer read in place: the map's pages mapped into this
process, its records walked with no call per record.

A reader that calls back into Python once per record (bcc's did), which
at tens of thousands of records a second was most of the observer's CPU.
Here one read() walks every record the ring holds and hands them over as
one list of (offset, length) pairs into one memoryview, then tells the
kernel the space is free.

The layout is the kernel's (kernel/bpf/ringbuf.c, stable since 5.8): a
consumer page at offset 0, writable; then the producer page and the data
pages, mapped twice in a row so a record that wraps reads as one. Each
record starts with 8 bytes: its length (bit 31: still being written,
bit 30: discarded) and a page offset; records are 8-byte aligned.
"""

import mmap
import struct

_BUSY = 1 << 31
_DISCARD = 1 << 30
_HEADER = 8
_U64 = struct.Struct("=Q")
_U32 = struct.Struct("=I")


class Ring:
    """The ring buffer map at MAP_FD, of DATA_BYTES (a power of two pages)."""

    def __init__(self, map_fd: int, data_bytes: int):
        page = mmap.PAGESIZE
        self._mask = data_bytes - 1
        self._consumer = mmap.mmap(map_fd, page, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        try:
            self._producer = mmap.mmap(map_fd, page + 2 * data_bytes, mmap.MAP_SHARED,
                                       mmap.PROT_READ, offset=page)
        except BaseException:
            self._consumer.close()
            raise
        self._data_at = page
        self._pending = _U64.unpack_from(self._consumer, 0)[0]
        self.size = data_bytes
        self.backlog = 0  # bytes the last read found waiting
        self.view = memoryview(self._producer)

    def read(self) -> list[tuple[int, int]]:
        """The records written since the last release, as (offset into view,
        length); valid until release()."""
        cons = self._pending
        # x86 and arm64 alike: the producer's position is written after the
        # record's header (release), and read here before it (a load).
        prod = _U64.unpack_from(self._producer, 0)[0]
        out = []
        mask, data_at, view = self._mask, self._data_at, self._producer
        self.backlog = prod - cons
        while cons < prod:
            at = data_at + (cons & mask)
            word = _U32.unpack_from(view, at)[0]
            if word & _BUSY:
                break
            length = word & ~(_BUSY | _DISCARD)
            if not word & _DISCARD:
                out.append((at + _HEADER, length))
            cons += (length + _HEADER + 7) & ~7
        self._pending = cons
        return out

    def release(self) -> None:
        """Give the records of the last read back to the kernel."""
        _U64.pack_into(self._consumer, 0, self._pending)

    def close(self) -> None:
        self.view.release()
        self._producer.close()
        self._consumer.close()
