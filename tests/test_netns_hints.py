# SPDX-License-Identifier: Apache-2.0
"""Commands run without --netns point to the namespaces zerolayer is attached
in: `status` names them, and `attach`, `status` or `stats IFACE` for an
interface that is only in such a namespace says which --netns to add."""

import json

import pytest

from support.xdp_helpers import one_line_error

pytestmark = pytest.mark.root


def test_status_and_attach_without_netns_name_the_namespace(attached, cli):
    lab = attached
    ns, iface = lab.dut.netns, lab.dut.ifname

    text = cli("status", check=True).stdout
    assert (f"note: zerolayer has pins in netns {ns} too ({iface}): "
            f"`zerolayer status --netns {ns}`") in text.splitlines()
    out = json.loads(cli("status", "--json", check=True).stdout)
    assert {"netns": ns, "interfaces": [iface], "stale": False} in out["other_netns"]
    # With --netns the namespace is the one shown: no hint, no key.
    inside = json.loads(cli("status", "--netns", ns, "--json", check=True).stdout)
    assert "other_netns" not in inside
    assert "netns" not in cli("status", "--netns", ns, check=True).stdout

    # dut0 is not on the host, only in the lab's namespace.
    for command in ("attach", "status", "stats"):
        error = one_line_error(cli(command, iface))
        assert error.startswith(f"zerolayer: no interface named {iface!r}")
        # (other labs on this machine may have a dut0 too: each is offered)
        assert "(where zerolayer has pins) has one: add --netns " in error
        assert f"--netns {ns}" in error.split(": add ")[1]
    # A name in no namespace gets no such hint.
    assert "--netns" not in one_line_error(cli("attach", "zl-nosuch0"))
