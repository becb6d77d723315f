import APDU
import CryptoPrimitives
import FoundationEssentials
import ICAO
import MRZ
import TesseraCore
import X509Support

#if canImport(Glibc)
    import Glibc
#endif

/// A test e-passport kept in a directory: its LDS files, the test PKI that signed them and `profile.json`.
/// `EmulatedPassport` serves it as a contactless chip.
///
/// Directory layout: `profile.json` (MRZ, CAN, access options, file list), `EF.COM.bin`, `DG1.bin`, `DG2.bin`,
/// `DG11.bin`, `DG12.bin`, `DG14.bin` (with PACE or active authentication), `DG15.bin` (with active
/// authentication), `EF.SOD.bin`, `EF.CardAccess.bin` (with PACE), the PKI files `csca.pem` (the trust anchor,
/// see `cscaPath`), `csca.der`, `csca-key.pem`, `ds.pem`, `ds.der`, `ds-key.pem`, `aa-key.pem` (the
/// active authentication private key) and `ca-key-<parameterId>.bin` (PACE-CAM and Chip Authentication private
/// keys, raw big-endian EC scalars or DH exponents; the public keys are in DG14 with keyId = parameterId) and, with PACE-CAM,
/// `EF.CardSecurity.bin` (the PACE-CAM public keys, signed by the document signer).
public struct DocumentProfile: Sendable {
    /// The directory the profile lives in.
    public let directory: String
    /// The MRZ as printed (lines separated by "\n").
    public let mrz: String
    /// The card access number, when the document has one.
    public let can: String?
    public let access: AccessOptions
    /// Key algorithm of the test PKI (and of the active authentication key).
    public let algorithm: TestKeyAlgorithm
    /// Files of the eMRTD application by file identifier (EF.COM 011E, EF.SOD 011D, DGn 01nn).
    public let applicationFiles: [UInt16: [UInt8]]
    /// EF.CardAccess (in the master file), present when PACE is offered.
    public let cardAccess: [UInt8]?
    /// PKCS#8 DER private key answering INTERNAL AUTHENTICATE, when active authentication is enabled.
    public let activeAuthenticationKey: [UInt8]?
    /// The hash the chip signs active authentication challenges with.
    public let activeAuthenticationHash: SignatureHash
    /// Static chip authentication private keys (SK_IC, for PACE-CAM and Chip Authentication) by standardized
    /// domain parameter id.
    public let chipAuthenticationKeys: [Int: [UInt8]]
    /// EF.CardSecurity (in the master file, FID 011D), issued for PACE-CAM profiles: the PACEInfos and the chip
    /// authentication public keys, signed by the document signer.
    public var cardSecurity: [UInt8]? = nil

    /// Whether the chip supports active authentication.
    public var activeAuthentication: Bool { activeAuthenticationKey != nil }

    /// The parsed MRZ.
    public var parsedMRZ: MRZ { (try? MRZ.parse(mrz))! }

    /// The MRZ information used as the BAC/PACE password.
    public var mrzInformation: String { parsedMRZ.mrzInformation }

    /// Path of the CSCA certificate (PEM) that anchors passive authentication (`tesserad --csca`).
    public var cscaPath: String { Self.path(directory, "csca.pem") }

    /// A trust store holding the profile's CSCA.
    public func trustStore() throws(TesseraError) -> CSCATrustStore { try CSCATrustStore(contentsOf: cscaPath) }

    /// The data group numbers present, ascending.
    public var dataGroupNumbers: [Int] {
        applicationFiles.keys.compactMap { LDSFile(fileID: $0)?.dataGroupNumber }.sorted()
    }

    /// The bytes of data group `n` as issued (and hashed in EF.SOD).
    public func dataGroup(_ n: Int) -> [UInt8]? {
        guard let file = LDSFile(dataGroup: n) else { return nil }
        return applicationFiles[file.fileID]
    }

    /// EF.SOD.
    public var sod: [UInt8] { applicationFiles[LDSFile.sod.fileID] ?? [] }

    /// EF.COM.
    public var com: [UInt8] { applicationFiles[LDSFile.com.fileID] ?? [] }

    // MARK: Creating

