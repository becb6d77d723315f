import CSQLite
import FoundationEssentials
import TesseraCore

/// The one place the store meets libsqlite3: a connection with its prepared-statement cache, statements bound and
/// stepped, rows read by typed columns. Raw pointers never leave this file; the stores above see `SQLConnection`,
/// `SQLRow` and the `SQLArgument`/`SQLColumn` conversions only.

/// An error SQLite reported: its (extended) result code, its message and the statement it ran.
struct SQLiteError: Error, CustomStringConvertible {
    let code: Int32
    let message: String
    let sql: String?

    var description: String {
        "SQLite error \(code): \(message)" + (sql.map { " - while executing `\($0)`" } ?? "")
    }
}

/// A value bound into a statement.
enum SQLValue {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob(Data)
}

/// What can be bound into a statement as one `?`.
protocol SQLArgument { var sqlValue: SQLValue { get } }

extension String: SQLArgument { var sqlValue: SQLValue { .text(self) } }
extension Int64: SQLArgument { var sqlValue: SQLValue { .integer(self) } }
extension Int: SQLArgument { var sqlValue: SQLValue { .integer(Int64(self)) } }
extension UInt32: SQLArgument { var sqlValue: SQLValue { .integer(Int64(self)) } }
extension Bool: SQLArgument { var sqlValue: SQLValue { .integer(self ? 1 : 0) } }
extension Double: SQLArgument { var sqlValue: SQLValue { .real(self) } }
extension Data: SQLArgument { var sqlValue: SQLValue { .blob(self) } }
/// A date is written as `DatabaseTimestamp` text.
extension Date: SQLArgument { var sqlValue: SQLValue { .text(DatabaseTimestamp.text(self)) } }
extension Optional: SQLArgument where Wrapped: SQLArgument { var sqlValue: SQLValue { self?.sqlValue ?? .null } }
extension RawRepresentable where RawValue == String { var sqlValue: SQLValue { .text(rawValue) } }

/// What a column can be read as (`SQLRow.get`). A NULL reads only as an `Optional`.
protocol SQLColumn {
    static func read(_ row: SQLRow, _ index: Int32) throws(SQLiteError) -> Self
}

/// The current row of a statement being stepped; valid only inside the body it was given to.
struct SQLRow {
    fileprivate let statement: OpaquePointer

    /// Column `index` (from 0) as `T`.
    func get<T: SQLColumn>(_ index: Int, as type: T.Type = T.self) throws(SQLiteError) -> T {
        try T.read(self, Int32(index))
    }

    /// Column `index` as the string-valued enum `T`; an unknown value is an error.
    func get<T: RawRepresentable>(_ index: Int, as type: T.Type = T.self) throws(SQLiteError) -> T
    where T.RawValue == String {
        let raw: String = try get(index)
        guard let value = T(rawValue: raw) else { throw mismatch(Int32(index), "\(T.self)") }
        return value
    }

    /// Column `index` as the string-valued enum `T`, nil for NULL.
    func get<T: RawRepresentable>(_ index: Int, as type: T?.Type = T?.self) throws(SQLiteError) -> T?
    where T.RawValue == String {
        isNull(Int32(index)) ? nil : try get(index, as: T.self)
    }

    func isNull(_ index: Int32) -> Bool { sqlite3_column_type(statement, index) == SQLITE_NULL }

    fileprivate func columnType(_ index: Int32) -> Int32 { sqlite3_column_type(statement, index) }

    fileprivate func mismatch(_ index: Int32, _ type: String) -> SQLiteError {
        let name = sqlite3_column_name(statement, index).map { String(cString: $0) } ?? "\(index)"
        return SQLiteError(
            code: SQLITE_MISMATCH, message: "column \(name) cannot be read as \(type)",
            sql: sqlite3_sql(statement).map { String(cString: $0) })
    }

    fileprivate func bytes(_ index: Int32, blob: Bool) -> UnsafeRawBufferPointer {
        let base =
            blob ? sqlite3_column_blob(statement, index) : UnsafeRawPointer(sqlite3_column_text(statement, index))
        let count = Int(sqlite3_column_bytes(statement, index))
        return UnsafeRawBufferPointer(start: count > 0 ? base : nil, count: count)
    }

    fileprivate func int64(_ index: Int32, _ type: String) throws(SQLiteError) -> Int64 {
        switch columnType(index) {
        case SQLITE_INTEGER: return sqlite3_column_int64(statement, index)
        case SQLITE_FLOAT:
            guard let v = Int64(exactly: sqlite3_column_double(statement, index)) else { throw mismatch(index, type) }
            return v
        default: throw mismatch(index, type)
        }
    }
}

