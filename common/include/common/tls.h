// TLS for every gRPC server and channel of a process: a cluster runs secure or plain, as a whole.
//
// A secure cluster has one certificate authority. Each node has a certificate signed by it whose
// subject alternative names are the node's addresses (deploy/make-certs.sh makes them), and every
// daemon's [tls] section names the three files. Then:
//   - every gRPC server of the process serves TLS with the node's certificate and requires the
//     caller's certificate, signed by the same authority (mutual TLS: fs3's services, the
//     agents', the rendezvous and quorum stores have no other authentication); a server that says
//     so (RpcServerOptions::client_certs, hai-server's API) also takes callers without one, whom
//     its bearer tokens authenticate (users' `hai`);
//   - every channel checks the server's certificate against the authority (its name or address
//     against the certificate's) and shows the node's certificate where the process has one.
// Processes without a config (the `hai` and `fs3` tools, training processes: HFReduce's stores
// and quorum calls, fs3's native client), and daemons whose config has no [tls], read the same
// three paths from FF_TLS_CA_FILE, FF_TLS_CERT_FILE and FF_TLS_KEY_FILE; hai-agent sets them for
// the jobs it starts. A user's `hai` needs only FF_TLS_CA_FILE.
//
// fs3's chunk data goes over gRPC, so over TLS too. Not covered: HFReduce's tree connections
// between ranks (plain TCP, as they are over RDMA); fs3-meta's frame transport (plain TCP, and
// so off by default where the cluster runs TLS: fs3-fuse's metadata calls then go over gRPC);
// etcd's channels (etcd has TLS of its own); hai-web's HTTP (its own `https_cert_file`, or an
// HTTPS proxy: platform/README.md). The files are read once, at start: a rotated certificate takes
// a restart.
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "common/result.h"
#include "common/status.h"

namespace ff {

class ConfigSection;

// The [tls] section of a daemon's config; all empty: plain.
struct TlsOptions {
  std::string ca_file;    // the cluster's authority (PEM): servers' and callers' certificates
  std::string cert_file;  // this node's certificate (PEM, chain after it)
  std::string key_file;   // its private key (PEM)

  bool enabled() const { return !ca_file.empty(); }
  bool empty() const { return ca_file.empty() && cert_file.empty() && key_file.empty(); }
  void Bind(ConfigSection& s);
};

// Whether a server asks its callers for a certificate.
enum class ClientCerts {
  kRequire,  // only callers with a certificate of the authority (mutual TLS)
  kOptional  // a certificate shown is checked; a caller without one is let in (tokens decide)
};

// Installs the process's TLS from a daemon's config (RunDaemon does it before serving): reads and
// checks the files. An error names the file and what is wrong with it; nothing changes then.
Status SetProcessTls(const TlsOptions& options);
// From FF_TLS_CA_FILE, FF_TLS_CERT_FILE and FF_TLS_KEY_FILE, unless SetProcessTls ran. Tools and
// libraries call it before their first channel to fail with a clear error; MakeChannel and
// RpcServer::Start call it too, and where it fails they fail closed (never plain).
Status InitProcessTlsFromEnvironment();
// Whether the process runs secure (after the calls above).
bool ProcessTlsEnabled();
// The files the process's TLS came from (all empty: plain), to hand on to the processes it
// starts (hai-agent's jobs).
TlsOptions ProcessTlsOptions();

// The credentials for a server / a channel, by the process's TLS: insecure ones when it is
// plain; an error when it cannot serve TLS (an authority but no certificate of its own) or its
// files could not be read.
Result<std::shared_ptr<grpc::ServerCredentials>> ProcessServerCredentials(ClientCerts client_certs);
Result<std::shared_ptr<grpc::ChannelCredentials>> ProcessChannelCredentials();

}  // namespace ff
