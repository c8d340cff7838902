// Traffic classes: the one mapping's defaults, its [traffic] config section (bad values are
// clear errors), and marking sockets. The marks on the wire of the daemons' and HFReduce's own
// connections are checked by tests/deploy/netlab_marks_test.py on the network lab.
#include "common/traffic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/config.h"

namespace ff {
namespace {

struct Config {
  TrafficOptions traffic;
  void Bind(ConfigSection& s) { s.Section("traffic", traffic); }
};

TEST(TrafficTest, DefaultsAreTheDocumentedMapping) {
  TrafficOptions t;
  EXPECT_EQ(t.Dscp(TrafficClass::kHfreduce), 34);
  EXPECT_EQ(t.Dscp(TrafficClass::kNccl), 26);
  EXPECT_EQ(t.Dscp(TrafficClass::kStorage), 18);
  EXPECT_EQ(t.Dscp(TrafficClass::kOther), 0);
  EXPECT_EQ(t.ServiceLevel(TrafficClass::kHfreduce), 1);
  EXPECT_EQ(t.ServiceLevel(TrafficClass::kOther), 0);
  EXPECT_EQ(TrafficClassName(TrafficClass::kStorage), "storage");
}

TEST(TrafficTest, ConfigOverridesAClassAndRejectsBadValues) {
  auto c = LoadConfigString<Config>("[traffic]\nstorage_dscp = 10\nhfreduce_sl = 5\n", "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->traffic.Dscp(TrafficClass::kStorage), 10);
  EXPECT_EQ(c->traffic.ServiceLevel(TrafficClass::kHfreduce), 5);
  EXPECT_EQ(c->traffic.Dscp(TrafficClass::kHfreduce), 34);  // the others keep the defaults

  auto bad = LoadConfigString<Config>("[traffic]\nstorage_dscp = 64\n", "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), testing::HasSubstr("traffic.storage_dscp"));
  EXPECT_THAT(bad.status().message(), testing::HasSubstr("0..63"));
  auto sl = LoadConfigString<Config>("[traffic]\nother_sl = 16\n", "t.toml");
  ASSERT_FALSE(sl.ok());
  EXPECT_THAT(sl.status().message(), testing::HasSubstr("traffic.other_sl"));
  auto typo = LoadConfigString<Config>("[traffic]\nstorage = 18\n", "t.toml");
  EXPECT_FALSE(typo.ok()) << "an unknown key must not be ignored";
}

TEST(TrafficTest, MarksIpv4AndIpv6Sockets) {
  int v4 = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(v4, 0);
  ASSERT_TRUE(MarkSocket(v4, 34).ok());
  EXPECT_EQ(*SocketDscp(v4), 34);
  ASSERT_TRUE(MarkSocket(v4, 0).ok());
  EXPECT_EQ(*SocketDscp(v4), 0);
  Status bad = MarkSocket(v4, 64);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*SocketDscp(v4), 0) << "a rejected mark changes nothing";
  close(v4);

  int v6 = socket(AF_INET6, SOCK_STREAM, 0);
  if (v6 >= 0) {  // a kernel without IPv6 has nothing to mark
    ASSERT_TRUE(MarkSocket(v6, 18).ok());
    EXPECT_EQ(*SocketDscp(v6), 18);
    close(v6);
  }
  int unix_fd = socket(AF_UNIX, SOCK_STREAM, 0);
  EXPECT_TRUE(MarkSocket(unix_fd, 18).ok()) << "sockets without a DSCP are left alone";
  close(unix_fd);
}

TEST(TrafficTest, ProcessMappingIsWhatTheDaemonInstalled) {
  const TrafficOptions before = ProcessTraffic();
  TrafficOptions mine;
  mine.storage_dscp = 12;
  SetProcessTraffic(mine);
  EXPECT_EQ(ProcessTraffic().Dscp(TrafficClass::kStorage), 12);
  SetProcessTraffic(before);
  EXPECT_EQ(ProcessTraffic().Dscp(TrafficClass::kStorage), 18);
}

}  // namespace
}  // namespace ff
