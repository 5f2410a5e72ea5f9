// Private to src/config: DeepSpeed's config keys, each with what strata does with it. The
// parser consults it for a key its field table does not read (so a real DeepSpeed key is never
// reported as a typo), the loader lists the file's DeepSpeed keys with it, and the README's
// table is printed from it (`strata config --deepspeed-keys`).
#pragma once
#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

namespace strata::config_detail {

enum class DsTreatment {
  // strata reads the key with DeepSpeed's meaning (the field table has it); `strata` says which
  // values, if any, it refuses.
  Implemented,
  // Any value changes nothing in strata; the start-up notes say so and why.
  Accepted,
  // DeepSpeed's default (`neutral`) changes nothing and is accepted; any other value is refused
  // with `strata` as the reason.
  AcceptedAtDefault,
  // A feature section: accepted while nothing in it is enabled (no `enabled: true` anywhere in
  // it), refused with `strata` as the reason otherwise.
  RefusedWhenEnabled,
  // Honouring it is impossible and ignoring it would change the results or the resources asked
  // for: refused with `strata` as the reason.
  Refused,
};

struct DeepSpeedKey {
  const char* path;  // dotted; a section's entry covers the keys inside it unless they have their own
  DsTreatment treatment;
  const char* meaning;  // what it does in DeepSpeed
  const char* strata;   // what strata does with it; for a refusal, why and what to use instead
  const char* neutral = nullptr;  // AcceptedAtDefault: the value that changes nothing
};

// Every DeepSpeed key, in the order of DeepSpeed's config documentation.
const std::vector<DeepSpeedKey>& deepspeed_keys();
// Its part from ZeRO on (deepspeed_feature_keys.cpp).
const std::vector<DeepSpeedKey>& deepspeed_zero_and_feature_keys();
// The entry of this exact dotted path, or nullptr.
const DeepSpeedKey* find_deepspeed_key(const std::string& path);

// What a key's value gets.
struct DsDecision {
  enum Kind { Implemented, Accepted, Disabled, Refused } kind = Implemented;
  std::string message;  // Refused: the error; Accepted/Disabled: the note
};
DsDecision decide_deepspeed_key(const DeepSpeedKey& key, const YAML::Node& value);

// The value as one short line: a scalar as written, a list or map abbreviated.
std::string short_value(const YAML::Node& value);

}  // namespace strata::config_detail
