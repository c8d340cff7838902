/*
 * fs3's chain protocol as a Promela model, checked by spin (Debian package `spin`).
 *
 *   fs3/model/check.sh            # the bounded configuration CI runs
 *   fs3/model/check.sh --large    # the larger one (see fs3/model/README.md for state counts)
 *
 * One chain of three targets (T0, T1, T2, one per fs3-storage service) holding one chunk,
 * fs3-mgmtd, concurrent writers, readers, a clock, and crashes. The names follow the code:
 *
 *   fs3/common/src/chain.cc     NextPublicState, UpdateChain (rank, stable sort, states flowing down)
 *   fs3/mgmtd/src/mgmtd.cc      Mgmtd::Heartbeat, LocalOf (the lease), Check
 *   fs3/storage/src/storage_service.cc HeartbeatLoop, RefreshRouting, CheckServing, Locate, DoWrite
 *                               (head check, request-id dedup, chunk lock, Prepare, forward,
 *                               whole-chunk resend on kStaleVersion, retry with new routing,
 *                               Commit), DoRead + QueryVersion (CRAQ's apportioned query),
 *                               SyncLoop / SyncSuccessor (DumpMeta diff, whole replaces), SyncDone
 *   fs3/storage/src/chunk_store.cc Prepare (base version check), Commit
 *   fs3/client/src/client.cc    SendToHead (retries with the same request id)
 *
 * What persists across a crash is what the code keeps on disk (committed and pending versions
 * and content); memory (routing, lease, local state, the dedup table, chunk locks, RPCs in
 * flight) is lost. A process that takes no step for a while is a frozen (SIGSTOPped) or
 * partitioned service: nothing here forces a process to move while the clock runs.
 *
 * Content is abstract: a write's content is its writer's id; a chunk holds the content of the
 * last write applied, and a version number names one state of the chunk.
 *
 * Properties (assertions below):
 *   P1 no acknowledged write is lost, and
 *   P2 a read returns a committed version no older than the last write acknowledged before the
 *      read began (with that write's content when it read that version);
 *   P3 no two heads accept writes for one chain: two acknowledged writes never get one version;
 *   P4 replicas converge after resync: when a resync ends (SyncDone) with no write in flight,
 *      the synced target holds exactly what its predecessor holds;
 *   plus no deadlock (spin's invalid end states) and the model's own bounds.
 *
 * Knobs (-D to spin -a): NT targets (default 3), NW writers (2), NR readers (2), MAXCRASH
 * crashes (1), MAXCV routing versions while the clock runs (8), LEASE ticks (2). The BUG_...
 * switches put back the bugs this model found (README.md); check.sh shows spin finding them.
 */

#ifndef NT
#define NT 3            /* targets in the chain */
#endif
#ifndef NW
#define NW 2            /* writers, one write each */
#endif
#ifndef NR
#define NR 2            /* readers, one read each */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1      /* crashes of storage services, in all */
#endif
#ifndef LEASE
#define LEASE 2         /* mgmtd's lease_ms, in ticks; a service fences itself after LEASE/2 */
#endif
#ifndef MAXCV
#define MAXCV 8         /* routing versions while the clock runs */
#endif
#define MAXR (MAXCV + 8) /* routing versions the model can hold */
#define MAXV 8          /* chunk versions */
#define MAXFWD 2        /* times a replica retries a failed forward with new routing */
#define NONE 255

/* PublicState (fs3/common/include/fs3/chain.h) */
#define SERVING 0
#define SYNCING 1
#define WAITING 2
#define LASTSRV 3
#define OFFLINE 4
/* LocalState */
#define UPTODATE 0
#define ONLINE 1
#define LOFFLINE 2
/* status codes a write or read can end with */
#define OK 0
#define UNAVAILABLE 1
#define ABORTED 2          /* stale chain version, not the head */
#define FAILEDPRE 3        /* not writable / readable, no such pending version */
#define STALEVERSION 4     /* the replica lacks the base version (kStaleVersion) */

#define Writable(s) ((s) == SERVING || (s) == SYNCING)
#define Readable(s) ((s) == SERVING)

