# SPDX-License-Identifier: Apache-2.0
"""The systemd units, the Kubernetes manifests and the example configuration
(packaging/) agree with each other and with the CLI: their commands parse
with the real click CLI, they read the file zerolayer reads by default, they
ask for the same capabilities, and their TOML is a configuration zerolayer
accepts. Fast, unprivileged, no VM: vagrant/vm/service/suite.sh runs them."""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import click
import pytest

from pyxdp.cli import _register, cli
from pyxdp.service import config

REPO = Path(__file__).resolve().parents[1]
PACKAGING = REPO / "packaging"
UNITS = ("zerolayer.service", "zerolayer-exporter.service")
HOST_PATHS = {"/sys/fs/bpf", "/run/zerolayer"}


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """SECTION -> KEY -> values, in the order given (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in (PACKAGING / "systemd" / name).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


def manifests():
    yaml = pytest.importorskip("yaml")
    ds = yaml.safe_load((PACKAGING / "kubernetes" / "daemonset.yaml").read_text())
    cm = yaml.safe_load((PACKAGING / "kubernetes" / "configmap.yaml").read_text())
    return ds, cm


def containers() -> dict:
    ds, _ = manifests()
    return {c["name"]: c for c in ds["spec"]["template"]["spec"]["containers"]}


def parse_command(argv: list[str]) -> click.Context:
    """Parse ARGV (a subcommand and its arguments) as `zerolayer` would, up
    to the subcommand's own context: unknown options or arguments raise."""
    _register()
    # with the group's settings, as zerolayer runs it: click keeps the help
    # option a command first made, and -h is among them
    parent = click.Context(cli, info_name="zerolayer", **cli.context_settings)
    command = cli.get_command(parent, argv[0])
    assert command is not None, argv
    return command.make_context(argv[0], list(argv[1:]), parent=parent)


def exec_start(name: str) -> list[str]:
    (line,) = unit(name)["Service"]["ExecStart"]
    return shlex.split(line)


@pytest.mark.parametrize("name", UNITS)
def test_unit_commands_parse_and_read_the_default_file(name):
    argv = exec_start(name)
    # provision.sh links the venv's entry point there.
    assert argv[0] == "/usr/local/bin/zerolayer"
    assert 'ln -sfn "$VENV/bin/zerolayer" /usr/local/bin/zerolayer' in (
        REPO / "vagrant" / "provision.sh").read_text()
    ctx = parse_command(argv[1:])
    assert config.DEFAULT_PATH in argv
    assert unit(name)["Unit"]["ConditionPathExists"] == [config.DEFAULT_PATH]
    if name == "zerolayer.service":
        assert ctx.info_name == "apply" and ctx.params["watch"] is True
        assert ctx.params["file"] == config.DEFAULT_PATH
    else:
        assert ctx.info_name == "exporter" and ctx.params["config_path"] == config.DEFAULT_PATH


def test_reload_is_sighup_and_a_bad_file_is_not_restarted():
    service = unit("zerolayer.service")["Service"]
    assert service["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    from pyxdp.cli.apply_commands import BAD_FILE

    for name in UNITS:
        sections = unit(name)
        assert sections["Service"]["Restart"] == ["on-failure"]
        assert sections["Service"]["RestartPreventExitStatus"] == [str(BAD_FILE)]
        assert {"StartLimitIntervalSec", "StartLimitBurst"} <= sections["Unit"].keys()


def unit_caps(name: str) -> set[str]:
    service = unit(name)["Service"]
    (bounding,) = service["CapabilityBoundingSet"]
    (ambient,) = service["AmbientCapabilities"]
    assert bounding.split() == ambient.split()
    return {c.removeprefix("CAP_") for c in bounding.split()}


def test_units_and_manifest_ask_for_the_same_capabilities():
    by_container = containers()
    assert unit_caps("zerolayer.service") == {"BPF", "PERFMON", "NET_ADMIN", "SYS_ADMIN"}
    for unit_name, container in (("zerolayer.service", "apply"),
                                 ("zerolayer-exporter.service", "exporter")):
        security = by_container[container]["securityContext"]
        assert security["privileged"] is False
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert set(security["capabilities"]["add"]) == unit_caps(unit_name), container


def test_manifest_commands_match_the_units_and_the_configmap():
    ds, cm = manifests()
    pod = ds["spec"]["template"]
    assert pod["spec"]["hostNetwork"] is True
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == cm["metadata"]["name"]
    assert {v["hostPath"]["path"] for v in volumes.values() if "hostPath" in v} >= HOST_PATHS
    for name, container in containers().items():
        unit_name = "zerolayer.service" if name == "apply" else "zerolayer-exporter.service"
        # The container runs what the unit runs: the entry point is zerolayer.
        assert container["args"] == exec_start(unit_name)[1:]
        parse_command(container["args"])
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert Path(mounts["config"]) / next(iter(cm["data"])) == Path(config.DEFAULT_PATH)
    assert set(cm["data"]) == {Path(config.DEFAULT_PATH).name}


def test_configmap_is_a_configuration_and_the_probes_and_annotations_use_its_port():
    ds, cm = manifests()
    (text,) = cm["data"].values()
    cfg = config.parse(text, "configmap.yaml")
    port = cfg.exporter.port
    exporter = containers()["exporter"]
    assert [p["containerPort"] for p in exporter["ports"]] == [port]
    for probe in ("livenessProbe", "readinessProbe"):
        assert exporter[probe]["httpGet"]["port"] == port
        assert exporter[probe]["httpGet"]["path"] == "/metrics"
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port)
    for container in containers().values():
        assert container["resources"]["requests"].keys() == {"cpu", "memory"}


def test_example_configuration_is_inert_and_its_examples_parse():
    lines = (PACKAGING / "zerolayer.toml.example").read_text().splitlines()
    assert all(not line or line.startswith("#") for line in lines)
    toml = "\n".join(line[2:] for line in lines if re.match(r"# (\[|[a-z_]+ = )", line))
    cfg = config.parse(toml, "zerolayer.toml.example")
    assert cfg.interfaces and cfg.exporter.port


def test_install_script_puts_units_where_systemd_looks(tmp_path):
    done = subprocess.run(["bash", str(PACKAGING / "install.sh"), str(tmp_path)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    for name in UNITS:
        assert (tmp_path / "usr/local/lib/systemd/system" / name).read_text() == \
            (PACKAGING / "systemd" / name).read_text()
    assert (tmp_path / "etc/zerolayer/zerolayer.toml.example").exists()
    assert not (tmp_path / "etc/zerolayer/zerolayer.toml").exists()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verify(tmp_path):
    # A stand-in for the binary: verify checks that ExecStart is executable,
    # and this test must not depend on the machine's installation.
    units = []
    for name in UNITS:
        text = (PACKAGING / "systemd" / name).read_text()
        stub = tmp_path / "zerolayer"
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o755)
        path = tmp_path / name
        path.write_text(text.replace("/usr/local/bin/zerolayer", str(stub)))
        units.append(str(path))
    done = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True,
                          text=True, timeout=60)
    ours = [line for line in (done.stdout + done.stderr).splitlines()
            if any(name in line for name in UNITS)]
    assert done.returncode == 0 and not ours, done.stdout + done.stderr
