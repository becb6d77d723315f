import TesseraCore

/// SSH agent protocol numbers and messages (RFC 9987, formerly draft-miller-ssh-agent).
public enum AgentMessageType {
    public static let failure: UInt8 = 5
    public static let success: UInt8 = 6
    public static let requestIdentities: UInt8 = 11
    public static let identitiesAnswer: UInt8 = 12
    public static let signRequest: UInt8 = 13
    public static let signResponse: UInt8 = 14
    public static let addIdentity: UInt8 = 17
    public static let removeIdentity: UInt8 = 18
    public static let removeAllIdentities: UInt8 = 19
    public static let addSmartcardKey: UInt8 = 20
    public static let removeSmartcardKey: UInt8 = 21
    public static let lock: UInt8 = 22
    public static let unlock: UInt8 = 23
    public static let addIDConstrained: UInt8 = 25
    public static let addSmartcardKeyConstrained: UInt8 = 26
    public static let `extension`: UInt8 = 27
    public static let extensionFailure: UInt8 = 28
}

/// SIGN_REQUEST flags choosing the RSA hash (RFC 8332 §3.2, draft-miller-ssh-agent §4.5.1).
public enum AgentSignFlags {
    public static let rsaSHA2_256: UInt32 = 2
    public static let rsaSHA2_512: UInt32 = 4
}

/// Key constraints of the *_CONSTRAINED messages.
public struct AgentConstraints: Sendable, Equatable {
    /// Seconds the key (or unlock) stays valid.
    public var lifetime: UInt32?
    /// Each use must be confirmed.
    public var confirm = false
    /// Extension constraints by name (recorded, not enforced beyond refusing unknown ones).
    public var extensions: [String] = []

    public init() {}

    static let lifetimeID: UInt8 = 1
    static let confirmID: UInt8 = 2
    static let extensionID: UInt8 = 255

    static func parse(_ r: inout SSHReader) throws(TesseraError) -> AgentConstraints {
        var c = AgentConstraints()
        while !r.isAtEnd {
            switch try r.byte() {
            case lifetimeID: c.lifetime = try r.uint32()
            case confirmID: c.confirm = true
            case extensionID:
                c.extensions.append(try r.text())
                return c  // an extension constraint's body is opaque and runs to the end of the message
            case let other: throw TesseraError(.malformedData, "unknown key constraint \(other)")
            }
        }
        return c
    }
}

/// A request from an SSH agent client.
public enum AgentRequest: Sendable, Equatable {
    case requestIdentities
    case sign(keyBlob: [UInt8], data: [UInt8], flags: UInt32)
    /// ADD_IDENTITY / ADD_ID_CONSTRAINED: a software private key (refused by Tessera).
    case addIdentity
    case removeIdentity(keyBlob: [UInt8])
    case removeAllIdentities
    /// `ssh-add -s READER`: the reader id names a token; `pin` unlocks it.
    case addSmartcardKey(readerID: String, pin: String, constraints: AgentConstraints)
    case removeSmartcardKey(readerID: String)
    case lock(passphrase: [UInt8])
    case unlock(passphrase: [UInt8])
    case `extension`(name: String, contents: [UInt8])
    case unknown(type: UInt8)

    /// Parses one message (the frame body without its length); throws `MALFORMED_DATA` when it does not parse.
    public static func parse(_ frame: [UInt8]) throws(TesseraError) -> AgentRequest {
        var r = SSHReader(frame)
        let type = try r.byte()
        let request: AgentRequest
        switch type {
        case AgentMessageType.requestIdentities:
            request = .requestIdentities
        case AgentMessageType.signRequest:
            request = .sign(keyBlob: try r.string(), data: try r.string(), flags: try r.uint32())
        case AgentMessageType.addIdentity, AgentMessageType.addIDConstrained:
            return .addIdentity
        case AgentMessageType.removeIdentity:
            request = .removeIdentity(keyBlob: try r.string())
        case AgentMessageType.removeAllIdentities:
            request = .removeAllIdentities
        case AgentMessageType.addSmartcardKey, AgentMessageType.addSmartcardKeyConstrained:
            let reader = try r.text(), pin = try r.text()
            let constraints =
                type == AgentMessageType.addSmartcardKeyConstrained
                ? try AgentConstraints.parse(&r) : AgentConstraints()
            return .addSmartcardKey(readerID: reader, pin: pin, constraints: constraints)
        case AgentMessageType.removeSmartcardKey:
            let reader = try r.text()
            _ = try r.string()  // PIN field, unused
            request = .removeSmartcardKey(readerID: reader)
        case AgentMessageType.lock:
            request = .lock(passphrase: try r.string())
        case AgentMessageType.unlock:
            request = .unlock(passphrase: try r.string())
        case AgentMessageType.extension:
            return .extension(name: try r.text(), contents: r.remaining)
        default:
            return .unknown(type: type)
        }
        guard r.isAtEnd else { throw TesseraError(.malformedData, "trailing bytes in agent message \(type)") }
        return request
    }
}

/// An agent reply, encoded with `bytes` (the frame body; the server adds the length).
public enum AgentResponse: Sendable, Equatable {
    case failure
    case success
    case identities([(blob: [UInt8], comment: String)])
    case signature([UInt8])
    case extensionFailure
    /// SUCCESS carrying extension-specific contents (e.g. the `query` list).
    case extensionReply([UInt8])

    public var bytes: [UInt8] {
        var w = SSHWriter()
        switch self {
        case .failure: w.byte(AgentMessageType.failure)
        case .success: w.byte(AgentMessageType.success)
        case .extensionFailure: w.byte(AgentMessageType.extensionFailure)
        case .identities(let list):
            w.byte(AgentMessageType.identitiesAnswer)
            w.uint32(UInt32(list.count))
            for item in list { w.string(item.blob); w.string(item.comment) }
        case .signature(let blob):
            // The hot answer: one buffer of its final size.
            var s = SSHWriter(capacity: 5 + blob.count)
            s.byte(AgentMessageType.signResponse)
            s.string(blob)
            return s.bytes
        case .extensionReply(let contents):
            w.byte(AgentMessageType.success)
            return w.bytes + contents
        }
        return w.bytes
    }

    public static func == (a: AgentResponse, b: AgentResponse) -> Bool { a.bytes == b.bytes }
}

/// Agent framing: a uint32 length then that many bytes. OpenSSH's agent refuses frames over 256 KiB.
public enum AgentFraming {
    public static let maxFrameBytes = 256 * 1024

    /// Wraps a message body in its length prefix.
    public static func frame(_ body: [UInt8]) -> [UInt8] {
        var w = SSHWriter()
        w.string(body)
        return w.bytes
    }
}

/// The `session-bind@openssh.com` extension: host key, session id, signature, forwarding flag.
public struct SessionBind: Sendable, Equatable {
    public var hostKey: [UInt8]
    public var sessionID: [UInt8]
    public var signature: [UInt8]
    public var forwarding: Bool

    public init(_ contents: [UInt8]) throws(TesseraError) {
        var r = SSHReader(contents)
        hostKey = try r.string()
        sessionID = try r.string()
        signature = try r.string()
        forwarding = try r.byte() != 0
        guard r.isAtEnd else { throw TesseraError(.malformedData, "trailing bytes in session-bind") }
    }
}
