#!/usr/bin/env bash
# deploy/netlab.py on a small topology (one zone, 2 leaves under 1 spine, 4 hosts): it builds,
# hosts reach each other across the emulated switches and nothing else, a leaf's uplink is the
# bottleneck it is shaped to be, traffic classes share a congested uplink by their weights, and
# `down` removes every namespace (also what a crashed run left). Root only (namespaces, tc).
#   tests/deploy/netlab_test.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=tests/deploy/labtest.sh
source "$root/tests/deploy/labtest.sh"
lab_test nlt "network namespaces"
tmp=$(mktemp -d)
trap 'lab down >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# 4 hosts of 400 Mb/s (x 0.001) under two leaves; each leaf's uplink 100 Mb/s (2:1 oversubscribed
# by 4x: the cross-leaf path is the bottleneck).
cat >"$tmp/small.toml" <<'TOML'
name = "small"
node_link_gbps = 400
cross_zone_gbps = 400
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "L0"
  nodes = 2
  uplink_gbps = 100
  [[zones.leaves]]
  name = "L1"
  nodes = 2
  uplink_gbps = 100
TOML

# A TCP flow for SECONDS from host A to host B's address with DSCP; prints Mb/s received.
cat >"$tmp/flow.py" <<'PY'
import socket, sys, threading, time
role = sys.argv[1]
if role == "sink":  # sink ADDRESS PORT SECONDS
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[2], int(sys.argv[3]))); s.listen(1)
    s.settimeout(30)  # a sender that never came fails the test instead of hanging it
    print("ready", flush=True)
    c, _ = s.accept(); total = 0; start = None; end = time.monotonic() + 3600
    c.settimeout(float(sys.argv[4]) + 10)
    while True:
        d = c.recv(1 << 16)
        if not d: break
        if start is None: start = time.monotonic()
        total += len(d)
    print(f"{8 * total / (time.monotonic() - start) / 1e6:.1f}", flush=True)
else:  # send ADDRESS PORT SECONDS DSCP
    c = socket.socket()
    c.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(sys.argv[5]) << 2)
    c.connect((sys.argv[2], int(sys.argv[3])))
    buf = b"x" * (1 << 16); end = time.monotonic() + float(sys.argv[4])
    while time.monotonic() < end:
        c.sendall(buf)
    c.close()
PY

lab up "$tmp/small.toml" --scale 0.001
mapfile -t hosts < <(lab hosts)
[ "${#hosts[@]}" -eq 4 ] || fail "expected 4 hosts, got: ${hosts[*]}"
addr() { lab hosts | awk -v n="$1" '$1 == n { print $2 }'; }
for h in L0-n00 L0-n01 L1-n00 L1-n01; do
  a=$(addr "$h")
  [[ "$a" == 198.18.* ]] || fail "$h has address '$a', not one in 198.18.0.0/15"
  # Its only route is the lab's own subnet: nothing leaves the machine.
  routes=$(lab exec "$h" -- ip route show)
  [ "$(echo "$routes" | wc -l)" -eq 1 ] && [[ "$routes" == 198.18.0.0/15* ]] || fail "$h routes: $routes"
  if lab exec "$h" -- ip route get 1.1.1.1 >/dev/null 2>&1; then fail "$h has a route out"; fi
done

# flows PAIRS...: each pair "SRC DST PORT DSCP" sends for 4 s at once; prints each one's Mb/s.
flows() {
  local i=0 pids=() outs=()
  for f in "$@"; do
    read -r src dst port dscp <<<"$f"
    rm -f "$tmp/sink$i"
    lab exec "$dst" -- /usr/bin/python3 "$tmp/flow.py" sink "$(addr "$dst")" "$port" 4 >"$tmp/sink$i" &
    pids+=($!) outs+=("$tmp/sink$i")
    for _ in $(seq 100); do grep -q ready "$tmp/sink$i" 2>/dev/null && break; sleep 0.05; done
    i=$((i + 1))
  done
  i=0
  for f in "$@"; do
    read -r src dst port dscp <<<"$f"
    lab exec "$src" -- /usr/bin/python3 "$tmp/flow.py" send "$(addr "$dst")" "$port" 4 "$dscp" &
    i=$((i + 1))
  done
  wait
  for o in "${outs[@]}"; do tail -n 1 "$o"; done
}