/* ---- fs3-mgmtd: the routing table, one snapshot per routing version ---------------------- */
byte cver = 1;                  /* the current routing (chain) version */
byte r_tgt[MAXR * NT];          /* r_tgt[v*NT + i]: the i-th target of the chain at version v */
byte r_st[MAXR * NT];           /* its public state */
byte age_hb[NT];                /* Mgmtd::Heartbeat: ticks since each node was last heard */
bool heard[NT];
byte reported[NT];              /* the local state it reported */
bool mg_dirty;                  /* something Check looks at changed */

/* ---- fs3-storage, per target --------------------------------------------------------------- */
/* on disk (ChunkStore) */
byte committed[NT], ccontent[NT], pending[NT], pcontent[NT];
/* in memory */
bool alive[NT];
byte inc[NT];                   /* incarnation: RPCs of a crashed process die with it */
byte lstate[NT];                 /* local_ */
bool registered[NT];            /* registered_: a heartbeat was answered */
bool hb_go[NT];                 /* HeartbeatLoop passed its wait-after-restart */
byte rtv[NT];                   /* routing_.version() (0: never fetched) */
byte age_renew[NT];             /* ticks since renewed_ */
byte need_rv[NT];               /* routing version the last renewal requires */
byte done_v[NT * (NW + 1)];     /* done_ (RecentWrites): version applied per request id */
byte lock[NT];                  /* the chunk lock: 0 free, else holder's _pid + 1 */
byte synced_v[NT];              /* synced_: the chain version at which it synced ... */
byte synced_s[NT];              /* ... this successor */
/* a heartbeat in flight: 0 none, 2 answered by mgmtd, the answer on its way */
byte hb_state[NT];
byte age_sent[NT];              /* ticks since the last heartbeat was sent */
byte hb_rv[NT], hb_inc[NT];

/* ---- the world ---------------------------------------------------------------------------- */
byte crashes;
byte acked_by[MAXV];            /* content of the write acknowledged with each version */
byte acked_max;                 /* newest version acknowledged */
byte writes_in_flight;
byte writers_done;

/* scratch, used only inside one atomic step: not part of the state (-DHIDDEN= for spin's BFS) */
#ifndef HIDDEN
#define HIDDEN hidden
#endif
HIDDEN byte k, j, ps;
HIDDEN byte is_head;
HIDDEN byte m_i, m_r, m_n, m_out, m_lo[NT], m_nt[NT], m_ns[NT], m_nl[NT], m_rk[NT];
HIDDEN byte m_changed, m_data;

/* ---- chain.cc ------------------------------------------------------------------------------ */
/* data_before: a target before it (already updated) is serving or lastsrv, i.e. holds the
   chain's data. */
inline NextPublicState(lo, cur, has_pred, pred, data_before, out) {
  if
  :: lo == UPTODATE ->
     if
     :: cur == SERVING || cur == SYNCING || cur == LASTSRV -> out = SERVING
     :: else -> out = WAITING   /* waiting: must sync first; offline: comes back waiting */
     fi
  :: lo == ONLINE ->
     if
     :: cur == SERVING || cur == LASTSRV -> out = SERVING
     :: cur == SYNCING || cur == WAITING ->
        if :: has_pred && pred == SERVING -> out = SYNCING :: else -> out = WAITING fi
     :: else -> out = WAITING
     fi
  :: else ->
     if
#ifdef BUG_LASTSRV_AFTER_ANY_PREDECESSOR
     :: cur == SERVING -> if :: has_pred -> out = OFFLINE :: else -> out = LASTSRV fi
#else
     :: cur == SERVING -> if :: data_before -> out = OFFLINE :: else -> out = LASTSRV fi
#endif
     :: cur == LASTSRV -> out = LASTSRV
     :: else -> out = OFFLINE
     fi
  fi
}

/* Position of target t in routing version v (NT if absent). */
inline PosIn(v, t, out) {
  out = 0;
  do
  :: out < NT && r_tgt[v * NT + out] != t -> out++
  :: else -> break
  od
}

/* Mgmtd::LocalOf: a node not heard from within the lease is offline. */
inline LocalOf(t, out) {
  if
  :: !heard[t] || age_hb[t] >= LEASE -> out = LOFFLINE
  :: else -> out = reported[t]
  fi
}

/* StorageService::CheckServing: joined, lease renewed within half its length (and, unless the
   bug is put back, routing at least as new as what the renewal said). */
