#!/usr/bin/env bash
# Clang's thread-safety analysis over the translation units the Clang tree (build-fuzz, built by
# tests/fuzz/run.sh in every CI run) does not build: haiscale's torch extension (no torch there)
# and the ibverbs transport (no ibverbs there). Each is checked with Clang -fsyntax-only, with its
# flags from BUILD_DIR/compile_commands.json and -Werror=thread-safety; a guarded member touched
# without its mutex fails the check, as it fails the Clang build everywhere else.
#
#   tests/deploy/thread_safety_check.sh [BUILD_DIR]   # default: build
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
command -v clang++ >/dev/null || { echo "thread_safety_check: clang++ is not installed (deploy/install-deps.sh)"; exit 1; }
[ -f "$build/compile_commands.json" ] || { echo "thread_safety_check: no $build/compile_commands.json (configure first)"; exit 1; }
python3 - "$root" "$build" <<'PY'
import json, shlex, subprocess, sys
root, build = sys.argv[1], sys.argv[2]
wanted = lambda f: f.startswith(f"{root}/haiscale/csrc/") or f == f"{root}/hfreduce/src/transport/verbs.cc"
units = [e for e in json.load(open(f"{build}/compile_commands.json")) if wanted(e["file"])]
failed = 0
for e in units:
    args = shlex.split(e["command"]) if "command" in e else e["arguments"]
    cmd, skip = ["clang++"], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a in ("-o", "-c"):
            skip = True
        elif not (a.startswith(("-W", "-O", "-g")) or a == e["file"]):
            cmd.append(a)
    cmd += ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", e["file"]]
    r = subprocess.run(cmd, cwd=e["directory"], capture_output=True, text=True)
    if r.returncode != 0:
        failed += 1
        print(f"{e['file']}:\n{r.stderr}")
print(f"thread_safety_check: {len(units)} translation units outside the Clang tree, {failed} failing")
sys.exit(1 if failed or not units else 0)
PY
