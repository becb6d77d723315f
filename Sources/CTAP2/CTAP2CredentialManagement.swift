import CBOR
import CryptoPrimitives

/// authenticatorCredentialManagement parameters (§6.8).
public struct CredentialManagementRequest: Sendable {
    public var subCommand: Int
    /// subCommandParams as sent (the pinUvAuthParam covers their encoding).
    public var subCommandParams: CBORValue?
    public var pinUvAuthProtocol: Int?
    public var pinUvAuthParam: [UInt8]?

    /// Parses the request map; the CTAP2 status of the first problem.
    public init(_ map: CBORValue) throws(CTAP2Error) {
        let p = try Params(map)
        guard let sub = try p.optionalInt(1) else { throw CTAP2Error(.missingParameter, "subCommand missing") }
        subCommand = sub
        subCommandParams = try p.optionalMap(2)
        pinUvAuthProtocol = try p.optionalInt(3)
        pinUvAuthParam = try p.optionalBytes(4)
    }

    /// The credential id of subCommandParams' credentialID descriptor.
    public func credentialId() throws(CTAP2Error) -> [UInt8] {
        guard let d = subCommandParams?[2] else { throw CTAP2Error(.missingParameter, "credentialID missing") }
        guard let id = try MakeCredentialRequest.descriptorIds([d]).first else {
            throw CTAP2Error(.invalidParameter, "credentialID is not a public-key descriptor")
        }
        return id
    }
}

/// The RPs and credentials still to return by enumerateRPsGetNextRP / enumerateCredentialsGetNextCredential to
/// the session that began the enumeration.
struct CredentialEnumeration {
    var session: CTAP2Session?
    var rps: [String] = []
    var credentials: [CTAP2Credential] = []
}

extension CTAP2Authenticator {
    /// Nominal maxPossibleRemainingResidentCredentialsCount: tokens do not say how many keys they can still hold.
    static let nominalRemainingCredentials = 100

    func credentialManagement(_ r: CredentialManagementRequest, session: CTAP2Session) async throws(CTAP2Error)
        -> CBORValue?
    {
        let isContinuation = r.subCommand == 0x03 || r.subCommand == 0x05
        // Only the channel that began an enumeration continues it; another channel's subcommands leave it alone.
        if isContinuation, enumeration.session != session {
            throw CTAP2Error(.notAllowed, "no enumeration of this channel to continue")
        }
        let previous = enumeration
        if isContinuation || enumeration.session == session { enumeration = CredentialEnumeration() }
        switch r.subCommand {
        case 0x01:  // getCredsMetadata
            try authorize(r, rpId: nil)
            let count = try await backend.discoverableCredentials().count
            return [1: CBORValue(count), 2: CBORValue(Self.nominalRemainingCredentials)]
        case 0x02:  // enumerateRPsBegin
            try authorize(r, rpId: nil)
            var rps: [String] = []
            for c in try await backend.discoverableCredentials() where !rps.contains(c.rpId) { rps.append(c.rpId) }
            guard let first = rps.first else { throw CTAP2Error(.noCredentials, "no discoverable credentials") }
            enumeration = CredentialEnumeration(session: session, rps: Array(rps.dropFirst()))
            return [3: ["id": .textString(first)], 4: .byteString(rpIdHash(first)), 5: CBORValue(rps.count)]
        case 0x03:  // enumerateRPsGetNextRP
            guard let next = previous.rps.first else { throw CTAP2Error(.notAllowed, "no RP enumeration to continue") }
            enumeration = CredentialEnumeration(session: session, rps: Array(previous.rps.dropFirst()))
            return [3: ["id": .textString(next)], 4: .byteString(rpIdHash(next))]
        case 0x04:  // enumerateCredentialsBegin
            guard let hash = r.subCommandParams?[1] else { throw CTAP2Error(.missingParameter, "rpIDHash missing") }
            guard let hashBytes = hash.bytesValue else { throw CTAP2Error(.cborUnexpectedType, "rpIDHash not bytes") }
            let all = try await backend.discoverableCredentials()
            guard let rpId = all.first(where: { rpIdHash($0.rpId) == hashBytes })?.rpId else {
                try authorize(r, rpId: nil)
                throw CTAP2Error(.noCredentials, "no discoverable credentials for this rpIDHash")
            }
            try authorize(r, rpId: rpId)
            let credentials = all.filter { $0.rpId == rpId }
            enumeration = CredentialEnumeration(session: session, credentials: Array(credentials.dropFirst()))
            guard let first = credentials.first else { throw CTAP2Error(.noCredentials, "no credentials for this RP") }
            var out = try credentialEntry(first)
            out.append((9, CBORValue(credentials.count)))
            return .map(out.sorted { $0.key.intValue ?? 0 < $1.key.intValue ?? 0 })
        case 0x05:  // enumerateCredentialsGetNextCredential
            guard let next = previous.credentials.first else {
                throw CTAP2Error(.notAllowed, "no credential enumeration to continue")
            }
            enumeration = CredentialEnumeration(session: session, credentials: Array(previous.credentials.dropFirst()))
            return .map(try credentialEntry(next))
        case 0x06:  // deleteCredential
            let credential = try await target(r)
            try await backend.deleteCredential(credential)
            return nil
        case 0x07:  // updateUserInformation
            guard let userMap = r.subCommandParams?[3] else { throw CTAP2Error(.missingParameter, "user missing") }
            guard userMap.mapValue != nil, let userId = userMap["id"]?.bytesValue else {
                throw CTAP2Error(.invalidParameter, "user lacks its id")
            }
            let credential = try await target(r)
            guard userId == credential.user.id else {
                throw CTAP2Error(.invalidParameter, "user.id is not the credential's user")
            }
            try await backend.updateUser(
                credential,
                user: CTAP2User(
                    id: userId, name: userMap["name"]?.textValue, displayName: userMap["displayName"]?.textValue))
            return nil
        default:
            throw CTAP2Error(.invalidSubcommand, "credentialManagement subCommand \(r.subCommand)")
        }
    }