#ifdef BUG_SERVE_STALE_ROUTING
#define ServingOk(t) (alive[t] && registered[t] && age_renew[t] <= LEASE / 2)
#else
#define ServingOk(t) (alive[t] && registered[t] && age_renew[t] <= LEASE / 2 && rtv[t] >= need_rv[t])
#endif

/* StorageService::RefreshRouting for target t. */
inline RefreshRouting(t) {
  rtv[t] = cver;
  PosIn(cver, t, k);
  if
  :: registered[t] && r_st[cver * NT + k] == SERVING -> lstate[t] = UPTODATE
#ifdef BUG_UPTODATE_WHILE_WAITING
  :: registered[t] && (r_st[cver * NT + k] == OFFLINE || r_st[cver * NT + k] == LASTSRV) &&
#else
  :: registered[t] && (r_st[cver * NT + k] == OFFLINE || r_st[cver * NT + k] == LASTSRV ||
                       r_st[cver * NT + k] == WAITING) &&
#endif
     lstate[t] == UPTODATE -> lstate[t] = ONLINE   /* the cluster gave up on it: resync */
  :: else -> skip
  fi
}

/* Locate: state of x in its own routing, whether it heads the chain, its successor and the
   tail (NONE where there is none). */
inline Locate(x, ps, is_head, succ, tail) {
  PosIn(rtv[x], x, k);
  ps = r_st[rtv[x] * NT + k];
  j = 0;
  is_head = true;
  do
  :: j < k -> if :: Writable(r_st[rtv[x] * NT + j]) -> is_head = false :: else fi; j++
  :: else -> break
  od;
  succ = NONE;
  j = k + 1;
  do
  :: j < NT && succ == NONE ->
     if :: Writable(r_st[rtv[x] * NT + j]) -> succ = r_tgt[rtv[x] * NT + j] :: else fi; j++
  :: else -> break
  od;
  tail = NONE;
  j = 0;
  do
  :: j < NT -> if :: Writable(r_st[rtv[x] * NT + j]) -> tail = r_tgt[rtv[x] * NT + j] :: else fi; j++
  :: else -> break
  od
}

/* ---- fs3-mgmtd: Check (UpdateChain over LocalOf) -------------------------------------------- */
proctype Mgmtd() {
end:
  do
  :: atomic {
       mg_dirty ->
       mg_dirty = false;
       m_i = 0;
       do
       :: m_i < NT ->
          LocalOf(r_tgt[cver * NT + m_i], m_lo[m_i]);
          if
          :: m_lo[m_i] == LOFFLINE -> m_rk[m_i] = 3
          :: else ->
             if
             :: r_st[cver * NT + m_i] == SERVING || r_st[cver * NT + m_i] == LASTSRV -> m_rk[m_i] = 0
             :: r_st[cver * NT + m_i] == SYNCING -> m_rk[m_i] = 1
             :: else -> m_rk[m_i] = 2
             fi
          fi;
          m_i++
       :: else -> break
       od;
       /* stable sort by rank */
       m_n = 0; m_r = 0;
       do
       :: m_r < 4 ->
          m_i = 0;
          do
          :: m_i < NT ->
             if
             :: m_rk[m_i] == m_r -> m_nt[m_n] = r_tgt[cver * NT + m_i]; m_ns[m_n] = r_st[cver * NT + m_i]; m_nl[m_n] = m_lo[m_i]; m_n++
             :: else
             fi;
             m_i++
          :: else -> break
          od;
          m_r++
       :: else -> break
       od;
       /* states flow down the chain */
       m_data = false;
       m_i = 0;
       do
       :: m_i < NT ->
          if
          :: m_i == 0 -> NextPublicState(m_nl[m_i], m_ns[m_i], false, 0, m_data, m_out)
          :: else -> NextPublicState(m_nl[m_i], m_ns[m_i], true, m_ns[m_i - 1], m_data, m_out)
          fi;
          m_ns[m_i] = m_out;
          if :: m_out == SERVING || m_out == LASTSRV -> m_data = true :: else fi;
          m_i++
       :: else -> break
       od;
       m_changed = false;
       m_i = 0;
       do
       :: m_i < NT ->
          if
          :: m_nt[m_i] != r_tgt[cver * NT + m_i] || m_ns[m_i] != r_st[cver * NT + m_i] -> m_changed = true
          :: else
          fi;
          m_i++
       :: else -> break
       od;
       if
       :: m_changed ->
          assert(cver + 1 < MAXR);   /* the model's bound, not a property */
          m_i = 0;
          do
          :: m_i < NT -> r_tgt[(cver + 1) * NT + m_i] = m_nt[m_i]; r_st[(cver + 1) * NT + m_i] = m_ns[m_i]; m_i++
          :: else -> break
          od;
          cver++;
          /* P5: some target holds the chain's data (serving, or lastsrv until it returns) */
          m_data = false;
          m_i = 0;
          do
          :: m_i < NT -> if :: m_ns[m_i] == SERVING || m_ns[m_i] == LASTSRV -> m_data = true :: else fi; m_i++
          :: else -> break
          od;
          assert(m_data)
       :: else
       fi
     }
  od
}

