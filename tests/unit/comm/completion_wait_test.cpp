// The wait of a device collective and the NCCL group bracket (comm/completion_wait.h), driven by
// a fake CUDA runtime that behaves as the real one does: a "not ready" event poll stays in the
// thread's last-error slot until it is read, and a kernel launch check after the wait fails if
// it is still there. Negative controls: a wait that skips the clearing is seen by that check,
// and a group body that fails without the bracket leaves the group open.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/completion_wait.h"

namespace dayzero::comm {
namespace {

// The runtime's per-thread last error and the events of one collective, as NcclComm sees them.
struct FakeRuntime {
  int not_ready_polls = 3;      // polls answering "not ready" before "done"
  std::string last_error;       // "" = cudaSuccess
  std::string pending_error;    // a real error the next take_last_error finds instead
  Status async;                 // what ncclCommGetAsyncError reports
  double clock = 0, step = 0;   // seconds advanced per pause
  int aborts = 0, polls = 0, takes = 0;
  std::vector<std::string> calls;

  CompletionProbe probe() {
    CompletionProbe p;
    p.query = [this](std::string*) {
      calls.push_back("query");
      if (polls++ < not_ready_polls) {
        last_error = "cudaErrorNotReady";
        return EventPoll::kNotReady;
      }
      return EventPoll::kDone;
    };
    p.take_last_error = [this] {
      calls.push_back("take");
      ++takes;
      const std::string e = pending_error.empty() ? last_error : pending_error;
      last_error.clear();
      pending_error.clear();
      return e == "cudaErrorNotReady" ? std::string() : e;
    };
    p.async_error = [this] {
      calls.push_back("async");
      return async;
    };
    p.abort = [this] { ++aborts; };
    p.seconds = [this] { return clock; };
    p.pause = [this](int) { clock += step; };
    return p;
  }
  // What kernels/cuda/common.cuh's launch_status reads after the next launch.
  bool next_launch_ok() const { return last_error.empty(); }
};

TEST(CompletionWait, NotReadyIsClearedBeforeTheNextLaunch) {
  FakeRuntime rt;
  bool aborted = true;
  const Status s = wait_for_completion(rt.probe(), 5.0, "all_reduce #0 on tp@pp0.dp0", &aborted);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(aborted);
  EXPECT_EQ(rt.polls, 4);
  EXPECT_EQ(rt.takes, 3);
  EXPECT_TRUE(rt.next_launch_ok()) << "last error left: " << rt.last_error;
  // Each "not ready" is taken back before the communicator is asked anything.
  const std::vector<std::string> want{"query", "take", "async", "query", "take", "async",
                                      "query", "take", "async", "query"};
  EXPECT_EQ(rt.calls, want);
}

TEST(CompletionWait, NegativeControlAWaitThatDoesNotClearBreaksTheNextLaunch) {
  FakeRuntime rt;
  CompletionProbe p = rt.probe();
  p.take_last_error = [] { return std::string(); };  // the loop as it was: nothing read back
  bool aborted = false;
  ASSERT_TRUE(wait_for_completion(p, 5.0, "all_reduce", &aborted).ok());
  EXPECT_FALSE(rt.next_launch_ok());
  EXPECT_EQ(rt.last_error, "cudaErrorNotReady");
}

TEST(CompletionWait, DoneAtOnceTouchesNothingElse) {
  FakeRuntime rt;
  rt.not_ready_polls = 0;
  bool aborted = false;
  ASSERT_TRUE(wait_for_completion(rt.probe(), 5.0, "all_gather", &aborted).ok());
  EXPECT_EQ(rt.calls, std::vector<std::string>{"query"});
}

TEST(CompletionWait, ARealErrorFoundWhilePollingIsReturned) {
  FakeRuntime rt;
  rt.pending_error = "an illegal memory access was encountered";
  bool aborted = false;
  const Status s = wait_for_completion(rt.probe(), 5.0, "all_reduce #7 on tp@pp0.dp0", &aborted);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("illegal memory access"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("all_reduce #7 on tp@pp0.dp0"), std::string::npos) << s.message();
  EXPECT_FALSE(aborted);
}

TEST(CompletionWait, QueryFailureNamesTheOp) {
  FakeRuntime rt;
  CompletionProbe p = rt.probe();
  p.query = [](std::string* e) {
    *e = "unspecified launch failure";
    return EventPoll::kFailed;
  };
  bool aborted = false;
  const Status s = wait_for_completion(p, 5.0, "send #2 on pp@dp0.tp0", &aborted);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "cuda send #2 on pp@dp0.tp0: unspecified launch failure");
}

TEST(CompletionWait, AsyncErrorAbortsAndLeavesNoNotReady) {
  FakeRuntime rt;
  rt.not_ready_polls = 1000;
  rt.async = Status::Internal("nccl asynchronous error: remote process exited");
  bool aborted = false;
  const Status s = wait_for_completion(rt.probe(), 5.0, "all_reduce #1 on tp@pp0.dp0", &aborted);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("communicator aborted"), std::string::npos) << s.message();
  EXPECT_TRUE(aborted);
  EXPECT_EQ(rt.aborts, 1);
  EXPECT_TRUE(rt.next_launch_ok());
}

