// Which Comm a CUDA run puts in front of each plan group: NCCL for the groups that move device
// tensors (tp, pp, ep) when the run asks for it or, under comm: auto, when every rank drives a
// GPU of its own, decided from each rank's host name and PCI bus id gathered over the world (so
// ranks that each see one GPU through CUDA_VISIBLE_DEVICES still use NCCL); MPI with host staging
// otherwise; and the sentence the run records. Pure host logic, tested on the CPU; not the
// gather (run_backend.cpp) nor the communicators (nccl_comm.h, staged_comm.h).
#pragma once

#include <array>
#include <string>
#include <vector>

namespace dayzero::comm {

// The groups of ProcessGroups, in its order (groups.h).
enum class GroupKind { kWorld, kTp, kPp, kDp, kEp, kEtp };
inline constexpr std::array<GroupKind, 6> kGroupKinds{GroupKind::kWorld, GroupKind::kTp, GroupKind::kPp,
                                                       GroupKind::kDp,    GroupKind::kEp, GroupKind::kEtp};
const char* group_kind_name(GroupKind k);  // "world", "tp", ...

// What the forward pass sends through a group: device tensors through tp (all-reduce,
// all-gather), pp (activations between stages) and ep (token dispatch; used only under wide
// expert parallelism, so a caller passes ep's size as 1 otherwise); world, dp and etp carry
// host helpers only (agreements, maxima), which go to MPI whatever Comm fronts them.
bool moves_device_tensors(GroupKind k);

// A rank's GPU as the world sees it: "<host> GPU <PCI bus id>"; an empty bus id (it could not be
// read) gives an empty key.
std::string gpu_key(const std::string& host, const std::string& pci_bus_id);
// True when every key is non-empty and no two are equal: each rank drives a GPU of its own.
bool each_rank_owns_a_gpu(const std::vector<std::string>& keys);

enum class CommRequest { kAuto, kMpi, kNccl };  // run config `comm`

struct DeviceCommChoice {
  std::array<bool, 6> nccl{};  // per GroupKind: an NcclComm in front of the group
  std::string record;          // the run summary's "comm"
};
// group_sizes: per GroupKind, the group's size on this rank. NCCL for a group when it moves
// device tensors, has more than one rank, and the request is nccl, or auto with
// each_rank_owns_a_gpu(keys). record: "none (one rank)" when no group has more than one rank;
// "nccl (tp, ep; host tensors and the other groups over MPI)"; "none (no group that moves device
// tensors has more than one rank)" when NCCL would be taken but no group needs it; "mpi (device
// buffers staged through host memory[; ranks share GPUs])".
DeviceCommChoice choose_device_comm(CommRequest request, const std::vector<std::string>& keys,
                                    const std::array<int, 6>& group_sizes);

}  // namespace dayzero::comm
