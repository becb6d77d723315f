/// The FIDO HID report descriptor and Linux `/dev/uhid` event encoding (`struct uhid_event` of linux/uhid.h:
/// packed, host byte order), for a virtual FIDO device whose hidraw node browsers open. Pure: the transport
/// writes and reads these byte strings on `/dev/uhid`.
public enum UHID {
    /// `sizeof(struct uhid_event)`: every event is written with this length.
    public static let eventSize = 4380
    /// `UHID_DATA_MAX` and `HID_MAX_DESCRIPTOR_SIZE`.
    public static let dataMax = 4096

    /// `enum uhid_event_type`.
    public enum EventType: UInt32, Sendable {
        case destroy = 1, start = 2, stop = 3, open = 4, close = 5, output = 6, getReport = 9, getReportReply = 10
        case create2 = 11, input2 = 12, setReport = 13, setReportReply = 14
    }

    /// BUS_USB from linux/input.h.
    public static let busUSB: UInt16 = 0x03

    /// A FIDO authenticator's report descriptor (CTAP 2.1 §11.2.8.1): usage page 0xF1D0, usage CTAPHID (1),
    /// 64-byte input and output reports without report id.
    public static let fidoReportDescriptor: [UInt8] = [
        0x06, 0xD0, 0xF1,  // Usage Page (FIDO Alliance)
        0x09, 0x01,  // Usage (CTAPHID)
        0xA1, 0x01,  // Collection (Application)
        0x09, 0x20,  //   Usage (Input Report Data)
        0x15, 0x00,  //   Logical Minimum (0)
        0x26, 0xFF, 0x00,  //   Logical Maximum (255)
        0x75, 0x08,  //   Report Size (8)
        0x95, 0x40,  //   Report Count (64)
        0x81, 0x02,  //   Input (Data, Variable, Absolute)
        0x09, 0x21,  //   Usage (Output Report Data)
        0x15, 0x00,  //   Logical Minimum (0)
        0x26, 0xFF, 0x00,  //   Logical Maximum (255)
        0x75, 0x08,  //   Report Size (8)
        0x95, 0x40,  //   Report Count (64)
        0x91, 0x02,  //   Output (Data, Variable, Absolute)
        0xC0,  // End Collection
    ]

    // Offsets in struct uhid_event (type: u32, then the packed union).
    static let create2Name = 4, create2Phys = 132, create2Uniq = 196, create2RDSize = 260, create2Bus = 262
    static let create2Vendor = 264, create2Product = 268, create2Version = 272, create2Country = 276,
        create2RDData = 280
    static let input2Size = 4, input2Data = 6
    static let outputData = 4, outputSize = 4100, outputRType = 4102

    /// UHID_CREATE2 with the FIDO report descriptor.
    public static func create2(
        name: String, phys: String = "", uniq: String = "", vendor: UInt32, product: UInt32,
        version: UInt32 = 0, country: UInt32 = 0,
        descriptor: [UInt8] = fidoReportDescriptor
    ) -> [UInt8] {
        var e = event(.create2)
        put(Array(name.utf8.prefix(127)), at: create2Name, in: &e)
        put(Array(phys.utf8.prefix(63)), at: create2Phys, in: &e)
        put(Array(uniq.utf8.prefix(63)), at: create2Uniq, in: &e)
        put(UInt16(descriptor.count), at: create2RDSize, in: &e)
        put(busUSB, at: create2Bus, in: &e)
        put(vendor, at: create2Vendor, in: &e)
        put(product, at: create2Product, in: &e)
        put(version, at: create2Version, in: &e)
        put(country, at: create2Country, in: &e)
        put(Array(descriptor.prefix(dataMax)), at: create2RDData, in: &e)
        return e
    }

    /// UHID_INPUT2 carrying one report to the host.
    public static func input2(_ report: [UInt8]) -> [UInt8] {
        var e = event(.input2)
        put(UInt16(min(report.count, dataMax)), at: input2Size, in: &e)
        put(Array(report.prefix(dataMax)), at: input2Data, in: &e)
        return e
    }

    /// UHID_DESTROY.
    public static func destroy() -> [UInt8] { event(.destroy) }

    /// An event read from `/dev/uhid`.
    public enum Event: Sendable, Equatable {
        case start, stop, open, close
        /// A 64-byte output report (a leading report number 0 is removed).
        case output([UInt8])
        case other(UInt32)
    }

    /// Parses an event read from `/dev/uhid`; nil when too short.
    public static func parse(_ bytes: [UInt8]) -> Event? {
        guard bytes.count >= 4 else { return nil }
        let type = get32(bytes, 0)
        switch EventType(rawValue: type) {
        case .start: return .start
        case .stop: return .stop
        case .open: return .open
        case .close: return .close
        case .output:
            guard bytes.count >= outputRType + 1 else { return nil }
            let size = min(Int(get16(bytes, outputSize)), dataMax)
            var data = Array(bytes[outputData..<outputData + size])
            if data.count == CTAPHID.reportSize + 1, data.first == 0 { data.removeFirst() }
            return .output(data)
        default: return .other(type)
        }
    }

    static func event(_ type: EventType) -> [UInt8] {
        var e = [UInt8](repeating: 0, count: eventSize)
        put(type.rawValue, at: 0, in: &e)
        return e
    }

    static func put(_ bytes: [UInt8], at offset: Int, in e: inout [UInt8]) {
        e.replaceSubrange(offset..<offset + bytes.count, with: bytes)
    }

    static func put<T: FixedWidthInteger>(_ value: T, at offset: Int, in e: inout [UInt8]) {
        // Host byte order, as the kernel reads the struct.
        withUnsafeBytes(of: value) { put(Array($0), at: offset, in: &e) }
    }

    static func get16(_ b: [UInt8], _ o: Int) -> UInt16 {
        var v: UInt16 = 0
        withUnsafeMutableBytes(of: &v) { $0.copyBytes(from: b[o..<o + 2]) }
        return v
    }

    static func get32(_ b: [UInt8], _ o: Int) -> UInt32 {
        var v: UInt32 = 0
        withUnsafeMutableBytes(of: &v) { $0.copyBytes(from: b[o..<o + 4]) }
        return v
    }
}
