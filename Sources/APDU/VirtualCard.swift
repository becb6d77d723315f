/// A smart card emulated in process. `VirtualCardLink` (VPCD) offers it to pcscd through a vsmartcard vpcd reader,
/// `NFCCardEmulator` (NFC) and `PN532Emulator` to a reader over the air.
public protocol VirtualCard: Sendable {
    /// The Answer-To-Reset the reader reports.
    var atr: [UInt8] { get async }
    func powerOn() async
    func powerOff() async
    func reset() async
    /// Answers one command APDU with a response APDU (data + SW1SW2).
    func process(_ command: [UInt8]) async -> [UInt8]
}
