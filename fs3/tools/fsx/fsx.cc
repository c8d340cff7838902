// fs3-fsx's operation sequence, shadow and mismatch report (fsx.h).
#include "fsx.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>

namespace ff::fs3::fsx {

const char* Name(OpKind kind) {
  switch (kind) {
    case OpKind::kWrite:
      return "write";
    case OpKind::kMapWrite:
      return "mapwrite";
    case OpKind::kRead:
      return "read";
    case OpKind::kMapRead:
      return "mapread";
    case OpKind::kTruncate:
      return "truncate";
    case OpKind::kCopyRange:
      return "copyrange";
    case OpKind::kFsync:
      return "fsync";
    case OpKind::kReopen:
      return "reopen";
    case OpKind::kReadOther:
      return "readother";
    case OpKind::kCheckAll:
      return "checkall";
  }
  return "?";
}

namespace {

// One operation as generated: enough to print it and to apply it to the shadow.
struct Op {
  uint64_t n = 0;  // 1-based position in the sequence
  OpKind kind = OpKind::kWrite;
  int file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  int src = 0;              // copyrange: the source file
  uint64_t src_offset = 0;  // copyrange
  bool flag = false;        // mapwrite: msync after; readother: fsync (else close) before
  double at_s = 0;          // when it started, in seconds since the run began
};

// The byte operation `n` writes at file offset `offset`: different for every operation, so a
// wrong byte read back tells which write it came from.
uint8_t PatternByte(uint64_t n, uint64_t offset) {
  uint64_t h = n * 0x9E3779B97F4A7C15ull ^ (offset + 1) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return static_cast<uint8_t>(h);
}

std::string Pattern(uint64_t n, uint64_t offset, uint64_t length) {
  std::string s(length, '\0');
  for (uint64_t i = 0; i < length; ++i)
    s[i] = static_cast<char>(PatternByte(n, offset + i));
  return s;
}

struct ShadowFile {
  std::string data;
  std::vector<uint64_t> owner;  // the operation that wrote each byte (0: zeros, never written)

  uint64_t size() const { return data.size(); }
  void Resize(uint64_t n) {
    data.resize(n, '\0');
    owner.resize(n, 0);
  }
  void Put(uint64_t offset, std::string_view bytes, uint64_t n) {
    if (offset + bytes.size() > size()) Resize(offset + bytes.size());
    std::copy(bytes.begin(), bytes.end(), data.begin() + static_cast<std::ptrdiff_t>(offset));
    std::fill_n(owner.begin() + static_cast<std::ptrdiff_t>(offset), bytes.size(), n);
  }
};

class Exerciser {
 public:
  Exerciser(const Options& options, Target& target)
      : o_(options), t_(target), rng_(options.seed), files_(options.files) {}

  Result<Summary> Run() {
    for (int f = 0; f < o_.files; ++f)
      FF_RETURN_IF_ERROR(Fail(Op{0, OpKind::kReopen, f}, t_.Open(f, /*truncate=*/true)));
    for (uint64_t n = 1; n <= o_.ops; ++n) {
      Op op = Next(n);
      op.at_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      log_.push_back(op);
      if (o_.verbose) std::fprintf(stderr, "%s\n", Describe(op).c_str());
      FF_RETURN_IF_ERROR(Apply(op));
      ++summary_.counts[static_cast<int>(op.kind)];
      ++summary_.ops;
      if (o_.check_every > 0 && n % o_.check_every == 0) {
        FF_RETURN_IF_ERROR(CheckAll(n));
      }
    }
    FF_RETURN_IF_ERROR(CheckAll(o_.ops));
    for (int f = 0; f < o_.files; ++f)
      FF_RETURN_IF_ERROR(Fail(Op{o_.ops, OpKind::kReopen, f}, t_.Close(f)));
    return summary_;
  }

 private:
  uint64_t Uniform(uint64_t lo, uint64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng_);
  }
  bool Chance(int percent) { return Uniform(0, 99) < static_cast<uint64_t>(percent); }
  uint64_t Len() {
    // Mostly small, sometimes the largest: both partial blocks and whole chunks get exercised.
    return Chance(20) ? Uniform(o_.max_len / 2, o_.max_len)
                      : Uniform(1, std::max<uint64_t>(1, o_.max_len / 8));
  }

  // The next operation: a queued step of a pattern, else a random one.
  Op Next(uint64_t n) {
    Op op;
    if (!queued_.empty()) {
      op = queued_.front();
      queued_.pop_front();
    } else {
      op = Random();
    }
    op.n = n;
    return op;
  }

