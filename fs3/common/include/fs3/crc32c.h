// CRC32C (Castagnoli), as 3FS and most storage systems checksum chunks: SSE4.2's crc32
// instruction where the CPU has it, a table otherwise. Crc32c(data) of "123456789" is 0xe3069283.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ff::fs3 {

// Continues `crc` (0 to start) over `data`.
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);

}  // namespace ff::fs3
