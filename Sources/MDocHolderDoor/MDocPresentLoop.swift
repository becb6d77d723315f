import Emulation
import MDoc
import NFC
import Presence
import TesseraCore
import VPCD

/// Where `mdoc.present` shows the document: `HOST:PORT` (a vpcd reader; HOST a name or IPv4 address, empty for
/// 127.0.0.1), else a libnfc connstring such as `pn532_uart:/dev/pts/3`.
public enum MDocPresentTarget: Equatable, Sendable {
    case vpcd(host: String, port: Int)
    case libnfc(String)

    public init(device: String) {
        if let colon = device.lastIndex(of: ":"), let port = Int(device[device.index(after: colon)...]),
            (1...65_535).contains(port), Self.isHost(device[..<colon])
        {
            let host = String(device[..<colon])
            self = .vpcd(host: host.isEmpty ? "127.0.0.1" : host, port: port)
        } else {
            self = .libnfc(device)
        }
    }

    /// A host name or IPv4 address (or empty), not a libnfc driver name (those have `_`, or are `pcsc`).
    static func isHost(_ text: Substring) -> Bool {
        text != "pcsc" && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "-") }
    }
}

/// The devices `mdoc.present` opens for a caller without `admin` (as `documents.read` reads only the daemon's
/// readers): `mdoc.presentDevices` and the `--nfc-device` connstrings (`auto`: what libnfc lists).
public struct MDocPresentDevices: Sendable {
    public let configured: [String]
    public let nfcDevices: [String]

    public init(configured: [String], nfcDevices: [String]) {
        self.configured = configured; self.nfcDevices = nfcDevices
    }

    /// UNAUTHORIZED (`data.field` `device`) unless `device` is one of them.
    public func check(_ device: String) async throws(TesseraError) {
        let target = MDocPresentTarget(device: device)
        var allowed = (configured + nfcDevices.filter { $0 != "auto" }).map(MDocPresentTarget.init(device:))
        if nfcDevices.contains("auto"), case .libnfc = target, let context = try? NFCContext.shared() {
            allowed += await context.listDevices().map(MDocPresentTarget.libnfc)
        }
        guard allowed.contains(target) else {
            throw TesseraError(
                .unauthorized,
                "mdoc.present opens only the daemon's configured devices (mdoc.presentDevices, --nfc-device) unless the caller has admin",
                details: ["field": "device"])
        }
    }
}

/// The presentation loop of `mdoc.present`: the holder as an emulated card on a vpcd reader or a libnfc device
/// until the reader ends the session, the duration passes or the front door's session is stopped.
public enum MDocPresentLoop {
    /// Presents `holder` on `target` for at most `duration`; `started` runs once the card is up (on vpcd: once
    /// pcscd has read its ATR, so a read started then finds it; the daemon's `mdoc.presenting` notification), `stopped` says whether `mdoc.stop` ended `session`, whose presence
    /// questions end with the loop. Returns why it ended: `sessionEnded`, `duration`, `cancelled`, or the libnfc
    /// emulator's own reason.
    public static func run(
        holder: MDocNFCHolder, on target: MDocPresentTarget, for duration: Duration, presence: PresenceBroker,
        session: String, stopped: @escaping @Sendable () -> Bool, started: @Sendable () async -> Void
    ) async throws(TesseraError) -> String {
        let card = MDocCard(holder: holder)
        let deadline = ContinuousClock.now.advanced(by: duration)
        let reason: String
        switch target {
        case .vpcd(let host, let port):
            let atrRead = Locked(false)
            let link = VirtualCardLink(
                card: card, host: host, port: port,
                onExchange: { _, _, _ in Task { await holder.sent() } },
                onEvent: { event in if event == .atrRequested { atrRead.withLock { $0 = true } } })
            try await link.start(timeout: .seconds(10))
            let seen = ContinuousClock.now + .seconds(5)
            while !atrRead.withLock({ $0 }), ContinuousClock.now < seen, !stopped() {
                try? await Task.sleep(for: .milliseconds(10))
            }
            await started()
            reason = await presentation(of: holder, until: deadline, stopped: stopped)
            await presence.end(group: session)
            await link.remove()
        case .libnfc(let connstring):
            let device = try await NFCDevice.open(connstring, context: try NFCContext.shared())
            let emulator: NFCCardEmulator
            do { emulator = try NFCCardEmulator(device: device, card: card) } catch {
                await device.close()
                throw error
            }
            await started()
            let watcher = Task {
                let why = await presentation(of: holder, until: deadline, stopped: stopped)
                emulator.stop()
                return why
            }
            let result: Result<NFCEmulationSummary, TesseraError>
            do throws(TesseraError) {
                result = .success(
                    try await emulator.run(for: duration) { event in
                        if case .exchange(let exchange) = event, exchange.delivered { Task { await holder.sent() } }
                    })
            } catch {
                result = .failure(error)
            }
            watcher.cancel()
            let why = await watcher.value
            // The watcher was cancelled because the emulator ended by itself: its reason (duration, …) counts.
            if why == "cancelled", !stopped(), case .success(let summary) = result {
                reason = summary.reason.rawValue
            } else {
                reason = why
            }
            await presence.end(group: session)
            await device.close()
            if case .failure(let error) = result {
                await presence.forget(group: session)
                throw error
            }
        }
        return reason
    }

    /// Waits until the reader ends the session (`sessionEnded`), `deadline` passes (`duration`), or `stopped` says
    /// so or the task is cancelled (`cancelled`: `mdoc.stop`, or the caller went away).
    static func presentation(
        of holder: MDocNFCHolder, until deadline: ContinuousClock.Instant, stopped: @Sendable () -> Bool
    ) async -> String {
        while true {
            if Task.isCancelled || stopped() { return "cancelled" }
            if await holder.terminated { return "sessionEnded" }
            if ContinuousClock.now >= deadline { return "duration" }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }
}
