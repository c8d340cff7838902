#include "scheduler/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ff::scheduler {
namespace {

// Nodes with room for `gpus` GPUs, per leaf, in index order.
struct Eligible {
  std::vector<std::vector<int>> by_leaf;
  int total = 0;
};

Eligible FindEligible(const ClusterState& state, int gpus) {
  const Topology& topo = state.topology();
  Eligible e;
  e.by_leaf.resize(topo.leaves().size());
  for (std::size_t l = 0; l < topo.leaves().size(); ++l) {
    const Leaf& leaf = topo.leaves()[l];
    for (int n = leaf.first_node; n < leaf.first_node + leaf.num_nodes; ++n) {
      if (!state.drained(n) && state.free_gpus(n) >= gpus) {
        e.by_leaf[l].push_back(n);
        ++e.total;
      }
    }
  }
  return e;
}

std::string GangNeed(const JobRequest& job) {
  return "needs " + std::to_string(job.nodes) + " node" + (job.nodes == 1 ? "" : "s") + " with " +
         std::to_string(job.gpus_per_node) + " free GPUs";
}

bool ZoneBound(const JobRequest& job) {
  return job.comm == CommKind::kAllreduce && !job.may_span_zones && job.nodes > 1;
}

// False (with the reason) when fewer nodes have room than the gang needs, wherever they are.
bool EnoughNodes(const JobRequest& job, const Eligible& e, std::string* why) {
  if (e.total >= job.nodes) return true;
  *why = GangNeed(job) + "; " + std::to_string(e.total) + (e.total == 1 ? " is" : " are") + " free";
  return false;
}

// Sub-node jobs: one node with room for job.gpus; with `best_fit` the one with the least room,
// else the first in node order.
Placement PlaceSubNode(const JobRequest& job, const ClusterState& state, bool best_fit,
                       std::string* why) {
  const Topology& topo = state.topology();
  int chosen = -1, most_free = 0;
  for (std::size_t n = 0; n < topo.nodes().size(); ++n) {
    if (state.drained(static_cast<int>(n))) continue;
    int free = state.free_gpus(static_cast<int>(n));
    most_free = std::max(most_free, free);
    if (free < job.gpus) continue;
    if (chosen < 0) {
      chosen = static_cast<int>(n);
      if (!best_fit) break;
    } else if (free < state.free_gpus(chosen)) {
      chosen = static_cast<int>(n);
    }
  }
  if (chosen < 0) {
    *why = "needs " + std::to_string(job.gpus) +
           " GPUs on one node; the most free on any node is " + std::to_string(most_free);
    return {};
  }
  return Placement{{chosen}, job.gpus};
}

// ---- first-fit ----------------------------------------------------------------------------------

class FirstFit final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "first-fit"; }
  Placement Place(const JobRequest& job, const ClusterState& state,
                  std::string* why) const override {
    if (!job.Gang()) return PlaceSubNode(job, state, /*best_fit=*/false, why);
    Placement p{{}, job.gpus_per_node};
    const int count = static_cast<int>(state.topology().nodes().size());
    for (int n = 0; n < count && static_cast<int>(p.nodes.size()) < job.nodes; ++n) {
      if (!state.drained(n) && state.free_gpus(n) >= job.gpus_per_node) p.nodes.push_back(n);
    }
    if (static_cast<int>(p.nodes.size()) < job.nodes) {
      *why = GangNeed(job) + "; " + std::to_string(p.nodes.size()) +
             (p.nodes.size() == 1 ? " is" : " are") + " free";
      return {};
    }
    return p;
  }
};

// ---- Helpers for the tree-aware policies
// ---------------------------------------------------------

// Takes `need` nodes from `leaves` (in the order given), leaf by leaf.
void TakeFrom(const Eligible& e, const std::vector<int>& leaves, int need, Placement* p) {
  for (int l : leaves) {
    for (int n : e.by_leaf[l]) {
      if (need == 0) return;
      p->nodes.push_back(n);
      --need;
    }
  }
}

// ---- slurm-tree ---------------------------------------------------------------------------------

