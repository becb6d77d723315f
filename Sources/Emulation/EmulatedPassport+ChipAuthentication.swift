import APDU
import ICAO
import TesseraCore

/// Chip side of Chip Authentication v1: MSE:Set KAT (3DES), or MSE:Set AT + GENERAL AUTHENTICATE (AES), under
/// secure messaging only. The answer goes out under the old keys; the new session (SSC 0) takes over after it.
extension EmulatedPassport {
    /// The chip's Chip Authentication keys and protocols from the profile; nil when it offers none. With
    /// `wrongChipAuthenticationKey` the chip holds fresh keys on the same parameters (a clone).
    static func chipAuthenticationChip(profile: DocumentProfile, misbehaviour: Misbehaviour) -> ChipAuthenticationChip?
    {
        let options = profile.access.chipAuthentication
        guard !options.isEmpty else { return nil }
        var keys: [ChipAuthenticationChip.Key] = []
        for id in Set(options.map(\.parameterId)).sorted() {
            guard let domain = PACEDomain.standardized(id) else { continue }
            var privateKey = profile.chipAuthenticationKeys[id]
            if misbehaviour.wrongChipAuthenticationKey { privateKey = try? domain.keyPair().privateKey }
            guard let privateKey else { continue }
            keys.append(.init(domain: domain, privateKey: privateKey, keyId: id))
        }
        return ChipAuthenticationChip(algorithms: options.map(\.algorithm), keys: keys)
    }

    func chipAuthenticationSetup(_ c: CommandAPDU, accessGranted: Bool) -> ResponseAPDU {
        guard let template = chipAuthenticationTemplate else { return ResponseAPDU(sw: .wrongP1P2) }
        guard accessGranted else { return ResponseAPDU(sw: .securityStatusNotSatisfied) }
        do {
            switch c.p2 {
            case 0xA6:
                chipAuthenticationState = nil
                nextSession = try template.setKAT(c.data)
                chipAuthenticationCount += 1
            case 0xA4:
                var state = template
                try state.setAT(c.data)
                chipAuthenticationState = state
            default:
                return ResponseAPDU(sw: .wrongP1P2)
            }
            return ResponseAPDU(sw: .success)
        } catch {
            chipAuthenticationState = nil
            return ResponseAPDU(sw: error.code == .unsupportedProtocol ? .incorrectData : .referenceNotFound)
        }
    }

    func chipAuthenticationGeneralAuthenticate(_ c: CommandAPDU, accessGranted: Bool) -> ResponseAPDU {
        guard accessGranted, var state = chipAuthenticationState else {
            return ResponseAPDU(sw: .conditionsNotSatisfied)
        }
        chipAuthenticationState = nil
        do {
            let result = try state.generalAuthenticate(c.data)
            nextSession = result.session
            chipAuthenticationCount += 1
            return ResponseAPDU(data: result.response, sw: .success)
        } catch {
            return ResponseAPDU(sw: .incorrectData)
        }
    }
}
