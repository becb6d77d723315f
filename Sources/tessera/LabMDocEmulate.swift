import ArgumentParser
import CBOR
import Crypto
import Emulation
import FoundationEssentials
import ICAO
import MDoc
import TesseraCore
import VPCD
import X509Support

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera lab emulate-mdoc DIR`: a `make-mdoc` mDL presented as an NFC mdoc in a vpcd reader.
struct LabEmulateMDoc: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "emulate-mdoc",
        abstract: "Present a test mDL (tessera lab make-mdoc) as an NFC mdoc in a vpcd reader until interrupted.",
        discussion: """
            The card answers ISO/IEC 18013-5 NFC engagement (a Type 4 Tag holding the static Handover Select with a \
            fresh DeviceEngagement) and retrieval (SELECT A0000002480400, ENVELOPE / GET RESPONSE, chained or \
            extended length). Each DeviceRequest is answered with the requested elements of DIR/issuer-signed.cbor \
            and a deviceSignature by DIR/device-key.pem. Lab behaviour: elements are released without a consent \
            step. With --reader-root the request must carry a detached readerAuth whose chain validates to that \
            root (signatures, validity, EKU 1.0.18013.5.1.6) and whose signature verifies; otherwise the session \
            ends with status 20 and nothing is released.

            EXAMPLES
              tessera lab make-mdoc /tmp/mdl && tessera lab emulate-mdoc /tmp/mdl --vpcd 127.0.0.1:35963
            """)

    @Argument(help: ArgumentHelp("Directory written by `tessera lab make-mdoc`.", valueName: "DIR")) var directory:
        String
    @Option(
        help: ArgumentHelp("The vpcd reader's address (pcscd's reader.conf CHANNELID port).", valueName: "HOST:PORT"))
    var vpcd: String = "127.0.0.1:35963"
    @Option(
        name: .customLong("reader-root"),
        help: ArgumentHelp("Require readerAuth issued by this root (PEM/DER; repeatable).", valueName: "CERT"))
    var readerRoot: [String] = []
    @Flag(name: .customLong("log-apdus"), help: "Trace every APDU exchange on stderr.")
    var logAPDUs = false

    func run() async throws {
        let (host, port) = try LabOutput.vpcdAddress(vpcd)
        let holder: MDocNFCHolder
        do throws(TesseraError) {
            holder = try Self.holder(directory: directory, readerRoots: readerRoot)
        } catch {
            throw LabOutput.fail(error, status: 1)
        }
        let hooks = try LabOutput.vpcdHooks(trace: nil, log: logAPDUs)
        let link = VirtualCardLink(
            card: MDocCard(holder: holder), host: host.isEmpty ? "127.0.0.1" : host, port: port,
            reconnects: true, onExchange: hooks.exchange, onEvent: hooks.event)
        let stop = LabSignals.install()
        do { try await link.start(timeout: .seconds(10)) } catch {
            throw LabOutput.fail(error, status: 2)
        }
        LabOutput.line("inserted mdoc \(directory) into vpcd \(host):\(port)")
        await LabSignals.waitForStop(stop)
        await link.remove()
        LabOutput.line("removed; \(await holder.requests.count) requests served")
    }

    /// The holder of a `make-mdoc` directory: its issuer-signed.cbor, with device-key.pem signing, releasing what is
    /// asked (to a reader issued by one of `readerRoots`' certificates when any are given).
    static func holder(directory: String, readerRoots: [String]) throws(TesseraError) -> MDocNFCHolder {
        func path(_ name: String) -> String { FilePaths.join(directory, name) }
        let issuerSigned = try IssuerSigned(bytes: try MDocFiles.read(path("issuer-signed.cbor")))
        let pem = String(decoding: try MDocFiles.read(path("device-key.pem")), as: UTF8.self)
        guard let deviceKey = try? P256.Signing.PrivateKey(pemRepresentation: pem) else {
            throw TesseraError(.malformedData, "device-key.pem is not a P-256 private key")
        }
        var roots: [ParsedCertificate] = []
        for rootPath in readerRoots { roots += try MDocFiles.certificates(rootPath) }
        return try MDocNFCHolder { [roots] request, transcript in
            await answer(
                request, transcript: transcript, issuerSigned: issuerSigned, deviceKey: deviceKey, roots: roots)
        }
    }

    /// The requested elements and a deviceSignature, or nil (status 20) when the reader is not trusted.
    static func answer(
        _ request: DeviceRequest, transcript: SessionTranscript, issuerSigned: IssuerSigned,
        deviceKey: P256.Signing.PrivateKey, roots: [ParsedCertificate]
    ) async -> [UInt8]? {
        guard let doc = request.docRequests.first(where: { $0.docType == MDL.docType }) else { return nil }
        if !roots.isEmpty {
            guard
                (try? await MDocReaderTrust.evaluate(
                    doc, sessionTranscript: transcript, roots: roots, supportedAuthorityKeyIdentifiers: nil,
                    now: Date())) != nil
            else { return nil }
        }
        return await MDocPresentation.releasingRequested(
            request, sessionTranscript: transcript, issuerSigned: issuerSigned, docType: MDL.docType,
            deviceKey: deviceKey)
    }
}
