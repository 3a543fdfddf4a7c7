# SPDX-License-Identifier: Apache-2.0
"""Files root acts on, read as pyxdp.trusted_file reads them (docs/spec.md
§10.1): who may change them, what they are, how big, and every way their
text can be wrong, each one line naming the file. No root: the files are
the running user's, in a private directory under tmp_path (the one owned by
another user are in test_root_trust_files.py)."""

import os
import re
import threading

import pytest

from pyxdp import toml_file, trusted_file
from pyxdp.service import config
from pyxdp.tuning import profile
from support.tuning_fixtures import profile_text

GOOD = '[[interface]]\nname = "eth0"\n'


@pytest.fixture
def private(tmp_path):
    """A directory only this user can change, as a configuration's should be."""
    tmp_path.chmod(0o755)
    return tmp_path


def refusal(path, what: str = "the configuration") -> str:
    with pytest.raises(trusted_file.BadFile) as caught:
        trusted_file.read(str(path), what)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_file_only_its_owner_can_change_is_read(private):
    (private / "z.toml").write_text(GOOD)
    (private / "z.toml").chmod(0o644)
    assert trusted_file.read(str(private / "z.toml"), "the configuration") == GOOD.encode()


@pytest.mark.parametrize("mode, who, fix", [
    (0o666, "its group and others", "go-w"), (0o646, "others", "o-w"), (0o664, "its group", "g-w")])
def test_a_file_others_can_write_is_refused_with_the_chmod_that_fixes_it(private, mode, who, fix):
    path = private / "z.toml"
    path.write_text(GOOD)
    path.chmod(mode)
    assert refusal(path) == (f"refusing the configuration {path}: it is writable by {who} "
                             f"(mode {mode:04o}): chmod {fix} {path}")


def test_a_directory_above_that_others_can_write_is_refused(private):
    shared = private / "shared"
    shared.mkdir()
    (shared / "z.toml").write_text(GOOD)
    shared.chmod(0o777)
    assert refusal(shared / "z.toml").endswith(
        f": {shared} is writable by its group and others (mode 0777): chmod go-w {shared}")


def test_a_sticky_directory_above_is_allowed_the_entry_below_being_the_users(private):
    """As /tmp: others may add entries, not rename or remove this user's."""
    sticky = private / "sticky"
    sticky.mkdir()
    (sticky / "z.toml").write_text(GOOD)
    sticky.chmod(0o1777)
    assert trusted_file.read(str(sticky / "z.toml"), "the configuration") == GOOD.encode()


def test_links_are_followed_and_each_is_checked_as_a_configmap_mounts_them(private):
    """Kubernetes mounts a ConfigMap as FILE -> ..data/FILE, ..data -> ..TIMESTAMP/."""
    (private / "..2026_12_04").mkdir()
    (private / "..2026_12_04" / "zerolayer.toml").write_text(GOOD)
    (private / "..data").symlink_to("..2026_12_04")
    (private / "zerolayer.toml").symlink_to("..data/zerolayer.toml")
    assert trusted_file.read(str(private / "zerolayer.toml"), "x") == GOOD.encode()
    (private / "up.toml").symlink_to(f"../{private.name}/./..data/../zerolayer.toml")
    assert trusted_file.read(str(private / "up.toml"), "x") == GOOD.encode()
    (private / "..2026_12_04").chmod(0o777)  # the target's directory is checked too
    assert "..2026_12_04 is writable by" in refusal(private / "zerolayer.toml")


@pytest.mark.parametrize("make, problem", [
    (lambda p: p.symlink_to("/dev/zero"), "/dev/zero is a character device, not a regular file"),
    (lambda p: os.mkfifo(p), "it is a FIFO, not a regular file"),
    (lambda p: p.mkdir(), "it is a directory, not a regular file"),
    (lambda p: p.write_bytes(b"#" * (2 << 20)), "2097152 bytes, more than the 1048576 zerolayer reads"),
])
def test_what_is_not_a_small_regular_file_is_refused_without_reading_it(private, make, problem):
    path = private / "z.toml"
    make(path)
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(refusal(path)), daemon=True)
    reader.start()
    reader.join(timeout=60)  # a FIFO opened for reading would block here forever
    assert result == [f"refusing the configuration {path}: {problem}"]


