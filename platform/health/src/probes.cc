#include "platform/health/probes.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <thread>

#include "common/thread_annotations.h"
#include "hfreduce/communicator.h"

namespace ff::health {

// ---- kernel log -------------------------------------------------------------------------------

KernelLog::~KernelLog() {
  if (fd_ >= 0) close(fd_);
}

void KernelLog::HandleLine(std::string_view line, std::vector<KernelEvent>* out) {
  if (auto e = ParseKernelLine(line)) out->push_back(std::move(*e));
}

std::vector<KernelEvent> KernelLog::Poll() {
  std::vector<KernelEvent> events;
  if (fd_ < 0) {
    fd_ = open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) {
      error_ = "cannot open the kernel log " + path_ + ": " + std::strerror(errno);
      return events;
    }
    struct stat st {};
    device_ = fstat(fd_, &st) == 0 && S_ISCHR(st.st_mode);
  }
  error_.clear();
  char buf[8192];
  for (int reads = 0; reads < 100000; ++reads) {
    ssize_t n = read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EPIPE && device_) continue;  // records overwritten before we read them
    if (n < 0 && errno == EAGAIN) break;
    if (n < 0) {
      error_ = "cannot read the kernel log " + path_ + ": " + std::strerror(errno);
      break;
    }
    if (n == 0) break;  // a regular file's end, for now
    if (device_) {
      HandleLine(std::string_view(buf, static_cast<std::size_t>(n)), &events);  // one record
      continue;
    }
    partial_.append(buf, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (std::size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
      HandleLine(std::string_view(partial_).substr(start, nl - start), &events);
    partial_.erase(0, start);
  }
  return events;
}

// ---- the fs3 mount ----------------------------------------------------------------------------

CheckResult MountProbe::Check(double* seconds) {
  CheckResult r{"fs3-mount", true, ""};
  *seconds = 0;
  const auto now = std::chrono::steady_clock::now();
  if (!state_->done.load()) {
    *seconds = std::chrono::duration<double>(now - state_->started).count();
    r.ok = false;
    r.message =
        path_ + " has not answered a stat for " + std::to_string(static_cast<int>(*seconds)) + " s";
    return r;
  }
  auto state = state_;  // the helper keeps it alive even if we are gone when it returns
  state->done = false;
  state->started = now;
  std::thread([state, path = path_] {
    struct statfs fs {};
    int err = 0;
    bool fuse = false;
    if (statfs(path.c_str(), &fs) != 0) {
      err = errno;
    } else {
      fuse = fs.f_type == FUSE_SUPER_MAGIC;
      struct stat st {};
      if (stat(path.c_str(), &st) != 0) err = errno;
    }
    state->error = err;
    state->is_fuse = fuse;
    state->done = true;
  }).detach();
  // Wait for it up to the timeout (polling: the helper may outlive this call).
  while (!state->done.load() && std::chrono::steady_clock::now() - now < timeout_)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - now).count();
  if (!state->done.load()) {
    r.ok = false;
    r.message = path_ + " did not answer a stat within " + std::to_string(timeout_.count()) + " ms";
  } else if (state->error != 0) {
    r.ok = false;
    r.message = path_ + ": " + std::strerror(state->error);
  } else if (!state->is_fuse) {
    r.ok = false;
    r.message = path_ + " is not a FUSE mount (fs3-fuse is not mounted there)";
  } else {
    char buf[64];
    std::snprintf(buf, sizeof buf, " answers (stat in %.1f ms)", *seconds * 1000);
    r.message = path_ + buf;
  }
  return r;
}

// ---- validators -------------------------------------------------------------------------------