    /// The credential deleteCredential/updateUserInformation name, after the pinUvAuthParam check for its RP.
    private func target(_ r: CredentialManagementRequest) async throws(CTAP2Error) -> CTAP2Credential {
        let id = try r.credentialId()
        guard let credential = try await backend.discoverableCredentials().first(where: { $0.id == id }) else {
            try authorize(r, rpId: nil)
            throw CTAP2Error(.noCredentials, "no such discoverable credential")
        }
        try authorize(r, rpId: credential.rpId)
        return credential
    }

    /// pinUvAuthParam over subCommand ‖ subCommandParams with a token holding the cm permission (§6.8).
    private func authorize(_ r: CredentialManagementRequest, rpId: String?) throws(CTAP2Error) {
        guard let param = r.pinUvAuthParam else {
            throw CTAP2Error(.pinUvAuthTokenRequired, "credentialManagement needs a pinUvAuthParam")
        }
        try verifyPinUvAuthParam(
            param, protocol: r.pinUvAuthProtocol,
            message: [UInt8(r.subCommand)] + (r.subCommandParams?.encodedWithDistinctKeys() ?? []),
            permission: .credentialManagement, rpId: rpId, bind: false)
    }

    private func rpIdHash(_ rpId: String) -> [UInt8] { MessageDigest.sha256(Array(rpId.utf8)) }

    /// user, credentialID, publicKey, credProtect of one credential (§6.8.4).
    private func credentialEntry(_ c: CTAP2Credential) throws(CTAP2Error) -> [(key: CBORValue, value: CBORValue)] {
        let key: CBORValue
        do { key = try CBORValue(decoding: c.publicKey) } catch {
            throw CTAP2Error(.other, "stored public key is not CBOR")
        }
        return [
            (6, c.user.cbor), (7, ["id": .byteString(c.id), "type": "public-key"]), (8, key),
            (10, CBORValue(Int(c.credProtect.rawValue))),
        ]
    }
}
