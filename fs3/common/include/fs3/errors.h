// The errno a filesystem caller sees for a Status: what fs3-fuse answers the kernel and what the
// native client's C ABI (and so fs3client's OSError) returns. Programs and language runtimes expect
// a filesystem's errors (EIO, ETIMEDOUT, ENOSPC, ...), never a network's (EHOSTUNREACH,
// ECONNREFUSED): a service that cannot be reached within the retry window is EIO, a wait that ran
// out is ETIMEDOUT. fs3/README.md ("Errors the mount returns") lists every errno and when.
#pragma once

#include "common/status.h"

namespace ff::fs3 {

// 0 for OK; else a positive errno a filesystem may return.
int FsErrno(const Status& st);

}  // namespace ff::fs3
