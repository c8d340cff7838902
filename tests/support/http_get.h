// A minimal blocking HTTP/1.0 GET over TCP, for tests that scrape /metrics like Prometheus does.
#pragma once

#include <string>

#include "common/result.h"

namespace ff::test {

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET http://<address><path>, address being "host:port" (IPv4 or [IPv6]). Times out after 5 s.
Result<HttpResponse> HttpGet(const std::string& address, const std::string& path);
// The value of the series `series` (a name with its labels, as /metrics prints it) on the
// /metrics page at `address`; kNotFound when the page has no such series.
Result<double> MetricValue(const std::string& address, const std::string& series);

}  // namespace ff::test
