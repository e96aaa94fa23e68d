#include "base/command_line.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <utility>

namespace braid::base {
namespace {

// CLI11 keeps an app's final callback in a protected member without a
// getter. The callback often owns the variables the app's options write to
// (a shared_ptr captured by the lambda), so it must outlive the parse: it is
// moved out here, not overwritten.
struct FinalCallbackOf : CLI::App {
  static std::function<void()> Take(CLI::App& app) {
    return std::exchange(app.*(&FinalCallbackOf::final_callback_), std::function<void()>());
  }
};

// Moves the final callbacks of `app` and its subcommands, except those of
// `keep`, into `taken`.
void TakeFinalCallbacks(CLI::App& app, const std::vector<const CLI::App*>& keep,
                        std::vector<std::function<void()>>& taken) {
  if (std::find(keep.begin(), keep.end(), &app) == keep.end()) {
    taken.push_back(FinalCallbackOf::Take(app));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    TakeFinalCallbacks(*sub, keep, taken);
  }
}

// BRAID_PARSE_ONLY=@FILE: parses every command line of FILE in turn (see
// the header) and prints one result line each.
int ParseBatch(CLI::App& app, const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << app.get_name() << ": " << kParseOnlyEnv << ": cannot read " << path << "\n";
    return 2;
  }
  std::vector<std::vector<std::string>> lines(1);
  for (std::string arg; std::getline(in, arg);) {
    if (arg.empty()) {
      lines.emplace_back();
    } else {
      lines.back().push_back(arg);
    }
  }
  if (lines.back().empty()) lines.pop_back();
  int failed = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    app.clear();
    // CLI11 takes a vector of arguments last first.
    std::vector<std::string> args(lines[i].rbegin(), lines[i].rend());
    try {
      app.parse(args);
      std::cout << i + 1 << " ok\n";
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) {  // --help, --version
        std::cout << i + 1 << " ok\n";
        continue;
      }
      ++failed;
      std::string what = e.what();
      std::replace(what.begin(), what.end(), '\n', ' ');
      std::cout << i + 1 << " error: " << what << "\n";
    }
  }
  return failed == 0 ? 0 : 2;
}

}  // namespace

bool ParseOnlyRequested() {
  const char* v = std::getenv(kParseOnlyEnv);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv,
                                    const std::vector<const CLI::App*>& hand_offs) {
  const bool parse_only = ParseOnlyRequested();
  // Destroyed after the parse, with the variables they own.
  std::vector<std::function<void()>> taken;
  const char* value = std::getenv(kParseOnlyEnv);
  if (parse_only && value[0] == '@') {
    TakeFinalCallbacks(app, {}, taken);  // no hand-off either: one process parses them all
    return ParseBatch(app, value + 1);
  }
  if (parse_only) TakeFinalCallbacks(app, hand_offs, taken);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (parse_only) return 0;
  return std::nullopt;
}

}  // namespace braid::base
