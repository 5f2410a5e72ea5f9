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

UserErrors::UserErrors(std::vector<std::string> errors)
    : UserError(join_errors(errors)), errors_(std::move(errors)) {}

}  // namespace strata
