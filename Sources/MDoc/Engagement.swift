import CBOR
import TesseraCore

/// DeviceEngagement (ISO/IEC 18013-5 §8.2.1.1): version, the mdoc's ephemeral key and retrieval methods.
public struct DeviceEngagement: Sendable, Equatable {
    /// The encoded structure as received (hashed into the SessionTranscript).
    public let bytes: [UInt8]
    public let version: String
    /// Cipher suite identifier (1: ECDH with the curves of Table 22, HKDF-SHA-256, AES-256-GCM).
    public let cipherSuite: UInt64
    /// EDeviceKeyBytes: the encoded COSE_Key.
    public let eDeviceKeyBytes: [UInt8]
    public let eDeviceKey: MDocECKey
    /// DeviceRetrievalMethods as given (`[type, version, options]` each).
    public let retrievalMethods: [CBORValue]

    public init(bytes: [UInt8]) throws(TesseraError) {
        let value = try MDocCBOR.map(try MDocCBOR.decode(bytes, "DeviceEngagement"), "DeviceEngagement")
        self.bytes = bytes
        version = try MDocCBOR.text(value[0], "DeviceEngagement version")
        guard version.hasPrefix("1.") else {
            throw MDocCBOR.malformed("DeviceEngagement version \(version) unsupported")
        }
        let security = try MDocCBOR.array(value[1], "DeviceEngagement Security")
        guard security.count == 2 else { throw MDocCBOR.malformed("Security is not [cipherSuite, EDeviceKeyBytes]") }
        cipherSuite = try MDocCBOR.uint(security[0], "cipher suite")
        guard cipherSuite == 1 else {
            throw TesseraError(.unsupportedProtocol, "mdoc cipher suite \(cipherSuite) unsupported")
        }
        eDeviceKeyBytes = try MDocCBOR.untag24(security[1], "EDeviceKeyBytes")
        eDeviceKey = try MDocECKey(try MDocCBOR.decode(eDeviceKeyBytes, "EDeviceKey"))
        retrievalMethods = value[2].map { $0.arrayValue ?? [] } ?? []
    }

    /// Builds `{0: "1.0", 1: [1, #6.24(EDeviceKeyBytes)]}` plus retrieval methods when given.
    public static func make(eDeviceKey: MDocECKey, retrievalMethods: [CBORValue] = []) throws(TesseraError)
        -> DeviceEngagement
    {
        var pairs: [(key: CBORValue, value: CBORValue)] = [(0, "1.0"), (1, [1, MDocCBOR.tag24(eDeviceKey.encoded)])]
        if !retrievalMethods.isEmpty { pairs.append((2, .array(retrievalMethods))) }
        return try DeviceEngagement(bytes: MDocCBOR.encode(.map(pairs)))
    }
}

/// One NDEF record (NFC Forum NDEF 1.0): type name format, type, optional id, payload.
public struct NDEFRecord: Sendable, Equatable {
    /// TNF 1: NFC Forum well-known type ("Hs", "ac"); 2: media type; 4: external type.
    public var typeNameFormat: UInt8
    public var type: [UInt8]
    public var id: [UInt8]
    public var payload: [UInt8]

    public init(typeNameFormat: UInt8, type: [UInt8], id: [UInt8] = [], payload: [UInt8]) {
        self.typeNameFormat = typeNameFormat; self.type = type; self.id = id; self.payload = payload
    }