  bool Enabled(OpKind k) const {
    if (!t_.Supports(k)) return false;
    switch (k) {
      case OpKind::kMapWrite:
      case OpKind::kMapRead:
        return o_.mmap;
      case OpKind::kCopyRange:
        return o_.copy_range;
      case OpKind::kTruncate:
        return o_.truncate;
      case OpKind::kReadOther:
        return o_.read_other;
      default:
        return true;
    }
  }

  Op Random() {
    struct Weight {
      OpKind kind;
      int weight;
    };
    static constexpr Weight kWeights[] = {
        {OpKind::kWrite, 30},   {OpKind::kMapWrite, 10}, {OpKind::kRead, 20},
        {OpKind::kMapRead, 8},  {OpKind::kTruncate, 4},  {OpKind::kCopyRange, 5},
        {OpKind::kFsync, 4},    {OpKind::kReopen, 4},    {OpKind::kReadOther, 4},
        {OpKind::kCheckAll, 0},
    };
    Op op;
    op.file = static_cast<int>(Uniform(0, static_cast<uint64_t>(o_.files - 1)));
    const ShadowFile& f = files_[op.file];
    // Now and then (8%), a pattern that applications use and caches get wrong.
    if (Chance(8)) {
      QueuePattern(op.file);
      op = queued_.front();
      queued_.pop_front();
      return op;
    }
    int total = 0;
    for (const Weight& w : kWeights)
      total += Enabled(w.kind) ? w.weight : 0;
    int pick = static_cast<int>(Uniform(0, static_cast<uint64_t>(total - 1)));
    for (const Weight& w : kWeights) {
      if (!Enabled(w.kind)) continue;
      if (pick < w.weight) {
        op.kind = w.kind;
        break;
      }
      pick -= w.weight;
    }
    switch (op.kind) {
      case OpKind::kWrite:
      case OpKind::kMapWrite: {
        const uint64_t where = Uniform(0, 2);
        op.offset = where == 0 ? f.size() : where == 1 ? last_end_[op.file] : Uniform(0, f.size());
        if (op.offset >= o_.max_size) op.offset = Uniform(0, o_.max_size - 1);
        op.length = std::min(Len(), o_.max_size - op.offset);
        op.flag = Chance(50);
        break;
      }
      case OpKind::kRead:
      case OpKind::kMapRead:
        if (f.size() == 0) {
          op.kind = OpKind::kRead;  // mapping an empty file maps nothing
          op.length = Len();
          break;
        }
        op.offset = Uniform(0, f.size() - 1);
        op.length = Len();
        if (op.kind == OpKind::kMapRead) op.length = std::min(op.length, f.size() - op.offset);
        break;
      case OpKind::kReadOther:
        op.flag = Chance(50);
        op.offset = f.size() == 0 ? 0 : Uniform(0, f.size() - 1);
        op.length = Chance(30) ? f.size() : Len();
        break;
      case OpKind::kTruncate:
        op.offset = Chance(50) ? Uniform(0, f.size()) : Uniform(f.size(), o_.max_size);
        break;
      case OpKind::kCopyRange: {
        op.src = static_cast<int>(Uniform(0, static_cast<uint64_t>(o_.files - 1)));
        const ShadowFile& s = files_[op.src];
        if (s.size() == 0) {
          op.kind = OpKind::kFsync;
          break;
        }
        op.src_offset = Uniform(0, s.size() - 1);
        op.length = std::min(Len(), s.size() - op.src_offset);
        op.offset = Uniform(0, std::min(f.size(), o_.max_size - op.length));
        // Within one file the ranges may not overlap (copy_file_range refuses).
        if (op.src == op.file && op.offset < op.src_offset + op.length &&
            op.src_offset < op.offset + op.length) {
          op.kind = OpKind::kFsync;
        }
        break;
      }
      default:
        break;
    }
    return op;
  }