extension String: SQLColumn {
    static func read(_ row: SQLRow, _ index: Int32) throws(SQLiteError) -> String {
        let type = row.columnType(index)
        guard type == SQLITE_TEXT || type == SQLITE_BLOB else { throw row.mismatch(index, "String") }
        return String(decoding: row.bytes(index, blob: type == SQLITE_BLOB), as: UTF8.self)
    }
}

extension Data: SQLColumn {
    static func read(_ row: SQLRow, _ index: Int32) throws(SQLiteError) -> Data {
        let type = row.columnType(index)
        guard type == SQLITE_BLOB || type == SQLITE_TEXT else { throw row.mismatch(index, "Data") }
        return Data(row.bytes(index, blob: type == SQLITE_BLOB))
    }
}

extension Int64: SQLColumn {
    static func read(_ row: SQLRow, _ index: Int32) throws(SQLiteError) -> Int64 { try row.int64(index, "Int64") }
}

extension Int: SQLColumn {
    static func read(_ row: SQLRow, _ index: Int32) throws(SQLiteError) -> Int {
        guard let v = Int(exactly: try row.int64(index, "Int")) else { throw row.mismatch(index, "Int") }
        return v
    }
}

extension UInt32: SQLColumn {
    static func read(_ row: SQLRow, _ index: Int32) throws(SQLiteError) -> UInt32 {
        guard let v = UInt32(exactly: try row.int64(index, "UInt32")) else { throw row.mismatch(index, "UInt32") }
        return v
    }
}

extension Bool: SQLColumn {
    static func read(_ row: SQLRow, _ index: Int32) throws(SQLiteError) -> Bool { try row.int64(index, "Bool") != 0 }
}

extension Double: SQLColumn {
    static func read(_ row: SQLRow, _ index: Int32) throws(SQLiteError) -> Double {
        let type = row.columnType(index)
        guard type == SQLITE_FLOAT || type == SQLITE_INTEGER else { throw row.mismatch(index, "Double") }
        return sqlite3_column_double(row.statement, index)
    }
}

/// A date column: `DatabaseTimestamp` text, or a number of seconds since 1970.
extension Date: SQLColumn {
    static func read(_ row: SQLRow, _ index: Int32) throws(SQLiteError) -> Date {
        switch row.columnType(index) {
        case SQLITE_TEXT:
            guard let date = DatabaseTimestamp.date(utf8: [UInt8](row.bytes(index, blob: false))) else {
                throw row.mismatch(index, "Date")
            }
            return date
        case SQLITE_INTEGER, SQLITE_FLOAT:
            return Date(timeIntervalSince1970: sqlite3_column_double(row.statement, index))
        default: throw row.mismatch(index, "Date")
        }
    }
}

extension Optional: SQLColumn where Wrapped: SQLColumn {
    static func read(_ row: SQLRow, _ index: Int32) throws(SQLiteError) -> Wrapped? {
        row.isNull(index) ? nil : try Wrapped.read(row, index)
    }
}

/// One SQLite connection and its prepared statements. Not thread-safe: one thread uses it at a time (the
/// `TesseraDatabase` thread that owns it). `@unchecked Sendable` because it is handed to that thread once, after the
/// migrations ran on the opening thread, and only that thread's jobs touch it from then on.
final class SQLConnection: @unchecked Sendable {
    private let handle: OpaquePointer
    /// Prepared statements by SQL text, reset after each use. A statement in use is out of the cache, so the same
    /// SQL run again inside a row's body prepares a second one.
    private var cache: [String: OpaquePointer] = [:]

    /// Opens (creating when `create`) the database at `path`.
    init(path: String, create: Bool) throws(SQLiteError) {
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(db)
            throw SQLiteError(code: rc, message: message, sql: nil)
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        // Another process (or another TesseraDatabase on the same file) holding the write lock is waited for.
        sqlite3_busy_timeout(db, 5000)
    }

    deinit {
        for statement in cache.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(handle)
    }

    /// Runs `sql`, one or more statements without arguments (pragmas, migrations).
    func execute(_ sql: String) throws(SQLiteError) {
        let rc = sqlite3_exec(handle, sql, nil, nil, nil)
        guard rc == SQLITE_OK else { throw error(rc, sql) }
    }

    /// Runs one statement; the number of rows it changed.
    @discardableResult
    func run(_ sql: String, _ arguments: [any SQLArgument] = []) throws -> Int {
        try withStatement(sql, arguments) { statement in
            while try step(statement, sql) {}
        }
        return Int(sqlite3_changes(handle))
    }

