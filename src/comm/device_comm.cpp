// The device comm choice (device_comm.h).
#include "comm/device_comm.h"

#include <set>

namespace dayzero::comm {

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::kWorld: return "world";
    case GroupKind::kTp: return "tp";
    case GroupKind::kPp: return "pp";
    case GroupKind::kDp: return "dp";
    case GroupKind::kEp: return "ep";
    case GroupKind::kEtp: return "etp";
  }
  return "?";
}

bool moves_device_tensors(GroupKind k) { return k == GroupKind::kTp || k == GroupKind::kPp || k == GroupKind::kEp; }

std::string gpu_key(const std::string& host, const std::string& pci_bus_id) {
  return pci_bus_id.empty() ? std::string() : host + " GPU " + pci_bus_id;
}

bool each_rank_owns_a_gpu(const std::vector<std::string>& keys) {
  std::set<std::string> seen;
  for (const std::string& k : keys)
    if (k.empty() || !seen.insert(k).second) return false;
  return !keys.empty();
}

DeviceCommChoice choose_device_comm(CommRequest request, const std::vector<std::string>& keys,
                                    const std::array<int, 6>& group_sizes) {
  DeviceCommChoice c;
  bool several = false;
  for (int s : group_sizes) several = several || s > 1;
  if (!several) {
    c.record = "none (one rank)";
    return c;
  }
  const bool own = each_rank_owns_a_gpu(keys);
  const bool nccl = request == CommRequest::kNccl || (request == CommRequest::kAuto && own);
  std::string on;
  if (nccl)
    for (size_t i = 0; i < kGroupKinds.size(); ++i)
      if (moves_device_tensors(kGroupKinds[i]) && group_sizes[i] > 1) {
        c.nccl[i] = true;
        on += (on.empty() ? "" : ", ") + std::string(group_kind_name(kGroupKinds[i]));
      }
  if (!on.empty())
    c.record = "nccl (" + on + "; host tensors and the other groups over MPI)";
  else if (nccl)
    c.record = "none (no group that moves device tensors has more than one rank)";
  else
    c.record = std::string("mpi (device buffers staged through host memory") +
               (request == CommRequest::kAuto && !own ? "; ranks share GPUs" : "") + ")";
  return c;
}

}  // namespace dayzero::comm