echo "== one flow within a leaf, then one across leaves"
same=$(flows "L0-n00 L0-n01 5001 0")
cross=$(flows "L0-n00 L1-n00 5002 0")
echo "within leaf L0: $same Mb/s; across leaves: $cross Mb/s (uplink shaped to 100 Mb/s)"
python3 - "$same" "$cross" <<'PY' || fail "the uplink is not the bottleneck"
import sys
same, cross = map(float, sys.argv[1:])
assert 60 <= cross <= 115, f"cross-leaf {cross} Mb/s: not near the 100 Mb/s uplink"
assert same >= 2.5 * cross, f"within a leaf {same} Mb/s: not well above the uplink's {cross}"
PY
lab status >"$tmp/status"
grep -q "leaf L0 - spine" "$tmp/status" || fail "status does not list the uplinks: $(cat "$tmp/status")"

echo "== classes off: two flows with different DSCP share one queue of the uplink"
mapfile -t off < <(flows "L0-n00 L1-n00 5003 34" "L0-n01 L1-n01 5004 0")
echo "hfreduce-marked ${off[0]} Mb/s, unmarked ${off[1]} Mb/s (TCP in one FIFO: any split)"
python3 - "${off[@]}" <<'PY' || fail "two flows through one 100 Mb/s uplink"
import sys
a, b = map(float, sys.argv[1:])
assert 70 <= a + b <= 115, f"{a} + {b}: not the one uplink's rate"
PY

echo "== classes on: the HFReduce class (weight 4, first to spare rate) gets most of the uplink against best effort (1)"
lab up "$tmp/small.toml" --scale 0.001 --classes
mapfile -t on < <(flows "L0-n00 L1-n00 5005 34" "L0-n01 L1-n01 5006 0")
echo "hfreduce-marked ${on[0]} Mb/s, unmarked ${on[1]} Mb/s"
python3 - "${on[@]}" <<'PY' || fail "the weighted classes do not favour the HFReduce class"
import sys
a, b = map(float, sys.argv[1:])
assert a >= 3.0 * b, f"{a} vs {b}: expected at least 3:1"
PY
# The marked flow went through the HFReduce class's queue on the leaf's uplink.
sent=$(tc -n "$name-sw" -s class show dev u0.0a | awk '/class htb 1:10 /{f=1} f && /Sent/{print $2; exit}')
[ "${sent:-0}" -gt 10000000 ] || fail "the HFReduce class sent ${sent:-0} bytes on the uplink"

echo "== down removes everything; a crashed lab's leftovers are cleaned by the next up"
lab down
if ip netns list | grep -q "^$name-"; then fail "namespaces left: $(ip netns list | grep "^$name-")"; fi
lab up "$tmp/small.toml" >/dev/null 2>&1
rm -f "/run/netlab/$name.json"  # as if the tool had died: state gone, namespaces left
lab up "$tmp/small.toml" 2>"$tmp/err" || fail "up over leftovers: $(cat "$tmp/err")"
grep -q "removed what an earlier" "$tmp/err" || fail "up did not clear the leftovers"
lab down
[ -z "$(ip netns list | grep "^$name-" || true)" ] || fail "namespaces left after down"
if lab up "$tmp/missing.toml" 2>"$tmp/err"; then fail "up of a missing file succeeded"; fi
grep -q "No such file" "$tmp/err" || fail "unclear error: $(cat "$tmp/err")"
[ -z "$(ip netns list | grep "^$name-" || true)" ] || fail "a failed up left namespaces"
echo "PASS: netlab builds, shapes, classifies and tears down"
