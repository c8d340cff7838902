#include "pages.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>

#include "platform/job_metrics.h"
#include "platform/names.h"
#include "platform/runs.h"

namespace ff::platform::web {
namespace {

std::string Clock(int64_t ms) {
  if (ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return std::string(buf) + " UTC";
}

std::string Duration(int64_t ms) {
  if (ms < 0) ms = 0;
  int64_t s = ms / 1000;
  if (s < 120) return std::to_string(s) + " s";
  if (s < 7200) return std::to_string(s / 60) + " min";
  if (s < 172800) return std::to_string(s / 3600) + " h " + std::to_string(s / 60 % 60) + " min";
  return std::to_string(s / 86400) + " d " + std::to_string(s / 3600 % 24) + " h";
}

std::string Ago(int64_t ms, int64_t now_ms) {
  return ms <= 0 ? "never" : Duration(now_ms - ms) + " ago";
}

bool Waiting(hai::JobState s) {
  return s == hai::QUEUED || s == hai::SUSPENDED;
}
bool Ended(hai::JobState s) {
  return s == hai::SUCCEEDED || s == hai::FAILED || s == hai::STOPPED;
}

// A state as a labelled badge (its class colours it).
std::string Badge(std::string_view text, std::string_view kind) {
  return "<span class=\"badge " + std::string(kind) + "\">" + Escape(text) + "</span>";
}

std::string JobBadge(hai::JobState s) {
  std::string kind = s == hai::RUNNING     ? "ok"
                     : s == hai::SUCCEEDED ? "done"
                     : s == hai::FAILED    ? "bad"
                     : Waiting(s)          ? "wait"
                                           : "other";
  return "<span class=\"badge " + kind + "\" data-state=\"" + hai::JobState_Name(s) + "\">" +
         Escape(StateName(s)) + "</span>";
}

std::string JobLink(int64_t id) {
  std::string n = std::to_string(id);
  return "<a href=\"/jobs/" + n + "\">" + n + "</a>";
}

template <typename Strings>  // a repeated proto field or a vector
std::string Join(const Strings& items) {
  std::string out;
  for (const auto& s : items)
    out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string Command(const hai::JobSpec& spec) {
  return "<code>" + Escape(spec.command()) + "</code>";
}

}  // namespace

std::string Escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

static std::string Document(std::string_view title, std::string_view nav, std::string_view body) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
         "<title>" +
         Escape(title) +
         " · hai</title>"
         "<link rel=\"stylesheet\" href=\"/static/style.css\"></head><body>" +
         std::string(nav) + "<main>" + std::string(body) + "</main></body></html>\n";
}

std::string Layout(const Page& page, const hai::User& user) {
  std::string nav =
      "<nav><span class=\"brand\">HAI-Platform</span>"
      "<a href=\"/\">Jobs</a><a href=\"/nodes\">Nodes</a><a href=\"/fs3\">fs3</a>"
      "<span class=\"user\" id=\"user\">" +
      Escape(user.name()) + (user.admin() ? " (admin)" : "") +
      "</span><a href=\"/logout\" id=\"logout\">Log out</a></nav>";
  return Document(page.title, nav, "<h1>" + Escape(page.title) + "</h1>" + page.body);
}

std::string LoginPage(std::string_view error) {
  std::string body =
      "<h1>Log in</h1><p>With your hai token: the one <code>hai admin user add</code> printed "
      "for you, also in <code>~/.hai/config.toml</code>.</p>";
  if (!error.empty()) body += "<p class=\"error\" id=\"error\">" + Escape(error) + "</p>";
  body +=
      "<form method=\"post\" action=\"/login\"><label for=\"token\">Token</label> "
      "<input type=\"password\" id=\"token\" name=\"token\" autocomplete=\"off\" size=\"72\"> "
      "<button type=\"submit\" id=\"login\">Log in</button></form>";
  return Document("Log in", "<nav><span class=\"brand\">HAI-Platform</span></nav>", body);
}

Page JobsPage(const std::vector<hai::Job>& jobs, bool all_users, bool admin, int64_t now_ms) {
  Page p;
  p.title = all_users ? "Every user's jobs" : "Your jobs";
  std::vector<const hai::Job*> active, ended;
  for (const auto& j : jobs)
    (Ended(j.state()) ? ended : active).push_back(&j);
  auto newest_first = [](const hai::Job* a, const hai::Job* b) { return a->id() > b->id(); };
  std::sort(active.begin(), active.end(), newest_first);
  std::sort(ended.begin(), ended.end(), newest_first);
  if (admin) {
    p.body += all_users ? "<p><a href=\"/\">Only yours</a></p>"
                        : "<p><a href=\"/?all=1\">Every user's jobs</a></p>";
  }
  auto table = [&](const std::vector<const hai::Job*>& list, std::string_view id,
                   std::string_view empty) {
    if (list.empty()) return "<p class=\"empty\">" + std::string(empty) + "</p>";
    std::string t = "<table id=\"" + std::string(id) +
                    "\"><thead><tr><th>ID</th><th>Name</th><th>User</th><th>State</th>"
                    "<th>Nodes</th><th>Priority</th><th>Submitted</th><th>Where / why</th>"
                    "</tr></thead><tbody>";
    for (const hai::Job* j : list) {
      std::string where;
      if (Waiting(j->state())) {
        where = Escape(j->pending_reason());
      } else if (j->state() == hai::RUNNING && j->runs_size() > 0) {
        where = Escape(Join(HeldNodes(*j)));
      } else {
        where = Escape(j->message());
      }
      t += "<tr data-job=\"" + std::to_string(j->id()) + "\"><td>" + JobLink(j->id()) +
           "</td><td>" + Escape(j->spec().name()) + "</td><td>" + Escape(j->user()) + "</td><td>" +
           JobBadge(j->state()) + "</td><td>" + std::to_string(NodesAsked(j->spec())) + " × " +
           std::to_string(j->spec().gpus_per_node()) + " GPU</td><td>" +
           std::to_string(j->spec().priority()) + "</td><td>" + Ago(j->submit_ms(), now_ms) +
           "</td><td>" + where + "</td></tr>";
    }
    return t + "</tbody></table>";
  };
  p.body += "<h2>Waiting and running</h2>" + table(active, "active", "None.");
  p.body += "<h2>Ended</h2>" + table(ended, "ended", "None.");
  return p;
}

namespace {

// Rank 0's training metrics: a plot of each (loss first, at most kMaxPlots), with its last value.
std::string MetricsSection(const hai::JobMetrics* metrics, std::string_view error) {
  constexpr size_t kMaxPlots = 6;
  if (metrics == nullptr) {
    if (error.empty()) return "";
    return "<h2>Training metrics</h2><p class=\"error\" id=\"metrics\">The metrics could not "
           "be read: " +
           Escape(error) + "</p>";
  }
  if (metrics->reported() == 0 && metrics->unreachable().empty()) return "";
  std::vector<hai::MetricRecord> records(metrics->records().begin(), metrics->records().end());
  std::string out = "<h2>Training metrics (rank 0)</h2><div id=\"metrics\"><p>" +
                    std::to_string(metrics->reported()) + " reports";
  if (!records.empty()) {
    out += ", step " + std::to_string(records.front().step()) + " to " +
           std::to_string(records.back().step());
  }
  if (metrics->unreadable() > 0)
    out += "; " + std::to_string(metrics->unreadable()) + " unreadable lines skipped";
  for (const auto& node : metrics->unreachable())
    out += "; node " + Escape(node) + " did not answer (its reports are missing)";
  out += "</p>";
  const std::vector<std::string> names = MetricNames(records);
  for (size_t i = 0; i < names.size() && i < kMaxPlots; ++i) {
    const auto points = MetricSeries(records, names[i]);
    if (points.empty()) continue;
    char last[32];
    std::snprintf(last, sizeof last, "%.6g", points.back().second);
    out += "<figure class=\"metric\" id=\"metric-" + Escape(names[i]) + "\">" +
           MetricSvg(names[i], points) + "<figcaption>" + Escape(names[i]) + ": " +
           std::to_string(points.size()) + " points, step " + std::to_string(points.front().first) +
           " to " + std::to_string(points.back().first) + ", last " + last +
           "</figcaption></figure>";
  }
  if (names.size() > kMaxPlots) {
    out += "<p>Not plotted here (<code>hai metrics</code> has them): ";
    for (size_t i = kMaxPlots; i < names.size(); ++i)
      out += (i > kMaxPlots ? ", " : "") + Escape(names[i]);
    out += "</p>";
  }
  return out + "</div>";
}

// A running job's steps (hai top's view): why they are slow now, each rank's last steps with the
// one the others wait for marked, and one rank's step time and phases over the run.
std::string StepsSection(const hai::JobSteps* steps, const hai::JobMetrics* records) {
  if (steps == nullptr || steps->ranks().empty()) return "";
  std::string out = "<h2>Steps</h2><div id=\"steps\"><p id=\"step-summary\">" +
                    StepSecondsText(steps->step_s()) + " a step over " +
                    std::to_string(steps->ranks_size()) + " ranks";
  if (steps->baseline_s() > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ", %.2f× its best this run (",
                  steps->step_s() / steps->baseline_s());
    out += buf + StepSecondsText(steps->baseline_s()) + ")";
  }
  out += "</p>";
  const hai::StepFinding& f = steps->finding();
  if (f.cause() != hai::SLOW_NONE) {
    out += "<p id=\"step-finding\" class=\"error\">" + Escape(f.text()) + "</p>";
  } else {
    out += "<p id=\"step-finding\" class=\"empty\">No rank makes the others wait now.</p>";
  }
  double least = -1;
  int last = -1;
  for (const hai::StepSummary& r : steps->ranks()) {
    if (r.collectives() > 0 && (least < 0 || r.comm_s() < least)) {
      least = r.comm_s();
      last = r.rank();
    }
  }
  out +=
      "<table id=\"step-ranks\"><thead><tr><th>Node</th><th>Rank</th><th>Step</th>"
      "<th>Step time</th><th>Compute</th><th>In collectives</th><th>Waiting</th><th>Data</th>"
      "<th>Checkpoint</th></tr></thead><tbody>";
  for (const hai::StepSummary& r : steps->ranks()) {
    const bool late = r.rank() == last && steps->ranks_size() > 1;
    out += std::string("<tr") + (late ? " class=\"wait\"" : "") + "><td>" + Escape(r.node()) +
           "</td><td>" + std::to_string(r.rank()) + "</td><td>" + std::to_string(r.last_step()) +
           "</td><td>" + StepSecondsText(r.step_s()) + "</td><td>" +
           StepSecondsText(r.compute_s()) + "</td><td>" + StepSecondsText(r.comm_s()) +
           "</td><td>" + (least >= 0 ? StepSecondsText(r.comm_s() - least) : "-") +
           (late ? " (arrives last)" : "") + "</td><td>" + StepSecondsText(r.data_s()) +
           "</td><td>" + StepSecondsText(r.ckpt_s()) + "</td></tr>";
  }
  out += "</tbody></table>";
  if (records != nullptr && !records->records().empty()) {
    std::vector<hai::MetricRecord> rs(records->records().begin(), records->records().end());
    std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> series;
    for (const char* name : {"step_s", "compute_s", "comm_s", "data_s", "ckpt_s"}) {
      auto points = MetricSeries(rs, name);
      bool any = false;
      for (const auto& [x, y] : points)
        any = any || y > 0;
      if (any || std::string(name) == "step_s") series.emplace_back(name, std::move(points));
    }
    const int rank = f.cause() != hai::SLOW_NONE && f.rank() >= 0 ? f.rank() : 0;
    out += "<figure class=\"metric\" id=\"step-plot\">" +
           SeriesSvg("rank " + std::to_string(rank) + "'s step time and its phases", series) +
           "<figcaption>rank " + std::to_string(rank) + (rank == f.rank() ? " (the latest)" : "") +
           ": seconds a step, " + std::to_string(rs.size()) + " of " +
           std::to_string(records->reported()) + " steps</figcaption></figure>";
  }
  return out + "</div>";
}

}  // namespace

Page JobPage(const hai::Job& job, std::string_view log_tail, const hai::JobMetrics* metrics,
             std::string_view metrics_error, int64_t now_ms, const hai::JobSteps* steps,
             const hai::JobMetrics* step_records) {
  Page p;
  p.title = "Job " + std::to_string(job.id()) + ": " + job.spec().name();
  const hai::JobSpec& s = job.spec();
  auto row = [](std::string_view k, const std::string& v) {
    return "<tr><th>" + std::string(k) + "</th><td>" + v + "</td></tr>";
  };
  std::string t = "<table class=\"facts\" id=\"facts\">";
  t += row("State", JobBadge(job.state()) +
                        (job.stop_requested() && !Ended(job.state()) ? " (stop requested)" : ""));
  t += row("User", Escape(job.user()));
  t += row("Command", Command(s));
  t += row("Shape", std::to_string(s.nodes()) + " node(s) × " + std::to_string(s.gpus_per_node()) +
                        " GPU, " + std::to_string(std::max(1, s.procs_per_node())) +
                        " process(es) per node");
  if (s.replicas() > 0) {
    t += row("Fault tolerance", std::to_string(s.replicas()) +
                                    " replica groups of that shape, starting and going on "
                                    "with " +
                                    std::to_string(MinReplicas(s)) + " or more");
  }
  t += row("Priority", std::to_string(s.priority()));
  t += row("Submitted", Clock(job.submit_ms()) + " (" + Ago(job.submit_ms(), now_ms) + ")");
  if (job.end_ms() > 0) t += row("Ended", Clock(job.end_ms()));
  if (Waiting(job.state()) && !job.pending_reason().empty()) {
    t += row("Waits because", "<span id=\"pending\">" + Escape(job.pending_reason()) + "</span>");
  }
  if (job.preempted_by() != 0) {
    t += row("Suspended for", "job " + std::to_string(job.preempted_by()) + " (priority " +
                                  std::to_string(job.preempted_by_priority()) + ") at " +
                                  Clock(job.preempted_at_ms()));
  }
  if (!job.message().empty()) t += row("Outcome", Escape(job.message()));
  p.body += t + "</table>";

  if (job.pending_history_size() > 0) {
    p.body +=
        "<h2>Reason history</h2><table id=\"history\"><thead><tr><th>Since</th>"
        "<th>Reason</th></tr></thead><tbody>";
    for (const auto& e : job.pending_history()) {
      p.body += "<tr><td>" + Clock(e.time_ms()) + "</td><td>" + Escape(e.reason()) + "</td></tr>";
    }
    p.body += "</tbody></table>";
  }

  p.body += "<h2>Runs</h2>";
  if (job.runs_size() == 0) {
    p.body += "<p class=\"empty\">It has not started yet.</p>";
  } else {
    p.body +=
        "<table id=\"runs\"><thead><tr><th>Run</th><th>Started</th><th>Ran</th>"
        "<th>Nodes</th><th>GPUs</th><th>Exit codes (rank: code)</th><th>End</th></tr>"
        "</thead><tbody>";
    for (const auto& r : job.runs()) {
      std::map<int32_t, int32_t> codes(r.exit_codes().begin(), r.exit_codes().end());
      std::string exits;
      for (auto [rank, code] : codes) {
        exits += (exits.empty() ? "" : ", ") + std::to_string(rank) + ": " + std::to_string(code);
      }
      std::string gpus;
      for (const auto& g : r.gpus())
        gpus += (gpus.empty() ? "" : " | ") + g;
      std::string end = r.end_ms() == 0 ? "running" : Escape(r.end_reason());
      if (r.end_ms() != 0 && r.end_reason().empty()) end = RunEndName(r.end());
      p.body += "<tr><td>" + std::to_string(r.index()) + "</td><td>" + Clock(r.start_ms()) +
                "</td><td>" + Duration((r.end_ms() ? r.end_ms() : now_ms) - r.start_ms()) +
                "</td><td>" + Escape(Join(r.nodes())) + "</td><td>" + Escape(gpus) + "</td><td>" +
                (exits.empty() ? "-" : exits) + "</td><td>" + end + "</td></tr>";
    }
    p.body += "</tbody></table>";
    const hai::Run& last = job.runs(job.runs_size() - 1);
    if (last.groups_size() > 0) {
      const int procs = std::max(1, s.procs_per_node());
      p.body += "<h2>Replica groups (run " + std::to_string(last.index()) +
                ")</h2><table id=\"groups\"><thead><tr><th>Replica</th><th>Ranks</th><th>Nodes</th>"
                "<th>Master</th><th>Started</th><th>State</th></tr></thead><tbody>";
      for (const hai::ReplicaGroup& g : last.groups()) {
        std::vector<std::string> nodes;
        for (int i = g.first_node(); i < g.first_node() + s.nodes() && i < last.nodes_size(); ++i)
          nodes.push_back(last.nodes(i));
        const GroupState gs = StateOf(g);
        const std::string state = gs == GroupState::kRunning    ? "running"
                                  : gs == GroupState::kFinished ? "finished"
                                                                : "lost: " + Escape(g.end_reason());
        p.body += "<tr><td>" + std::to_string(g.replica()) +
                  (g.incarnation() > 0 ? " (replacement " + std::to_string(g.incarnation()) + ")"
                                       : std::string()) +
                  "</td><td>" + std::to_string(g.first_node() * procs) + "–" +
                  std::to_string((g.first_node() + s.nodes()) * procs - 1) + "</td><td>" +
                  Escape(Join(nodes)) + "</td><td>" + Escape(g.master_addr()) + ":" +
                  std::to_string(g.master_port()) + "</td><td>" + Clock(g.start_ms()) +
                  "</td><td>" + state + "</td></tr>";
      }
      p.body += "</tbody></table>";
    }
    if (last.events_size() > 0) {
      p.body +=
          "<h2>What happened (run " + std::to_string(last.index()) +
          ")</h2><table id=\"events\"><thead><tr><th>When</th><th>What</th></tr></thead><tbody>";
      for (const hai::RunEvent& e : last.events())
        p.body += "<tr><td>" + Clock(e.time_ms()) + "</td><td>" + Escape(e.text()) + "</td></tr>";
      p.body += "</tbody></table>";
    }
  }

  p.body += StepsSection(steps, step_records);
  p.body += MetricsSection(metrics, metrics_error);
  p.body += "<h2>Rank 0's log (the end)</h2>";
  if (log_tail.empty()) {
    p.body += "<p class=\"empty\" id=\"log\">No output yet.</p>";
  } else {
    p.body += "<pre id=\"log\">" + Escape(log_tail) + "</pre>";
  }
  return p;
}

Page NodesPage(const std::vector<hai::Node>& nodes, const std::set<int64_t>& visible,
               int64_t now_ms) {
  Page p;
  p.title = "Nodes";
  // zone -> leaf -> nodes, in the order hai-server lists them (cluster.toml's).
  std::vector<
      std::pair<std::string, std::vector<std::pair<std::string, std::vector<const hai::Node*>>>>>
      zones;
  for (const auto& n : nodes) {
    auto z = std::find_if(zones.begin(), zones.end(), [&](auto& e) { return e.first == n.zone(); });
    if (z == zones.end()) z = zones.insert(zones.end(), {n.zone(), {}});
    auto l = std::find_if(z->second.begin(), z->second.end(),
                          [&](auto& e) { return e.first == n.leaf(); });
    if (l == z->second.end()) l = z->second.insert(z->second.end(), {n.leaf(), {}});
    l->second.push_back(&n);
  }
  int up = 0, drained = 0;
  for (const auto& n : nodes) {
    up += n.state() == hai::NODE_UP;
    drained += n.drained();
  }
  p.body += "<p id=\"summary\">" + std::to_string(nodes.size()) + " nodes: " + std::to_string(up) +
            " up, " + std::to_string(drained) + " drained.</p>";
  for (const auto& [zone, leaves] : zones) {
    p.body += "<section class=\"zone\" data-zone=\"" + Escape(zone) + "\"><h2>Zone " +
              Escape(zone) + "</h2>";
    for (const auto& [leaf, members] : leaves) {
      p.body += "<div class=\"leaf\" data-leaf=\"" + Escape(leaf) + "\"><h3>Leaf switch " +
                Escape(leaf) + "</h3><div class=\"nodes\">";
      for (const hai::Node* n : members) {
        std::string kind = n->state() != hai::NODE_UP ? "bad" : n->drained() ? "wait" : "ok";
        p.body += "<div class=\"node " + kind + "\" data-node=\"" + Escape(n->name()) +
                  "\"><div class=\"name\">" + Escape(n->name()) + "</div><div>" +
                  Badge(NodeStateName(n->state()), kind) + " " + std::to_string(n->gpus()) +
                  " GPU</div>";
        if (n->drained()) {
          p.body += "<div class=\"drain\">drained by " + Escape(n->drained_by()) + ": " +
                    Escape(n->drain_reason()) + "</div>";
        } else if (n->suspect()) {
          p.body +=
              "<div class=\"suspect error\">suspect (a straggler): " + Escape(n->suspect_reason()) +
              "</div>";
        }
        std::string mine;
        int others = 0;
        for (int64_t id : n->jobs()) {
          if (visible.count(id)) {
            mine += (mine.empty() ? "" : " ") + JobLink(id);
          } else {
            ++others;
          }
        }
        if (!mine.empty()) p.body += "<div class=\"jobs\">jobs " + mine + "</div>";
        if (others > 0) {
          p.body += "<div class=\"others\">" + std::to_string(others) + " other user" +
                    (others == 1 ? "'s job" : "s' jobs") + "</div>";
        }
        int failing = 0;
        std::string failed;
        for (const auto& c : n->health()) {
          if (!c.ok()) {
            ++failing;
            failed += "<li>" + Escape(c.name()) + ": " + Escape(c.message()) + "</li>";
          }
        }
        if (n->health_report_ms() > 0) {
          p.body += "<div class=\"health\">health: " +
                    (failing ? std::to_string(failing) + " failing" : std::string("ok")) + " (" +
                    Ago(n->health_report_ms(), now_ms) + ")</div>";
          if (failing) p.body += "<ul class=\"failed\">" + failed + "</ul>";
        }
        p.body +=
            "<div class=\"seen\">heartbeat " + Ago(n->last_heartbeat_ms(), now_ms) + "</div></div>";
      }
      p.body += "</div></div>";
    }
    p.body += "</section>";
  }
  return p;
}

Page Fs3Page(const fs3rpc::RoutingInfo* routing, std::string_view error) {
  Page p;
  p.title = "fs3 chains and targets";
  if (routing == nullptr) {
    p.body = "<p class=\"error\" id=\"fs3-error\">" + Escape(error) + "</p>";
    return p;
  }
  if (!routing->initialized()) {
    p.body = "<p class=\"empty\">fs3 is not initialised yet (<code>fs3 init</code>).</p>";
    return p;
  }
  p.body += "<p id=\"fs3-summary\">Routing version " + std::to_string(routing->version()) + ": " +
            std::to_string(routing->chains_size()) + " chains of " +
            std::to_string(routing->replication()) + ", chunk size " +
            std::to_string(routing->chunk_size()) + " bytes.</p>";
  std::map<uint64_t, const fs3rpc::TargetInfo*> targets;
  for (const auto& t : routing->targets())
    targets[t.id()] = &t;
  auto state_kind = [](std::string_view s) {
    return s == "serving" || s == "up-to-date" || s == "up"    ? "ok"
           : s == "syncing" || s == "waiting" || s == "online" ? "wait"
                                                               : "bad";
  };
  p.body +=
      "<h2>Chains (head first)</h2><table id=\"chains\"><thead><tr><th>Chain</th>"
      "<th>Version</th><th>Targets</th></tr></thead><tbody>";
  for (const auto& c : routing->chains()) {
    std::string ts;
    for (const auto& ct : c.targets()) {
      auto it = targets.find(ct.target());
      std::string where = it == targets.end() ? "" : " on " + it->second->node();
      ts += "<span class=\"target\" data-target=\"" + std::to_string(ct.target()) + "\">" +
            std::to_string(ct.target()) + Escape(where) + " " +
            Badge(ct.state(), state_kind(ct.state())) + "</span> ";
    }
    p.body += "<tr data-chain=\"" + std::to_string(c.id()) + "\"><td>" + std::to_string(c.id()) +
              "</td><td>" + std::to_string(c.version()) + "</td><td>" + ts + "</td></tr>";
  }
  p.body +=
      "</tbody></table><h2>Storage services</h2><table id=\"fs3-nodes\"><thead><tr>"
      "<th>Service</th><th>Address</th><th>State</th><th>Targets</th></tr></thead><tbody>";
  for (const auto& n : routing->nodes()) {
    std::string ts;
    for (uint64_t t : n.targets())
      ts += (ts.empty() ? "" : ", ") + std::to_string(t);
    p.body += "<tr><td>" + Escape(n.name()) + "</td><td>" + Escape(n.address()) + "</td><td>" +
              Badge(n.state(), state_kind(n.state())) + "</td><td>" + ts + "</td></tr>";
  }
  p.body +=
      "</tbody></table><h2>Targets</h2><table id=\"targets\"><thead><tr><th>Target</th>"
      "<th>Service</th><th>Chain</th><th>Public</th><th>Local</th><th>Path</th></tr>"
      "</thead><tbody>";
  for (const auto& t : routing->targets()) {
    p.body +=
        "<tr><td>" + std::to_string(t.id()) + "</td><td>" + Escape(t.node()) + "</td><td>" +
        (t.chain() ? std::to_string(t.chain()) : "-") + "</td><td>" +
        (t.public_state().empty() ? "-" : Badge(t.public_state(), state_kind(t.public_state()))) +
        "</td><td>" + Badge(t.local_state(), state_kind(t.local_state())) + "</td><td>" +
        Escape(t.path()) + (t.admin_offline() ? " (taken offline)" : "") + "</td></tr>";
  }
  p.body += "</tbody></table>";
  return p;
}

Page ErrorPage(int status, std::string_view message) {
  Page p;
  p.status = status;
  p.title = status == 404 ? "Not found" : "Error";
  p.body = "<p class=\"error\" id=\"error\">" + Escape(message) + "</p>";
  return p;
}

std::string MetricSvg(std::string_view name,
                      const std::vector<std::pair<int64_t, double>>& points) {
  return SeriesSvg(name, {{std::string(name), points}});
}

std::string SeriesSvg(
    std::string_view title,
    const std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>& series) {
  bool any = false;
  int64_t x0 = 0, x1 = 0;
  double y0 = 0, y1 = 0;
  for (const auto& [name, points] : series) {
    for (auto [x, y] : points) {
      if (!any) {
        x0 = x1 = x;
        y0 = y1 = y;
        any = true;
      }
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (!any) return "";
  constexpr double kW = 640, kH = 280, kLeft = 60, kRight = 16, kTop = 12, kBottom = 36;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 - y0 < 1e-9) {
    y0 -= 0.5;
    y1 += 0.5;
  }
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad;
  y1 += pad;
  auto px = [&](double x) { return kLeft + (x - x0) / double(x1 - x0) * (kW - kLeft - kRight); };
  auto py = [&](double y) { return kTop + (y1 - y) / (y1 - y0) * (kH - kTop - kBottom); };
  char buf[128];
  std::string svg =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 640 280\" "
      "width=\"640\" height=\"280\" role=\"img\" aria-label=\"" +
      Escape(title) +
      " by step\">"
      "<rect x=\"60\" y=\"12\" width=\"564\" height=\"232\" class=\"plot\"/>";
  for (int i = 0; i <= 4; ++i) {
    double y = y0 + (y1 - y0) * i / 4;
    std::snprintf(buf, sizeof buf, "<text x=\"54\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>",
                  py(y) + 4, y);
    svg += buf;
  }
  std::snprintf(buf, sizeof buf, "<text x=\"60\" y=\"262\">step %lld</text>",
                static_cast<long long>(x0));
  svg += buf;
  std::snprintf(buf, sizeof buf, "<text x=\"624\" y=\"262\" text-anchor=\"end\">step %lld</text>",
                static_cast<long long>(x1));
  svg += buf;
  for (std::size_t i = 0; i < series.size(); ++i) {
    std::string path;
    for (auto [x, y] : series[i].second) {
      std::snprintf(buf, sizeof buf, "%s%.1f,%.1f", path.empty() ? "" : " ", px(double(x)), py(y));
      path += buf;
    }
    const std::string cls = "curve s" + std::to_string(i);
    svg += "<polyline class=\"" + cls + "\" fill=\"none\" points=\"" + path + "\"><title>" +
           Escape(series[i].first) + "</title></polyline>";
    if (series.size() > 1) {  // a legend: the series' names along the top
      std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"278\" class=\"%s\">",
                    kLeft + 110.0 * static_cast<double>(i), cls.c_str());
      svg += buf + Escape(series[i].first) + "</text>";
    }
  }
  return svg + "</svg>";
}

}  // namespace ff::platform::web
