#include "platform/step_detector.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "platform/lifecycle.h"
#include "platform/names.h"

namespace ff::platform {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// What is compared: a node's ranks (a job on several nodes) or one rank (a job on one node).
struct Unit {
  std::string id;  // the node, or node#rank on one node
  std::string node;
  int rank = -1;  // its rank that arrives last (least comm_s), or its slowest one
  double comm = 0, compute = 0, data = 0, ckpt = 0;
  double Own() const { return compute + data + ckpt; }
};

std::vector<Unit> UnitsOf(const std::vector<const hai::StepSummary*>& ranks) {
  std::map<std::string, std::vector<const hai::StepSummary*>> by_node;
  for (const hai::StepSummary* r : ranks)
    by_node[r->node()].push_back(r);
  std::vector<Unit> units;
  if (by_node.size() >= 2) {
    for (const auto& [node, list] : by_node) {
      Unit u;
      u.id = node;
      u.node = node;
      std::vector<double> comm, compute, data, ckpt;
      const hai::StepSummary* late = list.front();
      for (const hai::StepSummary* r : list) {
        comm.push_back(r->comm_s());
        compute.push_back(r->compute_s());
        data.push_back(r->data_s());
        ckpt.push_back(r->ckpt_s());
        if (r->comm_s() < late->comm_s() ||
            (r->comm_s() == late->comm_s() &&
             r->compute_s() + r->data_s() + r->ckpt_s() >
                 late->compute_s() + late->data_s() + late->ckpt_s()))
          late = r;
      }
      u.rank = late->rank();
      u.comm = Median(comm);
      u.compute = Median(compute);
      u.data = Median(data);
      u.ckpt = Median(ckpt);
      units.push_back(u);
    }
  } else {
    for (const hai::StepSummary* r : ranks)
      units.push_back({r->node() + "#" + std::to_string(r->rank()), r->node(), r->rank(),
                       r->comm_s(), r->compute_s(), r->data_s(), r->ckpt_s()});
  }
  return units;
}

std::string Seconds(double s) {
  return StepSecondsText(s);
}

// A peer (a node's links, a storage target) that moves bytes slower than the others.
struct SlowPeer {
  std::string who;
  int rank = -1;      // the rank that reported most of its time
  double mine = 0;    // its seconds per byte
  double others = 0;  // the others' (median)
  double excess = 0;  // per step, the time beyond what the others' rate would take
};

// Network: each edge's seconds per byte (both ends' reports together); per node, its fastest
// edge's. With `ratios`, every node's over the others' median.
SlowPeer SlowLink(const std::vector<const hai::StepSummary*>& ranks, double min_bytes,
                  Waits* ratios) {
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> edges;
  std::map<std::string, int> leader;
  for (const hai::StepSummary* r : ranks) {
    for (const hai::PeerTime& p : r->links()) {
      if (p.peer() == r->node()) continue;
      auto key = std::minmax(r->node(), p.peer());
      auto& e = edges[{key.first, key.second}];
      e.first += p.bytes();
      e.second += p.move_s();
      leader[r->node()] = r->rank();
    }
  }
  std::map<std::string, double> best;  // s/byte of the node's fastest edge
  for (const auto& [ends, e] : edges) {
    if (e.first < min_bytes) continue;
    for (const std::string& n : {ends.first, ends.second}) {
      auto [it, fresh] = best.emplace(n, e.second / e.first);
      if (!fresh) it->second = std::min(it->second, e.second / e.first);
    }
  }
  SlowPeer out;
  if (best.size() < 3) return out;
  auto others_of = [&](const std::string& n) {
    std::vector<double> v;
    for (const auto& [m, rate] : best)
      if (m != n) v.push_back(rate);
    return Median(v);
  };
  for (const auto& [n, rate] : best) {
    const double others = others_of(n);
    if (ratios != nullptr && others > 0) (*ratios)["link:" + n] = rate / others;
    if (out.who.empty() || rate > out.mine) {
      out.who = n;
      out.mine = rate;
      out.others = others;
    }
  }
  out.rank = leader.contains(out.who) ? leader[out.who] : -1;
  for (const auto& [ends, e] : edges) {
    if (ends.first == out.who || ends.second == out.who)
      out.excess = std::max(out.excess, e.second - e.first * out.others);
  }
  return out;
}

// Storage: each target's seconds per byte over every rank's reads from it.
SlowPeer SlowTarget(const std::vector<const hai::StepSummary*>& ranks, double min_bytes,
                    Waits* ratios) {
  std::map<std::string, std::pair<double, double>> targets;
  std::map<std::string, std::pair<int, double>> reader;  // the rank with most time on it
  for (const hai::StepSummary* r : ranks) {
    for (const hai::PeerTime& p : r->reads()) {
      auto& t = targets[p.peer()];
      t.first += p.bytes();
      t.second += p.move_s();
      auto [it, fresh] = reader.emplace(p.peer(), std::make_pair(r->rank(), p.move_s()));
      if (!fresh && p.move_s() > it->second.second) it->second = {r->rank(), p.move_s()};
    }
  }
  std::erase_if(targets, [&](const auto& t) { return t.second.first < min_bytes; });
  SlowPeer out;
  if (targets.size() < 2) return out;
  for (const auto& [t, e] : targets) {
    std::vector<double> v;
    for (const auto& [u, f] : targets)
      if (u != t) v.push_back(f.second / f.first);
    const double others = Median(v);
    const double rate = e.second / e.first;
    if (ratios != nullptr && others > 0) (*ratios)["read:" + t] = rate / others;
    if (out.who.empty() || rate > out.mine) {
      out.who = t;
      out.mine = rate;
      out.others = others;
      out.excess = e.second - e.first * others;
    }
  }
  out.rank = reader[out.who].first;
  // Per step and rank: the reads of a batch run at once, so the most any one rank spends.
  out.excess /= static_cast<double>(std::max<std::size_t>(1, ranks.size()));
  return out;
}

// Whether `p` is slow enough to name: ratio beyond its usual one, and it costs enough a step.
bool Names(const SlowPeer& p, const std::string& key, double ratio, double floor_s,
           const Waits& usual) {
  if (p.who.empty() || p.others <= 0) return false;
  const auto u = usual.find(key + p.who);
  const double usual_ratio = u == usual.end() ? 1.0 : std::max(1.0, u->second);
  return p.mine / p.others >= ratio * usual_ratio && p.excess >= floor_s;
}

}  // namespace

