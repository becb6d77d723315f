import FoundationEssentials
import TesseraRuntime

#if canImport(Glibc)
    import Glibc
#endif

/// `tessera-fuzz`: one libFuzzer binary holding every target; `TESSERA_FUZZ_TARGET` picks the target (scripts/fuzz.sh
/// sets it). Each target feeds the bytes to the production parsing entry points; a thrown `TesseraError` is the
/// expected outcome for malformed input, while a trap, an ASan report, a leak or a hang is a finding.
///
/// SwiftPM links an executable's `main` to the module's entry point, so this `@main` hands the command line to
/// libFuzzer's driver (`LLVMFuzzerRunDriver`, in the runtime `-sanitize=fuzzer` links) instead of libFuzzer's
/// own `main`.
@main
enum FuzzMain {
    typealias TestOneInput = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    typealias RunDriver =
        @convention(c) (
            UnsafeMutablePointer<CInt>, UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
            TestOneInput
        ) -> CInt

    static func main() {
        _ = selectedTarget
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "LLVMFuzzerRunDriver") else {
            OpenFile.standardError.write("tessera-fuzz: not linked with -sanitize=fuzzer\n")
            exit(2)
        }
        let runDriver = unsafeBitCast(symbol, to: RunDriver.self)
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(runDriver(&argc, &argv, fuzzOneInput))
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    selectedTarget.run(bytes)
    return 0
}

/// A named fuzz target.
struct FuzzTarget: Sendable {
    let name: String
    let run: @Sendable ([UInt8]) -> Void
}

let allTargets: [FuzzTarget] = [
    FuzzTarget(name: "jsonrpc", run: JSONRPCTarget.run),
    FuzzTarget(name: "cbor", run: CBORTarget.run),
    FuzzTarget(name: "tlv", run: TLVTarget.run),
    FuzzTarget(name: "apdu-sm", run: SecureMessagingTarget.run),
    FuzzTarget(name: "lds", run: LDSTarget.run),
    FuzzTarget(name: "sod", run: PassiveAuthenticationTarget.run),
    FuzzTarget(name: "mrz", run: MRZTarget.run),
    FuzzTarget(name: "jws", run: ActivationTokenTarget.run),
    FuzzTarget(name: "workflow", run: WorkflowTarget.run),
    FuzzTarget(name: "pn532", run: PN532Target.run),
    FuzzTarget(name: "vpcd", run: VPCDTarget.run),
    FuzzTarget(name: "sshagent", run: SSHAgentTarget.run),
    FuzzTarget(name: "mdoc", run: MDocTarget.run),
    FuzzTarget(name: "ctaphid", run: CTAPHIDTarget.run),
    FuzzTarget(name: "ctap2", run: CTAP2Target.run),
    FuzzTarget(name: "ecdsa", run: ECDSATarget.run),
    FuzzTarget(name: "facematch", run: FaceMatchTarget.run),
    FuzzTarget(name: "badge", run: BadgeTarget.run),
]

let selectedTarget: FuzzTarget = {
    let name = ProcessInfo.processInfo.environment["TESSERA_FUZZ_TARGET"] ?? ""
    if let target = allTargets.first(where: { $0.name == name }) { return target }
    OpenFile.standardError.write(
        "tessera-fuzz: set TESSERA_FUZZ_TARGET to one of: \(allTargets.map(\.name).joined(separator: " "))\n")
    exit(2)
}()

extension Array where Element == UInt8 {
    /// Splits off a leading selector byte (0 for empty input) and the rest.
    var selectorAndRest: (UInt8, [UInt8]) { (first ?? 0, Array(dropFirst())) }
}
