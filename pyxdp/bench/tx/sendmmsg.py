# SPDX-License-Identifier: Apache-2.0
"""UDP datagrams through sendmmsg(2), called with ctypes: the batched send
a Python program can reach without a C extension, and the fairest socket
peer of AF_XDP's batches in the bench's `tx` section.

The message headers are built once, over the payloads given (one iovec
each, on a connected socket, so no address per message): each call sends
the next run of them, so datagram i is payload i modulo their number.
"""

import ctypes
import errno
import os
import socket

from pyxdp.errors import ZerolayerError

_libc = ctypes.CDLL(None, use_errno=True)


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(_Iovec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("len", ctypes.c_uint32)]


_libc.sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
_libc.sendmmsg.restype = ctypes.c_int


class MmsgSender:
    """PAYLOADS (the batch, and the cycle) sent on SOCK, a connected UDP socket."""

    def __init__(self, sock: socket.socket, payloads: list[bytes]):
        self.sock = sock
        n = len(payloads)
        self._buffers = [ctypes.create_string_buffer(p, len(p)) for p in payloads]
        self._iov = (_Iovec * n)(*[_Iovec(ctypes.addressof(b), len(p))
                                   for b, p in zip(self._buffers, payloads)])
        self._msgs = (_Mmsghdr * n)()
        for i in range(n):
            self._msgs[i].hdr.iov = ctypes.pointer(self._iov[i])
            self._msgs[i].hdr.iovlen = 1
        self._base = ctypes.addressof(self._msgs)
        self._size = ctypes.sizeof(_Mmsghdr)
        self.batch = n
        self.calls = 0

    def send(self, count: int) -> int:
        """Send COUNT datagrams, the payloads in order, cycled; returns COUNT."""
        fd, base, size, batch = self.sock.fileno(), self._base, self._size, self.batch
        sent = pos = 0
        while sent < count:
            n = _libc.sendmmsg(fd, base + pos * size, min(batch - pos, count - sent), 0)
            self.calls += 1
            if n < 0:
                err = ctypes.get_errno()
                raise ZerolayerError(f"sendmmsg failed: {errno.errorcode.get(err, err)} "
                                     f"({os.strerror(err)})")
            sent += n
            pos = (pos + n) % batch
        return sent

