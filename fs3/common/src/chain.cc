#include "fs3/chain.h"

#include <algorithm>

namespace ff::fs3 {

std::string_view Name(PublicState s) {
  switch (s) {
    case PublicState::kServing:
      return "serving";
    case PublicState::kSyncing:
      return "syncing";
    case PublicState::kWaiting:
      return "waiting";
    case PublicState::kLastSrv:
      return "lastsrv";
    case PublicState::kOffline:
      return "offline";
  }
  return "?";
}

std::string_view Name(LocalState s) {
  switch (s) {
    case LocalState::kUpToDate:
      return "up-to-date";
    case LocalState::kOnline:
      return "online";
    case LocalState::kOffline:
      return "offline";
  }
  return "?";
}

std::optional<PublicState> ParsePublicState(std::string_view name) {
  for (auto s : {PublicState::kServing, PublicState::kSyncing, PublicState::kWaiting,
                 PublicState::kLastSrv, PublicState::kOffline}) {
    if (Name(s) == name) return s;
  }
  return std::nullopt;
}

std::optional<LocalState> ParseLocalState(std::string_view name) {
  for (auto s : {LocalState::kUpToDate, LocalState::kOnline, LocalState::kOffline}) {
    if (Name(s) == name) return s;
  }
  return std::nullopt;
}

PublicState NextPublicState(LocalState local, PublicState current,
                            std::optional<PublicState> predecessor, bool data_before) {
  using P = PublicState;
  const bool pred_serving = predecessor == P::kServing;
  switch (local) {
    case LocalState::kUpToDate:
      switch (current) {
        case P::kServing:
          return P::kServing;
        case P::kSyncing:
          return P::kServing;  // recovery finished
        case P::kWaiting:
          return P::kWaiting;  // must sync first: it may have missed writes
        case P::kLastSrv:
          return P::kServing;  // it holds the latest data
        case P::kOffline:
          return P::kWaiting;
      }
      break;
    case LocalState::kOnline:
      switch (current) {
        case P::kServing:
          return P::kServing;
        case P::kSyncing:
          return pred_serving ? P::kSyncing : P::kWaiting;
        case P::kWaiting:
          return pred_serving ? P::kSyncing : P::kWaiting;
        case P::kLastSrv:
          return P::kServing;
        case P::kOffline:
          return P::kWaiting;
      }
      break;
    case LocalState::kOffline:
      switch (current) {
        case P::kServing:
          // The chain's data lives on ahead of it, or this was the last target holding it (a
          // waiting or syncing predecessor does not count: found by fs3/model/chain.pml, where
          // every target ended up waiting for ever).
          return data_before ? P::kOffline : P::kLastSrv;
        case P::kSyncing:
          return P::kOffline;
        case P::kWaiting:
          return P::kOffline;
        case P::kLastSrv:
          return P::kLastSrv;
        case P::kOffline:
          return P::kOffline;
      }
      break;
  }
  return P::kOffline;
}

LocalState LocalAfterRouting(LocalState local, PublicState published) {
  switch (published) {
    case PublicState::kServing:
      return LocalState::kUpToDate;
    case PublicState::kOffline:
    case PublicState::kLastSrv:
    case PublicState::kWaiting:
      // Waiting too: mgmtd moves an offline target that reports up-to-date to waiting, and a
      // service whose routing skipped the offline version would otherwise stay up-to-date, and
      // waiting, for ever (waiting + up-to-date stays waiting).
      return local == LocalState::kUpToDate ? LocalState::kOnline : local;
    case PublicState::kSyncing:
      return local;
  }
  return local;
}

std::vector<TargetId> Chain::Readable() const {
  std::vector<TargetId> out;
  for (const ChainTarget& t : targets) {
    if (fs3::Readable(t.state)) out.push_back(t.target);
  }
  return out;
}

int Chain::Head() const {
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (Writable(targets[i].state)) return static_cast<int>(i);
  }
  return -1;
}

int Chain::Tail() const {
  for (std::size_t i = targets.size(); i-- > 0;) {
    if (Writable(targets[i].state)) return static_cast<int>(i);
  }
  return -1;
}

bool UpdateChain(Chain& chain, const std::map<TargetId, LocalState>& local) {
  auto local_of = [&](TargetId t) {
    auto it = local.find(t);
    return it == local.end() ? LocalState::kOffline : it->second;
  };
  // Live targets first, in the order data flows: those holding the chain's data (serving,
  // lastsrv), then those catching up (syncing), then returning ones; targets that are down last.
  auto rank = [&](const ChainTarget& t) {
    if (local_of(t.target) == LocalState::kOffline) return 3;
    switch (t.state) {
      case PublicState::kServing:
      case PublicState::kLastSrv:
        return 0;
      case PublicState::kSyncing:
        return 1;
      default:
        return 2;
    }
  };
  std::vector<ChainTarget> next = chain.targets;
  std::stable_sort(next.begin(), next.end(),
                   [&](const ChainTarget& a, const ChainTarget& b) { return rank(a) < rank(b); });
  bool data_before = false;
  for (std::size_t i = 0; i < next.size(); ++i) {
    std::optional<PublicState> pred;
    if (i > 0) pred = next[i - 1].state;  // already updated: changes flow down the chain at once
    next[i].state = NextPublicState(local_of(next[i].target), next[i].state, pred, data_before);
    if (next[i].state == PublicState::kServing || next[i].state == PublicState::kLastSrv)
      data_before = true;
  }
  if (next == chain.targets) return false;
  chain.targets = std::move(next);
  ++chain.version;
  return true;
}

}  // namespace ff::fs3
