# SPDX-License-Identifier: Apache-2.0
"""Root's directories trust nothing another user could change (issue 31,
docs/spec.md §6.1): an ordinary user, made by the test, plants symlinks and
directories where zerolayer's pin tree and run directory go, in a private
bpffs and /run/zerolayer (a mount namespace per test); root's attach,
detach, status, detach --stale and apply --prune each refuse in one line,
change nothing, and a directory of root's that a symlink pointed at keeps
every file. Then: readers under a read-only /run/zerolayer after a
listener was killed with -9, and pins of a namespace that was deleted."""

import json
import os
import signal
import subprocess
import time

import pytest

from pyxdp.kernel import bpfsys
from pyxdp.lab import veth_lab
from pyxdp.xdp import iface_lock, netlink, pins
from pyxdp.xsk import published
from support.cli_runner import ZEROLAYER
from support.hostile import as_user, each_recorded, ordinary_user, private_root_dirs, recorded
from support.xdp_helpers import load_foreign, one_line_error

pytestmark = pytest.mark.root

WAIT_S = 60.0  # bounded waits on conditions; none is expected to take long
CANARY_FILES = ("a", "b", "c")


@pytest.fixture
def canary(tmp_path):
    """A directory of root's with files, for a symlink to point at."""
    path = tmp_path / "canary"
    path.mkdir()
    for name in CANARY_FILES:
        (path / name).write_text(name)
    return path


@pytest.fixture(scope="module")
def user():
    with ordinary_user() as made:
        yield made


def _config(tmp_path, lab) -> str:
    path = tmp_path / "zerolayer.toml"
    path.write_text(f'[[interface]]\nname = "{lab.dut.ifname}"\nnetns = "{lab.dut.netns}"\n')
    path.chmod(0o600)
    return str(path)


def _commands(lab, config: str) -> dict[str, str]:
    where = f"{lab.dut.ifname} --netns {lab.dut.netns}"
    return {
        "attach": f"{ZEROLAYER} attach {where}",
        "detach": f"{ZEROLAYER} detach {where}",
        "status": f"{ZEROLAYER} status --netns {lab.dut.netns}",
        "detach_stale": f"{ZEROLAYER} detach --stale",
        "apply_prune": f"{ZEROLAYER} apply {config} --prune",
    }


BPF = "/sys/fs/bpf/zerolayer"
RUN = "/run/zerolayer"

# name: (/run/zerolayer's mode, root's part, the user's part, what the refusal
# says, the commands that meet it; the others must succeed)
HOSTILE = {
    "pin_root_owned_by_user": (
        "0755", "", "mkdir -p {bpf}/ns:{ns} && ln -s {canary} {bpf}/ns:{ns}/{ifname}",
        "{bpf} is owned by uid {uid}, not root", "all"),
    "pin_root_is_a_symlink": (
        "0755", "", "ln -s {canary} {bpf}",
        "{bpf} is a symbolic link, not a directory", "all"),
    "pin_root_world_writable": (
        "0755", "mkdir -m 1777 {bpf}",
        "mkdir {bpf}/ns:{ns} && ln -s {canary} {bpf}/ns:{ns}/{ifname}",
        "{bpf} is writable by group or others (mode 1777)", "all"),
    "lock_dir_owned_by_user": (
        "0755", "mkdir {run}/lock && chown {uid} {run}/lock",
        "ln -s {canary} {run}/lock/ns:{ns}",
        "{run}/lock is owned by uid {uid}, not root", "locks"),
    "run_dir_world_writable": (
        "1777", "", "mkdir {run}/lock && ln -s {canary} {run}/lock/ns:{ns}",
        "{run} is writable by group or others (mode 1777)", "locks"),
}
# The commands that take a lock in /run/zerolayer (status reads only bpffs).
MEETS = {"all": ("attach", "detach", "status", "detach_stale", "apply_prune"),
         "locks": ("attach", "detach", "detach_stale", "apply_prune")}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_planted_by_a_user_is_refused_and_root_loses_nothing(case, lab, user, canary, tmp_path):
    run_mode, root_part, user_part, says, meets = HOSTILE[case]
    names = {"bpf": BPF, "run": RUN, "ns": lab.dut.netns, "ifname": lab.dut.ifname,
             "canary": canary, "uid": user.pw_uid}
    out = tmp_path / "out"
    out.mkdir()
    steps = [s for s in (root_part.format(**names), as_user(user, user_part.format(**names)))
             if s]
    commands = _commands(lab, _config(tmp_path, lab))
    proc = private_root_dirs(" && ".join(steps) + " && " + each_recorded(commands, out),
                             run_mode=run_mode)
    assert proc.returncode == 0, proc.stderr

    refusal = says.format(**names)
    for label in commands:
        rc, stdout, stderr = recorded(out, label)
        assert "Traceback" not in stdout + stderr, (label, stderr)
        if label not in MEETS[meets]:
            assert rc == 0, (label, stderr)
            continue
        assert rc == 1, (label, rc, stdout, stderr)
        if label == "apply_prune" and stdout:  # the report, its action failed
            assert refusal in stdout, stdout
            continue
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("zerolayer: "), (label, stderr)
        assert refusal in lines[0], (label, lines[0])
    assert sorted(os.listdir(canary)) == list(CANARY_FILES)
    assert all((canary / n).read_text() == n for n in CANARY_FILES)
    assert netlink.query(lab.dut.ifname, lab.dut.netns).prog_id is None  # nothing attached


