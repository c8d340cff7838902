// The kernel adapter: the FUSE low-level operations table, each entry timed and passed to FuseFs.
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cstring>
#include <deque>
#include <map>
#include <random>

#include "common/rpc_client.h"
#include "fuse_fs_internal.h"

namespace ff::fs3 {

// ---- the table ----------------------------------------------------------------------------------

struct FuseOps {
#define FF_TIMED(op, call)           \
  do {                               \
    const auto start = Clock::now(); \
    FuseFs* fs = Self(req);          \
    fs->call;                        \
    fs->Observe(op, start);          \
  } while (0)

  static void Init(void* userdata, fuse_conn_info* conn) {
    auto* fs = static_cast<FuseFs*>(userdata);
    conn->max_write = 1 << 20;
    conn->max_readahead = static_cast<unsigned>(
        std::min<uint64_t>(std::max<uint64_t>(fs->options_.readahead_bytes, 128 << 10), 1 << 20));
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
    conn->want &= ~static_cast<unsigned>(FUSE_CAP_WRITEBACK_CACHE);  // writes gathered here
    // Reads check that the attributes are current (refreshing them when they expired or were
    // invalidated at open) and drop cached pages when size or mtime changed elsewhere.
    if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
    // open(O_TRUNC) and writes by non-owners: the kernel sends setattr (size 0, mode without
    // setuid / setgid), which carries them to fs3-meta (and the cut to storage).
    conn->want &= ~static_cast<unsigned>(FUSE_CAP_ATOMIC_O_TRUNC);
    conn->want &= ~static_cast<unsigned>(FUSE_CAP_HANDLE_KILLPRIV);
  }
  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    FF_TIMED("lookup", Lookup(req, parent, name));
  }
  static void Forget(fuse_req_t req, fuse_ino_t, uint64_t) {
    fuse_reply_none(req);
  }
  static void ForgetMulti(fuse_req_t req, size_t, fuse_forget_data*) {
    fuse_reply_none(req);
  }
  static void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    FF_TIMED("getattr", GetAttr(req, ino));
  }
  static void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                      fuse_file_info* fi) {
    FF_TIMED("setattr", SetAttr(req, ino, attr, to_set, fi));
  }
  static void Readlink(fuse_req_t req, fuse_ino_t ino) {
    FF_TIMED("readlink", Readlink(req, ino));
  }
  static void Mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
    FF_TIMED("mknod", Make(req, parent, name, mode, rdev, nullptr));
  }
  static void Mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
    FF_TIMED("mkdir", Make(req, parent, name, (mode & 07777) | S_IFDIR, 0, nullptr));
  }
  static void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
    FF_TIMED("unlink", Remove(req, parent, name, false));
  }
  static void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
    FF_TIMED("rmdir", Remove(req, parent, name, true));
  }
  static void Symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
    FF_TIMED("symlink", Make(req, parent, name, S_IFLNK | 0777, 0, link));
  }
  static void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                     const char* newname, unsigned int flags) {
    FF_TIMED("rename", Rename(req, parent, name, newparent, newname, flags));
  }
  static void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
    FF_TIMED("link", Link(req, ino, newparent, newname));
  }
  static void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    FF_TIMED("open", Open(req, ino, fi));
  }
  static void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
    FF_TIMED("read", Read(req, ino, size, off, fi));
  }
  static void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                    fuse_file_info* fi) {
    FF_TIMED("write", Write(req, ino, buf, size, off, fi));
  }
  static void Flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
    FF_TIMED("flush", Flush(req, fi));
  }
  static void Release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
    FF_TIMED("release", Release(req, fi));
  }
  static void Fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info* fi) {
    FF_TIMED("fsync", Fsync(req, fi));
  }
  static void Opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    FF_TIMED("opendir", Opendir(req, ino, fi));
  }
  static void Readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
    FF_TIMED("readdir", Readdir(req, ino, size, off, fi, false));
  }
  static void Readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                          fuse_file_info* fi) {
    FF_TIMED("readdirplus", Readdir(req, ino, size, off, fi, true));
  }
  static void Releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
    FF_TIMED("releasedir", Releasedir(req, fi));
  }
  static void Fsyncdir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
    FF_TIMED("fsyncdir", Fsyncdir(req, ino));
  }
  static void Statfs(fuse_req_t req, fuse_ino_t) {
    FF_TIMED("statfs", Statfs(req));
  }
  static void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value,
                       size_t size, int flags) {
    FF_TIMED("setxattr", SetXattr(req, ino, name, value, size, flags));
  }
  static void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
    FF_TIMED("getxattr", GetXattr(req, ino, name, size));
  }
  static void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    FF_TIMED("listxattr", ListXattr(req, ino, size));
  }
  static void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
    FF_TIMED("removexattr", RemoveXattr(req, ino, name));
  }
  static void Access(fuse_req_t req, fuse_ino_t ino, int mask) {
    FF_TIMED("access", Access(req, ino, mask));
  }
  static void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                     fuse_file_info* fi) {
    FF_TIMED("create", Create(req, parent, name, mode, fi));
  }
#undef FF_TIMED
};

const fuse_lowlevel_ops& FuseFs::Ops() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
    o.init = FuseOps::Init;
    o.lookup = FuseOps::Lookup;
    o.forget = FuseOps::Forget;
    o.forget_multi = FuseOps::ForgetMulti;
    o.getattr = FuseOps::GetAttr;
    o.setattr = FuseOps::SetAttr;
    o.readlink = FuseOps::Readlink;
    o.mknod = FuseOps::Mknod;
    o.mkdir = FuseOps::Mkdir;
    o.unlink = FuseOps::Unlink;
    o.rmdir = FuseOps::Rmdir;
    o.symlink = FuseOps::Symlink;
    o.rename = FuseOps::Rename;
    o.link = FuseOps::Link;
    o.open = FuseOps::Open;
    o.read = FuseOps::Read;
    o.write = FuseOps::Write;
    o.flush = FuseOps::Flush;
    o.release = FuseOps::Release;
    o.fsync = FuseOps::Fsync;
    o.opendir = FuseOps::Opendir;
    o.readdir = FuseOps::Readdir;
    o.readdirplus = FuseOps::Readdirplus;
    o.releasedir = FuseOps::Releasedir;
    o.fsyncdir = FuseOps::Fsyncdir;
    o.statfs = FuseOps::Statfs;
    o.setxattr = FuseOps::SetXattr;
    o.getxattr = FuseOps::GetXattr;
    o.listxattr = FuseOps::ListXattr;
    o.removexattr = FuseOps::RemoveXattr;
    o.access = FuseOps::Access;
    o.create = FuseOps::Create;
    return o;
  }();
  return ops;
}

}  // namespace ff::fs3
