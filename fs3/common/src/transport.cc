#include "fs3/transport.h"

#include <grpcpp/grpcpp.h>

#include "common/rpc_client.h"
#include "common/rpc_status.h"

namespace ff::fs3 {
namespace {

void SetDeadline(grpc::ClientContext* c, std::chrono::milliseconds d) {
  c->set_deadline(std::chrono::system_clock::now() + d);
}

}  // namespace

fs3rpc::Storage::Stub* StorageStubs::Get(const std::string& address) {
  MutexLock lock(&mu_);
  auto& s = stubs_[address];
  if (!s) {
    ChannelOptions options;
    options.traffic = TrafficClass::kStorage;  // chunk data, and the chain's own calls
    s = fs3rpc::Storage::NewStub(MakeChannel(address, options));
  }
  return s.get();
}

Status GrpcTransport::Write(const std::string& address, const fs3rpc::WriteRequest& req,
                            fs3rpc::WriteResponse* resp, std::chrono::milliseconds deadline) {
  fs3rpc::Storage::Stub* stub = stubs_.Get(address);
  grpc::ClientContext c;
  SetDeadline(&c, deadline);
  if (req.data().size() <= options_.stream_threshold) {
    return FromGrpcStatus(stub->Write(&c, req, resp));
  }
  auto writer = stub->WriteStream(&c, resp);
  fs3rpc::WritePiece first;
  *first.mutable_header() = req;
  first.mutable_header()->clear_data();
  first.mutable_header()->set_stream_length(req.data().size());
  bool ok = writer->Write(first);
  for (std::size_t off = 0; ok && off < req.data().size(); off += options_.piece_bytes) {
    fs3rpc::WritePiece piece;
    piece.set_data(req.data().substr(off, options_.piece_bytes));
    ok = writer->Write(piece);
  }
  writer->WritesDone();
  return FromGrpcStatus(writer->Finish());
}

Status GrpcTransport::Read(const std::string& address, const fs3rpc::ReadRequest& req,
                           fs3rpc::ReadResponse* resp, std::chrono::milliseconds deadline) {
  fs3rpc::Storage::Stub* stub = stubs_.Get(address);
  grpc::ClientContext c;
  SetDeadline(&c, deadline);
  if (req.length() <= options_.stream_threshold) {
    return FromGrpcStatus(stub->Read(&c, req, resp));
  }
  auto reader = stub->ReadStream(&c, req);
  fs3rpc::ReadResponse piece;
  bool first = true;
  while (reader->Read(&piece)) {
    if (first) {
      resp->set_version(piece.version());
      resp->set_chunk_length(piece.chunk_length());
      first = false;
    }
    resp->mutable_data()->append(piece.data());
  }
  return FromGrpcStatus(reader->Finish());
}

}  // namespace ff::fs3
