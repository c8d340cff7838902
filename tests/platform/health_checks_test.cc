// hai-health's parsers and probes on recorded input: kernel log lines as real machines printed
// them (NVIDIA Xids, machine checks, EDAC, PCIe AER), sysfs InfiniBand ports, /proc/meminfo.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "platform/health/checks.h"
#include "platform/health/probes.h"
#include "tests/support/subprocess.h"

namespace ff::health {
namespace {

using Kind = KernelEvent::Kind;

TEST(KernelLogParser, GpuXidsFromKmsgAndDmesgFormats) {
  auto e = ParseKernelLine(
      "3,1178,2781093462,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1911, name=python3, GPU has "
      "fallen off the bus.");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kGpuXid);
  EXPECT_EQ(e->xid, 79);
  EXPECT_EQ(e->device, "0000:3b:00");
  EXPECT_TRUE(e->fatal);
  EXPECT_EQ(e->summary, "Xid 79 on 0000:3b:00 (GPU has fallen off the bus)");

  e = ParseKernelLine(
      "[1726711.301533] NVRM: Xid (PCI:0000:86:00): 48, pid='<unknown>', name=<unknown>, An "
      "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
      "partition 1, subpartition 0.");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->xid, 48);
  EXPECT_TRUE(e->fatal);
  EXPECT_EQ(e->device, "0000:86:00");

  // An application's fault is counted, not a node failure.
  e = ParseKernelLine(
      "4,2001,99,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=2207, name=train, Graphics SM Warp "
      "Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->xid, 13);
  EXPECT_FALSE(e->fatal);
  e = ParseKernelLine(
      "[ 88.1] NVRM: Xid (PCI:0000:af:00): 31, pid=77, name=x, Ch 00000008, "
      "intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f");
  ASSERT_TRUE(e.has_value());
  EXPECT_FALSE(e->fatal);
  e = ParseKernelLine("NVRM: Xid (PCI:0000:af:00): 74, pid=77, NVLink: fatal error detected");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->fatal);
}

TEST(KernelLogParser, MachineChecksEdacAndPcieErrors) {
  auto e = ParseKernelLine(
      "[ 5123.4] mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: be00000000800400");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kMachineCheck);
  EXPECT_EQ(e->device, "CPU 3");
  EXPECT_FALSE(e->fatal);
  e = ParseKernelLine(
      "2,99,1,-;mce: Uncorrected hardware memory error in user-access at 3b9b5c000");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->fatal);

  e = ParseKernelLine(
      "[ 77.0] EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 "
      "(channel:1 slot:0 page:0x81c1a offset:0x0 grain:32 syndrome:0x0)");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kMemoryEdac);
  EXPECT_FALSE(e->fatal);
  e = ParseKernelLine("[ 78.0] EDAC MC1: 1 UE memory read error on CPU_SrcID#1_Ha#0_Chan#0_DIMM#1");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->fatal);
  EXPECT_EQ(e->device, "MC1");

  e = ParseKernelLine(
      "[ 9.9] pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kPcieAer);
  EXPECT_TRUE(e->fatal);
  EXPECT_EQ(e->device, "0000:00:03.0");
  e = ParseKernelLine("[ 9.9] pcieport 0000:00:03.0: AER: Corrected error received: 0000:3b:00.0");
  ASSERT_TRUE(e.has_value());
  EXPECT_FALSE(e->fatal);
}

TEST(KernelLogParser, OrdinaryLinesAreNotErrors) {
  for (const char* line : {"6,1,0,-;Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)",
                           "[ 3.2] nvidia: loading out-of-tree module taints kernel.",
                           "[ 4.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03",
                           "[ 9.9] pcieport 0000:00:03.0: AER: enabled with IRQ 24",
                           "[ 1.0] mce: CPU0: Thermal "
                           "monitoring enabled (TM1)",
                           "", "EDAC MC: Ver: 3.0.0"}) {
    EXPECT_FALSE(ParseKernelLine(line).has_value()) << line;
  }
}

TEST(KernelLog, FollowsAFileAsItGrowsIncludingHalfWrittenLines) {
  test::TempDir dir;
  const std::string path = dir.File("kmsg");
  KernelLog log(path);
  EXPECT_TRUE(log.Poll().empty());
  EXPECT_NE(log.error(), "");  // not there yet: said, retried
  test::WriteFile(path, "6,1,0,-;boot\n3,2,5,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has");
  EXPECT_TRUE(log.Poll().empty());
  EXPECT_EQ(log.error(), "");
  {
    std::ofstream out(path, std::ios::app);
    out << " fallen off the bus.\n3,3,6,-;EDAC MC0: 2 UE memory read error on DIMM#0\n";
  }
  auto events = log.Poll();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].xid, 79);
  EXPECT_EQ(events[1].kind, Kind::kMemoryEdac);
  EXPECT_TRUE(log.Poll().empty());  // each event once
}

