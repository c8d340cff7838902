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
// how it ended), rank 0's log tail and, when the log reports one, its loss curve.
Page JobPage(const hai::Job& job, std::string_view log_tail,
             const std::vector<std::pair<int64_t, double>>& loss, int64_t now_ms);
// "/nodes": nodes drawn by zone and leaf switch, with state, health, drain and what runs where;
// jobs in `visible` link to their pages, the others are counted, not named.
Page NodesPage(const std::vector<hai::Node>& nodes, const std::set<int64_t>& visible,
               int64_t now_ms);
// "/fs3": chains (head first) and targets with their states. `error` when fs3-mgmtd did not
// answer or is not configured.
Page Fs3Page(const fs3rpc::RoutingInfo* routing, std::string_view error);
Page ErrorPage(int status, std::string_view message);

// The loss curve a job reports: every line of its log that reads "step N ... loss X" (what
// haiscale's train_gpt.py prints) or "epoch N ... loss X" (hai-demo-train), in order. At most
// `max_points`, evenly thinned when there are more (the last point always kept).
class LossCurveParser {
 public:
  explicit LossCurveParser(size_t max_points = 2000) : max_points_(max_points) {}
  // Feeds log bytes (any split: a line broken across calls is joined).
  void Feed(std::string_view data);
  // The points so far (the last unfinished line included).
  std::vector<std::pair<int64_t, double>> Points() const;

 private:
  void Line(std::string_view line);
  size_t max_points_;
  std::string partial_;
  std::vector<std::pair<int64_t, double>> points_;
  size_t stride_ = 1;  // keep every stride_-th point seen
  size_t seen_ = 0;
  std::pair<int64_t, double> last_{-1, 0.0};
};

// The loss curve as an inline SVG line plot ("" without points).
std::string LossSvg(const std::vector<std::pair<int64_t, double>>& points);

}  // namespace ff::platform::web
