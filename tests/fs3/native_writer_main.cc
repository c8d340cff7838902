// fs3-test-native-writer: a native client (fs3/fs.h) that dies the moment its data has landed.
//
//   fs3-test-native-writer META MGMTD PATH DATA_FILE
//
// Opens PATH (it exists) and writes DATA_FILE's bytes at offset 0 through a chunk transport that
// kills the process (SIGKILL) as soon as a chunk write is acknowledged: after the data landed and
// before the write recorded the file's length, as when a job is preempted in the middle of a
// checkpoint. Keep the data within one chunk (one chunk write). Exit 2: setup failed; 3: the
// write returned (it should not).
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "fs3/fs.h"
#include "fs3/transport.h"

namespace {

class DieWhenAWriteLands final : public ff::fs3::ChunkTransport {
 public:
  ff::Status Write(const std::string& address, const fs3rpc::WriteRequest& req,
                   fs3rpc::WriteResponse* resp, std::chrono::milliseconds deadline) override {
    ff::Status st = inner_.Write(address, req, resp, deadline);
    if (st.ok()) raise(SIGKILL);
    return st;
  }
  ff::Status Read(const std::string& address, const fs3rpc::ReadRequest& req,
                  fs3rpc::ReadResponse* resp, std::chrono::milliseconds deadline) override {
    return inner_.Read(address, req, resp, deadline);
  }

 private:
  ff::fs3::GrpcTransport inner_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s META MGMTD PATH DATA_FILE\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[4], std::ios::binary);
  const std::string data(std::istreambuf_iterator<char>(in), {});
  auto fs = ff::fs3::FileSystem::Connect({.meta = argv[1],
                                          .mgmtd = argv[2],
                                          .caller = {},
                                          .transport = std::make_shared<DieWhenAWriteLands>()});
  if (!fs.ok()) {
    std::fprintf(stderr, "connect: %s\n", fs.status().ToString().c_str());
    return 2;
  }
  auto file = (*fs)->Open(argv[3]);
  if (!file.ok()) {
    std::fprintf(stderr, "open: %s\n", file.status().ToString().c_str());
    return 2;
  }
  ff::Status st = (*fs)->Write(*file, 0, data);
  std::fprintf(stderr, "the write returned: %s\n", st.ToString().c_str());
  return 3;
}
