/* libfido2 against tesserad's --ctap-socket: fido_dev_set_io_functions over SOCK_SEQPACKET (one 64-byte report per
 * packet), then fido_dev_make_cred + fido_cred_verify_self (packed self attestation) and fido_dev_get_assert +
 * fido_assert_verify. Usage: fido2_socket SOCKET_PATH [PIN]. Prints "OK" and exits 0 when everything verifies. */
#include <fido.h>
#include <fido/es256.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void *io_open(const char *path) {
    int *fd = malloc(sizeof *fd);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
    *fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (*fd < 0 || connect(*fd, (struct sockaddr *)&addr, sizeof addr) != 0) { free(fd); return NULL; }
    return fd;
}

static void io_close(void *h) { close(*(int *)h); free(h); }

static int io_read(void *h, unsigned char *buf, size_t len, int ms) {
    struct pollfd p = {.fd = *(int *)h, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0) return -1;
    return (int)recv(*(int *)h, buf, len, 0);
}

/* libfido2 writes the report number (0) first, then the 64-byte report. */
static int io_write(void *h, const unsigned char *buf, size_t len) {
    if (len != 65 || send(*(int *)h, buf + 1, 64, 0) != 64) return -1;
    return (int)len;
}

#define CHECK(call) do { int r_ = (call); if (r_ != FIDO_OK) { \
    fprintf(stderr, "%s: %s (%d)\n", #call, fido_strerr(r_), r_); return 1; } } while (0)

int main(int argc, char **argv) {
    /* argv[2], optional: the PIN (ClientPIN: a pinUvAuthToken for each request, the UV flag set). */
    if (argc != 2 && argc != 3) return 2;
    const char *pin = argc == 3 ? argv[2] : NULL;
    fido_init(0);
    fido_dev_io_t io = {io_open, io_close, io_read, io_write};
    fido_dev_t *dev = fido_dev_new();
    CHECK(fido_dev_set_io_functions(dev, &io));
    CHECK(fido_dev_open(dev, argv[1]));
    if (!fido_dev_is_fido2(dev)) { fprintf(stderr, "not a FIDO2 device\n"); return 1; }

    unsigned char cdh[32], user[16];
    for (int i = 0; i < 32; i++) cdh[i] = (unsigned char)(i * 7);
    memcpy(user, "libfido2-user-01", 16);
    fido_cred_t *cred = fido_cred_new();
    CHECK(fido_cred_set_type(cred, COSE_ES256));
    CHECK(fido_cred_set_clientdata_hash(cred, cdh, sizeof cdh));
    CHECK(fido_cred_set_rp(cred, "example.com", "Example"));
    CHECK(fido_cred_set_user(cred, user, sizeof user, "carol", "Carol", NULL));
    CHECK(fido_dev_make_cred(dev, cred, pin));
    if (strcmp(fido_cred_fmt(cred), "packed") != 0) { fprintf(stderr, "fmt %s\n", fido_cred_fmt(cred)); return 1; }
    CHECK(fido_cred_verify_self(cred));

    fido_assert_t *assert = fido_assert_new();
    CHECK(fido_assert_set_clientdata_hash(assert, cdh, sizeof cdh));
    CHECK(fido_assert_set_rp(assert, "example.com"));
    CHECK(fido_assert_allow_cred(assert, fido_cred_id_ptr(cred), fido_cred_id_len(cred)));
    CHECK(fido_assert_set_up(assert, FIDO_OPT_TRUE));
    CHECK(fido_dev_get_assert(dev, assert, pin));
    es256_pk_t *pk = es256_pk_new();
    CHECK(es256_pk_from_ptr(pk, fido_cred_pubkey_ptr(cred), fido_cred_pubkey_len(cred)));
    CHECK(fido_assert_verify(assert, 0, COSE_ES256, pk));
    printf("OK %zu %u uv=%d,%d\n", fido_cred_id_len(cred), fido_assert_sigcount(assert, 0),
           (fido_cred_flags(cred) & 0x04) != 0, (fido_assert_flags(assert, 0) & 0x04) != 0);
    es256_pk_free(&pk);
    fido_assert_free(&assert);
    fido_cred_free(&cred);
    fido_dev_close(dev);
    fido_dev_free(&dev);
    return 0;
}
