import CBOR
import TesseraCore

/// A WebAuthn attestation object (WebAuthn §6.5.4): `{"fmt", "attStmt", "authData"}` in CTAP2 canonical CBOR.
public struct AttestationObject: Sendable, Equatable {
    public let format: String
    public let statement: CBORValue
    public let authData: [UInt8]

    /// Parses a canonical attestation object; throws `MALFORMED_DATA` when a member is missing or mistyped.
    public init(parsing bytes: [UInt8]) throws(TesseraError) {
        let value = try CBORValue(decoding: bytes)
        guard let map = value.mapValue else { throw TesseraError(.malformedData, "attestation object is not a map") }
        guard let format = value["fmt"]?.textValue,
            let statement = value["attStmt"], statement.mapValue != nil,
            let authData = value["authData"]?.bytesValue
        else {
            throw TesseraError(.malformedData, "attestation object lacks fmt, attStmt or authData")
        }
        guard map.count == 3 else { throw TesseraError(.malformedData, "attestation object has extra members") }
        self.format = format
        self.statement = statement
        self.authData = authData
    }

    /// The "none" attestation: `{"fmt": "none", "attStmt": {}, "authData": authData}`.
    public static func none(authData: [UInt8]) -> [UInt8] {
        encode(format: "none", statement: .map([]), authData: authData)
    }

    /// Packed self attestation (WebAuthn §8.2, no x5c): `attStmt` is `{"alg": -7, "sig": signatureDER}`,
    /// the credential key's ES256 DER signature over authData ‖ clientDataHash.
    public static func packedSelf(authData: [UInt8], signatureDER: [UInt8]) -> [UInt8] {
        encode(
            format: "packed", statement: ["alg": CBORValue(COSEKey.algorithmES256), "sig": .byteString(signatureDER)],
            authData: authData)
    }

    static func encode(format: String, statement: CBORValue, authData: [UInt8]) -> [UInt8] {
        let object: CBORValue = ["fmt": .textString(format), "attStmt": statement, "authData": .byteString(authData)]
        return object.encodedWithDistinctKeys()
    }
}
