#ifndef TESSERA_CSYSTEMSHIMS_H
#define TESSERA_CSYSTEMSHIMS_H

/// Sends `state` (e.g. "READY=1") to the datagram socket named by $NOTIFY_SOCKET (sd_notify protocol,
/// path or abstract '@' address). Returns 0 when sent or when NOTIFY_SOCKET is unset, -errno on failure.
int tessera_sd_notify(const char *state);

#include <stdint.h>

/// Resolves a user name to its uid. Returns 0 on success, -1 when unknown.
int tessera_lookup_uid(const char *name, uint32_t *uid);

/// Resolves a group name to its gid. Returns 0 on success, -1 when unknown.
int tessera_lookup_gid(const char *name, uint32_t *gid);

/// Opens a pseudo-terminal pair with the slave in raw mode (no echo, no line discipline translation).
/// On success stores both descriptors (close-on-exec) and the slave path in `name`; returns 0, else -errno.
int tessera_pty_open(int *master, int *slave, char *name, unsigned long namelen);

#include <stddef.h>

/// Maps `size` bytes of private anonymous memory for secrets: excluded from core dumps (MADV_DONTDUMP), not
/// inherited by children (MADV_DONTFORK), locked in RAM when RLIMIT_MEMLOCK allows (`*locked` tells), and filled
/// with random bytes from getrandom(2). Returns NULL on failure (errno set).
void *tessera_secret_alloc(size_t size, int *locked);

/// Zeroes, unlocks and unmaps memory from `tessera_secret_alloc`.
void tessera_secret_free(void *p, size_t size);

/// Zeroes `size` bytes at `p` in a way the compiler may not remove.
void tessera_secure_zero(void *p, size_t size);

/// HMAC-SHA-256 (RFC 2104) with a key prepared once: `tessera_hmac_sha256_prepare` writes the inner and outer SHA-256
/// states of the 64-byte key block `key_block` (the key, zero-padded) at `states`
/// (`tessera_hmac_sha256_states_size()` bytes, e.g. in the key's own secret mapping); `tessera_hmac_sha256` writes the
/// 32-byte tag of `message` under them to `tag`, zeroing its working copies on the stack.
size_t tessera_hmac_sha256_states_size(void);
void tessera_hmac_sha256_prepare(const uint8_t *key_block, void *states);
void tessera_hmac_sha256(const void *states, const uint8_t *message, size_t length, uint8_t *tag);

/// prctl(PR_SET_DUMPABLE, 0): no core dumps, no ptrace or /proc/PID/mem by same-uid processes. 0 or -errno.
int tessera_set_nondumpable(void);

/// prctl(PR_GET_DUMPABLE): 0 when not dumpable, 1 or 2 when dumpable, -errno on failure.
int tessera_get_dumpable(void);

/// prctl(PR_SET_NAME): the calling thread's name as the kernel shows it (cut to 15 bytes). 0 or -errno.
int tessera_set_thread_name(const char *name);


#include <sys/types.h>

/// A SOCK_SEQPACKET Unix socket bound at `path` and listening (close-on-exec). A stale socket file is replaced, a
/// served one refused (-EADDRINUSE), any other file refused (-EEXIST). The file is created under a umask that
/// leaves no bit beyond `mode` (owner bits only while `gid` >= 0 is still to be set). Returns the fd or -errno.
int tessera_seqpacket_listen(const char *path, unsigned int mode, long gid);

/// Accepts one connection (blocking; close-on-exec) and reads its SO_PEERCRED. Returns the fd or -errno.
int tessera_seqpacket_accept(int listener, int32_t *pid, uint32_t *uid, uint32_t *gid);

/// The peer's supplementary groups (SO_PEERGROUPS), at most `max`; returns how many, or -errno.
int tessera_peer_groups(int fd, uint32_t *groups, int max);

/// Receives one packet (blocking) into `buf`; returns its length (truncated packets report their full length),
/// 0 at end of stream, -errno on failure.
ssize_t tessera_seqpacket_recv(int fd, uint8_t *buf, size_t len);

/// Sends one packet without blocking (MSG_DONTWAIT | MSG_NOSIGNAL); 0 or -errno.
int tessera_seqpacket_send(int fd, const uint8_t *buf, size_t len);

/// shutdown(fd, SHUT_RDWR): wakes a thread blocked in accept or recv on it.
void tessera_socket_shutdown(int fd);

/// pipe2(fds, O_CLOEXEC): a pipe whose ends no program spawned meanwhile inherits. Returns 0, else -errno.
int tessera_pipe_cloexec(int fds[2]);

/// Adds to the posix_spawn file actions at `actions` (a `posix_spawn_file_actions_t *`): close every descriptor from
/// `lowfd` up, and change to `directory` when not NULL (glibc's addclosefrom_np and addchdir_np). Returns 0, else
/// an error number.
int tessera_spawn_actions_closefrom_chdir(void *actions, int lowfd, const char *directory);

/// Returns the heap's free pages to the system (malloc_trim(0)): after a large transient allocation such as a
/// parsed door list, the resident set falls back to what is live.
void tessera_release_free_memory(void);

#endif
