import CBOR
import Crypto
import Foundation
import ICAO
import TesseraCore

/// Signs a COSE `Sig_structure` with a key that may live on a token (the call may wait for it): raw `r || s`.
public typealias AsyncCOSESigner = @Sendable (_ toBeSigned: [UInt8]) async throws(TesseraError) -> [UInt8]

/// The reader a holder trusted: its certificate's subject and the root key identifier that matched.
public struct MDocReaderIdentity: Sendable, Equatable {
    /// The readerAuth leaf certificate's subject (RFC 4514-style text).
    public let subject: String
    /// Lower-case hex of the key identifier (of the chain's root) found in supportedAuthorityKeyIdentifiers.
    public let authorityKeyIdentifier: String

    public init(subject: String, authorityKeyIdentifier: String) {
        self.subject = subject; self.authorityKeyIdentifier = authorityKeyIdentifier
    }
}

/// The holder's trust check of a DocRequest's readerAuth (vendor document 001's `supportedAuthorityKeyIdentifiers`:
/// a request is offered only when it is signed by a certificate issued under a root whose subject key identifier is
/// listed).
///
/// Checked, in order: readerAuth is present; its x5chain parses (leaf first); the leaf has the mdoc reader
/// authentication extended key usage (1.0.18013.5.1.6, ISO/IEC 18013-5 Annex B); the COSE_Sign1 verifies by the leaf's
/// key over ReaderAuthenticationBytes (this SessionTranscript and the DocRequest's ItemsRequestBytes); every
/// certificate of the chain is valid at `now` and signed by the next one; the chain's root key identifier (see
/// `rootKeyIdentifier`) is one of `supportedAuthorityKeyIdentifiers`. An empty list trusts nobody.
///
/// The holder has no root certificates, only their key identifiers: the last link (the root's signature over the
/// top certificate of the chain) is not checked cryptographically; the identifier is what the chain claims.
public enum MDocReaderTrust {
    /// The key identifier of the root the chain leads to: the subject key identifier of the chain's last
    /// certificate when it is self-signed (the reader sent the root too), otherwise that certificate's authority
    /// key identifier (RFC 5280 §4.2.1.1: the key identifier of its issuer, the root). Nil when the certificate
    /// has no such extension.
    public static func rootKeyIdentifier(chain: [ParsedCertificate]) -> [UInt8]? {
        guard let top = chain.last else { return nil }
        if top.subject == top.issuer, (try? top.isSigned(by: top)) == true { return top.subjectKeyIdentifier }
        return top.authorityKeyIdentifier
    }

    /// The trusted reader, or MDOC_READER_NOT_TRUSTED with `details.reason` missing / invalid / untrusted.
    public static func evaluate(
        _ request: DocRequest, sessionTranscript: SessionTranscript, supportedAuthorityKeyIdentifiers: [[UInt8]],
        now: Date
    ) throws(TesseraError) -> MDocReaderIdentity {
        guard let auth = request.readerAuth else { throw refusal("missing", "the request carries no readerAuth") }
        var chain: [ParsedCertificate] = []
        for der in auth.x5chain {
            guard let certificate = try? ParsedCertificate(der: der) else {
                throw refusal("invalid", "a readerAuth x5chain certificate does not parse")
            }
            chain.append(certificate)
        }
        guard let leaf = chain.first else { throw refusal("invalid", "readerAuth has no x5chain") }
        guard leaf.extendedKeyUsage?.contains(MDocIssuer.readerAuthEKU) == true else {
            throw refusal(
                "invalid",
                "the readerAuth certificate is not an mdoc reader authentication certificate (EKU \(MDocIssuer.readerAuthEKU))"
            )
        }
        let payload = DocRequest.readerAuthenticationBytes(
            sessionTranscript: sessionTranscript, itemsRequestBytes: request.itemsRequestBytes)
        guard auth.verify(publicKey: leaf.subjectPublicKeyInfo, detachedPayload: payload) else {
            throw refusal("invalid", "the readerAuth signature does not verify by its certificate")
        }
        for (index, certificate) in chain.enumerated() {
            guard certificate.notBefore <= now, now <= certificate.notAfter else {
                throw refusal("invalid", "readerAuth certificate \(certificate.subjectDescription) is not valid now")
            }
            if index + 1 < chain.count, (try? certificate.isSigned(by: chain[index + 1])) != true {
                throw refusal("invalid", "the readerAuth x5chain is not a chain (\(certificate.subjectDescription))")
            }
        }
        guard let root = rootKeyIdentifier(chain: chain) else {
            throw refusal("untrusted", "the readerAuth chain names no root key identifier")
        }
        guard supportedAuthorityKeyIdentifiers.contains(root) else {
            throw refusal(
                "untrusted", "the reader's root \(Hex.encode(root)) is not in supportedAuthorityKeyIdentifiers",
                keyIdentifier: root)
        }
        return MDocReaderIdentity(subject: leaf.subjectDescription, authorityKeyIdentifier: Hex.encode(root))
    }