def test_a_clean_private_tree_works(lab, tmp_path):
    """The control: a fresh bpffs (1777, as the kernel makes it) and a
    /run/zerolayer of mode 0755 (systemd's) pass; every command works."""
    out = tmp_path / "out"
    out.mkdir()
    given = _commands(lab, _config(tmp_path, lab))
    # attach, look at the tree, detach; apply attaches again, and a detach ends it
    commands = {"attach": given["attach"], "mode": f"stat -c %a {BPF}",
                **{k: v for k, v in given.items() if k != "attach"},
                "detach_again": given["detach"]}
    proc = private_root_dirs(each_recorded(commands, out))
    assert proc.returncode == 0, proc.stderr
    for label in commands:
        rc, _, stderr = recorded(out, label)
        assert rc == 0, (label, stderr)
    assert recorded(out, "mode")[1].strip() == "700"
    assert netlink.query(lab.dut.ifname, lab.dut.netns).prog_id is None


def _readers_under_read_only_run(lab, tmp_path):
    """Run the exporter, top and status for LAB's namespace with
    /run/zerolayer bind-mounted read-only, as the exporter's unit has it;
    each must answer. Their outputs, for each_recorded's recorded()."""
    out = tmp_path / "out"
    out.mkdir()
    commands = {
        "exporter": f"{ZEROLAYER} exporter --once --netns {lab.dut.netns}",
        "top": f"{ZEROLAYER} top --json --count 1 --netns {lab.dut.netns}",
        "status": f"{ZEROLAYER} status --netns {lab.dut.netns}",
        "touch": f"touch {RUN}/probe",  # proves the bind is read-only
    }
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount --bind {RUN} {RUN} && mount -o remount,bind,ro {RUN} && "
         + each_recorded(commands, out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for label in ("exporter", "top", "status"):
        rc, _, stderr = recorded(out, label)
        assert rc == 0 and "Traceback" not in stderr, (label, stderr)
    assert recorded(out, "touch")[0] != 0
    return out


def test_readers_answer_from_a_read_only_run_dir_after_kill_9(attached, tmp_path):
    """A listener killed with -9 leaves its statistics file behind; the
    exporter, top and status then answer from a read-only /run/zerolayer
    (the exporter unit's), skip the stale file and leave it in place."""
    lab = attached
    where = ["--netns", lab.dut.netns]
    stale = published.path(lab.dut.ifname, lab.dut.netns, 0)
    listener = subprocess.Popen([ZEROLAYER, "listen", lab.dut.ifname, "--queue", "0", *where],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(stale):
            assert listener.poll() is None, listener.stderr.read() if listener.stderr else ""
            assert time.monotonic() < deadline, "the listener published nothing"
            time.sleep(0.1)
        listener.send_signal(signal.SIGKILL)
        listener.wait(timeout=WAIT_S)
        out = _readers_under_read_only_run(lab, tmp_path)
        exported = recorded(out, "exporter")[1]
        assert 'source="listener"' not in exported  # the dead listener's socket is skipped
        assert lab.dut.ifname in exported  # while the interface itself is exported
        assert os.path.exists(stale)  # readers wrote nothing
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()  # the lab's teardown removes the stale file


def test_attach_killed_mid_work_leaves_what_the_next_one_clears(lab, cli, tmp_path):
    """kill -9 of an attach between making its pin dir and attaching: the
    readers answer (from a read-only /run/zerolayer), status shows the stale
    pins, and the next attach clears them and attaches."""
    where = [lab.dut.ifname, "--netns", lab.dut.netns]
    attach = subprocess.Popen([ZEROLAYER, "attach", *where], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        while not pins.has_pin_dir(lab.dut.ifname, lab.dut.netns):
            assert attach.poll() is None, "attach ended before it was killed"
            time.sleep(0.01)  # the compile that follows takes far longer
        attach.send_signal(signal.SIGKILL)
        attach.wait(timeout=WAIT_S)
        assert netlink.query(lab.dut.ifname, lab.dut.netns).prog_id is None
        out = _readers_under_read_only_run(lab, tmp_path)
        assert "stale pins" in recorded(out, "status")[1]
        assert json.loads(cli("attach", *where, "--json", check=True).stdout)["action"] == \
            "attached"
    finally:
        if attach.poll() is None:
            attach.kill()
            attach.wait()
        cli("detach", *where)


@pytest.fixture
def doomed():
    """A namespace with a veth pair inside, for a test to delete; whatever
    is left of it is removed after."""
    name = veth_lab.unique_netns_name("gone")
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "add", "a0", "type", "veth", "peer", "b0"],
                       check=True)
        for ifname in ("a0", "b0"):
            subprocess.run(["ip", "-n", name, "link", "set", ifname, "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        pins.remove_netns_tree(name)
        iface_lock.remove_netns(name)


def _program_gone(prog_id: int) -> bool:
    try:
        fd = bpfsys.prog_fd_by_id(prog_id)
    except FileNotFoundError:
        return True
    os.close(fd)
    return False


@pytest.mark.parametrize("remover", ["detach_stale", "apply_prune"])
def test_pins_of_a_deleted_namespace_are_stale_and_removed(remover, doomed, cli, tmp_path):
    attached = json.loads(cli("attach", "a0", "--netns", doomed, "--json", check=True).stdout)
    subprocess.run(["ip", "netns", "del", doomed], check=True)

    status = json.loads(cli("status", "--json", check=True).stdout)
    assert {"netns": doomed, "interfaces": ["a0"], "stale": True} in status["other_netns"]
    text = cli("status", check=True).stdout
    assert f"netns {doomed} is gone" in text and "`zerolayer detach --stale`" in text
    rows = json.loads(cli("status", "--netns", doomed, "--json", check=True).stdout)
    assert [(r["interface"], r["stale_pins"]) for r in rows["interfaces"]] == [("a0", True)]

    if remover == "detach_stale":
        removed = json.loads(cli("detach", "--stale", "--json", check=True).stdout)["removed"]
        assert {"interface": "a0", "netns": doomed, "action": "removed_stale_pins",
                "program_id": None, "note": f"network namespace {doomed} is gone"} in removed
    else:
        config = tmp_path / "zerolayer.toml"
        config.write_text(f'[[interface]]\nname = "a0"\nnetns = "{doomed}"\n')
        config.chmod(0o600)
        proc = cli("apply", str(config), "--prune", "--json")
        assert proc.returncode == 1, proc.stderr  # a0 itself is missing: refused
        actions = {a["action"]: a for a in json.loads(proc.stdout)["actions"]}
        assert actions["missing"]["status"] == "refused"
        assert actions["unpin"]["netns"] == doomed and actions["unpin"]["status"] == "done"

    assert doomed not in pins.pinned_netns() and doomed not in iface_lock.locked_netns()
    # The device of the deleted namespace goes in the kernel's own time; then
    # nothing holds the program.
    deadline = time.monotonic() + WAIT_S
    while not _program_gone(attached["program_id"]):
        assert time.monotonic() < deadline, "the program outlived its pins"
        time.sleep(0.1)
    assert "stale" not in cli("status", check=True).stdout


def test_another_tools_program_is_named_with_its_own_removal(cli, lab, tmp_path):
    """detach never removes another tool's program, so where zerolayer
    says to remove it, it names that tool's command, in the program's mode."""
    bpf, fd = load_foreign(tmp_path)
    try:
        netlink.set_program(netlink.query(lab.dut.ifname, lab.dut.netns).ifindex, fd, "skb",
                            netns=lab.dut.netns)
        where = [lab.dut.ifname, "--netns", lab.dut.netns]
        for args in (["attach", *where, "--mode", "native", "--replace"], ["detach", *where],
                     ["attach", *where]):
            line = one_line_error(cli(*args))
            assert (f"`ip netns exec {lab.dut.netns} xdp-loader unload {lab.dut.ifname} --all`"
                    in line), line
            assert f"`ip -n {lab.dut.netns} link set dev {lab.dut.ifname} xdpgeneric off`" in line
        assert netlink.query(lab.dut.ifname, lab.dut.netns).mode == "skb"  # left in place
    finally:
        bpf.close()


def test_watch_with_prune_unpins_a_deleted_namespace(doomed, tmp_path):
    """apply --watch --prune: once the namespace is deleted, its pins go and
    the program with them, without another command."""
    config = tmp_path / "zerolayer.toml"
    config.write_text(f'[[interface]]\nname = "a0"\nnetns = "{doomed}"\n')
    config.chmod(0o600)
    log = tmp_path / "watch.log"
    with open(log, "w") as out:
        watcher = subprocess.Popen([ZEROLAYER, "apply", str(config), "--watch", "--prune"],
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + WAIT_S
        while (prog_id := netlink.query("a0", doomed).prog_id) is None:
            assert watcher.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        subprocess.run(["ip", "netns", "del", doomed], check=True)
        while not (_program_gone(prog_id) and doomed not in pins.pinned_netns()):
            assert watcher.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert f"unpin (netns {doomed}): done" in log.read_text()
    finally:
        watcher.terminate()
        assert watcher.wait(timeout=WAIT_S) == 0, log.read_text()
