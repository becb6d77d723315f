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

#endif
