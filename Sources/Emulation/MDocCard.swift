import APDU
import MDoc

/// An `MDocNFCHolder` as a card for vpcd or libnfc target mode (contactless ATR announcing extended length).
public struct MDocCard: VirtualCard {
    public let holder: MDocNFCHolder

    public init(holder: MDocNFCHolder) { self.holder = holder }

    public var atr: [UInt8] {
        let historical: [UInt8] = [0x80, 0x73, 0x00, 0x00, 0xC0]
        var atr: [UInt8] = [0x3B, 0x80 | UInt8(historical.count), 0x80, 0x01] + historical
        atr.append(atr.dropFirst().reduce(0, ^))
        return atr
    }
    public func powerOn() async {}
    public func powerOff() async {}
    public func reset() async {}
    public func process(_ command: [UInt8]) async -> [UInt8] { await holder.process(command) }
}
