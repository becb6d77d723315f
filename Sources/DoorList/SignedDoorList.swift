import CryptoPrimitives
import FoundationEssentials
import ICAO
import TesseraCore
import X509Support

/// A door list signed by the office's publisher key: a DER CMS SignedData (RFC 5652) whose eContent (id-data) is
/// the list's JSON, with one ECDSA-with-SHA-256 signer and the publisher certificate included, so that
/// `openssl cms -verify -binary -CAfile PUBLISHER.pem -purpose any` reads it as a door does.
public enum SignedDoorList {
    /// id-data: the eContentType of a door list.
    public static let contentType = "1.2.840.113549.1.7.1"

    /// Signs `list` with `sign` (the key of `publisher`).
    public static func sign(
        _ list: DoorList, publisher: ParsedCertificate, sign: CMSSignedData.Signer
    ) async throws(TesseraError) -> [UInt8] {
        try await CMSSignedData.build(
            content: try list.encoded(), contentType: contentType, signerCertificate: publisher, sign: sign)
    }

    /// The list in `bytes`, indexed, when its signature verifies with `publisher`'s key; the refusal otherwise.
    public static func open(_ bytes: [UInt8], publisher: ParsedCertificate) -> Result<DoorListIndex, DoorListRefusal> {
        guard let signed = try? CMSSignedData(contentInfo: bytes), signed.contentType == contentType,
            signed.signerInfos.count == 1, let signer = signed.signerInfos.first
        else { return .failure(.malformed) }
        guard signed.verify(signer, signerKey: publisher.subjectPublicKeyInfo) == .valid else {
            return .failure(.signature)
        }
        guard let index = try? DoorListIndex.decode(signed.content) else { return .failure(.malformed) }
        return .success(index)
    }

    /// The follower's rule (TUF's): a door applies the list in `bytes` only when it is signed by `publisher`, parses,
    /// carries a number above `current` (the number the door has; nil: none) and has not expired at `now`.
    public static func accept(
        _ bytes: [UInt8], publisher: ParsedCertificate, current: UInt64?, now: Date
    ) -> Result<DoorListIndex, DoorListRefusal> {
        switch open(bytes, publisher: publisher) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let index):
            if let current, index.list.number <= current { return .failure(.notNewer) }
            if now >= index.list.expiresAt { return .failure(.expired) }
            return .success(index)
        }
    }
}

/// Why a door refused a list (or a CRL) it was offered; it keeps the one it has.
public enum DoorListRefusal: String, Sendable, Error, Equatable {
    /// Not a CMS SignedData with one signer over a door list of this format (or not a CRL).
    case malformed
    /// The signature does not verify with the publisher's key (tampered, or signed by another key); for a CRL: not
    /// signed by an anchor.
    case signature
    /// Its number is not above the one the door has (a replayed or older list).
    case notNewer
    /// Past its expiry (a CRL: past its nextUpdate).
    case expired
}
