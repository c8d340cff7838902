// The ibverbs transport (see verbs.h). Compiled only with FF_WITH_VERBS.
#include "transport/verbs.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/thread_annotations.h"

namespace ff::hfreduce {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSlots = 16;
constexpr std::size_t kSlotBytes = std::size_t{1} << 20;
constexpr uint8_t kPort = 1;

// What each side tells the other over the bootstrap connection.
struct Endpoint {
  uint32_t magic;
  uint16_t lid;
  uint16_t reserved;
  uint8_t gid[16];
  uint32_t qpn;
  uint32_t psn;
  uint64_t ring_addr;
  uint32_t ring_rkey;
  uint32_t credit_rkey;
  uint64_t credit_addr;
};
constexpr uint32_t kEndpointMagic = 0x48464942;  // "HFIB"

Status VerbsError(const std::string& what, int err) {
  return Unavailable("hfreduce: ibverbs " + what + ": " + std::strerror(err ? err : errno));
}

class VerbsConnection final : public Connection {
 public:
  explicit VerbsConnection(std::unique_ptr<Connection> bootstrap)
      : Connection(bootstrap->peer()), bootstrap_(std::move(bootstrap)) {}

  ~VerbsConnection() override {
    Shutdown();
    if (qp_) ibv_destroy_qp(qp_);
    for (ibv_mr* mr : {ring_mr_, staging_mr_, credit_mr_, consumed_mr_}) {
      if (mr) ibv_dereg_mr(mr);
    }
    if (send_cq_) ibv_destroy_cq(send_cq_);
    if (recv_cq_) ibv_destroy_cq(recv_cq_);
    if (pd_) ibv_dealloc_pd(pd_);
    if (ctx_) ibv_close_device(ctx_);
    for (auto& [p, n] :
         {std::pair{ring_, kSlots * kSlotBytes}, std::pair{staging_, kSlots * kSlotBytes}}) {
      if (p) munmap(p, n);
    }
  }

