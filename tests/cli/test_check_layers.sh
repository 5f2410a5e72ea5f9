#!/usr/bin/env bash
# scripts/check_layers.py holds src/ to the build's library order: the tree passes; a planted
# upward include (core including train, comm including a kernel header as the diagnostics once
# did from comm/) and a planted cycle in src/CMakeLists.txt each fail, naming the file.
source "$(dirname "$0")/../lib/common.sh"
check="$SRC/scripts/check_layers.py"
run_expect 0 python3 "$check" "$SRC"
expect_contains "$OUT" "no upward include, no cycle"

copy_tree() {  # DEST: src/ and kernels/ of the project, to plant problems in
  mkdir -p "$1"
  cp -r "$SRC/src" "$SRC/kernels" "$1/"
}
copy_tree "$WORK/up"
echo '#include "train/train.h"' >> "$WORK/up/src/core/log.cpp"
run_expect 1 python3 "$check" "$WORK/up"
expect_contains "$OUT" 'src/core/log.cpp'
expect_contains "$OUT" 'of module train, but module core does not depend on train: an upward include'

copy_tree "$WORK/kernel"
echo '#include "device_info.cuh"' >> "$WORK/kernel/src/comm/topology.cpp"
run_expect 1 python3 "$check" "$WORK/kernel"
expect_contains "$OUT" 'src/comm/topology.cpp'
expect_contains "$OUT" 'of module kernels, but module comm does not depend on kernels'

copy_tree "$WORK/cycle"
sed -i 's/^strata_module(comm DEPS strata_core)/strata_module(comm DEPS strata_core strata_train)/' "$WORK/cycle/src/CMakeLists.txt"
run_expect 1 python3 "$check" "$WORK/cycle"
expect_contains "$OUT" "depend on each other in a cycle"
