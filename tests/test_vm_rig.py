# SPDX-License-Identifier: Apache-2.0
"""The VM rig's shell (vagrant/vm/lib.sh) without a VM: a stub qemu stands in,
so these check what boot says and returns when a guest kernel panics, hangs
or reports its status, that no qemu outlives it, and that the kernel list
lives in vagrant/vm/kernels alone."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VM = REPO / "vagrant" / "vm"
LIB = VM / "lib.sh"

# A panic as 7.3's console showed it (issue 34), with the job's output before it.
PANIC = ["conformance: kernel 7.3.4+deb13-amd64", "tests/test_forward.py::test_forward[ipv4-skb] ",
         "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
         *[f"trace line {i}" for i in range(30)],
         "Kernel panic - not syncing: Fatal exception in interrupt"]


def stub_qemu(tmp_path: Path, script: str) -> dict[str, str]:
    """An environment whose qemu-system-x86_64 runs SCRIPT with SERIAL set to
    the console file qemu was given."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    qemu = stubs / "qemu-system-x86_64"
    qemu.write_text("#!/bin/bash\nfor a; do case $a in file:*) SERIAL=${a#file:} ;; esac; done\n"
                    f"echo $$ >{tmp_path}/qemu.pid\n{script}\n")
    qemu.chmod(0o755)
    return dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}", ZEROLAYER_VM_ACCEL="tcg",
                ZEROLAYER_VM_CACHE=str(tmp_path / "cache"), ZEROLAYER_VM_LOGS=str(tmp_path / "logs"))


