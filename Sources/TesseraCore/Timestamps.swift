import Foundation

extension Date {
    /// UTC, whole seconds: "2026-11-22T03:25:42Z" — the form of every timestamp the socket API returns.
    public var iso8601Seconds: String {
        formatted(
            .iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: false)
                .timeSeparator(.colon).timeZone(separator: .omitted))
    }
}
