// Public header of src/core: errors, checking macros, logging, timing, RNG, dtypes, tensors,
// the host thread pool, O_DIRECT scratch files.
#pragma once
#include "core/check.h"
#include "core/direct_file.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/timer.h"
