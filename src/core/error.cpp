// UserErrors joins its messages so what() alone is a complete report.
#include "core/error.h"

namespace strata {
namespace {
std::string join_errors(const std::vector<std::string>& errors) {
  std::string text;
  for (const auto& e : errors) {
    if (!text.empty()) text += '\n';
    text += e;
  }
  return text;
}
}  // namespace

UserErrors::UserErrors(std::vector<std::string> errors, RaisedOn raised_on)
    : UserError(join_errors(errors), raised_on), errors_(std::move(errors)) {}

std::string first_message(const UserError& e) {
  const auto* many = dynamic_cast<const UserErrors*>(&e);
  return many && !many->errors().empty() ? many->errors().front() : std::string(e.what());
}

void rethrow_on_every_rank(const UserError& e) {
  if (const auto* many = dynamic_cast<const UserErrors*>(&e)) throw UserErrors(many->errors(), RaisedOn::EveryRank);
  throw UserError(e.what(), RaisedOn::EveryRank);
}

}  // namespace strata
