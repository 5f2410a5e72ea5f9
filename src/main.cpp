// strata's entry point: parses the command line and dispatches to a subcommand; maps
// errors to exit codes (0 ok, 2 user error, 1 internal error, 3 device/comm failure).
#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "comm/comm.h"
#include "config/config.h"
#include "core/core.h"
#include "data/data.h"
#include "plan/plan.h"
#include "tools/tools.h"
#include "train/train.h"

namespace {

// The help group of the subcommands that check an installation rather than train.
constexpr char kDiagnostics[] = "Diagnostics";

using strata::log_error;

// The whole of `text` as a number of type T (std::stoll or std::stod), or nullopt: CLI11's own
// checks word their ranges poorly (a bound of 309 digits) or let "nan" through.
template <typename T>
std::optional<T> whole_text_as(const std::string& text) {
  size_t used = 0;
  T value{};
  try {
    if constexpr (std::is_floating_point_v<T>) {
      value = std::stod(text, &used);
    } else {
      value = std::stoll(text, &used);
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return value;
}

// A count of ranks or a parallel size: CLI11's PositiveNumber would answer 0 with "Value 0 not in
// range 0.000000 to 1.797...e308".
const CLI::Validator kWholeCount(
    [](std::string& text) -> std::string {
      const std::optional<long long> value = whole_text_as<long long>(text);
      if (!value || *value < 1) return "expected a whole number of 1 or more, got '" + text + "'";
      if (*value > std::numeric_limits<int>::max())
        return "expected a whole number of at most " + std::to_string(std::numeric_limits<int>::max()) + ", got '" +
               text + "'";
      return "";
    },
    "N>=1");

// A file the command writes or reads: an empty name would silently do nothing.
const CLI::Validator kFileName([](std::string& text) -> std::string { return text.empty() ? "expected a file name" : ""; },
                               "FILE");
const CLI::Validator kDirName(
    [](std::string& text) -> std::string { return text.empty() ? "expected a directory name" : ""; }, "DIR");

// Seconds, 0 or more.
const CLI::Validator kSeconds(
    [](std::string& text) -> std::string {
      const std::optional<double> value = whole_text_as<double>(text);
      if (!value || !(*value >= 0) || *value > 1e9) return "expected seconds, 0 or more, got '" + text + "'";
      return "";
    },
    "S>=0");

// A sampling temperature: finite and 0 or more.
const CLI::Validator kTemperature(
    [](std::string& text) -> std::string {
      const std::optional<double> value = whole_text_as<double>(text);
      if (!value || !std::isfinite(*value) || *value < 0)
        return "expected a finite number, 0 or more (0: the most likely token), got '" + text + "'";
      return "";
    },
    "T>=0");

// A seed: the whole range of int64_t from 0, each value its own (no saturation at the top).
const CLI::Validator kSeed(
    [](std::string& text) -> std::string {
      const std::optional<long long> value = whole_text_as<long long>(text);
      if (!value || *value < 0)
        return "expected a whole number from 0 to " + std::to_string(std::numeric_limits<int64_t>::max()) + ", got '" +
               text + "'";
      return "";
    },
    "S>=0");

int report_user_error(const strata::UserError& e, int world_size) {
  // An error every rank raised is reported once; one raised here alone is reported here, and
  // the job ends with it, since the other ranks may be waiting for this one in a collective.
  const bool every_rank = world_size <= 1 || e.raised_on() == strata::RaisedOn::EveryRank;
  strata::note_exit(strata::kExitUserError);
  if (every_rank && strata::process_rank() > 0) return strata::kExitUserError;
  if (auto* many = dynamic_cast<const strata::UserErrors*>(&e)) {
    log_error("{} problem{} found:", many->errors().size(), many->errors().size() == 1 ? "" : "s");
    for (const auto& line : many->errors()) log_error("  {}", line);
  } else {
    log_error("{}", e.what());
  }
  if (!every_rank) strata::abort_job(strata::kExitUserError);
  return strata::kExitUserError;
}

// "strata foo" or "strata data foo": the first word that names no subcommand where one is
// expected, as a message (CLI11 itself says only that a subcommand is required); "" if none.
std::string unknown_subcommand(CLI::App& app, int argc, char** argv) {
  CLI::App* level = &app;
  std::string path = "strata";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    const std::vector<CLI::App*> subcommands = level->get_subcommands({});
    if (word.empty() || word[0] == '-' || subcommands.empty()) return "";
    auto named = std::find_if(subcommands.begin(), subcommands.end(), [&](CLI::App* s) { return s->check_name(word); });
    if (named == subcommands.end()) {
      std::string listed, diagnostics;
      for (CLI::App* s : subcommands) {
        std::string& list = s->get_group() == kDiagnostics ? diagnostics : listed;
        if (!s->get_group().empty()) list += (list.empty() ? "" : ", ") + s->get_name();
      }
      if (!diagnostics.empty()) listed += "; diagnostics: " + diagnostics;
      return fmt::format("{}: unknown command '{}' (commands: {})", path, word, listed);
    }
    level = *named;
    path += " " + level->get_name();
  }
  return "";
}

// Every subcommand's options, as CLI11 fills them in, and which subcommand was given.
struct Commands {
  std::string config_path;
  int config_world_size = 1;
  bool explain_deepspeed = false;
  bool deepspeed_keys = false;
  std::vector<std::string> overrides;
  strata::InfoOptions info_options;
  strata::CommCheckOptions comm_check_options;
  strata::AdamCheckOptions adam_check_options;
  strata::TrainOptions train_options;
  strata::PlanOptions plan_options;
  strata::EncodeOptions encode_options;
  strata::SampleOptions sample_options;
  strata::EvalOptions eval_options;
  std::string decode_input, decode_tokenizer, decode_out;
  std::string export_checkpoint, export_out;
  CLI::App* config = nullptr;
  CLI::App* info = nullptr;
  CLI::App* comm_check = nullptr;
  CLI::App* adam_check = nullptr;
  CLI::App* train = nullptr;
  CLI::App* plan = nullptr;
  CLI::App* encode = nullptr;
  CLI::App* decode = nullptr;
  CLI::App* export_hf = nullptr;
  CLI::App* sample = nullptr;
  CLI::App* eval = nullptr;
};

// strata plan --config X --gpus N [--hardware NAME|FILE] [--top K] [--write FILE] [--explain] [--json]
void add_plan_command(CLI::App& app, Commands& c) {
  strata::PlanOptions& o = c.plan_options;
  c.plan = app.add_subcommand("plan", "Rank the layouts of a config for N GPUs by predicted speed, with memory and "
                                      "step time per layout");
  c.plan->add_option("-c,--config", o.config_path, "YAML or ds_config JSON file");
  c.plan->add_option("--set", o.overrides, "Override a key: a.b.c=value (repeatable)");
  c.plan->add_option("--gpus", o.gpus, "GPUs (ranks) to plan for")->check(kWholeCount);
  c.plan->add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (default: the profile's)")->check(kWholeCount);
  c.plan->add_option("--hardware", o.hardware, "A profile name (configs/hardware/NAME.yaml) or file (default h100-sxm)");
  c.plan->add_option("--top", o.top, "Layouts shown (default 5)")->check(kWholeCount);
  c.plan->add_option("--write", o.write_path, "Write the best layout as a config `strata train` runs")->check(kFileName);
  c.plan->add_option("--keep", o.keep,
                     "Axes held at the config's value, comma-separated (or --keep given again): grid, schedule, sp, "
                     "micro_batch, zero, recompute, offload")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::Join);
  c.plan->add_flag("--tp-across-nodes", o.tp_across_nodes, "Let tensor parallelism span nodes");
  c.plan->add_flag("--explain", o.explain, "Predict the config's own layout on --gpus ranks, with its breakdown");
  c.plan->add_flag("--json", o.json, "Print JSON (the plan as one object, its layouts a list)");
  c.plan->add_flag("--calibrate", o.calibrate,
                   "Measure this machine (run under mpirun, as the job will) and write a profile to --out");
  c.plan->add_option("--out", o.calibrate_out, "The profile --calibrate writes")->check(kFileName);
}

// strata data encode --input FILE... --out DIR [--val-fraction F]; strata data decode ...
void add_data_commands(CLI::App& app, Commands& c) {
  auto* data = app.add_subcommand("data", "Prepare token shards");
  data->require_subcommand(1);
  c.encode = data->add_subcommand("encode", "Encode text files into token shards (bytes, or GPT-2 BPE with --tokenizer)");
  c.encode->add_option("--input", c.encode_options.inputs, "Text files")->required()->expected(1, -1);
  c.encode->add_option("--out", c.encode_options.out_dir, "Output directory")->required();
  c.encode->add_option("--val-fraction", c.encode_options.val_fraction, "Fraction of tokens (the tail) for validation")
      ->check(CLI::Range(0.0, 0.5));
  c.encode->add_option("--shard-tokens", c.encode_options.shard_tokens, "Most tokens per shard (default 1e8)")
      ->check(CLI::Range(int64_t{1}, int64_t{2147483647}));
  auto* tokenizer =
      c.encode->add_option("--tokenizer", c.encode_options.tokenizer,
                           "GPT-2 BPE: tokenizer.json, vocab.json (merges.txt beside it), their folder, or a tiktoken file");
  c.encode->add_option("--split-on", c.encode_options.document_delimiter,
                       "Split each file into documents at this text (\\n, \\r, \\t, \\\\ as escapes; needs --tokenizer); "
                       "default: a file is a document")
      ->transform([](std::string text) {
        if (text.empty()) throw CLI::ValidationError("empty: it splits nothing (leave it out: a file is a document)");
        try {
          return strata::unescape_delimiter(text);
        } catch (const strata::UserError& e) {
          throw CLI::ValidationError(e.what());  // reported by the parser, exit 2
        }
      });
  c.encode->add_option("--threads", c.encode_options.threads, "BPE encoding threads (0, the default: every core)")
      ->check(CLI::NonNegativeNumber)
      ->needs(tokenizer);  // bytes are encoded in one pass
  // strata data decode [--tokenizer PATH] --input GLOB [--out FILE]
  c.decode = data->add_subcommand("decode", "Write token shards back as text (bytes, or GPT-2 BPE with --tokenizer)");
  c.decode->add_option("--input", c.decode_input, "Token shards (a glob, in file-name order)")->required();
  c.decode->add_option("--tokenizer", c.decode_tokenizer,
                       "tokenizer.json, vocab.json, their folder, or a tiktoken file (default: the ids are bytes)");
  c.decode->add_option("--out", c.decode_out, "Output file (default: standard output)");
}

// strata sample|eval --checkpoint PATH [--set k=v]... and each one's own options.
void add_checkpoint_commands(CLI::App& app, Commands& c) {
  const char* checkpoint_help = "A checkpoint step directory, a checkpoint folder (uses latest) or a HuggingFace GPT-2 folder";
  const char* set_help = "Override a key of the checkpoint's config: a.b.c=value (repeatable)";
  strata::SampleOptions& s = c.sample_options;
  c.sample = app.add_subcommand("sample", "Write text sampled from a checkpoint's model (run alone, or under mpirun)");
  c.sample->add_option("--checkpoint", s.checkpoint, checkpoint_help)->required()->check(kDirName);
  c.sample->add_option("--prompt", s.prompt, "Text each sample continues (default: none)");
  c.sample->add_option("--tokens", s.tokens, "Tokens generated per sample (default 200)")
      ->check(CLI::Range(1, 1 << 20));
  c.sample->add_option("--count", s.count, "Samples (default 1)")->check(CLI::Range(1, 1 << 20));
  c.sample->add_option("--temperature", s.temperature, "Divides the logits; 0 takes the most likely token (default 1)")
      ->check(kTemperature);
  c.sample->add_option("--top-k", s.top_k, "Draw from the K most likely tokens only (default 0: all)")
      ->check(CLI::Range(0, 1 << 30));
  c.sample->add_option("--seed", s.seed, "Seed of the draws (default 1234)")->check(kSeed);
  c.sample->add_option("--tokenizer", s.tokenizer,
                       "GPT-2 BPE tokenizer (tokenizer.json, vocab.json, their folder or a tiktoken file) instead of "
                       "the config's data.tokenizer")
      ->check(kFileName);
  c.sample->add_option("--set", s.overrides, set_help);
  strata::EvalOptions& e = c.eval_options;
  c.eval = app.add_subcommand("eval", "Print a checkpoint's loss on a token split (run alone, or under mpirun)");
  c.eval->add_option("--checkpoint", e.checkpoint, checkpoint_help)->required()->check(kDirName);
  c.eval->add_option("--data", e.data, "Token shards, a glob (default: the config's data.val)")->check(kFileName);
  c.eval->add_option("--iters", e.iters, "Global batches evaluated (default: the config's train.eval_iters)")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  c.eval->add_option("--set", e.overrides, set_help);
}

void add_commands(CLI::App& app, Commands& c) {
  // strata config CONFIG [--world-size N] [--set k=v]... (CONFIG may also be given as --config, as
  // train and plan take it)
  c.config = app.add_subcommand("config", "Validate a config and print it resolved, with derived values");
  c.config->add_option("config,-c,--config", c.config_path, "YAML or ds_config JSON file");
  c.config->add_option("--world-size", c.config_world_size, "Number of ranks to resolve for")->check(kWholeCount);
  c.config->add_option("--set", c.overrides, "Override a key: a.b.c=value (repeatable)");
  c.config->add_flag("--explain-deepspeed", c.explain_deepspeed,
                     "List the file's DeepSpeed keys, each with what strata does with it");
  auto* table = c.config->add_flag("--deepspeed-keys", c.deepspeed_keys,
                                   "Print every DeepSpeed key with what strata does with it (a Markdown table)");
  table->excludes(c.config->get_option("config"));

  // strata info [--tp N] [--pp N]
  c.info = app.add_subcommand("info", "Print ranks, grid coordinates, hosts, GPUs and library versions (run under mpirun)");
  c.info->add_option("--tp", c.info_options.tp, "Tensor-parallel size for the coordinates shown")->check(kWholeCount);
  c.info->add_option("--pp", c.info_options.pp, "Pipeline-parallel size for the coordinates shown")->check(kWholeCount);

  // strata comm-check [--seconds S] [--bytes N]: a diagnostic for checking an MPI
  // installation, listed apart in `strata --help`.
  c.comm_check = app.add_subcommand("comm-check", "Check and time collectives on all ranks (run under mpirun)");
  c.comm_check->group(kDiagnostics);
  c.comm_check->add_option("--seconds", c.comm_check_options.seconds, "Run rounds for about this long")
      ->check(kSeconds);
  c.comm_check->add_option("--bytes", c.comm_check_options.bytes, "Size of each operation's buffer")
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 34));

