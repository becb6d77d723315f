#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <nfc/nfc.h>
