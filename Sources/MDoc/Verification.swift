import CBOR
import Crypto
import FoundationEssentials
import TesseraCore
import X509Support

/// The outcome of verifying one mdoc Document, reported like a passport's `DocumentVerdict`.
public struct MDocVerification: Sendable, Equatable {
    public enum Verdict: String, Sendable {
        /// issuerAuth chains to a configured IACA, every returned element matches its MSO digest, the MSO is valid
        /// now, the docType matches and the device authenticated the session.
        case authentic
        /// A check failed: the data, the issuer chain or the device proof is wrong.
        case notAuthentic
        /// Nothing failed, but something could not be established (no IACA configured, device auth not checked).
        case unverified
    }

    /// Stable reason codes (docs/MDOC.md).
    public enum Reason: String, Sendable, CaseIterable {
        /// issuerAuth is malformed, has no usable document signer, or its signature over the MSO does not verify.
        case issuerSignatureInvalid = "ISSUER_SIGNATURE_INVALID"
        /// IACAs are configured and none of them issued the document signer.
        case untrustedIssuer = "UNTRUSTED_ISSUER"
        /// An IACA names the document signer's issuer, but the certificate signature or a validity period fails.
        case certificateChainInvalid = "CERTIFICATE_CHAIN_INVALID"
        /// A returned element's digest differs from the MSO's, or the MSO has no digest for it.
        case digestMismatch = "DIGEST_MISMATCH"
        /// The MSO's validUntil is in the past.
        case msoExpired = "MSO_EXPIRED"
        /// The MSO's validFrom is in the future.
        case msoNotYetValid = "MSO_NOT_YET_VALID"
        /// The MSO's docType differs from the Document's, or from the one requested.
        case docTypeMismatch = "DOCTYPE_MISMATCH"
        /// deviceSignature or deviceMac does not verify over DeviceAuthentication, or DeviceSigned is missing.
        case deviceAuthInvalid = "DEVICE_AUTH_INVALID"
        /// No IACA is configured: the issuer could not be checked.
        case noTrustAnchor = "NO_TRUST_ANCHOR"
        /// No SessionTranscript (or, for deviceMac, no reader key) was given: device authentication not checked.
        case deviceAuthNotChecked = "DEVICE_AUTH_NOT_CHECKED"

        public var isFailure: Bool {
            switch self {
            case .noTrustAnchor, .deviceAuthNotChecked: false
            default: true
            }
        }
    }

    public enum Check: String, Sendable { case valid, invalid, notChecked }

    /// One returned element with its digest check.
    public struct Element: Sendable, Equatable {
        public var namespace: String
        public var identifier: String
        public var value: CBORValue
        public var digestValid: Bool
    }

    public var docType: String
    public var verdict: Verdict
    /// Every reason found, in `Reason` declaration order.
    public var reasons: [Reason]
    public var issuerSignature: Check
    public var certificateChain: Check
    public var digests: Check
    public var validity: Check
    public var deviceAuthentication: Check
    /// "deviceSignature" or "deviceMac" when present.
    public var deviceAuthenticationKind: String?
    public var elements: [Element]
    public var documentSigner: ParsedCertificate?
    public var mso: MobileSecurityObject?

    /// The value of one element.
    public func element(_ identifier: String, namespace: String = MDL.namespace) -> CBORValue? {
        elements.first { $0.namespace == namespace && $0.identifier == identifier }?.value
    }
}

/// Verification of mdoc Documents as a pure function of the bytes, the trust anchors and the time.
public enum MDocVerifier {
    /// What the reader knows about the session a Document came from.
    public struct Session: Sendable {
        public var transcript: SessionTranscript
        /// The reader's ephemeral private key: needed for deviceMac (EMacKey), not for deviceSignature.
        public var eReaderKey: P256.KeyAgreement.PrivateKey?

        public init(transcript: SessionTranscript, eReaderKey: P256.KeyAgreement.PrivateKey? = nil) {
            self.transcript = transcript; self.eReaderKey = eReaderKey
        }
    }

    /// Verifies every Document of a DeviceResponse.
    public static func verify(
        response: DeviceResponse, session: Session?, iacas: [ParsedCertificate], now: Date,
        expectedDocType: String? = nil
    ) -> [MDocVerification] {
        response.documents.map {
            verify(document: $0, session: session, iacas: iacas, now: now, expectedDocType: expectedDocType)
        }
    }