  // strata adam-check [--params N] [--threads T] [--rounds R]: the offloaded optimizer's host
  // AdamW checked and timed on this node (no MPI; a diagnostic like comm-check).
  c.adam_check = app.add_subcommand("adam-check", "Check and time the host AdamW of offloaded optimizer state");
  c.adam_check->group(kDiagnostics);
  c.adam_check->add_option("--params", c.adam_check_options.params, "Parameters of the timed step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 34));
  c.adam_check->add_option("--threads", c.adam_check_options.threads, "Threads (default: every core)")
      ->check(kWholeCount);
  c.adam_check->add_option("--rounds", c.adam_check_options.rounds, "Timed steps (the best is reported)")
      ->check(kWholeCount);
  CLI::Option* nvme_path = c.adam_check->add_option("--nvme-path", c.adam_check_options.nvme_path,
                                                     "Also time an offload file in this directory (O_DIRECT)")
                               ->check(kDirName);
  c.adam_check->add_option("--nvme-bytes", c.adam_check_options.nvme_bytes,
                           "Bytes of that file (whole 12 MiB records, at least one)")
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 40))
      ->needs(nvme_path);

  // strata train --config X [--set k=v]... [--dump-grads FILE]
  c.train = app.add_subcommand("train", "Train a model as the config describes (run under mpirun)");
  c.train->add_option("-c,--config", c.train_options.config_path, "YAML or ds_config JSON file")->required();
  c.train->add_option("--set", c.train_options.overrides, "Override a key: a.b.c=value (repeatable)");
  c.train->add_option("--dump-grads", c.train_options.dump_grads_path,
                      "Write the first step's accumulated gradients (before clipping) to this safetensors file");

  add_plan_command(app, c);

  add_data_commands(app, c);

  // strata export --checkpoint DIR --out DIR
  c.export_hf = app.add_subcommand("export", "Write a checkpoint as a HuggingFace GPT-2 folder");
  c.export_hf->add_option("--checkpoint", c.export_checkpoint, "Checkpoint step directory, or a checkpoint root (uses latest)")
      ->required();
  c.export_hf->add_option("--out", c.export_out, "Output directory")->required()->check(kDirName);

  add_checkpoint_commands(app, c);
}

