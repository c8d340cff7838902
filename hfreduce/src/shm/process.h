// Whether another process of the node is still there (the ranks watch each other's pids).
#pragma once

#include <sys/types.h>

namespace ff::hfreduce {

// True when process `pid` has exited (including a zombie not yet reaped).
bool ProcessDead(pid_t pid);

}  // namespace ff::hfreduce
