#!/usr/bin/env bash
# No decision reads an error's text: the code decides by a Status's code() and reason() (and
# Python by exception class, haiscale.errors), never by matching words in a message, which changes
# when someone rewords it. This greps the product code (not tests, which assert what people read)
# for the ways a message gets matched:
#   C++:    message()/error_message()/what() followed by find/rfind/starts_with/ends_with/contains
#           or compared with ==;
#   Python: `"..." in str(e)`, str(e).startswith/endswith/find, e.args[0] matched.
# A line that must read text (a peer that gives no code: gRPC's own "failed to connect") carries
# the marker `error-text-ok` and says why in the comment above it. Allowed today:
#   common/src/rpc_client.cc  NeverSent: gRPC's transport gives no code for "never connected".
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
dirs=(common fs3 hfreduce haiscale platform scheduler monitoring deploy)
cxx='(message|error_message|what)\(\)\s*\.\s*(find|rfind|starts_with|ends_with|contains|compare)\(|(message|error_message|what)\(\)\s*==|==\s*[a-z_.]*(message|error_message|what)\(\)'
py='in\s+str\((e|err|exc|error|ex)\)|str\((e|err|exc|error|ex)\)\s*\.\s*(startswith|endswith|find|index)\(|\.args\[0\]\s*(in|==|\.startswith)|in\s+(e|err|exc|error|ex)\.args\[0\]'
found=$( { grep -rnE "$cxx" --include='*.cc' --include='*.h' "${dirs[@]}" || true
           grep -rnE "$py" --include='*.py' "${dirs[@]}" || true; } |
         grep -v 'error-text-ok' |
         grep -vE '^[^:]+/(tests?|bench)/|_test\.(cc|py):' |
         grep -vE '^common/include/common/status\.h:[0-9]+:\s*return a\.code\(\) == b\.code\(\) && a\.message\(\) == b\.message\(\);' || true)
if [ -n "$found" ]; then
  echo "decisions that read an error's text (decide by code/reason, or mark error-text-ok and say why):"
  echo "$found"
  exit 1
fi
allowed=$(grep -rn 'error-text-ok' --include='*.cc' --include='*.h' --include='*.py' "${dirs[@]}" | grep -v '^tests/' | wc -l)
echo "no decision reads an error's text ($allowed marked exceptions)"