proctype Clock() {
end:
  do
  :: atomic {
       cver < MAXCV ->   /* the bound: time stops once the routing has changed this often */
       k = 0;
       do
       :: k < NT ->
          if :: age_hb[k] < LEASE -> age_hb[k]++; if :: age_hb[k] == LEASE -> mg_dirty = true :: else fi :: else fi;
          if :: age_renew[k] < LEASE -> age_renew[k]++ :: else fi;
          if :: age_sent[k] < LEASE -> age_sent[k]++ :: else fi;
          k++
       :: else -> break
       od;
       k = 0
     }
  od
}

/* ---- the write path ---------------------------------------------------------------------------
   DoWrite at each target down the chain, then Commit at each on the way back, as one process
   walking the chain like the RPC does. A frame per hop: the target, its incarnation, the
   version it prepared, its successor and the retries left. */
inline WritePath(first, first_fwd, rid, c0, whole0, cv0, e, rv) {
  d = 0; x = first; fwd = first_fwd; c = c0; whole = whole0; cv = cv0; v = rv;
enter:
  atomic {
    e = OK; dedup = false;
    if
    :: !ServingOk(x) -> e = UNAVAILABLE
    :: else ->
       xinc = inc[x];
       if :: cv > rtv[x] -> RefreshRouting(x) :: else fi;   /* Locate with a newer hint */
       Locate(x, ps, is_head, succ, tail);
       xcv = rtv[x];   /* pos.chain_version */
       if
       :: cv != rtv[x] -> e = ABORTED
       :: else ->
          if
          :: !Writable(ps) -> e = FAILEDPRE
          :: !fwd && !is_head -> e = ABORTED
          :: else ->
             if
             :: rid != 0 && done_v[x * (NW + 1) + rid] != 0 -> dedup = true; v = done_v[x * (NW + 1) + rid]
             :: else
             fi
          fi
       fi
    fi
  }
  if
  :: e != OK || dedup -> goto back
  :: else
  fi;
  /* the chunk lock */
#ifdef BUG_SUCCESSOR_FROM_STALE_ROUTING
  /* the successor stays what Locate said before the lock, whatever the routing is now */
  if
  :: atomic { alive[x] && inc[x] == xinc && lock[x] == 0 -> lock[x] = _pid + 1 }
  :: atomic { !(alive[x] && inc[x] == xinc) || lock[x] != 0 -> e = UNAVAILABLE }   /* died, or timed out */
  fi;
#else
  /* Under the lock the position is decided again (CheckWritePosition, BeginWrite): routing that
     moved while the write waited makes it stale (ABORTED), so no write decides its successor
     from routing that a resync has moved past. */
  if
  :: atomic {
       alive[x] && inc[x] == xinc && lock[x] == 0 ->
       if
       :: cv > rtv[x] -> RefreshRouting(x)
       :: else
       fi;
       if
       :: rtv[x] != xcv -> e = ABORTED
       :: else -> lock[x] = _pid + 1
       fi
     }
  :: atomic { !(alive[x] && inc[x] == xinc) || lock[x] != 0 -> e = UNAVAILABLE }   /* died, or timed out */
  fi;
#endif
  if :: e != OK -> goto back :: else fi;
  atomic {   /* ChunkStore::Prepare */
    if
    :: !(alive[x] && inc[x] == xinc) -> e = UNAVAILABLE
    :: else ->
       if :: !fwd -> v = committed[x] + 1; assert(v < MAXV) :: else fi;
       if
       :: !whole && committed[x] + 1 != v -> e = STALEVERSION; lock[x] = 0
       :: else -> pending[x] = v; pcontent[x] = c
       fi
    fi
  }
  if :: e != OK -> goto back :: else fi;
  tries[d] = MAXFWD;
forward:
  if
  :: succ == NONE -> goto commit
  :: else
  fi;
  /* push this hop and go on to the successor with this target's chain version */
  f_t[d] = x; f_inc[d] = xinc; f_v[d] = v; f_succ[d] = succ; f_whole[d] = whole; f_c[d] = c; f_fwd[d] = fwd; f_cv[d] = xcv;
  d++;
  assert(d < NT);
  cv = xcv; x = succ; fwd = true;
  goto enter;
commit:
  atomic {   /* ChunkStore::Commit, then remember the request id */
    if
    :: !(alive[x] && inc[x] == xinc) -> e = UNAVAILABLE
    :: else ->
       if
       :: committed[x] >= v && pending[x] == 0 -> skip   /* done already */
       :: else ->
          if
          :: pending[x] == v -> committed[x] = v; ccontent[x] = pcontent[x]; pending[x] = 0
          :: else -> e = FAILEDPRE
          fi
       fi;
       lock[x] = 0;
       if :: e == OK && rid != 0 -> done_v[x * (NW + 1) + rid] = v :: else fi
    fi
  }
back:   /* the answer goes to the predecessor (or the client) */
  if
  :: d == 0 -> rv = v; goto out
  :: else
  fi;
  d--;
  atomic {
    x = f_t[d]; xinc = f_inc[d]; succ = f_succ[d]; whole = f_whole[d]; c = f_c[d]; v = f_v[d]; fwd = f_fwd[d]; xcv = f_cv[d];
    f_t[d] = 0; f_inc[d] = 0; f_succ[d] = 0; f_whole[d] = false; f_c[d] = 0; f_v[d] = 0; f_fwd[d] = false; f_cv[d] = 0
  };
  if
  :: !(alive[x] && inc[x] == xinc) -> e = UNAVAILABLE; goto back   /* its RPC died with it */
  :: else
  fi;
  if
  :: e == OK -> goto commit
  :: e == STALEVERSION && !whole ->   /* the successor lacks the base: send the whole chunk */
     atomic { whole = true; c = pcontent[x]; e = OK };
     goto forward
  :: else
  fi;
  /* Unavailable or stale: give up at the deadline, or refresh the routing and go on */
  if
  :: atomic { e = UNAVAILABLE; lock[x] = 0 }; goto back
  :: tries[d] > 0 ->
     atomic {
       tries[d]--;
       e = OK;
       RefreshRouting(x);
       Locate(x, ps, is_head, succ, tail);
       xcv = rtv[x];
       if
       :: !Writable(ps) -> e = UNAVAILABLE; lock[x] = 0   /* left its chain mid-write */
#ifndef BUG_COMMIT_AFTER_LOSING_HEAD
       :: Writable(ps) && !fwd && !is_head -> e = UNAVAILABLE; lock[x] = 0   /* no longer the head */
#endif
       :: else
       fi
     }
     if :: e != OK -> goto back :: else fi;
     goto forward
  :: else -> atomic { e = UNAVAILABLE; lock[x] = 0 }; goto back
  fi;
out:
  atomic { x = 0; xinc = 0; xcv = 0; v = 0; c = 0; cv = 0; d = 0; fwd = false; whole = false; dedup = false;
           succ = 0; tail = 0; k = 0; do :: k < NT -> tries[k] = 0; k++ :: else -> break od; k = 0 }
}

