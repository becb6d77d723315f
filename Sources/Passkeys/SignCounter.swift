import TesseraCore
import CredentialStore

/// Hands out strictly increasing signature counters per credential without a disk sync per assertion:
/// a block of values is reserved durably ahead of use, and after a crash counting resumes above the block.
actor SignCounterAllocator {
    private struct Entry { var next: Int64; var reserved: Int64 }
    private var entries: [[UInt8]: Entry] = [:]
    private var reserving: [[UInt8]: Task<Void, any Error>] = [:]
    private let store: CredentialStore
    let blockSize: Int64

    init(store: CredentialStore, blockSize: Int64 = 1024) {
        self.store = store
        self.blockSize = blockSize
    }

    /// The next counter value for `credentialId`, durable before it is returned.
    /// `persistedCeiling` is the credential's `counterReserved` as read from the store.
    func next(for credentialId: [UInt8], persistedCeiling: Int64) async throws(TesseraError) -> UInt32 {
        while true {
            var entry = entries[credentialId] ?? Entry(next: persistedCeiling + 1, reserved: persistedCeiling)
            if entry.next <= entry.reserved {
                let value = entry.next
                guard value <= Int64(UInt32.max) else {
                    throw TesseraError(.tokenError, "signature counter exhausted for this credential")
                }
                entry.next += 1
                entries[credentialId] = entry
                return UInt32(value)
            }
            entries[credentialId] = entry
            if let inflight = reserving[credentialId] {
                // Another request is reserving the next block; its task clears `reserving` before it completes.
                _ = try? await inflight.value
                continue
            }
            let ceiling = entry.next + blockSize - 1
            let task = Task { try await self.reserve(credentialId, upTo: ceiling) }
            reserving[credentialId] = task
            do { try await task.value } catch {
                throw (error as? TesseraError) ?? TesseraError(.storageError, "\(error)")
            }
        }
    }

    private func reserve(_ id: [UInt8], upTo ceiling: Int64) async throws(TesseraError) {
        defer { reserving[id] = nil }
        try await store.reserveCounter(id: id, upTo: ceiling)
        if var e = entries[id] {
            e.reserved = max(e.reserved, ceiling)
            entries[id] = e
        }
    }

    /// Forgets a deleted credential.
    func forget(_ credentialId: [UInt8]) { entries[credentialId] = nil }
}
