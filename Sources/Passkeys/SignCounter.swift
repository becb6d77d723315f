import CredentialStore
import FoundationEssentials
import TesseraCore

/// Hands out strictly increasing signature counters per credential without a disk sync per assertion:
/// a block of values is reserved durably ahead of use, and after a crash counting resumes above the block.
/// Use times are kept in memory and written by `flushUsage()` (periodically and on a graceful stop).
actor SignCounterAllocator {
    private struct Entry { var next: Int64; var reserved: Int64 }
    private var entries: [ByteKey: Entry] = [:]
    /// Last use of each credential not yet written to the store.
    private var unflushedUse: [ByteKey: Date] = [:]
    private var reserving: [ByteKey: Task<Void, any Error>] = [:]
    private let store: CredentialStore
    let blockSize: Int64

    init(store: CredentialStore, blockSize: Int64 = 1024) {
        self.store = store
        self.blockSize = blockSize
    }

    /// The next counter value for `credentialId`, durable before it is returned.
    /// `persistedCeiling` is the credential's `counterReserved` as read from the store.
    func next(for credentialId: [UInt8], persistedCeiling: Int64) async throws(TesseraError) -> UInt32 {
        let key = ByteKey(credentialId)
        while true {
            var entry = entries[key] ?? Entry(next: persistedCeiling + 1, reserved: persistedCeiling)
            if entry.next <= entry.reserved {
                let value = entry.next
                guard value <= Int64(UInt32.max) else {
                    throw TesseraError(.tokenError, "signature counter exhausted for this credential")
                }
                entry.next += 1
                entries[key] = entry
                unflushedUse[key] = Date()
                return UInt32(value)
            }
            entries[key] = entry
            if let inflight = reserving[key] {
                // Another request is reserving the next block; its task clears `reserving` before it completes.
                _ = try? await inflight.value
                continue
            }
            let ceiling = entry.next + blockSize - 1
            let task = Task { try await self.reserve(key, upTo: ceiling) }
            reserving[key] = task
            do { try await task.value } catch {
                throw (error as? TesseraError) ?? TesseraError(.storageError, "\(error)")
            }
        }
    }

    private func reserve(_ id: ByteKey, upTo ceiling: Int64) async throws(TesseraError) {
        defer { reserving[id] = nil }
        try await store.reserveCounter(id: id.bytes, upTo: ceiling)
        if var e = entries[id] {
            e.reserved = max(e.reserved, ceiling)
            entries[id] = e
        }
    }

    /// Writes the last use times gathered since the previous flush in one transaction.
    func flushUsage() async throws(TesseraError) {
        guard !unflushedUse.isEmpty else { return }
        let pending = unflushedUse
        unflushedUse = [:]
        let times = Dictionary(uniqueKeysWithValues: pending.map { ($0.key.bytes, $0.value) })
        do { try await store.recordUse(times) } catch {
            for (id, at) in pending where unflushedUse[id] == nil { unflushedUse[id] = at }
            throw error
        }
    }

    /// Forgets a deleted credential.
    func forget(_ credentialId: [UInt8]) {
        entries[ByteKey(credentialId)] = nil
        unflushedUse[ByteKey(credentialId)] = nil
    }
}
