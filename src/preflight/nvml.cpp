// MIG and ECC modes through a dlopen()ed NVML (nvml.h). The few NVML declarations used are
// written here (NVML's ABI: an int return code, opaque device handles), so the build needs
// neither nvml.h nor the driver.
#include "preflight/nvml.h"

#include <dlfcn.h>

namespace dayzero::preflight {
namespace {

using NvmlReturn = int;  // nvmlReturn_t
using NvmlHandle = void*;  // nvmlDevice_t
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlNotSupported = 3;

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*driver_version)(char*, unsigned) = nullptr;
  NvmlReturn (*by_bus_id)(const char*, NvmlHandle*) = nullptr;
  NvmlReturn (*mig_mode)(NvmlHandle, unsigned*, unsigned*) = nullptr;
  NvmlReturn (*ecc_mode)(NvmlHandle, int*, int*) = nullptr;  // nvmlEnableState_t: 0 disabled, 1 enabled

  std::string error(const char* call, NvmlReturn r) const {
    return "unknown (NVML: " + std::string(call) + ": " +
           (error_string ? std::string(error_string(r)) : "error " + std::to_string(r)) + ")";
  }
};

// f = the library's `name`; the first name not found goes to `missing`.
template <typename F>
void bind_symbol(void* lib, const char* name, F& f, std::string& missing) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f && missing.empty()) missing = name;
}

std::string mode_text(unsigned current, unsigned pending) {
  const auto word = [](unsigned m) { return std::string(m ? "enabled" : "disabled"); };
  return current == pending ? word(current) : word(current) + " (" + word(pending) + " after a reset)";
}

}  // namespace

NvmlReport read_nvml(const std::vector<std::string>& pci_bus_ids, const std::string& library) {
  NvmlReport rep;
  auto fill = [&](const std::string& why) {
    rep.status = why;
    rep.driver_version = why;
    rep.devices.assign(pci_bus_ids.size(), NvmlDevice{why, why});
    return rep;
  };
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return fill(kNoNvml);
  struct Close {
    void* lib;
    ~Close() { dlclose(lib); }
  } close{lib};
  Nvml n;
  std::string missing;
  bind_symbol(lib, "nvmlInit_v2", n.init, missing);
  bind_symbol(lib, "nvmlShutdown", n.shutdown, missing);
  bind_symbol(lib, "nvmlErrorString", n.error_string, missing);
  bind_symbol(lib, "nvmlSystemGetDriverVersion", n.driver_version, missing);
  bind_symbol(lib, "nvmlDeviceGetHandleByPciBusId_v2", n.by_bus_id, missing);
  bind_symbol(lib, "nvmlDeviceGetMigMode", n.mig_mode, missing);
  bind_symbol(lib, "nvmlDeviceGetEccMode", n.ecc_mode, missing);
  if (!missing.empty()) return fill("unknown (NVML: no " + missing + ")");
  if (const NvmlReturn r = n.init(); r != kNvmlSuccess) return fill(n.error("nvmlInit_v2", r));
  rep.loaded = true;
  char version[96] = {};
  const NvmlReturn vr = n.driver_version(version, sizeof version - 1);
  rep.driver_version = vr == kNvmlSuccess ? std::string(version) : n.error("nvmlSystemGetDriverVersion", vr);
  rep.status = "NVML " + rep.driver_version;
  for (const std::string& bus : pci_bus_ids) {
    NvmlDevice d;
    NvmlHandle h = nullptr;
    if (const NvmlReturn r = n.by_bus_id(bus.c_str(), &h); r != kNvmlSuccess) {
      d.mig_mode = d.ecc_mode = n.error("nvmlDeviceGetHandleByPciBusId_v2", r);
      rep.devices.push_back(d);
      continue;
    }
    unsigned mig_cur = 0, mig_pend = 0;
    const NvmlReturn mr = n.mig_mode(h, &mig_cur, &mig_pend);
    d.mig_mode = mr == kNvmlSuccess        ? mode_text(mig_cur, mig_pend)
                 : mr == kNvmlNotSupported ? "not supported"
                                           : n.error("nvmlDeviceGetMigMode", mr);
    int ecc_cur = 0, ecc_pend = 0;
    const NvmlReturn er = n.ecc_mode(h, &ecc_cur, &ecc_pend);
    d.ecc_mode = er == kNvmlSuccess        ? mode_text(static_cast<unsigned>(ecc_cur), static_cast<unsigned>(ecc_pend))
                 : er == kNvmlNotSupported ? "not supported"
                                           : n.error("nvmlDeviceGetEccMode", er);
    rep.devices.push_back(d);
  }
  n.shutdown();
  return rep;
}

}  // namespace dayzero::preflight
