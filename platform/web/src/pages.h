// hai-web's pages: pure functions from what hai-server and fs3-mgmtd answered to HTML. No I/O
// here (web_server.cc fetches, these render), so every page is unit-tested from protos
// (tests/platform/platform_web_pages_test.cc). Every text that came from outside is escaped.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fs3/proto/mgmtd.pb.h"
#include "platform/proto/hai.pb.h"

namespace ff::platform::web {

// Text as HTML (&, <, >, " and ').
std::string Escape(std::string_view text);

// A page's own part; Layout wraps it with the navigation.
struct Page {
  int status = 200;
  std::string title;
  std::string body;
};

// The whole document: the page inside the navigation bar, which names the user.
std::string Layout(const Page& page, const hai::User& user);
// The login form (a user's token); `error` is shown above it when not empty.
std::string LoginPage(std::string_view error);

// "/": the jobs `hai ls --finished` lists for this user (every user's for an admin asking for
// them), waiting and running first, each with its state, nodes and why it waits.
Page JobsPage(const std::vector<hai::Job>& jobs, bool all_users, bool admin, int64_t now_ms);
// "/jobs/ID": one job: spec, state, why it waits and its history, every run (nodes, exit codes,
// how it ended), rank 0's log tail and a plot of each training metric rank 0 reported
// (hai_job.report), loss first. `metrics` is null when they could not be read (`metrics_error`).
// A running job that records its steps also gets a "Steps" section (`steps`, hai top's view:
// the finding now and each rank's last steps) with a plot of one rank's step time and phases
// (`step_records`, that rank's step records: the straggler's, else rank 0's).
Page JobPage(const hai::Job& job, std::string_view log_tail, const hai::JobMetrics* metrics,
             std::string_view metrics_error, int64_t now_ms, const hai::JobSteps* steps = nullptr,
             const hai::JobMetrics* step_records = nullptr);
// "/nodes": nodes drawn by zone and leaf switch, with state, health, drain and what runs where;
// jobs in `visible` link to their pages, the others are counted, not named.
Page NodesPage(const std::vector<hai::Node>& nodes, const std::set<int64_t>& visible,
               int64_t now_ms);
// "/fs3": chains (head first) and targets with their states. `error` when fs3-mgmtd did not
// answer or is not configured.
Page Fs3Page(const fs3rpc::RoutingInfo* routing, std::string_view error);
Page ErrorPage(int status, std::string_view message);

// A metric's series as an inline SVG line plot ("" without points).
std::string MetricSvg(std::string_view name, const std::vector<std::pair<int64_t, double>>& points);
// Several named series on one plot (polylines of classes "curve s0", "curve s1", ...; a legend
// when more than one); "" without points.
std::string SeriesSvg(
    std::string_view title,
    const std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>& series);

}  // namespace ff::platform::web
