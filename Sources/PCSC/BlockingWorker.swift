import Dispatch
import Foundation
import TesseraCore

/// A serial queue with its own thread for blocking SCard* calls, so they never occupy the cooperative pool.
final class BlockingWorker: Sendable {
    private let queue: DispatchQueue

    init(label: String) {
        queue = DispatchQueue(label: label, qos: .userInitiated)
    }

    func run<T: Sendable>(_ body: @escaping @Sendable () throws(TesseraError) -> T) async throws(TesseraError) -> T {
        let result: Result<T, TesseraError> = await withCheckedContinuation { continuation in
            queue.async {
                continuation.resume(returning: Result { () throws(TesseraError) -> T in try body() })
            }
        }
        return try result.get()
    }

    func async(_ body: @escaping @Sendable () -> Void) { queue.async(execute: body) }
}


/// State confined to one BlockingWorker's queue (never touched elsewhere, hence unchecked).
final class QueueConfined<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}
