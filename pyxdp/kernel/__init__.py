# SPDX-License-Identifier: Apache-2.0
"""What the kernel offers, in Python: the bpf(2) syscall, bpffs, network namespaces, capabilities, ethtool channels, signals."""