/* ---- fs3-storage: heartbeat, routing, resync, crash and restart ------------------------------ */
proctype Storage(byte t) {
  byte succ, tail, x, xinc, xcv, v, c, cv, d, e, rv, peer_c, peer_cc, peer_p, sv, sj;
  bool fwd, whole, dedup, current;
  byte f_t[NT], f_inc[NT], f_v[NT], f_succ[NT], f_c[NT], f_cv[NT], tries[NT];
  bool f_whole[NT], f_fwd[NT];
end:
  do
  /* RoutingLoop */
  :: atomic { alive[t] && rtv[t] != cver -> RefreshRouting(t) }
  /* HeartbeatLoop: after a restart, first wait until the cluster has marked the target offline */
  :: atomic {
       alive[t] && !hb_go[t] && rtv[t] != 0 ->
       PosIn(rtv[t], t, k);
       if
       :: r_st[rtv[t] * NT + k] == OFFLINE || r_st[rtv[t] * NT + k] == LASTSRV -> hb_go[t] = true
       :: else
       fi
     }
  :: atomic {
       alive[t] && hb_go[t] && hb_state[t] == 0 && (age_sent[t] > 0 || cver >= MAXCV) ->
       age_sent[t] = 0; hb_inc[t] = inc[t];
       /* Mgmtd::Heartbeat (receiving it later than it was sent only widens the margin) */
       age_hb[t] = 0; heard[t] = true; reported[t] = lstate[t]; hb_rv[t] = cver;
       hb_state[t] = 2; mg_dirty = true
     }
  /* ... and the answer arrives (to a process that may have died or been frozen meanwhile) */
  :: atomic {
       hb_state[t] == 2 ->
       if
       :: alive[t] && hb_inc[t] == inc[t] ->
#ifdef BUG_LEASE_FROM_REPLY
          age_renew[t] = 0;
#else
          age_renew[t] = age_sent[t];   /* the lease runs from when the request was sent */
#endif
          registered[t] = true;
          need_rv[t] = hb_rv[t]
       :: else
       fi;
       hb_state[t] = 0
     }
  /* kill -9 */
  :: atomic {
       alive[t] && crashes < MAXCRASH ->
       crashes++; alive[t] = false; lock[t] = 0
     }
  /* restart: what was on disk is back; memory is empty */
  :: atomic {
       !alive[t] ->
       alive[t] = true; inc[t]++; lstate[t] = ONLINE; registered[t] = false; hb_go[t] = false;
       rtv[t] = 0; age_renew[t] = LEASE; need_rv[t] = 0; synced_v[t] = 0; synced_s[t] = NONE;
       k = 0;
       do
       :: k <= NW -> done_v[t * (NW + 1) + k] = 0; k++
       :: else -> break
       od
     }
  /* SyncLoop: a serving target resyncs its syncing successor (SyncSuccessor) */
  :: atomic {
       ServingOk(t) ->
       x = t;
       sv = rtv[t];
       Locate(x, ps, is_head, succ, tail);
       if
       :: ps == SERVING && succ != NONE && !(synced_v[t] == sv && synced_s[t] == succ) ->
          PosIn(sv, succ, k);
          if :: r_st[sv * NT + k] != SYNCING -> goto sync_failed :: else fi
       :: else -> goto sync_failed
       fi;
       xinc = inc[t]; sj = succ
     }
     /* DumpMeta of the successor */
     atomic { peer_c = committed[sj]; peer_cc = ccontent[sj]; peer_p = pending[sj] }
     /* under our chunk lock: a whole replace of what differs */
     if
     :: atomic { alive[t] && inc[t] == xinc && lock[t] == 0 -> lock[t] = _pid + 1 }
     :: atomic { !(alive[t] && inc[t] == xinc) || lock[t] != 0 } -> goto sync_failed
     fi;
     current = (peer_c == committed[t] && peer_cc == ccontent[t] && peer_p == 0);
     if
     :: !current && committed[t] != 0 ->
        rv = committed[t];
        WritePath(sj, true, 0, ccontent[t], true, sv, e, rv)
     :: else -> e = OK
     fi;
     atomic { if :: alive[t] && inc[t] == xinc && lock[t] == _pid + 1 -> lock[t] = 0 :: else fi }
     if :: e != OK -> goto sync_failed :: else fi;
     /* SyncDone */
     atomic {
       alive[t] && inc[t] == xinc ->
       if
       :: alive[sj] ->
#ifndef BUG_SUCCESSOR_FROM_STALE_ROUTING
          /* no SyncDone when our own routing moved on during the resync (writes under the new
             version may not go to the successor) ... */
          if :: rtv[t] != sv -> goto sync_failed :: else fi;
          /* ... and SyncDone (Locate with the resync's version as hint) is refused by a target
             whose routing has moved past the version the resync began in */
          if :: rtv[sj] < sv -> RefreshRouting(sj) :: else fi;
          if :: rtv[sj] != sv -> goto sync_failed :: else fi;
#endif
          lstate[sj] = UPTODATE;
          /* P4: with no write in flight, the synced target holds what we hold */
          assert(writes_in_flight > 0 || (committed[sj] == committed[t] && ccontent[sj] == ccontent[t]));
          synced_v[t] = sv; synced_s[t] = sj
       :: else
       fi
     }
sync_failed:
     atomic { succ = 0; tail = 0; x = 0; xinc = 0; e = 0; rv = 0; peer_c = 0; peer_cc = 0; peer_p = 0;
              sv = 0; sj = 0; current = false }
  od
}

