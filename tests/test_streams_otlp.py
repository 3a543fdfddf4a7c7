# SPDX-License-Identifier: Apache-2.0
"""`zerolayer exporter --streams --otlp`: the streams' metrics pushed over
OTLP/HTTP, under OpenTelemetry's GenAI client names, each process's
identity (its unit, container and pod, from cgroups made here) a resource
of its own, as decoded by OpenTelemetry's own protobuf classes; counts
equal to what the SDK clients saw, no byte of a prompt in any export. And
a receiver that is down, refuses, hangs or answers 10 MB: counted by
reason, survived, the observer unslowed, exports resumed, SIGTERM on time.
(Prometheus as the receiver runs in the service VM: vagrant/vm/service.)"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pyxdp.streams import identity, selection
from support import streams_lab as lab
from support.ports import free_ports

pytestmark = pytest.mark.root
otlp_receiver = pytest.importorskip("support.otlp_receiver")


def prompt() -> str:
    return f"zl-private-prompt-{uuid.uuid4().hex}"


@contextlib.contextmanager
def cgroups(*paths: str):
    """Cgroup v2 directories (relative to the hierarchy's root) made here,
    removed after, deepest first."""
    root = selection.cgroup_root()
    assert root is not None, "no cgroup v2 hierarchy mounted"
    made: list[str] = []
    try:
        for path in paths:
            where = root
            for part in path.split("/"):
                where = f"{where}/{part}"
                if not os.path.isdir(where):
                    os.mkdir(where)
                    made.append(where)
        yield root
    finally:
        for where in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(where)


def joiner(cgroup_dir: str):
    """A preexec_fn that puts the child in CGROUP_DIR before it runs."""
    def join() -> None:
        with open(f"{cgroup_dir}/cgroup.procs", "w") as f:
            f.write("0")
    return join


def client_in(cgroup_dir: str, api: str, port: int, text: str, *args: str,
              scheme: str = "http") -> dict:
    """An SDK client started in CGROUP_DIR: its record (pid, chunk times)."""
    done = subprocess.run([sys.executable, str(lab.CLIENT), api, f"{scheme}://127.0.0.1:{port}",
                           text, *args], preexec_fn=joiner(cgroup_dir), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return lab.json.loads(done.stdout.splitlines()[-1])


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=20) as answer:
        return answer.read().decode()


def sample(text: str, name: str, **labels) -> float:
    """The sum of NAME's samples whose labels include LABELS."""
    return sum(one.value for family in text_string_to_metric_families(text)
               for one in family.samples
               if one.name == name and labels.items() <= one.labels.items())


def of_service(request, metric: str, service: str) -> list:
    return [(res, at, p) for res, at, p in otlp_receiver.points(request, metric)
            if res.get("service.name") == service]


def count(request, metric: str, service: str) -> int:
    return sum(p.count for _, _, p in of_service(request, metric, service))


def config(tmp_path, ports=(), cgroups=(), otlp: str = "") -> str:
    """A configuration whose [streams] selects PORTS and CGROUPS and whose
    [streams.otlp] is OTLP's lines; the exporter on a free port."""
    [listen] = free_ports(1)
    path = tmp_path / f"zl-{uuid.uuid4().hex[:8]}.toml"
    path.write_text(f"[exporter]\nport = {listen}\n\n[streams]\nenabled = true\n"
                    f"ports = {list(ports)}\ncgroups = {list(cgroups)!r}\n".replace("'", '"')
                    + (f"\n[streams.otlp]\n{otlp}\n" if otlp else ""))
    return str(path)


def test_otlp_push_names_counts_and_identity(tmp_path):
    """The openai SDK in a unit's cgroup, straight to the mock; the anthropic
    SDK in a pod's container; the openai SDK through a TLS gateway (socat)
    run in a unit of its own: each a resource named as its cgroup says."""
    mock_port, rx_port, gw_port = free_ports(3)
    unit = f"zl-test-{uuid.uuid4().hex[:10]}"
    gateway = f"zl-test-gw-{uuid.uuid4().hex[:8]}"
    cert, key = lab.certificate(tmp_path)
    pod = str(uuid.uuid4())
    container = uuid.uuid4().hex + uuid.uuid4().hex
    pod_dir = f"{unit}.slice/kubepods-besteffort-pod{pod.replace('-', '_')}.slice"
    leaf = f"{pod_dir}/cri-containerd-{container}.scope"
    receiver = otlp_receiver.Receiver(rx_port)
    text = prompt()
    try:
        with cgroups(f"{unit}.service", leaf, f"{gateway}.service") as root, \
                lab.mock_server(tmp_path, mock_port), \
                lab.started(["socat", f"OPENSSL-LISTEN:{gw_port},bind=127.0.0.1,reuseaddr,fork,"
                             f"cert={cert},key={key},verify=0", f"TCP:127.0.0.1:{mock_port}"],
                            gw_port, preexec_fn=joiner(f"{root}/{gateway}.service")), \
                lab.exporter("--config", config(
                    tmp_path, [mock_port], [f"{unit}.service", leaf, f"{gateway}.service"],
                    f'url = "{receiver.url}"\ninterval_s = 1')) as (proc, url):
            plain = client_in(f"{root}/{unit}.service", "openai", mock_port, text)
            boxed = client_in(f"{root}/{leaf}", "anthropic", mock_port, text)
            relayed = client_in(f"{root}/{unit}.service", "openai", gw_port, text,
                                "--cafile", str(cert), scheme="https")
            seen = {u: len(c["streams"][0]["times"]) for u, c in (
                ("plain", plain), ("boxed", boxed), ("relayed", relayed))}
            exe = os.path.basename(os.path.realpath(sys.executable))

            def servers(r) -> int:  # the mock's three streams, the gateway's TLS one
                return sum(p.count for _, a, p in otlp_receiver.points(
                    r, "zerolayer.stream.time_to_first_chunk")
                    if a["zerolayer.stream.side"] == "server"
                    and a.get("server.port") in (mock_port, gw_port))

            ttfc = "gen_ai.client.operation.time_to_first_chunk"
            tpoc = "gen_ai.client.operation.time_per_output_chunk"
            got = receiver.wait(lambda r: count(r, ttfc, unit) == 2 and count(r, ttfc, gateway) == 1
                                and servers(r) == 4
                                and count(r, "gen_ai.client.operation.duration", unit) == 2)
            # the client in the unit: its own resource, GenAI's names and attributes
            # (straight to the mock, and through the gateway: over TLS)
            by_tls = {at["zerolayer.tls"]: (res, at, p) for res, at, p in of_service(got, ttfc, unit)}
            assert set(by_tls) == {"true", "false"}, by_tls
            res, at, first = by_tls["false"]
            assert by_tls["true"][1]["server.port"] == gw_port
            assert by_tls["true"][2].count == 1
            assert res["process.executable.name"] == exe and "container.id" not in res
            assert res["service.instance.id"].split("/")[0] == socket.gethostname()
            assert at["gen_ai.operation.name"] == "chat"
            assert at["gen_ai.provider.name"] == "openai"
            assert at["gen_ai.request.model"] == "gpt-test"
            assert (at["server.address"], at["server.port"]) == ("127.0.0.1", mock_port)
            assert first.count == 1 and 0 < first.sum < 30
            gaps = count(got, tpoc, unit)
            want = seen["plain"] + seen["relayed"] - 2
            assert gaps in (want, want - 1, want - 2), (gaps, seen)  # issue 30's one short
            for _, done_at, _ in of_service(got, "gen_ai.client.operation.duration", unit):
                assert done_at["zerolayer.stream.status"] == "done" and "error.type" not in done_at
            # the gateway, a client of the mock: its unit is its service.name
            [(res, at, hop)] = of_service(got, ttfc, gateway)
            assert res["process.executable.name"] == "socat" and hop.count == 1
            assert at["gen_ai.provider.name"] == "openai" and at["gen_ai.request.model"] == "gpt-test"
            assert at["server.port"] == mock_port and at["zerolayer.tls"] == "false"
            hop_gaps = count(got, tpoc, gateway)
            assert hop_gaps in (seen["relayed"] - 1, seen["relayed"] - 2), (hop_gaps, seen)
            # the client in the pod's container: its resource names both
            boxed_points = [(r, a) for r, a, _ in otlp_receiver.points(got, ttfc)
                            if r.get("container.id") == container]
            assert boxed_points, [r for r, _, _ in otlp_receiver.points(got, ttfc)]
            res, at = boxed_points[0]
            assert res["k8s.pod.uid"] == pod and at["gen_ai.provider.name"] == "anthropic"
            assert res["service.instance.id"].endswith("/" + container[:12])
            # the server side: zerolayer's own names (a chunk is not a token)
            server = [(r, a) for r, a, _ in otlp_receiver.points(
                got, "zerolayer.stream.time_to_first_chunk") if a.get("server.port") == gw_port]
            assert [(r["service.name"], a["zerolayer.tls"]) for r, a in server] == [(gateway, "true")]
            # the Prometheus endpoint: the identity as labels, the exports counted
            metrics = scrape(url)
            assert f'service="{unit}"' in metrics
            assert f'container_id="{container}"' in metrics and f'k8s_pod_uid="{pod}"' in metrics
            assert sample(metrics, "zerolayer_otlp_exports_total") >= 1
        for body in receiver.raw:
            assert text.encode() not in body and lab.REPLY[:12].encode() not in body
    finally:
        receiver.close()


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def wait_sample(url: str, name: str, least: float, timeout: float = 40.0, **labels) -> float:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = sample(scrape(url), name, **labels)
        if value >= least:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{name}{labels} stayed below {least} for {timeout} s")


def test_otlp_survives_a_receiver_down_refusing_hanging_or_huge(tmp_path):
    """One exporter through every fault in turn; the observer keeps counting
    (its Prometheus figures grow as streams pass, whatever the receiver
    does), and the receiver, once it answers, gets every stream."""
    mock_port, rx_port = free_ports(2)
    unit = f"zl-test-{uuid.uuid4().hex[:10]}"
    receiver = None
    streams = 0
    try:
        with cgroups(f"{unit}.service") as root, lab.mock_server(tmp_path, mock_port), \
                lab.exporter("--config", config(tmp_path, (), [f"{unit}.service"], ""),
                             "--otlp", f"http://127.0.0.1:{rx_port}/v1/metrics",
                             "--otlp-interval", "1", "--otlp-timeout", "2") as (proc, url):
            def stream() -> None:
                nonlocal streams
                client_in(f"{root}/{unit}.service", "openai", mock_port, prompt())
                streams += 1

            def observed() -> float:
                return sample(scrape(url), "zerolayer_stream_time_to_first_chunk_seconds_count",
                              side="client", api="openai", tls="false", model="gpt-test",
                              service=unit)

            stream()  # nobody listens
            wait_sample(url, "zerolayer_otlp_dropped_total", 1, reason="unreachable")
            receiver = otlp_receiver.Receiver(rx_port, mode="500")
            stream()
            wait_sample(url, "zerolayer_otlp_dropped_total", 1, reason="failed")
            receiver.mode = "huge"
            before = rss_kib(proc.pid)
            wait_sample(url, "zerolayer_otlp_exports_total", 3)  # three 10 MB answers read
            assert rss_kib(proc.pid) - before < 8 * 1024, "a huge answer was read whole"
            receiver.mode = "hang"
            stream()
            wait_sample(url, "zerolayer_otlp_dropped_total", 1, reason="timeout")
            stream()  # the observer, unslowed, counts while the export hangs
            assert observed() == streams == 4
            receiver.mode = "ok"
            got = receiver.wait(lambda r: count(
                r, "gen_ai.client.operation.time_to_first_chunk", unit) == streams, timeout=60)
            assert count(got, "gen_ai.client.operation.duration", unit) == streams
            # the receiver killed and started again: nothing lost but counted drops
            unreachable = sample(scrape(url), "zerolayer_otlp_dropped_total", reason="unreachable")
            receiver.close()
            stream()
            wait_sample(url, "zerolayer_otlp_dropped_total", unreachable + 1, reason="unreachable")
            receiver = otlp_receiver.Receiver(rx_port)
            got = receiver.wait(lambda r: count(
                r, "gen_ai.client.operation.time_to_first_chunk", unit) == streams, timeout=60)
            err = proc.stderr
            receiver.mode = "hang"  # SIGTERM while an export hangs: still on time
            time.sleep(1.5)
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
            assert time.monotonic() - start < 4, "SIGTERM waited on the receiver"
            said = err.read()
            assert "did not get through" in said and "Traceback" not in said
            assert "\xff" not in said
    finally:
        if receiver is not None:
            receiver.close()


@pytest.mark.parametrize(("args", "says"), [
    (["--otlp", "ftp://x/v1/metrics"], "http:// or https://"),
    (["--otlp-interval", "5"], "goes with --otlp URL"),
])
def test_otlp_bad_options_are_one_line(args, says):
    done = subprocess.run([lab.ZEROLAYER, "exporter", "--streams", *args], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr


def test_otlp_needs_streams():
    done = subprocess.run([lab.ZEROLAYER, "exporter", "--otlp", "http://127.0.0.1:1/v1/metrics"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "give --streams too" in done.stderr


def test_otlp_headers_file_must_be_roots(tmp_path):
    """A headers file holds secrets: one a user could write is refused."""
    path = tmp_path / "headers"
    path.write_text("Authorization: Bearer zl-secret\n")
    os.chmod(tmp_path, 0o755)
    os.chown(path, 65534, 65534)
    done = subprocess.run([lab.ZEROLAYER, "exporter", "--streams", "--otlp",
                           "http://127.0.0.1:1/v1/metrics", "--otlp-headers-file", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "owned by" in done.stderr or "nobody" in done.stderr, done.stderr
    assert "zl-secret" not in done.stderr


@pytest.mark.parametrize(("path", "exe", "want"), [
    ("/system.slice/litellm.service", "python3.11", ("litellm", None, None)),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/api.service", "node",
     ("api", None, None)),
    ("/system.slice/docker-" + "a" * 64 + ".scope", "vllm", ("vllm", "a" * 64, None)),
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12345678_1234_1234_1234_"
     "123456789abc.slice/cri-containerd-" + "b" * 64 + ".scope", "ollama",
     ("ollama", "b" * 64, "12345678-1234-1234-1234-123456789abc")),
    ("/kubepods/besteffort/pod12345678-1234-1234-1234-123456789abc/" + "c" * 64, "envoy",
     ("envoy", "c" * 64, "12345678-1234-1234-1234-123456789abc")),
    ("/", None, ("unknown", None, None)),
    ("/system.slice/\x1b[31mred.service", "x", ("\\x1b[31mred", None, None)),
])
def test_identity_from_cgroup_paths(path, exe, want):
    who = identity.from_cgroup(path, exe)
    assert (who.service, who.container_id, who.pod_uid) == want


@pytest.mark.parametrize(("otlp", "says"), [
    ("interval_s = 5", "needs url"),
    ('url = "http://127.0.0.1:1/v1/metrics"\ninterval_s = 0', "use 1 to 3600 seconds"),
    ('url = "http://127.0.0.1:1/v1/metrics"\ntemporality = "sometimes"', "temporality"),
    ('url = "http://127.0.0.1:1/v1/metrics"\nheaders = "x"', "unknown key"),
])
def test_otlp_table_errors_are_one_line(tmp_path, otlp, says):
    done = subprocess.run([lab.ZEROLAYER, "exporter", "--config", config(tmp_path, otlp=otlp)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, \
        done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