  // Patterns that lost data before (issue 32): a header patched after its body, overlapping
  // pwrites then a write elsewhere, and a write() then an mmap write of the same range.
  void QueuePattern(int file) {
    const ShadowFile& f = files_[file];
    const uint64_t which = Uniform(0, Enabled(OpKind::kMapWrite) ? 2 : 1);
    if (which == 0) {
      const uint64_t header = Uniform(1, 4096);
      const uint64_t body = std::min(Uniform(o_.max_len / 2, o_.max_len), o_.max_size - header);
      queued_.push_back(Op{0, OpKind::kWrite, file, 0, header});     // placeholder
      queued_.push_back(Op{0, OpKind::kWrite, file, header, body});  // the body
      queued_.push_back(Op{0, OpKind::kWrite, file, 0, header});     // the real header
      queued_.push_back(Op{0, OpKind::kReopen, file});
      queued_.push_back(Op{0, OpKind::kRead, file, 0, header + body});
    } else if (which == 1) {
      const uint64_t at = Uniform(0, f.size());
      const uint64_t len =
          std::min(Uniform(1, o_.max_len), o_.max_size - std::min(at, o_.max_size - 1));
      const uint64_t start = std::min(at, o_.max_size - len);
      queued_.push_back(Op{0, OpKind::kWrite, file, start, len});
      queued_.push_back(Op{0, OpKind::kWrite, file, start, len});
      const uint64_t elsewhere = Uniform(0, o_.max_size - 1);
      queued_.push_back(Op{0, OpKind::kWrite, file, elsewhere,
                           std::min<uint64_t>(Uniform(1, 4096), o_.max_size - elsewhere)});
      queued_.push_back(Op{0, OpKind::kReopen, file});
      queued_.push_back(Op{0, OpKind::kRead, file, start, len});
    } else {
      const uint64_t end = std::max<uint64_t>(f.size(), 1);
      const uint64_t len = std::min(Uniform(1, o_.max_len), std::min(end, o_.max_size));
      const uint64_t start = std::min(end, o_.max_size) - len;
      queued_.push_back(Op{0, OpKind::kWrite, file, start, len});
      queued_.push_back(Op{0, OpKind::kMapWrite, file, start, len, 0, 0, Chance(50)});
      queued_.push_back(Op{0, OpKind::kReopen, file});
      queued_.push_back(Op{0, OpKind::kMapRead, file, start, len});
    }
  }

  Status Apply(const Op& op) {
    ShadowFile& f = files_[op.file];
    switch (op.kind) {
      case OpKind::kWrite: {
        const std::string data = Pattern(op.n, op.offset, op.length);
        FF_RETURN_IF_ERROR(Fail(op, t_.Write(op.file, op.offset, data)));
        f.Put(op.offset, data, op.n);
        last_end_[op.file] = op.offset + op.length;
        summary_.bytes_written += op.length;
        return Status::Ok();
      }
      case OpKind::kMapWrite: {
        const std::string data = Pattern(op.n, op.offset, op.length);
        FF_RETURN_IF_ERROR(Fail(op, MapWrite(op, data)));
        f.Put(op.offset, data, op.n);
        last_end_[op.file] = op.offset + op.length;
        summary_.bytes_written += op.length;
        return Status::Ok();
      }
      case OpKind::kRead: {
        auto got = t_.Read(op.file, op.offset, op.length);
        FF_RETURN_IF_ERROR(Fail(op, got.status()));
        return Compare(op, op.file, op.offset, std::min(op.length, Rest(f, op.offset)), *got);
      }
      case OpKind::kMapRead: {
        auto got = t_.MapRead(op.file, op.offset, op.length);
        FF_RETURN_IF_ERROR(Fail(op, got.status()));
        return Compare(op, op.file, op.offset, op.length, *got);
      }
      case OpKind::kReadOther: {
        FF_RETURN_IF_ERROR(Fail(op, op.flag ? t_.Fsync(op.file) : t_.Close(op.file)));
        auto got = t_.ReadOther(op.file, op.offset, op.length);
        if (!op.flag) FF_RETURN_IF_ERROR(Fail(op, t_.Open(op.file, false)));
        FF_RETURN_IF_ERROR(Fail(op, got.status()));
        return Compare(op, op.file, op.offset, std::min(op.length, Rest(f, op.offset)), *got);
      }
      case OpKind::kTruncate:
        FF_RETURN_IF_ERROR(Fail(op, t_.Truncate(op.file, op.offset)));
        f.Resize(op.offset);
        return Status::Ok();
      case OpKind::kCopyRange: {
        FF_RETURN_IF_ERROR(
            Fail(op, t_.CopyRange(op.src, op.src_offset, op.file, op.offset, op.length)));
        const ShadowFile& s = files_[op.src];
        const std::string bytes = s.data.substr(op.src_offset, op.length);
        const std::vector<uint64_t> owners(
            s.owner.begin() + static_cast<std::ptrdiff_t>(op.src_offset),
            s.owner.begin() + static_cast<std::ptrdiff_t>(op.src_offset + op.length));
        f.Put(op.offset, bytes, 0);
        std::copy(owners.begin(), owners.end(),
                  f.owner.begin() + static_cast<std::ptrdiff_t>(op.offset));
        summary_.bytes_written += op.length;
        return Status::Ok();
      }
      case OpKind::kFsync:
        return Fail(op, t_.Fsync(op.file));
      case OpKind::kReopen:
        FF_RETURN_IF_ERROR(Fail(op, t_.Close(op.file)));
        return Fail(op, t_.Open(op.file, false));
      case OpKind::kCheckAll:
        return CheckAll(op.n);
    }
    return Status::Ok();
  }

