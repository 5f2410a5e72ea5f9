// Public header of src/comm, in three parts: runtime.h (the MPI runtime, the world's votes and
// the agreement on user errors), communicator.h (communicators, MPI and NCCL, with byte
// counters) and topology.h (the DP × PP × TP rank grid and the Topology that owns one
// communicator per group).
#pragma once
#include "comm/communicator.h"
#include "comm/runtime.h"
#include "comm/topology.h"
