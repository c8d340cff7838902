#include "engine/link_clock.h"

#include <map>
#include <memory>

#include "common/thread_annotations.h"
#include "hfreduce/communicator.h"

namespace ff::hfreduce {
namespace {

struct Registry {
  Mutex mu;
  std::map<std::string, std::unique_ptr<LinkCounters>> links FF_GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static Registry* r = new Registry;  // never destroyed: network threads may outlive statics
  return *r;
}

}  // namespace

LinkCounters* LinkCountersOf(const std::string& peer) {
  Registry& r = TheRegistry();
  MutexLock lock(&r.mu);
  std::unique_ptr<LinkCounters>& c = r.links[peer];
  if (!c) c = std::make_unique<LinkCounters>();
  return c.get();
}

std::vector<LinkTime> ProcessLinkTimes() {
  Registry& r = TheRegistry();
  MutexLock lock(&r.mu);
  std::vector<LinkTime> out;
  for (const auto& [peer, c] : r.links) {
    LinkTime t;
    t.peer = peer;
    t.frames = c->frames.load(std::memory_order_relaxed);
    t.bytes = c->bytes.load(std::memory_order_relaxed);
    t.wait_s = static_cast<double>(c->wait_ns.load(std::memory_order_relaxed)) * 1e-9;
    t.move_s = static_cast<double>(c->move_ns.load(std::memory_order_relaxed)) * 1e-9;
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace ff::hfreduce
