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
expect_contains "$OUT" "strata: unknown command 'frobnicate' (commands: config, info, train, plan, data, export; diagnostics: comm-check, adam-check)"
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
echo ok