  Status MapWrite(const Op& op, const std::string& data) {
    ShadowFile& f = files_[op.file];
    if (op.offset + op.length > f.size()) {
      // A mapping cannot reach past the end: extend first, as fsx does.
      FF_RETURN_IF_ERROR(t_.Truncate(op.file, op.offset + op.length));
      f.Resize(op.offset + op.length);
    }
    return t_.MapWrite(op.file, op.offset, data, op.flag);
  }

  static uint64_t Rest(const ShadowFile& f, uint64_t offset) {
    return offset >= f.size() ? 0 : f.size() - offset;
  }

  Status CheckAll(uint64_t n) {
    for (int file = 0; file < o_.files; ++file) {
      const ShadowFile& f = files_[file];
      Op op{n, OpKind::kCheckAll, file, 0, f.size()};
      auto length = t_.Length(file);
      FF_RETURN_IF_ERROR(Fail(op, length.status()));
      if (*length != f.size()) {
        Report(op, "file " + std::to_string(file) + " has length " + std::to_string(*length) +
                       ", expected " + std::to_string(f.size()));
        return Status(StatusCode::kDataLoss, "length mismatch");
      }
      for (uint64_t at = 0; at < f.size(); at += o_.max_len) {
        const uint64_t len = std::min(o_.max_len, f.size() - at);
        auto got = t_.Read(file, at, len);
        FF_RETURN_IF_ERROR(Fail(op, got.status()));
        FF_RETURN_IF_ERROR(Compare(op, file, at, len, *got));
      }
    }
    ++summary_.counts[static_cast<int>(OpKind::kCheckAll)];
    return Status::Ok();
  }

  // `got` must be the shadow's `expect_len` bytes at `offset` of `file`.
  Status Compare(const Op& op, int file, uint64_t offset, uint64_t expect_len,
                 const std::string& got) {
    const ShadowFile& f = files_[file];
    summary_.bytes_checked += got.size();
    uint64_t bad = UINT64_MAX, bad_end = 0, bad_count = 0;
    const uint64_t common = std::min<uint64_t>(expect_len, got.size());
    for (uint64_t i = 0; i < common; ++i) {
      if (got[i] != f.data[offset + i]) {
        if (bad == UINT64_MAX) bad = i;
        bad_end = i + 1;
        ++bad_count;
      }
    }
    if (bad == UINT64_MAX && got.size() == expect_len) return Status::Ok();
    std::string what;
    if (got.size() != expect_len) {
      what = "read " + std::to_string(got.size()) + " bytes, expected " +
             std::to_string(expect_len) + "; ";
    }
    if (bad != UINT64_MAX) {
      const uint64_t at = offset + bad;
      char line[512];
      std::snprintf(
          line, sizeof line,
          "%" PRIu64 " bytes differ in [0x%" PRIx64 ", 0x%" PRIx64 "); first at 0x%" PRIx64
          ": expected 0x%02x (%s), got 0x%02x (%s)",
          bad_count, at, offset + bad_end, at, static_cast<uint8_t>(f.data[at]),
          Origin(f.owner[at]).c_str(), static_cast<uint8_t>(got[bad]),
          Guess(file, at, std::string_view(got).substr(bad, std::min<uint64_t>(16, bad_end - bad)))
              .c_str());
      what += line;
    }
    // Again through a new descriptor with the cached pages dropped: a stale cache, or what is
    // stored?
    auto again = t_.ReadAfresh(file, offset, expect_len);
    if (again.ok()) {
      what += *again == got ? "; read again afresh: the same bytes"
              : std::string_view(*again) == std::string_view(f.data).substr(offset, expect_len)
                  ? "; read again afresh: the expected bytes (the first read was served stale)"
                  : "; read again afresh: other bytes, also wrong";
    } else if (again.status().code() != StatusCode::kUnimplemented) {
      what += "; read again afresh: " + again.status().ToString();
    }
    Report(op, what);
    return Status(StatusCode::kDataLoss, "mismatch in operation " + std::to_string(op.n));
  }

  std::string Origin(uint64_t owner) const {
    if (owner == 0) return "zeros: never written, or cut by a truncate";
    const Op& w = log_[owner - 1];
    return "written by operation " + std::to_string(owner) + ", " + Name(w.kind);
  }

