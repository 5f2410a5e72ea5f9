// Hardware profiles: small YAML files of rates (configs/hardware/), read strictly: every field
// present, a number in its range, nothing unknown, so a typo cannot silently plan for the wrong
// machine. Calibration writes the same format.
#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <type_traits>

#include "core/core.h"
#include "plan/plan.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// The folders holding profiles, in lookup order.
std::vector<fs::path> profile_dirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("STRATA_HARDWARE_DIR"); env && *env) dirs.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(exe.parent_path() / ".." / "share" / "strata" / "hardware");
    dirs.push_back(exe.parent_path() / ".." / ".." / "configs" / "hardware");
  }
  return dirs;
}

// A numeric field of a profile: its key, its range, and the member it fills (the reader and the
// writer both go through this one table).
struct Field {
  const char* key;
  double min, max;
  bool whole;  // a count
  std::function<void(HardwareProfile&, double)> set;
  std::function<double(const HardwareProfile&)> get;
};

template <typename T>
Field field(const char* key, double min, double max, T HardwareProfile::*member) {
  return {key, min, max, std::is_integral_v<T>, [member](HardwareProfile& h, double v) { h.*member = static_cast<T>(v); },
          [member](const HardwareProfile& h) { return static_cast<double>(h.*member); }};
}

const std::vector<Field>& numeric_fields() {
  using H = HardwareProfile;
  static const std::vector<Field> fields = {
      field("memory_gib", 0.001, 1e7, &H::memory_gib),
      field("reserved_gib", 0, 1e6, &H::reserved_gib),
      field("memory_bandwidth_gbs", 0.001, 1e6, &H::memory_bandwidth_gbs),
      field("peak_tflops_16bit", 1e-6, 1e6, &H::peak_tflops_16bit),
      field("peak_tflops_fp32", 1e-6, 1e6, &H::peak_tflops_fp32),
      field("gemm_efficiency", 1e-4, 1, &H::gemm_efficiency),
      field("multiprocessors", 0, 1e5, &H::multiprocessors),
      field("attention_efficiency", 1e-4, 1, &H::attention_efficiency),
      field("memory_efficiency", 1e-4, 1, &H::memory_efficiency),
      field("op_overhead_us", 0, 1e6, &H::op_overhead_us),
      field("gpus_per_node", 1, 4096, &H::gpus_per_node),
      field("host_link_gbs", 0.001, 1e6, &H::host_link_gbs),
      field("host_memory_gib", 0.001, 1e8, &H::host_memory_gib),
      field("host_memory_bandwidth_gbs", 0.001, 1e7, &H::host_memory_bandwidth_gbs),
  };
  return fields;
}