/* ---- a client writing (StorageClient::SendToHead) ----------------------------------------- */
#ifndef MAXTRY
#define MAXTRY 3        /* attempts of a writer before it gives up (its deadline) */
#endif
proctype Writer(byte w) {
  byte succ, tail, x, xinc, xcv, v, c, cv, d, e, rv, head, tries_left;
  bool fwd, whole, dedup;
  byte f_t[NT], f_inc[NT], f_v[NT], f_succ[NT], f_c[NT], f_cv[NT], tries[NT];
  bool f_whole[NT], f_fwd[NT];
#ifdef LATE_WRITERS
  crashes == MAXCRASH;   /* a search aid (check.sh): writers start once the crashes happened */
#endif
  do
  :: atomic {
       /* with fresh routing: the first writable target of the chain */
       cv = cver; head = NONE; j = 0;
       do
       :: j < NT && head == NONE ->
          if :: Writable(r_st[cv * NT + j]) -> head = r_tgt[cv * NT + j] :: else fi; j++
       :: else -> break
       od;
       head != NONE -> writes_in_flight++; tries_left++
     }
     rv = 0;
     WritePath(head, false, w + 1, w + 1, false, cv, e, rv);
     atomic {
       writes_in_flight--;
       if
       :: e == OK ->
          /* P3: one version, one acknowledged write */
          assert(acked_by[rv] == 0);
          acked_by[rv] = w + 1;
          if :: rv > acked_max -> acked_max = rv :: else fi;
       :: else
       fi;
       cv = 0; head = 0; j = 0
     }
     if :: e == OK || tries_left == MAXTRY -> break :: else fi
  od;
  writers_done++
}