    /// Issues a new document into `directory` (created if needed; existing profile files are overwritten) and
    /// returns it. `photoJPEG` is the face image, JPEG or JPEG 2000 (a built-in small JPEG when nil); `photoPadding` pads the JPEG
    /// with comment segments to about that many bytes. An empty `access.pace` with `access.bac` false is
    /// rejected. Throws INVALID_INPUT (MRZ_INVALID for a bad MRZ), STORAGE_ERROR when files cannot be written.
    public static func make(
        directory: String, mrz: String, photoJPEG: [UInt8]? = nil, can: String? = nil,
        access: AccessOptions = .init(), algorithm: TestKeyAlgorithm = .p256,
        activeAuthentication: Bool = false, photoPadding: Int? = nil
    ) throws(TesseraError) -> DocumentProfile {
        let parsed = try MRZ.parse(mrz)
        guard access.bac || !access.pace.isEmpty else {
            throw .invalidInput("the document must offer BAC or at least one PACE option")
        }
        if let can {
            guard !can.isEmpty, can.count <= 16, can.allSatisfy({ $0.isASCII && $0.isNumber }) else {
                throw .invalidInput("CAN must be digits (usually six)")
            }
        }
        var photo = photoJPEG ?? FacePhoto.builtIn
        guard let size = FacePhoto.dimensions(photo) ?? FacePhoto.jpeg2000Dimensions(photo) else {
            throw .invalidInput("the photo is not a JPEG with a frame header nor a JPEG 2000 image")
        }
        if let photoPadding { photo = try FacePhoto.padded(photo, to: photoPadding) }

        // Data groups.
        var groups: [Int: [UInt8]] = [:]
        groups[1] = try LDSBuilder.dg1(mrz: parsed.raw)
        groups[2] = try LDSBuilder.dg2(image: photo, width: size.width, height: size.height)
        var dg11 = DG11()
        dg11.fullName = fullName(parsed)
        dg11.placeOfBirth = "TESSERA TEST CITY"
        groups[11] = LDSBuilder.dg11(dg11)
        var dg12 = DG12()
        dg12.issuingAuthority = "TESSERA TEST AUTHORITY \(parsed.issuingState.filter { $0 != "<" })"
        dg12.dateOfIssue = dateOfIssue()
        groups[12] = LDSBuilder.dg12(dg12)

        var aaKey: [UInt8]?
        var aaHash = SignatureHash.sha256
        var securityInfos: [[UInt8]] = access.pace.map(paceInfoDER)
        if activeAuthentication {
            let spec = activeAuthenticationKeySpec(algorithm)
            aaHash = spec.hash
            let pair = try Signatures.generateKey(spec.key)
            aaKey = pair.privateKeyDER
            groups[15] = LDSBuilder.dg15(publicKeyInfo: pair.publicKeyDER)
            if case .ec = spec.key {
                // ActiveAuthenticationInfo names the ECDSA hash (Doc 9303 Part 11 §6.1); RSA needs none.
                securityInfos += PassportDER.elements(ofSet: LDSBuilder.activeAuthenticationInfo(hash: aaHash))
            }
        }
        var caKeys: [Int: [UInt8]] = [:]
        var chipKeyInfos: [[UInt8]] = []
        for id in Set(access.pace.filter { $0.mapping == .chipAuthentication }.map(\.parameterId)).sorted() {
            guard case .ec(let curve) = PACEDomain.standardized(id) else { continue }
            let pair = try curve.generateKeyPair()
            caKeys[id] = pair.privateKey
            securityInfos.append(
                LDSBuilder.chipAuthenticationPublicKeyInfo(parameterId: id, publicKey: pair.publicKey, keyId: id))
            chipKeyInfos.append(securityInfos[securityInfos.count - 1])
        }
        securityInfos += try chipAuthenticationSecurityInfos(access.chipAuthentication, keys: &caKeys)
        if !securityInfos.isEmpty { groups[14] = LDSBuilder.dg14(securityInfos: PassportDER.setOf(securityInfos)) }

        let pki = try TestPKI.generate(country: country(parsed), countryCode: countryCode(parsed), algorithm: algorithm)
        let sod = try SODBuilder.build(dataGroups: groups, signer: pki.documentSignerKey, hash: .sha256)
        let cardSecurity =
            chipKeyInfos.isEmpty
            ? nil
            : try CardSecurityBuilder.build(
                securityInfos: PassportDER.setOf(access.pace.map(paceInfoDER) + chipKeyInfos),
                signer: pki.documentSignerKey)

        var files: [UInt16: [UInt8]] = [
            LDSFile.com.fileID: LDSBuilder.com(dataGroups: groups.keys.sorted()),
            LDSFile.sod.fileID: sod,
        ]
        for (n, bytes) in groups { files[LDSFile(dataGroup: n)!.fileID] = bytes }
        let cardAccess = Self.cardAccess(offering: access.pace)

        // Write everything.
        try createDirectory(directory)
        try pki.write(to: directory)
        var entries: [ProfileFile.Entry] = []
        for (fid, bytes) in files.sorted(by: { $0.key < $1.key }) {
            let name = fileName(fid)
            try write(bytes, to: path(directory, name + ".bin"))
            entries.append(.init(name: name, fid: passportHex4(fid), path: name + ".bin", df: "eMRTD"))
        }
        if let cardAccess {
            try write(cardAccess, to: path(directory, "EF.CardAccess.bin"))
            entries.append(.init(name: "EF.CardAccess", fid: "011C", path: "EF.CardAccess.bin", df: "MF"))
        }
        if let cardSecurity {
            try write(cardSecurity, to: path(directory, "EF.CardSecurity.bin"))
            entries.append(.init(name: "EF.CardSecurity", fid: "011D", path: "EF.CardSecurity.bin", df: "MF"))
        }
        if let aaKey {
            try write(
                Array(PEM.encode(aaKey, label: "PRIVATE KEY").utf8), to: path(directory, "aa-key.pem"), private: true)
        }
        var caKeyFiles: [String: String] = [:]
        for (id, key) in caKeys {
            caKeyFiles[String(id)] = "ca-key-\(id).bin"
            try write(key, to: path(directory, "ca-key-\(id).bin"), private: true)
        }
        let description = ProfileFile(
            format: 1, mrz: parsed.raw, can: can, access: access, algorithm: algorithm.rawValue,
            activeAuthenticationKey: aaKey == nil ? nil : "aa-key.pem",
            activeAuthenticationHash: aaHash.rawValue,
            chipAuthenticationKeys: caKeyFiles.isEmpty ? nil : caKeyFiles, csca: "csca.pem",
            documentSigner: "ds.pem", files: entries)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        guard let json = try? encoder.encode(description) else { throw .internalError("cannot encode profile.json") }
        try write([UInt8](json), to: path(directory, "profile.json"))

        var profile = DocumentProfile(
            directory: directory, mrz: parsed.raw, can: can, access: access, algorithm: algorithm,
            applicationFiles: files, cardAccess: cardAccess, activeAuthenticationKey: aaKey,
            activeAuthenticationHash: aaHash, chipAuthenticationKeys: caKeys)
        profile.cardSecurity = cardSecurity
        return profile
    }