    /// Runs a query, giving each row to `body`.
    func forEach(
        _ sql: String, _ arguments: [any SQLArgument] = [], _ body: (SQLRow) throws -> Void
    ) throws {
        try withStatement(sql, arguments) { statement in
            while try step(statement, sql) { try body(SQLRow(statement: statement)) }
        }
    }

    /// Every row of a query, as `map` reads it.
    func all<T>(_ sql: String, _ arguments: [any SQLArgument] = [], _ map: (SQLRow) throws -> T) throws -> [T] {
        var out: [T] = []
        try forEach(sql, arguments) { out.append(try map($0)) }
        return out
    }

    /// The first row of a query as `map` reads it; nil when there is none.
    func first<T>(_ sql: String, _ arguments: [any SQLArgument] = [], _ map: (SQLRow) throws -> T) throws -> T? {
        try withStatement(sql, arguments) { statement in
            try step(statement, sql) ? try map(SQLRow(statement: statement)) : nil
        }
    }

    /// The first column of the first row as `T`; nil when there is no row.
    func value<T: SQLColumn>(_ sql: String, _ arguments: [any SQLArgument] = [], as type: T.Type = T.self) throws -> T?
    {
        try first(sql, arguments) { row in try row.get(0, as: T.self) }
    }

    /// Runs `body` in a transaction (`BEGIN IMMEDIATE`: the write lock is taken first, so the transaction never
    /// fails half-way for another writer; `BEGIN DEFERRED` for reads): committed when it returns, rolled back when it
    /// throws.
    func transaction<T>(immediate: Bool, _ body: () throws -> T) throws -> T {
        try run(immediate ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED")
        do {
            let value = try body()
            try run("COMMIT")
            return value
        } catch {
            if sqlite3_get_autocommit(handle) == 0 { _ = try? run("ROLLBACK") }
            throw error
        }
    }

    private func withStatement<T>(
        _ sql: String, _ arguments: [any SQLArgument], _ body: (OpaquePointer) throws -> T
    ) throws -> T {
        let statement = try cache.removeValue(forKey: sql) ?? prepare(sql)
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
            if cache[sql] == nil { cache[sql] = statement } else { sqlite3_finalize(statement) }
        }
        try bind(arguments, to: statement, sql)
        return try body(statement)
    }

    private func prepare(_ sql: String) throws(SQLiteError) -> OpaquePointer {
        var statement: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard rc == SQLITE_OK, let statement else { throw error(rc, sql) }
        return statement
    }

    private func bind(_ arguments: [any SQLArgument], to statement: OpaquePointer, _ sql: String) throws(SQLiteError) {
        guard Int(sqlite3_bind_parameter_count(statement)) == arguments.count else {
            throw SQLiteError(
                code: SQLITE_RANGE, message: "\(arguments.count) arguments for the statement's parameters", sql: sql)
        }
        // SQLite copies what it is given (SQLITE_TRANSIENT).
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        for (i, argument) in arguments.enumerated() {
            let index = Int32(i + 1)
            let rc: Int32
            switch argument.sqlValue {
            case .null: rc = sqlite3_bind_null(statement, index)
            case .integer(let v): rc = sqlite3_bind_int64(statement, index, v)
            case .real(let v): rc = sqlite3_bind_double(statement, index, v)
            case .text(let s) where s.isEmpty:
                // '' (the nil pointer of an empty buffer would bind NULL).
                rc = sqlite3_bind_text(statement, index, "", 0, transient)
            case .text(var s):
                rc = s.withUTF8 { utf8 in
                    utf8.withMemoryRebound(to: CChar.self) { chars in
                        sqlite3_bind_text(statement, index, chars.baseAddress, Int32(chars.count), transient)
                    }
                }
            case .blob(let data):
                rc = data.withUnsafeBytes { bytes in
                    // An empty blob stays a blob of no bytes (a nil pointer would bind NULL).
                    guard let base = bytes.baseAddress, bytes.count > 0 else {
                        return sqlite3_bind_zeroblob(statement, index, 0)
                    }
                    return sqlite3_bind_blob(statement, index, base, Int32(bytes.count), transient)
                }
            }
            guard rc == SQLITE_OK else { throw error(rc, sql) }
        }
    }

    /// Steps `statement`: true when a row is ready, false when it is done.
    private func step(_ statement: OpaquePointer, _ sql: String) throws(SQLiteError) -> Bool {
        switch sqlite3_step(statement) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        case let rc: throw error(rc, sql)
        }
    }

    private func error(_ rc: Int32, _ sql: String) -> SQLiteError {
        SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(handle)), sql: sql)
    }
}
