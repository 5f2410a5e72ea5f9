#!/usr/bin/env bash
# Rewrites the README's table of DeepSpeed keys from the binary's (strata config --deepspeed-keys),
# the one source of it; tests/mpi/test_deepspeed_configs.sh fails while the two differ.
# Usage: scripts/readme_deepspeed_table.sh [path/to/strata]   (default: build/bin/strata)
set -euo pipefail
cd "$(dirname "$0")/.."
strata="${1:-build/bin/strata}"
table="$("$strata" config --deepspeed-keys)"
python3 - "$table" <<'PY'
import sys
begin, end = "<!-- deepspeed-keys:begin -->\n", "<!-- deepspeed-keys:end -->"
text = open("README.md").read()
i, j = text.index(begin) + len(begin), text.index(end)
open("README.md", "w").write(text[:i] + sys.argv[1] + "\n" + text[j:])
PY
