// Straggler detection: which node makes a job's other ranks wait, and why.
//
// In synchronous training every step waits for the slowest rank. Each rank records its steps
// (hai_job's step telemetry, $HAI_STEPS_FILE) and its agent sends hai-server the medians of the
// last few (hai::StepSummary, with the heartbeat). Diagnose() compares a job's ranks:
//
//   - Who is late. comm_s is the time from issuing each collective to its completion: every rank
//     completes a collective at about the same time, so the rank that issues it last (the one the
//     others wait for) spends the least time in it. The node whose ranks have the least comm_s is
//     the straggler; the others' median comm_s less its own is what they wait for it per step.
//     Without collectives (comm_s 0 everywhere: a job on another backend) the node with the
//     longest own phases (compute, data, checkpoint) is taken instead.
//   - Whether it matters. A straggler is named only when the others wait for it at least
//     min_wait_share of a step beyond what they usually wait for it, it is alone in being late
//     (the next latest node is not close), and the job's steps are min_slowdown slower than its
//     best this run. A job whose ranks are uneven by design (pipeline stages of different cost)
//     waits for its heavy stage at its best too: that usual wait is learnt and not counted.
//   - Why. The straggler's phase that is longer than the others' median by at least half of the
//     wait: compute, data loading or checkpoint writing; none (SLOW_UNKNOWN: its network, or work
//     outside the step) otherwise.
//   - The network. A slow link slows every rank alike (they all wait in the collectives), so it
//     is told by HFReduce's tree edges instead (StepSummary.links, from each node's leader): each
//     edge's seconds per byte moving frames, both directions together. A node whose fastest edge
//     is link_ratio slower than the other nodes' fastest is the one whose link is slow (an edge's
//     two ends cannot be told apart alone: it takes three nodes). Named when no phase of a late
//     node explains the slowdown better (a CPU-starved node's receive threads are slow too).
//   - Storage. Reads by fs3 target (StepSummary.reads, from the native client): a target whose
//     reads take read_ratio longer per byte than the others', when the job's ranks wait for data.
//   - The job itself. Every rank alike job_slowdown slower than its best and no straggler: the job
//     (its input, its model, the whole cluster's storage), not a node.
//
// StepTracker keeps one run's baseline and turns evaluations into findings. The baseline is a low
// quantile (baseline_quantile) of the step times of the evaluations that found nothing: the job's
// best, robust to a few lucky windows, and not moved by a slow period however long. A finding is
// recorded once `confirm` evaluations in a row agree (each with new steps) over at least
// confirm_ms (job_confirm_ms for the job itself), and ends once `clear` in a row over clear_ms do
// not find it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "platform/proto/hai.pb.h"

namespace ff::platform {

struct StepDetectorOptions {
  int min_window = 4;             // steps a rank's summary must hold to count
  double min_slowdown = 1.2;      // a straggler slows the job at least this much over its best
  double min_wait_share = 0.15;   // and the others wait for it at least this share of a step
  double min_wait_s = 0.002;      // and at least this long
  double job_slowdown = 1.5;      // every rank alike this much slower: the job itself
  int confirm = 3;                // evaluations in a row before a finding is recorded
  int64_t confirm_ms = 2000;      // and for at least this long
  int64_t job_confirm_ms = 5000;  // (for a job slower as a whole)
  int clear = 3;                  // evaluations in a row without it before it ends
  int64_t clear_ms = 2000;        // and for at least this long
  double baseline_quantile = 0.2;
  // Network: a node whose fastest tree edge moves bytes this much slower than the other nodes'
  // fastest (median), beyond what it usually does, and costs at least min_wait_share of a step.
  double link_ratio = 2.0;
  // Storage: a target whose reads take this much longer per byte than the other targets'
  // (median), beyond what it usually does, and cost at least min_wait_share of a step.
  double read_ratio = 2.0;
  // Bytes a step a peer must carry to be compared at all.
  double min_peer_bytes = 16 * 1024;
};

// Per node (or "node#rank" for a job on one node): how long the others wait for it a step. Also
// "link:NODE", its fastest edge's slowness over the other nodes', and "read:TARGET", a storage
// target's over the others' (ratios; what is usual for them is learnt the same way).
using Waits = std::map<std::string, double>;

// What one evaluation of a job's ranks finds (node, rank, cause and figures; no times). `ranks`
// are the current run's summaries with their node set; `baseline_s` the job's best step time so
// far (0: none yet); `usual_waits` what the others usually wait for each node (its share of an
// uneven job's normal: only waiting beyond it counts). `waits`, when given, gets this
// evaluation's waits.
hai::StepFinding Diagnose(const std::vector<hai::StepSummary>& ranks, double baseline_s,
                          const StepDetectorOptions& options = {}, const Waits& usual_waits = {},
                          Waits* waits = nullptr);

// Forgets the ranks (by rank) whose last step is `stale_s` older than the newest one's: ranks that
// stopped recording while the others went on (a replaced replica group; a rank of an older
// membership) are not part of the job's steps any more, and must not pass for late ones.
void DropStaleRanks(std::map<int32_t, hai::StepSummary>& ranks, double stale_s = 30);

// The finding in words, without when ("node n2 (rank 3) arrives last ...").
std::string DescribeFinding(const hai::StepFinding& finding);

class StepTracker {
 public:
  explicit StepTracker(StepDetectorOptions options = {}) : options_(options) {}

  // A finding that began (confirmed) or ended at this evaluation.
  struct Change {
    bool began = false;
    hai::StepFinding finding;
    std::string text;  // for the job's history: "since 10:02:11 UTC steps are 1.8x slower: ..."
  };
  // One evaluation of the run's ranks at now_ms. Nothing happens unless some rank recorded a step
  // since the last evaluation.
  std::vector<Change> Update(const std::vector<hai::StepSummary>& ranks, int64_t now_ms);

  const hai::StepFinding& current() const { return current_; }  // cause SLOW_NONE: nothing holds
  const std::deque<hai::StepFinding>& past() const { return past_; }
  double baseline_s() const { return baseline_s_; }
  double step_s() const { return step_s_; }

 private:
  static bool Same(const hai::StepFinding& a, const hai::StepFinding& b);

  const StepDetectorOptions options_;
  std::deque<double> healthy_;  // step times of the last evaluations that found nothing
  std::map<std::string, std::deque<double>> waits_;  // and the waits for each node then
  double baseline_s_ = 0;
  double step_s_ = 0;
  int64_t progress_ = -1;  // the ranks' steps recorded, summed, at the last evaluation
  hai::StepFinding current_;
  hai::StepFinding candidate_;  // what the last evaluations found, not yet confirmed
  int candidate_count_ = 0;
  int clear_count_ = 0;
  int64_t clear_since_ms_ = 0;
  int64_t evaluations_ = 0;  // since current_ began
  int64_t named_ = 0;        // of those, how many named current_'s node
  std::deque<hai::StepFinding> past_;
};

}  // namespace ff::platform
