#include "fs3/errors.h"

namespace ff::fs3 {

int FsErrno(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk:
      return 0;
    // A service (fs3-meta, a storage target, fs3-mgmtd) not reached within the retry window, or
    // one that answered nonsense: the call could not be carried out.
    case StatusCode::kUnavailable:
    case StatusCode::kConnectionRefused:
    case StatusCode::kConnectionReset:
    case StatusCode::kUnauthenticated:  // the cluster refused this mount's certificate
    case StatusCode::kInternal:
    case StatusCode::kUnknown:
    case StatusCode::kCancelled:
    case StatusCode::kDataLoss:  // a block failed its checksum on every replica
      return EIO;
    // ENOSYS would tell the kernel that the operation is never implemented (it stops asking).
    case StatusCode::kUnimplemented:
      return EOPNOTSUPP;
    default: {
      const int e = st.ToErrno();
      return e > 0 ? e : EIO;
    }
  }
}

}  // namespace ff::fs3
