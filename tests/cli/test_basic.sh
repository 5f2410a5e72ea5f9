#!/usr/bin/env bash
# Top-level CLI behaviour: help, version, unknown subcommands and options, exit codes.
source "$(dirname "$0")/../lib/common.sh"
run_expect 0 "$STRATA" --help
for sub in config info train data export; do expect_contains "$OUT" "$sub"; done
run_expect 0 "$STRATA" --version
expect_contains "$OUT" "strata 0."
run_expect 2 "$STRATA"
run_expect 2 "$STRATA" frobnicate
run_expect 2 "$STRATA" train
expect_contains "$OUT" "--config"
run_expect 2 "$STRATA" config /nonexistent/x.yaml
expect_contains "$OUT" "/nonexistent/x.yaml"
echo ok
