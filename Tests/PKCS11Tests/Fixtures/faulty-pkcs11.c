/* A PKCS#11 module for tests: every call goes to the module at TARGET_MODULE (SoftHSM2), except that
 * C_GenerateKeyPair and C_GenerateKey made with a CKA_ID starting "failN-" (N one digit) answer CKR_GENERAL_ERROR
 * for the first N calls with that id, AFTER the target made the objects (a failure that leaves objects behind, as
 * SoftHSM2 2.6.1's transient one can). C_Initialize accepts a target already initialised in this process and
 * C_Finalize leaves it initialised (the test process shares one SoftHSM2). Built by PKCS11Tests with clang. */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <p11-kit/pkcs11.h>

static CK_FUNCTION_LIST_PTR target;
static CK_FUNCTION_LIST wrapped;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct { unsigned char id[64]; unsigned long length; int calls; } seen[256];
static int seenCount;

/* Whether this call with `template` must fail (counts the call). */
static int mustFail(CK_ATTRIBUTE_PTR template, CK_ULONG count) {
    for (CK_ULONG i = 0; i < count; i++) {
        if (template[i].type != CKA_ID || template[i].ulValueLen < 6 || template[i].ulValueLen > 64) continue;
        const unsigned char *id = template[i].pValue;
        if (memcmp(id, "fail", 4) != 0 || id[4] < '0' || id[4] > '9' || id[5] != '-') return 0;
        int limit = id[4] - '0', fail = 0;
        pthread_mutex_lock(&lock);
        int k = 0;
        while (k < seenCount && !(seen[k].length == template[i].ulValueLen && memcmp(seen[k].id, id, seen[k].length) == 0)) k++;
        if (k == seenCount && seenCount < 256) {
            memcpy(seen[k].id, id, template[i].ulValueLen);
            seen[k].length = template[i].ulValueLen;
            seen[k].calls = 0;
            seenCount++;
        }
        if (k < 256) fail = seen[k].calls++ < limit;
        pthread_mutex_unlock(&lock);
        return fail;
    }
    return 0;
}

static CK_RV initialize(void *args) {
    CK_RV rv = target->C_Initialize(args);
    return rv == CKR_CRYPTOKI_ALREADY_INITIALIZED ? CKR_OK : rv;
}

static CK_RV finalize(void *reserved) { (void)reserved; return CKR_OK; }

static CK_RV generateKeyPair(CK_SESSION_HANDLE s, CK_MECHANISM_PTR m, CK_ATTRIBUTE_PTR pub, CK_ULONG pubCount,
                             CK_ATTRIBUTE_PTR priv, CK_ULONG privCount, CK_OBJECT_HANDLE_PTR pubKey,
                             CK_OBJECT_HANDLE_PTR privKey) {
    CK_RV rv = target->C_GenerateKeyPair(s, m, pub, pubCount, priv, privCount, pubKey, privKey);
    return rv == CKR_OK && mustFail(priv, privCount) ? CKR_GENERAL_ERROR : rv;
}

static CK_RV generateKey(CK_SESSION_HANDLE s, CK_MECHANISM_PTR m, CK_ATTRIBUTE_PTR t, CK_ULONG count,
                         CK_OBJECT_HANDLE_PTR key) {
    CK_RV rv = target->C_GenerateKey(s, m, t, count, key);
    return rv == CKR_OK && mustFail(t, count) ? CKR_GENERAL_ERROR : rv;
}

CK_RV C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR list) {
    if (!target) {
        void *handle = dlopen(TARGET_MODULE, RTLD_NOW);
        CK_RV (*get)(CK_FUNCTION_LIST_PTR_PTR) = handle ? dlsym(handle, "C_GetFunctionList") : NULL;
        if (!get || get(&target) != CKR_OK) return CKR_GENERAL_ERROR;
        wrapped = *target;
        wrapped.C_Initialize = initialize;
        wrapped.C_Finalize = finalize;
        wrapped.C_GenerateKeyPair = generateKeyPair;
        wrapped.C_GenerateKey = generateKey;
    }
    *list = &wrapped;
    return CKR_OK;
}
