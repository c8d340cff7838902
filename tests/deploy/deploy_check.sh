#!/usr/bin/env bash
# Checks deploy/ without installing anything: every example config in deploy/config parses with
# its daemon's --print-config, the systemd units pass `systemd-analyze verify` (with ExecStart
# pointed at the build tree), mount.fs3 is valid sh, and the Ansible playbook passes
# `ansible-playbook --syntax-check`.
#   tests/deploy/deploy_check.sh BUILD_DIR
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:?usage: deploy_check.sh BUILD_DIR}" && pwd)"
declare -A bin=(
  [fs3-mgmtd]=fs3/fs3-mgmtd [fs3-meta]=fs3/fs3-meta [fs3-storage]=fs3/fs3-storage
  [fs3-fuse]=fs3/fs3-fuse [hai-server]=platform/hai-server [hai-agent]=platform/hai-agent
  [hai-health]=platform/hai-health [hai-web]=platform/hai-web
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

echo "== example configs (deploy/config) =="
for name in "${!bin[@]}"; do
  config="$root/deploy/config/$name.toml"
  [ -f "$config" ] || { echo "missing example config $config"; fail=1; continue; }
  args=()
  [ "$name" = fs3-fuse ] && args=(/fs3)  # the mount point comes from the command line
  if "$build/${bin[$name]}" "${args[@]}" --config "$config" --print-config >"$tmp/out" 2>&1; then
    echo "ok    $name.toml"
  else
    echo "FAIL  $name.toml: $(tail -n 1 "$tmp/out")"; fail=1
  fi
done

echo "== systemd units (deploy/systemd) =="
mkdir -p "$tmp/units"
for unit in "$root"/deploy/systemd/*.service "$root"/deploy/systemd/*.mount; do
  name=$(basename "$unit" .service)
  sed "s|/usr/local/bin/$name |$build/${bin[$name]:-} |" "$unit" >"$tmp/units/$(basename "$unit")"
done
# verify exits 0 on some complaints: any output is a failure.
(cd "$tmp/units" && systemd-analyze verify ./*.service ./*.mount) >"$tmp/verify" 2>&1 || true
if [ -s "$tmp/verify" ]; then
  cat "$tmp/verify"; fail=1
else
  echo "ok    $(ls "$tmp/units" | tr '\n' ' ')"
fi
sh -n "$root/deploy/systemd/mount.fs3" && echo "ok    mount.fs3 (sh -n)" || fail=1

echo "== Ansible (deploy/ansible) =="
if (cd "$root/deploy/ansible" &&
    ansible-playbook -i inventory.example.yml --syntax-check site.yml) >"$tmp/ansible" 2>&1; then
  echo "ok    ansible-playbook --syntax-check site.yml"
else
  cat "$tmp/ansible"; fail=1
fi
exit $fail
