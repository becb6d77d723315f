/// The trust anchor and DG1 of the seed passport in Tests/Fuzz/corpus/sod (made by `tessera lab make-profile`).
enum FixedTrust {
    static let cscaDER: [UInt8] = []
    static let dg1: [UInt8] = []
}
