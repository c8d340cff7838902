// fs3-fsx through fs3's native client (fs3/fs.h): what data loaders and checkpoint writers use.
#include "targets.h"

namespace ff::fs3::fsx {

NativeTarget::NativeTarget(std::unique_ptr<FileSystem> fs, std::string dir, std::string prefix,
                           int files)
    : fs_(std::move(fs)), dir_(std::move(dir)), prefix_(std::move(prefix)), files_(files) {}

std::string NativeTarget::Path(int file) const {
  return dir_ + "/" + prefix_ + "." + std::to_string(file);
}

bool NativeTarget::Supports(OpKind kind) const {
  switch (kind) {
    case OpKind::kWrite:
    case OpKind::kRead:
    case OpKind::kReopen:
    case OpKind::kCheckAll:
      return true;
    default:
      return false;
  }
}

Status NativeTarget::Open(int file, bool truncate) {
  if (truncate) {
    FF_ASSIGN_OR_RETURN(files_[file], fs_->Create(Path(file), 0644, /*exclusive=*/false));
  } else {
    FF_ASSIGN_OR_RETURN(files_[file], fs_->Open(Path(file)));
  }
  return Status::Ok();
}

Status NativeTarget::Close(int) {
  return Status::Ok();  // the native client keeps no open state
}

Status NativeTarget::Write(int file, uint64_t offset, std::string_view data) {
  return fs_->Write(files_[file], offset, data);
}

Result<std::string> NativeTarget::Read(int file, uint64_t offset, uint64_t length) {
  std::string out(length, '\0');
  FF_ASSIGN_OR_RETURN(auto counts,
                      fs_->ReadBatch({ReadRange{files_[file].ino, offset,
                                                static_cast<uint32_t>(length), out.data()}}));
  out.resize(counts.at(0));
  return out;
}

Result<uint64_t> NativeTarget::Length(int file) {
  FF_ASSIGN_OR_RETURN(fs3rpc::Inode inode, fs_->Stat(Path(file)));
  return inode.size();
}

}  // namespace ff::fs3::fsx