hai::StepFinding Diagnose(const std::vector<hai::StepSummary>& summaries, double baseline_s,
                          const StepDetectorOptions& options, const Waits& usual_waits,
                          Waits* waits_out) {
  hai::StepFinding f;
  f.set_rank(-1);
  std::vector<const hai::StepSummary*> ranks;
  for (const hai::StepSummary& r : summaries)
    if (r.window() >= options.min_window) ranks.push_back(&r);
  if (ranks.empty()) return f;
  std::vector<double> steps, collectives;
  for (const hai::StepSummary* r : ranks) {
    steps.push_back(r->step_s());
    collectives.push_back(r->collectives());
  }
  const double step = Median(steps);
  const double slowdown = baseline_s > 0 ? step / baseline_s : 1.0;
  f.set_step_s(step);
  f.set_baseline_s(baseline_s);
  f.set_slowdown(slowdown);
  if (ranks.size() < 2 || step <= 0) return f;

  const double floor_s = std::max(options.min_wait_s, options.min_wait_share * step);
  Waits peer_ratios;
  const SlowPeer link = SlowLink(ranks, options.min_peer_bytes, &peer_ratios);
  const SlowPeer target = SlowTarget(ranks, options.min_peer_bytes, &peer_ratios);
  const bool slow_link = slowdown >= options.min_slowdown &&
                         Names(link, "link:", options.link_ratio, floor_s, usual_waits);
  std::vector<double> data_all;
  for (const hai::StepSummary* r : ranks)
    data_all.push_back(r->data_s());
  const bool slow_target =
      slowdown >= options.min_slowdown &&
      Names(target, "read:", options.read_ratio, options.min_wait_s, usual_waits) &&
      *std::max_element(data_all.begin(), data_all.end()) >= floor_s;
  auto name_peer = [&](hai::SlowCause cause, const SlowPeer& p) {
    f.set_cause(cause);
    f.set_rank(p.rank);
    f.set_wait_s(p.excess);
    f.set_usual_wait_s(0);
    f.set_phase_s(p.mine * 1e6);  // seconds per MB
    f.set_others_phase_s(p.others * 1e6);
    f.set_phase_ratio(p.mine / p.others);
    if (cause == hai::SLOW_NETWORK) {
      f.set_node(p.who);
    } else {
      f.clear_node();
      f.set_target(p.who);
    }
  };

  std::vector<Unit> units = UnitsOf(ranks);
  const bool by_comm = Median(collectives) > 0;
  // Lateness: how much the unit makes the others wait. By comm: the others' excess of time in
  // the collectives; without: its own phases' excess.
  auto key = [&](const Unit& u) { return by_comm ? -u.comm : u.Own(); };
  std::sort(units.begin(), units.end(),
            [&](const Unit& a, const Unit& b) { return key(a) > key(b); });
  const Unit& late = units[0];
  if (waits_out != nullptr) {
    waits_out->clear();
    for (const Unit& u : units) {
      std::vector<double> rest;
      for (const Unit& v : units)
        if (&v != &u) rest.push_back(key(v));
      (*waits_out)[u.id] = key(u) - Median(rest);
    }
    waits_out->insert(peer_ratios.begin(), peer_ratios.end());
  }
  std::vector<double> others_key, others_compute, others_data, others_ckpt;
  for (std::size_t i = 1; i < units.size(); ++i) {
    others_key.push_back(key(units[i]));
    others_compute.push_back(units[i].compute);
    others_data.push_back(units[i].data);
    others_ckpt.push_back(units[i].ckpt);
  }
  const double wait = key(late) - Median(others_key);
  const double next_gap = key(late) - key(units[1]);  // to the next latest
  const bool alone = next_gap >= 0.5 * wait;
  // What the others wait beyond what they usually wait for it (a heavier stage by design).
  const auto usual = usual_waits.find(late.id);
  const double usual_wait = usual == usual_waits.end() ? 0 : std::max(0.0, usual->second);
  const bool waits =
      wait - usual_wait >= std::max(options.min_wait_s, options.min_wait_share * step);
  const bool straggler = waits && alone && slowdown >= options.min_slowdown;
  if (straggler) {
    f.set_node(late.node);
    f.set_rank(late.rank);
    f.set_wait_s(wait);
    f.set_usual_wait_s(usual_wait);
    struct Phase {
      hai::SlowCause cause;
      double mine, others;
    };
    const Phase phases[] = {{hai::SLOW_COMPUTE, late.compute, Median(others_compute)},
                            {hai::SLOW_DATA, late.data, Median(others_data)},
                            {hai::SLOW_CHECKPOINT, late.ckpt, Median(others_ckpt)}};
    const Phase* worst = &phases[0];
    for (const Phase& p : phases)
      if (p.mine - p.others > worst->mine - worst->others) worst = &p;
    if (worst->mine - worst->others >= 0.5 * wait) {
      f.set_cause(worst->cause);
      f.set_phase_ratio(worst->others > 0 ? worst->mine / worst->others : 0);
    } else {
      f.set_cause(hai::SLOW_UNKNOWN);
    }
    const Phase& shown = f.cause() == hai::SLOW_UNKNOWN ? phases[0] : *worst;
    f.set_phase_s(shown.mine);
    f.set_others_phase_s(shown.others);
    // A late node no phase explains: its link, when the edges say so; a rank late for its data:
    // the storage target it reads from, when one is slower.
    if (f.cause() == hai::SLOW_UNKNOWN && slow_link) name_peer(hai::SLOW_NETWORK, link);
    if (f.cause() == hai::SLOW_DATA && slow_target) name_peer(hai::SLOW_STORAGE, target);
  } else if (slow_link) {
    name_peer(hai::SLOW_NETWORK, link);
  } else if (slow_target) {
    name_peer(hai::SLOW_STORAGE, target);
  } else if (!waits && slowdown >= options.job_slowdown) {
    // (Several nodes late together is neither one straggler nor every rank alike: not named.)
    f.set_cause(hai::SLOW_JOB);
  }
  if (f.cause() != hai::SLOW_NONE) f.set_text(DescribeFinding(f));
  return f;
}

