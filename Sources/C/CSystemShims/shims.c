#define _GNU_SOURCE 1  /* posix_openpt, ptsname_r, pipe2, posix_spawn_file_actions_add{closefrom,chdir}_np */
#include "CSystemShims.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <pwd.h>
#include <fcntl.h>
#include <spawn.h>
#include <grp.h>

int tessera_sd_notify(const char *state) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0') return 0;
    size_t len = strlen(path);
    struct sockaddr_un addr;
    if (len >= sizeof(addr.sun_path)) return -ENAMETOOLONG;
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path, len);
    if (path[0] == '@') addr.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    ssize_t sent = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&addr,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
    int result = sent < 0 ? -errno : 0;
    close(fd);
    return result;
}

int tessera_lookup_uid(const char *name, uint32_t *uid) {
    struct passwd pw, *result = NULL;
    char buf[4096];
    if (getpwnam_r(name, &pw, buf, sizeof(buf), &result) != 0 || result == NULL) return -1;
    *uid = (uint32_t)pw.pw_uid;
    return 0;
}

int tessera_lookup_gid(const char *name, uint32_t *gid) {
    struct group gr, *result = NULL;
    char buf[16384];
    if (getgrnam_r(name, &gr, buf, sizeof(buf), &result) != 0 || result == NULL) return -1;
    *gid = (uint32_t)gr.gr_gid;
    return 0;
}

#include <fcntl.h>
#include <termios.h>

int tessera_pty_open(int *master, int *slave, char *name, unsigned long namelen) {
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0) return -errno;
    if (grantpt(m) != 0 || unlockpt(m) != 0) { int e = errno; close(m); return -e; }
    if (ptsname_r(m, name, namelen) != 0) { int e = errno; close(m); return -e; }
    int s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (s < 0) { int e = errno; close(m); return -e; }
    struct termios t;
    if (tcgetattr(s, &t) == 0) {
        cfmakeraw(&t);
        tcsetattr(s, TCSANOW, &t);
    }
    *master = m;
    *slave = s;
    return 0;
}

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>

void *tessera_secret_alloc(size_t size, int *locked) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (madvise(p, size, MADV_DONTDUMP) != 0 || madvise(p, size, MADV_DONTFORK) != 0) {
        int e = errno; munmap(p, size); errno = e; return NULL;
    }
    *locked = mlock(p, size) == 0;
    size_t filled = 0;
    while (filled < size) {
        ssize_t n = getrandom((char *)p + filled, size - filled, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno; tessera_secret_free(p, size); errno = e; return NULL;
        }
        filled += (size_t)n;
    }
    return p;
}

void tessera_secure_zero(void *p, size_t size) { explicit_bzero(p, size); }

void tessera_secret_free(void *p, size_t size) {
    if (p == NULL) return;
    explicit_bzero(p, size);
    munlock(p, size);
    munmap(p, size);
}

// OpenSSL's SHA-256 context is a plain struct (an EVP context is not): the states can so live in the caller's secret
// mapping. Its low-level digest calls are deprecated in OpenSSL 3 but kept, and nothing else offers that.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

struct tessera_hmac_states {
    SHA256_CTX inner, outer;
};

size_t tessera_hmac_sha256_states_size(void) { return sizeof(struct tessera_hmac_states); }

void tessera_hmac_sha256_prepare(const uint8_t *key_block, void *states) {
    struct tessera_hmac_states *s = states;
    uint8_t pad[64];
    for (int i = 0; i < 64; i++) pad[i] = key_block[i] ^ 0x36;
    SHA256_Init(&s->inner);
    SHA256_Update(&s->inner, pad, sizeof pad);
    for (int i = 0; i < 64; i++) pad[i] = key_block[i] ^ 0x5c;
    SHA256_Init(&s->outer);
    SHA256_Update(&s->outer, pad, sizeof pad);
    explicit_bzero(pad, sizeof pad);
}

void tessera_hmac_sha256(const void *states, const uint8_t *message, size_t length, uint8_t *tag) {
    const struct tessera_hmac_states *s = states;
    SHA256_CTX ctx = s->inner;
    uint8_t digest[SHA256_DIGEST_LENGTH];
    SHA256_Update(&ctx, message, length);
    SHA256_Final(digest, &ctx);
    ctx = s->outer;
    SHA256_Update(&ctx, digest, sizeof digest);
    SHA256_Final(tag, &ctx);
    explicit_bzero(&ctx, sizeof ctx);
    explicit_bzero(digest, sizeof digest);
}

int tessera_set_nondumpable(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 ? 0 : -errno; }

int tessera_get_dumpable(void) {
    int r = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    return r < 0 ? -errno : r;
}

int tessera_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0) < 0 ? -errno : 0;
}

#include <sys/stat.h>

int tessera_seqpacket_listen(const char *path, unsigned int mode, long gid) {
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof addr.sun_path) return -ENAMETOOLONG;
    strcpy(addr.sun_path, path);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) return -EEXIST;
        int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (probe < 0) return -errno;
        int served = connect(probe, (struct sockaddr *)&addr, sizeof addr) == 0;
        close(probe);
        if (served) return -EADDRINUSE;
        unlink(path);
    }
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    unsigned int creation = gid >= 0 ? (mode & 0700) : mode;
    mode_t previous = umask((mode_t)(~creation & 0777));
    int rc = bind(fd, (struct sockaddr *)&addr, sizeof addr);
    int saved = errno;
    umask(previous);
    if (rc != 0) { close(fd); return -saved; }
    if ((gid >= 0 && chown(path, (uid_t)-1, (gid_t)gid) != 0) || chmod(path, (mode_t)mode) != 0 || listen(fd, 16) != 0) {
        saved = errno;
        close(fd);
        unlink(path);
        return -saved;
    }
    return fd;
}

int tessera_seqpacket_accept(int listener, int32_t *pid, uint32_t *uid, uint32_t *gid) {
    int fd;
    do { fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC); } while (fd < 0 && errno == EINTR);
    if (fd < 0) return -errno;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        int saved = errno;
        close(fd);
        return -saved;
    }
    *pid = cred.pid; *uid = cred.uid; *gid = cred.gid;
    return fd;
}

int tessera_peer_groups(int fd, uint32_t *groups, int max) {
    socklen_t len = (socklen_t)(max * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) return -errno;
    return (int)(len / sizeof(gid_t));
}

ssize_t tessera_seqpacket_recv(int fd, uint8_t *buf, size_t len) {
    ssize_t n;
    do { n = recv(fd, buf, len, MSG_TRUNC); } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}

int tessera_seqpacket_send(int fd, const uint8_t *buf, size_t len) {
    ssize_t n;
    do { n = send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL); } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : 0;
}

void tessera_socket_shutdown(int fd) { shutdown(fd, SHUT_RDWR); }

int tessera_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC) == 0 ? 0 : -errno;
}

int tessera_spawn_actions_closefrom_chdir(void *actions, int lowfd, const char *directory) {
    posix_spawn_file_actions_t *a = actions;
    int e = posix_spawn_file_actions_addclosefrom_np(a, lowfd);
    if (e == 0 && directory != NULL) e = posix_spawn_file_actions_addchdir_np(a, directory);
    return e;
}

#include <malloc.h>

void tessera_release_free_memory(void) { malloc_trim(0); }
