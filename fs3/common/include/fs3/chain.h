// Chains of storage targets and how their targets' states change (3FS's state machine).
//
// A chain is an ordered list of storage targets holding replicas of the same chunks: writes enter
// at the head and are committed at the tail (CRAQ). Each target has
//   - a local state, reported by its storage service in heartbeats (or offline when the service's
//     lease expired): up-to-date, online (alive but not caught up), offline;
//   - a public state, decided by fs3-mgmtd and published in the routing table:
//
//     public state | reads | writes | meaning
//     serving      |  yes  |  yes   | alive and up to date
//     syncing      |  no   |  yes   | alive, receiving the chain's data from its predecessor
//     waiting      |  no   |  no    | alive, recovery not started yet
//     lastsrv      |  no   |  no    | down, and it was the last serving target (holds the latest
//     data) offline      |  no   |  no    | down, or its disk failed
//
// NextPublicState is 3FS's transition table; UpdateChain applies it to a whole chain: live
// targets first (serving and lastsrv, then syncing, then returning ones), so that a target that
// went offline moves to the end and a returning target rejoins at the tail of the live part, where
// it syncs from its predecessor; the chain's version is bumped whenever its order or a state
// changes. Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ff::fs3 {

using TargetId = uint64_t;
using ChainId = uint32_t;

enum class PublicState : uint8_t { kServing, kSyncing, kWaiting, kLastSrv, kOffline };
enum class LocalState : uint8_t { kUpToDate, kOnline, kOffline };

std::string_view Name(PublicState s);  // "serving", "syncing", "waiting", "lastsrv", "offline"
std::string_view Name(LocalState s);   // "up-to-date", "online", "offline"
std::optional<PublicState> ParsePublicState(std::string_view name);
std::optional<LocalState> ParseLocalState(std::string_view name);

// Whether a target in this public state serves reads / receives writes.
inline bool Readable(PublicState s) {
  return s == PublicState::kServing;
}
inline bool Writable(PublicState s) {
  return s == PublicState::kServing || s == PublicState::kSyncing;
}

// The next public state of a target from its local state, its current public state and its
// predecessor's public state (nullopt: it has no predecessor, i.e. it heads the chain).
// `data_before`: a target before it in the chain (already updated) is serving or lastsrv, i.e.
// holds the chain's data; a serving target that goes down without one is the last serving.
PublicState NextPublicState(LocalState local, PublicState current,
                            std::optional<PublicState> predecessor, bool data_before);

// The local state a storage service keeps for its target after reading the routing table: a
// target the cluster gave up on (offline, lastsrv) or holds back (waiting) must be resynced
// before it serves again, whatever it believed before.
LocalState LocalAfterRouting(LocalState local, PublicState published);

struct ChainTarget {
  TargetId target = 0;
  PublicState state = PublicState::kServing;
  bool operator==(const ChainTarget&) const = default;
};

struct Chain {
  ChainId id = 0;
  uint64_t version = 1;
  std::vector<ChainTarget> targets;  // head first
  bool operator==(const Chain&) const = default;

  // The serving targets' ids (readable), and the head / tail of the writable part (-1: none).
  std::vector<TargetId> Readable() const;
  int Head() const;  // index of the first writable target
  int Tail() const;  // index of the last writable target
};

// Applies the transition table to every target of `chain` given the local states (a target
// missing from `local` is offline) and reorders it; bumps the version if anything changed.
// Returns true when the chain changed.
bool UpdateChain(Chain& chain, const std::map<TargetId, LocalState>& local);

}  // namespace ff::fs3
