#!/usr/bin/env bash
# The job environment has one table: platform/README.md's "Environment of every rank". What
# hai-server renders for each rank (platform/server/src/agent_protocol.cc) and hai-agent adds
# (platform/agent/src/agent.cc) is exactly the table's names, and every HAI_* name that the job
# helpers (platform/include/platform/hai_job.h, platform/python/hai_job.py) and haiscale read is
# one of them.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
table=$(sed -n '/^Environment of every rank/,/^$/d; /^| variable | value |/,/^$/p' platform/README.md |
        grep -E '^\| `' | cut -d'|' -f2 | grep -oE '`[A-Z_]+`' | tr -d '`' | sort -u)
[ -n "$table" ] || { echo "job_env_check: no table found in platform/README.md"; exit 1; }
rendered=$(grep -hoE 'env\["[A-Z_]+"\]' platform/server/src/agent_protocol.cc platform/agent/src/agent.cc |
           sed -E 's/env\["([A-Z_]+)"\]/\1/' | sort -u)
read=$( { grep -hoE 'getenv\("HAI_[A-Z_]+"\)' platform/include/platform/hai_job.h || true
          grep -rhoE '(environ(\.get)?[\[(]|_env\()"HAI_[A-Z_]+"' platform/python/hai_job.py haiscale/python || true; } |
        grep -oE 'HAI_[A-Z_]+' | sort -u)
status=0
if [ "$rendered" != "$table" ]; then
  echo "set for jobs but not in the table:" $(comm -23 <(echo "$rendered") <(echo "$table"))
  echo "in the table but set nowhere:" $(comm -13 <(echo "$rendered") <(echo "$table"))
  status=1
fi
unknown=$(comm -23 <(echo "$read") <(echo "$table"))
if [ -n "$unknown" ]; then
  echo "read by hai_job.h, hai_job.py or haiscale but not in the table:" $unknown
  status=1
fi
[ $status -eq 0 ] && echo "job environment: $(echo "$table" | wc -l) variables, one table;" \
  "readers use $(echo "$read" | wc -l) of them"
exit $status
