#!/usr/bin/env bash
# monitoring/METRICS.md names every metric the code exports, and nothing else: the names passed to
# Metrics::Counter/Gauge/Histogram in the daemons' sources against the table's first column.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
code=$(grep -rhoE '(Counter|Gauge|Histogram)\("[a-z_0-9]+"' --include='*.cc' --include='*.h' \
         common fs3 hfreduce monitoring platform scheduler haiscale |
       sed -E 's/.*\("([a-z_0-9]+)"/\1/' | sort -u)
doc=$(grep -E '^\| `[a-z_0-9]+` \| [a-z]+ \|' monitoring/METRICS.md |
      sed -E 's/^\| `([a-z_0-9]+)`.*/\1/' | sort -u)
missing=$(comm -23 <(echo "$code") <(echo "$doc"))
stale=$(comm -13 <(echo "$code") <(echo "$doc"))
[ -z "$missing" ] && [ -z "$stale" ] && { echo "METRICS.md: $(echo "$code" | wc -l) metrics, all documented"; exit 0; }
[ -n "$missing" ] && echo "exported but not in monitoring/METRICS.md:" $missing
[ -n "$stale" ] && echo "in monitoring/METRICS.md but exported nowhere:" $stale
exit 1
