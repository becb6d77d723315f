/// PIV (NIST SP 800-73-4) card commands and data objects over any APDU transport.
