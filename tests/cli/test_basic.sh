#!/usr/bin/env bash
# Top-level CLI behaviour: help, version, unknown subcommands and options, exit codes; the
# adam-check diagnostic.
source "$(dirname "$0")/../lib/common.sh"
run_expect 0 "$STRATA" --help
for sub in config info train data export; do expect_contains "$OUT" "$sub"; done
run_expect 0 "$STRATA" --version
expect_contains "$OUT" "strata 0."
run_expect 2 "$STRATA"
run_expect 2 "$STRATA" frobnicate
expect_contains "$OUT" "strata: unknown command 'frobnicate' (commands: config, info, train, plan, data, export, sample, eval; diagnostics: comm-check, adam-check)"
run_expect 2 "$STRATA" data frobnicate
expect_contains "$OUT" "strata data: unknown command 'frobnicate' (commands: encode, decode)"
run_expect 2 "$STRATA" train
expect_contains "$OUT" "--config"
run_expect 2 "$STRATA" config /nonexistent/x.yaml
expect_contains "$OUT" "/nonexistent/x.yaml"
# adam-check: every instruction set of this CPU bit for bit, timed, the figures as JSON.
run_expect 0 "$STRATA" adam-check --params 100000 --threads 2 --rounds 1
expect_contains "$OUT" "scalar bit for bit against the scalar reference: yes"
tail -n 1 <<<"$OUT" | python3 -c 'import json, sys; r = json.load(sys.stdin); assert r["exact"] and r["params"] == 100000, r'
run_expect 2 "$STRATA" adam-check --params 0
# More parameters than the machine holds: exit 2 with the arithmetic, not an allocation failure.
run_expect 2 "$STRATA" adam-check --params 17000000000
expect_contains "$OUT" "its four arrays (parameters, gradients, two moments) need 253.32 GiB of host memory"
expect_contains "$OUT" "lower --params"
# A wrong --nvme-path is said before any timing; --nvme-bytes means nothing without it.
run_expect 2 "$STRATA" adam-check --params 1000 --rounds 1 --nvme-path "$WORK/nosuch"
expect_contains "$OUT" "--nvme-path '$WORK/nosuch' is not a directory"
! grep -qF "M params/s" <<<"$OUT" || fail "adam-check timed before refusing --nvme-path"
run_expect 2 "$STRATA" adam-check --nvme-bytes 1048576
expect_contains "$OUT" "--nvme-bytes requires --nvme-path"
# The offload file's size is whole 12 MiB records, as the line says; output is flushed line by
# line, so a reader sees the checks before the timings end.
run_expect 0 "$STRATA" adam-check --params 1000 --threads 1 --rounds 1 --nvme-path "$WORK" --nvme-bytes 30000000
expect_contains "$OUT" "offload file in $WORK: 24 MiB, write"
expect_contains "$OUT" "the arrays fit in the CPU's caches"
times=$("$STRATA" adam-check --params 20000000 --threads 1 --rounds 3 2>/dev/null |
  { IFS= read -r _; first=$(date +%s.%N); cat >/dev/null; echo "$first $(date +%s.%N)"; })
read -r first_s end_s <<<"$times"
python3 -c 'import sys; a, b = map(float, sys.argv[1:]); assert b - a > 0.3, (a, b)' "$first_s" "$end_s" ||
  fail "adam-check's first line reached the pipe only at its end ($times)"
# A float option's range is said plainly (CLI11's own names DBL_MAX).
run_expect 2 "$STRATA" comm-check --seconds -1
expect_contains "$OUT" "--seconds: expected seconds, 0 or more, got '-1'"
run_expect 0 "$STRATA" export --help
expect_contains "$OUT" "--out TEXT:DIR"
# An unquoted glob reaches decode as several arguments: the hint says to quote it.
printf 'hello world\n' > "$WORK/a.txt"
run_expect 0 "$STRATA" data encode --input "$WORK/a.txt" --out "$WORK/shards" --val-fraction 0.5
run_expect 2 "$STRATA" data decode --input "$WORK"/shards/*.bin
expect_contains "$OUT" "hint: quote a glob given to --input"
echo ok
