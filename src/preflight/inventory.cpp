// One rank's inventory (inventory.h): /proc, /sys, statfs and the libraries' own version calls.
#include "preflight/inventory.h"

#include <H5public.h>
#include <mpi.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "backend/backend.h"
#include "preflight/nvml.h"
#ifdef DAYZERO_WITH_CUDA
#include "kernels/cuda/inventory.h"
#endif

extern char** environ;

namespace dayzero::preflight {
namespace fs = std::filesystem;
namespace {

std::string read_line(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

// "model name" and the ISA extensions that decide which kernels run (x86 flags, Arm features).
void cpu_info(nlohmann::ordered_json& cpu) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (model.empty() && (key == "model name" || key == "CPU part")) model = value;
    if (flags.empty() && (key == "flags" || key == "Features")) flags = value;
  }
  static const std::array<const char*, 14> kIsa = {"sse4_2",      "avx",      "avx2",     "fma",
                                                   "avx512f",     "avx512bw", "avx512vl", "avx512_vnni",
                                                   "avx512_bf16", "amx_tile", "amx_bf16", "asimd",
                                                   "sve",         "bf16"};
  std::set<std::string> have;
  std::istringstream fl(flags);
  for (std::string f; fl >> f;) have.insert(f);
  nlohmann::ordered_json isa = nlohmann::ordered_json::array();
  for (const char* f : kIsa)
    if (have.count(f)) isa.push_back(f);
  cpu["model"] = model.empty() ? "unknown" : model;
  cpu["isa"] = isa;
  cpu["cores"] = static_cast<int64_t>(sysconf(_SC_NPROCESSORS_ONLN));
}

std::string fs_name(int64_t type) {
  switch (static_cast<uint32_t>(type)) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x01021994: return "tmpfs";
    case 0x6969: return "nfs";
    case 0x794c7630: return "overlayfs";
    case 0x0BD00BD0: return "lustre";
    case 0x47504653: return "gpfs";
    case 0x9123683E: return "btrfs";
    case 0x19830326: return "beegfs";
    case 0xFE534D42: return "smb2";
    case 0x65735546: return "fuse";
    case 0x2FC12FC1: return "zfs";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(static_cast<uint32_t>(type)));
      return buf;
    }
  }
}

// The filesystem of path (or of its nearest existing parent): type and free bytes.
nlohmann::ordered_json folder_info(const std::string& path) {
  nlohmann::ordered_json j;
  j["path"] = path;
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  struct statfs st {};
  if (p.empty() || statfs(p.c_str(), &st) != 0) {
    j["filesystem"] = "unknown";
    j["free_bytes"] = nullptr;
    return j;
  }
  j["filesystem"] = fs_name(static_cast<int64_t>(st.f_type));
  j["free_bytes"] = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_bsize);
  return j;
}

}  // namespace

bool looks_secret(const std::string& name) {
  std::string u = name;
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* w : {"TOKEN", "SECRET", "PASSW", "KEY", "CREDENTIAL", "AUTH", "PRECONDITION", "COOKIE"})
    if (u.find(w) != std::string::npos) return true;
  return false;
}