// The config at --world-size ranks; a layout that needs more ranks than the one assumed without
// the option says which option gives them.
strata::Config load_for_config_command(const Commands& c) {
  try {
    return strata::load_config_file(c.config_path, c.overrides, c.config_world_size);
  } catch (const strata::UserErrors& e) {
    const bool layout = std::any_of(e.errors().begin(), e.errors().end(), [](const std::string& m) {
      return m.find("world size 1 is not divisible") != std::string::npos;
    });
    if (!layout || c.config->count("--world-size") > 0) throw;
    std::vector<std::string> errors = e.errors();
    errors.push_back("strata config resolves for 1 rank unless --world-size N gives the ranks the job will run on");
    throw strata::UserErrors(errors);
  }
}

// strata config: the resolved config in file format (the DeepSpeed notes as comments above it),
// or the file's DeepSpeed keys explained, or the table of every DeepSpeed key.
int run_config(const Commands& c) {
  if (c.deepspeed_keys) {
    std::fputs(strata::deepspeed_keys_markdown().c_str(), stdout);
    return 0;
  }
  if (c.config_path.empty()) throw strata::UserError("strata config: give a config file (or --deepspeed-keys)");
  if (c.explain_deepspeed) {
    const strata::DeepSpeedExplanation explained =
        strata::explain_deepspeed_file(c.config_path, c.overrides, c.config_world_size);
    std::fputs(explained.listing.c_str(), stdout);
    if (!explained.problems.empty()) {
      std::fflush(stdout);
      throw strata::UserErrors(explained.problems);  // the listing stands; the file does not load yet
    }
    return 0;
  }
  const strata::Config cfg = load_for_config_command(c);
  for (const std::string& note : strata::deepspeed_notes(cfg)) std::printf("# %s\n", note.c_str());
  for (const std::string& warning : strata::config_warnings(cfg)) std::printf("# warning: %s\n", warning.c_str());
  std::fputs(strata::config_to_yaml(cfg).c_str(), stdout);
  std::fputs(strata::derived_as_comments(cfg).c_str(), stdout);
  strata::print_blend_report(cfg);
  return 0;
}

