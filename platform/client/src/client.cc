#include "platform/client.h"

namespace ff::platform {

HaiClient::HaiClient(std::string server, std::string token, const ChannelOptions& channel)
    : server_(std::move(server)),
      token_(std::move(token)),
      stub_(hai::Hai::NewStub(MakeChannel(server_, channel))) {}

}  // namespace ff::platform
