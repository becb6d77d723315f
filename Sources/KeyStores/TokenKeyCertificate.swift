import Crypto
import FoundationEssentials
import SwiftASN1
import X509
import _CryptoExtras

extension TokenKey.Value {
    /// The P-256 or RSA public key of a DER X.509 certificate; nil for another key type or a certificate that does
    /// not parse.
    public init?(certificate der: [UInt8]) {
        guard let certificate = try? Certificate(derEncoded: der) else { return nil }
        if let key = P256.Signing.PublicKey(certificate.publicKey) {
            self = .p256(point: Array(key.x963Representation))
        } else if let key = _RSA.Signing.PublicKey(certificate.publicKey),
            let rsa = try? Self.rsa(pkcs1: key.pkcs1DERRepresentation)
        {
            self = rsa
        } else {
            return nil
        }
    }

    /// `RSAPublicKey {modulus, publicExponent}` (RFC 8017 A.1.1).
    private static func rsa(pkcs1 der: Data) throws -> TokenKey.Value {
        try DER.sequence(try DER.parse(Array(der)), identifier: .sequence) { key in
            let modulus = try ArraySlice<UInt8>(derEncoded: &key)
            let exponent = try ArraySlice<UInt8>(derEncoded: &key)
            return .rsa(modulus: Array(modulus.drop { $0 == 0 }), exponent: Array(exponent.drop { $0 == 0 }))
        }
    }
}
