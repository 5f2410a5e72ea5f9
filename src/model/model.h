// Public header of src/model, in three parts: param_specs.h (the GPT-2 parameter registry:
// ParamSpec, from which TP slicing, ZeRO partitioning, checkpoints and export derive),
// param_store.h (the ParamStore through which the model reaches its parameters and gradients
// layer group by layer group) and gpt.h (the Gpt model with a hand-written backward).
#pragma once
#include "model/gpt.h"
#include "model/param_specs.h"
#include "model/param_store.h"
