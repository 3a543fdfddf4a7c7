"""AF_XDP sockets on the rx queues zerolayer's program redirects to: rings, UMEM, batches of frames, and `zerolayer listen`."""
