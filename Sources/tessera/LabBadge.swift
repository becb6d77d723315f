import APDU
import AccessControl
import ArgumentParser
import Crypto
import Emulation
import FoundationEssentials
import ICAO
import PIV
import TesseraCore
import X509
import X509Support

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera lab make-badge`: a PIV badge (9E key, certificate, signed CHUID) on an emulated card's state file.
struct LabMakeBadge: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "make-badge",
        abstract:
            "Write a PIV badge issued by a lab badge CA onto an emulated PIV card (a state file of `tessera lab emulate-piv`).",
        discussion: """
            DIR holds the lab badge CA: badge-ca.pem (the certificate, an accessControl.anchors entry) and badge-ca-key.pem (its P-256 key), created when missing. The card (--state, created factory-fresh when missing) gets a P-256 Card Authentication key (9E) generated on the card, its certificate from the CA (the holder as common name, FASC-N and card UUID in the subjectAltName, EKU id-PIV-cardAuth) and a CHUID the CA signed; with --auth also a PIV Authentication key (9A) and certificate. With --revoke the CA's CRL (DIR/badge-ca.crl, an accessControl.crls entry) is rewritten to list the badge's certificate. Prints the badge id (the credential id of `tessera credentials`).

            EXAMPLES
              tessera lab make-badge /tmp/badges --state /tmp/alice.json --holder "Alice Example" --serial 7
              tessera lab make-badge /tmp/badges --state /tmp/bob.json --holder Bob --serial 8 --auth
              tessera lab make-badge /tmp/badges --state /tmp/old.json --holder Old --serial 9 --valid-days=-1
            """)

    @Argument(help: ArgumentHelp("Directory of the lab badge CA.", valueName: "DIR"))
    var directory: String
    @Option(help: ArgumentHelp("The emulated card's state file.", valueName: "FILE"))
    var state: String
    @Option(help: "The cardholder's name (the certificate's common name).")
    var holder: String
    @Option(help: "Card serial: the card UUID and FASC-N credential number derive from it.")
    var serial: UInt32 = 1
    @Option(
        name: .customLong("valid-days"),
        help: "Days the certificates and CHUID stay valid (negative: an expired badge).")
    var validDays: Int = 365
    @Flag(help: "Also generate the PIV Authentication key (9A) and its certificate (for --mode auth).")
    var auth = false
    @Flag(help: "List the badge's Card Authentication certificate in DIR/badge-ca.crl.")
    var revoke = false

    func run() async throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let authority = try await loadOrCreateAuthority()
        let card = try EmulatedPIVCard.open(stateFile: state, serial: serial)
        let app = PIVApplication(transport: InProcessCardTransport(card: card))
        try await app.select()
        try await app.authenticate(managementKey: .factoryDefault)
        let s = [UInt8(serial >> 24), UInt8((serial >> 16) & 0xFF), UInt8((serial >> 8) & 0xFF), UInt8(serial & 0xFF)]
        let identifiers = BadgeIdentifiers(
            fascn: BadgeWriter.testFASCN(credential: serial), uuid: Array("TESSERA-BADGE".utf8.prefix(12)) + s)
        let now = Date()
        let validity = Double(validDays) * 86400
        let issued = try await BadgeWriter(authority: authority).write(
            app, holder: holder, identifiers: identifiers,
            slots: auth ? [PIV.Slot.cardAuthentication, PIV.Slot.authentication] : [PIV.Slot.cardAuthentication],
            notBefore: validity < 0 ? now + validity - 86400 : now - 300, notAfter: now + validity)
        if revoke {
            let serialNumber = try ParsedCertificate(der: issued.cardAuthCertificate).serialNumber
            let crl = try await authority.crl(
                revoking: [serialNumber], thisUpdate: now - 60, nextUpdate: now + 30 * 86400)
            try Data(crl).write(to: URL(fileURLWithPath: directory + "/badge-ca.crl"))
        }
        print(issued.identifiers.badgeId ?? "")
    }

    private func loadOrCreateAuthority() async throws -> BadgeAuthority {
        let certPath = directory + "/badge-ca.pem", keyPath = directory + "/badge-ca-key.pem"
        if let certPEM = FileManager.default.contents(atPath: certPath),
            let keyPEM = FileManager.default.contents(atPath: keyPath)
        {
            let key = try P256.Signing.PrivateKey(pemRepresentation: String(decoding: keyPEM, as: UTF8.self))
            let certificate = try Certificate(pemEncoded: String(decoding: certPEM, as: UTF8.self))
            return BadgeAuthority(certificate: certificate, key: .init(key))
        }
        let now = Date()
        let key = P256.Signing.PrivateKey()
        let authority = try await BadgeAuthority.generate(
            name: "Tessera Lab Badge CA", key: key, notBefore: now - 86400, notAfter: now + 10 * 365 * 86400)
        try Data(key.pemRepresentation.utf8).write(to: URL(fileURLWithPath: keyPath))
        _ = chmod(keyPath, 0o600)
        try Data(try authority.parsedCertificate().pem.utf8).write(to: URL(fileURLWithPath: certPath))
        return authority
    }
}
