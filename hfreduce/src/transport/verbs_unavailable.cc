// The verbs transport where this build has no libibverbs: never available.
#include "transport/verbs.h"

namespace ff::hfreduce {

bool VerbsAvailable() {
  return false;
}

struct VerbsConnector::Impl {};
VerbsConnector::VerbsConnector(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VerbsConnector::~VerbsConnector() = default;

Result<std::unique_ptr<VerbsConnector>> VerbsConnector::Begin(std::unique_ptr<Connection>,
                                                              const std::string&, int, int) {
  return Unavailable(
      "hfreduce: this build has no ibverbs transport (configure with libibverbs-dev "
      "installed, FF_WITH_VERBS)");
}

Result<std::unique_ptr<Connection>> VerbsConnector::Finish() {
  return Unavailable("hfreduce: this build has no ibverbs transport");
}

}  // namespace ff::hfreduce
