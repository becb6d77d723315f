/// Polls `body` every 50 ms until it returns non-nil or `timeout` passes; then returns its last answer. For tests
/// that wait for a real component (pcscd seeing a card, a token appearing).
public func eventually<T>(_ timeout: Duration = .seconds(10), _ body: () async -> T?) async -> T? {
    let deadline = ContinuousClock.now.advanced(by: timeout)
    while ContinuousClock.now < deadline {
        if let value = await body() { return value }
        try? await Task.sleep(for: .milliseconds(50))
    }
    return await body()
}
