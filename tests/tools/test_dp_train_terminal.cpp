// dp-train's progress bar in a real terminal: tmux runs dp-train in a detached session of a given
// width, the pane is kept after the program ends (remain-on-exit), and the screen and its history
// are read back with capture-pane. The bar must fit the width (never wrap, so no redraw leaves a
// stale line), track the whole run with --steps, and end as one completed bar above the summary.
// Each test uses its own tmux server (-L, a unique socket name) and kills it at the end; without
// tmux the tests skip, saying so (scripts/install-deps.sh installs it).
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <regex>
#include <thread>
#include "test_dp_train_util.h"

#include "../../tools/dp_train/progress.cpp"  // NOLINT(bugprone-suspicious-include): bar_line, tested directly

namespace {

using namespace dp_train_test;

bool have_tmux() { return std::system("command -v tmux > /dev/null 2>&1") == 0; }

#define REQUIRE_TMUX() \
  if (!have_tmux()) GTEST_SKIP() << "tmux is not installed (apt-get install tmux; scripts/install-deps.sh installs it)"

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command; returns its stdout.
std::string output_of(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (size_t k; (k = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, k);
  ::pclose(p);
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> rows;
  std::istringstream in(text);
  for (std::string row; std::getline(in, row);) rows.push_back(row);
  return rows;
}

// One tmux server of this test's own, with one session "t" running one command.
class Tmux {
 public:
  explicit Tmux(const TempDir& dir) : conf_(dir.file("tmux.conf")) {
    static int counter = 0;
    socket_ = "dp-train-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    std::ofstream(conf_) << "set -g remain-on-exit on\nset -g history-limit 10000\nset -g status off\n";
  }
  ~Tmux() { std::system((tmux("kill-server") + " > /dev/null 2>&1").c_str()); }
  Tmux(const Tmux&) = delete;
  Tmux& operator=(const Tmux&) = delete;

  // `env -u TMUX`: works from inside another tmux session too.
  std::string tmux(const std::string& args) const { return "env -u TMUX tmux -L " + socket_ + " -f " + quote(conf_) + " " + args; }

  void start(int width, int height, const std::string& command) {
    const std::string cmd = tmux("new-session -d -s t -x " + std::to_string(width) + " -y " + std::to_string(height) + " " + quote(command));
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  std::string query(const std::string& format) const {
    std::string s = output_of(tmux("display-message -p -t t " + quote(format)) + " 2> /dev/null");
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  // Runs `command` in the session, through sh, which writes its exit status to a file: tmux's own
  // #{pane_dead_status} is sometimes never set.
  void start(int width, int height, const std::string& command, const TempDir& dir) {
    status_path_ = dir.file("exit-status");
    start(width, height,
          "sh -c " +
              quote(command + "; echo $? > " + quote(status_path_ + ".tmp") + " && mv " + quote(status_path_ + ".tmp") + " " + quote(status_path_)));
  }
  // Waits until the program has ended and the pane is dead; false after `timeout`.
  bool wait_dead(std::chrono::seconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (std::filesystem::exists(status_path_) && query("#{pane_dead}") == "1") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // The program's exit status (after wait_dead).
  std::string exit_status() const {
    std::string s = read_text(status_path_);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  bool dead() const { return query("#{pane_dead}") == "1"; }
  // The visible screen, or with `history` everything since the start. tmux adds a "Pane is dead"
  // line of its own when the program ends: dropped.
  std::vector<std::string> capture(bool history) const {
    std::vector<std::string> rows = split_lines(output_of(tmux(std::string("capture-pane -p -t t") + (history ? " -S -" : ""))));
    std::erase_if(rows, [](const std::string& r) { return r.rfind("Pane is dead", 0) == 0; });
    return rows;
  }
  void resize(int width) const { std::system((tmux("resize-window -t t -x " + std::to_string(width)) + " > /dev/null 2>&1").c_str()); }

 private:
  std::string conf_, socket_, status_path_;
};

// The whole command line dp-train runs with in the pane; its exit status goes to a file too.
std::string command_line(const std::vector<std::string>& args) {
  std::string cmd = quote(kBinary);
  for (const auto& a : args) cmd += " " + quote(a);
  return cmd;
}

// An MLP on random data, 1000 steps an epoch; --steps 2500 ends in the middle of the third epoch,
// so a bar that tracked the epoch would end half full.
std::vector<std::string> run_args(int64_t steps) {
  return {"--model",     "mlp",         "--data",       "random", "--hidden", "64",
          "--data-size", "20000",       "--batch-size", "20",     "--steps",  std::to_string(steps),
          "--devices",   "cpu:0,cpu:1", "--progress",   "auto"};
}

const std::regex kBar(R"(\[[=> ]+\])");

// What the screen's history must look like after a run of `steps` steps in `width` columns.
void check_screen(const std::vector<std::string>& history, const std::vector<std::string>& screen, int width, int64_t steps) {
  std::string all;
  for (const auto& r : history) all += r + "\n";
  SCOPED_TRACE("width " + std::to_string(width) + ", the pane's history:\n" + all);
  // Exactly one bar row and one ETA row, the same: each redraw replaced the previous bar, and the
  // lines printed during the run (each epoch's evaluation) went above it.
  std::vector<size_t> bars, etas;
  size_t finished = history.size();
  std::vector<size_t> done;
  for (size_t i = 0; i < history.size(); ++i) {
    if (std::regex_search(history[i], kBar)) bars.push_back(i);
    if (history[i].find("ETA ") != std::string::npos) etas.push_back(i);
    if (history[i].find(" done: train loss") != std::string::npos) done.push_back(i);
    if (history[i].rfind("finished: ", 0) == 0 && finished == history.size()) finished = i;
  }
  ASSERT_EQ(bars.size(), 1u) << "expected one progress bar row";
  ASSERT_EQ(etas.size(), 1u) << "expected one row with an ETA (a stale part of a bar stayed on screen)";
  ASSERT_EQ(bars[0], etas[0]);
  const std::string& bar = history[bars[0]];
  // Shorter than the width: the terminal never wrapped it.
  EXPECT_LE(static_cast<int>(bar.size()), width - 1) << bar;
  // The completed bar of the whole run.
  EXPECT_NE(bar.find("step " + std::to_string(steps) + "/" + std::to_string(steps)), std::string::npos) << bar;
  EXPECT_NE(bar.find("100%"), std::string::npos) << bar;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(bar, m, kBar));
  EXPECT_EQ(m.str().find_first_of("> "), std::string::npos) << "the bar is not full: " << bar;
  EXPECT_GE(m.str().size(), 12u) << "the bar itself is too narrow: " << bar;
  // Below every epoch's evaluation but the last epoch's when the run ends with an epoch (the bar is
  // complete before that evaluation), above the summary; and on the final screen.
  EXPECT_LE(std::count_if(done.begin(), done.end(), [&](size_t i) { return i > bars[0]; }), 1);
  EXPECT_LT(bars[0], finished);
  EXPECT_NE(std::find(screen.begin(), screen.end(), bar), screen.end()) << "the final screen does not show the completed bar";
}

void run_in_terminal(int width) {
  TempDir dir;
  Tmux tmux(dir);
  const int64_t steps = 2500;
  tmux.start(width, 50, command_line(run_args(steps)), dir);
  ASSERT_TRUE(tmux.wait_dead(std::chrono::seconds(240))) << "dp-train did not end within 240 s";
  EXPECT_EQ(tmux.exit_status(), "0");
  EXPECT_EQ(tmux.query("#{window_width}"), std::to_string(width));
  check_screen(tmux.capture(true), tmux.capture(false), width, steps);
}

TEST(DpTrainTerminal, BarFits80Columns) {
  DP_TRAIN_REQUIRE_BINARY();
  REQUIRE_TMUX();
  run_in_terminal(80);
}

TEST(DpTrainTerminal, BarFits200Columns) {
  DP_TRAIN_REQUIRE_BINARY();
  REQUIRE_TMUX();
  run_in_terminal(200);
}

// The window narrows from 200 to 80 columns while the bar is shown: the bar follows at the next
// redraw, and the bar that was wider than the new width leaves nothing behind.
TEST(DpTrainTerminal, BarFollowsAResize) {
  DP_TRAIN_REQUIRE_BINARY();
  REQUIRE_TMUX();
  TempDir dir;
  Tmux tmux(dir);
  const int64_t steps = 6000;
  tmux.start(200, 50, command_line(run_args(steps)), dir);
  // Wait for the bar to show at 200 columns, then narrow the window.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool shown = false;
  while (!shown && std::chrono::steady_clock::now() < deadline) {
    for (const auto& row : tmux.capture(false)) shown = shown || row.find("ETA ") != std::string::npos;
    if (!shown) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(shown) << "no progress bar within 120 s";
  if (tmux.dead()) GTEST_SKIP() << "the run ended before the window could be resized (too fast a machine)";
  tmux.resize(80);
  ASSERT_TRUE(tmux.wait_dead(std::chrono::seconds(240))) << "dp-train did not end within 240 s";
  EXPECT_EQ(tmux.exit_status(), "0");
  ASSERT_EQ(tmux.query("#{window_width}"), "80");
  check_screen(tmux.capture(true), tmux.capture(false), 80, steps);
}

// The line itself, at every width from 1 to 300 columns, for a small and a huge run.
TEST(DpTrainTerminal, BarLineFitsEveryWidth) {
  dp::train::StepReport small{1, 1, 3, 10, 3, 10, 2.3026, 1e-3, 1234, 0.5};
  dp::train::StepReport huge{123, 1000, 45678, 99999, 12345678, 99999000, 1234.5678, 1.23e-7, 123456789, 3600 * 99};
  for (const auto& r : {small, huge}) {
    for (int w = 1; w <= 300; ++w) {
      const std::string line = dp::train::bar_line(r, w);
      EXPECT_LE(static_cast<int>(line.size()), std::max(w - 1, 1)) << "width " << w << ": " << line;
      EXPECT_EQ(line.find_first_of("\r\n\x1b"), std::string::npos);
      if (w >= 80) {
        EXPECT_TRUE(std::regex_search(line, kBar)) << "width " << w << ": " << line;
      }
    }
  }
  // The bar counts the run's steps, not the epoch's: step 3 of 10 is 30%, whatever the batch.
  const std::string line = dp::train::bar_line(small, 120);
  EXPECT_NE(line.find(" 30%"), std::string::npos) << line;
  EXPECT_NE(line.find("step 3/10"), std::string::npos) << line;
  EXPECT_NE(line.find("batch 3/10"), std::string::npos) << line;
  dp::train::StepReport almost = small;
  almost.step = 999, almost.total_steps = 1000;
  EXPECT_NE(dp::train::bar_line(almost, 120).find(" 99%"), std::string::npos) << "100% only when complete";
}

// --progress bar into a file (not a terminal): the width is $COLUMNS; every redraw, the text
// between carriage returns, fits in it.
TEST(DpTrainTerminal, BarIntoAFileUsesColumns) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  ::setenv("COLUMNS", "60", 1);
  Result r = run({"--model", "seed", "--epochs", "3", "--devices", "cpu:0,cpu:1", "--progress", "bar"}, dir);
  ::unsetenv("COLUMNS");
  ASSERT_EQ(r.status, 0) << describe(r);
  int draws = 0;
  for (const std::string& line : split_lines(r.out)) {
    size_t start = 0;
    for (size_t cr; start <= line.size(); start = cr + 1) {
      cr = line.find('\r', start);
      if (cr == std::string::npos) cr = line.size();
      std::string piece = line.substr(start, cr - start);
      if (piece.rfind("\x1b[K", 0) == 0) piece = piece.substr(3);
      if (std::regex_search(piece, kBar)) {
        ++draws;
        EXPECT_LE(piece.size(), 59u) << piece;
      }
    }
  }
  EXPECT_GE(draws, 1) << describe(r);
}

}  // namespace
