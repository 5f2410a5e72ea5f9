// A hardware profile with round numbers for the planner's unit tests: 100 TFLOP/s, 1000 GB/s,
// every efficiency 1, links of 100 GB/s with no latency, no per-kernel cost.
#pragma once
#include "plan/plan.h"

namespace strata {

inline HardwareProfile round_machine() {
  HardwareProfile hw;
  hw.name = "round";
  hw.memory_gib = 80;
  hw.memory_bandwidth_gbs = 1000;
  hw.peak_tflops_16bit = hw.peak_tflops_fp32 = 100;
  hw.gemm_efficiency = hw.attention_efficiency = hw.memory_efficiency = 1;
  hw.op_overhead_us = 0;
  hw.gpus_per_node = 8;
  hw.intra_node = hw.inter_node = {100, 0};
  hw.host_link_gbs = 50;
  hw.host_memory_gib = 1024;
  hw.host_memory_bandwidth_gbs = 400;
  return hw;
}

}  // namespace strata
