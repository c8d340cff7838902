// Fuzz target: fs3-meta's request handlers (MetaService, over its RocksDB in a temporary
// directory). The input is a sequence of namespace operations (create, link, unlink, rmdir,
// rename with its flags, setattr, xattrs, open/close, readdir...) with names, inode numbers,
// modes and credentials taken from the bytes; each is a real request to the handler. Whatever
// the sequence, nothing crashes and fs3-meta's own fsck finds the namespace consistent after it.
//
// The namespace persists across inputs (a fresh store every 256 inputs), as a long-running
// fs3-meta's does; a finding's input replays against a fresh store, so keep the preceding inputs
// (libFuzzer's -runs with the corpus) when one does not reproduce alone.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "meta_service.h"
#include "persistent_fixture.h"

namespace {

using namespace ff::fs3;

class Bytes {
 public:
  Bytes(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool empty() const { return n_ == 0; }
  uint8_t Byte() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint32_t U32() {
    return Byte() | uint32_t{Byte()} << 8 | uint32_t{Byte()} << 16 | uint32_t{Byte()} << 24;
  }
  uint64_t U64() { return U32() | uint64_t{U32()} << 32; }
  std::string Name() {
    static const char kAlphabet[] = "abc.x/\0-";
    uint8_t len = Byte();
    if (len == 255) return std::string(300, 'n');  // too long
    std::string s;
    for (int i = 0; i < len % 8; ++i)
      s += kAlphabet[Byte() % 8];
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

struct Fixture {
  std::string dir;
  std::unique_ptr<MetaService> service;
  std::vector<uint64_t> inos{1};
  int inputs = 0;

  void Reset() {
    service.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
    dir = ff::fuzz::MakeScratchDir("fs3-meta-fuzz");
    MetaOptions options;
    options.data_dir = dir + "/meta";
    options.chunk_size = 1 << 20;
    options.stripe = 2;
    auto created = MetaService::Create(options, nullptr);
    if (!created.ok()) {
      std::fprintf(stderr, "cannot create MetaService: %s\n", created.status().message().c_str());
      std::abort();
    }
    service = std::move(*created);
    inos = {1};
  }
};

Fixture& Get() {
  return ff::fuzz::PersistentFixture<Fixture>(256);
}

void SetCred(Bytes& in, fs3rpc::Credentials* c) {
  switch (in.Byte() % 4) {
    case 0:
      break;  // root
    case 1:
      c->set_uid(1000), c->set_gid(1000);
      break;
    case 2:
      c->set_uid(1001), c->set_gid(1000), c->add_groups(1000);
      break;
    default:
      c->set_uid(in.U32()), c->set_gid(in.U32());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = Get();
  MetaService& m = *f.service;
  Bytes in(data, size);
  auto ino = [&]() -> uint64_t {
    uint8_t b = in.Byte();
    if (b >= 250) return in.U64();
    return f.inos[b % f.inos.size()];
  };
  auto keep = [&](const grpc::Status& st, const fs3rpc::Inode& out) {
    if (st.ok() && out.ino() != 0 && f.inos.size() < 64) f.inos.push_back(out.ino());
  };
  for (int op = 0; op < 32 && !in.empty(); ++op) {
    const uint8_t kind = in.Byte() % 14;
    fs3rpc::Inode inode;
    fs3rpc::Empty empty;
    fs3rpc::DirsReply dirs;
    switch (kind) {
      case 0: {
        fs3rpc::MakeRequest r;
        SetCred(in, r.mutable_cred());
        r.set_parent(ino());
        r.set_name(in.Name());
        r.set_type(static_cast<fs3rpc::InodeType>(in.Byte() % 9));  // 7 and 8: not a type
        r.set_mode(in.U32() & 07777);
        if (r.type() == fs3rpc::INODE_SYMLINK) r.set_symlink_target(in.Name());
        r.set_request_id(in.Byte() % 4 == 0 ? in.U64() : 0);
        r.set_open(in.Byte() % 2);
        keep(m.Make(nullptr, &r, &inode), inode);
        break;
      }
      case 1:
      case 2: {
        fs3rpc::NameRequest r;
        SetCred(in, r.mutable_cred());
        r.set_parent(ino());
        r.set_name(in.Name());
        (void)(kind == 1 ? m.Unlink(nullptr, &r, &dirs) : m.Rmdir(nullptr, &r, &dirs));
        break;
      }
      case 3: {
        fs3rpc::RenameRequest r;
        SetCred(in, r.mutable_cred());
        r.set_src_parent(ino());
        r.set_src_name(in.Name());
        r.set_dst_parent(ino());
        r.set_dst_name(in.Name());
        r.set_flags(in.Byte() % 4);
        (void)m.Rename(nullptr, &r, &dirs);
        break;
      }
      case 4: {
        fs3rpc::LinkRequest r;
        SetCred(in, r.mutable_cred());
        r.set_ino(ino());
        r.set_parent(ino());
        r.set_name(in.Name());
        keep(m.Link(nullptr, &r, &inode), inode);
        break;
      }
      case 5: {
        fs3rpc::SetAttrRequest r;
        SetCred(in, r.mutable_cred());
        r.set_ino(ino());
        const uint8_t which = in.Byte();
        if (which & 1) r.set_mode(in.U32() & 07777);
        if (which & 2) r.set_uid(in.Byte() % 3 == 0 ? 1000 : in.U32());
        if (which & 4) r.set_gid(in.Byte() % 3 == 0 ? 1000 : in.U32());
        if (which & 8) r.set_size(in.U64() % (1ull << 34));
        if (which & 16) r.set_mtime_ns(static_cast<int64_t>(in.U64()));
        r.set_atime_now(which & 32);
        (void)m.SetAttr(nullptr, &r, &inode);
        break;
      }
      case 6:
      case 7: {
        fs3rpc::XattrRequest r;
        SetCred(in, r.mutable_cred());
        r.set_ino(ino());
        static const char* kNames[] = {
            "user.a", "user.b", "trusted.t", "security.capability", "system.posix_acl_access",
            "bad",    ""};
        r.set_name(kNames[in.Byte() % 7]);
        r.set_value(std::string(in.Byte() % 3 == 0 ? 70000 : in.Byte(), 'v'));
        r.set_flags(in.Byte() % 4);
        fs3rpc::XattrReply reply;
        (void)(kind == 6 ? m.SetXattr(nullptr, &r, &empty) : m.RemoveXattr(nullptr, &r, &empty));
        (void)m.GetXattr(nullptr, &r, &reply);
        break;
      }
      case 8: {
        fs3rpc::ReaddirRequest r;
        SetCred(in, r.mutable_cred());
        r.set_ino(ino());
        r.set_limit(in.Byte() % 5);
        fs3rpc::ReaddirReply reply;
        (void)m.Readdir(nullptr, &r, &reply);
        break;
      }
      case 9: {
        fs3rpc::NameRequest r;
        SetCred(in, r.mutable_cred());
        r.set_parent(ino());
        r.set_name(in.Name());
        (void)m.Lookup(nullptr, &r, &inode);
        break;
      }
      case 10: {
        fs3rpc::InoRequest r;
        SetCred(in, r.mutable_cred());
        r.set_ino(ino());
        (void)m.Open(nullptr, &r, &inode);
        break;
      }
      case 11: {
        fs3rpc::CloseRequest r;
        r.set_ino(ino());
        if (in.Byte() % 2) r.set_size(in.U64() % (1ull << 34));
        (void)m.Close(nullptr, &r, &empty);
        break;
      }
      case 12: {
        fs3rpc::InoRequest r;
        SetCred(in, r.mutable_cred());
        r.set_ino(ino());
        fs3rpc::XattrReply reply;
        (void)m.GetAttr(nullptr, &r, &inode);
        (void)m.Readlink(nullptr, &r, &reply);
        (void)m.ListXattrs(nullptr, &r, &reply);
        break;
      }
      default: {
        fs3rpc::StatfsReply reply;
        (void)m.Statfs(nullptr, &empty, &reply);
      }
    }
  }
  fs3rpc::FsckRequest fr;
  fs3rpc::FsckReply problems;
  ff::Status st = m.RunFsck(fr, &problems);
  if (!st.ok() || problems.problems_size() > 0) {
    std::fprintf(stderr, "fsck after the sequence: %s\n", st.ToString().c_str());
    for (const auto& p : problems.problems())
      std::fprintf(stderr, "  %s\n", p.c_str());
    std::abort();
  }
  return 0;
}