/* ---- a client reading (StorageClient::Read -> DoRead) ---------------------------------------
   It may hold any routing, however old: it asks any target. */
proctype Reader(bool last) {
  byte x, succ, tail, amin, v, c, mc, mcc, mp, mpc, tc;
  bool ok;
  if :: last -> writers_done == NW :: else fi;
  amin = acked_max;
  select (x : 0 .. NT - 1);
  atomic {
    ok = ServingOk(x);
    if
    :: ok ->
       Locate(x, ps, is_head, succ, tail);
       ok = Readable(ps);
       mc = committed[x]; mcc = ccontent[x]; mp = pending[x]; mpc = pcontent[x]
    :: else
    fi
  }
  if
  :: ok && mp != 0 && tail != x && tail != NONE ->
     /* QueryVersion to the tail */
     atomic {
       if
       :: !alive[tail] -> ok = false
       :: else ->
          tc = committed[tail];
          if
          :: tc == mp -> v = mp; c = mpc
          :: tc != mp && tc != mc -> ok = false   /* being rewritten: retry */
          :: else -> v = mc; c = mcc
          fi
       fi
     }
  :: ok && !(mp != 0 && tail != x && tail != NONE) -> v = mc; c = mcc
  :: else
  fi;
  if
  :: ok ->
     /* P1, P2 */
     assert(v >= amin);
     assert(acked_by[v] == 0 || acked_by[v] == c)
  :: else
  fi
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < NT -> r_tgt[i] = NONE; r_st[i] = OFFLINE; i++   /* version 0: no routing */
    :: else -> break
    od;
    i = 0;
    do
    :: i < NT ->
       r_tgt[NT + i] = i; r_st[NT + i] = SERVING;
       alive[i] = true; lstate[i] = UPTODATE; registered[i] = true; hb_go[i] = true; rtv[i] = 1;
       heard[i] = true; reported[i] = UPTODATE; synced_s[i] = NONE;
       i++
    :: else -> break
    od;
    run Clock(); run Mgmtd();
    i = 0;
    do :: i < NT -> run Storage(i); i++ :: else -> break od;
    i = 0;
    do :: i < NW -> run Writer(i); i++ :: else -> break od;
    i = 0;
    do :: i < NR -> run Reader(i == NR - 1); i++ :: else -> break od
  }
}