TEST(CompletionWait, TimeoutAbortsAfterTheLimit) {
  FakeRuntime rt;
  rt.not_ready_polls = 1 << 30;
  rt.step = 0.5;
  bool aborted = false;
  const Status s = wait_for_completion(rt.probe(), 2.0, "all_reduce #40 on tp@pp1.dp0", &aborted);
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_NE(s.message().find("all_reduce #40 on tp@pp1.dp0 not complete after 2"), std::string::npos) << s.message();
  EXPECT_TRUE(aborted);
  EXPECT_EQ(rt.aborts, 1);
  // It gave up at the first poll past 2 s: 2.5 s after five pauses.
  EXPECT_EQ(rt.polls, 6);
  EXPECT_TRUE(rt.next_launch_ok());
}

TEST(CompletionWait, NoLimitWaitsForDone) {
  FakeRuntime rt;
  rt.not_ready_polls = 5000;
  rt.step = 1.0;
  bool aborted = false;
  ASSERT_TRUE(wait_for_completion(rt.probe(), 0, "all_reduce", &aborted).ok());
  EXPECT_EQ(rt.aborts, 0);
}

// The group bracket: end() runs whenever start() succeeded.
struct FakeGroup {
  int depth = 0, starts = 0, ends = 0;
  Status start() {
    ++starts;
    ++depth;
    return Status::Ok();
  }
  Status end() {
    ++ends;
    --depth;
    return Status::Ok();
  }
};

TEST(NcclGroup, AFailedSendStillClosesTheGroup) {
  FakeGroup g;
  const Status s = run_group([&] { return g.start(); }, [] { return Status::Internal("nccl ncclSend: invalid argument"); },
                             [&] { return g.end(); });
  EXPECT_EQ(s.message(), "nccl ncclSend: invalid argument");
  EXPECT_EQ(g.depth, 0);
  EXPECT_EQ(g.ends, 1);
}

TEST(NcclGroup, NegativeControlAnEarlyReturnLeavesItOpen) {
  // The shape of the code before the bracket: return on the body's error, before end().
  FakeGroup g;
  auto unbracketed = [&]() -> Status {
    DZ_RETURN_IF_ERROR(g.start());
    DZ_RETURN_IF_ERROR(Status::Internal("nccl ncclRecv: invalid argument"));
    return g.end();
  };
  EXPECT_FALSE(unbracketed().ok());
  EXPECT_EQ(g.depth, 1);
}

TEST(NcclGroup, EndErrorIsReturnedAndStartErrorSkipsTheRest) {
  FakeGroup g;
  int bodies = 0;
  Status s = run_group([&] { return g.start(); }, [&] { return ++bodies, Status::Ok(); },
                       [&] {
                         (void)g.end();
                         return Status::Internal("nccl ncclGroupEnd: unhandled cuda error");
                       });
  EXPECT_EQ(s.message(), "nccl ncclGroupEnd: unhandled cuda error");
  EXPECT_EQ(g.depth, 0);
  s = run_group([] { return Status::Internal("nccl ncclGroupStart: internal error"); }, [&] { return ++bodies, Status::Ok(); },
                [&] { return g.end(); });
  EXPECT_EQ(s.message(), "nccl ncclGroupStart: internal error");
  EXPECT_EQ(bodies, 1);
  EXPECT_EQ(g.ends, 1);
}

TEST(NcclWaitTimeout, OutlastsTheWatchdogDeadline) {
  EXPECT_EQ(nccl_wait_timeout_s(0), 0);
  EXPECT_EQ(nccl_wait_timeout_s(300), 330);
  EXPECT_EQ(nccl_wait_timeout_s(10), 15);
  for (double t : {0.5, 1.0, 30.0, 300.0, 3600.0}) EXPECT_GE(nccl_wait_timeout_s(t), t + 5) << t;
}

}  // namespace
}  // namespace dayzero::comm
