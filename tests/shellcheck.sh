#!/usr/bin/env bash
# Runs shellcheck over the project's shell scripts: the quick start, the test runner and every
# script in examples/ and tests/ (*.sh, and *.sbatch batch scripts). Exit 77 (a skip) where the
# linter is not installed.
#   tests/shellcheck.sh [SOURCE_DIR]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
command -v shellcheck >/dev/null || { echo "shellcheck.sh: skipped: shellcheck is not installed (Debian: shellcheck)" >&2; exit 77; }
scripts=(run.sh test.sh)
while IFS= read -r -d '' script; do scripts+=("$script"); done \
  < <(find examples tests -type f \( -name '*.sh' -o -name '*.sbatch' \) -print0 | sort -z)
echo "shellcheck $(shellcheck --version | sed -n 's/^version: //p'): ${scripts[*]}"
shellcheck --external-sources "${scripts[@]}"
