// NUMA placement of the node's buffers, as Fire-Flyer does it: the local ranks' copy-in slots
// interleaved across the NUMA nodes (every rank's copies spread over every memory controller),
// the reduce and network buffers bound to the leader's NUMA node (where the reducer runs; on a
// real node, pin the leader near the NIC). A no-op on machines with one NUMA node.
#pragma once

#include <cstddef>

namespace ff::hfreduce {

// Number of NUMA nodes with memory (1 when the machine is not NUMA).
int NumaNodes();
// Spreads [p, p + n) over all NUMA nodes, moving pages already placed.
void InterleaveMemory(void* p, std::size_t n);
// Binds [p, p + n) to the NUMA node the calling thread runs on, moving pages already placed.
void BindMemoryHere(void* p, std::size_t n);

}  // namespace ff::hfreduce
