// TCP transport: connections between node leaders over plain sockets (runs everywhere).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "common/result.h"
#include "transport/connection.h"

namespace ff::hfreduce {

class TcpListener {
 public:
  // Listens on `host` at a free port; accepted connections carry `dscp` (0..63, 0: unmarked).
  static Result<std::unique_ptr<TcpListener>> Listen(const std::string& host, int dscp);
  ~TcpListener();
  // "host:port" peers connect to.
  const std::string& address() const { return address_; }
  int dscp() const { return dscp_; }
  // Accepts one connection; kDeadlineExceeded when none arrives by `deadline`.
  Result<std::unique_ptr<Connection>> Accept(std::chrono::steady_clock::time_point deadline);
  // Makes a blocked Accept (another thread's) and every later one fail with kCancelled at once.
  void Shutdown();

 private:
  TcpListener(int fd, std::string address, int dscp)
      : fd_(fd), address_(std::move(address)), dscp_(dscp) {}
  int fd_;
  std::atomic<bool> shut_{false};
  std::string address_;
  int dscp_;
};

// Connects to `address` ("host:port"), retrying refused connections (the peer may not listen
// yet) until `deadline`. The connection carries `dscp` (0..63, 0: unmarked).
Result<std::unique_ptr<Connection>> TcpConnect(const std::string& address,
                                               std::chrono::steady_clock::time_point deadline,
                                               int dscp);

}  // namespace ff::hfreduce
