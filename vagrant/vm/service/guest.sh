#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The service suite inside the VM (suite.sh copies it to the job share and
# boots the VM twice from one disk). systemd is PID 1; zerolayer, its units
# and its container image were baked in by image.sh.
#
#   guest.sh 1   first boot: which hardening options and capabilities
#                zerolayer really needs (transient units), then enable the
#                units and write /etc/zerolayer/zerolayer.toml
#   guest.sh 2   after the reboot: the attachment and the exporter are back,
#                traffic is counted, --watch attaches a new veth, reload
#                converges, a broken file keeps the last good state; then
#                `podman kube play` of packaging/kubernetes
#
# Every check prints "ok: ..." or "FAIL: ..."; the first FAIL ends the boot
# with status 1. Traffic stays on the VM's own NIC pair (eth0 and eth1 share
# a qemu hub with no backend) and on veths made here.
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
BOOT="${1:?usage: guest.sh 1|2}"
SHARE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"   # the job share
CONF=/etc/zerolayer/zerolayer.toml
UNIT=/usr/local/lib/systemd/system/zerolayer.service
ZL=/usr/local/bin/zerolayer
PY=/opt/zerolayer/venv/bin/python

ZL_ME="guest.sh, boot $BOOT"
# shellcheck source=vagrant/vm/log.sh
. "$SHARE/log.sh"   # phase: the rig's own, copied into the share by suite.sh
ok() { echo "ok: $*"; }
fail() {
    echo "FAIL: $*"
    echo "--- the units' journal, last lines:"
    journalctl -u zerolayer.service -u zerolayer-exporter.service -n 25 --no-pager -o short-monotonic | sed 's/^/    /'
    exit 1
}
wait_for() { # SECONDS WHAT COMMAND...: poll COMMAND until it succeeds
    local limit="$1" what="$2" start=$SECONDS
    shift 2
    until "$@" >/dev/null 2>&1; do
        [ $((SECONDS - start)) -lt "$limit" ] || fail "$what: not within $limit s"
        sleep 1
    done
    ok "$what (after $((SECONDS - start)) s)"
}
# The running configuration of IFACE [NETNS], as "ports=9977,9978 on_malformed=drop".
running() {
    # timeout: a check that hangs must fail its wait, not eat the suite's clock.
    timeout 60 $ZL config "$1" ${2:+--netns "$2"} --json |
        $PY -c 'import json, sys; c = json.load(sys.stdin); print("ports=" + ",".join(map(str, c["ports"])), "on_malformed=" + c["on_malformed"])'
}
is_running() { [ "$(running "$1" "${3:-}" 2>/dev/null)" = "$2" ]; }
exported() { scrape "$1" | grep -q "interface=\"$2\",netns=\"$3\""; } # URL IFACE NETNS
scrape() { $PY -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())' "$1"; }
metric() { # URL NAME IFACE: the value of NAME{interface="IFACE"}, as an integer
    scrape "$1" | awk -v m="$2" -v i="interface=\"$3\"" 'index($0, m "{") == 1 && index($0, i) { printf "%d\n", $NF; exit }'
}

