// Preflight's NVML reader (src/preflight/nvml.h) without a driver: an absent library makes every
// field "unknown (no NVML)"; a stand-in library (fake_nvml.c) gives the MIG and ECC modes of two
// GPUs by bus id, "not supported" and "not found" as NVML answers them, a missing function and a
// failed nvmlInit_v2 named.
#include <gtest/gtest.h>

#include <cstdlib>

#include "preflight/nvml.h"

namespace dayzero::preflight {
namespace {

const std::vector<std::string> kBuses = {"0000:1b:00.0", "0000:3d:00.0", "0000:99:00.0"};

TEST(PreflightNvml, AbsentLibrarySaysUnknownInEveryField) {
  const NvmlReport r = read_nvml(kBuses, "libnvidia-ml-absent.so.1");
  EXPECT_FALSE(r.loaded);
  EXPECT_EQ(r.status, "unknown (no NVML)");
  EXPECT_EQ(r.driver_version, "unknown (no NVML)");
  ASSERT_EQ(r.devices.size(), 3u);
  for (const auto& d : r.devices) {
    EXPECT_EQ(d.mig_mode, "unknown (no NVML)");
    EXPECT_EQ(d.ecc_mode, "unknown (no NVML)");
  }
}

TEST(PreflightNvml, ModesOfEachDeviceAsTheDriverSays) {
  const NvmlReport r = read_nvml(kBuses, FAKE_NVML);
  EXPECT_TRUE(r.loaded);
  EXPECT_EQ(r.status, "NVML 580.65.06");
  EXPECT_EQ(r.driver_version, "580.65.06");
  ASSERT_EQ(r.devices.size(), 3u);
  EXPECT_EQ(r.devices[0].mig_mode, "enabled");
  EXPECT_EQ(r.devices[0].ecc_mode, "enabled (disabled after a reset)");
  EXPECT_EQ(r.devices[1].mig_mode, "not supported");
  EXPECT_EQ(r.devices[1].ecc_mode, "disabled");
  EXPECT_EQ(r.devices[2].mig_mode, "unknown (NVML: nvmlDeviceGetHandleByPciBusId_v2: Not Found)");
  EXPECT_EQ(r.devices[2].ecc_mode, r.devices[2].mig_mode);
  // No device asked: the driver's version still.
  EXPECT_EQ(read_nvml({}, FAKE_NVML).driver_version, "580.65.06");
}

TEST(PreflightNvml, AMissingFunctionOrAFailedInitIsNamed) {
  NvmlReport r = read_nvml(kBuses, FAKE_NVML_NO_MIG);
  EXPECT_FALSE(r.loaded);
  EXPECT_EQ(r.status, "unknown (NVML: no nvmlDeviceGetMigMode)");
  EXPECT_EQ(r.devices[0].mig_mode, r.status);
  setenv("FAKE_NVML_INIT_FAILS", "1", 1);
  r = read_nvml(kBuses, FAKE_NVML);
  unsetenv("FAKE_NVML_INIT_FAILS");
  EXPECT_FALSE(r.loaded);
  EXPECT_EQ(r.status, "unknown (NVML: nvmlInit_v2: Driver Not Loaded)");
  EXPECT_EQ(r.devices[1].ecc_mode, r.status);
}

}  // namespace
}  // namespace dayzero::preflight
