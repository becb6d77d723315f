/// Test harnesses that start real components (SoftHSM2 tokens, a private pcscd with vpcd readers).