class SlurmTree final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "slurm-tree"; }
  Placement Place(const JobRequest& job, const ClusterState& state,
                  std::string* why) const override {
    if (!job.Gang()) return PlaceSubNode(job, state, /*best_fit=*/true, why);
    const Topology& topo = state.topology();
    Eligible e = FindEligible(state, job.gpus_per_node);
    if (!EnoughNodes(job, e, why)) return {};
    // The lowest switch that fits: a leaf, then a zone's spine, then the whole cluster.
    int best_leaf = -1;
    for (std::size_t l = 0; l < topo.leaves().size(); ++l) {
      int have = static_cast<int>(e.by_leaf[l].size());
      if (have >= job.nodes &&
          (best_leaf < 0 || have < static_cast<int>(e.by_leaf[best_leaf].size()))) {
        best_leaf = static_cast<int>(l);
      }
    }
    Placement p{{}, job.gpus_per_node};
    if (best_leaf >= 0) {
      TakeFrom(e, {best_leaf}, job.nodes, &p);
      return p;
    }
    int best_zone = -1, best_zone_free = std::numeric_limits<int>::max();
    for (std::size_t z = 0; z < topo.zones().size(); ++z) {
      int free = ZoneEligible(topo, e, static_cast<int>(z));
      if (free >= job.nodes && free < best_zone_free) {
        best_zone = static_cast<int>(z);
        best_zone_free = free;
      }
    }
    std::vector<int> leaves;
    if (best_zone >= 0) {
      const Zone& zone = topo.zones()[best_zone];
      for (int l = zone.first_leaf; l < zone.first_leaf + zone.num_leaves; ++l)
        leaves.push_back(l);
    } else {
      for (std::size_t l = 0; l < topo.leaves().size(); ++l)
        leaves.push_back(static_cast<int>(l));
    }
    // Best fit under that switch: while no single leaf covers the rest, take the fullest leaf;
    // then the leaf that covers the rest most tightly.
    int need = job.nodes;
    std::vector<bool> used(topo.leaves().size(), false);
    while (need > 0) {
      int pick = -1;
      for (int l : leaves) {
        int have = static_cast<int>(e.by_leaf[l].size());
        if (used[l] || have == 0) continue;
        if (have >= need) {
          if (pick < 0 || static_cast<int>(e.by_leaf[pick].size()) < need ||
              have < static_cast<int>(e.by_leaf[pick].size())) {
            pick = l;
          }
        } else if (pick < 0 || (static_cast<int>(e.by_leaf[pick].size()) < need &&
                                have > static_cast<int>(e.by_leaf[pick].size()))) {
          pick = l;
        }
      }
      used[pick] = true;
      int take = std::min(need, static_cast<int>(e.by_leaf[pick].size()));
      TakeFrom(e, {pick}, take, &p);
      need -= take;
    }
    return p;
  }

 private:
  static int ZoneEligible(const Topology& topo, const Eligible& e, int z) {
    const Zone& zone = topo.zones()[z];
    int free = 0;
    for (int l = zone.first_leaf; l < zone.first_leaf + zone.num_leaves; ++l) {
      free += static_cast<int>(e.by_leaf[l].size());
    }
    return free;
  }
};

// ---- congestion-aware ---------------------------------------------------------------------------

class CongestionAware final : public PlacementPolicy {
 public:
  explicit CongestionAware(const PolicyOptions& options) : options_(options) {}
  std::string_view name() const override { return "congestion-aware"; }
  Seconds MaxLocalityWait(const JobRequest& job) const override {
    bool talks = job.comm != CommKind::kNone && job.traffic_gbps > 0;
    return job.Gang() && job.nodes > 1 && talks ? options_.locality_wait : 0;
  }
  LocalityBudget LocalityWait(const JobRequest& job, const ClusterState& state,
                              const Placement& spread, Seconds now, int queued) const override {
    const Seconds cap = MaxLocalityWait(job);
    if (cap <= 0) return {};
    const SpreadLoss loss =
        SpreadCost(state, job, spread, now, options_.model, options_.assumed_runtime);
    // The run time lost, and under load the capacity: GPU time lost to congestion is GPU time
    // the queued jobs wait for, each about lost GPU-seconds / the cluster's GPUs longer.
    const double cost = loss.seconds + static_cast<double>(queued) * loss.gpu_seconds /
                                           std::max(1, state.topology().total_gpus());
    // And a job submitted long ago may wait a share of that time for a leaf: its completion
    // comes that share later at most, where spread it would slow the uplinks' jobs for as long
    // as it runs.
    const double share = options_.locality_wait_share *
                         static_cast<double>(std::max<Seconds>(0, now - job.submit_time));
    LocalityBudget budget;
    budget.spread_cost = static_cast<Seconds>(std::ceil(cost));
    budget.from_share = share > cost;
    budget.wait =
        static_cast<Seconds>(std::min(static_cast<double>(cap), std::ceil(std::max(cost, share))));
    return budget;
  }
  Placement Place(const JobRequest& job, const ClusterState& state,
                  std::string* why) const override {
    // Sub-node jobs best fit, as slurm-tree does: the node with the least room that fits, so
    // whole nodes stay free for gangs. Under EASY backfill it is at least as good for mean JCT
    // as first fit on every held-out trace (scheduler/README.md, "How congestion-aware wins").
    if (!job.Gang()) return PlaceSubNode(job, state, /*best_fit=*/true, why);
    const Topology& topo = state.topology();
    Eligible e = FindEligible(state, job.gpus_per_node);
    if (!EnoughNodes(job, e, why)) return {};
    // Candidate scopes: each zone; the whole cluster too when the job may span zones.
    Candidate best;
    int largest_zone_set = 0;
    std::string largest_zone;
    for (std::size_t z = 0; z < topo.zones().size(); ++z) {
      const Zone& zone = topo.zones()[z];
      std::vector<int> leaves;
      int free = 0;
      for (int l = zone.first_leaf; l < zone.first_leaf + zone.num_leaves; ++l) {
        leaves.push_back(l);
        free += static_cast<int>(e.by_leaf[l].size());
      }
      if (free > largest_zone_set) {
        largest_zone_set = free;
        largest_zone = zone.name;
      }
      Consider(job, state, e, leaves, &best);
    }
    if (best.placement.empty() && !ZoneBound(job)) {
      std::vector<int> all(topo.leaves().size());
      for (std::size_t l = 0; l < all.size(); ++l)
        all[l] = static_cast<int>(l);
      Consider(job, state, e, all, &best);
    }
    if (best.placement.empty()) {
      *why = GangNeed(job) + " in one zone; the largest such set is " +
             std::to_string(largest_zone_set) + " node" + (largest_zone_set == 1 ? "" : "s") +
             " (zone " + largest_zone +
             "). An allreduce job stays in one zone because the links "
             "between zones are few and shared; submit it with --may-span-zones to let it span";
    }
    return best.placement;
  }