    static func refusal(_ reason: String, _ message: String, keyIdentifier: [UInt8]? = nil) -> TesseraError {
        var details: [String: JSONValue] = ["reason": .string(reason)]
        if let keyIdentifier { details["authorityKeyIdentifier"] = .string(Hex.encode(keyIdentifier)) }
        return TesseraError(.mdocReaderNotTrusted, message, details: details)
    }
}

/// One element a DocRequest asks for.
public struct MDocRequestedElement: Sendable, Hashable {
    public let namespace: String
    public let identifier: String
    public let intentToRetain: Bool

    public init(namespace: String, identifier: String, intentToRetain: Bool) {
        self.namespace = namespace; self.identifier = identifier; self.intentToRetain = intentToRetain
    }

    /// `namespace/identifier`, as `mdoc.approve` names elements.
    public var path: String { "\(namespace)/\(identifier)" }
}

/// Which elements a holder releases.
public enum MDocElementSelection {
    /// The elements of the request, in its order.
    public static func requested(_ request: DocRequest) -> [MDocRequestedElement] {
        request.nameSpaces.flatMap { ns in
            ns.elements.map {
                MDocRequestedElement(
                    namespace: ns.namespace, identifier: $0.identifier, intentToRetain: $0.intentToRetain)
            }
        }
    }

    /// The requested elements that were approved (`approved` nil: all requested) and that the document holds, as
    /// `namespace/identifier`, in the request's order. Approved elements the request did not ask for are never
    /// released.
    public static func released(
        requested: [MDocRequestedElement], approved: [String]?, available: IssuerSigned
    ) -> [String] {
        let held = Set(
            available.nameSpaces.flatMap { ns in ns.items.map { "\(ns.namespace)/\($0.elementIdentifier)" } })
        let allowed = approved.map(Set.init)
        var seen = Set<String>()
        return requested.map(\.path).filter {
            held.contains($0) && (allowed?.contains($0) ?? true) && seen.insert($0).inserted
        }
    }
}

/// The holder's DeviceResponse.
public enum MDocPresentation {
    /// A DeviceResponse with one Document: the `released` elements (`namespace/identifier`) of `issuerSigned` and a
    /// deviceSignature over DeviceAuthentication (this SessionTranscript, `docType`, no device-signed elements)
    /// made by `signer` (the device key, ES256).
    public static func deviceResponse(
        issuerSigned: IssuerSigned, docType: String, sessionTranscript: SessionTranscript, released: [String],
        signer: AsyncCOSESigner
    ) async throws(TesseraError) -> [UInt8] {
        let keep = Set(released)
        let deviceSigned = try await DeviceSigned.signed(
            sessionTranscript: sessionTranscript, docType: docType, asyncSigner: signer)
        let disclosed = issuerSigned.disclosing { keep.contains("\($0)/\($1)") }
        return DeviceResponse(documents: [
            MDocDocument(docType: docType, issuerSigned: disclosed, deviceSigned: deviceSigned)
        ]).encoded
    }
}

extension MDocPresentation {
    /// A holder without consent (the lab, benchmarks): every requested element of `issuerSigned` that the DocRequest
    /// for `docType` asks for, with a deviceSignature by the software key `deviceKey`; nil (the session ends with
    /// status 20) when no DocRequest asks for `docType` or the signature fails.
    public static func releasingRequested(
        _ request: DeviceRequest, sessionTranscript: SessionTranscript, issuerSigned: IssuerSigned, docType: String,
        deviceKey: P256.Signing.PrivateKey
    ) async -> [UInt8]? {
        guard let doc = request.docRequests.first(where: { $0.docType == docType }) else { return nil }
        let released = MDocElementSelection.released(
            requested: MDocElementSelection.requested(doc), approved: nil, available: issuerSigned)
        let signer: AsyncCOSESigner = { (tbs: [UInt8]) throws(TesseraError) -> [UInt8] in
            do { return Array(try deviceKey.signature(for: tbs).rawRepresentation) } catch {
                throw TesseraError(.cryptoError, "device key signature failed")
            }
        }
        return try? await deviceResponse(
            issuerSigned: issuerSigned, docType: docType, sessionTranscript: sessionTranscript, released: released,
            signer: signer)
    }
}

extension DeviceSigned {
    /// `signed(sessionTranscript:docType:algorithm:signer:)` with a signer that may wait (a token).
    public static func signed(
        sessionTranscript: SessionTranscript, docType: String, algorithm: COSEAlgorithm = .es256,
        asyncSigner: AsyncCOSESigner
    ) async throws(TesseraError) -> DeviceSigned {
        let empty = MDocCBOR.encode(.map([]))
        let payload = deviceAuthenticationBytes(
            sessionTranscript: sessionTranscript, docType: docType, nameSpacesBytes: empty)
        let protected = MDocCBOR.encode([1: CBORValue(algorithm.rawValue)])
        let signature = try await asyncSigner(COSESign1.toBeSigned(protectedHeader: protected, payload: payload))
        let sign1 = COSESign1(
            protectedHeader: protected, unprotectedHeader: .map([]), payload: nil, signature: signature)
        return DeviceSigned(nameSpacesBytes: empty, deviceSignature: sign1, deviceMac: nil)
    }
}
