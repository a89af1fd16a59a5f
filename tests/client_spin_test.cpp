// ClientSpin (fabric/ucx_internal.h): a UCX client's hybrid wait spins its budget, and stops
// spinning while the machine has more runnable tasks than CPUs, only after kStreak contended looks
// in a row, looking at most once per kLookEvery. Driven by a fake clock and a scripted count.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <optional>

#include "fabric/ucx_internal.h"

namespace rdmahash::detail {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(ClientSpin, RunnableTasksIsLoadavgsFourthFieldNumerator) {
  EXPECT_EQ(runnable_tasks("0.20 0.18 0.12 3/80 11206\n"), 3);
  EXPECT_EQ(runnable_tasks("11.50 9.01 7.00 12/3456 1"), 12);
  EXPECT_EQ(runnable_tasks("0.00 0.00 0.00 0/1 1"), 0);
  for (const char* bad : {"", "0.20 0.18", "0.20 0.18 0.12 ", "0.20 0.18 0.12 /80 1", "0.20 0.18 0.12 x/80 1",
                          "0.20 0.18 0.12 -1/80 1", "0.20 0.18 0.12 3 80 1", "0.20 0.18 0.12 3x/80 1"})
    EXPECT_EQ(runnable_tasks(bad), std::nullopt) << "'" << bad << "'";
}

// A runnable count the test scripts, one value per look; counts the looks.
struct Script {
  std::deque<std::optional<int>> values;
  int looks = 0;
  std::optional<int> operator()() {
    ++looks;
    if (values.empty()) return 1;
    auto v = values.front();
    values.pop_front();
    return v;
  }
};

TEST(ClientSpin, AStreakOfContendedLooksPausesTheSpinThenItResumes) {
  ClientSpin spin;
  spin.set_cpus(2);
  Script s{{3, 3, 3}};
  auto runnable = [&] { return s(); };
  const auto t0 = Clock::now();
  EXPECT_FALSE(spin.paused(t0, runnable));  // contended look 1
  EXPECT_FALSE(spin.paused(t0 + milliseconds(0) + std::chrono::microseconds(500), runnable));  // no look
  EXPECT_EQ(s.looks, 1);
  EXPECT_FALSE(spin.paused(t0 + milliseconds(1), runnable));  // look 2
  EXPECT_TRUE(spin.paused(t0 + milliseconds(2), runnable));   // look 3: paused
  EXPECT_EQ(s.looks, 3);
  // Uncontended looks (1 runnable) do not end the pause early; it ends kPause after the last
  // contended look.
  EXPECT_TRUE(spin.paused(t0 + milliseconds(50), runnable));
  EXPECT_TRUE(spin.paused(t0 + milliseconds(2) + ClientSpin::kPause - milliseconds(1), runnable));
  EXPECT_FALSE(spin.paused(t0 + milliseconds(2) + ClientSpin::kPause, runnable));
}

TEST(ClientSpin, ContentionThatPersistsExtendsThePause) {
  ClientSpin spin;
  spin.set_cpus(2);
  Script s;
  for (int i = 0; i < 150; ++i) s.values.push_back(5);  // contended looks at 0..149 ms, then 1
  auto runnable = [&] { return s(); };
  const auto t0 = Clock::now();
  for (int i = 0; i < 150; ++i) EXPECT_EQ(spin.paused(t0 + milliseconds(i), runnable), i >= 2) << "look " << i;
  // The last contended look (149 ms) paused it until 249 ms; uncontended looks do not shorten it.
  for (int i = 150; i < 249; ++i) EXPECT_TRUE(spin.paused(t0 + milliseconds(i), runnable)) << "look " << i;
  EXPECT_FALSE(spin.paused(t0 + milliseconds(249), runnable));
}

TEST(ClientSpin, BriefOrUnknownContentionNeverPauses) {
  ClientSpin spin;
  spin.set_cpus(2);
  // Runnable tasks == CPUs is not contention; a streak broken before kStreak is not either; an
  // unreadable count spins as before.
  Script s{{2, 3, 3, 2, 3, 3, 2, 3, std::nullopt, 3, 3, std::nullopt, 2, 2}};
  auto runnable = [&] { return s(); };
  const auto t0 = Clock::now();
  for (int i = 0; i < 14; ++i) EXPECT_FALSE(spin.paused(t0 + milliseconds(i), runnable)) << "look " << i;
  EXPECT_EQ(s.looks, 14);
}

TEST(ClientSpin, LooksFarApartAreNotInARow) {
  ClientSpin spin;
  spin.set_cpus(2);
  Script s{{3, 3, 3, 3, 3}};
  auto runnable = [&] { return s(); };
  const auto t0 = Clock::now();
  // Contended every time, but each look more than kStreakGap after the last: never a streak.
  for (int i = 0; i < 5; ++i)
    EXPECT_FALSE(spin.paused(t0 + i * (ClientSpin::kStreakGap + milliseconds(1)), runnable)) << "look " << i;
  EXPECT_EQ(s.looks, 5);
}

TEST(ClientSpin, AStretchSpinsItsBudgetUnlessPausedWhenItBegins) {
  ClientSpin spin;
  spin.set_cpus(2);
  Script s{{1, 1, 3, 3, 3}};
  auto runnable = [&] { return s(); };
  const auto budget = std::chrono::microseconds(100);
  const auto t0 = Clock::now();
  // Uncontended: spins until the budget has passed since the stretch began, then sleeps.
  EXPECT_TRUE(spin.keep_spinning(true, t0, budget, runnable));
  EXPECT_TRUE(spin.keep_spinning(false, t0 + std::chrono::microseconds(99), budget, runnable));
  EXPECT_FALSE(spin.keep_spinning(false, t0 + budget, budget, runnable));
  EXPECT_TRUE(spin.stretch_spins());
  // A new stretch restarts the budget.
  EXPECT_TRUE(spin.keep_spinning(true, t0 + milliseconds(1), budget, runnable));
  // Three contended looks (at 2, 3, 4 ms) pause the spin: the stretch that begins then sleeps at
  // once, at every idle progress, and says it did not spin.
  EXPECT_TRUE(spin.keep_spinning(true, t0 + milliseconds(2), budget, runnable));
  EXPECT_TRUE(spin.keep_spinning(true, t0 + milliseconds(3), budget, runnable));
  EXPECT_FALSE(spin.keep_spinning(true, t0 + milliseconds(4), budget, runnable));
  EXPECT_FALSE(spin.stretch_spins());
  EXPECT_FALSE(spin.keep_spinning(false, t0 + milliseconds(4) + std::chrono::microseconds(1), budget, runnable));
  // A stretch that began spinning keeps its budget even if a pause begins meanwhile (the pause
  // is looked at when a stretch begins only).
  EXPECT_EQ(s.looks, 5);
}

TEST(ClientSpin, CountsTheMachinesCpusAndReadsItsLoad) {
  ClientSpin spin;
  EXPECT_GE(spin.cpus(), 1);
  // The real /proc/loadavg: one look, and on this test's machine the answer is whatever it is;
  // what must hold is that one look alone never pauses (kStreak > 1).
  EXPECT_FALSE(spin.paused(Clock::now()));
}

}  // namespace
}  // namespace rdmahash::detail
