# SPDX-License-Identifier: Apache-2.0
"""`zerolayer relay`, `serve` and `send` as a user runs them: separate
processes, across the lab's two namespaces (client and token server in the
peer, the relay in the dut), stopped with SIGTERM, reporting what they did."""

import contextlib
import json
import re
import select
import shutil
import signal
import subprocess
import time

import pytest

from pyxdp.kernel import release
from pyxdp.relay.datapath import OFFSETS_KEPT_SINCE
from pyxdp.xdp import compiler
from support.cli_runner import ZEROLAYER

pytestmark = pytest.mark.root

# Before 5.15 the sockmap relay refuses at start (tests/test_relay_sockets.py
# shows the refusal): the commands that need it running cannot run there.
needs_sockmap_relay = pytest.mark.skipif(
    not release.at_least(*OFFSETS_KEPT_SINCE),
    reason="before 5.15 the kernel relays a message from its segment's start: the sockmap "
           "relay refuses (test_relay_sockets.py)")


@contextlib.contextmanager
def running(*args, env=None, may_exit=False):
    """Run `zerolayer ARGS` for the block; yield it and its first line on
    stderr (where the long-running commands say where they listen). It is
    killed on the way out unless the block stopped it (stop()). MAY_EXIT:
    a command that ends at once (a refusal) is yielded too, ended."""
    proc = subprocess.Popen([ZEROLAYER, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([proc.stderr], [], [], 30)
        assert ready, f"zerolayer {args[0]} said nothing within 30 s"
        line = proc.stderr.readline()
        if may_exit:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(2)  # a refusal exits at once; a running command stays
        else:
            assert proc.poll() is None, f"zerolayer {args[0]} failed: {line}{proc.stderr.read()}"
        yield proc, line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def stop(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGTERM, as a service manager stops it; its output."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return out, err


def address_in(line: str) -> str:
    return re.search(r"(\d+\.\d+\.\d+\.\d+:\d+)", line).group(1)


@pytest.mark.parametrize("engine", [pytest.param("sockmap", marks=needs_sockmap_relay),
                                    "asyncio"])
def test_relay_serve_and_send_across_namespaces(lab, cli, engine):
    with running("serve", "--listen", f"{lab.peer.ipv4}:9977", "--netns", lab.peer.netns) \
            as (server, line):
        assert address_in(line) == f"{lab.peer.ipv4}:9977"
        with running("relay", "--listen", f"{lab.dut.ipv4}:9000",
                     "--upstream", f"{lab.peer.ipv4}:9977", "--engine", engine,
                     "--json-stats", "--netns", lab.dut.netns) as (relay, line):
            assert f"{lab.dut.ipv4}:9000 -> {lab.peer.ipv4}:9977" in line
            sent = cli("send", f"{lab.dut.ipv4}:9000", "--prompt", "tokens through the relay",
                       "--max-tokens", "6", "--ping", "--json", "--netns", lab.peer.netns,
                       check=True)
            out, _ = stop(relay)
        served, _ = stop(server)
    records = [json.loads(ln) for ln in sent.stdout.splitlines()]
    assert [r.get("type") for r in records[:-1]] == ["pong"] + ["token"] * 6 + ["done"]
    assert "".join(r["payload"] for r in records if r.get("type") == "token") == \
        "tokens through the relay tokens through"
    assert records[-1]["summary"]["tokens"] == 6
    stats = json.loads(out.splitlines()[-1])
    assert stats["engine"] == engine
    assert stats["pairs"]["accepted"] == 1 and stats["closed"]["eof"] == 1
    assert stats["counters"]["frames"] == {"request": 1, "token": 6, "done": 1,
                                           "ping": 1, "pong": 1}
    assert served.strip() == "1 connections, 1 requests, 1 pings, 0 broken"


@needs_sockmap_relay
def test_relay_prints_stats_at_intervals(cli):
    with running("serve", "--listen", "127.0.0.1:0") as (server, line):
        with running("relay", "--listen", "127.0.0.1:0", "--upstream", address_in(line),
                     "--interval", "0.2") as (relay, line):
            cli("send", address_in(line), "--max-tokens", "3", check=True)
            interval_line = relay.stdout.readline()
            out, _ = stop(relay)
        stop(server)
    assert "pairs active" in interval_line
    assert "CLOSED BECAUSE" in out and "frames.token" in out


def test_send_reports_an_unreachable_server_in_one_line(cli):
    proc = cli("send", "127.0.0.1:1", "--timeout", "2")
    assert proc.returncode == 1
    assert proc.stderr.startswith("zerolayer: cannot connect to 127.0.0.1:1")
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message, code", [
    # a malformed ADDR:PORT is a usage error (exit 2, docs/spec.md §5.1)
    (["--listen", "localhost:9000", "--upstream", "127.0.0.1:9977"], "is not a numeric", 2),
    (["--listen", "127.0.0.1", "--upstream", "127.0.0.1:9977"], "is not ADDR:PORT", 2),
    (["--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9977", "--netns", "zl-no-such-ns"],
     "does not exist", 1),
])
def test_relay_refuses_bad_arguments_in_one_line(cli, args, message, code):
    proc = cli("relay", *args)
    assert proc.returncode == code
    assert message in proc.stderr and "Traceback" not in proc.stderr
    if code == 1:
        assert len(proc.stderr.strip().splitlines()) == 1


def test_relay_without_its_options_is_a_usage_error(cli):
    proc = cli("relay", "--listen", "127.0.0.1:0")
    assert proc.returncode == 2 and "--upstream" in proc.stderr


@needs_sockmap_relay
def test_the_relay_leaves_nothing_behind(cli):
    """A relay process that comes and goes leaves no BPF program or map."""
    if not shutil.which("bpftool"):
        pytest.skip("bpftool is not installed")

    def ours() -> set[tuple[str, int]]:
        found = set()
        for kind in ("prog", "map"):
            out = subprocess.run(["bpftool", "-j", kind, "show"], capture_output=True, text=True)
            found |= {(kind, o["id"]) for o in json.loads(out.stdout or "[]")
                      if o.get("name", "").startswith("zl_sk_")}
        return found

    before = ours()
    with running("relay", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:1") as (relay,
                                                                                     line):
        new = ours() - before
        stop(relay)
    # The sockhash, counters, config, conns, and the parser's header window
    # where the kernel has one (the first line says which).
    windowed = "KiB window" in line
    assert sorted(kind for kind, _ in new) == ["map"] * (4 + windowed) + ["prog"] * 2
    deadline = time.monotonic() + 10  # the kernel frees maps after an RCU grace period
    while ours() & new and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not ours() & new


@needs_sockmap_relay
@pytest.mark.kernel
@pytest.mark.capability("relay")
def test_a_parser_the_kernel_refuses_is_one_line_naming_the_asyncio_engine(cli, tmp_path,
                                                                            record_property):
    """Linux now refuses, at attach, a stream parser that may change packet
    data. Such a parser (the one zerolayer shipped before, which pulled the
    skb linear) must end `relay` with the kernel's reason in one line; a
    kernel without that rule attaches it and relays."""
    src = tmp_path / "bpf"
    shutil.copytree(compiler.SOURCE_DIR, src, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    parser = src / "sk_relay.bpf.c"
    text = parser.read_text()
    marker = "\tcfg = bpf_map_lookup_elem(&zl_sk_config, &zero);\n"
    assert marker in text
    pull = "\t((long (*)(void *, __u32))39)(skb, 0); /* bpf_skb_pull_data */\n"
    parser.write_text(text.replace(marker, pull + marker, 1))
    env = {"ZEROLAYER_BPF_DIR": str(src), "PATH": "/usr/bin:/bin"}
    with running("relay", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:1",
                 env=env, may_exit=True) as (proc, first):
        if proc.poll() is None:
            record_property("seen", "a parser that pulls still attaches")
            assert "relaying" in first
            stop(proc)
            return
        err = first + proc.stderr.read()
    record_property("seen", "a parser that pulls is refused, in one line")
    lines = err.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert re.match(r"zerolayer: this kernel \(.*\) refused to attach the relay's zl_sk_parser "
                    r"to its sockhash \(EINVAL: .*\): use --engine asyncio$", lines[0]), lines[0]
