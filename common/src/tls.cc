#include "common/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>

#include "common/config.h"
#include "common/files.h"
#include "common/thread_annotations.h"

namespace ff {
namespace {

// The files' contents, checked.
struct TlsMaterial {
  std::string ca;    // PEM
  std::string cert;  // PEM; empty: a client without a certificate
  std::string key;   // PEM
};

struct ProcessState {
  Mutex mu;
  // SetProcessTls or the environment has been read.
  bool decided FF_GUARDED_BY(mu) = false;
  // What went wrong reading it (then everything fails closed).
  Status error FF_GUARDED_BY(mu);
  std::shared_ptr<const TlsMaterial> material FF_GUARDED_BY(mu);  // null: plain
  TlsOptions files FF_GUARDED_BY(mu);                             // where it came from
};

ProcessState& State() {
  static ProcessState state;
  return state;
}

std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "not PEM";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

template <typename T, void (*Free)(T*)>
struct Freer {
  void operator()(T* p) const { Free(p); }
};
using X509Ptr = std::unique_ptr<X509, Freer<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Freer<EVP_PKEY, EVP_PKEY_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Freer<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Freer<X509_STORE_CTX, X509_STORE_CTX_free>>;
using BioPtr = std::unique_ptr<BIO, Freer<BIO, BIO_free_all>>;

BioPtr Bio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The certificates in a PEM file (at least one), or an error naming the file.
Result<std::vector<X509Ptr>> Certificates(const std::string& pem, const std::string& path) {
  std::vector<X509Ptr> certs;
  BioPtr bio = Bio(pem);
  while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr))
    certs.emplace_back(c);
  ERR_clear_error();  // (the end of the file reads as an error)
  if (certs.empty()) {
    return InvalidArgument("tls: '" + path + "' holds no PEM certificate");
  }
  return certs;
}

Result<std::shared_ptr<const TlsMaterial>> Load(const TlsOptions& o) {
  if (o.ca_file.empty()) {
    if (!o.cert_file.empty() || !o.key_file.empty()) {
      return InvalidArgument(
          "tls: a certificate without ca_file (the authority its peers are checked against)");
    }
    return std::shared_ptr<const TlsMaterial>();
  }
  if (o.cert_file.empty() != o.key_file.empty()) {
    return InvalidArgument("tls: cert_file and key_file go together (one is set, not the other)");
  }
  auto m = std::make_shared<TlsMaterial>();
  FF_ASSIGN_OR_RETURN(m->ca, ReadWholeFile(o.ca_file, "cannot read tls ca_file"));
  FF_ASSIGN_OR_RETURN(std::vector<X509Ptr> authority, Certificates(m->ca, o.ca_file));
  if (o.cert_file.empty()) return std::shared_ptr<const TlsMaterial>(std::move(m));

  FF_ASSIGN_OR_RETURN(m->cert, ReadWholeFile(o.cert_file, "cannot read tls cert_file"));
  FF_ASSIGN_OR_RETURN(m->key, ReadWholeFile(o.key_file, "cannot read tls key_file"));
  FF_ASSIGN_OR_RETURN(std::vector<X509Ptr> chain, Certificates(m->cert, o.cert_file));
  BioPtr key_bio = Bio(m->key);
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return InvalidArgument("tls: '" + o.key_file + "' holds no PEM private key (" + OpenSslError() +
                           "; an encrypted key is not supported)");
  }
  if (X509_check_private_key(chain[0].get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("tls: the key in '" + o.key_file + "' is not the one of '" +
                           o.cert_file + "'s certificate");
  }
  // Signed by the authority and valid now: otherwise every peer would refuse it, each handshake
  // with a message of its own.
  StorePtr store(X509_STORE_new());
  for (const X509Ptr& c : authority)
    X509_STORE_add_cert(store.get(), c.get());
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (std::size_t i = 1; i < chain.size(); ++i)
    sk_X509_push(untrusted, chain[i].get());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), chain[0].get(), untrusted);
  const bool verified = X509_verify_cert(ctx.get()) == 1;
  const int err = X509_STORE_CTX_get_error(ctx.get());
  sk_X509_free(untrusted);
  ERR_clear_error();
  if (!verified) {
    return InvalidArgument("tls: the certificate in '" + o.cert_file +
                           "' does not verify against '" + o.ca_file +
                           "': " + X509_verify_cert_error_string(err));
  }
  return std::shared_ptr<const TlsMaterial>(std::move(m));
}

