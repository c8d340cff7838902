#include "platform/health/checks.h"

#include <dlfcn.h>
#include <sys/statvfs.h>

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "common/files.h"

namespace ff::health {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r'))
    s.pop_back();
  return s;
}

std::string ReadSmallFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return Trim(s);
}

std::string Bytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1 << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
  }
  return buf;
}

// The text of a kernel log record without its prefix: /dev/kmsg's "pri,seq,usec,flags;" or
// dmesg's "[ seconds]".
std::string_view MessageOf(std::string_view line) {
  if (auto semi = line.find(';'); semi != std::string_view::npos && semi < 40 && !line.empty() &&
                                  line[0] >= '0' && line[0] <= '9') {
    line.remove_prefix(semi + 1);
  } else if (!line.empty() && line[0] == '[') {
    if (auto close = line.find(']'); close != std::string_view::npos) line.remove_prefix(close + 1);
  }
  while (!line.empty() && line.front() == ' ')
    line.remove_prefix(1);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
    line.remove_suffix(1);
  return line;
}

}  // namespace

std::string_view KindName(KernelEvent::Kind kind) {
  switch (kind) {
    case KernelEvent::Kind::kGpuXid:
      return "xid";
    case KernelEvent::Kind::kMachineCheck:
      return "mce";
    case KernelEvent::Kind::kMemoryEdac:
      return "edac";
    case KernelEvent::Kind::kPcieAer:
      return "aer";
  }
  return "?";
}

bool XidIsFatal(int xid) {
  static const std::set<int> kFatal = {48, 61, 62, 64, 74, 79, 95, 119, 120, 140};
  return kFatal.contains(xid);
}

std::optional<KernelEvent> ParseKernelLine(std::string_view line) {
  const std::string msg(MessageOf(line));
  std::smatch m;
  // NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
  static const std::regex kXid(R"(NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),\s*(.*))");
  if (std::regex_search(msg, m, kXid)) {
    KernelEvent e;
    e.kind = KernelEvent::Kind::kGpuXid;
    e.device = m[1].str();
    int xid = 0;
    const std::string num = m[2].str();
    std::from_chars(num.data(), num.data() + num.size(), xid);
    e.xid = xid;
    e.fatal = XidIsFatal(xid);
    // The explanation is the text after the pid= / name= fields.
    std::string rest = m[3].str();
    static const std::regex kFields(R"(^((pid|name)=[^,]*,\s*)*)");
    rest = std::regex_replace(rest, kFields, "");
    while (!rest.empty() && (rest.back() == '.' || rest.back() == ' '))
      rest.pop_back();
    e.summary = "Xid " + num + " on " + e.device + (rest.empty() ? "" : " (" + rest + ")");
    return e;
  }
  // mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: be00000000800400
  // mce: [Hardware Error]: Machine check events logged
  // mce: Uncorrected hardware memory error in user-access at 3b9b5c000
  if (msg.starts_with("mce:") && (msg.find("Hardware Error") != std::string::npos ||
                                  msg.find("hardware") != std::string::npos)) {
    KernelEvent e;
    e.kind = KernelEvent::Kind::kMachineCheck;
    static const std::regex kCpu(R"(CPU (\d+))");
    if (std::regex_search(msg, m, kCpu)) e.device = "CPU " + m[1].str();
    e.fatal = msg.find("Uncorrected") != std::string::npos ||
              msg.find("Fatal") != std::string::npos || msg.find("PANIC") != std::string::npos;
    e.summary = "machine check" + (e.device.empty() ? "" : " on " + e.device) +
                (e.fatal ? " (uncorrected)" : " (corrected)");
    return e;
  }
  // EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (...)
  // EDAC MC1: 1 UE memory read error on ...
  static const std::regex kEdac(R"(EDAC (MC\d+): (\d+) (CE|UE) )");
  if (std::regex_search(msg, m, kEdac)) {
    KernelEvent e;
    e.kind = KernelEvent::Kind::kMemoryEdac;
    e.device = m[1].str();
    e.fatal = m[3].str() == "UE";
    e.summary = m[2].str() + (e.fatal ? " uncorrectable" : " corrected") + " memory error(s) on " +
                e.device;
    return e;
  }
  // pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0
  // pcieport 0000:00:03.0: AER: Corrected error received: 0000:3b:00.0
  static const std::regex kAer(
      R"(^\S+ ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]): AER: (.*))");
  if (std::regex_search(msg, m, kAer)) {
    const std::string what = m[2].str();
    if (what.find("error received") == std::string::npos) return std::nullopt;
    KernelEvent e;
    e.kind = KernelEvent::Kind::kPcieAer;
    e.device = m[1].str();
    e.fatal = what.find("Fatal") != std::string::npos;
    e.summary =
        "PCIe " +
        std::string(e.fatal                                         ? "fatal"
                    : what.find("Uncorrected") != std::string::npos ? "uncorrected non-fatal"
                                                                    : "corrected") +
        " error at " + e.device;
    return e;
  }
  return std::nullopt;
}

