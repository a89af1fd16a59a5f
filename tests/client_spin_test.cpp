// ClientSpin (fabric/ucx_internal.h): a UCX client's hybrid wait spins its budget, and stops
// spinning while the machine has more runnable tasks than CPUs, only after kStreak contended looks
// in a row, looking at most once per kLookEvery. Driven by a fake clock and a scripted count.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <optional>

#include "fabric/ucx_internal.h"

namespace rdmahash {
namespace {

using detail::runnable_tasks;

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(ClientSpinLoadavg, RunnableTasksIsLoadavgsFourthFieldNumerator) {
  EXPECT_EQ(runnable_tasks("0.20 0.18 0.12 3/80 11206\n"), 3);
  EXPECT_EQ(runnable_tasks("11.50 9.01 7.00 12/3456 1"), 12);
  EXPECT_EQ(runnable_tasks("0.00 0.00 0.00 0/1 1"), 0);
  for (const char* bad : {"", "0.20 0.18", "0.20 0.18 0.12 ", "0.20 0.18 0.12 /80 1", "0.20 0.18 0.12 x/80 1",
                          "0.20 0.18 0.12 -1/80 1", "0.20 0.18 0.12 3 80 1", "0.20 0.18 0.12 3x/80 1"})
    EXPECT_EQ(runnable_tasks(bad), std::nullopt) << "'" << bad << "'";
}

// A runnable count the test scripts, one value per look (then 1: uncontended); counts the looks.
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

// A ClientSpin on a 2-CPU machine whose runnable count is `script`, on a fake clock from t0.
class ClientSpin : public ::testing::Test {
 protected:
  ClientSpin() { spin.set_cpus(2); }
  bool paused_at(Clock::duration d) { return spin.paused(t0 + d); }
  bool keep_spinning_at(bool begins, Clock::duration d) { return spin.keep_spinning(begins, t0 + d, kBudget); }

  static constexpr std::chrono::microseconds kBudget{100};
  Script script;
  detail::ClientSpin spin{[this] { return script(); }};
  const Clock::time_point t0 = Clock::now();
};

TEST_F(ClientSpin, AStreakOfContendedLooksPausesTheSpinThenItResumes) {
  script.values = {3, 3, 3};
  EXPECT_FALSE(paused_at(milliseconds(0)));  // contended look 1
  EXPECT_FALSE(paused_at(std::chrono::microseconds(500)));  // no look
  EXPECT_EQ(script.looks, 1);
  EXPECT_FALSE(paused_at(milliseconds(1)));  // look 2
  EXPECT_TRUE(paused_at(milliseconds(2)));   // look 3: paused
  EXPECT_EQ(script.looks, 3);
  // Uncontended looks (1 runnable) do not end the pause early; it ends kPause after the last
  // contended look.
  EXPECT_TRUE(paused_at(milliseconds(50)));
  EXPECT_TRUE(paused_at(milliseconds(2) + detail::ClientSpin::kPause - milliseconds(1)));
  EXPECT_FALSE(paused_at(milliseconds(2) + detail::ClientSpin::kPause));
}

TEST_F(ClientSpin, ContentionThatPersistsExtendsThePause) {
  script.values.assign(150, 5);  // contended looks at 0..149 ms, then 1
  for (int i = 0; i < 150; ++i) EXPECT_EQ(paused_at(milliseconds(i)), i >= 2) << "look " << i;
  // The last contended look (149 ms) paused it until 249 ms; uncontended looks do not shorten it.
  for (int i = 150; i < 249; ++i) EXPECT_TRUE(paused_at(milliseconds(i))) << "look " << i;
  EXPECT_FALSE(paused_at(milliseconds(249)));
}

TEST_F(ClientSpin, BriefOrUnknownContentionNeverPauses) {
  // Runnable tasks == CPUs is not contention; a streak broken before kStreak is not either; an
  // unreadable count spins as before.
  script.values = {2, 3, 3, 2, 3, 3, 2, 3, std::nullopt, 3, 3, std::nullopt, 2, 2};
  for (int i = 0; i < 14; ++i) EXPECT_FALSE(paused_at(milliseconds(i))) << "look " << i;
  EXPECT_EQ(script.looks, 14);
}

TEST_F(ClientSpin, LooksFarApartAreNotInARow) {
  // Contended every time, but each look more than kStreakGap after the last: never a streak.
  script.values = {3, 3, 3, 3, 3};
  for (int i = 0; i < 5; ++i)
    EXPECT_FALSE(paused_at(i * (detail::ClientSpin::kStreakGap + milliseconds(1)))) << "look " << i;
  EXPECT_EQ(script.looks, 5);
}

TEST_F(ClientSpin, AStretchSpinsItsBudgetUnlessPausedWhenItBegins) {
  script.values = {1, 1, 3, 3, 3};
  // Uncontended: spins until the budget has passed since the stretch began, then sleeps.
  EXPECT_TRUE(keep_spinning_at(true, milliseconds(0)));
  EXPECT_TRUE(keep_spinning_at(false, std::chrono::microseconds(99)));
  EXPECT_FALSE(keep_spinning_at(false, kBudget));
  EXPECT_TRUE(spin.stretch_spins());
  // A new stretch restarts the budget.
  EXPECT_TRUE(keep_spinning_at(true, milliseconds(1)));
  // Three contended looks (at 2, 3, 4 ms) pause the spin: the stretch that begins then sleeps at
  // once, at every idle progress, and says it did not spin.
  EXPECT_TRUE(keep_spinning_at(true, milliseconds(2)));
  EXPECT_TRUE(keep_spinning_at(true, milliseconds(3)));
  EXPECT_FALSE(keep_spinning_at(true, milliseconds(4)));
  EXPECT_FALSE(spin.stretch_spins());
  EXPECT_FALSE(keep_spinning_at(false, milliseconds(4) + std::chrono::microseconds(1)));
  EXPECT_EQ(script.looks, 5);
}

TEST(ClientSpinMachine, CountsTheMachinesCpusAndReadsItsLoad) {
  detail::ClientSpin spin;
  EXPECT_GE(spin.cpus(), 1);
  // The real /proc/loadavg: one look, and on this test's machine the answer is whatever it is;
  // what must hold is that one look alone never pauses (kStreak > 1).
  EXPECT_FALSE(spin.paused(Clock::now()));
}

}  // namespace
}  // namespace rdmahash
