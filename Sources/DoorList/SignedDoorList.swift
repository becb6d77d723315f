import APDU
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
        // A DER list is parsed without its content (one copy of a large list, not one per nesting level); BER (as
        // `openssl cms -sign` may write) the long way.
        let parsed: CMSSignedData?
        if let (detached, content) = detachContent(bytes),
            var signed = try? CMSSignedData(contentInfo: detached, detachedAllowed: true)
        {
            signed.content = content
            parsed = signed
        } else {
            parsed = try? CMSSignedData(contentInfo: bytes)
        }
        guard let signed = parsed, signed.contentType == contentType,
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

extension SignedDoorList {
    /// A DER ContentInfo of SignedData split into the same ContentInfo without its eContent (a detached signature)
    /// and the eContent's octets; nil when `bytes` is not laid out so in definite-length DER.
    @_spi(Testing) public static func detachContent(_ bytes: [UInt8]) -> ([UInt8], [UInt8])? {
        /// The tag, the content's range, and the end of the element at `at`, within `end`.
        func element(_ at: Int, _ end: Int) -> (tag: UInt8, body: Range<Int>, next: Int)? {
            guard at + 2 <= end else { return nil }
            var i = at + 1
            var length = Int(bytes[i])
            i += 1
            if length & 0x80 != 0 {
                let n = length & 0x7F
                guard (1...4).contains(n), i + n <= end else { return nil }
                length = bytes[i..<i + n].reduce(0) { $0 << 8 | Int($1) }
                i += n
            }
            guard i + length <= end else { return nil }
            return (bytes[at], i..<i + length, i + length)
        }
        guard let ci = element(0, bytes.count), ci.tag == 0x30, ci.next == bytes.count,
            let oid = element(ci.body.lowerBound, ci.body.upperBound), oid.tag == 0x06,
            let wrapper = element(oid.next, ci.body.upperBound), wrapper.tag == 0xA0,
            let sd = element(wrapper.body.lowerBound, wrapper.body.upperBound), sd.tag == 0x30,
            let version = element(sd.body.lowerBound, sd.body.upperBound), version.tag == 0x02,
            let digests = element(version.next, sd.body.upperBound), digests.tag == 0x31,
            let encap = element(digests.next, sd.body.upperBound), encap.tag == 0x30,
            let type = element(encap.body.lowerBound, encap.body.upperBound), type.tag == 0x06,
            let explicit = element(type.next, encap.body.upperBound), explicit.tag == 0xA0,
            explicit.next == encap.body.upperBound,
            let octets = element(explicit.body.lowerBound, explicit.body.upperBound), octets.tag == 0x04,
            octets.next == explicit.body.upperBound
        else { return nil }
        // version and digestAlgorithms, the EncapsulatedContentInfo without eContent, then the rest as it is.
        let signedData = TLV.encode(
            tag: 0x30,
            value: Array(bytes[sd.body.lowerBound..<digests.next])
                + TLV.encode(tag: 0x30, value: Array(bytes[encap.body.lowerBound..<type.next]))
                + Array(bytes[encap.next..<sd.body.upperBound]))
        let detached = TLV.encode(
            tag: 0x30,
            value: Array(bytes[ci.body.lowerBound..<oid.next]) + TLV.encode(tag: 0xA0, value: signedData))
        return (detached, Array(bytes[octets.body]))
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
