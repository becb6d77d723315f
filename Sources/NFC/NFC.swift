/// libnfc devices as APDU transports: ISO 14443-A/B initiator, ISO-DEP exchange, target (card emulation) mode.