def test_unreadable_paths_are_one_line(private):
    assert refusal(private / "none.toml") == \
        f"cannot read the configuration {private}/none.toml: No such file or directory"
    (private / "loop.toml").symlink_to("loop.toml")
    assert refusal(private / "loop.toml").endswith("more than 40 symbolic links")
    (private / "file").write_text("")
    assert refusal(private / "file" / "z.toml").endswith(f"{private}/file is not a directory")
    assert refusal("/x\0y\n.toml") == \
        "refusing the configuration '/x\\x00y\\n.toml': a path has no NUL character"


def test_a_state_directory_others_can_write_is_refused(private):
    trusted_file.check_directory(str(private), "state directory")
    (private / "state").mkdir(mode=0o700)
    (private / "state").chmod(0o733)
    with pytest.raises(trusted_file.BadFile, match="writable by its group and others"):
        trusted_file.check_directory(str(private / "state"), "state directory")


def config_error(text: str, path: str = "z.toml") -> str:
    with pytest.raises(config.ConfigError) as caught:
        config.parse(text, path)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def test_every_way_the_text_is_wrong_names_the_file_and_the_line():
    deep = "# a comment [[[\nx = 1\nports = " + "[" * 5000 + "\n"  # 5,000 deep: tomllib recurses
    assert config_error(deep) == "z.toml:3: arrays or tables nested too deeply"
    assert config_error("a = " + "{b = " * 3000 + "1" + "}" * 3000) == \
        "z.toml:1: arrays or tables nested too deeply"
    assert config_error("\n\nversion = " + "9" * 5000) == \
        "z.toml:3: Exceeds the limit (4300 digits) for integer string conversion"
    assert config_error("version = 0x" + "f" * 5000) == \
        "z.toml:1: version: an integer that large: this zerolayer reads version 1"
    assert config_error('"a\\nb" = 1').startswith("z.toml:1: 'a\\nb': unknown key")
    assert config_error(f'[[interface]]\nname = "eth0"\nports = [{{ {"a." * 3000}b = 1 }}]') \
        == "z.toml:3: interface[1].ports[1]: a table is not a UDP port (1-65535)"


def test_bytes_that_are_not_utf8_name_their_line(tmp_path):
    tmp_path.chmod(0o755)
    (tmp_path / "z.toml").write_bytes(b'[[interface]]\nname = "\xff"\n')
    with pytest.raises(config.ConfigError, match=re.escape(f"{tmp_path}/z.toml:2: not UTF-8 "
                                                           "(byte 22)")):
        config.load(str(tmp_path / "z.toml"))


@pytest.mark.parametrize("name", ["a:b", "a/b", "a\0b", "a b", "a\tb", ".", "", "a\x7fb"])
@pytest.mark.parametrize("key", ["name", "netns"])
def test_names_no_interface_or_namespace_can_have_are_refused_at_parse_time(name, key):
    other = 'name = "eth0"\n' if key == "netns" else ""
    text = f'\n[[interface]]\n{other}{key} = {toml_string(name)}\n'
    what = "interface" if key == "name" else "network namespace"
    message = config_error(text)
    assert message.startswith(f"z.toml:{3 + bool(other)}: interface[1].{key}: {name!r} is not "
                              f"a valid {what} name"), message


def test_tuning_interfaces_and_paths_are_checked_too():
    assert config_error('[tuning]\nprofile = "inf2"\ninterfaces = ["../../etc"]\n') == \
        "z.toml:3: tuning.interfaces[1]: '../../etc' is not a valid interface name: it has '/'"
    assert config_error('[tuning]\nprofile = "inf2"\nstate_dir = "a\\nb"\n') == \
        "z.toml:3: tuning.state_dir: 'a\\nb' is not a path"


