#include <stddef.h>
#define CRYPTOKI_GNU 1
#include <p11-kit/p11-kit.h>
#include <p11-kit/pkcs11.h>
#include <dlfcn.h>
