/// The few DER shapes PKCS#11 EC keys need.
enum P256DER {
    /// `OBJECT IDENTIFIER prime256v1` (1.2.840.10045.3.1.7), the value of `CKA_EC_PARAMS`.
    static let curveParameters: [UInt8] = [0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07]

    /// The 65-byte uncompressed point from `CKA_EC_POINT`: a DER OCTET STRING as the spec says, or raw.
    static func uncompressedPoint(fromECPoint value: [UInt8]) -> [UInt8]? {
        if value.count == 65, value[0] == 0x04 { return value }
        guard value.count >= 2, value[0] == 0x04 else { return nil }
        var index = 1
        var length = Int(value[index]); index += 1
        if length & 0x80 != 0 {
            let octets = length & 0x7F
            guard octets >= 1, octets <= 2, value.count >= index + octets else { return nil }
            length = 0
            for _ in 0..<octets { length = length << 8 | Int(value[index]); index += 1 }
        }
        guard value.count == index + length, length == 65, value[index] == 0x04 else { return nil }
        return Array(value[index...])
    }
}