    // MARK: Loading

    /// Loads a profile written by `make`. Throws INVALID_INPUT when `profile.json` is missing or malformed,
    /// STORAGE_ERROR when a listed file cannot be read.
    public static func load(directory: String) throws(TesseraError) -> DocumentProfile {
        let jsonPath = path(directory, "profile.json")
        guard let data = FileManager.default.contents(atPath: jsonPath) else {
            throw .invalidInput("no document profile at \(directory) (profile.json missing)")
        }
        let description: ProfileFile
        do { description = try JSONDecoder().decode(ProfileFile.self, from: data) } catch {
            throw .invalidInput("\(jsonPath) is malformed: \(error)")
        }
        guard description.format == 1 else {
            throw .invalidInput("\(jsonPath): unsupported format \(description.format)")
        }
        _ = try MRZ.parse(description.mrz)
        guard let algorithm = TestKeyAlgorithm(rawValue: description.algorithm) else {
            throw .invalidInput("\(jsonPath): unknown algorithm \(description.algorithm)")
        }
        var files: [UInt16: [UInt8]] = [:]
        var cardAccess: [UInt8]?
        var cardSecurity: [UInt8]?
        for entry in description.files {
            guard let fid = UInt16(entry.fid, radix: 16) else {
                throw .invalidInput("\(jsonPath): bad fid \(entry.fid)")
            }
            let bytes = try read(path(directory, entry.path))
            if entry.df == "MF" {
                guard fid == 0x011C || fid == 0x011D else {
                    throw .invalidInput("\(jsonPath): only EF.CardAccess and EF.CardSecurity live in the MF")
                }
                if fid == 0x011C { cardAccess = bytes } else { cardSecurity = bytes }
            } else {
                guard LDSFile(fileID: fid) != nil else {
                    throw .invalidInput("\(jsonPath): fid \(entry.fid) is not an LDS file")
                }
                files[fid] = bytes
            }
        }
        var aaKey: [UInt8]?
        if let keyFile = description.activeAuthenticationKey {
            guard let der = PEM.blocks(try read(path(directory, keyFile)), label: "PRIVATE KEY").first else {
                throw .invalidInput("\(keyFile) holds no PRIVATE KEY")
            }
            aaKey = der
        }
        var caKeys: [Int: [UInt8]] = [:]
        for (id, file) in description.chipAuthenticationKeys ?? [:] {
            guard let n = Int(id) else { throw .invalidInput("\(jsonPath): bad chip authentication key id \(id)") }
            caKeys[n] = try read(path(directory, file))
        }
        var profile = DocumentProfile(
            directory: directory, mrz: description.mrz, can: description.can, access: description.access,
            algorithm: algorithm, applicationFiles: files, cardAccess: cardAccess,
            activeAuthenticationKey: aaKey,
            activeAuthenticationHash: description.activeAuthenticationHash.flatMap(SignatureHash.init(rawValue:))
                ?? .sha256,
            chipAuthenticationKeys: caKeys)
        profile.cardSecurity = cardSecurity
        return profile
    }

