# SPDX-License-Identifier: Apache-2.0
"""AF_XDP: receiving on the rx queues zerolayer's program redirects to (rings, UMEM, batches of frames, `zerolayer listen`) and sending (transmit sockets, TokenSender, `zerolayer emit`)."""
