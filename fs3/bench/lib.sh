# Shell helpers shared by fs3's benches (sourced after `say` is set; the others use `work`).

# Exits unless run as root (the benches mount with allow_other and drop caches) with TOOL...
bench_prereqs() {  # TOOL...
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { say "$tool is missing (deploy/install-deps.sh installs it)"; exit 1; }
  done
  [ "$(id -u)" -eq 0 ] || { say "run as root (mounts with allow_other, drops caches)"; exit 1; }
}

# Builds libfuse's passthrough_ll (the peer every bench compares with) from the example source
# Debian ships with libfuse3-dev, as $work/passthrough_ll.
build_passthrough() {
  local examples=/usr/share/doc/libfuse3-dev/examples
  # shellcheck disable=SC2046
  gcc -O2 -o "$work/passthrough_ll" "$examples/passthrough_ll.c" -I"$examples" \
    $(pkg-config fuse3 --cflags --libs)
}

wait_mount() {  # DIR
  for _ in $(seq 200); do mountpoint -q "$1" && return 0; sleep 0.05; done
  say "$1 did not mount"; return 1
}

# Mounts passthrough_ll of SRC at MNT in the background; its pid in $! is the caller's to kill.
# OPTIONS: more -o options (xattr: extended attributes passed through).
mount_passthrough() {  # SRC MNT LOG [OPTIONS]
  mkdir -p "$1" "$2"
  "$work/passthrough_ll" -f -o allow_other,source="$1"${4:+,$4} "$2" >"$3" 2>&1 &
  wait_mount "$2"
}

# So that reads come from the filesystem, and writes do not flush the previous phase's pages.
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# Busy and all CPU ticks of the whole machine so far ("busy total"), from /proc/stat.
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
