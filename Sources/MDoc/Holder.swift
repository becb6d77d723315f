import CBOR
import Crypto
import FoundationEssentials
import SwiftASN1
import TesseraCore
@_spi(FixedExpiryValidationTime) import X509
import X509Support

/// Signs a COSE `Sig_structure` with a key that may live on a token (the call may wait for it): raw `r || s`.
public typealias AsyncCOSESigner = @Sendable (_ toBeSigned: [UInt8]) async throws(TesseraError) -> [UInt8]

/// The reader a holder trusted: its certificate's subject and the key identifier of the root its chain leads to.
public struct MDocReaderIdentity: Sendable, Equatable {
    /// The readerAuth leaf certificate's subject (RFC 4514-style text).
    public let subject: String
    /// Lower-case hex of the subject key identifier of the reader root the chain was validated to (one of the
    /// registration's supportedAuthorityKeyIdentifiers).
    public let authorityKeyIdentifier: String

    public init(subject: String, authorityKeyIdentifier: String) {
        self.subject = subject; self.authorityKeyIdentifier = authorityKeyIdentifier
    }
}

/// The holder's trust check of a DocRequest's readerAuth (vendor document 001's `supportedAuthorityKeyIdentifiers`:
/// a request is offered only when it is signed by a certificate issued under a root whose subject key identifier is
/// listed), decided by signatures up to a reader root certificate the holder holds, never by a key identifier a
/// certificate claims.
///
/// Checked, in order: readerAuth is present and its payload detached (ISO/IEC 18013-5 §9.1.4: a COSE_Sign1 that
/// carries a payload is invalid, whatever it signs); its x5chain parses (leaf first); the leaf has the mdoc reader
/// authentication extended key usage (1.0.18013.5.1.6, Annex B.1.7); the COSE_Sign1 verifies by the leaf's key over
/// ReaderAuthenticationBytes (this SessionTranscript and the DocRequest's ItemsRequestBytes); every x5chain
/// certificate is valid at `now` and signed by the next one (reason `invalid`); then the chain is validated
/// (swift-certificates' `Verifier`: signatures, validity at `now`, basic constraints, name constraints, and the
/// leaf's EKU) up to one of `roots` whose subject key identifier is in `supportedAuthorityKeyIdentifiers`
/// (reason `untrusted` when no such root issued it). An empty list, or no such root, trusts nobody.
public enum MDocReaderTrust {
    /// The trusted reader, or MDOC_READER_NOT_TRUSTED with `details.reason` missing / invalid / untrusted.
    /// `supportedAuthorityKeyIdentifiers` nil (the lab's holder): any of `roots`.
    public static func evaluate(
        _ request: DocRequest, sessionTranscript: SessionTranscript, roots: [ParsedCertificate],
        supportedAuthorityKeyIdentifiers: [[UInt8]]?, now: Date
    ) async throws(TesseraError) -> MDocReaderIdentity {
        let chain = try signedChain(request, sessionTranscript: sessionTranscript, now: now)
        let listed = roots.filter { root in
            guard let supportedAuthorityKeyIdentifiers else { return true }
            return root.subjectKeyIdentifier.map { supportedAuthorityKeyIdentifiers.contains($0) } ?? false
        }
        guard let root = await ReaderChainValidation.root(of: chain, among: listed, now: now) else {
            throw refusal(
                "untrusted",
                listed.isEmpty
                    ? "no reader root certificate of the holder has a key identifier in supportedAuthorityKeyIdentifiers"
                    : "the readerAuth chain does not lead by signature to a listed reader root",
                keyIdentifier: claimedRootKeyIdentifier(chain))
        }
        return MDocReaderIdentity(
            subject: chain[0].subjectDescription, authorityKeyIdentifier: Hex.encode(root.subjectKeyIdentifier ?? []))
    }

    /// The checks that need no root (`missing` / `invalid`): readerAuth present and detached, its x5chain, the leaf's
    /// EKU, the signature over this session's ReaderAuthenticationBytes, validity at `now` and the links within the
    /// x5chain. The x5chain, leaf first (never empty).
    public static func signedChain(_ request: DocRequest, sessionTranscript: SessionTranscript, now: Date)
        throws(TesseraError) -> [ParsedCertificate]
    {
        guard let auth = request.readerAuth else { throw refusal("missing", "the request carries no readerAuth") }
        guard auth.payload == nil else {
            throw refusal(
                "invalid", "readerAuth carries a payload; ISO/IEC 18013-5 §9.1.4 detaches it (a replayed readerAuth)")
        }
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
        return chain
    }

    /// The root key identifier the chain claims (for the refusal's details only): the subject key identifier of the
    /// last certificate when it is self-signed, else its authority key identifier.
    static func claimedRootKeyIdentifier(_ chain: [ParsedCertificate]) -> [UInt8]? {
        guard let top = chain.last else { return nil }
        if top.subject == top.issuer, (try? top.isSigned(by: top)) == true { return top.subjectKeyIdentifier }
        return top.authorityKeyIdentifier
    }

    static func refusal(_ reason: String, _ message: String, keyIdentifier: [UInt8]? = nil) -> TesseraError {
        var details: [String: JSONValue] = ["reason": .string(reason)]
        if let keyIdentifier { details["authorityKeyIdentifier"] = .string(Hex.encode(keyIdentifier)) }
        return TesseraError(.mdocReaderNotTrusted, message, details: details)
    }
}

/// RFC 5280 path validation of a readerAuth x5chain to a reader root by swift-certificates' `Verifier`.
enum ReaderChainValidation {
    /// The root of `roots` that `chain` (leaf first, the rest as intermediates) validates to at `now`, or nil.
    static func root(of chain: [ParsedCertificate], among roots: [ParsedCertificate], now: Date) async
        -> ParsedCertificate?
    {
        guard !roots.isEmpty, let first = chain.first, let leaf = try? Certificate(derEncoded: first.der) else {
            return nil
        }
        let anchors = roots.compactMap { try? Certificate(derEncoded: $0.der) }
        let intermediates = chain.dropFirst().compactMap { try? Certificate(derEncoded: $0.der) }
        var verifier = Verifier(rootCertificates: CertificateStore(anchors)) {
            RFC5280Policy(fixedExpiryValidationTime: now)
            ReaderAuthenticationEKUPolicy()
        }
        guard
            case .validCertificate(let validated) = await verifier.validate(
                leaf: leaf, intermediates: CertificateStore(intermediates))
        else { return nil }
        let top = validated.last
        return zip(roots, roots.map { try? Certificate(derEncoded: $0.der) }).first { $0.1 == top }?.0
    }
}

/// The leaf of a reader chain carries the mdoc reader authentication EKU (ISO/IEC 18013-5 Annex B.1.7); the EKU
/// extension, critical there, is understood.
struct ReaderAuthenticationEKUPolicy: VerifierPolicy {
    static let usage = ExtendedKeyUsage.Usage(oid: [1, 0, 18013, 5, 1, 6])
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = [.X509ExtensionID.extendedKeyUsage]

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) -> PolicyEvaluationResult {
        guard let usages = try? chain.leaf.extensions.extendedKeyUsage, usages.contains(Self.usage) else {
            return .failsToMeetPolicy(reason: "the reader certificate lacks EKU 1.0.18013.5.1.6")
        }
        return .meetsPolicy
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