// ---- GPUs -------------------------------------------------------------------------------------

namespace {

// The few NVML entry points used, with their C signatures (nvml.h is not needed to build).
struct Nvml {
  using Ret = int;  // nvmlReturn_t; 0 is NVML_SUCCESS
  using Device = void*;
  Ret (*init)() = nullptr;
  Ret (*shutdown)() = nullptr;
  Ret (*count)(unsigned*) = nullptr;
  Ret (*handle)(unsigned, Device*) = nullptr;
  Ret (*name)(Device, char*, unsigned) = nullptr;
  Ret (*temperature)(Device, int, unsigned*) = nullptr;
  Ret (*pci)(Device, void*) = nullptr;
  const char* (*error)(Ret) = nullptr;
};

}  // namespace

std::vector<GpuInfo> ProbeGpus(std::string* why_none) {
  std::vector<GpuInfo> gpus;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *why_none = "no NVIDIA driver (libnvidia-ml.so.1 not found)";
    return gpus;
  }
  Nvml n;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    return fn != nullptr;
  };
  if (!sym(n.init, "nvmlInit_v2") || !sym(n.shutdown, "nvmlShutdown") ||
      !sym(n.count, "nvmlDeviceGetCount_v2") || !sym(n.handle, "nvmlDeviceGetHandleByIndex_v2") ||
      !sym(n.name, "nvmlDeviceGetName") || !sym(n.temperature, "nvmlDeviceGetTemperature") ||
      !sym(n.error, "nvmlErrorString")) {
    *why_none = "libnvidia-ml.so.1 lacks the NVML entry points used";
    dlclose(lib);
    return gpus;
  }
  if (Nvml::Ret r = n.init(); r != 0) {
    *why_none = std::string("nvmlInit failed: ") + n.error(r);
    dlclose(lib);
    return gpus;
  }
  unsigned count = 0;
  if (Nvml::Ret r = n.count(&count); r != 0) {
    *why_none = std::string("nvmlDeviceGetCount failed: ") + n.error(r);
    count = 0;
  }
  for (unsigned i = 0; i < count; ++i) {
    Nvml::Device dev = nullptr;
    if (n.handle(i, &dev) != 0) continue;  // an inaccessible GPU is a missing one
    GpuInfo g;
    char name[96] = {};
    if (n.name(dev, name, sizeof name) == 0) g.name = name;
    unsigned t = 0;
    if (n.temperature(dev, /*NVML_TEMPERATURE_GPU=*/0, &t) == 0)
      g.temperature_c = static_cast<int>(t);
    g.index = static_cast<int>(i);
    gpus.push_back(g);
  }
  n.shutdown();
  dlclose(lib);
  return gpus;
}

CheckResult CheckGpus(const std::vector<GpuInfo>& gpus, int expected, const std::string& why_none) {
  CheckResult r{"gpus", true, ""};
  r.message = std::to_string(gpus.size()) + " GPU" + (gpus.size() == 1 ? "" : "s");
  if (gpus.empty() && !why_none.empty()) r.message += " (" + why_none + ")";
  if (expected > 0) {
    r.message += ", " + std::to_string(expected) + " expected";
    r.ok = static_cast<int>(gpus.size()) >= expected;
  }
  return r;
}