# --- boot 1 -------------------------------------------------------------------
# The properties of zerolayer.service's [Service] section that confine it, as
# systemd-run -p arguments (what runs and how it restarts left out).
unit_props() {
    awk '/^\[Service\]/ { s = 1; next } /^\[/ { s = 0 }
         s && /^[A-Z][A-Za-z]*=/ && !/^(Type|Exec|Restart|Timeout|RuntimeDirectoryPreserve)/ { print "-p"; print }' "$UNIT"
}
# attach in a transient unit confined as zerolayer.service is, with EXTRA
# properties; prints its error line, returns its status.
confined_attach() { # IFACE NETNS|"" EXTRA-PROPERTY...
    local iface="$1" ns="$2" out rc
    shift 2
    mapfile -t props < <(unit_props)
    out="$(systemd-run --wait --pipe --collect "${props[@]}" "$@" \
        $ZL attach "$iface" --port 9977 ${ns:+--netns "$ns"} 2>&1)"
    rc=$?
    # zerolayer's own error line, else how systemd saw it end (a signal).
    echo "exit $rc: $(grep -m 1 -e '^zerolayer:' -e 'terminated with:' <<<"$out")"
    $ZL detach "$iface" ${ns:+--netns "$ns"} >/dev/null 2>&1
    return $rc
}
boot1() {
    echo "zerolayer $($ZL --version), podman $(podman --version), kernel $(uname -r), PID 1 $(ps -o comm= -p 1)"
    ip netns add zlh
    ip link add zlh0 type veth peer name zlh1 netns zlh
    ip -n zlh link set zlh1 up
    ip link set zlh0 up
    local line
    # The unit as written must work, with a namespace (setns) in play.
    line="$(confined_attach zlh1 zlh)" || fail "attach confined as zerolayer.service: $line"
    ok "attach in netns, confined as zerolayer.service"
    phase "hardening: the unit's own options"
    # Each option left out of the unit must really break zerolayer, and each
    # capability must be needed. Every case runs, then the first surprise fails.
    local surprises=()
    for opt in ProtectKernelTunables=yes SystemCallFilter=@system-service \
               RestrictNamespaces=yes; do
        if line="$(confined_attach zlh1 zlh -p "$opt")"; then
            echo "SURPRISE: $opt does not break zerolayer: add it to the unit"
            surprises+=("$opt")
        else
            ok "$opt breaks it: $line"
        fi
    done
    phase "hardening: the options left out"
    # Capabilities: without CAP_NET_ADMIN or without CAP_SYS_ADMIN an attach
    # fails (CAP_SYS_ADMIN even outside namespaces: BPF_PROG_GET_FD_BY_ID,
    # with which zerolayer reads what an interface runs, asks for it).
    local all="CAP_BPF CAP_PERFMON CAP_NET_ADMIN CAP_SYS_ADMIN" cap rest
    for cap in CAP_NET_ADMIN CAP_SYS_ADMIN; do
        rest="$(echo " $all " | sed "s/ $cap / /")"
        if line="$(confined_attach zlh0 "" -p "CapabilityBoundingSet=$rest" -p "AmbientCapabilities=$rest")"; then
            echo "SURPRISE: attach works without $cap"
            surprises+=("$cap")
        else
            ok "$cap needed: $line"
        fi
    done
    # CAP_SYS_ADMIN grants what CAP_BPF and CAP_PERFMON grant: the unit keeps
    # them for what they say, and this shows they add nothing beside it.
    line="$(confined_attach zlh1 zlh -p "CapabilityBoundingSet=CAP_NET_ADMIN CAP_SYS_ADMIN" \
        -p "AmbientCapabilities=CAP_NET_ADMIN CAP_SYS_ADMIN")" || fail "attach with CAP_NET_ADMIN CAP_SYS_ADMIN only: $line"
    ok "attach in netns with CAP_NET_ADMIN and CAP_SYS_ADMIN alone: CAP_BPF and CAP_PERFMON are subsumed"
    [ ${#surprises[@]} -eq 0 ] || fail "the unit does not match what zerolayer needs: ${surprises[*]}"
    ip netns del zlh
    phase "capabilities"

    # eth0 is the VM's virtio NIC. on_malformed = "pass" and the port 9555
    # are not the defaults: seeing them after the reboot shows the file was read.
    mkdir -p /etc/zerolayer
    cat >"$CONF" <<'TOML'
[[interface]]
name = "eth0"
ports = [9977]
on_malformed = "pass"

[[interface]]
match = { name = "zlw*" }
ports = [9977]

[exporter]
address = "127.0.0.1"
port = 9555
TOML
    systemctl enable zerolayer.service zerolayer-exporter.service 2>&1
    systemctl is-enabled zerolayer.service zerolayer-exporter.service | tr '\n' ' '
    echo
    phase "enable and configure"
}

# --- boot 2 -------------------------------------------------------------------
boot2() {
    local url=http://127.0.0.1:9555/metrics n
    wait_for 600 "zerolayer.service attached eth0 from the file alone" is_running eth0 "ports=9977 on_malformed=pass"
    systemctl is-active zerolayer.service zerolayer-exporter.service | tr '\n' ' '; echo
    wait_for 120 "the exporter answers on the configured port 9555" scrape "$url"
    [ "$(metric "$url" zerolayer_attached eth0)" = 1 ] || fail "zerolayer_attached{interface=eth0} is not 1"
    ok "zerolayer_attached{interface=\"eth0\"} 1"
    phase "back after the reboot"

    # Token datagrams from eth1 (in namespace peer) to eth0, over the hub.
    ip netns add peer
    ip link set eth1 netns peer
    ip -n peer addr add 10.77.0.2/24 dev eth1
    ip -n peer link set eth1 up
    ip addr add 10.77.0.1/24 dev eth0
    ip link set eth0 up
    ip netns exec peer $PY -c '
import socket
from pyxdp.proto import frames
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(20):
    s.sendto(frames.encode(frames.FrameType.TOKEN, f"tok{i}"), ("10.77.0.1", 9977))
' || fail "sending token datagrams"
    n="$(metric "$url" zerolayer_token_datagrams_total eth0)"
    [ "$n" -ge 20 ] 2>/dev/null || fail "token datagrams counted on eth0: '$n', wanted 20 or more"
    ok "zerolayer_token_datagrams_total{interface=\"eth0\"} $n after 20 sent"
    phase "traffic counted"

    ip link add zlw0 type veth peer name zlv0
    ip link set zlw0 up
    wait_for 300 "--watch attached zlw0, a veth made after boot" is_running zlw0 "ports=9977 on_malformed=drop"
    phase "new veth"

    # An edit, then `systemctl reload`: eth0 gets a second port and an
    # interface in a namespace (setns under the unit's confinement).
    ip netns add zlns
    ip link add zlq0 type veth peer name zlp0 netns zlns
    ip -n zlns link set zlp0 up
    cat >>"$CONF" <<'TOML'

[[interface]]
match = { name = "zlp*" }
netns = "zlns"
ports = [9988]
TOML
    sed -i '0,/^ports = \[9977\]$/s//ports = [9977, 9978]/' "$CONF"
    systemctl reload zerolayer.service
    wait_for 300 "reload: eth0 has ports 9977 and 9978" is_running eth0 "ports=9977,9978 on_malformed=pass"
    wait_for 300 "reload: zlp0 in netns zlns attached" is_running zlp0 "ports=9988 on_malformed=drop" zlns
    wait_for 60 "the exporter shows zlp0 in netns zlns" exported "$url" zlp0 zlns
    phase "reload converges"

    local cursor
    cursor="$(journalctl -n 0 --show-cursor -q | sed -n 's/^-- cursor: //p')"
    cp "$CONF" "$CONF.good"
    echo 'ports = [' >>"$CONF"
    systemctl reload zerolayer.service
    sleep 5
    systemctl is-active -q zerolayer.service || fail "zerolayer.service died on a broken file"
    is_running eth0 "ports=9977,9978 on_malformed=pass" || fail "a broken file changed eth0: $(running eth0)"
    is_running zlw0 "ports=9977 on_malformed=drop" || fail "a broken file changed zlw0"
    # Every line zerolayer itself wrote since (systemd's own "Reloading" lines left out).
    mapfile -t lines < <(journalctl --after-cursor "$cursor" -o cat -q \
        _PID="$(systemctl show -P MainPID zerolayer.service)")
    printf '    journal: %s\n' "${lines[@]}"
    [ ${#lines[@]} -eq 1 ] || fail "the broken file logged ${#lines[@]} lines, wanted 1"
    ok "a broken file keeps the last good state and logs one line"
    mv "$CONF.good" "$CONF"
    phase "broken file"

    hostile_files
    exporter_read_only "$url"
    streams_under_the_unit "$url"

    systemctl stop zerolayer.service zerolayer-exporter.service
    is_running eth0 "ports=9977,9978 on_malformed=pass" || fail "stopping zerolayer.service detached eth0"
    ok "systemctl stop leaves the attachments (detach_on_stop is false)"
    for i in eth0 zlw0; do $ZL detach "$i" >/dev/null || fail "detach $i"; done
    $ZL detach zlp0 --netns zlns >/dev/null || fail "detach zlp0"
    phase "stop"

    kube
}

# Files an attacker would plant where root reads its configuration
# (docs/service.md, "What root trusts"): each is refused in one line, and
# --watch stays up, on its last good configuration, in the same process.
hostile_files() {
    local pid cursor kind lines
    pid="$(systemctl show -P MainPID zerolayer.service)"
    [ "$(systemctl show -P MemoryMax zerolayer.service)" != infinity ] || fail "zerolayer.service has no MemoryMax"
    cp "$CONF" "$CONF.good"
    sleep 3  # the good file the phase before put back is read first (its "reloaded" line)
    for kind in world-writable foreign-owned dev-zero fifo deep huge; do
        cursor="$(journalctl -n 0 --show-cursor -q | sed -n 's/^-- cursor: //p')"
        # Made beside it, then renamed over it: --watch never sees the file
        # missing (which would be a version of its own, logged too).
        rm -f "$CONF.new"
        case "$kind" in
            world-writable) cp "$CONF.good" "$CONF.new"; chmod 0666 "$CONF.new" ;;
            foreign-owned) cp "$CONF.good" "$CONF.new"; chown nobody "$CONF.new" ;;
            dev-zero) ln -s /dev/zero "$CONF.new" ;;
            fifo) mkfifo "$CONF.new" ;;
            deep) $PY -c 'print("x = " + "[" * 5000 + "]" * 5000)' >"$CONF.new" ;;
            huge) head -c 2097152 /dev/zero | tr '\0' '#' >"$CONF.new" ;;
        esac
        mv -Tf "$CONF.new" "$CONF"
        systemctl reload zerolayer.service
        sleep 3
        [ "$(systemctl show -P MainPID zerolayer.service)" = "$pid" ] || fail "$kind file: zerolayer.service died or restarted"
        is_running eth0 "ports=9977,9978 on_malformed=pass" || fail "$kind file changed eth0: $(running eth0)"
        # Its refusal, and nothing else but a late "reloaded" of the good file.
        mapfile -t lines < <(journalctl --after-cursor "$cursor" -o cat -q _PID="$pid" | grep -v '^reloaded ')
        printf '    journal: %s\n' "${lines[@]}"
        [ ${#lines[@]} -eq 1 ] || fail "the $kind file logged ${#lines[@]} lines, wanted 1"
        ok "$kind file: refused in one line, same process, last good configuration kept"
    done
    mv -Tf "$CONF.good" "$CONF"
    echo "    memory of zerolayer.service: $(systemctl show -P MemoryCurrent zerolayer.service) bytes, max $(systemctl show -P MemoryMax zerolayer.service)"
    phase "hostile files"
}

# A listener killed with -9 leaves its statistics file in /run/zerolayer;
# the exporter, which sees /run/zerolayer read-only, must still answer.
exporter_read_only() { # URL
    local code
    timeout 120 $ZL listen eth0 >/dev/null 2>&1 &
    sleep 15
    pkill -9 -f "zerolayer listen eth0" || fail "no zerolayer listen to kill"
    wait 2>/dev/null
    ls -R /run/zerolayer/xsk 2>/dev/null | sed 's/^/    \/run\/zerolayer\/xsk: /'
    code="$($PY -c 'import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=20).status)
except urllib.error.HTTPError as e:
    print(e.code)' "$1")"
    [ "$code" = 200 ] || fail "/metrics answered $code after a listener was killed with -9"
    ok "/metrics answers 200 from a read-only /run/zerolayer after kill -9 of a listener"
    phase "exporter, read-only /run/zerolayer"
}

# --- token streams --------------------------------------------------------------
MOCK_PORT=8765
# A mock OpenAI/Anthropic server from PyPI (llm-mock-api, in the venv with the
# test dependencies), chunks 20 ms apart; its pid on stdout.
start_mock() {
    (cd /tmp && exec /opt/zerolayer/venv/bin/llm-mock-api start -H 127.0.0.1 -p "$MOCK_PORT" \
        -l 20 -c 5 -f "zerolayer in a VM, streaming." --log-level error) >/dev/null 2>&1 &
    echo $!
}
listening() { $PY -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$1"; }
# One OpenAI-style streaming request read to its end, by Python's own HTTP
# client; prints the content events it read.
stream_once() {
    $PY - "$MOCK_PORT" <<'PYEOF'
import json, sys, urllib.request
body = {"model": "gpt-test", "stream": True, "messages": [{"role": "user", "content": "hello"}]}
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/chat/completions",
                             data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=60) as answer:
    print(sum(1 for line in answer if line.startswith(b"data: ") and b'"content"' in line))
PYEOF
}
# The exporter at URL counted a first chunk on both sides of a stream.
streams_seen() {
    local text
    text="$(scrape "$1")" || return 1
    grep -q '^zerolayer_stream_time_to_first_chunk_seconds_count{.*side="client"' <<<"$text" &&
        grep -q '^zerolayer_stream_time_to_first_chunk_seconds_count{.*side="server"' <<<"$text"
}
# A stream between two processes of the VM, seen by the exporter at URL.
one_stream_seen() { # URL WHO
    local mock n
    mock="$(start_mock)"
    wait_for 120 "the mock server listens" listening "$MOCK_PORT"
    n="$(stream_once)" || { kill "$mock"; fail "the streaming request failed"; }
    echo "$n" >/tmp/zl-stream-chunks
    wait_for 30 "$2 saw both sides of a stream of $n chunks" streams_seen "$1"
    kill "$mock" 2>/dev/null; wait "$mock" 2>/dev/null
    scrape "$1" | grep -E '^zerolayer_(streams_total|stream_time_to_first_chunk_seconds_count)' | sed 's/^/    /'
}

# [streams] enabled = true: the exporter unit, confined as shipped, loads the
# probes and serves the histograms, and pushes them over OTLP to a receiver
# (tests/support/otlp_receiver.py: OpenTelemetry's own protobuf classes)
# started only after the unit has a stream to export: the exports fail
# first (counted), then get through, without a restart. (Debian's
# Prometheus builds, 2.42 and 2.53.3+ds1, have no OTLP receiver.)
OTLP_PORT=4318
streams_under_the_unit() { # URL
    printf '\n[streams]\nenabled = true\n\n[streams.otlp]\nurl = "http://127.0.0.1:%s/v1/metrics"\ninterval_s = 2\n' \
        "$OTLP_PORT" >>"$CONF"
    systemctl restart zerolayer-exporter.service
    wait_for 300 "the exporter with [streams] answers" scrape "$1"
    one_stream_seen "$1" "zerolayer-exporter.service"
    # (nothing is exported before there is a series to export)
    wait_for 60 "the exporter counts OTLP exports to a receiver not yet there" otlp_dropped "$1"
    $PY "$SHARE/otlp_receiver.py" "$OTLP_PORT" /tmp/otlp.json &
    OTLP_RECEIVER=$!
    wait_for 60 "the OTLP receiver listens" listening "$OTLP_PORT"
    otlp_received
    kill "$OTLP_RECEIVER" 2>/dev/null; wait "$OTLP_RECEIVER" 2>/dev/null
    phase "token streams under the exporter unit, pushed over OTLP"
}
otlp_dropped() { [ "$(scrape "$1" | awk '/^zerolayer_otlp_dropped_total\{reason="unreachable"\}/ { printf "%d", $NF }')" -ge 1 ]; }
# The receiver's summary of the latest export: KEY's count (metric|service|side).
otlp_count() {
    $PY -c 'import json, sys; print(json.load(open("/tmp/otlp.json"))["metrics"].get(sys.argv[1], 0))' "$1" 2>/dev/null || echo 0
}
# What one_stream_seen streamed (one stream, its client and the mock both run
# by this job, zl-job.service: the service both resources name).
otlp_received() {
    has_both() {
        [ "$(otlp_count 'gen_ai.client.operation.time_to_first_chunk|zl-job|client')" = 1 ] &&
            [ "$(otlp_count 'zerolayer.stream.time_to_first_chunk|zl-job|server')" = 1 ]
    }
    wait_for 60 "the receiver got the stream's first chunk, both sides, service zl-job" has_both
    local n g
    n="$(cat /tmp/zl-stream-chunks)"
    g="$(otlp_count 'gen_ai.client.operation.time_per_output_chunk|zl-job|client')"
    [ "$g" -eq $((n - 1)) ] || [ "$g" -eq $((n - 2)) ] \
        || fail "the export has $g chunk gaps of the client's stream, which read $n chunks"
    ok "the export has $g chunk gaps for the $n chunks the client read, under GenAI's names"
    $PY -c 'import json; e = json.load(open("/tmp/otlp.json"))["executables"]["zl-job"]; assert e.startswith("python3"), e' \
        || fail "the export does not name zl-job's executable"
    ok "service.name is the job's unit (zl-job), process.executable.name its python"
}

# --- podman kube play -------------------------------------------------------------
kube() {
    local url=http://127.0.0.1:9435/metrics vol
    podman kube play --configmap "$SHARE/configmap.yaml" "$SHARE/daemonset.yaml" 2>&1 | tail -n 3
    podman pod ps --format '    pod {{.Name}} {{.Status}} containers={{.NumberOfContainers}}'
    wait_for 600 "the pod attached eth0 from the ConfigMap" is_running eth0 "ports=9977 on_malformed=drop"
    wait_for 300 "the pod's exporter is scraped on 9435" scrape "$url"
    [ "$(metric "$url" zerolayer_attached eth0)" = 1 ] || fail "pod exporter: zerolayer_attached{interface=eth0} is not 1"
    ok "pod exporter: zerolayer_attached{interface=\"eth0\"} 1"
    podman ps --format '    {{.Names}} {{.Status}}'
    # podman runs the liveness probe as a healthcheck inside the container.
    echo "    exporter healthcheck: $(podman inspect --format '{{json .Config.Healthcheck}}' zerolayer-pod-exporter)"
    podman healthcheck run zerolayer-pod-exporter || fail "the exporter's healthcheck (its liveness probe) fails"
    ok "the exporter's liveness probe passes as a podman healthcheck"
    phase "kube play"
    one_stream_seen "$url" "the pod's exporter ([streams] in the ConfigMap, hostPID)"
    phase "token streams in the pod"
    podman exec zerolayer-pod-exporter /opt/zerolayer/venv/bin/python -c \
        'import opentelemetry.exporter.otlp.proto.http.metric_exporter' \
        || fail "the container image lacks the otlp extra"
    ok "the container image has OpenTelemetry's SDK and OTLP exporter (the otlp extra)"

    # What the kubelet does when a ConfigMap changes: the mounted file is
    # rewritten in place; podman keeps the data in a volume of that name.
    vol="$(podman volume inspect zerolayer-config --format '{{.Mountpoint}}')" || fail "no volume zerolayer-config"
    sed -i 's/^ports = \[9977\]$/ports = [9977, 9979]/' "$vol/zerolayer.toml"
    wait_for 300 "ConfigMap change: eth0 has ports 9977 and 9979" is_running eth0 "ports=9977,9979 on_malformed=drop"
    phase "ConfigMap change"

    podman kube down "$SHARE/daemonset.yaml" 2>&1 | tail -n 2
    [ -z "$(podman pod ps -q)" ] || fail "pods left after kube down: $(podman pod ps)"
    ok "podman kube down removed the pod; eth0 after it: $(running eth0 2>&1 || true)"
    $ZL detach eth0 >/dev/null 2>&1 || true
    phase "kube down"
}

case "$BOOT" in
    1) boot1 ;;
    2) boot2 ;;
    *) fail "usage: guest.sh 1|2" ;;
esac
echo "== boot $BOOT passed in $SECONDS s"