def boot(env: dict[str, str], tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    image = tmp_path / "image"
    image.mkdir(exist_ok=True)
    shell = (f". {LIB}; boot_setup test; job_script true; "
             f"rc=0; boot {' '.join(options)} {image} || rc=$?; echo \"rc=$rc\"")
    return subprocess.run(["bash", "-c", shell], env=env, capture_output=True, text=True, timeout=60)


def gone(tmp_path: Path) -> bool:
    pid = int((tmp_path / "qemu.pid").read_text())
    return not Path(f"/proc/{pid}").exists()


def test_a_guest_kernel_panic_is_named_with_its_first_lines(tmp_path):
    console = "\\n".join(PANIC)
    env = stub_qemu(tmp_path, f'printf "{console}\\n" >"$SERIAL"; exit 0')
    result = boot(env, tmp_path)
    assert result.stdout.strip() == "rc=123", result.stderr
    assert "PANIC: the guest kernel crashed" in result.stderr
    shown = [line.strip() for line in result.stderr.splitlines() if line.startswith("    ")]
    assert shown == PANIC[2:22]  # from the oops header, 20 lines
    assert "no status" not in result.stderr


def test_a_guest_that_dies_quietly_shows_the_console_tail(tmp_path):
    env = stub_qemu(tmp_path, 'echo "zl-vm: cannot mount the job share" >"$SERIAL"; exit 0')
    result = boot(env, tmp_path)
    assert result.stdout.strip() == "rc=125", result.stderr
    assert "PANIC" not in result.stderr
    assert "zl-vm: cannot mount the job share" in result.stderr


def test_a_hung_guest_is_killed_at_its_timeout(tmp_path):
    env = stub_qemu(tmp_path, "exec sleep 300")
    result = boot(env, tmp_path, "--timeout", "2")
    assert result.stdout.strip() == "rc=124", result.stderr
    assert "timeout: the guest ran past 2 s" in result.stderr
    assert gone(tmp_path)


def test_the_job_status_and_output_come_back(tmp_path):
    # The guest's side of the protocol: output, then the status, then off.
    env = stub_qemu(tmp_path, "job=$(dirname \"$SERIAL\")\n"
                    'for a; do case $a in local,path=*mount_tag=job*) job=${a#local,path=}; job=${job%%,*} ;; esac; done\n'
                    'echo "hello from the guest" >"$job/output.log"; echo 7 >"$job/status"')
    result = boot(env, tmp_path)
    assert result.stdout.splitlines() == ["hello from the guest", "rc=7"], result.stderr


def test_an_interrupted_boot_leaves_no_qemu(tmp_path):
    env = stub_qemu(tmp_path, "exec sleep 300")
    image = tmp_path / "image"
    image.mkdir()
    run = subprocess.Popen(["bash", "-c", f". {LIB}; boot_setup test; job_script true; boot {image}"],
                           env=env, stderr=subprocess.PIPE, text=True)
    pid_file = tmp_path / "qemu.pid"
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        subprocess.run(["sleep", "0.1"])
    run.terminate()
    assert run.wait(timeout=30) == 143
    assert gone(tmp_path)


def kernel_lines() -> list[list[str]]:
    lines = (VM / "kernels").read_text().splitlines()
    return [line.split() for line in lines if line.strip() and not line.startswith("#")]


def test_the_kernel_list_is_one_file():
    names = [row[0] for row in kernel_lines()]
    assert all(len(row) == 4 and row[3] in ("ci", "hand") for row in kernel_lines())
    listed = subprocess.run(["bash", "-c", f". {LIB}; kernel_names"], capture_output=True, text=True, check=True)
    assert listed.stdout.split() == names
    suites = {suite for row in kernel_lines() for suite in row[1:3]}
    scripts = [*VM.glob("*.sh"), *VM.glob("service/*.sh"), REPO / ".ci" / "run", REPO / "Makefile"]
    for script in scripts:
        text = script.read_text()
        named = {n for n in names if re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", text)}
        assert len(named) <= 1, f"{script.relative_to(REPO)} names the kernels {sorted(named)}"
        spelled = {s for s in suites if re.search(rf"\b{s}\b", text)}
        assert not spelled, f"{script.relative_to(REPO)} names the suites {sorted(spelled)}"


@pytest.mark.parametrize("script", ["run.sh", "matrix.sh", "image.sh"])
def test_an_unknown_kernel_is_refused_with_the_list(script):
    args = {"run.sh": ["--kernel", "9.9", "--", "true"], "matrix.sh": ["9.9"], "image.sh": ["--key", "9.9"]}[script]
    result = subprocess.run(["bash", str(VM / script), *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    names = " ".join(row[0] for row in kernel_lines())
    assert f"unknown kernel '9.9': vagrant/vm/kernels lists {names}" in result.stderr


def test_the_kernel_table_follows_the_list(tmp_path):
    # A kernel not listed (the host's) comes last, even an older one.
    names = [row[0] for row in kernel_lines()]
    reports = []
    for release in ["4.19.0-host", *(f"{name}.0-1-amd64" for name in reversed(names))]:
        report = tmp_path / f"{release}.json"
        report.write_text(json.dumps({"kernel": release, "columns": {}, "capabilities": {}}))
        reports.append(str(report))
    table = subprocess.run([sys.executable, str(VM / "kernel_table.py"), *reports],
                           capture_output=True, text=True, check=True).stdout
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    assert rows == [*(f"{name}.0-1-amd64" for name in names), "4.19.0-host"]


@pytest.mark.parametrize(("first", "thread", "boots", "said"), [
    (123, "multi", 2, "the 7.3 guest kernel panicked under thread=multi (the emulator's, see "
                      "docs/kernels.md): booting once more"),
    (123, None, 1, "the 7.3 guest kernel panicked: not booted again"),
    (125, None, 2, "the 7.3 guest reported no status: booting once more"),
    (124, None, 1, None),
    (1, "multi", 1, None)])
def test_the_matrix_boots_once_more_only_after_a_crash_and_says_which(tmp_path, first, thread,
                                                                     boots, said):
    # The rig copied with a run.sh that records its calls and fails the first.
    vm = tmp_path / "vagrant" / "vm"
    vm.mkdir(parents=True)
    for name in ("lib.sh", "log.sh", "matrix.sh", "kernels", "kernel_table.py"):
        (vm / name).write_bytes((VM / name).read_bytes())
    calls = tmp_path / "calls"
    (vm / "run.sh").write_text(f'echo "$*" >>{calls}\n[ "$(wc -l <{calls})" -gt 1 ] || exit {first}\n')
    env = {k: v for k, v in os.environ.items() if k != "ZL_TCG_THREAD"}
    if thread:
        env["ZL_TCG_THREAD"] = thread
    result = subprocess.run(["bash", str(vm / "matrix.sh"), "--smoke", "7.3"], capture_output=True,
                            text=True, timeout=60, env=env)
    assert len(calls.read_text().splitlines()) == boots
    assert (result.returncode == 0) == (boots == 2), result.stderr
    if said:
        assert f"matrix: {said}" in result.stderr
    if boots == 1:
        assert "booting once more" not in result.stderr


@pytest.mark.parametrize("plant", ["symlink", "group-writable"])
def test_a_log_directory_someone_else_could_write_is_refused(tmp_path, plant):
    """The logs' root lives in /tmp by default: a link planted there, or a
    directory others may write, is refused before anything is written."""
    env = stub_qemu(tmp_path, "exit 0")
    target = tmp_path / "elsewhere"
    target.mkdir()
    logs = Path(env["ZEROLAYER_VM_LOGS"])
    if plant == "symlink":
        logs.symlink_to(target)
    else:
        logs.mkdir()
        logs.chmod(0o775)
    result = boot(env, tmp_path)
    assert "only we can write" in result.stderr
    assert "rc=" not in result.stdout  # boot_setup stopped the run
    assert list(target.iterdir()) == []
