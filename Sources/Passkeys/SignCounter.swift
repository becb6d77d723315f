import CredentialStore
import FoundationEssentials
import TesseraCore

/// Hands out strictly increasing signature counters per credential without a disk sync per assertion:
/// a block of values is reserved durably ahead of use, and after a crash counting resumes above the block.
/// Use times are kept in memory and written by `flushUsage()` (periodically and on a graceful stop).
actor SignCounterAllocator {
    private struct Entry {
        var next: Int64
        var reserved: Int64
        /// The last use not yet written to the store.
        var unflushedUse: Date?

        /// The next value when the block reserved still has one (nil: a new block is needed).
        mutating func take(at now: Date) throws(TesseraError) -> UInt32? {
            guard next <= reserved else { return nil }
            guard next <= Int64(UInt32.max) else {
                throw TesseraError(.tokenError, "signature counter exhausted for this credential")
            }
            defer { next += 1 }
            unflushedUse = now
            return UInt32(next)
        }
    }
    private struct Counters {
        var entries: [ByteKey: Entry] = [:]
    }
    /// Read and written under its lock, by the actor and by `next`'s path that needs no reservation.
    private nonisolated let counters = Locked(Counters())
    private var reserving: [ByteKey: Task<Void, any Error>] = [:]
    private let store: CredentialStore
    let blockSize: Int64

    init(store: CredentialStore, blockSize: Int64 = 1024) {
        self.store = store
        self.blockSize = blockSize
    }

    /// The next counter value for `credentialId`, durable before it is returned.
    /// `persistedCeiling` is the credential's `counterReserved` as read from the store.
    /// A value inside the block already reserved is taken under the lock, without a hop to the actor; only the
    /// reservation of the next block goes through it.
    nonisolated(nonsending) func next(for credentialId: [UInt8], persistedCeiling: Int64) async throws(TesseraError)
        -> UInt32
    {
        let key = ByteKey(credentialId)
        if let value = try takeReserved(key, persistedCeiling: persistedCeiling) { return value }
        return try await nextReserving(key, persistedCeiling: persistedCeiling)
    }

    /// The next value when the block reserved durably still has one (nil when a new block is needed).
    private nonisolated func takeReserved(_ key: ByteKey, persistedCeiling: Int64) throws(TesseraError) -> UInt32? {
        let now = Date()
        return try counters.withLock { c throws(TesseraError) -> UInt32? in
            // One lookup, the entry changed in place.
            try c.entries[key, default: Entry(next: persistedCeiling + 1, reserved: persistedCeiling)].take(at: now)
        }
    }

    private func nextReserving(_ key: ByteKey, persistedCeiling: Int64) async throws(TesseraError) -> UInt32 {
        while true {
            if let value = try takeReserved(key, persistedCeiling: persistedCeiling) { return value }
            if let inflight = reserving[key] {
                // Another request is reserving the next block; its task clears `reserving` before it completes.
                _ = try? await inflight.value
                continue
            }
            guard let next = counters.withLock({ $0.entries[key]?.next }) else { continue }
            let ceiling = next + blockSize - 1
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
        counters.withLock { c in
            if var e = c.entries[id] {
                e.reserved = max(e.reserved, ceiling)
                c.entries[id] = e
            }
        }
    }

    /// Writes the last use times gathered since the previous flush in one transaction.
    func flushUsage() async throws(TesseraError) {
        let pending = counters.withLock { c in
            var pending: [ByteKey: Date] = [:]
            for (id, entry) in c.entries {
                guard let used = entry.unflushedUse else { continue }
                pending[id] = used
                c.entries[id]?.unflushedUse = nil
            }
            return pending
        }
        guard !pending.isEmpty else { return }
        let times = Dictionary(uniqueKeysWithValues: pending.map { ($0.key.bytes, $0.value) })
        do { try await store.recordUse(times) } catch {
            counters.withLock { c in
                for (id, at) in pending where c.entries[id] != nil && c.entries[id]?.unflushedUse == nil {
                    c.entries[id]?.unflushedUse = at
                }
            }
            throw error
        }
    }

    /// Forgets a deleted credential.
    func forget(_ credentialId: [UInt8]) {
        _ = counters.withLock { $0.entries.removeValue(forKey: ByteKey(credentialId)) }
    }
}