 private:
  struct Candidate {
    Placement placement;
    int leaves = std::numeric_limits<int>::max();
    double load = std::numeric_limits<double>::max();  // busiest chosen uplink
    int leftover = std::numeric_limits<int>::max();    // free nodes left in the chosen leaves
  };

  // Chooses leaves among `scope` for the job and keeps the result if it beats `best`:
  // fewer leaves, then less loaded uplinks, then the tighter fit.
  static void Consider(const JobRequest& job, const ClusterState& state, const Eligible& e,
                       const std::vector<int>& scope, Candidate* best) {
    int available = 0;
    for (int l : scope)
      available += static_cast<int>(e.by_leaf[l].size());
    if (available < job.nodes) return;
    // Leaves ordered by free nodes (most first), then by uplink load (least first).
    std::vector<int> order;
    for (int l : scope) {
      if (!e.by_leaf[l].empty()) order.push_back(l);
    }
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      int fa = static_cast<int>(e.by_leaf[a].size()), fb = static_cast<int>(e.by_leaf[b].size());
      if (fa != fb) return fa > fb;
      if (state.leaf_uplink_load(a) != state.leaf_uplink_load(b)) {
        return state.leaf_uplink_load(a) < state.leaf_uplink_load(b);
      }
      return a < b;
    });
    // The fewest leaves that can hold the job: the k fullest.
    int k = 0, covered = 0;
    while (covered < job.nodes)
      covered += static_cast<int>(e.by_leaf[order[k++]].size());
    // With k leaves, the last one need only hold the remainder: pick, among all leaves not in the
    // first k - 1, the one that holds the remainder with the least uplink load, then tightest.
    std::vector<int> chosen(order.begin(), order.begin() + (k - 1));
    int rest = job.nodes;
    for (int l : chosen)
      rest -= static_cast<int>(e.by_leaf[l].size());
    int last = -1;
    for (std::size_t i = k - 1; i < order.size(); ++i) {
      int l = order[i];
      int have = static_cast<int>(e.by_leaf[l].size());
      if (have < rest) continue;
      if (last < 0) {
        last = l;
        continue;
      }
      // A single-leaf job adds no uplink traffic: fit decides. Otherwise load first.
      double la = state.leaf_uplink_load(l), lb = state.leaf_uplink_load(last);
      int ha = have, hb = static_cast<int>(e.by_leaf[last].size());
      bool better =
          k == 1 ? (ha < hb || (ha == hb && la < lb)) : (la < lb || (la == lb && ha < hb));
      if (better) last = l;
    }
    chosen.push_back(last);
    double load = 0;
    int leftover = 0;
    for (int l : chosen) {
      load = std::max(load, state.leaf_uplink_load(l));
      leftover += static_cast<int>(e.by_leaf[l].size());
    }
    leftover -= job.nodes;
    int leaves = static_cast<int>(chosen.size());
    if (leaves > best->leaves) return;
    if (leaves == best->leaves) {
      // One leaf adds no uplink traffic: the tighter fit wins (whole leaves stay free), then the
      // quieter leaf. Several leaves: the quieter uplinks win, then the tighter fit.
      bool worse =
          leaves == 1
              ? (leftover > best->leftover || (leftover == best->leftover && load >= best->load))
              : (load > best->load || (load == best->load && leftover >= best->leftover));
      if (worse) return;
    }
    // Ranks leaf by leaf (contiguous rank blocks per leaf keep tree neighbours together); the
    // partly used leaf last.
    Placement p{{}, job.gpus_per_node};
    TakeFrom(e, chosen, job.nodes, &p);
    *best = Candidate{std::move(p), leaves, load, leftover};
  }

  PolicyOptions options_;
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakePlacementPolicy(std::string_view name,
                                                     const PolicyOptions& options) {
  if (name == "first-fit") return std::make_unique<FirstFit>();
  if (name == "slurm-tree") return std::make_unique<SlurmTree>();
  if (name == "congestion-aware") return std::make_unique<CongestionAware>(options);
  return nullptr;
}

std::vector<std::string> PlacementPolicyNames() {
  return {"first-fit", "slurm-tree", "congestion-aware"};
}

}  // namespace ff::scheduler