  // Which earlier write put these bytes at `at` of `file`.
  std::string Guess(int file, uint64_t at, std::string_view bytes) const {
    if (std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == 0; })) return "zeros";
    for (auto it = log_.rbegin(); it != log_.rend(); ++it) {
      if (it->file != file || (it->kind != OpKind::kWrite && it->kind != OpKind::kMapWrite))
        continue;
      if (at < it->offset || at + bytes.size() > it->offset + it->length) continue;
      if (Pattern(it->n, at, bytes.size()) == bytes) {
        return "the bytes of operation " + std::to_string(it->n) + ", " + Name(it->kind);
      }
    }
    return "from no write of this file's log";
  }

  std::string Describe(const Op& op) const {
    char line[256];
    switch (op.kind) {
      case OpKind::kCopyRange:
        std::snprintf(line, sizeof line,
                      "%8" PRIu64 " %-9s f%d [0x%" PRIx64 ", +0x%" PRIx64 ") from f%d 0x%" PRIx64,
                      op.n, Name(op.kind), op.file, op.offset, op.length, op.src, op.src_offset);
        break;
      case OpKind::kTruncate:
        std::snprintf(line, sizeof line, "%8" PRIu64 " %-9s f%d to 0x%" PRIx64, op.n, Name(op.kind),
                      op.file, op.offset);
        break;
      case OpKind::kFsync:
      case OpKind::kReopen:
        std::snprintf(line, sizeof line, "%8" PRIu64 " %-9s f%d", op.n, Name(op.kind), op.file);
        break;
      default:
        std::snprintf(line, sizeof line, "%8" PRIu64 " %-9s f%d [0x%" PRIx64 ", +0x%" PRIx64 ")%s",
                      op.n, Name(op.kind), op.file, op.offset, op.length,
                      op.kind == OpKind::kMapWrite    ? (op.flag ? " msync" : " no msync")
                      : op.kind == OpKind::kReadOther ? (op.flag ? " after fsync" : " after close")
                                                      : "");
    }
    return line;
  }

  void Report(const Op& op, const std::string& what) {
    // The wall clock too, to match the report with the services' logs.
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    localtime_r(&t, &tm);
    char clock[32];
    std::strftime(clock, sizeof clock, "%H:%M:%S", &tm);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "fs3-fsx: MISMATCH at operation %" PRIu64 " (%s): %s\n", op.n,
                 Describe(op).c_str() + 9, what.c_str());
    std::fprintf(stderr,
                 "fs3-fsx: reported at %s.%03d, %.3f s into the run; the last operations (seed "
                 "%" PRIu64 ", each with when it started):\n",
                 clock, static_cast<int>(ms.count()), elapsed, o_.seed);
    const uint64_t from = log_.size() > o_.show_last ? log_.size() - o_.show_last : 0;
    for (uint64_t i = from; i < log_.size(); ++i)
      std::fprintf(stderr, "  %9.3fs %s\n", log_[i].at_s, Describe(log_[i]).c_str());
    // The operations that last wrote the range read wrong, wherever they are in the log.
    if (op.kind == OpKind::kRead || op.kind == OpKind::kMapRead) {
      for (uint64_t i = 0; i < from; ++i) {
        const Op& w = log_[i];
        if (w.file == op.file && (w.kind == OpKind::kWrite || w.kind == OpKind::kMapWrite) &&
            w.offset < op.offset + op.length && op.offset < w.offset + w.length &&
            i + 200 >= from) {
          std::fprintf(stderr, "  earlier, overlapping: %9.3fs %s\n", w.at_s, Describe(w).c_str());
        }
      }
    }
    if (!o_.replay.empty()) std::fprintf(stderr, "fs3-fsx: replay: %s\n", o_.replay.c_str());
  }

  Status Fail(const Op& op, Status st) {
    if (st.ok()) return st;
    return Status(st.code(), "operation " + std::to_string(op.n) + " (" + Name(op.kind) + " file " +
                                 std::to_string(op.file) + "): " + st.message());
  }

  const Options& o_;
  Target& t_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mt19937_64 rng_;
  std::vector<ShadowFile> files_;
  std::map<int, uint64_t> last_end_;
  std::deque<Op> queued_;
  std::vector<Op> log_;
  Summary summary_;
};

}  // namespace

Result<Summary> Run(const Options& options, Target& target) {
  if (options.files < 1 || options.max_len < 1 || options.max_size < options.max_len) {
    return InvalidArgument("fs3-fsx: need files >= 1 and 1 <= max_len <= max_size");
  }
  return Exerciser(options, target).Run();
}

}  // namespace ff::fs3::fsx
