import CTAPHID
import Logging
import ServiceLifecycle
import TesseraCore
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// The authenticator as a virtual FIDO HID device through `/dev/uhid` (`--ctap-uhid`), for browsers: UHID_CREATE2
/// with the FIDO report descriptor, output reports in, UHID_INPUT2 reports out. Who may use it is decided by the
/// hidraw node's permissions (udev/70-tessera-ctap.rules); presence for it may be confirmed by any `sign` holder.
public struct CTAPUHIDService: Service {
    static let devicePath = "/dev/uhid"
    static let deviceName = "Tessera CTAP"
    let hub: CTAPHIDHub
    let logger: Logger

    public init(hub: CTAPHIDHub, logger: Logger) {
        self.hub = hub
        self.logger = logger
    }

    public func run() async throws {
        let fd = open(Self.devicePath, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else {
            throw TesseraError(
                .internalError,
                """
                --ctap-uhid: cannot open \(Self.devicePath): \(String(cString: strerror(errno))) (needs the uhid \
                kernel module and write access, see udev/70-tessera-ctap.rules)
                """)
        }
        defer { close(fd) }
        @Sendable func write(_ event: [UInt8]) -> Bool {
            event.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } == event.count
        }
        guard write(UHID.create2(name: Self.deviceName, vendor: 0x1209, product: 0x7E55)) else {
            throw TesseraError(.internalError, "--ctap-uhid: UHID_CREATE2 failed: \(String(cString: strerror(errno)))")
        }
        let owner = await hub.add(
            CTAPHIDHub.Connection(
                peer: nil,
                send: { reports in
                    for r in reports { _ = write(UHID.input2(r)) }
                }, shutdown: { _ = write(UHID.destroy()) }))
        let reports = AsyncStream<[UInt8]> { continuation in
            DedicatedThread.detach(name: "tessera.ctap.uhid") {
                var buffer = [UInt8](repeating: 0, count: UHID.eventSize)
                while true {
                    let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0, let event = UHID.parse(Array(buffer[0..<n])) else { break }
                    if case .output(let report) = event { continuation.yield(report) }
                }
                continuation.finish()
            }
        }
        logger.info("ctap uhid device created", metadata: ["name": "\(Self.deviceName)"])
        await withGracefulShutdownHandler {
            for await report in reports { await hub.receive(report, from: owner) }
        } onGracefulShutdown: {
            // UHID_DESTROY removes the device; the reader then sees the end of the stream.
            _ = write(UHID.destroy())
        }
        await hub.disconnected(owner)
    }
}
