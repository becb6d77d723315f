import NIOCore
import NIOHTTP1
import TesseraCore

/// Who may use the station's screen: the browser that opened the URL `tessera kiosk` printed. The URL carries a
/// secret made at start (256 bits from the system CSPRNG, base64url); `GET /?token=SECRET` exchanges it once for
/// the session cookie (HttpOnly, SameSite=Strict) and redirects to `/`, so the secret leaves the address bar.
/// Every other request needs the cookie. A second exchange is refused while a browser holds the session, unless
/// the kiosk runs with `--take-over`: then it replaces the session and the old cookie stops working.
public final class KioskAccess: Sendable {
    public static let cookieName = "tessera_kiosk"
    /// The secret of the printed URL.
    public let token: String
    let takeOver: Bool
    /// The current session cookie's value (nil before the first exchange).
    private let session = Locked<[UInt8]?>(nil)

    public init(takeOver: Bool = false) {
        self.token = Self.secret()
        self.takeOver = takeOver
    }

    /// The URL the station's browser opens.
    public func url(host: String, port: Int) -> String {
        let shown = host.contains(":") ? "[\(host)]" : host
        return "http://\(shown):\(port)/?token=\(token)"
    }

    static func secret() -> String {
        var rng = SystemRandomNumberGenerator()
        return Base64URL.encode((0..<32).map { _ in UInt8.random(in: .min ... .max, using: &rng) })
    }

    /// What an exchange of `presented` gives: the cookie value to set, or why not.
    enum Exchange: Equatable {
        case granted(cookie: String)
        case wrongToken
        case held
    }

    /// Exchanges the URL's secret for the session cookie. The browser that holds the session keeps its cookie.
    func exchange(_ presented: String, cookie: String?) -> Exchange {
        guard ConstantTime.equal(Array(presented.utf8), Array(token.utf8)) else { return .wrongToken }
        return session.withLock { current in
            if let current, let cookie, ConstantTime.equal(current, Array(cookie.utf8)) {
                return .granted(cookie: cookie)
            }
            guard current == nil || takeOver else { return .held }
            let fresh = Self.secret()
            current = Array(fresh.utf8)
            return .granted(cookie: fresh)
        }
    }

    /// Whether `cookie` is the current session's.
    func admits(_ cookie: String?) -> Bool {
        guard let cookie else { return false }
        let presented = Array(cookie.utf8)
        return session.withLock { current in current.map { ConstantTime.equal($0, presented) } ?? false }
    }

    /// The session cookie a request carries (`cookie` headers, `name=value; …`).
    static func cookie(_ head: HTTPRequestHead) -> String? {
        for header in head.headers[canonicalForm: "cookie"] {
            for pair in header.split(separator: ";") {
                let kv = pair.split(separator: "=", maxSplits: 1)
                guard kv.count == 2, kv[0].trimmingSpaces == cookieName else { continue }
                return String(kv[1].trimmingSpaces)
            }
        }
        return nil
    }

    /// The `token` parameter of a request's query.
    static func token(_ uri: String) -> String? {
        guard let query = uri.split(separator: "?", maxSplits: 1).dropFirst().first else { return nil }
        for pair in query.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            if kv.count == 2, kv[0] == "token" { return String(kv[1]) }
        }
        return nil
    }

    /// The `set-cookie` value for a granted exchange.
    static func setCookie(_ value: String) -> String {
        "\(cookieName)=\(value); Path=/; HttpOnly; SameSite=Strict"
    }
}

extension Substring {
    fileprivate var trimmingSpaces: Substring {
        var s = self
        while s.first == " " { s.removeFirst() }
        while s.last == " " { s.removeLast() }
        return s
    }
}
