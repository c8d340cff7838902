#include "platform/step_detector.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <map>

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
  return a.cause() == b.cause() && a.node() == b.node();
}

namespace {

std::string UtcTime(int64_t ms) {
  std::time_t t = ms / 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return std::string(buf) + " UTC";
}

}  // namespace

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
    if (f.node() == current_.node() && f.node() != "") ++named_;
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
                         "node {} no longer makes the others wait (steps {:.1f}x of the "
                         "best, {} a step)",
                         ended.node(), f.slowdown(), Seconds(f.step_s()));
      changes.push_back(c);
      current_ = hai::StepFinding();
      current_.set_rank(-1);
      clear_count_ = 0;
    }
    if (!current_.node().empty())
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
                                  UtcTime(current_.since_ms()), current_.slowdown(),
                                  Seconds(current_.step_s()), Seconds(current_.baseline_s()),
                                  DescribeFinding(current_)));
    evaluations_ = candidate_count_;
    named_ = current_.node().empty() ? 0 : candidate_count_;
    current_.set_late_share(current_.node().empty() ? 0 : 1.0);
    candidate_count_ = 0;
    clear_count_ = 0;
    changes.push_back({true, current_, current_.text()});
  }
  return changes;
}

}  // namespace ff::platform
