/// vsmartcard vpcd link: attaches an in-process emulated card to pcscd as a virtual card.
