/// ICAO 9303 chip access: BAC, PACE, secure messaging, LDS, passive and active authentication.
