import ArgumentParser
import CBOR
import Crypto
import Emulation
import FoundationEssentials
import ICAO
import MDoc
import MRZ
import TesseraCore

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera lab make-mdoc DIR`: a test IACA, a document signer and an mDL issued by them.
struct LabMakeMDoc: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "make-mdoc",
        abstract: "Issue a test mDL (ISO/IEC 18013-5) with a fresh test IACA and document signer.",
        discussion: """
            Writes to DIR (created if needed): iaca.pem (the trust anchor for `tessera mdoc verify --iaca`), \
            iaca-key.pem, ds.pem, ds-key.pem, device-key.pem (the mDL's device key, P-256, in a file: lab use only), \
            issuer-signed.cbor (IssuerSigned: the elements and issuerAuth over the MSO), device-response.cbor (a \
            DeviceResponse disclosing every element, deviceSignature over session-transcript.cbor, a static NFC \
            handover session with fresh ephemeral keys) and session-transcript.cbor (SessionTranscriptBytes).

            With --token TOKEN-ID the device key is made on that token by the running tesserad (mdoc.createDeviceKey, \
            --socket) and never leaves it: DIR gets device-key.json ({tokenId, keyId, deviceKey}) instead of \
            device-key.pem, and no device-response.cbor or session-transcript.cbor. --register then registers the mDL \
            with the daemon (mdoc.register; --authority-key-id HEX for each trusted reader root, --document-id, \
            --invalidation-date) and writes registration.json, ready for `tessera mdoc present`.

            The elements (namespace org.iso.18013.5.1) come from --profile (a `tessera lab make-profile` passport: \
            MRZ names, birth date, document number, expiry, issuing country, sex, nationality, and its face image as \
            the portrait) or from built-in sample data.

            EXAMPLES
              tessera lab make-mdoc /tmp/mdl
              tessera lab make-mdoc /tmp/mdl --profile /tmp/anna --photo-padding 20000
              tessera lab make-mdoc /tmp/mdl --token pkcs11-… --register --authority-key-id 0a1b… --document-id my-mdl
              tessera mdoc verify /tmp/mdl/device-response.cbor --iaca /tmp/mdl/iaca.pem --session-transcript /tmp/mdl/session-transcript.cbor
            """)

    @Argument(help: ArgumentHelp("Output directory.", valueName: "DIR")) var directory: String
    @Option(help: ArgumentHelp("Passport profile directory to take the data and portrait from.", valueName: "DIR"))
    var profile: String?
    @Option(
        help: ArgumentHelp(
            "Portrait, JPEG (default: the profile's face, or a small built-in portrait).", valueName: "FILE.jpg"))
    var photo: String?
    @Option(
        name: .customLong("photo-padding"),
        help: ArgumentHelp("Pad the portrait to about this many bytes.", valueName: "BYTES"))
    var photoPadding: Int?
    @Option(
        name: .customLong("valid-from"),
        help: ArgumentHelp("MSO validFrom (RFC 3339; default: now).", valueName: "TIME"))
    var validFrom: String?
    @Option(
        name: .customLong("valid-until"),
        help: ArgumentHelp("MSO validUntil (RFC 3339; default: in 365 days).", valueName: "TIME"))
    var validUntil: String?

    @Option(
        name: .customLong("token"),
        help: ArgumentHelp(
            "Put the device key on this token of the running tesserad (mdoc.createDeviceKey) instead of a file.",
            valueName: "TOKEN-ID"))
    var token: String?
    @Flag(help: "With --token: register the mDL with the daemon (mdoc.register).") var register = false
    @Option(
        name: .customLong("authority-key-id"),
        help: ArgumentHelp(
            "With --register: a trusted reader root's key identifier, hex (repeatable).", valueName: "HEX"))
    var authorityKeyIds: [String] = []
    @Option(
        name: .customLong("document-id"),
        help: ArgumentHelp("With --register: the documentIdentifier.", valueName: "ID"))
    var documentId: String?
    @Option(
        name: .customLong("invalidation-date"),
        help: ArgumentHelp("With --register: the registration's invalidationDate (RFC 3339).", valueName: "TIME"))
    var invalidationDate: String?
    @OptionGroup var globals: GlobalOptions
    @OptionGroup var pin: PINOptions

    func validate() throws {
        if token == nil, register || !authorityKeyIds.isEmpty || documentId != nil || invalidationDate != nil {
            throw ValidationError("--register, --authority-key-id, --document-id and --invalidation-date need --token")
        }
    }

    func run() async throws {
        if let token {
            try await runWithToken(token)
            return
        }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch { throw ValidationError("cannot create \(directory)") }
        func date(_ text: String?, _ name: String, _ fallback: Date) throws -> Date {
            guard let text else { return fallback }
            guard let d = MDocDate.parse(text) else { throw ValidationError("\(name) must be RFC 3339") }
            return d
        }
        let from = try date(validFrom, "--valid-from", Date())
        let until = try date(validUntil, "--valid-until", Date(timeIntervalSinceNow: 365 * 86_400))
        do {
            var elements = try sampleElements()
            var portrait = try portraitJPEG()
            if let photoPadding { portrait = try FacePhoto.padded(portrait, to: photoPadding) }
            elements.append(("portrait", .byteString(portrait)))
            let pki = try MDocIssuer.testIACA(notBefore: min(from, Date()).addingTimeInterval(-86_400))
            let deviceKey = P256.Signing.PrivateKey()
            let issued = try MDocIssuer.issue(
                docType: MDL.docType, elements: [(MDL.namespace, elements)],
                deviceKey: try MDocECKey(uncompressedPoint: Array(deviceKey.publicKey.x963Representation)),
                signerCertificate: pki.documentSigner.certificate.der,
                signer: COSESign1.privateKeySigner(der: pki.documentSigner.privateKeyDER, algorithm: .es256),
                signed: min(from, Date()), validFrom: from, validUntil: until)

            let eDevice = try MDocECKey(
                uncompressedPoint: Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation))
            let eReader = try MDocECKey(
                uncompressedPoint: Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation))
            let engagement = try DeviceEngagement.make(eDeviceKey: eDevice)
            let transcript = SessionTranscript(
                deviceEngagementBytes: engagement.bytes, eReaderKeyBytes: eReader.encoded,
                handover: NFCHandover.staticHandover(
                    handoverSelect: NFCHandover.staticHandoverSelect(deviceEngagement: engagement)))
            let deviceSigned = try DeviceSigned.signed(sessionTranscript: transcript, docType: MDL.docType) {
                (tbs: [UInt8]) throws(TesseraError) -> [UInt8] in
                do { return Array(try deviceKey.signature(for: tbs).rawRepresentation) } catch {
                    throw TesseraError(.cryptoError, "device key signature failed")
                }
            }
            let response = DeviceResponse(documents: [
                MDocDocument(
                    docType: MDL.docType, issuerSigned: issued,
                    deviceSigned: deviceSigned)
            ])
            func path(_ name: String) -> String { FilePaths.join(directory, name) }
            try MDocFiles.write(Array(pki.iaca.certificatePEM.utf8), to: path("iaca.pem"))
            try MDocFiles.write(Array(pki.iaca.privateKeyPEM.utf8), to: path("iaca-key.pem"), private: true)
            try MDocFiles.write(Array(pki.documentSigner.certificatePEM.utf8), to: path("ds.pem"))
            try MDocFiles.write(Array(pki.documentSigner.privateKeyPEM.utf8), to: path("ds-key.pem"), private: true)
            try MDocFiles.write(Array(deviceKey.pemRepresentation.utf8), to: path("device-key.pem"), private: true)
            try MDocFiles.write(issued.encoded, to: path("issuer-signed.cbor"))
            try MDocFiles.write(response.encoded, to: path("device-response.cbor"))
            try MDocFiles.write(transcript.taggedBytes, to: path("session-transcript.cbor"))
            print(
                """
                mdoc      \(directory)
                docType   \(MDL.docType)
                elements  \(elements.map(\.0).joined(separator: " ")) (portrait \(portrait.count) bytes)
                valid     \(MDocDate.format(from)) … \(MDocDate.format(until))
                iaca      \(path("iaca.pem"))
                response  \(path("device-response.cbor")) (\(response.encoded.count) bytes)
                """)
        } catch {
            throw LabOutput.fail(error, status: 1)
        }
    }

    /// The mDL for a device key made on a daemon's token: no device-key.pem, device-response.cbor or
    /// session-transcript.cbor (the key cannot sign outside the daemon); device-key.json holds {tokenId, keyId,
    /// deviceKey}; with --register, registration.json holds the daemon's registration.
    func runWithToken(_ tokenId: String) async throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch { throw ValidationError("cannot create \(directory)") }
        var params: [String: JSONValue] = ["tokenId": .string(tokenId)]
        if let pin = try await pin.value() { params["pin"] = .string(pin) }
        if pin.allowFinalPinTry { params["allowFinalPinTry"] = true }
        let made = try await globals.call("mdoc.createDeviceKey", .object(params))
        func path(_ name: String) -> String { FilePaths.join(directory, name) }
        do throws(TesseraError) {
            guard let cose = made["deviceKey"]?.stringValue.flatMap(Base64URL.decode) else {
                throw TesseraError(.malformedData, "mdoc.createDeviceKey returned no deviceKey")
            }
            let deviceKey = try MDocECKey(try MDocCBOR.decode(cose, "deviceKey"))
            let from =
                try validFrom.map { text throws(TesseraError) -> Date in
                    guard let d = MDocDate.parse(text) else { throw .invalidInput("--valid-from must be RFC 3339") }
                    return d
                } ?? Date()
            let until =
                try validUntil.map { text throws(TesseraError) -> Date in
                    guard let d = MDocDate.parse(text) else { throw .invalidInput("--valid-until must be RFC 3339") }
                    return d
                } ?? Date(timeIntervalSinceNow: 365 * 86_400)
            var elements = try sampleElements()
            var portrait = try portraitJPEG()
            if let photoPadding { portrait = try FacePhoto.padded(portrait, to: photoPadding) }
            elements.append(("portrait", .byteString(portrait)))
            let pki = try MDocIssuer.testIACA(notBefore: min(from, Date()).addingTimeInterval(-86_400))
            let issued = try MDocIssuer.issue(
                docType: MDL.docType, elements: [(MDL.namespace, elements)], deviceKey: deviceKey,
                signerCertificate: pki.documentSigner.certificate.der,
                signer: COSESign1.privateKeySigner(der: pki.documentSigner.privateKeyDER, algorithm: .es256),
                signed: min(from, Date()), validFrom: from, validUntil: until)
            try MDocFiles.write(Array(pki.iaca.certificatePEM.utf8), to: path("iaca.pem"))
            try MDocFiles.write(Array(pki.iaca.privateKeyPEM.utf8), to: path("iaca-key.pem"), private: true)
            try MDocFiles.write(Array(pki.documentSigner.certificatePEM.utf8), to: path("ds.pem"))
            try MDocFiles.write(Array(pki.documentSigner.privateKeyPEM.utf8), to: path("ds-key.pem"), private: true)
            try MDocFiles.write(made.serialized(), to: path("device-key.json"))
            try MDocFiles.write(issued.encoded, to: path("issuer-signed.cbor"))
        } catch {
            throw LabOutput.fail(error, status: 1)
        }
        var lines = [
            "mdoc      \(directory)", "docType   \(MDL.docType)",
            "token     \(made["tokenId"]?.stringValue ?? "") key \(made["keyId"]?.stringValue ?? "")",
            "iaca      \(path("iaca.pem"))",
        ]
        if register {
            guard let issued = FileManager.default.contents(atPath: path("issuer-signed.cbor")) else {
                throw ValidationError("cannot read back issuer-signed.cbor")
            }
            var p: [String: JSONValue] = [
                "docType": .string(MDL.docType), "issuerSigned": .string(Base64URL.encode([UInt8](issued))),
                "tokenId": made["tokenId"] ?? .null, "keyId": made["keyId"] ?? .null,
                "supportedAuthorityKeyIdentifiers": .array(authorityKeyIds.map { .string($0) }),
            ]
            if let documentId { p["documentIdentifier"] = .string(documentId) }
            if let invalidationDate { p["invalidationDate"] = .string(invalidationDate) }
            let registration = try await globals.call("mdoc.register", .object(p))
            do throws(TesseraError) {
                try MDocFiles.write(registration.serialized(), to: path("registration.json"))
            } catch {
                throw LabOutput.fail(error, status: 1)
            }
            lines.append("registered \(registration["documentIdentifier"]?.stringValue ?? "")")
        }
        print(lines.joined(separator: "\n"))
    }

    /// The mDL elements from the profile's MRZ, or sample data.
    func sampleElements() throws(TesseraError) -> [(String, CBORValue)] {
        guard let profile else {
            return [
                ("family_name", "MUSTERMANN"), ("given_name", "ERIKA"), ("birth_date", MDocDate.fullDate("1964-08-12")),
                ("issue_date", MDocDate.fullDate("2024-01-15")), ("expiry_date", MDocDate.fullDate("2034-01-14")),
                ("issuing_country", "UT"), ("issuing_authority", "Utopia DMV"), ("document_number", "T22000129"),
                ("sex", 2), ("nationality", "UT"), ("age_over_18", true), ("age_over_21", true),
                ("driving_privileges", [["vehicle_category_code": "B"]]), ("un_distinguishing_sign", "UT"),
            ]
        }
        let mrz = try DocumentProfile.load(directory: profile).parsedMRZ
        let birth = mrz.birthDate()?.description ?? "1900-01-01"
        let expiry = mrz.expiryDate()?.description ?? "2099-12-31"
        let sex: CBORValue =
            switch mrz.sex {
            case .male: 1;
            case .female: 2;
            default: 0
            }
        return [
            ("family_name", .textString(mrz.primaryIdentifier)), ("given_name", .textString(mrz.secondaryIdentifier)),
            ("birth_date", MDocDate.fullDate(birth)), ("expiry_date", MDocDate.fullDate(expiry)),
            ("issuing_country", .textString(String(mrz.issuingState.prefix(2)))),
            ("issuing_authority", .textString(mrz.issuingState)), ("document_number", .textString(mrz.documentNumber)),
            ("sex", sex), ("nationality", .textString(mrz.nationality)),
        ]
    }

    func portraitJPEG() throws(TesseraError) -> [UInt8] {
        if let photo { return try MDocFiles.read(photo) }
        if let profile, let dg2 = try DocumentProfile.load(directory: profile).dataGroup(2),
            let face = try? DG2(parsing: dg2).faces.first, face.image.mimeType == "image/jpeg"
        {
            return face.image.data
        }
        return FacePhoto.builtIn
    }
}
