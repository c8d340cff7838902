// haiscale._C: the Python face of the C++ side. create_backend() is what haiscale registers with
// torch.distributed as the "hfreduce" backend's creator.
#include <torch/python.h>

#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/thread_annotations.h"
#include "hfreduce/communicator.h"
#include "hfreduce/store.h"
#include "hfreduce_backend.h"

namespace py = pybind11;

namespace {

// The C++ side's errors as Python exceptions chosen by code and reason, never by message (the
// classes, made in PYBIND11_MODULE, are re-exported by haiscale.errors):
//   HaiScaleError(RuntimeError): every error, with .code ("DeadlineExceeded"), .reason ("" or
//     "QUORUM_TOO_SMALL") and .details (a dict);
//   HaiScaleTimeout(HaiScaleError, TimeoutError): kDeadlineExceeded;
//   HaiScaleUnavailable(HaiScaleError, ConnectionError): the service could not be reached;
//   QuorumTooSmall(HaiScaleTimeout): fewer than min_replicas groups asked in time.
struct ErrorTypes {
  PyObject* error = nullptr;
  PyObject* timeout = nullptr;
  PyObject* unavailable = nullptr;
  PyObject* quorum_too_small = nullptr;
};
ErrorTypes error_types;

[[noreturn]] void Raise(const ff::Status& st) {
  PyObject* type = error_types.error;
  if (st.HasReason(ff::hfreduce::kQuorumTooSmall)) {
    type = error_types.quorum_too_small;
  } else if (st.Is(ff::StatusCode::kDeadlineExceeded)) {
    type = error_types.timeout;
  } else if (st.Is(ff::StatusCode::kUnavailable) || st.Is(ff::StatusCode::kConnectionRefused) ||
             st.Is(ff::StatusCode::kConnectionReset)) {
    type = error_types.unavailable;
  }
  py::object error = py::reinterpret_borrow<py::object>(type)(st.ToString());
  error.attr("code") = std::string(ff::StatusCodeName(st.code()));
  error.attr("reason") = st.reason();
  py::dict details;
  for (const auto& [key, value] : st.details())
    details[py::str(key)] = value;
  error.attr("details") = details;
  PyErr_SetObject(type, error.ptr());
  throw py::error_already_set();
}

PyObject* NewErrorType(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string qualified = std::string("haiscale._C.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}

ff::haiscale::BackendOptions Options(int rank, int size, int64_t timeout_ms,
                                     const std::string& group_name, const std::string& node_id,
                                     const std::string& listen_host, const std::string& transport) {
  ff::haiscale::BackendOptions o;
  o.rank = rank;
  o.size = size;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  o.group_name = group_name;
  o.node_id = node_id;
  o.listen_host = listen_host;
  o.transport = transport;
  return o;
}

c10::intrusive_ptr<c10d::Backend> CreateBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                int rank, int size, int64_t timeout_ms,
                                                const std::string& group_name,
                                                const std::string& node_id, int local_rank,
                                                const std::string& listen_host,
                                                const std::string& transport, int64_t chunk_bytes,
                                                int pipeline_depth) {
  ff::haiscale::BackendOptions o =
      Options(rank, size, timeout_ms, group_name, node_id, listen_host, transport);
  o.local_rank = local_rank;
  o.chunk_bytes = static_cast<std::size_t>(chunk_bytes);
  o.pipeline_depth = pipeline_depth;
  return c10::make_intrusive<ff::haiscale::HFReduceBackend>(store, std::move(o));
}

c10::intrusive_ptr<c10d::Backend> CreateBackendAt(const std::string& address,
                                                  const std::string& prefix, int rank, int size,
                                                  int64_t timeout_ms, const std::string& group_name,
                                                  const std::string& node_id,
                                                  const std::string& listen_host,
                                                  const std::string& transport) {
  ff::haiscale::BackendOptions o =
      Options(rank, size, timeout_ms, group_name, node_id, listen_host, transport);
  o.store_address = address;
  o.store_prefix = prefix;
  return c10::make_intrusive<ff::haiscale::HFReduceBackend>(c10::intrusive_ptr<c10d::Store>(),
                                                            std::move(o));
}

// Tells the quorum service, from a thread of its own (independent of Python's), that this replica
// group's process is alive, every `interval` until stopped.
class QuorumHeartbeat {
 public:
  QuorumHeartbeat(const std::string& address, std::string job, std::string replica_id,
                  int64_t interval_ms)
      : client_(address, std::chrono::milliseconds(interval_ms)),
        job_(std::move(job)),
        replica_id_(std::move(replica_id)),
        interval_(interval_ms) {
    thread_ = std::thread([this] {
      ff::UniqueLock lock(&mu_);
      while (!stop_) {
        lock.unlock();
        (void)client_.QuorumHeartbeat(job_, replica_id_, interval_);
        lock.lock();
        cv_.wait_for(lock, interval_, [&] {
          mu_.AssertHeld();
          return stop_;
        });
      }
    });
  }
  ~QuorumHeartbeat() { Stop(); }
  void Stop() {
    {
      ff::MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  ff::hfreduce::StoreClient client_;
  const std::string job_, replica_id_;
  const std::chrono::milliseconds interval_;
  ff::Mutex mu_;
  ff::CondVar cv_;
  bool stop_ FF_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

py::dict JoinQuorum(const std::string& address, const std::string& job,
                    const std::string& replica_id, int64_t step, int min_replicas, int replicas,
                    bool reform, int64_t join_timeout_ms, int64_t timeout_ms,
                    int64_t heartbeat_timeout_ms) {
  ff::hfreduce::QuorumRequest r;
  r.job = job;
  r.replica_id = replica_id;
  r.step = step;
  r.min_replicas = min_replicas;
  r.replicas = replicas;
  r.reform = reform;
  r.join_timeout = std::chrono::milliseconds(join_timeout_ms);
  r.heartbeat_timeout = std::chrono::milliseconds(heartbeat_timeout_ms);
  ff::Result<ff::hfreduce::Quorum> q = [&] {
    py::gil_scoped_release release;
    // One client per address list, kept: it remembers which of several servers serves (after
    // a failover the next call goes straight to the new one).
    static std::mutex mu;
    static std::map<std::string, std::shared_ptr<ff::hfreduce::StoreClient>> clients;
    std::shared_ptr<ff::hfreduce::StoreClient> client;
    {
      std::lock_guard lock(mu);
      auto& c = clients[address + "|" + std::to_string(timeout_ms)];
      if (!c) {
        c = std::make_shared<ff::hfreduce::StoreClient>(address,
                                                        std::chrono::milliseconds(timeout_ms));
      }
      client = c;
    }
    return client->JoinQuorum(r, std::chrono::milliseconds(timeout_ms));
  }();
  if (!q.ok()) Raise(q.status());
  py::list members;
  for (const auto& m : q->members) {
    members.append(py::make_tuple(m.replica_id, m.step));
  }
  py::dict d;
  d["id"] = q->id;
  d["members"] = members;
  d["replica_rank"] = q->replica_rank;
  d["replica_world"] = q->replica_world();
  d["max_step"] = q->max_step;
  d["recover_from"] = q->recover_from;
  d["healing"] = q->healing();
  d["store_prefix"] = q->store_prefix;
  py::list stores;
  for (const std::string& s : q->stores)
    stores.append(s);
  d["stores"] = stores;
  return d;
}

ff::haiscale::HFReduceBackend& AsHFReduce(const c10::intrusive_ptr<c10d::Backend>& backend) {
  auto* b = dynamic_cast<ff::haiscale::HFReduceBackend*>(backend.get());
  TORCH_CHECK(b != nullptr, "not an hfreduce backend: ", backend->getBackendName());
  return *b;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "haiscale's C++ extension: the hfreduce torch.distributed backend";
  m.attr("TORCH_VERSION") = FF_TORCH_VERSION;
  error_types.error =
      NewErrorType(m, "HaiScaleError", py::make_tuple(py::handle(PyExc_RuntimeError)),
                   "An error of haiscale's C++ side: .code, .reason and .details say which.");
  error_types.timeout =
      NewErrorType(m, "HaiScaleTimeout",
                   py::make_tuple(py::handle(error_types.error), py::handle(PyExc_TimeoutError)),
                   "It did not complete in time (code DeadlineExceeded).");
  error_types.unavailable =
      NewErrorType(m, "HaiScaleUnavailable",
                   py::make_tuple(py::handle(error_types.error), py::handle(PyExc_ConnectionError)),
                   "The service could not be reached, or refused for now (code Unavailable).");
  error_types.quorum_too_small = NewErrorType(
      m, "QuorumTooSmall", py::make_tuple(py::handle(error_types.timeout)),
      "Fewer than min_replicas replica groups asked for the quorum in time (.details: asked, "
      "needed).");
  m.def("create_backend", &CreateBackend, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout_ms"), py::arg("group_name"), py::arg("node_id"), py::arg("local_rank"),
        py::arg("listen_host"), py::arg("transport"), py::arg("chunk_bytes"),
        py::arg("pipeline_depth"), py::call_guard<py::gil_scoped_release>(),
        "Rendezvous through `store` and return the group's hfreduce c10d backend.");
  m.def("create_backend_at", &CreateBackendAt, py::arg("address"), py::arg("prefix"),
        py::arg("rank"), py::arg("size"), py::arg("timeout_ms"), py::arg("group_name"),
        py::arg("node_id"), py::arg("listen_host"), py::arg("transport"),
        py::call_guard<py::gil_scoped_release>(),
        "Rendezvous through the hfreduce store at `address` under `prefix` and return the "
        "group's hfreduce c10d backend.");
  m.def("join_quorum", &JoinQuorum, py::arg("address"), py::arg("job"), py::arg("replica_id"),
        py::arg("step"), py::arg("min_replicas"), py::arg("replicas"), py::arg("reform"),
        py::arg("join_timeout_ms"), py::arg("timeout_ms"), py::arg("heartbeat_timeout_ms") = 0,
        "Join the job's next replica quorum at the hfreduce store `address` (hfreduce/quorum.h); "
        "raises QuorumTooSmall when too few groups asked within timeout_ms, "
        "HaiScaleUnavailable when the service cannot be reached, HaiScaleError otherwise.");
  py::class_<QuorumHeartbeat>(m, "QuorumHeartbeat",
                              "Heartbeats of a replica group to the quorum service, from a thread "
                              "of its own, until stop().")
      .def(py::init<const std::string&, std::string, std::string, int64_t>(), py::arg("address"),
           py::arg("job"), py::arg("replica_id"), py::arg("interval_ms"))
      .def("stop", &QuorumHeartbeat::Stop, py::call_guard<py::gil_scoped_release>());
  m.def(
      "comm_clock",
      [] {
        const ff::haiscale::CommClock c = ff::haiscale::ProcessCommClock();
        return std::make_tuple(c.collectives, c.seconds);
      },
      "(collectives, seconds): this process's collectives on hfreduce backends so far and their "
      "time from issue to completion, summed (point-to-point not counted).");
  m.def(
      "link_clock",
      [] {
        py::dict out;
        for (const ff::hfreduce::LinkTime& t : ff::hfreduce::ProcessLinkTimes())
          out[py::str(t.peer)] = py::make_tuple(t.frames, t.bytes, t.wait_s, t.move_s);
        return out;
      },
      "{peer node: (frames, bytes, wait_s, move_s)}: what this process received over HFReduce's "
      "trees from each neighbouring node so far (a node's leader only): frames, payload bytes, "
      "time waiting for each frame's first byte and time moving the rest (hfreduce::LinkTime).");
  m.def(
      "num_nodes",
      [](const c10::intrusive_ptr<c10d::Backend>& b) { return AsHFReduce(b).num_nodes(); },
      "How many HFReduce nodes the backend's group spans.");
  m.def(
      "transport",
      [](const c10::intrusive_ptr<c10d::Backend>& b) { return AsHFReduce(b).transport(); },
      "What joins the group's nodes: shm (one node), tcp or verbs.");
}
