import FoundationEssentials
import TesseraCore

/// JPEG helpers for the face image of emulated documents.
public enum FacePhoto {
    /// A built-in 24×32 greyscale baseline JPEG (a rough head-and-shoulders silhouette), 180 bytes.
    public static let builtIn: [UInt8] = [UInt8](
        Data(
            base64Encoded:
                "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAj/wAALCAAgABgBAREA/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAFBABAAAAAAAAAAAAAAAAAAAAAP/aAAgBAQAAPwDzsB9BAAB1rknWv//Z"
        ) ?? Data())

    /// Width and height from the first SOFn marker, nil when the bytes are not a JPEG with a frame header.
    public static func dimensions(_ jpeg: [UInt8]) -> (width: Int, height: Int)? {
        guard jpeg.count >= 4, jpeg[0] == 0xFF, jpeg[1] == 0xD8 else { return nil }
        var i = 2
        while i + 4 <= jpeg.count {
            guard jpeg[i] == 0xFF else { return nil }
            let marker = jpeg[i + 1]
            if marker == 0xFF { i += 1; continue }
            if marker == 0xD8 || marker == 0x01 || (0xD0...0xD7).contains(marker) { i += 2; continue }
            let length = Int(jpeg[i + 2]) << 8 | Int(jpeg[i + 3])
            guard length >= 2 else { return nil }
            let isFrame = (0xC0...0xCF).contains(marker) && marker != 0xC4 && marker != 0xC8 && marker != 0xCC
            if isFrame {
                guard i + 9 <= jpeg.count else { return nil }
                let height = Int(jpeg[i + 5]) << 8 | Int(jpeg[i + 6])
                let width = Int(jpeg[i + 7]) << 8 | Int(jpeg[i + 8])
                return width > 0 && height > 0 ? (width, height) : nil
            }
            if marker == 0xDA || marker == 0xD9 { return nil }
            i += 2 + length
        }
        return nil
    }

    /// Width and height of a JPEG 2000 image: the `ihdr` box of a JP2 file, or the SIZ marker of a bare
    /// codestream; nil otherwise.
    public static func jpeg2000Dimensions(_ b: [UInt8]) -> (width: Int, height: Int)? {
        func u32(_ i: Int) -> Int { Int(b[i]) << 24 | Int(b[i + 1]) << 16 | Int(b[i + 2]) << 8 | Int(b[i + 3]) }
        if b.starts(with: [0xFF, 0x4F, 0xFF, 0x51]), b.count >= 24 {
            let width = u32(8) - u32(16), height = u32(12) - u32(20)
            return width > 0 && height > 0 ? (width, height) : nil
        }
        guard b.starts(with: [0x00, 0x00, 0x00, 0x0C, 0x6A, 0x50, 0x20, 0x20]) else { return nil }
        let ihdr = Array("ihdr".utf8)
        var i = 0
        while i + 12 <= min(b.count, 4096) {
            if Array(b[i..<i + 4]) == ihdr {
                let height = u32(i + 4), width = u32(i + 8)
                return width > 0 && height > 0 ? (width, height) : nil
            }
            i += 1
        }
        return nil
    }

    /// Inserts comment (COM) segments right after SOI until the JPEG is about `size` bytes (never shorter
    /// than the input; segments carry at most 65533 bytes each). The result is still a valid JPEG.
    /// Throws INVALID_INPUT when `jpeg` does not start with SOI.
    public static func padded(_ jpeg: [UInt8], to size: Int) throws(TesseraError) -> [UInt8] {
        guard jpeg.count >= 2, jpeg[0] == 0xFF, jpeg[1] == 0xD8 else { throw .invalidInput("not a JPEG image") }
        var missing = size - jpeg.count
        var segments: [UInt8] = []
        let filler = Array("Tessera test document padding. ".utf8)
        while missing >= 5 {
            let payload = min(missing - 4, 65533)
            segments += [0xFF, 0xFE, UInt8((payload + 2) >> 8), UInt8((payload + 2) & 0xFF)]
            segments += (0..<payload).map { filler[$0 % filler.count] }
            missing -= payload + 4
        }
        return Array(jpeg[0..<2]) + segments + Array(jpeg[2...])
    }
}
