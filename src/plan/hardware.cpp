// Hardware profiles: small YAML files of rates (configs/hardware/), read strictly: every field
// present, a number in its range, nothing unknown, so a typo cannot silently plan for the wrong
// machine. Calibration writes the same format.
#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>

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

struct Field {
  const char* key;
  double min, max;
  std::function<void(HardwareProfile&, double)> set;
};

const std::vector<Field>& numeric_fields() {
  static const std::vector<Field> fields = {
      {"memory_gib", 0.001, 1e7, [](HardwareProfile& h, double v) { h.memory_gib = v; }},
      {"reserved_gib", 0, 1e6, [](HardwareProfile& h, double v) { h.reserved_gib = v; }},
      {"memory_bandwidth_gbs", 0.001, 1e6, [](HardwareProfile& h, double v) { h.memory_bandwidth_gbs = v; }},
      {"peak_tflops_16bit", 1e-6, 1e6, [](HardwareProfile& h, double v) { h.peak_tflops_16bit = v; }},
      {"peak_tflops_fp32", 1e-6, 1e6, [](HardwareProfile& h, double v) { h.peak_tflops_fp32 = v; }},
      {"gemm_efficiency", 1e-4, 1, [](HardwareProfile& h, double v) { h.gemm_efficiency = v; }},
      {"attention_efficiency", 1e-4, 1, [](HardwareProfile& h, double v) { h.attention_efficiency = v; }},
      {"memory_efficiency", 1e-4, 1, [](HardwareProfile& h, double v) { h.memory_efficiency = v; }},
      {"op_overhead_us", 0, 1e6, [](HardwareProfile& h, double v) { h.op_overhead_us = v; }},
      {"gpus_per_node", 1, 4096, [](HardwareProfile& h, double v) { h.gpus_per_node = static_cast<int>(v); }},
      {"host_link_gbs", 0.001, 1e6, [](HardwareProfile& h, double v) { h.host_link_gbs = v; }},
      {"host_memory_gib", 0.001, 1e8, [](HardwareProfile& h, double v) { h.host_memory_gib = v; }},
      {"host_memory_bandwidth_gbs", 0.001, 1e7, [](HardwareProfile& h, double v) { h.host_memory_bandwidth_gbs = v; }},
  };
  return fields;
}

bool read_number(const YAML::Node& node, double& value) {
  if (!node.IsScalar()) return false;
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
  std::set<std::string> known = {"name", "device", "intra_node", "inter_node"};
  for (const Field& f : numeric_fields()) known.insert(f.key);
  for (const auto& item : root) {
    const std::string k = item.first.as<std::string>();
    if (!known.count(k)) problems.push_back(k + ": unknown key");
  }
  if (root["name"].IsScalar()) hw.name = root["name"].as<std::string>();
  else problems.push_back("name: missing");
  const std::string device = root["device"].IsScalar() ? root["device"].as<std::string>() : "";
  if (device == "gpu" || device == "cpu") hw.gpu = device == "gpu";
  else problems.push_back("device: missing or not gpu or cpu");
  for (const Field& f : numeric_fields()) {
    double v = 0;
    if (!root[f.key].IsDefined()) {
      problems.push_back(fmt::format("{}: missing", f.key));
    } else if (!read_number(root[f.key], v) || !(v >= f.min && v <= f.max)) {  // NaN too
      problems.push_back(fmt::format("{}: not a number in [{}, {}]", f.key, f.min, f.max));
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
  throw UserError(fmt::format("--hardware: unknown profile '{}'; known: {} (or give a profile file; "
                              "`strata plan --calibrate --out FILE` measures this machine into one)",
                              name_or_path, names.empty() ? std::string("none found") : fmt::format("{}", fmt::join(names, ", "))));
}

std::string hardware_profile_yaml(const HardwareProfile& hw, const std::string& source) {
  std::string out = fmt::format("# {}\n# Source: {}\nname: {}\ndevice: {}\n", hw.name, source, hw.name, hw.gpu ? "gpu" : "cpu");
  const auto line = [&out](const char* key, double v) { out += fmt::format("{}: {:.6g}\n", key, v); };
  line("memory_gib", hw.memory_gib);
  line("reserved_gib", hw.reserved_gib);
  line("memory_bandwidth_gbs", hw.memory_bandwidth_gbs);
  line("peak_tflops_16bit", hw.peak_tflops_16bit);
  line("peak_tflops_fp32", hw.peak_tflops_fp32);
  line("gemm_efficiency", hw.gemm_efficiency);
  line("attention_efficiency", hw.attention_efficiency);
  line("memory_efficiency", hw.memory_efficiency);
  line("op_overhead_us", hw.op_overhead_us);
  line("gpus_per_node", hw.gpus_per_node);
  out += fmt::format("intra_node: {{bandwidth_gbs: {:.6g}, latency_us: {:.6g}}}\n", hw.intra_node.bandwidth_gbs,
                     hw.intra_node.latency_us);
  out += fmt::format("inter_node: {{bandwidth_gbs: {:.6g}, latency_us: {:.6g}}}\n", hw.inter_node.bandwidth_gbs,
                     hw.inter_node.latency_us);
  line("host_link_gbs", hw.host_link_gbs);
  line("host_memory_gib", hw.host_memory_gib);
  line("host_memory_bandwidth_gbs", hw.host_memory_bandwidth_gbs);
  return out;
}

}  // namespace strata
