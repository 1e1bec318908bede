// The driver's own view of a GPU for `dayzero preflight`: MIG mode and ECC mode (current and
// pending) and the driver's version, read through NVML, which is dlopen()ed at run time
// (libnvidia-ml.so.1 ships with the driver), so nothing links against the driver and a machine
// without it says so instead of failing. Local only; not the CUDA runtime's device list
// (kernels/cuda/inventory.h) nor the comparison across ranks (classes.h).
#pragma once

#include <string>
#include <vector>

namespace dayzero::preflight {

// What a field reads when NVML cannot be loaded.
inline constexpr const char* kNoNvml = "unknown (no NVML)";

struct NvmlDevice {
  // "enabled", "disabled", "enabled (disabled after a reset)" where the pending mode differs,
  // "not supported" (NVML_ERROR_NOT_SUPPORTED: a GPU without MIG, or without ECC), kNoNvml, or
  // "unknown (NVML: <call>: <NVML's error>)".
  std::string mig_mode;
  std::string ecc_mode;
};

struct NvmlReport {
  bool loaded = false;         // the library opened and nvmlInit_v2 succeeded
  std::string status;          // "NVML <driver version>", kNoNvml, or "unknown (NVML: <why>)"
  std::string driver_version;  // nvmlSystemGetDriverVersion ("580.65.06"); the status's text when not loaded
  std::vector<NvmlDevice> devices;  // one per bus id asked, in order
};

// Opens `library` (dlopen; the default is the driver's), initialises NVML, reads the driver's
// version and, for each PCI bus id ("0000:1b:00.0", as cudaDeviceGetPCIBusId gives it), the MIG
// and ECC modes; shuts NVML down and closes the library. Never fails: every field says what
// could not be read. A library that lacks a function gives "unknown (NVML: no <function>)".
NvmlReport read_nvml(const std::vector<std::string>& pci_bus_ids, const std::string& library = "libnvidia-ml.so.1");

}  // namespace dayzero::preflight
