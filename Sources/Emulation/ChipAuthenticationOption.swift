import APDU
import CryptoPrimitives
import FoundationEssentials
import ICAO
import TesseraCore

/// One Chip Authentication v1 protocol an emulated chip announces in DG14: ECDH or DH on a standardized domain
/// parameter set with a session cipher. The chip holds one static key per parameter set (shared with PACE-CAM
/// on the same curve), with keyId = parameter id.
///
/// Text form (case-insensitive, `tessera lab make-profile --ca` and profile.json): `<agreement>-<parameters>-<cipher>`
/// with the agreement, parameters and cipher of `PACEOption`, e.g. `ecdh-p256-aes128`, `ecdh-brainpoolp256r1-3des`,
/// `dh-2048-aes128`, `dh-1024-3des`.
public struct ChipAuthenticationOption: Sendable, Hashable, Codable, CustomStringConvertible {
    /// Standardized domain parameter id: 0–2 DH, 8–18 EC.
    public let parameterId: Int
    public let cipher: SessionCipher

    /// Parses the text form; INVALID_INPUT naming the bad part.
    public init(parsing text: String) throws(TesseraError) {
        let parts = text.lowercased().trimmingWhitespace().split(separator: "-", maxSplits: 1).map(
            String.init)
        guard parts.count == 2 else {
            throw .invalidInput("Chip Authentication option '\(text)' must look like ecdh-p256-aes128 or dh-2048-3des")
        }
        // The same parameter and cipher names as PACE: parse as the generic-mapping PACE option.
        let pace: PACEOption
        do { pace = try PACEOption(parsing: "\(parts[0])-gm-\(parts[1])") } catch {
            throw .invalidInput(
                error.message.replacing(
                    "PACE option '\(parts[0])-gm-\(parts[1])'", with: "Chip Authentication option '\(text)'"))
        }
        parameterId = pace.parameterId
        cipher = pace.cipher
    }

    /// The domain parameters named by `parameterId`.
    public var domain: PACEDomain { PACEDomain.standardized(parameterId)! }

    /// The id-CA-* protocol.
    public var algorithm: ChipAuthenticationAlgorithm {
        ChipAuthenticationAlgorithm(keyAgreement: domain.keyAgreement, cipher: cipher)
    }

    /// The canonical text form, e.g. `ecdh-p256-aes128`.
    public var description: String {
        let pace =
            (try? PACEOption(parameterId: parameterId, cipher: cipher))?.description
            ?? "ecdh-gm-id\(parameterId)-aes128"
        return pace.replacing("-gm-", with: "-")
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do { self = try ChipAuthenticationOption(parsing: text) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

extension DocumentProfile {
    /// DG14 SecurityInfos for `options`: a ChipAuthenticationInfo (version 1, keyId = parameter id) each, and a
    /// ChipAuthenticationPublicKeyInfo for every parameter set that has no key in `keys` yet (the new private
    /// keys are added to `keys`).
    static func chipAuthenticationSecurityInfos(
        _ options: [ChipAuthenticationOption],
        keys: inout [Int: [UInt8]]
    ) throws(TesseraError) -> [[UInt8]] {
        var infos = options.map { LDSBuilder.chipAuthenticationInfo(algorithm: $0.algorithm, keyId: $0.parameterId) }
        for id in Set(options.map(\.parameterId)).sorted() where keys[id] == nil {
            guard let domain = PACEDomain.standardized(id) else { continue }
            let pair = try domain.keyPair()
            keys[id] = pair.privateKey
            infos.append(
                LDSBuilder.chipAuthenticationPublicKeyInfo(
                    standardizedParameterId: id, publicKey: pair.publicKey, keyId: id))
        }
        return infos
    }
}