void DropStaleRanks(std::map<int32_t, hai::StepSummary>& ranks, double stale_s) {
  double newest = 0;
  for (const auto& [rank, s] : ranks)
    newest = std::max(newest, s.last_time());
  std::erase_if(ranks, [&](const auto& r) { return r.second.last_time() < newest - stale_s; });
}

std::string DescribeFinding(const hai::StepFinding& f) {
  if (f.cause() == hai::SLOW_NONE) return "";
  if (f.cause() == hai::SLOW_JOB) {
    return fmt::format("every rank alike ({} a step, best {}): the job itself, not a straggler",
                       Seconds(f.step_s()), Seconds(f.baseline_s()));
  }
  auto per_mb = [](double s) { return StepSecondsText(s) + "/MB"; };
  if (f.cause() == hai::SLOW_NETWORK) {
    return fmt::format(
        "node {}'s links move bytes {:.1f}x slower than the other nodes' (its fastest tree edge "
        "{} vs {}), {} a step more on the wire: its network",
        f.node(), f.phase_ratio(), per_mb(f.phase_s()), per_mb(f.others_phase_s()),
        Seconds(f.wait_s()));
  }
  if (f.cause() == hai::SLOW_STORAGE) {
    return fmt::format(
        "storage target {} serves reads {:.1f}x slower than the others ({} vs {}){}: the ranks "
        "reading from it wait for their data: storage",
        f.target(), f.phase_ratio(), per_mb(f.phase_s()), per_mb(f.others_phase_s()),
        f.rank() >= 0 ? fmt::format(", rank {} most", f.rank()) : "");
  }
  std::string who = f.rank() >= 0 ? fmt::format("node {} (rank {})", f.node(), f.rank())
                                  : fmt::format("node {}", f.node());
  std::string line = fmt::format(
      "{} arrives last: the other ranks wait {} a step for it{}", who, Seconds(f.wait_s()),
      f.usual_wait_s() >= 0.1 * f.wait_s() ? fmt::format(" (usually {})", Seconds(f.usual_wait_s()))
                                           : "");
  const double mine = f.phase_s(), others = f.others_phase_s();
  auto ratio = [&](const char* phase) {
    return others > 0
               ? fmt::format("its {} is {:.1f}x the others' ({} vs {})", phase, mine / others,
                             Seconds(mine), Seconds(others))
               : fmt::format("its {} takes {} a step, the others' none", phase, Seconds(mine));
  };
  switch (f.cause()) {
    case hai::SLOW_COMPUTE:
      return line + "; " + ratio("compute phase") + ": compute on " + f.node();
    case hai::SLOW_DATA:
      return line + "; " + ratio("data loading") + ": data loading on " + f.node();
    case hai::SLOW_CHECKPOINT:
      return line + "; " + ratio("checkpoint writing") + ": checkpoint writes on " + f.node();
    default:
      return line + "; no phase it measures is longer (its network, or work outside the step)";
  }
}

