import GRDB

/// The columns of one query's result, found by name once. GRDB's `decode(forColumn:)` finds a column by lowercasing the
/// name asked for and every column's name, for each value it decodes: 14 % of the push worker's database thread in a
/// `perf` profile of `beacon-bench fanout` (a claimed job has 23 columns).
struct Columns {
    private let positions: [String: Int]

    init(of row: Row) {
        var positions: [String: Int] = [:]
        for (index, name) in row.columnNames.enumerated() where positions[name] == nil { positions[name] = index }
        self.positions = positions
    }

    /// The value of column `name` in `row`, a row of the same result, with GRDB's conversions and errors.
    func decode<Value: DatabaseValueConvertible>(_ name: String, in row: Row, as type: Value.Type = Value.self) throws -> Value {
        // Not found as spelled (GRDB's lookup ignores case), or beyond this row (GRDB traps on an index out of range): by name.
        guard let index = positions[name], index < row.count else { return try row.decode(type, forColumn: name) }
        return try row.decode(type, atIndex: index)
    }
}
