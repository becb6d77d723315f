/// Primitives swift-crypto lacks (3DES, retail MAC, CMAC, brainpool, DH, RSA-PSS), over OpenSSL libcrypto.
/// Shared internal helpers live in OpenSSLSupport.swift.
enum CryptoPrimitivesModule {}
