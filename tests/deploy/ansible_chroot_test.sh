#!/usr/bin/env bash
# Runs deploy/ansible/site.yml for real against a throwaway Debian 12 host: a root made with
# debootstrap, reached through Ansible's chroot connection, in every group (management, storage,
# compute). The second run must change nothing. Then it checks what was installed: the binaries
# run with the libraries the playbook installed, the generated configs parse, the units verify
# and are enabled, Prometheus' config names every daemon. Root; needs the Debian mirror.
#   tests/deploy/ansible_chroot_test.sh BUILD_DIR
# Environment: FF_DEBIAN_MIRROR (default http://deb.debian.org/debian), FF_DEBOOTSTRAP_CACHE
# (a directory keeping the debootstrap tarball between runs; default /var/cache/fireflyer-test),
# FF_KEEP_CHROOT=1 (leave the root for a look).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:?usage: ansible_chroot_test.sh BUILD_DIR}" && pwd)"
[ "$(id -u)" -eq 0 ] || { echo "ansible_chroot_test: needs root (chroot, mounts)" >&2; exit 1; }
mirror=${FF_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${FF_DEBOOTSTRAP_CACHE:-/var/cache/fireflyer-test}
work=$(mktemp -d /tmp/ff-ansible-host.XXXXXX)
host="$work/root"
say() { echo "ansible_chroot_test: $*"; }
cleanup() {
  for m in "$host/var/cache/apt/archives" "$host/proc" "$host/dev/pts" "$host/dev"; do
    mountpoint -q "$m" 2>/dev/null && umount -l "$m"
  done
  [ "${FF_KEEP_CHROOT:-0}" = 1 ] && { say "kept $host"; return; }
  if grep -q " $work/" /proc/mounts; then
    say "not removing $work: something is still mounted under it"; return
  fi
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

# ---- the throwaway host: Debian 12 with Python (what Ansible needs on a host) and systemd ----
packages=python3,systemd,ca-certificates
mkdir -p "$cache" "$host"
tarball="$cache/bookworm-minbase-$(echo "$packages" | md5sum | cut -c1-8).root.tgz"
start=$(date +%s)
if [ -s "$tarball" ]; then
  tar -xzf "$tarball" -C "$host"
else
  say "debootstrap bookworm into $host (kept as $tarball for the next run)"
  debootstrap --variant=minbase --include="$packages" bookworm "$host" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || { tail -n 20 "$work/debootstrap.log"; exit 1; }
  rm -rf "$host"/var/cache/apt/archives/*.deb
  tar -czf "$tarball.tmp.$$" -C "$host" . && mv "$tarball.tmp.$$" "$tarball"
fi
say "host root ready in $(( $(date +%s) - start )) s"
mount -t proc proc "$host/proc"
mount --bind /dev "$host/dev"
cp /etc/resolv.conf "$host/etc/resolv.conf"
# The packages this machine already downloaded (deploy/install-deps.sh leaves them in apt's
# cache) are not fetched again: the throwaway host's apt sees this machine's archive through an
# overlay, so what it adds or cleans there stays in $work. Only what is missing comes from the
# mirror (this halves the playbook's first run: 343 s against 572 s here).
if [ -d /var/cache/apt/archives ]; then
  mkdir -p "$work/apt-upper" "$work/apt-work" "$host/var/cache/apt/archives"
  if mount -t overlay overlay \
      -o "lowerdir=/var/cache/apt/archives,upperdir=$work/apt-upper,workdir=$work/apt-work" \
      "$host/var/cache/apt/archives" 2>"$work/overlay.log"; then
    say "$(find /var/cache/apt/archives -maxdepth 1 -name '*.deb' | wc -l) packages from this machine's apt cache"
  else
    say "no overlay of this machine's apt cache ($(cat "$work/overlay.log")): every package from $mirror"
  fi
fi
# Package scripts must not start services in the chroot (a real host's systemd would).
printf '#!/bin/sh\nexit 101\n' >"$host/usr/sbin/policy-rc.d"
chmod +x "$host/usr/sbin/policy-rc.d"

# ---- the inventory: one host in every group ------------------------------------------------
mkdir -p "$work/inventory"
cat >"$work/inventory/hosts.yml" <<YAML
all:
  vars:
    fireflyer_build_dir: $build
    fireflyer_cluster_name: chroot-test
    fs3_replication: 1
    fireflyer_install_venv: false   # torch from PyPI: several GB, not for a test
    fireflyer_ha: true              # the control plane on etcd (a one-member cluster here)
  children:
    management: {hosts: {node1: }}
    storage: {hosts: {node1: }}
    compute: {hosts: {node1: }}
  hosts:
    node1:
      ansible_connection: community.general.chroot
      ansible_host: $host
      fireflyer_address: 127.0.0.1
      hai_zone: A
      hai_leaf: A-leaf00
      hai_gpus: 0
      fs3_storage_targets: [{id: 1, path: /srv/fs3/target1}]
YAML

run_playbook() {  # LOG
  (cd "$root/deploy/ansible" && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 \
    ansible-playbook -i "$work/inventory/hosts.yml" site.yml) >"$1" 2>&1
}
recap() { sed -n '/PLAY RECAP/,$p' "$1"; }

start=$(date +%s)
if ! run_playbook "$work/run1.log"; then
  grep -E "fatal:|failed:|ERROR" -A5 "$work/run1.log" | head -n 60 || true
  say "FAIL: the first run failed"; exit 1
fi
say "first run: $(recap "$work/run1.log" | grep node1) ($(( $(date +%s) - start )) s)"
grep -q "node1 .*changed=[1-9]" "$work/run1.log" || { say "FAIL: the first run changed nothing"; exit 1; }

start=$(date +%s)
run_playbook "$work/run2.log" || { recap "$work/run2.log"; say "FAIL: the second run failed"; exit 1; }
say "second run: $(recap "$work/run2.log" | grep node1) ($(( $(date +%s) - start )) s)"
if ! recap "$work/run2.log" | grep -E "^(node1|localhost) " | grep -q "changed=0" ||
   recap "$work/run2.log" | grep -E "^(node1|localhost) " | grep -vq "changed=0"; then
  grep -E "^changed:" -B2 "$work/run2.log" | head -n 40 || true
  say "FAIL: the second run changed something (not idempotent)"; exit 1
fi

# ---- what was installed ----------------------------------------------------------------------
fail=0
check() {  # DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@" >"$work/check.out" 2>&1; then echo "ok    $what"; else
    echo "FAIL  $what:"; sed 's/^/      /' "$work/check.out" | tail -n 8; fail=1; fi
}
in_host() { chroot "$host" "$@"; }
for b in fs3 fs3-mgmtd fs3-meta fs3-storage fs3-fuse hai hai-server hai-agent hai-health; do
  check "$b runs on the host (its libraries are installed)" in_host "/usr/local/bin/$b" --help
done
for d in fs3-mgmtd fs3-meta fs3-storage hai-server hai-agent hai-health; do
  check "/etc/fireflyer/$d.toml parses" in_host "/usr/local/bin/$d" --config "/etc/fireflyer/$d.toml" --print-config
done
check "fs3-fuse.toml parses" in_host /usr/local/bin/fs3-fuse /fs3 --config /etc/fireflyer/fs3-fuse.toml --print-config
check "the units verify on the host" sh -c "chroot '$host' sh -c 'systemd-analyze verify \
  /etc/systemd/system/fs3-*.service /etc/systemd/system/hai-*.service /etc/systemd/system/fs3.mount' 2>&1 |
  tee /dev/stderr | (! grep -q .)"
for u in fs3-mgmtd.service fs3-meta.service fs3-storage.service hai-server.service hai-agent.service \
         hai-health.service hai-web.service fs3.mount prometheus.service; do
  check "$u enabled" systemctl --root="$host" is-enabled --quiet "$u"
done
check "hai-agent is node A-leaf00-n00" grep -q 'node = "A-leaf00-n00"' "$host/etc/fireflyer/hai-agent.toml"
# TLS (fireflyer_tls, on by default): the authority and the node's files, every daemon told.
for d in fs3-mgmtd fs3-meta fs3-storage fs3-fuse hai-server hai-agent hai-health hai-web; do
  check "$d runs TLS ([tls] in its config)" grep -qx '\[tls\]' "$host/etc/fireflyer/$d.toml"
done
check "the node's certificate verifies against the authority, for its address" \
  openssl verify -CAfile "$host/etc/fireflyer/tls/ca.pem" -verify_ip 127.0.0.1 "$host/etc/fireflyer/tls/node.pem"
check "the node's key is 0640 root:fireflyer-tls" sh -c "[ \"\$(chroot '$host' stat -c '%a %U %G' /etc/fireflyer/tls/node.key)\" = '640 root fireflyer-tls' ]"
check "fs3 and hai may read it" sh -c "chroot '$host' id -nG fs3 | grep -qw fireflyer-tls && chroot '$host' id -nG hai | grep -qw fireflyer-tls"
check "the authority's key stays on the controller" sh -c "[ ! -e '$host/etc/fireflyer/tls/ca.key' ] && [ -s '$work/inventory/secrets/tls/ca.key' ]"
check "users' hai finds the authority" grep -q "FF_TLS_CA_FILE=/etc/fireflyer/tls/ca.pem" "$host/etc/profile.d/fireflyer-tls.sh"
# The highly available control plane: etcd installed and configured, the replicas on it.
check "etcd installed (Debian's etcd-server)" in_host etcd --version
check "etcd's member settings" grep -q 'ETCD_INITIAL_CLUSTER="node1=http://127.0.0.1:2380"' "$host/etc/default/etcd"
check "etcd's pre-vote (a healed member does not depose the leader)" grep -q 'ETCD_PRE_VOTE="true"' "$host/etc/default/etcd"
check "etcd.service enabled" systemctl --root="$host" is-enabled --quiet etcd.service
for d in fs3-mgmtd fs3-meta hai-server; do
  check "$d keeps its state in etcd" grep -q 'engine = "etcd"' "$host/etc/fireflyer/$d.toml"
done
check "Prometheus scrapes etcd" grep -q "job_name: etcd" "$host/etc/prometheus/prometheus.yml"
check "Prometheus' config and rules (promtool)" in_host promtool check config /etc/prometheus/prometheus.yml
for job in hai-server hai-web hai-agent hai-health fs3-mgmtd fs3-meta fs3-storage fs3-fuse; do
  check "Prometheus scrapes $job" grep -q "job_name: $job" "$host/etc/prometheus/prometheus.yml"
done
check "the agent token is shared (0640 root:hai)" sh -c "[ \"\$(chroot '$host' stat -c '%a %U %G' /etc/fireflyer/agent.token)\" = '640 root hai' ]"
check "storage target directory owned by fs3" sh -c "[ \"\$(chroot '$host' stat -c %U /srv/fs3/target1)\" = fs3 ]"
check "haiscale and fs3client installed for jobs" test -f "$host/usr/local/lib/fireflyer/python/fs3client/libfs3c.so" -a -f "$host/usr/local/lib/fireflyer/python/haiscale/__init__.py"
check "mount.fs3 installed" test -x "$host/usr/sbin/mount.fs3"
check "jobs import haiscale's pieces and fs3client from there" test -f "$host/usr/local/lib/fireflyer/python/haiscale/ddp.py" -a -f "$host/usr/local/lib/fireflyer/python/fs3client/data.py"
check "they came as wheels (pip's metadata beside them)" sh -c "ls -d '$host'/usr/local/lib/fireflyer/python/haiscale-*.dist-info '$host'/usr/local/lib/fireflyer/python/fs3client-*.dist-info '$host'/usr/local/lib/fireflyer/python/hai_job-*.dist-info"
check "haiscale's extension is in its wheel" sh -c "ls '$host'/usr/local/lib/fireflyer/python/haiscale/_C.*.so"

# The installed daemons start from their installed configs (the generated cluster.toml included,
# and the node's TLS files, which they read and check as they start), each alone in a network
# namespace, then stop on SIGTERM.
starts() {  # DAEMON [--set ...]
  local d=$1; shift
  rm -f "$host/tmp/$d.ready"
  unshare --net chroot "$host" "/usr/local/bin/$d" --config "/etc/fireflyer/$d.toml" \
    --ready-file "/tmp/$d.ready" "$@" >"$work/$d.log" 2>&1 &
  local pid=$! i
  for i in $(seq 100); do [ -s "$host/tmp/$d.ready" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  kill -TERM $pid 2>/dev/null; wait $pid; local code=$?
  [ -s "$host/tmp/$d.ready" ] && [ $code -eq 0 ] || { cat "$work/$d.log"; return 1; }
}
check "hai-server starts from its config and cluster.toml" starts hai-server --set hai.data_dir=/tmp/hai-server-data
check "fs3-mgmtd starts from its config" starts fs3-mgmtd --set mgmtd.data_dir=/tmp/fs3-mgmtd-data
# (fs3-meta opens its namespace as it starts: alone in its namespace, without etcd, on RocksDB.)
check "fs3-meta starts from its config" starts fs3-meta --set meta.engine=rocksdb --set meta.data_dir=/tmp/fs3-meta-data
check "hai-web starts from its config (its library installed)" starts hai-web
[ $fail -eq 0 ] && say "PASS" || say "FAIL"
exit $fail
