import APDU
import TesseraCore

/// Which access-control protocol secured the channel.
public enum AccessProtocol: String, Sendable, Hashable {
    case pace, bac
}

/// The eMRTD application identifier (Doc 9303 Part 10).
public let eMRTDApplicationID: [UInt8] = [0xA0, 0x00, 0x00, 0x02, 0x47, 0x10, 0x01]

/// Reads EF.CardAccess unprotected (READ BINARY by SFI 0x1C, falling back to SELECT MF + SELECT 011C).
/// Returns nil when the chip has no such file or refuses to deliver it.
public func readCardAccess(transport: any APDUTransport) async throws(TesseraError) -> [UInt8]? {
    let reader = ElementaryFileReader(transport: transport)
    do {
        return try await reader.readFile(fid: 0x011C, sfi: 0x1C)
    } catch  where Set([TesseraError.Code.cardError, .accessDenied, .malformedData]).contains(error.code) {
        // fall through to the explicit SELECT path
    }
    do {
        // Some chips answer 6A82/6A87 to SELECT of the master file; after reset it is the current DF anyway.
        _ = try await transport.send(CommandAPDU.select(fileID: 0x3F00))
        return try await reader.readFile(fid: 0x011C)
    } catch  where Set([TesseraError.Code.cardError, .accessDenied, .malformedData]).contains(error.code) {
        return nil
    }
}

/// Secure messaging established with an eMRTD, and how.
public struct EstablishedAccess: Sendable {
    public let channel: SecureChannel
    public let protocolUsed: AccessProtocol
    /// The PACE algorithm, nil after BAC.
    public let paceAlgorithm: PACEAlgorithm?
    /// PACE-CAM only: the chip authentication data to verify against DG14.
    public let chipAuthentication: PACEChipAuthenticationData?
    /// Why PACE failed when access fell back to BAC; nil otherwise.
    public var paceFailure: String? = nil
    /// Chip quirks worked around while establishing access.
    public var workarounds: [String] = []
    /// EF.CardSecurity as read right after PACE (nil after BAC or when the chip has none).
    public var cardSecurity: [UInt8]? = nil
}

/// Establishes secure messaging with an eMRTD: reads EF.CardAccess and runs PACE when it offers a supported
/// PACEInfo (and `preferPACE`), otherwise BAC; then selects the eMRTD application (under SM after PACE, in
/// plain before BAC, as Part 11 requires). Throws ACCESS_DENIED for a wrong MRZ/CAN, UNSUPPORTED_PROTOCOL
/// when only BAC is possible but the password is a CAN.
public func establishAccess(
    transport: any APDUTransport, password: AccessPassword,
    preferPACE: Bool = true
) async throws(TesseraError) -> (channel: SecureChannel, protocolUsed: AccessProtocol) {
    let access = try await establishSecureAccess(transport: transport, password: password, preferPACE: preferPACE)
    return (access.channel, access.protocolUsed)
}

/// `establishAccess` with the PACE details (algorithm, PACE-CAM chip authentication data), EF.CardSecurity (read
/// right after PACE when the chip has one) and the quirks worked around. When PACE fails (not retryably) and the
/// password is the MRZ, BAC is tried; if BAC fails too, the PACE error is thrown.
public func establishSecureAccess(
    transport: any APDUTransport, password: AccessPassword,
    preferPACE: Bool = true
) async throws(TesseraError) -> EstablishedAccess {
    let selectApp = CommandAPDU.select(aid: eMRTDApplicationID)
    if preferPACE, let cardAccess = try await readCardAccess(transport: transport),
        let infos = try? SecurityInfos(encoded: cardAccess), let info = PACE.preferred(infos.paceInfos)
    {
        let outcome: PACEOutcome
        do {
            outcome = try await PACE.establish(transport: transport, password: password, info: info)
        } catch  where !error.retryable {
            // Doc 9303 Part 11 §4.2: a chip that also supports BAC may be read with it when PACE fails.
            guard case .mrz = password else { throw error }
            return try await establishBACAfterPACE(transport: transport, password: password, paceError: error)
        }
        let channel = SecureChannel(inner: transport, session: outcome.session)
        let cardSecurity = try await readCardSecurity(over: channel)
        let selected = try await channel.send(selectApp)
        guard selected.sw.isSuccess else {
            throw TesseraError(
                .cardError, "SELECT eMRTD application failed (\(selected.sw))",
                details: ["sw": .string(selected.sw.description)])
        }
        var access = EstablishedAccess(
            channel: channel, protocolUsed: .pace, paceAlgorithm: outcome.algorithm,
            chipAuthentication: outcome.chipAuthentication)
        access.workarounds = outcome.workarounds
        access.cardSecurity = cardSecurity
        return access
    }
    guard case .mrz(let mrzInformation) = password else {
        throw TesseraError(.unsupportedProtocol, "the chip offers no usable PACE; BAC needs the MRZ, not a CAN")
    }
    let selected = try await transport.send(selectApp)
    guard selected.sw.isSuccess else {
        throw TesseraError(
            .cardError, "SELECT eMRTD application failed (\(selected.sw))",
            details: ["sw": .string(selected.sw.description)])
    }
    let session = try await BAC.perform(transport: transport, mrzInformation: mrzInformation)
    return EstablishedAccess(
        channel: SecureChannel(inner: transport, session: session), protocolUsed: .bac,
        paceAlgorithm: nil, chipAuthentication: nil)
}

/// BAC after a failed PACE; when BAC fails too (a PACE-only chip, or a wrong MRZ) the PACE error is thrown.
private func establishBACAfterPACE(
    transport: any APDUTransport, password: AccessPassword,
    paceError: TesseraError
) async throws(TesseraError) -> EstablishedAccess {
    guard case .mrz(let mrzInformation) = password else { throw paceError }
    do throws(TesseraError) {
        let selected = try await transport.send(CommandAPDU.select(aid: eMRTDApplicationID))
        guard selected.sw.isSuccess else { throw paceError }
        let session = try await BAC.perform(transport: transport, mrzInformation: mrzInformation)
        var access = EstablishedAccess(
            channel: SecureChannel(inner: transport, session: session), protocolUsed: .bac,
            paceAlgorithm: nil, chipAuthentication: nil)
        access.paceFailure = paceError.message
        access.workarounds = ["PACE failed (\(paceError.message)); fell back to BAC"]
        return access
    } catch  where !error.retryable {
        throw paceError
    }
}

/// Reads EF.CardSecurity (SFI 1D in the master file, still the current DF right after PACE) under secure
/// messaging; nil when the chip has none or refuses it. Secure messaging errors and retryable ones end the read.
func readCardSecurity(over channel: SecureChannel) async throws(TesseraError) -> [UInt8]? {
    do throws(TesseraError) {
        return try await ElementaryFileReader(transport: channel).readFile(
            fid: CardSecurity.fileID, sfi: CardSecurity.shortFileID)
    } catch  where !error.retryable && error.code != .secureMessagingError {
        return nil
    }
}
