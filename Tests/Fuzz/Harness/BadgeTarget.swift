import AccessControl
import FoundationEssentials
import ICAO
import TesseraCore
import X509

/// What a door reads from a badge before trusting anything: selector 0–127 the CHUID object's content (its TLVs, the
/// detached CMS SignedData of tag 3E parsed and its signer checked against the certificate it carries), 128–255 the
/// Card Authentication certificate (the FASC-N and card UUID of its subjectAltName).
enum BadgeTarget {
    static func run(_ input: [UInt8]) {
        let (selector, bytes) = input.selectorAndRest
        if selector < 0x80 {
            guard let chuid = try? CHUID(content: bytes) else { return }
            _ = chuid.isExpired(at: Date(timeIntervalSince1970: 1_800_000_000))
            guard let signature = chuid.signature,
                var signed = try? CMSSignedData(contentInfo: signature, detachedAllowed: true),
                let signer = signed.signerInfos.first
            else { return }
            signed.content = chuid.signedContent
            if let certificate = signed.certificate(for: signer) {
                _ = signed.verify(signer, signerKey: certificate.subjectPublicKeyInfo)
            }
        } else {
            guard let certificate = try? Certificate(derEncoded: bytes) else { return }
            let identifiers = BadgeIdentifiers(certificate: certificate)
            if let fascn = identifiers.fascn, fascn.isEmpty { fatalError("an empty FASC-N was taken") }
            if let uuid = identifiers.uuid, uuid.count != 16 { fatalError("a card UUID that is not 16 bytes") }
        }
    }
}
