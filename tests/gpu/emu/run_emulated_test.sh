#!/usr/bin/env bash
# Runs emu_gpu_ops for ctest. When catch_discover_tests asks for the test names, the banner that
# tests/gpu/ops/gpu_main.cpp prints first ("gpu_ops: <device>") is dropped so it is not taken for
# a test; the exit status is the binary's.
if [[ " $* " == *" --list-test-names-only "* ]]; then
  "$@" | grep -v '^gpu_ops: '
  exit "${PIPESTATUS[0]}"
fi
exec "$@"
