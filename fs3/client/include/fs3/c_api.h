/* libfs3c: a C ABI over the native client (fs3/fs.h), for bindings (the Python package fs3client
 * loads it with ctypes). Every call returns 0 on success or a positive errno value on failure, with
 * a one-line message in `err` (at most `err_len` bytes, NUL-terminated). Handles are owned by the
 * caller and freed with the matching *_free call. A file system handle is thread-safe; reads
 * submitted from several threads run concurrently. Reads land directly in the caller's buffers. */
#ifndef FS3_C_API_H_
#define FS3_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fs3_fs fs3_fs;
typedef struct fs3_batch fs3_batch;

/* Connects to fs3-meta and fs3-mgmtd ("host:port") acting as uid/gid (permissions apply). */
int fs3_connect(const char* meta, const char* mgmtd, uint32_t uid, uint32_t gid, fs3_fs** out,
                char* err, size_t err_len);
void fs3_fs_free(fs3_fs* fs);

/* The file or directory at `path`: inode number, size in bytes, mode (type and permission bits,
 * as st_mode), modification time in nanoseconds. */
int fs3_stat(fs3_fs* fs, const char* path, uint64_t* ino, uint64_t* size, uint32_t* mode,
             int64_t* mtime_ns, char* err, size_t err_len);
int fs3_mkdir(fs3_fs* fs, const char* path, uint32_t mode, char* err, size_t err_len);
int fs3_unlink(fs3_fs* fs, const char* path, char* err, size_t err_len);
/* Removes the empty directory `path`. */
int fs3_rmdir(fs3_fs* fs, const char* path, char* err, size_t err_len);
/* Renames `from` to `to` at once, replacing a file `to` (rename(2)'s rules). */
int fs3_rename(fs3_fs* fs, const char* from, const char* to, char* err, size_t err_len);
/* Creates a regular file (or truncates an existing one when !exclusive); its inode in *ino. */
int fs3_create(fs3_fs* fs, const char* path, uint32_t mode, int exclusive, uint64_t* ino, char* err,
               size_t err_len);
/* Writes `len` bytes at `offset` of the file at `path` (opened for this call). Durable when it
 * returns 0 (acknowledged by every replica of the chain). */
int fs3_write(fs3_fs* fs, const char* path, uint64_t offset, const void* data, size_t len,
              char* err, size_t err_len);
/* The names in directory `path`, each followed by '\0', into buf (size buf_len); *needed is the
 * size required (ERANGE when buf_len is smaller; call again with a bigger buffer). */
int fs3_list(fs3_fs* fs, const char* path, char* buf, size_t buf_len, size_t* needed, char* err,
             size_t err_len);

/* Starts reading n ranges: lengths[i] bytes at offsets[i] of file inos[i] into buffers[i]. The
 * buffers must stay valid until fs3_batch_wait returns. */
int fs3_read_batch_submit(fs3_fs* fs, size_t n, const uint64_t* inos, const uint64_t* offsets,
                          const uint32_t* lengths, void* const* buffers, fs3_batch** out, char* err,
                          size_t err_len);
/* Waits for a batch, writes the bytes read per range into read_lengths (short at a file's end)
 * and frees the batch (also on failure). */
int fs3_batch_wait(fs3_batch* batch, uint32_t* read_lengths, char* err, size_t err_len);
/* 1 when fs3_batch_wait would not block, else 0. */
int fs3_batch_ready(fs3_batch* batch);

/* The reads this process issued to each storage target so far (fs3/client.h TargetReads): one
 * line per target, "TARGET READS BYTES SECONDS\n", into buf (size buf_len, NUL-terminated);
 * *needed is the size required (ERANGE when buf_len is smaller). */
int fs3_read_clock(char* buf, size_t buf_len, size_t* needed, char* err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* FS3_C_API_H_ */