  // Creates the queue pair and buffers and sends our endpoint; never waits for the peer.
  Status Begin(const std::string& device_name, int service_level, int dscp) {
    service_level_ = service_level;
    dscp_ = dscp;
    int num = 0;
    ibv_device** list = ibv_get_device_list(&num);
    if (list == nullptr || num == 0) {
      if (list) ibv_free_device_list(list);
      return Unavailable("hfreduce: no RDMA device on this machine");
    }
    ibv_device* device = nullptr;
    for (int i = 0; i < num; ++i) {
      if (device_name.empty() || device_name == ibv_get_device_name(list[i])) device = list[i];
      if (device) break;
    }
    if (device == nullptr) {
      ibv_free_device_list(list);
      return Unavailable("hfreduce: no RDMA device named '" + device_name + "'");
    }
    ctx_ = ibv_open_device(device);
    ibv_free_device_list(list);
    if (ctx_ == nullptr) return VerbsError("open device", errno);
    ibv_port_attr port{};
    if (int rc = ibv_query_port(ctx_, kPort, &port); rc != 0) return VerbsError("query port", rc);
    mtu_ = port.active_mtu;
    ibv_gid gid{};
    int gid_index =
        std::getenv("HFREDUCE_IB_GID_INDEX") ? std::atoi(std::getenv("HFREDUCE_IB_GID_INDEX")) : 0;
    ibv_query_gid(ctx_, kPort, gid_index, &gid);
    gid_index_ = gid_index;

    pd_ = ibv_alloc_pd(ctx_);
    send_cq_ = ibv_create_cq(ctx_, 2 * kSlots + 4, nullptr, nullptr, 0);
    recv_cq_ = ibv_create_cq(ctx_, 2 * kSlots + 4, nullptr, nullptr, 0);
    if (!pd_ || !send_cq_ || !recv_cq_)
      return VerbsError("allocate protection domain / CQs", errno);

    ring_ = Allocate(kSlots * kSlotBytes);
    staging_ = Allocate(kSlots * kSlotBytes);
    if (!ring_ || !staging_) return VerbsError("allocate buffers", errno);
    ring_mr_ = ibv_reg_mr(pd_, ring_, kSlots * kSlotBytes,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    staging_mr_ = ibv_reg_mr(pd_, staging_, kSlots * kSlotBytes, IBV_ACCESS_LOCAL_WRITE);
    credit_mr_ = ibv_reg_mr(pd_, &remote_consumed_, sizeof remote_consumed_,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    consumed_mr_ = ibv_reg_mr(pd_, &consumed_word_, sizeof consumed_word_, IBV_ACCESS_LOCAL_WRITE);
    if (!ring_mr_ || !staging_mr_ || !credit_mr_ || !consumed_mr_) {
      return VerbsError("register memory", errno);
    }

    ibv_qp_init_attr init{};
    init.send_cq = send_cq_;
    init.recv_cq = recv_cq_;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 2 * kSlots + 4;
    init.cap.max_recv_wr = 2 * kSlots + 4;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp_ = ibv_create_qp(pd_, &init);
    if (qp_ == nullptr) return VerbsError("create queue pair", errno);

    Endpoint mine{};
    mine.magic = kEndpointMagic;
    mine.lid = port.lid;
    std::memcpy(mine.gid, gid.raw, 16);
    mine.qpn = qp_->qp_num;
    mine.psn = static_cast<uint32_t>(std::rand()) & 0xffffff;
    mine.ring_addr = reinterpret_cast<uint64_t>(ring_);
    mine.ring_rkey = ring_mr_->rkey;
    mine.credit_addr = reinterpret_cast<uint64_t>(&remote_consumed_);
    mine.credit_rkey = credit_mr_->rkey;
    my_psn_ = mine.psn;
    return bootstrap_->Send(&mine, sizeof mine);
  }

  // Reads the peer's endpoint (sent by its Begin) and brings the queue pair up. A write that
  // reaches the peer before it has posted its receives is retried by the hardware (RNR retry),
  // so no further handshake is needed.
  Status Finish() {
    FF_RETURN_IF_ERROR(bootstrap_->Recv(&theirs_, sizeof theirs_));
    if (theirs_.magic != kEndpointMagic) {
      return DataLoss("hfreduce: " + peer() + " is not an HFReduce verbs endpoint");
    }
    FF_RETURN_IF_ERROR(Connect(my_psn_));
    for (int i = 0; i < kSlots; ++i)
      FF_RETURN_IF_ERROR(PostRecv());
    return Status::Ok();
  }

  Status Send(const void* data, std::size_t n, bool) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      std::size_t piece = std::min(n, kSlotBytes);
      // A credit: the receiver has drained all but kSlots - 1 of the slots we wrote.
      FF_RETURN_IF_ERROR(WaitFor([&] {
        return sent_slots_ - __atomic_load_n(&remote_consumed_, __ATOMIC_ACQUIRE) < kSlots;
      }));
      const uint64_t slot = sent_slots_ % kSlots;
      char* src = staging_ + slot * kSlotBytes;
      std::memcpy(src, p, piece);
      ibv_sge sge{reinterpret_cast<uint64_t>(src), static_cast<uint32_t>(piece), staging_mr_->lkey};
      ibv_send_wr wr{};
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.imm_data = htonl(static_cast<uint32_t>(piece));
      wr.wr.rdma.remote_addr = theirs_.ring_addr + slot * kSlotBytes;
      wr.wr.rdma.rkey = theirs_.ring_rkey;
      FF_RETURN_IF_ERROR(PostSendAndWait(&wr));
      ++sent_slots_;
      p += piece;
      n -= piece;
    }
    return Status::Ok();
  }

  Status Recv(void* data, std::size_t n) override {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      if (offset_ == length_) {
        if (have_slot_) FF_RETURN_IF_ERROR(ReturnCredit());
        FF_RETURN_IF_ERROR(WaitFor([&] { return PollRecv() || !arrived_.empty(); }));
        if (!arrived_.empty() && !have_slot_) {
          length_ = arrived_.front();
          arrived_.pop_front();
          offset_ = 0;
          have_slot_ = true;
        }
        continue;
      }
      const uint64_t slot = received_slots_ % kSlots;
      std::size_t take = std::min(n, length_ - offset_);
      std::memcpy(p, ring_ + slot * kSlotBytes + offset_, take);
      offset_ += take;
      p += take;
      n -= take;
    }
    return Status::Ok();
  }

