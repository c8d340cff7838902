#include "platform/client.h"

namespace ff::platform {

HaiClient::HaiClient(std::string server, std::string token, const ChannelOptions& channel)
    : server_(std::move(server)),
      token_(std::move(token)),
      servers_(std::make_shared<Servers>(server_, channel)) {}

HaiClient::HaiClient(std::string token, std::shared_ptr<Servers> servers)
    : server_(servers->current()), token_(std::move(token)), servers_(std::move(servers)) {}

}  // namespace ff::platform