    /// Verifies one Document: issuerAuth → document signer → IACA, MSO digests, validity, docType, DeviceAuth.
    public static func verify(
        document: MDocDocument, session: Session?, iacas: [ParsedCertificate], now: Date,
        expectedDocType: String? = nil
    ) -> MDocVerification {
        var found = Set<MDocVerification.Reason>()
        var result = MDocVerification(
            docType: document.docType, verdict: .unverified, reasons: [], issuerSignature: .invalid,
            certificateChain: .notChecked, digests: .notChecked, validity: .notChecked,
            deviceAuthentication: .notChecked,
            deviceAuthenticationKind: nil, elements: [], documentSigner: nil, mso: nil)
        let issuerAuth = document.issuerSigned.issuerAuth

        // issuerAuth signature by the document signer of x5chain.
        let signer = issuerAuth.x5chain.first.flatMap { try? ParsedCertificate(der: $0) }
        let mso = try? MobileSecurityObject(issuerAuth: issuerAuth)
        result.documentSigner = signer
        result.mso = mso
        if let signer, let mso, issuerAuth.verify(publicKey: signer.subjectPublicKeyInfo) {
            result.issuerSignature = .valid
            // Chain to an IACA.
            result.certificateChain = chain(signer: signer, signed: mso.signed, iacas: iacas, now: now, found: &found)
        } else {
            found.insert(.issuerSignatureInvalid)
        }

        // Elements and digests (reported even when the signature failed, marked by the MSO's digests if any).
        var allDigestsValid = true
        for ns in document.issuerSigned.nameSpaces {
            for item in ns.items {
                let expected = mso?.valueDigests[ns.namespace]?[item.digestID]
                let actual = mso?.digest(item.taggedBytes)
                let ok = expected != nil && actual != nil && ConstantTime.equal(expected!, actual!)
                if !ok { allDigestsValid = false }
                result.elements.append(
                    .init(
                        namespace: ns.namespace, identifier: item.elementIdentifier,
                        value: item.elementValue, digestValid: ok))
            }
        }
        if mso != nil {
            result.digests = allDigestsValid ? .valid : .invalid
            if !allDigestsValid { found.insert(.digestMismatch) }
        }

        if let mso {
            if now < mso.validFrom {
                found.insert(.msoNotYetValid); result.validity = .invalid
            } else if now > mso.validUntil {
                found.insert(.msoExpired); result.validity = .invalid
            } else {
                result.validity = .valid
            }
            if mso.docType != document.docType || (expectedDocType.map { $0 != document.docType } ?? false) {
                found.insert(.docTypeMismatch)
            }
        }

        // DeviceAuth over DeviceAuthentication with the SessionTranscript.
        if let session {
            if let mso, let deviceSigned = document.deviceSigned {
                let payload = DeviceSigned.deviceAuthenticationBytes(
                    sessionTranscript: session.transcript, docType: document.docType,
                    nameSpacesBytes: deviceSigned.nameSpacesBytes)
                if let signature = deviceSigned.deviceSignature {
                    result.deviceAuthenticationKind = "deviceSignature"
                    result.deviceAuthentication =
                        signature.verify(
                            publicKey: mso.deviceKey.subjectPublicKeyInfo,
                            detachedPayload: payload) ? .valid : .invalid
                } else if let mac = deviceSigned.deviceMac {
                    result.deviceAuthenticationKind = "deviceMac"
                    if let reader = session.eReaderKey,
                        let key = try? SessionEncryption.eMacKey(
                            privateKey: reader, peer: mso.deviceKey,
                            sessionTranscript: session.transcript)
                    {
                        result.deviceAuthentication = mac.verify(key: key, detachedPayload: payload) ? .valid : .invalid
                    } else {
                        found.insert(.deviceAuthNotChecked)
                    }
                }
                if result.deviceAuthentication == .invalid { found.insert(.deviceAuthInvalid) }
            } else if mso != nil {
                result.deviceAuthentication = .invalid
                found.insert(.deviceAuthInvalid)
            }
        } else {
            found.insert(.deviceAuthNotChecked)
        }

        result.reasons = MDocVerification.Reason.allCases.filter { found.contains($0) }
        result.verdict =
            result.reasons.contains(where: \.isFailure)
            ? .notAuthentic
            : result.reasons.isEmpty ? .authentic : .unverified
        return result
    }

    /// Document signer → IACA: the anchor whose subject (and key identifier) names the signer's issuer must have
    /// signed it, and both must be valid now and when the MSO was signed.
    static func chain(
        signer: ParsedCertificate, signed: Date, iacas: [ParsedCertificate], now: Date,
        found: inout Set<MDocVerification.Reason>
    ) -> MDocVerification.Check {
        guard !iacas.isEmpty else { found.insert(.noTrustAnchor); return .notChecked }
        let candidates = iacas.filter { iaca in
            guard iaca.subject == signer.issuer else { return false }
            if let aki = signer.authorityKeyIdentifier, let ski = iaca.subjectKeyIdentifier { return aki == ski }
            return true
        }
        guard !candidates.isEmpty else { found.insert(.untrustedIssuer); return .invalid }
        for iaca in candidates where (try? signer.isSigned(by: iaca)) == true {
            let valid =
                [iaca, signer].allSatisfy { $0.notBefore <= now && now <= $0.notAfter }
                && signer.notBefore <= signed && signed <= signer.notAfter
            if valid { return .valid }
        }
        found.insert(.certificateChainInvalid)
        return .invalid
    }
}
