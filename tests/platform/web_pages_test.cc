// hai-web's pages from protos: what a user is shown, escaped, grouped and plotted.
#include <gtest/gtest.h>

#include <cmath>

#include "pages.h"

namespace ff::platform::web {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

hai::Job MakeJob(int64_t id, hai::JobState state, const std::string& name) {
  hai::Job j;
  j.set_id(id);
  j.set_user("alice");
  j.set_state(state);
  j.mutable_spec()->set_name(name);
  j.mutable_spec()->set_command("python train.py");
  j.mutable_spec()->set_nodes(2);
  j.mutable_spec()->set_gpus_per_node(8);
  j.set_submit_ms(1'000'000);
  return j;
}

TEST(WebPagesTest, EscapesEverythingThatCameFromOutside) {
  EXPECT_EQ(Escape(R"(<a href="x">'&'</a>)"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  hai::Job j = MakeJob(7, hai::QUEUED, "<script>alert(1)</script>");
  j.set_pending_reason("needs <2> nodes & a leaf");
  Page p = JobsPage({j}, false, false, 2'000'000);
  EXPECT_EQ(p.body.find("<script>"), std::string::npos);
  EXPECT_NE(p.body.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(p.body.find("needs &lt;2&gt; nodes &amp; a leaf"), std::string::npos);
  Page jp = JobPage(j, "loss <nan> & \"quotes\"\n", nullptr, "", 2'000'000);
  EXPECT_NE(jp.body.find("loss &lt;nan&gt; &amp; &quot;quotes&quot;"), std::string::npos);
  hai::User u;
  u.set_name("<bob>");
  EXPECT_EQ(Layout(jp, u).find("<bob>"), std::string::npos);
  EXPECT_EQ(LoginPage("<b>").find("<b>"), std::string::npos);
}

TEST(WebPagesTest, JobsPageSplitsActiveFromEndedNewestFirstWithWhereOrWhy) {
  hai::Job queued = MakeJob(3, hai::QUEUED, "waits");
  queued.set_pending_reason("waiting for 2 free nodes");
  hai::Job running = MakeJob(5, hai::RUNNING, "runs");
  auto* run = running.add_runs();
  run->add_nodes("A-leaf-n00");
  run->add_nodes("A-leaf-n01");
  hai::Job done = MakeJob(4, hai::SUCCEEDED, "done");
  done.set_message("every rank exited 0");
  Page p = JobsPage({queued, done, running}, false, false, 2'000'000);
  const size_t active = p.body.find("id=\"active\""), ended = p.body.find("id=\"ended\"");
  ASSERT_NE(active, std::string::npos);
  ASSERT_NE(ended, std::string::npos);
  const size_t j5 = p.body.find("data-job=\"5\""), j3 = p.body.find("data-job=\"3\""),
               j4 = p.body.find("data-job=\"4\"");
  EXPECT_TRUE(active < j5 && j5 < j3 && j3 < ended && ended < j4) << p.body;
  EXPECT_NE(p.body.find("waiting for 2 free nodes"), std::string::npos);
  EXPECT_NE(p.body.find("A-leaf-n00, A-leaf-n01"), std::string::npos);
  EXPECT_NE(p.body.find("every rank exited 0"), std::string::npos);
  EXPECT_NE(p.body.find("data-state=\"RUNNING\""), std::string::npos);
  EXPECT_NE(p.body.find("<a href=\"/jobs/5\">5</a>"), std::string::npos);
  // The admin's switch is offered to admins only.
  EXPECT_EQ(p.body.find("?all=1"), std::string::npos);
  EXPECT_NE(JobsPage({}, false, true, 0).body.find("?all=1"), std::string::npos);
}

TEST(WebPagesTest, JobPageShowsRunsExitCodesHistoryLogAndLoss) {
  hai::Job j = MakeJob(9, hai::FAILED, "train");
  j.set_message("rank 1 exited 3");
  auto* h = j.add_pending_history();
  h->set_time_ms(1'000'000);
  h->set_reason("waiting for the leaf");
  auto* r = j.add_runs();
  r->set_index(0);
  r->add_nodes("n1");
  r->set_start_ms(1'100'000);
  r->set_end_ms(1'160'000);
  (*r->mutable_exit_codes())[1] = 3;
  (*r->mutable_exit_codes())[0] = 143;
  r->set_end(hai::RUN_RANK_FAILED);
  r->set_end_reason("rank 1 exited 3");
  hai::JobMetrics m;
  m.set_reported(2);
  for (auto [step, loss] : {std::pair<int64_t, double>{1, 2.0}, {2, 1.5}}) {
    auto* rec = m.add_records();
    rec->set_step(step);
    (*rec->mutable_values())["loss"] = loss;
  }
  Page p = JobPage(j, "step 1 loss 2.0\n", &m, "", 2'000'000);
  EXPECT_NE(p.body.find("0: 143, 1: 3"), std::string::npos) << p.body;  // by rank
  EXPECT_NE(p.body.find("waiting for the leaf"), std::string::npos);
  EXPECT_NE(p.body.find("<pre id=\"log\">step 1 loss 2.0"), std::string::npos);
  EXPECT_NE(p.body.find("<svg"), std::string::npos);
  EXPECT_NE(p.body.find("id=\"metric-loss\""), std::string::npos);
  EXPECT_NE(p.body.find("loss: 2 points, step 1 to 2, last 1.5"), std::string::npos);
  EXPECT_NE(p.body.find("<td>60 s</td>"), std::string::npos);  // how long the run ran
  Page none = JobPage(MakeJob(10, hai::QUEUED, "q"), "", nullptr, "", 0);
  EXPECT_NE(none.body.find("not started"), std::string::npos);
  EXPECT_EQ(none.body.find("<svg"), std::string::npos);
}

TEST(WebPagesTest, AFaultTolerantJobShowsItsGroupsAndWhatHappenedToThem) {
  hai::Job j = MakeJob(11, hai::RUNNING, "ft");
  j.mutable_spec()->set_nodes(1);
  j.mutable_spec()->set_procs_per_node(2);
  j.mutable_spec()->set_replicas(2);
  j.mutable_spec()->set_min_replicas(1);
  auto* r = j.add_runs();
  r->set_start_ms(1'100'000);
  for (const char* n : {"n0", "n1", "n2"})
    r->add_nodes(n);
  auto* g0 = r->add_groups();
  g0->set_replica(0);
  g0->set_master_addr("10.0.0.1");
  g0->set_master_port(29500);
  auto* lost = r->add_groups();
  lost->set_replica(1);
  lost->set_first_node(1);
  lost->set_end_ms(1'150'000);
  lost->set_end_reason("node n1 lost");
  auto* again = r->add_groups();
  again->set_replica(1);
  again->set_incarnation(1);
  again->set_first_node(2);
  auto* e = r->add_events();
  e->set_time_ms(1'160'000);
  e->set_text("quorum: group 1.1 joined the quorum at step 57, taking group 0's state");
  Page p = JobPage(j, "", nullptr, "", 2'000'000);
  EXPECT_NE(p.body.find("2 replica groups of that shape, starting and going on with 1 or more"),
            std::string::npos);
  EXPECT_NE(p.body.find("id=\"groups\""), std::string::npos);
  EXPECT_NE(p.body.find("lost: node n1 lost"), std::string::npos) << p.body;
  EXPECT_NE(p.body.find("1 (replacement 1)</td><td>4–5</td><td>n2</td>"), std::string::npos)
      << p.body;
  EXPECT_NE(p.body.find("group 1.1 joined the quorum at step 57, taking group 0&#39;s state"),
            std::string::npos);
  // The jobs page lists the nodes it holds now, not the lost group's.
  Page list = JobsPage({j}, false, false, 2'000'000);
  EXPECT_NE(list.body.find("<td>n0, n2</td>"), std::string::npos) << list.body;
}

TEST(WebPagesTest, NodesAreDrawnByZoneAndLeafAndOthersJobsAreOnlyCounted) {
  std::vector<hai::Node> nodes;
  auto add = [&](const char* name, const char* zone, const char* leaf, std::vector<int64_t> jobs) {
    hai::Node n;
    n.set_name(name);
    n.set_zone(zone);
    n.set_leaf(leaf);
    n.set_gpus(8);
    n.set_state(hai::NODE_UP);
    for (int64_t id : jobs)
      n.add_jobs(id);
    nodes.push_back(n);
  };
  add("A1-n0", "A", "A1", {5});
  add("B1-n0", "B", "B1", {77, 78});
  add("A1-n1", "A", "A1", {});
  add("A2-n0", "A", "A2", {});
  nodes[3].set_drained(true);
  nodes[3].set_drained_by("hai-health");
  nodes[3].set_drain_reason("gpus: 7 GPUs");
  auto* c = nodes[3].add_health();
  c->set_name("gpus");
  c->set_ok(false);
  c->set_message("7 GPUs");
  nodes[3].set_health_report_ms(1000);
  nodes[2].set_suspect(true);
  nodes[2].set_suspect_reason("named the straggler 3 times in 3600 s <last by job 5>");
  Page p = NodesPage(nodes, {5}, 2000);
  EXPECT_EQ(Count(p.body, "class=\"zone\""), 2u);
  EXPECT_EQ(Count(p.body, "class=\"leaf\""), 3u);
  const size_t a = p.body.find("data-zone=\"A\""), a1 = p.body.find("data-leaf=\"A1\""),
               n0 = p.body.find("data-node=\"A1-n0\""), n1 = p.body.find("data-node=\"A1-n1\""),
               a2 = p.body.find("data-leaf=\"A2\""), b = p.body.find("data-zone=\"B\"");
  EXPECT_TRUE(a < a1 && a1 < n0 && n0 < n1 && n1 < a2 && a2 < b) << p.body;
  EXPECT_NE(p.body.find("<a href=\"/jobs/5\">5</a>"), std::string::npos);
  EXPECT_EQ(p.body.find("77"), std::string::npos);  // another user's job: counted, not named
  EXPECT_NE(p.body.find("2 other users' jobs"), std::string::npos);
  EXPECT_NE(p.body.find("drained by hai-health: gpus: 7 GPUs"), std::string::npos);
  EXPECT_NE(p.body.find("1 failing"), std::string::npos);
  EXPECT_NE(p.body.find("4 nodes: 4 up, 1 drained."), std::string::npos);
  EXPECT_NE(p.body.find("suspect (a straggler): named the straggler 3 times in 3600 s &lt;last by "
                        "job 5&gt;"),
            std::string::npos);
}

TEST(WebPagesTest, Fs3PageListsChainsHeadFirstAndSaysWhyWhenUnreachable) {
  fs3rpc::RoutingInfo r;
  r.set_initialized(true);
  r.set_version(12);
  r.set_replication(2);
  r.set_chunk_size(1 << 20);
  auto* ch = r.add_chains();
  ch->set_id(1);
  ch->set_version(3);
  for (auto [id, state] : {std::pair<uint64_t, const char*>{102, "serving"}, {101, "syncing"}}) {
    auto* ct = ch->add_targets();
    ct->set_target(id);
    ct->set_state(state);
    auto* t = r.add_targets();
    t->set_id(id);
    t->set_node("storage-" + std::to_string(id));
    t->set_chain(1);
    t->set_public_state(state);
    t->set_local_state("online");
  }
  Page p = Fs3Page(&r, "");
  const size_t head = p.body.find("data-target=\"102\""), tail = p.body.find("data-target=\"101\"");
  EXPECT_TRUE(head != std::string::npos && head < tail);
  EXPECT_NE(p.body.find("102 on storage-102"), std::string::npos);
  EXPECT_NE(p.body.find("1 chains of 2"), std::string::npos);
  Page down = Fs3Page(nullptr, "fs3-mgmtd at 127.0.0.1:1 did not answer");
  EXPECT_NE(down.body.find("did not answer"), std::string::npos);
  EXPECT_EQ(ErrorPage(404, "You have no job 3.").status, 404);
}

TEST(WebPagesTest, EachReportedMetricIsPlottedLossFirstAndNotFiniteValuesLeftOut) {
  hai::JobMetrics m;
  m.set_reported(40);
  m.set_unreadable(3);
  m.add_unreachable("n7");
  for (int step = 10; step <= 40; step += 10) {
    auto* rec = m.add_records();
    rec->set_step(step);
    (*rec->mutable_values())["tokens_per_s"] = 1000.0 * step;
    (*rec->mutable_values())["loss"] = step == 30 ? std::nan("") : 10.0 / step;
  }
  Page p = JobPage(MakeJob(12, hai::RUNNING, "t"), "", &m, "", 2'000'000);
  const size_t loss = p.body.find("id=\"metric-loss\""),
               tps = p.body.find("id=\"metric-tokens_per_s\"");
  ASSERT_NE(loss, std::string::npos) << p.body;
  ASSERT_NE(tps, std::string::npos);
  EXPECT_LT(loss, tps);
  EXPECT_NE(p.body.find("loss: 3 points, step 10 to 40"), std::string::npos) << p.body;
  EXPECT_NE(p.body.find("40 reports, step 10 to 40; 3 unreadable lines skipped; node n7 did not "
                        "answer"),
            std::string::npos);
  // The metrics could not be read: the page says so, and still renders the rest.
  Page failed = JobPage(MakeJob(12, hai::RUNNING, "t"), "hello", nullptr, "<agent down>", 0);
  EXPECT_NE(failed.body.find("could not be read: &lt;agent down&gt;"), std::string::npos);
  EXPECT_NE(failed.body.find("hello"), std::string::npos);
  // Nothing reported: no section at all.
  hai::JobMetrics empty;
  EXPECT_EQ(JobPage(MakeJob(12, hai::RUNNING, "t"), "", &empty, "", 0).body.find("metrics"),
            std::string::npos);
  EXPECT_EQ(MetricSvg("loss", {}), "");
  EXPECT_NE(MetricSvg("loss", {{1, 2.0}}).find("<polyline"), std::string::npos);
}

TEST(WebPages, ARunningJobsStepsShowTheFindingEachRankAndAPlotOfThePhases) {
  hai::JobSteps steps;
  steps.set_job_id(12);
  steps.set_step_s(0.2);
  steps.set_baseline_s(0.05);
  for (int rank = 0; rank < 2; ++rank) {
    hai::StepSummary* r = steps.add_ranks();
    r->set_rank(rank);
    r->set_node(rank == 0 ? "n<0>" : "n1");
    r->set_last_step(99);
    r->set_step_s(0.2);
    r->set_comm_s(rank == 1 ? 0.01 : 0.16);
    r->set_compute_s(rank == 1 ? 0.19 : 0.04);
    r->set_collectives(2);
  }
  steps.mutable_finding()->set_cause(hai::SLOW_COMPUTE);
  steps.mutable_finding()->set_rank(1);
  steps.mutable_finding()->set_text("since 10:00:00 UTC steps are 4.0x slower: compute on n1 & co");
  hai::JobMetrics records;
  records.set_reported(100);
  for (int step = 1; step <= 100; step += 33) {
    auto* rec = records.add_records();
    rec->set_step(step);
    (*rec->mutable_values())["step_s"] = 0.05 * step;
    (*rec->mutable_values())["compute_s"] = 0.04 * step;
    (*rec->mutable_values())["data_s"] = 0;  // never above 0: not plotted
  }
  Page p = JobPage(MakeJob(12, hai::RUNNING, "t"), "", nullptr, "", 0, &steps, &records);
  EXPECT_NE(p.body.find("0.20 s a step over 2 ranks, 4.00× its best this run (50.0 ms)"),
            std::string::npos)
      << p.body;
  EXPECT_NE(p.body.find("id=\"step-finding\" class=\"error\">since 10:00:00 UTC steps are 4.0x "
                        "slower: compute on n1 &amp; co"),
            std::string::npos);
  EXPECT_NE(p.body.find("<td>n&lt;0&gt;</td>"), std::string::npos);
  EXPECT_NE(p.body.find("0.0 ms (arrives last)"), std::string::npos);  // rank 1 waits 0
  EXPECT_NE(p.body.find("<td>0.15 s</td>"), std::string::npos);        // rank 0 waits 0.15 s
  const size_t plot = p.body.find("id=\"step-plot\"");
  ASSERT_NE(plot, std::string::npos);
  EXPECT_NE(p.body.find("<title>step_s</title>", plot), std::string::npos);
  EXPECT_NE(p.body.find("<title>compute_s</title>", plot), std::string::npos);
  EXPECT_EQ(p.body.find("<title>data_s</title>", plot), std::string::npos);
  EXPECT_NE(p.body.find("rank 1 (the latest): seconds a step, 4 of 100 steps"), std::string::npos);
  // Nothing found: said so. Nothing recorded: no section.
  steps.mutable_finding()->set_cause(hai::SLOW_NONE);
  steps.mutable_finding()->set_rank(-1);
  EXPECT_NE(JobPage(MakeJob(12, hai::RUNNING, "t"), "", nullptr, "", 0, &steps, nullptr)
                .body.find("No rank makes the others wait now."),
            std::string::npos);
  hai::JobSteps none;
  EXPECT_EQ(JobPage(MakeJob(12, hai::RUNNING, "t"), "", nullptr, "", 0, &none, nullptr)
                .body.find("id=\"steps\""),
            std::string::npos);
}

}  // namespace
}  // namespace ff::platform::web