  Status WaitReadable(Clock::time_point deadline) override {
    while (true) {
      if (offset_ < length_ || !arrived_.empty() || PollRecv()) return Status::Ok();
      if (shut_) return Status(StatusCode::kCancelled, "connection to " + peer() + " shut down");
      if (Clock::now() >= deadline) return DeadlineExceeded("hfreduce: nothing from " + peer());
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void Shutdown() override {
    if (!shut_.exchange(true)) bootstrap_->Shutdown();
  }

 private:
  static char* Allocate(std::size_t n) {
    void* p =
        mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }

  Status Connect(uint32_t my_psn) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = kPort;
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    if (int rc = ibv_modify_qp(
            qp_, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        rc != 0) {
      return VerbsError("queue pair to INIT", rc);
    }
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = mtu_;
    attr.dest_qp_num = theirs_.qpn;
    attr.rq_psn = theirs_.psn;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.ah_attr.dlid = theirs_.lid;
    attr.ah_attr.port_num = kPort;
    attr.ah_attr.sl = static_cast<uint8_t>(service_level_);
    bool global = false;
    for (uint8_t b : theirs_.gid)
      global = global || b != 0;
    if (global) {  // RoCE, or InfiniBand across subnets: route by GID
      attr.ah_attr.is_global = 1;
      std::memcpy(attr.ah_attr.grh.dgid.raw, theirs_.gid, 16);
      attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
      attr.ah_attr.grh.hop_limit = 1;
      attr.ah_attr.grh.traffic_class = static_cast<uint8_t>(dscp_ << 2);
    }
    if (int rc =
            ibv_modify_qp(qp_, &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        rc != 0) {
      return VerbsError("queue pair to RTR", rc);
    }
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.sq_psn = my_psn;
    attr.max_rd_atomic = 1;
    if (int rc = ibv_modify_qp(qp_, &attr,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
        rc != 0) {
      return VerbsError("queue pair to RTS", rc);
    }
    return Status::Ok();
  }

  Status PostRecv() {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = 0;
    wr.num_sge = 0;  // RDMA WRITE WITH IMM consumes a receive but places no data through it
    if (int rc = ibv_post_recv(qp_, &wr, &bad); rc != 0) return VerbsError("post receive", rc);
    return Status::Ok();
  }

  // Moves arrived slot lengths from the receive CQ into arrived_. True when any arrived.
  bool PollRecv() {
    ibv_wc wc[8];
    int n = ibv_poll_cq(recv_cq_, 8, wc);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        NoteFailure(std::string("receive completion: ") + ibv_wc_status_str(wc[i].status));
        continue;
      }
      arrived_.push_back(ntohl(wc[i].imm_data));
      (void)PostRecv();
    }
    return n > 0;
  }

  // Marks the current slot drained and tells the sender (its credit word = slots we consumed).
  Status ReturnCredit() {
    have_slot_ = false;
    offset_ = length_ = 0;
    ++received_slots_;
    consumed_word_ = received_slots_;
    ibv_sge sge{reinterpret_cast<uint64_t>(&consumed_word_), sizeof consumed_word_,
                consumed_mr_->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = theirs_.credit_addr;
    wr.wr.rdma.rkey = theirs_.credit_rkey;
    return PostSendAndWait(&wr);
  }

  // Posts one send-queue request and waits for its completion. Serialised: the sending thread
  // (data) and the receiving thread (credits) share the send queue.
  Status PostSendAndWait(ibv_send_wr* wr) {
    MutexLock lock(&send_mu_);
    wr->wr_id = ++next_wr_id_;
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(qp_, wr, &bad); rc != 0) return VerbsError("post send", rc);
    return WaitFor([&]() -> bool {
      ibv_wc wc;
      int n = ibv_poll_cq(send_cq_, 1, &wc);
      if (n <= 0) return false;
      if (wc.status != IBV_WC_SUCCESS) {
        NoteFailure(std::string("send completion: ") + ibv_wc_status_str(wc.status));
      }
      return true;
    });
  }

  // Polls `done` until true; fails when shut down, on a completion error, or when the peer's
  // bootstrap connection ends (the peer died).
  Status WaitFor(const std::function<bool()>& done) {
    auto next_check = Clock::now();
    while (!done()) {
      if (shut_) return Status(StatusCode::kCancelled, "connection to " + peer() + " shut down");
      if (std::string failed = Failure(); !failed.empty()) {
        return Unavailable("hfreduce: connection to " + peer() + " failed: " + failed);
      }
      if (Clock::now() >= next_check) {
        // Nothing is ever sent on the bootstrap after setup: readable means it ended.
        if (bootstrap_->WaitReadable(Clock::now()).ok()) {
          return Unavailable("hfreduce: connection to " + peer() + " lost: peer closed it");
        }
        next_check = Clock::now() + std::chrono::milliseconds(100);
      }
      std::this_thread::yield();
    }
    if (std::string failed = Failure(); !failed.empty()) {
      return Unavailable("hfreduce: connection to " + peer() + " failed: " + failed);
    }
    return Status::Ok();
  }

  // A completion failed: said by the next wait of either thread (sender and receiver).
  void NoteFailure(std::string what) {
    MutexLock lock(&failure_mu_);
    if (failure_.empty()) failure_ = std::move(what);
  }
  std::string Failure() const {
    MutexLock lock(&failure_mu_);
    return failure_;
  }

  std::unique_ptr<Connection> bootstrap_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mtu mtu_ = IBV_MTU_1024;
  int gid_index_ = 0;
  int service_level_ = 0;  // the traffic class's InfiniBand service level
  int dscp_ = 0;           // and its DSCP, for RoCE
  char* ring_ = nullptr;
  char* staging_ = nullptr;
  ibv_mr* ring_mr_ = nullptr;
  ibv_mr* staging_mr_ = nullptr;
  ibv_mr* credit_mr_ = nullptr;
  ibv_mr* consumed_mr_ = nullptr;
  Endpoint theirs_{};
  uint32_t my_psn_ = 0;
  Mutex
      send_mu_;  // the send queue, shared by the sending thread (data) and the receiving (credits)
  uint64_t next_wr_id_ FF_GUARDED_BY(send_mu_) = 0;
  std::atomic<bool> shut_{false};
  mutable Mutex failure_mu_;
  std::string failure_ FF_GUARDED_BY(failure_mu_);  // the first completion that failed
  // Sender side.
  uint64_t sent_slots_ = 0;
  uint64_t remote_consumed_ = 0;  // written by the peer's RDMA
  // Receiver side.
  std::deque<uint32_t> arrived_;
  uint64_t received_slots_ = 0;  // slots fully drained
  uint64_t consumed_word_ = 0;   // source of the credit write
  bool have_slot_ = false;
  std::size_t offset_ = 0, length_ = 0;
};

}  // namespace

bool VerbsAvailable() {
  static const bool available = [] {
    int num = 0;
    ibv_device** list = ibv_get_device_list(&num);
    if (list) ibv_free_device_list(list);
    return list != nullptr && num > 0;
  }();
  return available;
}

struct VerbsConnector::Impl {
  std::unique_ptr<VerbsConnection> conn;
};

VerbsConnector::VerbsConnector(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VerbsConnector::~VerbsConnector() = default;

Result<std::unique_ptr<VerbsConnector>> VerbsConnector::Begin(std::unique_ptr<Connection> bootstrap,
                                                              const std::string& device,
                                                              int service_level, int dscp) {
  auto impl = std::make_unique<Impl>();
  impl->conn = std::make_unique<VerbsConnection>(std::move(bootstrap));
  FF_RETURN_IF_ERROR(impl->conn->Begin(device, service_level, dscp));
  return std::unique_ptr<VerbsConnector>(new VerbsConnector(std::move(impl)));
}

Result<std::unique_ptr<Connection>> VerbsConnector::Finish() {
  FF_RETURN_IF_ERROR(impl_->conn->Finish());
  return std::unique_ptr<Connection>(std::move(impl_->conn));
}

}  // namespace ff::hfreduce
