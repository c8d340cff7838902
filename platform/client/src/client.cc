#include "platform/client.h"

namespace ff::platform {

HaiClient::HaiClient(std::string server, std::string token, const ChannelOptions& channel)
    : server_(std::move(server)),
      token_(std::move(token)),
      stub_(hai::Hai::NewStub(MakeChannel(server_, channel))) {}

HaiClient::HaiClient(std::string server, std::string token,
                     const std::shared_ptr<grpc::Channel>& channel)
    : server_(std::move(server)), token_(std::move(token)), stub_(hai::Hai::NewStub(channel)) {}

}  // namespace ff::platform