TEST(InfiniBand, PortsFromSysfs) {
  test::TempDir dir;
  namespace fs = std::filesystem;
  auto port = [&](const std::string& dev, int n, const std::string& state,
                  const std::string& rate) {
    fs::path p = fs::path(dir.path()) / dev / "ports" / std::to_string(n);
    fs::create_directories(p);
    test::WriteFile((p / "state").string(), state + "\n");
    test::WriteFile((p / "rate").string(), rate + "\n");
  };
  port("mlx5_0", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)");
  port("mlx5_1", 1, "1: DOWN", "10 Gb/sec (4X SDR)");
  std::vector<IbPort> ports = ProbeIbPorts(dir.path());
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_EQ(ports[0].device, "mlx5_0");
  EXPECT_EQ(ports[0].state, "ACTIVE");
  EXPECT_DOUBLE_EQ(ports[0].rate_gbps, 200);
  EXPECT_EQ(ports[1].state, "DOWN");
  EXPECT_TRUE(CheckIbPorts(ports, 0).ok);
  EXPECT_TRUE(CheckIbPorts(ports, 1).ok);
  CheckResult two = CheckIbPorts(ports, 2);
  EXPECT_FALSE(two.ok);
  EXPECT_EQ(two.message, "1 of 2 ports active (mlx5_1/1 DOWN), 2 expected");
  EXPECT_TRUE(ProbeIbPorts(dir.File("absent")).empty());
}

TEST(Gpus, ExpectedCountDecides) {
  EXPECT_TRUE(CheckGpus({}, 0, "no NVIDIA driver").ok);
  CheckResult missing = CheckGpus({}, 8, "no NVIDIA driver");
  EXPECT_FALSE(missing.ok);
  EXPECT_EQ(missing.message, "0 GPUs (no NVIDIA driver), 8 expected");
  EXPECT_TRUE(CheckGpus(std::vector<GpuInfo>(8), 8, "").ok);
  EXPECT_FALSE(CheckGpus(std::vector<GpuInfo>(7), 8, "").ok);
  // This machine has no NVIDIA driver: zero GPUs and a reason, not an error.
  std::string why;
  if (ProbeGpus(&why).empty()) {
    EXPECT_NE(why, "");
  }
}

TEST(Memory, MemAvailableFromMeminfo) {
  auto avail = ParseMemAvailable(
      "MemTotal:       24000000 kB\nMemFree:  100 kB\n"
      "MemAvailable:   20000000 kB\nBuffers: 1 kB\n");
  ASSERT_TRUE(avail.ok());
  EXPECT_EQ(*avail, int64_t{20000000} * 1024);
  EXPECT_FALSE(ParseMemAvailable("MemTotal: 1 kB\n").ok());
  test::TempDir dir;
  test::WriteFile(dir.File("meminfo"), "MemAvailable:   1024 kB\n");
  int64_t bytes = 0;
  EXPECT_TRUE(CheckMemory(dir.File("meminfo"), 1 << 20, &bytes).ok);
  EXPECT_FALSE(CheckMemory(dir.File("meminfo"), (1 << 20) + 1, &bytes).ok);
  EXPECT_FALSE(CheckMemory(dir.File("absent"), 0, &bytes).ok);
}

TEST(Disk, FreeSpaceAgainstTheMinimum) {
  test::TempDir dir;
  int64_t free_bytes = 0;
  EXPECT_TRUE(CheckDisk(dir.path(), 0, &free_bytes).ok);
  EXPECT_GT(free_bytes, 0);
  CheckResult full = CheckDisk(dir.path(), int64_t{1} << 62, &free_bytes);
  EXPECT_FALSE(full.ok);
  EXPECT_NE(full.message.find("under the"), std::string::npos);
  EXPECT_FALSE(CheckDisk(dir.File("absent"), 0, &free_bytes).ok);
}

TEST(MountProbe, ANonFuseDirectoryIsNotTheMount) {
  test::TempDir dir;
  MountProbe probe(dir.path(), std::chrono::seconds(5));
  double seconds = 0;
  CheckResult r = probe.Check(&seconds);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("not a FUSE mount"), std::string::npos);
  EXPECT_FALSE(MountProbe(dir.File("absent"), std::chrono::seconds(5)).Check(&seconds).ok);
}

TEST(Validators, LoopbackAllreduceIsExactAndMemoryBandwidthMeasured) {
  double gbps = 0;
  CheckResult r = RunLoopbackAllreduce(1 << 20, 0, std::chrono::seconds(30), &gbps);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_GT(gbps, 0);
  EXPECT_FALSE(RunLoopbackAllreduce(1 << 20, 1e6, std::chrono::seconds(30), &gbps).ok);
  const double bw = MeasureMemoryBandwidth(8 << 20);
  EXPECT_GT(bw, 0);
  EXPECT_TRUE(CheckMemoryBandwidth(bw, 0).ok);
  EXPECT_FALSE(CheckMemoryBandwidth(bw, bw * 10).ok);
}

}  // namespace
}  // namespace ff::health