def toml_string(text: str) -> str:
    return '"' + "".join(c if c.isalnum() or c in " ./:" else f"\\u{ord(c):04x}"
                         for c in text) + '"'


def test_a_glob_that_matches_nothing_says_so_as_itself():
    got = config.parse('[[interface]]\nname = "eth0"\n[[interface]]\nmatch = { name = "ap*" }\n'
                       '[[interface]]\nmatch = { driver = "veth" }\nnetns = "lab"\n')
    claimed = [got.interfaces[0], None]
    assert got.unmatched(claimed) == [
        "interface[2].match (name 'ap*') matches no interface",
        "interface[3].match (driver 'veth') matches no interface in netns lab"]


def profile_error(text: str) -> str:
    with pytest.raises(profile.ProfileError) as caught:
        profile.parse(text, "p.toml")
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def sysctl(name: str, value: str) -> dict:
    return {"kind": "sysctl", "name": name, "value": value, "scope": "global"}


NOTE = {"kind": "note", "name": "n", "reason": "r"}


@pytest.mark.parametrize("name, value", [
    ("kernel.core_pattern", "|/tmp/x %p"), ("kernel.core_pattern", " |/tmp/x"),
    ("kernel.core_pattern", "@/run/dump.sock"), ("kernel.modprobe", "/tmp/x"),
    ("kernel.hotplug", "/tmp/x"), ("kernel.poweroff_cmd", "/tmp/x"),
    ("kernel.usermodehelper.bset", "4294967295 4294967295"),
    ("fs.binfmt_misc.register", ":x:E::x::/tmp/x:"),
])
def test_a_profile_cannot_make_the_kernel_run_a_program(name, value):
    text = profile_text("p", ("s", sysctl(name, value)))
    message = profile_error(text)
    assert message.startswith(f"profile p.toml: step 's' knob 1: {name}"), message
    assert "no profile sets it" in message


def test_a_core_pattern_that_names_files_is_a_setting():
    got = profile.parse(profile_text("p", ("s", sysctl("kernel.core_pattern", "core.%p"))), "p")
    assert got.steps[0].knobs[0]["value"] == "core.%p"


@pytest.mark.parametrize("name", ["net.//.//.//.etc.shadow", "net.core./rmem", "net.core.a/"])
def test_a_sysctl_name_cannot_leave_proc_sys(name):
    message = profile_error(profile_text("p", ("s", sysctl(name, "1"))))
    assert f"{name!r} is not a sysctl name" in message


def test_profile_text_errors_name_the_file_and_the_line():
    assert profile_error("name = 'p'\n\nstep = " + "[" * 5000) == \
        "profile p.toml:3: arrays or tables nested too deeply"
    assert profile_error(profile_text("p", ("s", NOTE)) + '  "a\\nb" = 1\n') == \
        "profile p.toml: step 's' knob 1: unknown field(s) 'a\\nb' for a note knob"
    assert "`item` must be a checklist number" in profile_error(
        profile_text("p", ("s", NOTE)).replace('id = "s"', 'id = "s"\nitem = ' + "9" * 400))


def test_a_profile_file_is_read_as_a_configuration_is(private):
    path = private / "p.toml"
    path.write_text(profile_text("p", ("s", sysctl("net.core.rmem_max", "1"))))
    assert profile.load(str(path)).name == "p"
    path.chmod(0o666)
    with pytest.raises(profile.ProfileError, match=re.escape(
            f"refusing profile {path}: it is writable by its group and others")):
        profile.load(str(path))
    with pytest.raises(profile.ProfileError, match="a path has no NUL"):
        profile.load("x\0.toml")


def test_toml_errors_without_a_place_are_on_line_1():
    with pytest.raises(trusted_file.BadFile, match=r"^f:2: "):
        toml_file.parse("a = 1\na = 2\n", "f")