    // MARK: Helpers

    /// profile.json.
    struct ProfileFile: Codable {
        struct Entry: Codable {
            var name: String
            /// Hex file identifier, e.g. "0101".
            var fid: String
            /// File name relative to the profile directory.
            var path: String
            /// "MF" or "eMRTD".
            var df: String
        }
        var format: Int
        var mrz: String
        var can: String?
        var access: AccessOptions
        var algorithm: String
        var activeAuthenticationKey: String?
        var activeAuthenticationHash: String?
        /// PACE-CAM private key files by parameter id.
        var chipAuthenticationKeys: [String: String]?
        var csca: String
        var documentSigner: String
        var files: [Entry]
    }

    static func path(_ directory: String, _ name: String) -> String {
        FilePaths.join(directory, name)
    }

    private static func fileName(_ fid: UInt16) -> String {
        switch LDSFile(fileID: fid) {
        case .com: "EF.COM"
        case .sod: "EF.SOD"
        case .dataGroup(let n): "DG\(n)"
        case nil: "EF.\(passportHex4(fid))"
        }
    }

    private static func createDirectory(_ directory: String) throws(TesseraError) {
        do { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) } catch {
            throw TesseraError(.storageError, "cannot create \(directory)")
        }
    }

    private static func write(_ bytes: [UInt8], to file: String, private isPrivate: Bool = false) throws(TesseraError) {
        let attributes: [FileAttributeKey: Any] = [.posixPermissions: isPrivate ? 0o600 : 0o644]
        guard FileManager.default.createFile(atPath: file, contents: Data(bytes), attributes: attributes) else {
            throw TesseraError(.storageError, "cannot write \(file)")
        }
    }

    private static func read(_ file: String) throws(TesseraError) -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw TesseraError(.storageError, "cannot read \(file)")
        }
        return [UInt8](data)
    }

    /// EF.CardAccess offering `options` (nil for none).
    static func cardAccess(offering options: [PACEOption]) -> [UInt8]? {
        options.isEmpty ? nil : PassportDER.setOf(options.map(paceInfoDER))
    }

    /// PACEInfo ::= SEQUENCE { protocol OID, version INTEGER (2), parameterId INTEGER }.
    private static func paceInfoDER(_ option: PACEOption) -> [UInt8] {
        PassportDER.sequence([
            TLV.encode(tag: 0x06, value: option.algorithm.oidBytes), PassportDER.integer(2),
            PassportDER.integer(option.parameterId),
        ])
    }

    /// DG11 full name: primary and secondary identifiers with '<' separators, as in the MRZ.
    private static func fullName(_ mrz: MRZ) -> String {
        let primary = mrz.primaryIdentifier.replacing(" ", with: "<")
        let secondary = mrz.secondaryIdentifier.replacing(" ", with: "<")
        return secondary.isEmpty ? primary : primary + "<<" + secondary
    }

    private static func dateOfIssue() -> String {
        let c = CivilTime(Date())
        var out = [UInt8]()
        for (v, width) in [(c.year, 4), (c.month, 2), (c.day, 2)] { CivilTime.appendDigits(v, width: width, to: &out) }
        return String(decoding: out, as: UTF8.self)
    }

    private static func country(_ mrz: MRZ) -> String {
        let c = mrz.issuingState.filter { $0 != "<" }
        return c.isEmpty ? "UTO" : c
    }

    private static func countryCode(_ mrz: MRZ) -> String {
        if let alpha2 = IssuingStateCodes.alpha2(docCode: country(mrz)) { return alpha2 }
        let c = country(mrz).filter { $0.isASCII && $0.isLetter }
        return c.count >= 2 ? String(c.prefix(2)) : "ZZ"
    }

    /// The active authentication key follows the PKI algorithm: the same curve (ECDSA, plain signatures) or RSA 2048.
    private static func activeAuthenticationKeySpec(_ algorithm: TestKeyAlgorithm) -> (
        key: SignatureKeySpec, hash: SignatureHash
    ) {
        switch algorithm {
        case .p256: (.ec(curve: "prime256v1"), .sha256)
        case .p384: (.ec(curve: "secp384r1"), .sha384)
        case .brainpoolP256r1: (.ec(curve: "brainpoolP256r1"), .sha256)
        case .brainpoolP384r1: (.ec(curve: "brainpoolP384r1"), .sha384)
        case .rsa2048, .rsaPSS2048: (.rsa(bits: 2048), .sha256)
        }
    }

    /// Memberwise (used by `make` and `load`).
    init(
        directory: String, mrz: String, can: String?, access: AccessOptions, algorithm: TestKeyAlgorithm,
        applicationFiles: [UInt16: [UInt8]], cardAccess: [UInt8]?, activeAuthenticationKey: [UInt8]?,
        activeAuthenticationHash: SignatureHash, chipAuthenticationKeys: [Int: [UInt8]]
    ) {
        self.directory = directory; self.mrz = mrz; self.can = can; self.access = access; self.algorithm = algorithm
        self.applicationFiles = applicationFiles; self.cardAccess = cardAccess
        self.activeAuthenticationKey = activeAuthenticationKey; self.activeAuthenticationHash = activeAuthenticationHash
        self.chipAuthenticationKeys = chipAuthenticationKeys
    }
}

private func passportHex4(_ value: UInt16) -> String {
    let s = String(value, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, 4 - s.count)) + s
}

/// Minimal DER encoding for the SecurityInfos an emulated chip carries.
enum PassportDER {
    static func sequence(_ items: [[UInt8]]) -> [UInt8] { TLV.encode(tag: 0x30, value: items.flatMap { $0 }) }

    /// SET OF with its elements sorted by encoding (X.690 §11.6).
    static func setOf(_ items: [[UInt8]]) -> [UInt8] {
        TLV.encode(tag: 0x31, value: items.sorted { $0.lexicographicallyPrecedes($1) }.flatMap { $0 })
    }

    /// A small non-negative INTEGER.
    static func integer(_ v: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        var x = v
        repeat { bytes.insert(UInt8(x & 0xFF), at: 0); x >>= 8 } while x > 0
        if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
        return TLV.encode(tag: 0x02, value: bytes)
    }

    /// The complete encodings of the elements of a DER SET (or SEQUENCE).
    static func elements(ofSet bytes: [UInt8]) -> [[UInt8]] {
        ((try? TLV.parse(bytes, allowTrailing: true).children()) ?? []).map(\.encoded)
    }
}