double MeasureMemoryBandwidth(std::size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(pass % 2 ? a.data() : b.data(), pass % 2 ? b.data() : a.data(), bytes);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    volatile char sink = (pass % 2 ? a : b)[bytes / 2];  // the copy must happen
    (void)sink;
    if (s > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

CheckResult CheckMemoryBandwidth(double gbps, double min_gbps) {
  CheckResult r{"memory-bandwidth", true, ""};
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.1f GB/s copy", gbps);
  r.message = buf;
  if (gbps < min_gbps) {
    r.ok = false;
    std::snprintf(buf, sizeof buf, ", under the %.1f GB/s required", min_gbps);
    r.message += buf;
  }
  return r;
}

namespace {

// A rendezvous store inside this process, for the two validator ranks.
class LocalStore final : public hfreduce::Store {
 public:
  Status Set(const std::string& key, const std::string& value) override {
    MutexLock lock(&mu_);
    values_[key] = value;
    cv_.notify_all();
    return Status::Ok();
  }
  Result<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) override {
    UniqueLock lock(&mu_);
    auto all = [&] {
      mu_.AssertHeld();
      for (const std::string& k : keys)
        if (!values_.contains(k)) return false;
      return true;
    };
    if (!cv_.wait_for(lock, timeout, all)) return DeadlineExceeded("validator rendezvous");
    std::vector<std::string> out;
    for (const std::string& k : keys)
      out.push_back(values_[k]);
    return out;
  }
  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    MutexLock lock(&mu_);
    int64_t v = values_.contains(key) ? std::stoll(values_[key]) : 0;
    v += delta;
    values_[key] = std::to_string(v);
    cv_.notify_all();
    return v;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::map<std::string, std::string> values_ FF_GUARDED_BY(mu_);
};

}  // namespace

CheckResult RunLoopbackAllreduce(std::size_t bytes, double min_gbps,
                                 std::chrono::milliseconds timeout, double* gbps) {
  CheckResult r{"hfreduce-loopback", true, ""};
  *gbps = 0;
  constexpr int kRanks = 2;
  constexpr int kIterations = 4;
  const std::size_t count = std::max<std::size_t>(bytes / sizeof(float), 1);
  auto store = std::make_shared<LocalStore>();
  Status status[kRanks];
  double seconds[kRanks] = {};
  bool exact[kRanks] = {true, true};
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      hfreduce::CommunicatorOptions o;
      o.rank = rank;
      o.world_size = kRanks;
      o.store = store;
      o.store_prefix = "hai-health";
      o.node_id = "hai-health-" + std::to_string(getpid());
      o.transport = "tcp";
      o.timeout = timeout;
      auto comm = hfreduce::Communicator::Create(o);
      if (!comm.ok()) {
        status[rank] = comm.status();
        return;
      }
      std::vector<float> buf(count);
      const auto start = std::chrono::steady_clock::now();
      for (int it = 0; it < kIterations && status[rank].ok(); ++it) {
        for (std::size_t i = 0; i < count; ++i)
          buf[i] = static_cast<float>((rank + 1) * (i % 7 + 1));
        status[rank] = (*comm)->Allreduce(buf.data(), buf.data(), count,
                                          hfreduce::DataType::kFloat32, hfreduce::ReduceOp::kSum);
        for (std::size_t i = 0; i < count && status[rank].ok(); ++i)
          if (buf[i] != static_cast<float>(3 * (i % 7 + 1))) exact[rank] = false;
      }
      seconds[rank] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  for (std::thread& t : ranks)
    t.join();
  for (int rank = 0; rank < kRanks; ++rank) {
    if (!status[rank].ok()) {
      r.ok = false;
      r.message =
          "allreduce failed on rank " + std::to_string(rank) + ": " + status[rank].message();
      return r;
    }
    if (!exact[rank]) {
      r.ok = false;
      r.message = "allreduce gave wrong sums on rank " + std::to_string(rank);
      return r;
    }
  }
  const double s = std::max(seconds[0], seconds[1]);
  *gbps = s > 0 ? static_cast<double>(count * sizeof(float)) * kIterations / s / 1e9 : 0;
  char buf[128];
  std::snprintf(buf, sizeof buf, "2 local ranks, %zu MiB float32: exact, %.2f GB/s",
                count * sizeof(float) >> 20, *gbps);
  r.message = buf;
  if (*gbps < min_gbps) {
    r.ok = false;
    std::snprintf(buf, sizeof buf, ", under the %.2f GB/s required", min_gbps);
    r.message += buf;
  }
  return r;
}

}  // namespace ff::health