    /// Parses an NDEF message (no chunked records).
    public static func parseMessage(_ bytes: [UInt8]) throws(TesseraError) -> [NDEFRecord] {
        var records: [NDEFRecord] = []
        var i = 0
        func need(_ n: Int) throws(TesseraError) {
            guard n >= 0, i + n <= bytes.count else { throw MDocCBOR.malformed("truncated NDEF record") }
        }
        while i < bytes.count {
            try need(2)
            let header = bytes[i]
            guard header & 0x20 == 0 else {
                throw TesseraError(.unsupportedProtocol, "chunked NDEF records are not supported")
            }
            let short = header & 0x10 != 0, hasID = header & 0x08 != 0
            let typeLength = Int(bytes[i + 1])
            i += 2
            var payloadLength = 0
            if short {
                try need(1); payloadLength = Int(bytes[i]); i += 1
            } else {
                try need(4)
                payloadLength = bytes[i..<(i + 4)].reduce(0) { $0 << 8 | Int($1) }
                i += 4
            }
            var idLength = 0
            if hasID { try need(1); idLength = Int(bytes[i]); i += 1 }
            try need(typeLength + idLength + payloadLength)
            let type = Array(bytes[i..<(i + typeLength)]); i += typeLength
            let id = Array(bytes[i..<(i + idLength)]); i += idLength
            let payload = Array(bytes[i..<(i + payloadLength)]); i += payloadLength
            records.append(NDEFRecord(typeNameFormat: header & 0x07, type: type, id: id, payload: payload))
            if header & 0x40 != 0 { break }
        }
        guard i == bytes.count else { throw MDocCBOR.malformed("bytes after the NDEF message end") }
        return records
    }

    /// Encodes records as one NDEF message (MB on the first, ME on the last, short records where they fit).
    public static func encodeMessage(_ records: [NDEFRecord]) -> [UInt8] {
        var out: [UInt8] = []
        for (n, r) in records.enumerated() {
            let short = r.payload.count < 256
            var header = r.typeNameFormat & 0x07
            if n == 0 { header |= 0x80 }
            if n == records.count - 1 { header |= 0x40 }
            if short { header |= 0x10 }
            if !r.id.isEmpty { header |= 0x08 }
            out.append(header)
            out.append(UInt8(r.type.count))
            if short {
                out.append(UInt8(r.payload.count))
            } else {
                let len = UInt32(r.payload.count)
                out += [UInt8(len >> 24), UInt8(len >> 16 & 0xFF), UInt8(len >> 8 & 0xFF), UInt8(len & 0xFF)]
            }
            if !r.id.isEmpty { out.append(UInt8(r.id.count)) }
            out += r.type + r.id + r.payload
        }
        return out
    }
}

/// NFC static handover (ISO/IEC 18013-5 §8.2.2.1): a Handover Select message carrying the DeviceEngagement.
public enum NFCHandover {
    /// External type of the DeviceEngagement record.
    public static let deviceEngagementType = Array("iso.org:18013:deviceengagement".utf8)
    /// External type of the NFC carrier configuration record.
    public static let nfcCarrierType = Array("iso.org:18013:nfc".utf8)

    /// A static Handover Select message: "Hs" (version 1.5) with one alternative carrier (NFC data retrieval,
    /// max command/response data lengths), the NFC carrier record and the DeviceEngagement record (id "mdoc").
    public static func staticHandoverSelect(
        deviceEngagement: DeviceEngagement, maxCommandLength: Int = 0xFFFF,
        maxResponseLength: Int = 0x10000
    ) -> [UInt8] {
        let carrierID = Array("nfc".utf8), auxID = Array("mdoc".utf8)
        // Alternative carrier record: CPS active (1), carrier data reference, one auxiliary data reference.
        let ac = NDEFRecord(
            typeNameFormat: 1, type: Array("ac".utf8),
            payload: [0x01, UInt8(carrierID.count)] + carrierID + [0x01, UInt8(auxID.count)] + auxID)
        let hsPayload = [0x15] + NDEFRecord.encodeMessage([ac])
        let hs = NDEFRecord(typeNameFormat: 1, type: Array("Hs".utf8), payload: hsPayload)
        let nfc = NDEFRecord(
            typeNameFormat: 4, type: nfcCarrierType, id: carrierID,
            payload: NFCCarrierConfiguration(
                maxCommandDataLength: maxCommandLength, maxResponseDataLength: maxResponseLength
            ).payload)
        let de = NDEFRecord(typeNameFormat: 4, type: deviceEngagementType, id: auxID, payload: deviceEngagement.bytes)
        return NDEFRecord.encodeMessage([hs, nfc, de])
    }

