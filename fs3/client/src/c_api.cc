// libfs3c: the C ABI of fs3/c_api.h over ff::fs3::FileSystem.
#include "fs3/c_api.h"

#include <sys/stat.h>

#include <cstring>
#include <exception>

#include "fs3/client.h"
#include "fs3/errors.h"
#include "fs3/fs.h"

struct fs3_fs {
  std::unique_ptr<ff::fs3::FileSystem> fs;
  ff::fs3::Caller caller;
};

struct fs3_batch {
  std::future<ff::Result<std::vector<uint32_t>>> done;
  size_t n = 0;
};

namespace {

int FailWith(int e, const std::string& message, char* err, size_t err_len) {
  if (err && err_len > 0) {
    std::strncpy(err, message.c_str(), err_len - 1);
    err[err_len - 1] = '\0';
  }
  return e;
}

int Fail(const ff::Status& st, char* err, size_t err_len) {
  const int e = ff::fs3::FsErrno(st);
  return FailWith(e > 0 ? e : EIO, st.message(), err, err_len);
}

uint32_t ModeOf(const fs3rpc::Inode& inode) {
  uint32_t type = S_IFREG;
  switch (inode.type()) {
    case fs3rpc::INODE_DIR:
      type = S_IFDIR;
      break;
    case fs3rpc::INODE_SYMLINK:
      type = S_IFLNK;
      break;
    case fs3rpc::INODE_FIFO:
      type = S_IFIFO;
      break;
    case fs3rpc::INODE_SOCKET:
      type = S_IFSOCK;
      break;
    case fs3rpc::INODE_CHR:
      type = S_IFCHR;
      break;
    case fs3rpc::INODE_BLK:
      type = S_IFBLK;
      break;
    default:
      break;
  }
  return type | (inode.mode() & 07777);
}

// Runs `body`, turning an escaping exception (none is expected) into EIO rather than letting it
// cross the C boundary.
template <typename F>
int Guard(char* err, size_t err_len, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return FailWith(EIO, std::string("fs3 client: ") + e.what(), err, err_len);
  }
}

}  // namespace

