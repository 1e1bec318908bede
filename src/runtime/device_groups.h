// The process groups of a job on a CUDA backend: each group moves device tensors over NCCL where
// the run's communicator choice (comm::choose_device_comm) says so, else over MPI with the
// tensors staged through host memory. Shared by `dayzero run` and `dayzero preflight`, so that
// preflight measures the transport the job will use.
#pragma once

#include <array>

#include "backend/backend.h"
#include "comm/groups.h"
#include "core/status.h"

namespace dayzero::dump {
class Timeline;
}

namespace dayzero::runtime {

// Puts a Comm in front of every group of `groups` (comm::ProcessGroups::wrap_each, kind order):
// an NcclComm on `device` and the backend's stream where nccl[kind], each collective's wait
// bounded by nccl_wait_s; a StagedComm through `be` otherwise, and where an NcclComm cannot be
// made. Collective over each group in turn. Returns the first NCCL error (Ok when none), which
// the caller agrees on or returns. timeline may be null.
Status wrap_groups_for_device(comm::ProcessGroups& groups, backend::Backend& be, int device,
                              const std::array<bool, 6>& nccl, dump::Timeline* timeline, double nccl_wait_s);

}  // namespace dayzero::runtime
