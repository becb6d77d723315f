/// A software PN532 speaking the UART frame protocol on a pseudo-terminal, with an emulated card behind it.
