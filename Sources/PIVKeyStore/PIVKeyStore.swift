/// PIV smart cards over PC/SC as a passkey key store.
