// Typed errors. A UserError is something the user can fix (config, paths, data,
// checkpoint mismatch): main prints it and exits with code 2 before any collective starts.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

namespace strata {

constexpr int kExitInternalError = 1;
constexpr int kExitUserError = 2;
constexpr int kExitDeviceFailure = 3;  // a device or communication call failed

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& message) : std::runtime_error(message) {}
};

// Several user errors reported at once (config validation reports every problem).
class UserErrors : public UserError {
 public:
  explicit UserErrors(std::vector<std::string> errors);
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<std::string> errors_;
};

}  // namespace strata
