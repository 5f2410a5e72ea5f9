#!/usr/bin/env bash
# Every script under scripts/ and launch/ that starts with a shebang is executable in git (mode
# 100755), so that a fresh clone can run it directly, as the README and gpu_check.sh do.
source "$(dirname "$0")/../lib/common.sh"
cd "$SRC"
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "not a git checkout: the modes git records cannot be read; skipped"
  exit 0
fi
bad=()
checked=0
while read -r mode _ _ path; do
  [ "$(head -c 2 "$path")" = "#!" ] || continue
  checked=$((checked + 1))
  [ "$mode" = 100755 ] || bad+=("$path (mode $mode)")
done < <(git ls-files -s -- scripts launch)
[ "$checked" -gt 0 ] || fail "no scripts found under scripts/ and launch/"
[ "${#bad[@]}" -eq 0 ] || fail "scripts with a shebang but no run bit in git: ${bad[*]} (git update-index --chmod=+x)"
echo "ok: $checked scripts executable"
