#!/usr/bin/env bash
# Every bash script under scripts/ and launch/ parses (bash -n) and is clean under shellcheck at
# every severity, following the files it sources; every Python script there compiles.
source "$(dirname "$0")/../lib/common.sh"
cd "$SRC"
command -v shellcheck >/dev/null || fail "shellcheck is not installed (scripts/install-deps.sh installs it)"
checked=0
python_checked=0
while IFS= read -r -d '' path; do
  first_line="$(head -n 1 "$path")"
  if [[ "$first_line" == "#!"*python* ]]; then
    python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$path" ||
      fail "$path does not compile"
    python_checked=$((python_checked + 1))
    continue
  fi
  [[ "$first_line" == "#!"*bash* || "$path" == *.sh ]] || continue
  bash -n "$path" || fail "$path does not parse"
  report="$(shellcheck -x --severity=style "$path" 2>&1)" || { echo "$report" >&2; fail "shellcheck: $path"; }
  checked=$((checked + 1))
done < <(find scripts launch -type f -print0 | sort -z)
[ "$checked" -ge 10 ] || fail "only $checked bash scripts found under scripts/ and launch/"
echo "ok: $checked bash scripts parse and pass shellcheck; $python_checked Python scripts compile"
