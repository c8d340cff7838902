// The probes of a node's health, each a function from what the machine shows (sysfs, procfs, the
// kernel log, NVML) to a CheckResult. Parsers are pure so they are tested on recorded input; the
// probes that touch the machine take their paths as arguments so tests point them at fixtures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ff::health {

// One check's outcome: `name` is stable (a metric label and the key hai-server shows), `message`
// says what was seen in a line an admin can act on.
struct CheckResult {
  std::string name;
  bool ok = true;
  std::string message;
  int64_t time_ms = 0;  // validators: when it ran (a report repeats the last run's result)
};

// ---- kernel log -------------------------------------------------------------------------------

// A hardware error reported by the kernel. `fatal` errors mean the device cannot be trusted until
// it is reset or the node rebooted (a GPU off the bus, an uncorrectable ECC error); the others are
// counted (corrected errors, application faults that NVIDIA also reports as Xids).
struct KernelEvent {
  enum class Kind { kGpuXid, kMachineCheck, kMemoryEdac, kPcieAer };
  Kind kind = Kind::kGpuXid;
  bool fatal = false;
  int xid = 0;          // kGpuXid: the Xid number
  std::string device;   // "0000:3b:00" (GPU's PCI address), "MC0", "0000:00:03.0", "CPU 3"
  std::string summary;  // "Xid 79 on 0000:3b:00 (GPU has fallen off the bus)"
};

std::string_view KindName(KernelEvent::Kind kind);  // "xid", "mce", "edac", "aer"

// Parses one kernel log line, as /dev/kmsg gives it ("6,1234,5678,-;NVRM: Xid ...") or as dmesg
// prints it ("[ 12.345] NVRM: Xid ..."); nullopt when it reports no hardware error.
std::optional<KernelEvent> ParseKernelLine(std::string_view line);

// Xids that mean the GPU needs a reset or the node a reboot (NVIDIA's Xid catalogue: double-bit
// ECC, row-remapping failure, NVLink, off the bus, uncontained ECC, GSP and micro-controller
// errors). Application faults (13, 31, 43, 45) are not.
bool XidIsFatal(int xid);

// ---- GPUs (NVML, loaded at run time) ----------------------------------------------------------

struct GpuInfo {
  std::string name;
  int index = 0;
  int temperature_c = -1;
};

// The node's GPUs through libnvidia-ml.so.1, dlopen'ed: no library or no driver gives zero GPUs
// and a note in `why_none` (not an error: a CPU node has none).
std::vector<GpuInfo> ProbeGpus(std::string* why_none);
// expected 0: any count is fine; else fewer than expected fails.
CheckResult CheckGpus(const std::vector<GpuInfo>& gpus, int expected, const std::string& why_none);

// ---- InfiniBand (sysfs) -----------------------------------------------------------------------

struct IbPort {
  std::string device;  // mlx5_0
  int port = 0;
  std::string state;  // "ACTIVE", "DOWN", ...
  double rate_gbps = 0;
};

// Every port under `sysfs_root` (normally /sys/class/infiniband): <dev>/ports/<n>/state
// ("4: ACTIVE") and rate ("200 Gb/sec (4X HDR)"). A missing root gives no ports.
std::vector<IbPort> ProbeIbPorts(const std::string& sysfs_root);
// expected_active 0: report only; else fewer ACTIVE ports than that fails.
CheckResult CheckIbPorts(const std::vector<IbPort>& ports, int expected_active);

// ---- disk and memory --------------------------------------------------------------------------

// statvfs(path): fails when fewer than min_free_bytes are free for unprivileged users or the path
// cannot be read.
CheckResult CheckDisk(const std::string& path, int64_t min_free_bytes, int64_t* free_bytes);

// MemAvailable from /proc/meminfo-format text, in bytes; an error if absent.
Result<int64_t> ParseMemAvailable(std::string_view meminfo);
CheckResult CheckMemory(const std::string& meminfo_path, int64_t min_available_bytes,
                        int64_t* available_bytes);

}  // namespace ff::health
