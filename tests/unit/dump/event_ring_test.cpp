// The flight-recorder ring and the /timeline keep modes: the ring holds exactly the last N
// events in begin order as it wraps (ends filled in only while held), a resize keeps the
// newest, and TimelineKeep::kPhases keeps no op rows while the ring and the log see every event.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "dump/event_log.h"
#include "dump/timeline.h"
#include "test_dir.h"

namespace dayzero::dump {
namespace {

TimelineEvent ev(int64_t i) {
  TimelineEvent e;
  e.t_begin_ns = 1000 + i;
  e.kind = "collective";
  e.name = "e" + std::to_string(i);
  e.seq = i;
  return e;
}

// The ring's contents are exactly events first..last-1 (by seq), in order.
void expect_range(const EventRing& ring, int64_t first, int64_t last) {
  const std::vector<TimelineEvent> got = ring.contents();
  ASSERT_EQ(got.size(), static_cast<size_t>(last - first));
  for (int64_t i = first; i < last; ++i) EXPECT_EQ(got[static_cast<size_t>(i - first)].seq, i) << "at " << i - first;
}

TEST(EventRing, WrapsAndKeepsTheLastNInOrder) {
  EventRing ring(5);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(ring.push(ev(i)), i);
  expect_range(ring, 0, 3);  // not yet full
  for (int64_t i = 3; i < 13; ++i) ring.push(ev(i));
  EXPECT_EQ(ring.size(), 5u);
  EXPECT_EQ(ring.pushed(), 13);
  expect_range(ring, 8, 13);  // wrapped twice, from a slot that is not the first
  // An end is recorded while the event is held and dropped once it fell out.
  EXPECT_TRUE(ring.set_end(9, 77));
  EXPECT_FALSE(ring.set_end(7, 77));
  EXPECT_FALSE(ring.set_end(13, 77));
  const auto got = ring.contents();
  for (const TimelineEvent& e : got) EXPECT_EQ(e.t_end_ns, e.seq == 9 ? 77 : -1) << e.seq;
}

TEST(EventRing, ResizeKeepsTheNewest) {
  EventRing ring(4);
  for (int64_t i = 0; i < 10; ++i) ring.push(ev(i));
  ring.set_capacity(2);
  expect_range(ring, 8, 10);
  ring.set_capacity(6);  // growing keeps what is held and fills from there
  expect_range(ring, 8, 10);
  for (int64_t i = 10; i < 17; ++i) ring.push(ev(i));
  expect_range(ring, 11, 17);
  EXPECT_TRUE(ring.set_end(11, 5));
  EXPECT_EQ(ring.contents().front().t_end_ns, 5);
}

TEST(EventRing, CapacityOneHoldsTheLatest) {
  EventRing ring(1);
  for (int64_t i = 0; i < 4; ++i) ring.push(ev(i));
  expect_range(ring, 3, 4);
}

TEST(Timeline, RingSeesEveryEventAndPhasesKeepsNoOpRows) {
  testing::TestDir dir;
  const std::string path = dir.file("rank-00000.jsonl");
  auto log = EventLog::open(path);
  ASSERT_TRUE(log.ok());
  Timeline tl(log->get());
  tl.set_keep(TimelineKeep::kPhases);
  tl.set_ring_capacity(8);
  const Timeline::Handle phase = tl.begin("phase", "prompts");
  for (int i = 0; i < 20; ++i) {
    const Timeline::Handle h = tl.begin("collective", "all_reduce", "tp@pp0.dp0", i, 64);
    tl.end(h);
  }
  { ScopedEvent decode(tl, "decode", "a"); }
  const Timeline::Handle open_op = tl.begin("p2p", "recv", "pp@dp0.tp0", 0, 16);
  tl.end(phase);

  // /timeline: the phase and the decode only.
  const std::vector<TimelineEvent> kept = tl.snapshot();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].kind, "phase");
  EXPECT_GE(kept[0].t_end_ns, kept[0].t_begin_ns);
  EXPECT_EQ(kept[1].kind, "decode");

  // The ring: the last 8 of 23 events, the open recv last.
  const Timeline::Recent recent = tl.recent();
  EXPECT_EQ(recent.total, 23);
  ASSERT_EQ(recent.events.size(), 8u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(recent.events[i].seq, static_cast<int64_t>(14 + i));
  EXPECT_EQ(recent.events[6].kind, "decode");
  EXPECT_EQ(recent.events.back().name, "recv");
  EXPECT_EQ(recent.events.back().t_end_ns, -1);

  // The log: every begin and end, the ends of unkept ops carrying their fields.
  tl.end(open_op);
  std::ifstream in(path);
  std::string line;
  int begins = 0, ends = 0, recv_end = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    (j["ev"] == "begin" ? begins : ends) += 1;
    if (j["ev"] == "end" && j["name"] == "recv" && j["group"] == "pp@dp0.tp0" && j["bytes"] == 16) ++recv_end;
  }
  EXPECT_EQ(begins, 23);
  EXPECT_EQ(ends, 23);
  EXPECT_EQ(recv_end, 1);
}

TEST(Timeline, EndingAnUnkeptEventTwiceIsCaught) {
  Timeline tl;
  tl.set_keep(TimelineKeep::kPhases);
  const Timeline::Handle h = tl.begin("collective", "barrier", "world", 0);
  tl.end(h);
  EXPECT_DEATH(tl.end(h), "ended twice");
}

}  // namespace
}  // namespace dayzero::dump