// ---- InfiniBand -------------------------------------------------------------------------------

std::vector<IbPort> ProbeIbPorts(const std::string& sysfs_root) {
  namespace fs = std::filesystem;
  std::vector<IbPort> ports;
  std::error_code ec;
  for (const auto& dev : fs::directory_iterator(sysfs_root, ec)) {
    std::error_code ec2;
    for (const auto& port : fs::directory_iterator(dev.path() / "ports", ec2)) {
      IbPort p;
      p.device = dev.path().filename().string();
      const std::string num = port.path().filename().string();
      if (std::from_chars(num.data(), num.data() + num.size(), p.port).ec != std::errc()) continue;
      std::string state = ReadSmallFile(port.path() / "state");  // "4: ACTIVE"
      if (auto colon = state.find(':'); colon != std::string::npos) state = state.substr(colon + 1);
      while (!state.empty() && state.front() == ' ')
        state.erase(0, 1);
      p.state = state.empty() ? "UNKNOWN" : state;
      const std::string rate = ReadSmallFile(port.path() / "rate");  // "200 Gb/sec (4X HDR)"
      p.rate_gbps = std::atof(rate.c_str());
      ports.push_back(p);
    }
  }
  std::sort(ports.begin(), ports.end(), [](const IbPort& a, const IbPort& b) {
    return std::tie(a.device, a.port) < std::tie(b.device, b.port);
  });
  return ports;
}

CheckResult CheckIbPorts(const std::vector<IbPort>& ports, int expected_active) {
  CheckResult r{"infiniband", true, ""};
  int active = 0;
  std::string down;
  for (const IbPort& p : ports) {
    if (p.state == "ACTIVE") {
      ++active;
    } else {
      down += (down.empty() ? "" : ", ") + p.device + "/" + std::to_string(p.port) + " " + p.state;
    }
  }
  r.message = std::to_string(active) + " of " + std::to_string(ports.size()) + " ports active";
  if (!down.empty()) r.message += " (" + down + ")";
  if (expected_active > 0) {
    r.message += ", " + std::to_string(expected_active) + " expected";
    r.ok = active >= expected_active;
  }
  return r;
}

// ---- disk and memory --------------------------------------------------------------------------

CheckResult CheckDisk(const std::string& path, int64_t min_free_bytes, int64_t* free_bytes) {
  CheckResult r{"disk", true, ""};
  struct statvfs st {};
  if (statvfs(path.c_str(), &st) != 0) {
    r.ok = false;
    r.message = path + ": " + std::strerror(errno);
    *free_bytes = 0;
    return r;
  }
  *free_bytes = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  r.message = path + ": " + Bytes(*free_bytes) + " free";
  if (*free_bytes < min_free_bytes) {
    r.ok = false;
    r.message += ", under the " + Bytes(min_free_bytes) + " required";
  }
  return r;
}

Result<int64_t> ParseMemAvailable(std::string_view meminfo) {
  static const std::regex kLine(R"((?:^|\n)MemAvailable:\s+(\d+) kB)");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(meminfo.begin(), meminfo.end(), m, kLine)) {
    return InvalidArgument("no 'MemAvailable: N kB' line");
  }
  return std::stoll(m[1].str()) * 1024;
}

CheckResult CheckMemory(const std::string& meminfo_path, int64_t min_available_bytes,
                        int64_t* available_bytes) {
  CheckResult r{"memory", true, ""};
  *available_bytes = 0;
  Result<std::string> text = ReadWholeFile(meminfo_path, "memory info");
  Result<int64_t> avail = text.ok() ? ParseMemAvailable(*text) : Result<int64_t>(text.status());
  if (!avail.ok()) {
    r.ok = false;
    r.message = meminfo_path + ": " + avail.status().message();
    return r;
  }
  *available_bytes = *avail;
  r.message = Bytes(*avail) + " available";
  if (*avail < min_available_bytes) {
    r.ok = false;
    r.message += ", under the " + Bytes(min_available_bytes) + " required";
  }
  return r;
}

}  // namespace ff::health