extern "C" {

int fs3_connect(const char* meta, const char* mgmtd, uint32_t uid, uint32_t gid, fs3_fs** out,
                char* err, size_t err_len) {
  return Guard(err, err_len, [&] {
    if (!meta || !mgmtd || !out)
      return FailWith(EINVAL, "fs3_connect: null argument", err, err_len);
    ff::fs3::FsOptions o;
    o.meta = meta;
    o.mgmtd = mgmtd;
    o.caller.uid = uid;
    o.caller.gid = gid;
    auto fs = ff::fs3::FileSystem::Connect(o);
    if (!fs.ok()) return Fail(fs.status(), err, err_len);
    *out = new fs3_fs{std::move(*fs), o.caller};
    return 0;
  });
}

void fs3_fs_free(fs3_fs* fs) {
  delete fs;
}

int fs3_stat(fs3_fs* fs, const char* path, uint64_t* ino, uint64_t* size, uint32_t* mode,
             int64_t* mtime_ns, char* err, size_t err_len) {
  return Guard(err, err_len, [&] {
    auto inode = fs->fs->Stat(path);
    if (!inode.ok()) return Fail(inode.status(), err, err_len);
    *ino = inode->ino();
    *size = inode->size();
    *mode = ModeOf(*inode);
    *mtime_ns = inode->mtime_ns();
    return 0;
  });
}

int fs3_mkdir(fs3_fs* fs, const char* path, uint32_t mode, char* err, size_t err_len) {
  return Guard(err, err_len, [&] {
    ff::Status st = fs->fs->Mkdir(path, mode);
    return st.ok() ? 0 : Fail(st, err, err_len);
  });
}

int fs3_unlink(fs3_fs* fs, const char* path, char* err, size_t err_len) {
  return Guard(err, err_len, [&] {
    ff::Status st = fs->fs->Unlink(path);
    return st.ok() ? 0 : Fail(st, err, err_len);
  });
}

int fs3_rmdir(fs3_fs* fs, const char* path, char* err, size_t err_len) {
  return Guard(err, err_len, [&] {
    ff::Status st = fs->fs->Rmdir(path);
    return st.ok() ? 0 : Fail(st, err, err_len);
  });
}

int fs3_rename(fs3_fs* fs, const char* from, const char* to, char* err, size_t err_len) {
  return Guard(err, err_len, [&] {
    ff::Status st = fs->fs->Rename(from, to);
    return st.ok() ? 0 : Fail(st, err, err_len);
  });
}

int fs3_create(fs3_fs* fs, const char* path, uint32_t mode, int exclusive, uint64_t* ino, char* err,
               size_t err_len) {
  return Guard(err, err_len, [&] {
    auto file = fs->fs->Create(path, mode, exclusive != 0);
    if (!file.ok()) return Fail(file.status(), err, err_len);
    *ino = file->ino;
    return 0;
  });
}

int fs3_write(fs3_fs* fs, const char* path, uint64_t offset, const void* data, size_t len,
              char* err, size_t err_len) {
  return Guard(err, err_len, [&] {
    auto inode = fs->fs->Stat(path);
    if (!inode.ok()) return Fail(inode.status(), err, err_len);
    if (inode->type() != fs3rpc::INODE_FILE) {
      return FailWith(EISDIR, std::string(path) + " is not a regular file", err, err_len);
    }
    if (!ff::fs3::Permitted(fs->caller, *inode, 2)) {
      return FailWith(EACCES, std::string("cannot write ") + path, err, err_len);
    }
    auto file = fs->fs->Open(path);
    if (!file.ok()) return Fail(file.status(), err, err_len);
    ff::Status st =
        fs->fs->Write(*file, offset, std::string_view(static_cast<const char*>(data), len));
    return st.ok() ? 0 : Fail(st, err, err_len);
  });
}

int fs3_list(fs3_fs* fs, const char* path, char* buf, size_t buf_len, size_t* needed, char* err,
             size_t err_len) {
  return Guard(err, err_len, [&] {
    auto entries = fs->fs->List(path);
    if (!entries.ok()) return Fail(entries.status(), err, err_len);
    size_t total = 0;
    for (const ff::fs3::DirEntry& e : *entries)
      total += e.name.size() + 1;
    *needed = total;
    if (total > buf_len) return FailWith(ERANGE, "buffer too small", err, err_len);
    for (const ff::fs3::DirEntry& e : *entries) {
      std::memcpy(buf, e.name.c_str(), e.name.size() + 1);
      buf += e.name.size() + 1;
    }
    return 0;
  });
}

int fs3_read_clock(char* buf, size_t buf_len, size_t* needed, char* err, size_t err_len) {
  return Guard(err, err_len, [&] {
    std::string text;
    for (const ff::fs3::TargetReads& t : ff::fs3::ProcessTargetReads()) {
      text += std::to_string(t.target) + " " + std::to_string(t.reads) + " " +
              std::to_string(t.bytes) + " " + std::to_string(t.seconds) + "\n";
    }
    *needed = text.size() + 1;
    if (*needed > buf_len) return FailWith(ERANGE, "buffer too small", err, err_len);
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return 0;
  });
}

int fs3_read_batch_submit(fs3_fs* fs, size_t n, const uint64_t* inos, const uint64_t* offsets,
                          const uint32_t* lengths, void* const* buffers, fs3_batch** out, char* err,
                          size_t err_len) {
  return Guard(err, err_len, [&] {
    std::vector<ff::fs3::ReadRange> ranges(n);
    for (size_t i = 0; i < n; ++i) {
      if (!buffers[i] && lengths[i] > 0) {
        return FailWith(EINVAL, "range " + std::to_string(i) + " has no buffer", err, err_len);
      }
      ranges[i] = {inos[i], offsets[i], lengths[i], static_cast<char*>(buffers[i])};
    }
    *out = new fs3_batch{fs->fs->ReadBatchAsync(std::move(ranges)), n};
    return 0;
  });
}

int fs3_batch_wait(fs3_batch* batch, uint32_t* read_lengths, char* err, size_t err_len) {
  std::unique_ptr<fs3_batch> owned(batch);
  return Guard(err, err_len, [&] {
    ff::Result<std::vector<uint32_t>> r = owned->done.get();
    if (!r.ok()) return Fail(r.status(), err, err_len);
    for (size_t i = 0; i < owned->n && i < r->size(); ++i)
      read_lengths[i] = (*r)[i];
    return 0;
  });
}

int fs3_batch_ready(fs3_batch* batch) {
  return batch->done.wait_for(std::chrono::seconds(0)) == std::future_status::ready ? 1 : 0;
}

}  // extern "C"
