#!/usr/bin/env bash
# Every Python file of the tree passes ruff (its settings: pyproject.toml at the root): pyflakes,
# pycodestyle, import order and bugbear. The venv's ruff (deploy/requirements.txt pins it).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
ruff="$root/.venv/bin/ruff"
[ -x "$ruff" ] || { echo "ruff_check: $ruff is missing (deploy/install-deps.sh installs it)"; exit 1; }
"$ruff" check --no-cache --output-format concise .
echo "ruff: $(git ls-files '*.py' | wc -l) Python files pass"
