/// The drawings the station's page shows (made for Tessera, served from the binary as `GET /drawings/NAME.svg`):
/// where the MRZ is on a passport's data page and on the back of an identity card, where the card access number is,
/// how to lay the document on the reader, and the face guide over the camera preview. Shapes only, no words: the
/// page gives each its text (`alt`) from the message catalogue.
enum KioskDrawings {
    static let all: [String: String] = [
        "passport-mrz": passportMRZ, "card-mrz": cardMRZ, "card-can": cardCAN, "reader": reader,
        "face-guide": faceGuide,
    ]

    /// The drawing a `GET /drawings/NAME.svg` path names, if there is one.
    static func svg(path: String) -> String? {
        guard path.hasPrefix("/drawings/"), path.hasSuffix(".svg") else { return nil }
        return all[String(path.dropFirst("/drawings/".count).dropLast(".svg".count))]
    }

    /// A passport's data page: photo, printed lines, and the two MRZ lines at the bottom, highlighted.
    static let passportMRZ = #"""
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 250 176" role="img">
        <rect x="2" y="2" width="246" height="172" rx="10" fill="#fdf8ec" stroke="#5b4a2f" stroke-width="3"/>
        <rect x="14" y="22" width="58" height="76" rx="4" fill="#cfd8e3" stroke="#5b6b7f" stroke-width="2"/>
        <circle cx="43" cy="50" r="14" fill="#8a9bb0"/><path d="M20 96c4-20 42-20 46 0z" fill="#8a9bb0"/>
        <g fill="#9a8d76"><rect x="84" y="24" width="120" height="7" rx="3"/><rect x="84" y="40" width="90" height="7" rx="3"/>
        <rect x="84" y="56" width="140" height="7" rx="3"/><rect x="84" y="72" width="70" height="7" rx="3"/>
        <rect x="84" y="88" width="110" height="7" rx="3"/></g>
        <rect x="8" y="118" width="234" height="50" rx="6" fill="#fff3b0" stroke="#c77700" stroke-width="4"/>
        <g fill="#222"><rect x="16" y="128" width="218" height="9" rx="2"/><rect x="16" y="148" width="218" height="9" rx="2"/></g>
        </svg>
        """#

    /// The back of an identity card: three MRZ lines at the bottom, highlighted.
    static let cardMRZ = #"""
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 250 158" role="img">
        <rect x="2" y="2" width="246" height="154" rx="14" fill="#eef4fb" stroke="#34506e" stroke-width="3"/>
        <g fill="#9fb2c6"><rect x="16" y="18" width="150" height="7" rx="3"/><rect x="16" y="34" width="110" height="7" rx="3"/>
        <rect x="16" y="50" width="130" height="7" rx="3"/></g>
        <rect x="8" y="76" width="234" height="74" rx="6" fill="#fff3b0" stroke="#c77700" stroke-width="4"/>
        <g fill="#222"><rect x="16" y="86" width="218" height="9" rx="2"/><rect x="16" y="108" width="218" height="9" rx="2"/>
        <rect x="16" y="130" width="218" height="9" rx="2"/></g>
        </svg>
        """#

    /// The front of an identity card: photo, printed lines, and the 6-digit card access number bottom right.
    static let cardCAN = #"""
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 250 158" role="img">
        <rect x="2" y="2" width="246" height="154" rx="14" fill="#eef4fb" stroke="#34506e" stroke-width="3"/>
        <rect x="14" y="20" width="62" height="80" rx="4" fill="#cfd8e3" stroke="#5b6b7f" stroke-width="2"/>
        <circle cx="45" cy="50" r="15" fill="#8a9bb0"/><path d="M20 98c4-22 46-22 50 0z" fill="#8a9bb0"/>
        <g fill="#9fb2c6"><rect x="88" y="22" width="120" height="7" rx="3"/><rect x="88" y="38" width="90" height="7" rx="3"/>
        <rect x="88" y="54" width="130" height="7" rx="3"/><rect x="88" y="70" width="80" height="7" rx="3"/></g>
        <rect x="160" y="112" width="80" height="36" rx="6" fill="#fff3b0" stroke="#c77700" stroke-width="4"/>
        <g fill="#222"><rect x="170" y="124" width="10" height="13" rx="2"/><rect x="183" y="124" width="10" height="13" rx="2"/><rect x="196" y="124" width="10" height="13" rx="2"/>
        <rect x="209" y="124" width="10" height="13" rx="2"/><rect x="222" y="124" width="10" height="13" rx="2"/></g>
        </svg>
        """#

    /// A passport lying open on the reader, photo page down, with the reader's field.
    static let reader = #"""
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 260 170" role="img">
        <rect x="20" y="96" width="220" height="60" rx="10" fill="#42505f"/>
        <rect x="34" y="104" width="192" height="40" rx="6" fill="#5d6d7e"/>
        <path d="M130 118c-10-8-10-24 0-32M122 122c-16-12-16-36 0-48M114 126c-22-16-22-48 0-64" fill="none"
          stroke="#f0a500" stroke-width="5" stroke-linecap="round"/>
        <path d="M40 100l44-60h92l44 60z" fill="#7a2430" stroke="#4a121a" stroke-width="3"/>
        <path d="M130 40v60" stroke="#4a121a" stroke-width="3"/>
        <path d="M70 14l10 18M190 14l-10 18M130 4v22" stroke="#0b4f8a" stroke-width="5" stroke-linecap="round"/>
        </svg>
        """#

    /// The face guide drawn over the camera preview: an oval where the face goes, the rest dimmed.
    static let faceGuide = #"""
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 640 480" preserveAspectRatio="none" aria-hidden="true">
        <path fill="rgba(0,0,0,0.45)" fill-rule="evenodd" d="M0 0h640v480H0z M320 60a130 170 0 1 0 0.1 0z"/>
        <ellipse cx="320" cy="230" rx="130" ry="170" fill="none" stroke="#f0a500" stroke-width="8" stroke-dasharray="24 14"/>
        </svg>
        """#
}