bool read_number(const YAML::Node& node, double& value) {
  if (!node.IsDefined() || !node.IsScalar()) return false;
  try {
    value = node.as<double>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}

void read_link(const YAML::Node& root, const char* key, LinkProfile& link, std::vector<std::string>& problems) {
  const YAML::Node node = root[key];
  if (!node.IsDefined() || !node.IsMap()) {
    problems.push_back(fmt::format("{}: missing (a map {{bandwidth_gbs: GB/s, latency_us: µs}})", key));
    return;
  }
  for (const auto& item : node) {
    const std::string k = item.first.as<std::string>();
    if (k != "bandwidth_gbs" && k != "latency_us") problems.push_back(fmt::format("{}.{}: unknown key", key, k));
  }
  double bw = 0, lat = 0;
  if (!read_number(node["bandwidth_gbs"], bw) || !(bw > 0 && bw < 1e9))
    problems.push_back(fmt::format("{}.bandwidth_gbs: missing or not a positive number", key));
  if (!read_number(node["latency_us"], lat) || !(lat >= 0 && lat < 1e9))
    problems.push_back(fmt::format("{}.latency_us: missing or not a number ≥ 0", key));
  link = {bw, lat};
}

HardwareProfile parse_profile_tree(const std::string& path, const YAML::Node& root);

// A file that is not YAML, or YAML of another shape (a key that is a list): exit 2 as well.
HardwareProfile parse_profile(const std::string& path) {
  try {
    return parse_profile_tree(path, YAML::LoadFile(path));
  } catch (const YAML::Exception& e) {
    throw UserError(fmt::format("hardware profile {}: {}", path, e.what()));
  }
}

HardwareProfile parse_profile_tree(const std::string& path, const YAML::Node& root) {
  if (!root.IsMap()) throw UserError(fmt::format("hardware profile {}: not a map of fields", path));
  HardwareProfile hw;
  hw.path = path;
  std::vector<std::string> problems;
  std::set<std::string> known = {"name", "device", "attention_kernel", "intra_node", "inter_node"}, seen;
  for (const Field& f : numeric_fields()) known.insert(f.key);
  for (const auto& item : root) {
    const std::string k = item.first.as<std::string>();
    if (!known.count(k)) problems.push_back(k + ": unknown key");
    if (!seen.insert(k).second) problems.push_back(k + ": given twice");
  }
  const auto text = [&root](const char* key) {
    const YAML::Node node = root[key];
    return node.IsDefined() && node.IsScalar() ? node.as<std::string>() : std::string();
  };
  hw.name = text("name");
  if (hw.name.empty()) problems.push_back("name: missing or not a word");
  const std::string device = text("device");
  if (device == "gpu" || device == "cpu") hw.gpu = device == "gpu";
  else problems.push_back("device: missing or not gpu or cpu");
  const std::string kernel = text("attention_kernel");
  if (kernel == "fused" || kernel == "unfused") hw.attention_unfused = kernel == "unfused";
  else problems.push_back("attention_kernel: missing or not fused or unfused");
  for (const Field& f : numeric_fields()) {
    double v = 0;
    if (!root[f.key].IsDefined()) {
      problems.push_back(fmt::format("{}: missing", f.key));
    } else if (!read_number(root[f.key], v) || !(v >= f.min && v <= f.max)) {  // NaN too
      problems.push_back(fmt::format("{}: not a number in [{}, {}]", f.key, f.min, f.max));
    } else if (f.whole && v != std::floor(v)) {
      problems.push_back(fmt::format("{}: not a whole number", f.key));
    } else {
      f.set(hw, v);
    }
  }
  read_link(root, "intra_node", hw.intra_node, problems);
  read_link(root, "inter_node", hw.inter_node, problems);
  if (problems.empty() && hw.reserved_gib >= hw.memory_gib)
    problems.push_back("reserved_gib: must be less than memory_gib");
  if (!problems.empty()) {
    for (std::string& p : problems) p = "hardware profile " + path + ": " + p;
    throw UserErrors(problems);
  }
  return hw;
}

}  // namespace

std::vector<std::string> known_hardware_profiles() {
  std::set<std::string> names;
  for (const fs::path& dir : profile_dirs()) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".yaml") names.insert(entry.path().stem().string());
    }
  }
  return {names.begin(), names.end()};
}

HardwareProfile load_hardware_profile(const std::string& name_or_path) {
  std::error_code ec;
  if (name_or_path.find('/') != std::string::npos || fs::is_regular_file(name_or_path, ec)) {
    if (!fs::is_regular_file(name_or_path, ec))
      throw UserError(fmt::format("--hardware: no profile file {}", name_or_path));
    return parse_profile(name_or_path);
  }
  for (const fs::path& dir : profile_dirs()) {
    const fs::path file = dir / (name_or_path + ".yaml");
    if (fs::is_regular_file(file, ec)) return parse_profile(fs::weakly_canonical(file, ec).string());
  }
  const std::vector<std::string> names = known_hardware_profiles();
  // A binary copied away from its tree finds no profile folder: say where it looked.
  std::vector<std::string> looked;
  for (const fs::path& dir : profile_dirs()) looked.push_back(dir.lexically_normal().string());
  const std::string known =
      names.empty() ? fmt::format("none found in {}; set STRATA_HARDWARE_DIR to a folder of profiles, e.g. the "
                                  "source tree's configs/hardware",
                                  fmt::join(looked, ", "))
                    : fmt::format("{}", fmt::join(names, ", "));
  throw UserError(fmt::format("--hardware: unknown profile '{}'; known: {}; or give a profile file (`strata plan "
                              "--calibrate --out FILE` measures this machine into one)",
                              name_or_path, known));
}

std::string hardware_profile_yaml(const HardwareProfile& hw, const std::string& source) {
  std::string out = fmt::format("# {}\n# Source: {}\nname: {}\ndevice: {}\nattention_kernel: {}\n", hw.name, source, hw.name,
                                hw.gpu ? "gpu" : "cpu", hw.attention_unfused ? "unfused" : "fused");
  for (const Field& f : numeric_fields()) out += fmt::format("{}: {:.6g}\n", f.key, f.get(hw));
  for (const auto& [key, link] : {std::pair<const char*, const LinkProfile&>{"intra_node", hw.intra_node},
                                  std::pair<const char*, const LinkProfile&>{"inter_node", hw.inter_node}})
    out += fmt::format("{}: {{bandwidth_gbs: {:.6g}, latency_us: {:.6g}}}\n", key, link.bandwidth_gbs, link.latency_us);
  return out;
}

}  // namespace strata