// Runs the parsed subcommand; the MPI ones bring MPI up into `mpi` first.
int run_command(const Commands& c, int* argc, char*** argv, std::unique_ptr<strata::MpiRuntime>& mpi) {
  if (c.config->parsed()) return run_config(c);
  if (c.adam_check->parsed()) return strata::run_adam_check(c.adam_check_options);
  if (c.decode->parsed()) {
    strata::decode_token_shards(c.decode_input, c.decode_tokenizer, c.decode_out);
    return 0;
  }
  if (c.encode->parsed()) {
    strata::encode_text_files(c.encode_options);
    return 0;
  }
  if (c.export_hf->parsed()) {
    strata::export_huggingface(c.export_checkpoint, c.export_out);
    strata::log_info("exported {} to {}", c.export_checkpoint, c.export_out);
    return 0;
  }
  if (c.plan->parsed() && !c.plan_options.calibrate) return strata::run_plan(nullptr, c.plan_options);
  // A run stopped while MPI starts ends at once, as in the rest of its set-up.
  if (c.train->parsed()) strata::install_setup_signal_handlers();
  mpi = std::make_unique<strata::MpiRuntime>(argc, argv);
  strata::note_rank_started();
  strata::create_start_marker_if_asked(*mpi);
  if (c.plan->parsed()) return strata::run_plan(mpi.get(), c.plan_options);
  if (c.info->parsed()) return strata::run_info(*mpi, c.info_options);
  if (c.comm_check->parsed()) return strata::run_comm_check(*mpi, c.comm_check_options);
  if (c.train->parsed()) return strata::run_train(*mpi, c.train_options);
  if (c.sample->parsed()) return strata::run_sample(*mpi, c.sample_options);
  if (c.eval->parsed()) return strata::run_eval(*mpi, c.eval_options);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) must fail a checkpoint write with EFBIG, which the save
  // reports and cleans up after, not kill the process with SIGXFSZ halfway through it.
  std::signal(SIGXFSZ, SIG_IGN);
  // Output piped to a reader that has gone (`strata ... | tee log` after Ctrl-C ended tee) must
  // not kill a run that is saving its checkpoint: the log sink drops what it cannot write.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"strata: GPT training over DP x TP x PP ranks with ZeRO, from one YAML config"};
  app.set_version_flag("--version", std::string("strata ") + STRATA_VERSION);
  app.require_subcommand(1);
  Commands commands;
  add_commands(app, commands);
  if (const std::string unknown = unknown_subcommand(app, argc, argv); !unknown.empty()) {
    log_error("{}", unknown);
    strata::note_exit(strata::kExitUserError);
    return strata::kExitUserError;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    // `--input shards/*.bin` unquoted reaches decode as one glob's worth of arguments.
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr && commands.decode->parsed())
      std::fputs("hint: quote a glob given to --input (--input 'shards/train_*.bin'), so that strata expands it, "
                 "not the shell\n",
                 stderr);
    strata::note_exit(rc == 0 ? 0 : strata::kExitUserError);
    return rc == 0 ? 0 : strata::kExitUserError;
  }

  std::unique_ptr<strata::MpiRuntime> mpi;
  try {
    const int rc = run_command(commands, &argc, &argv, mpi);
    strata::note_exit(rc);  // e.g. 1: stopped for non-finite values
    return rc;
  } catch (const strata::UserError& e) {
    return report_user_error(e, mpi ? mpi->world_size() : 1);
  } catch (const std::exception& e) {
    log_error("internal error: {}", e.what());
    if (mpi && mpi->world_size() > 1) strata::abort_job(strata::kExitInternalError);
    strata::note_exit(strata::kExitInternalError);
    return strata::kExitInternalError;
  }
}
