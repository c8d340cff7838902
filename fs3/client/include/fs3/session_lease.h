// A client's lease on its open files' sessions at fs3-meta (MetaStore::KeepClient). It registers
// under a random number at start and renews every third of the lease from a thread of its own. A
// client cut off from fs3-meta for longer than the lease is taken for dead there and its sessions
// end (an unlinked file it held open goes); when it hears that, it registers again under a new
// number and opens its sessions again (those of files still there).
//
//   SessionLease lease(meta);
//   SessionId s = lease.Open(ino);      // into the Open / Make(open) request's client and handle
//   ... lease.Closing(s.handle) ...      // the session to name in the Close request
//
// A fs3-meta too old to know leases (or none reachable in time at the first open): sessions are
// anonymous (client 0), as before leases. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "fs3/meta_client.h"

namespace ff::fs3 {

struct OpenedSession {
  uint64_t client = 0;  // 0: anonymous (counted in the inode; no lease ends it)
  uint64_t handle = 0;
};

class SessionLease {
 public:
  explicit SessionLease(MetaClient* meta);
  ~SessionLease();
  SessionLease(const SessionLease&) = delete;
  SessionLease& operator=(const SessionLease&) = delete;

  // A new session on `ino` (waits up to a few seconds for the first registration); `ino` 0: a
  // file about to be created (Bind names it once made).
  OpenedSession Open(uint64_t ino) FF_EXCLUDES(mu_);
  void Bind(uint64_t handle, uint64_t ino) FF_EXCLUDES(mu_);
  // The session `handle` as it stands now (registering again moves it to the new number), for
  // the Close request; forgotten here.
  OpenedSession Closing(uint64_t handle) FF_EXCLUDES(mu_);
  // Runs `call` (an Open or a create's Make of `request`) with a new session on `ino` set in
  // `request`, registering again and calling once more when fs3-meta refuses the session because
  // this client's lease expired. The session goes to `*session`; on failure it is forgotten.
  template <typename Req>
  Status OpenWith(uint64_t ino, Req* request, OpenedSession* session,
                  const std::function<Status()>& call) FF_EXCLUDES(mu_);
  // Ends the session `handle` at fs3-meta with `close` (its client and handle are set here); a
  // close fs3-meta does not take (out of reach longer than a call retries) goes to CloseLater.
  Status End(uint64_t handle, fs3rpc::CloseRequest& close) FF_EXCLUDES(mu_);
  // As End, but sent by a thread of its own within kCloseGathering, gathered with the others
  // queued meanwhile into one CloseMany: for closes nobody waits on (a file this client did not
  // write: no length to settle). Sent, before the lease ends, by the destructor at the latest. A
  // session closed so is open at fs3-meta a moment longer: a removal meanwhile keeps the file until
  // the close lands.
  void EndSoon(uint64_t handle, fs3rpc::CloseRequest close) FF_EXCLUDES(mu_);
  // fs3-meta refused a session for this client's lease (it expired): renews now, registering
  // again under a new number when it is gone; returns when that is done (a few seconds at most).
  void Refresh() FF_EXCLUDES(mu_);
  // A close fs3-meta did not take (cut off from it longer than a call retries): sent again after
  // each renewal until it is taken, so that the session ends and the file's length is settled
  // (an unlinked file's data goes). Dropped once the lease it was opened under has expired (the
  // session ended with it), except an anonymous one's.
  void CloseLater(const fs3rpc::CloseRequest& close) FF_EXCLUDES(mu_);

 private:
  void Loop() FF_EXCLUDES(mu_);
  // Opens again, under the new number, the sessions the expired lease held.
  void Reopen(uint64_t client) FF_EXCLUDES(mu_);
  // Sends the closes CloseLater keeps (`client`: the number now registered).
  void SendPendingCloses(uint64_t client) FF_EXCLUDES(mu_);
  void CloseLoop() FF_EXCLUDES(mu_);  // sends what EndSoon queues
  // How long the first close queued waits for others, and how many go in one call at most.
  static constexpr std::chrono::milliseconds kCloseGathering{5};
  static constexpr std::size_t kMaxCloseBatch = 256;
  // Sends one Close; one fs3-meta did not take goes to CloseLater.
  Status CloseOne(const fs3rpc::CloseRequest& close) FF_EXCLUDES(mu_);
  // Sends `batch` (one Close, or a CloseMany); closes not taken go to CloseLater.
  void SendCloses(std::vector<fs3rpc::CloseRequest> batch);

  MetaClient* const meta_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ FF_GUARDED_BY(mu_) = false;
  bool settled_ FF_GUARDED_BY(mu_) = false;  // registered, or given up (anonymous sessions)
  uint64_t client_ FF_GUARDED_BY(mu_) = 0;
  uint64_t next_handle_ FF_GUARDED_BY(mu_) = 0;
  bool refresh_ FF_GUARDED_BY(mu_) = false;  // a renewal asked for now
  uint64_t rounds_ FF_GUARDED_BY(mu_) = 0;   // renewals done
  struct Held {
    uint64_t ino, client;
  };
  std::map<uint64_t, Held> open_ FF_GUARDED_BY(mu_);             // by handle
  std::vector<fs3rpc::CloseRequest> closes_ FF_GUARDED_BY(mu_);  // to send again
  std::vector<fs3rpc::CloseRequest> soon_ FF_GUARDED_BY(mu_);    // EndSoon's, to send
  bool no_close_many_ FF_GUARDED_BY(mu_) = false;  // fs3-meta is too old for CloseMany
  std::thread thread_;
  std::thread closer_;
};

template <typename Req>
Status SessionLease::OpenWith(uint64_t ino, Req* request, OpenedSession* session,
                              const std::function<Status()>& call) {
  for (int attempt = 0;; ++attempt) {
    *session = Open(ino);
    request->set_client(session->client);
    request->set_handle(session->handle);
    Status st = call();
    if (st.ok()) return st;
    Closing(session->handle);
    if (st.code() != StatusCode::kFailedPrecondition || session->client == 0 || attempt > 0) {
      return st;
    }
    Refresh();
  }
}

}  // namespace ff::fs3