bool recorded_variable(const std::string& name) {
  // Open MPI's per-process bookkeeping (vpid, node rank, app number of an MPMD launch, daemon
  // URIs, session folders) differs between ranks of a healthy job: not a setting; nor are the
  // launch and routing components its daemons set for the ranks they start on other nodes.
  if (name == "OMPI_MCA_plm" || name == "OMPI_MCA_routed") return false;
  for (const char* p : {"OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir",
                        "OMPI_MCA_shmem_RUNTIME_QUERY_hint", "OMPI_MCA_mpi_oversubscribe",
                        "OMPI_MCA_rmaps_base_oversubscribe"})
    if (name.rfind(p, 0) == 0) return false;
  for (const char* p : {"NCCL_", "UCX_", "OMPI_MCA_", "FI_", "I_MPI_", "OMP_", "OPENBLAS_", "DAYZERO_", "HWLOC_",
                        "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
                        "NVIDIA_VISIBLE_DEVICES", "MKL_NUM_THREADS", "LD_PRELOAD"})
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

nlohmann::ordered_json local_inventory(const InventoryInputs& in) {
  nlohmann::ordered_json j;
  j["rank"] = in.rank;
  j["local_rank"] = in.local_rank;
  j["host"] = in.host;
  nlohmann::ordered_json cpu;
  cpu_info(cpu);
  j["cpu"] = cpu;
  j["memory_bytes"] = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  // "13.0" from 13000 (CUDA runtime and driver), "2.28.5" from 22805 (NCCL), "13.1.0" from
  // 130100 (cuBLAS); "none" for 0.
  auto cuda_ver = [](int v) {
    return v <= 0 ? std::string("none") : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  auto dotted = [](int v) {
    return v <= 0 ? std::string("none")
                  : std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
  };
  nlohmann::ordered_json versions_cuda = nlohmann::ordered_json::object();
  {
    nlohmann::ordered_json g;
    g["cuda_built"] = backend::cuda_built();
    nlohmann::ordered_json devs = nlohmann::ordered_json::array();
#ifdef DAYZERO_WITH_CUDA
    const kernels::cuda::CudaInventory ci = kernels::cuda::inventory();
    std::vector<std::string> bus_ids;
    for (const auto& d : ci.devices) bus_ids.push_back(d.pci_bus_id);
    const NvmlReport nvml = read_nvml(bus_ids);
    for (size_t i = 0; i < ci.devices.size(); ++i) {
      const auto& d = ci.devices[i];
      devs.push_back({{"index", d.index}, {"name", d.name}, {"pci_bus_id", d.pci_bus_id},
                      {"memory_bytes", d.memory_bytes},
                      {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                      {"ecc", d.ecc}, {"mig_mode", nvml.devices[i].mig_mode}, {"ecc_mode", nvml.devices[i].ecc_mode}});
    }
    if (!ci.error.empty()) g["error"] = ci.error;
    versions_cuda["cuda_runtime"] = cuda_ver(ci.runtime_version);
    versions_cuda["cuda_driver"] = cuda_ver(ci.driver_version);
    versions_cuda["cublas"] = ci.cublas_version <= 0 ? std::string("none") : std::to_string(ci.cublas_version);
    versions_cuda["nccl"] = dotted(ci.nccl_version);
#else
    (void)dotted;
    const NvmlReport nvml = read_nvml({});
    versions_cuda["cuda_runtime"] = cuda_ver(0);
#endif
    // The driver's own version (the CUDA driver API's "13.0" is shared by many driver builds).
    versions_cuda["nvidia_driver"] = nvml.driver_version;
    g["nvml"] = nvml.status;
    g["count"] = static_cast<int64_t>(devs.size());
    g["devices"] = devs;
    j["gpus"] = g;
  }
  {
    nlohmann::ordered_json v;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int len = 0;
    MPI_Get_library_version(lib, &len);
    std::string mpi(lib, static_cast<size_t>(std::max(0, len)));
    if (const auto nl = mpi.find_first_of(",\n"); nl != std::string::npos) mpi.resize(nl);
    v["mpi"] = mpi;
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    v["hdf5"] = std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel);
    for (const auto& [k, val] : versions_cuda.items()) v[k] = val;
    v["dayzero"] = in.version;
    j["versions"] = v;
  }
  {
    std::vector<std::pair<std::string, std::string>> vars;
    for (char** e = environ; e && *e; ++e) {
      const std::string kv = *e;
      const auto eq = kv.find('=');
      if (eq == std::string::npos) continue;
      const std::string name = kv.substr(0, eq);
      if (!recorded_variable(name)) continue;
      vars.emplace_back(name, looks_secret(name) ? "<redacted>" : kv.substr(eq + 1));
    }
    std::sort(vars.begin(), vars.end());
    nlohmann::ordered_json env = nlohmann::ordered_json::object();
    for (const auto& [k, v] : vars) env[k] = v;
    j["env"] = env;
  }
  {
    nlohmann::ordered_json ifs = nlohmann::ordered_json::array();
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& d : fs::directory_iterator("/sys/class/net", ec)) names.push_back(d.path().filename());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      if (n == "lo") continue;
      const fs::path base = fs::path("/sys/class/net") / n;
      nlohmann::ordered_json i;
      i["name"] = n;
      i["state"] = read_line(base / "operstate");
      const std::string speed = read_line(base / "speed");
      i["speed_mbps"] = speed.empty() || speed[0] == '-' ? nlohmann::ordered_json(nullptr)
                                                          : nlohmann::ordered_json(std::atoll(speed.c_str()));
      i["mtu"] = std::atoll(read_line(base / "mtu").c_str());
      ifs.push_back(i);
    }
    j["interfaces"] = ifs;
    nlohmann::ordered_json ib = nlohmann::ordered_json::array();
    std::vector<std::string> ibs;
    for (const auto& d : fs::directory_iterator("/sys/class/infiniband", ec)) ibs.push_back(d.path().filename());
    std::sort(ibs.begin(), ibs.end());
    for (const auto& n : ibs) ib.push_back(n);
    j["ib_devices"] = ib;
  }
  j["run_dir"] = folder_info(in.run_dir);
  j["checkpoint"] = in.checkpoint_dir.empty() ? nlohmann::ordered_json(nullptr) : folder_info(in.checkpoint_dir);
  j["clock_offset_ns"] = 0;
  return j;
}

}  // namespace dayzero::preflight