TlsOptions FromEnvironment() {
  auto get = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v == nullptr ? "" : v);
  };
  return TlsOptions{get("FF_TLS_CA_FILE"), get("FF_TLS_CERT_FILE"), get("FF_TLS_KEY_FILE")};
}

// The process's material (null: plain), reading the environment if nothing decided yet.
Result<std::shared_ptr<const TlsMaterial>> Material() {
  ProcessState& s = State();
  MutexLock lock(&s.mu);
  if (!s.decided) {
    s.decided = true;
    const TlsOptions files = FromEnvironment();
    Result<std::shared_ptr<const TlsMaterial>> m = Load(files);
    if (m.ok()) {
      s.material = *m;
      s.files = files;
    } else {
      s.error = m.status().WithContext("FF_TLS_* environment");
      spdlog::error("{} (every gRPC call and server of this process fails until it is fixed)",
                    s.error.message());
    }
  }
  if (!s.error.ok()) return s.error;
  return s.material;
}

}  // namespace

void TlsOptions::Bind(ConfigSection& s) {
  s.Optional("ca_file", ca_file);
  s.Optional("cert_file", cert_file);
  s.Optional("key_file", key_file);
  s.Check(ca_file.empty() ? cert_file.empty() && key_file.empty() : true, "ca_file",
          "is needed with cert_file and key_file (the authority peers are checked against)");
  s.Check(cert_file.empty() == key_file.empty(), "cert_file",
          "and key_file go together (one is set, not the other)");
}

Status SetProcessTls(const TlsOptions& options) {
  FF_ASSIGN_OR_RETURN(std::shared_ptr<const TlsMaterial> m, Load(options));
  ProcessState& s = State();
  MutexLock lock(&s.mu);
  s.decided = true;
  s.error = Status::Ok();
  s.material = std::move(m);
  s.files = options;
  return Status::Ok();
}

Status InitProcessTlsFromEnvironment() {
  return Material().status();
}

bool ProcessTlsEnabled() {
  Result<std::shared_ptr<const TlsMaterial>> m = Material();
  return !m.ok() || *m != nullptr;
}

TlsOptions ProcessTlsOptions() {
  (void)Material();
  ProcessState& s = State();
  MutexLock lock(&s.mu);
  return s.files;
}

Result<std::shared_ptr<grpc::ServerCredentials>> ProcessServerCredentials(
    ClientCerts client_certs) {
  FF_ASSIGN_OR_RETURN(std::shared_ptr<const TlsMaterial> m, Material());
  if (m == nullptr) return grpc::InsecureServerCredentials();
  if (m->cert.empty()) {
    return FailedPrecondition(
        "tls: this process has the authority (ca_file, FF_TLS_CA_FILE) but no certificate of "
        "its own to serve with (cert_file and key_file, FF_TLS_CERT_FILE and FF_TLS_KEY_FILE)");
  }
  grpc::SslServerCredentialsOptions o(
      client_certs == ClientCerts::kRequire
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = m->ca;
  o.pem_key_cert_pairs.push_back({m->key, m->cert});
  return grpc::SslServerCredentials(o);
}

Result<std::shared_ptr<grpc::ChannelCredentials>> ProcessChannelCredentials() {
  FF_ASSIGN_OR_RETURN(std::shared_ptr<const TlsMaterial> m, Material());
  if (m == nullptr) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = m->ca;
  o.pem_private_key = m->key;
  o.pem_cert_chain = m->cert;
  return grpc::SslCredentials(o);
}

}  // namespace ff
