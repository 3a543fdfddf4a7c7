# SPDX-License-Identifier: Apache-2.0
"""The kernel capability report: which capability each test proves, and how
it went on the kernel the suite ran on.

A test marked `@pytest.mark.capability("NAME")` proves capability NAME
(names in CAPABILITIES). It may say what it saw, as the user would read it,
with `record_property("seen", "...")` (for example the XDP mode the kernel
reports). With ZEROLAYER_CAPABILITIES=PATH set, the session writes every
capability's outcome on this kernel to PATH as JSON; vagrant/vm/kernel_table.py
turns such files into the kernel table of docs/kernels.md. A cell is measured, never
written by hand: a capability passes only if every test that proves it ran
and passed.
"""

import json
import os
import platform

import pytest

# The README table's columns, in order: name -> heading.
CAPABILITIES = {
    "xdp_native": "XDP native",
    "xdp_skb": "XDP skb",
    "xdp_parser": "XDP parser",
    "af_xdp_copy": "AF_XDP copy",
    "af_xdp_zero_copy": "AF_XDP zero-copy",
    "af_xdp_tx": "AF_XDP transmit",
    "xdp_forwarding": "XDP forwarding",
    "relay": "TCP relay (sockmap)",
    "flows": "flow tracking",
    "streams": "token streams (SSE)",
    "dispatcher": "libxdp dispatcher",
    "xdp_multi_buffer": "XDP jumbo (multi-buffer)",
    "af_xdp_multi_buffer": "AF_XDP jumbo (XDP_USE_SG)",
}

_outcomes: dict[str, dict[str, list]] = {}


def pytest_configure(config):
    config.addinivalue_line("markers", "capability(name): the test proves a capability "
                                       "of the kernel table (tests/support/capabilities.py)")


def pytest_collection_modifyitems(items):
    for item in items:
        mark = item.get_closest_marker("capability")
        if mark and mark.args[0] not in CAPABILITIES:
            raise pytest.UsageError(f"{item.nodeid}: unknown capability {mark.args[0]!r}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    mark = item.get_closest_marker("capability")
    if mark is None:
        return
    # One verdict per test: a failure in any phase, a skip, or the call's pass.
    if not (report.failed or report.skipped or report.when == "call"):
        return
    entry = _outcomes.setdefault(mark.args[0], {"passed": [], "failed": [], "skipped": [],
                                                "seen": []})
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        entry["skipped"].append(reason.removeprefix("Skipped: "))
    else:
        entry["failed" if report.failed else "passed"].append(item.nodeid)
    entry["seen"].extend(v for k, v in item.user_properties if k == "seen" and v not in entry["seen"])


def pytest_sessionfinish(session):
    path = os.environ.get("ZEROLAYER_CAPABILITIES")
    if not path:
        return
    with open(path, "w") as out:
        # conformance.sh says which selection ran, on which userspace.
        json.dump({"kernel": platform.release(), "columns": CAPABILITIES,
                   "system": os.environ.get("ZEROLAYER_SYSTEM", ""),
                   "selection": os.environ.get("ZEROLAYER_SELECTION", ""),
                   "capabilities": _outcomes}, out, indent=1)