    /// The DeviceEngagement carried by a Handover Select message.
    public static func deviceEngagement(inHandoverSelect message: [UInt8]) throws(TesseraError) -> DeviceEngagement {
        let records = try NDEFRecord.parseMessage(message)
        guard records.first?.type == Array("Hs".utf8) else {
            throw MDocCBOR.malformed("NDEF message is not a Handover Select")
        }
        guard let de = records.first(where: { $0.typeNameFormat == 4 && $0.type == deviceEngagementType }) else {
            throw MDocCBOR.malformed("Handover Select carries no DeviceEngagement record")
        }
        return try DeviceEngagement(bytes: de.payload)
    }

    /// The NFC carrier configuration of a Handover Select message (the `iso.org:18013:nfc` record); nil when it
    /// has none, MALFORMED_DATA when its payload is not the form of §8.2.2.2.
    public static func nfcCarrier(inHandoverSelect message: [UInt8]) throws(TesseraError) -> NFCCarrierConfiguration? {
        let records = try NDEFRecord.parseMessage(message)
        guard let record = records.first(where: { $0.typeNameFormat == 4 && $0.type == nfcCarrierType }) else {
            return nil
        }
        return try NFCCarrierConfiguration(payload: record.payload)
    }

    /// The SessionTranscript Handover of a static handover: `[HandoverSelect, null]`.
    public static func staticHandover(handoverSelect: [UInt8]) -> CBORValue { [.byteString(handoverSelect), .null] }
}

/// The NFC carrier configuration record's payload (ISO/IEC 18013-5 §8.2.2.2): version 0x01, then fields of a length
/// byte (counting the type and the value), a type byte and the value: type 0x01 the maximum command data field
/// length (2 bytes), type 0x02 the maximum response data field length (3 bytes), e.g. `01 03 01 FFFF 04 02 010000`.
public struct NFCCarrierConfiguration: Sendable, Equatable {
    public let maxCommandDataLength: Int
    public let maxResponseDataLength: Int

    public init(maxCommandDataLength: Int, maxResponseDataLength: Int) {
        self.maxCommandDataLength = min(max(maxCommandDataLength, 0), 0xFFFF)
        self.maxResponseDataLength = min(max(maxResponseDataLength, 0), 0xFF_FFFF)
    }

    /// Parses the standard form only; unknown field types are skipped, both lengths are required.
    public init(payload: [UInt8]) throws(TesseraError) {
        guard payload.first == 0x01 else { throw MDocCBOR.malformed("NFC carrier record version is not 1") }
        var command: Int?, response: Int?
        var i = 1
        while i < payload.count {
            let length = Int(payload[i])
            guard length >= 1, i + 1 + length <= payload.count else {
                throw MDocCBOR.malformed("NFC carrier record field overruns the record")
            }
            let type = payload[i + 1]
            let value = payload[(i + 2)..<(i + 1 + length)]
            let number = value.reduce(0) { $0 << 8 | Int($1) }
            switch type {
            case 0x01:
                guard value.count == 2, command == nil else {
                    throw MDocCBOR.malformed("NFC carrier max command data length is not one 2-byte field")
                }
                command = number
            case 0x02:
                guard (2...3).contains(value.count), response == nil else {
                    throw MDocCBOR.malformed("NFC carrier max response data length is not one 2- or 3-byte field")
                }
                response = number
            default: break
            }
            i += 1 + length
        }
        guard let command, let response else {
            throw MDocCBOR.malformed("NFC carrier record lacks the max command or response data length")
        }
        maxCommandDataLength = command; maxResponseDataLength = response
    }

    /// `01 03 01 CCCC 04 02 RRRRRR`.
    public var payload: [UInt8] {
        [
            0x01, 0x03, 0x01, UInt8(maxCommandDataLength >> 8 & 0xFF), UInt8(maxCommandDataLength & 0xFF),
            0x04, 0x02, UInt8(maxResponseDataLength >> 16 & 0xFF), UInt8(maxResponseDataLength >> 8 & 0xFF),
            UInt8(maxResponseDataLength & 0xFF),
        ]
    }
}
