import ArgumentParser

/// `tessera lab …`: instruments for NFC/smart-card labs (emulated cards and readers, traces).
/// Each lab tool is a subcommand defined in its own file and listed here.
struct Lab: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Lab tools: emulated passports and PIV cards, card emulation with libnfc, a software PN532, APDU traces.",
        subcommands: [
            LabMakeProfile.self, LabEmulatePassport.self, LabEmulatePIV.self, LabEmulate.self, LabPN532.self,
            LabTrace.self, LabMakeMDoc.self, LabMakeMDocReader.self, LabEmulateMDoc.self, LabMakeBadge.self,
        ])
}
