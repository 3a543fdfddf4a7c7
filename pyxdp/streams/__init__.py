# SPDX-License-Identifier: Apache-2.0
"""Token streams over HTTP, seen from the kernel (docs/spec.md §11).

probes loads bpf/streams.bpf.c (syscall tracepoints, uprobes on OpenSSL) and
libraries finds the OpenSSL copies processes have mapped; session reads the
program's events and feeds the tracker, which parses HTTP/1.1 (http1),
Server-Sent Events (sse_events) and their APIs (api_events) into one
record per stream. No byte of
content leaves the tracker: only counts, times, addresses and names.
"""
