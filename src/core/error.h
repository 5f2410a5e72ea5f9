// Typed errors. A UserError is something the user can fix (config, paths, data,
// checkpoint mismatch): main prints it and exits with code 2.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

namespace strata {

constexpr int kExitInternalError = 1;
constexpr int kExitUserError = 2;
constexpr int kExitDeviceFailure = 3;  // a device or communication call failed

// Where a UserError was raised: on this rank alone as far as it knows, or on every rank of the
// job at once (an agreement between the ranks, or a check every rank makes on the same facts).
// main reports an every-rank error once (rank 0) and each rank exits 2; a this-rank error in a
// job of several ranks is reported by its rank, which then ends the job (MPI_Abort, code 2)
// rather than leave the other ranks waiting for it in a collective.
enum class RaisedOn { ThisRank, EveryRank };

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& message, RaisedOn raised_on = RaisedOn::ThisRank)
      : std::runtime_error(message), raised_on_(raised_on) {}
  RaisedOn raised_on() const { return raised_on_; }

 private:
  RaisedOn raised_on_;
};

// Several user errors reported at once (config validation reports every problem).
class UserErrors : public UserError {
 public:
  explicit UserErrors(std::vector<std::string> errors, RaisedOn raised_on = RaisedOn::ThisRank);
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<std::string> errors_;
};

// Its first message (the whole of a single error's): the one to quote where one line is shown.
std::string first_message(const UserError& e);

// The same error (one or several messages), marked as raised on every rank.
[[noreturn]] void rethrow_on_every_rank(const UserError& e);

}  // namespace strata