bool StepTracker::Same(const hai::StepFinding& a, const hai::StepFinding& b) {
  return a.cause() == b.cause() && a.node() == b.node() && a.target() == b.target();
}

std::vector<StepTracker::Change> StepTracker::Update(const std::vector<hai::StepSummary>& ranks,
                                                     int64_t now_ms) {
  std::vector<Change> changes;
  int64_t progress = 0;
  bool full = !ranks.empty();
  for (const hai::StepSummary& r : ranks) {
    progress += r.recorded();
    full = full && r.window() >= 8;
  }
  if (progress == progress_) return changes;  // no new step since the last look
  progress_ = progress;

  Waits usual;
  for (const auto& [id, history] : waits_)
    usual[id] = Median(std::vector<double>(history.begin(), history.end()));
  Waits waits;
  hai::StepFinding f = Diagnose(ranks, baseline_s_, options_, usual, &waits);
  step_s_ = f.step_s();
  // The baseline: from full windows (the first steps of a run warm up) that found nothing.
  if (full && f.step_s() > 0 && f.cause() == hai::SLOW_NONE && current_.cause() == hai::SLOW_NONE) {
    healthy_.push_back(f.step_s());
    if (healthy_.size() > 120) healthy_.pop_front();
    std::vector<double> sorted(healthy_.begin(), healthy_.end());
    std::sort(sorted.begin(), sorted.end());
    baseline_s_ = sorted[static_cast<std::size_t>(options_.baseline_quantile *
                                                  static_cast<double>(sorted.size() - 1))];
    for (const auto& [id, wait] : waits) {
      std::deque<double>& history = waits_[id];
      history.push_back(wait);
      if (history.size() > 120) history.pop_front();
    }
  }

  const bool holds = current_.cause() != hai::SLOW_NONE;
  if (holds) {
    ++evaluations_;
    if (f.node() == current_.node() && f.target() == current_.target() &&
        (f.node() != "" || f.target() != ""))
      ++named_;
    if (Same(f, current_)) {
      clear_count_ = 0;
      // Figures follow the latest evaluation; cause, node and since stay.
      const int64_t since = current_.since_ms();
      const std::string text = current_.text();
      current_ = f;
      current_.set_since_ms(since);
      current_.set_text(text);
    } else if (++clear_count_ == 1) {
      clear_since_ms_ = now_ms;
    }
    if (clear_count_ >= options_.clear && now_ms - clear_since_ms_ >= options_.clear_ms) {
      hai::StepFinding ended = current_;
      ended.set_until_ms(now_ms);
      ended.set_late_share(evaluations_ > 0 ? static_cast<double>(named_) / evaluations_ : 0);
      past_.push_back(ended);
      if (past_.size() > 10) past_.pop_front();
      Change c;
      c.began = false;
      c.finding = ended;
      c.text = ended.cause() == hai::SLOW_JOB
                   ? fmt::format("steps back to {:.1f}x of the best ({} a step)", f.slowdown(),
                                 Seconds(f.step_s()))
                   : fmt::format(
                         "{} no longer makes the others wait (steps {:.1f}x of the best, {} a "
                         "step)",
                         ended.node().empty() ? "storage target " + ended.target()
                                              : "node " + ended.node(),
                         f.slowdown(), Seconds(f.step_s()));
      changes.push_back(c);
      current_ = hai::StepFinding();
      current_.set_rank(-1);
      clear_count_ = 0;
    }
    if (!current_.node().empty() || !current_.target().empty())
      current_.set_late_share(evaluations_ > 0 ? static_cast<double>(named_) / evaluations_ : 0);
    if (current_.cause() != hai::SLOW_NONE) return changes;
  }

  if (f.cause() == hai::SLOW_NONE) {
    candidate_count_ = 0;
    return changes;
  }
  if (candidate_count_ > 0 && Same(f, candidate_)) {
    ++candidate_count_;
    const int64_t since = candidate_.since_ms();
    candidate_ = f;
    candidate_.set_since_ms(since);
  } else {
    candidate_ = f;
    candidate_.set_since_ms(now_ms);
    candidate_count_ = 1;
  }
  const int64_t confirm_ms =
      f.cause() == hai::SLOW_JOB ? options_.job_confirm_ms : options_.confirm_ms;
  if (candidate_count_ >= options_.confirm && now_ms - candidate_.since_ms() >= confirm_ms) {
    current_ = candidate_;
    current_.set_text(fmt::format("since {} steps are {:.1f}x slower ({} a step, best {}): {}",
                                  UtcClock(current_.since_ms()), current_.slowdown(),
                                  Seconds(current_.step_s()), Seconds(current_.baseline_s()),
                                  DescribeFinding(current_)));
    evaluations_ = candidate_count_;
    const bool names = !current_.node().empty() || !current_.target().empty();
    named_ = names ? candidate_count_ : 0;
    current_.set_late_share(names ? 1.0 : 0);
    candidate_count_ = 0;
    clear_count_ = 0;
    changes.push_back({true, current_, current_.text()});
  }
  return changes;
}

}  // namespace ff::platform
