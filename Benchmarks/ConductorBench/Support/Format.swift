#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Number formatting for tables, notes and charts, without Foundation's locale machinery.
enum Format {
    /// `1234567` → `1,234,567`.
    static func count(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var result = ""
        for (offset, digit) in digits.enumerated() {
            if offset > 0, (digits.count - offset) % 3 == 0 { result.append(",") }
            result.append(digit)
        }
        return value < 0 ? "-" + result : result
    }

    /// `value` with exactly `decimals` digits after the point.
    static func fixed(_ value: Double, _ decimals: Int) -> String {
        guard value.isFinite else { return value.isNaN ? "nan" : (value < 0 ? "-inf" : "inf") }
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let scaled = (value.magnitude * scale).rounded()
        let whole = Int(scaled / scale)
        let fraction = Int(scaled - Double(whole) * scale)
        let sign = value < 0 && scaled > 0 ? "-" : ""
        guard decimals > 0 else { return sign + count(whole) }
        let digits = String(fraction)
        return sign + count(whole) + "." + String(repeating: "0", count: decimals - digits.count) + digits
    }

    /// A measured figure with precision that suits its size: `3.14`, `152.3`, `563,109`.
    static func figure(_ value: Double) -> String {
        switch value.magnitude {
        case ..<10: fixed(value, 2)
        case ..<1_000: fixed(value, 1)
        default: fixed(value, 0)
        }
    }

    /// A speed-up: `0.00016×`, `1.30×`, `35.2×`, `1,234×`. Below 0.1, two significant digits.
    static func ratio(_ value: Double) -> String {
        guard value > 0, value < 0.1 else { return figure(value) + "×" }
        return fixed(value, Int(-log10(value).rounded(.down)) + 2) + "×"
    }

    /// Seconds for progress lines and notes: `0.25 s`, `14.1 s`, `1,450 s`.
    static func seconds(_ value: Double) -> String {
        switch value {
        case ..<1: fixed(value, 2) + " s"
        case ..<100: fixed(value, 1) + " s"
        default: fixed(value, 0) + " s"
        }
    }

    /// Seconds for time left and spent: `41 s`, `2 min 5 s`.
    static func minutes(_ value: Double) -> String {
        let seconds = Int(value.rounded())
        return seconds < 60 ? "\(seconds) s" : "\(seconds / 60) min \(seconds % 60) s"
    }

    /// A nanosecond figure in a readable unit: `850 ns`, `12.5 µs`, `3.2 ms`.
    static func duration(nanoseconds value: Double) -> String {
        switch value {
        case ..<1_000: figure(value) + " ns"
        case ..<1_000_000: figure(value / 1_000) + " µs"
        case ..<1_000_000_000: figure(value / 1_000_000) + " ms"
        default: figure(value / 1_000_000_000) + " s"
        }
    }

    /// Pads `text` to `width` columns, on the left (right-aligned) or the right.
    static func pad(_ text: String, _ width: Int, right: Bool = true) -> String {
        let padding = String(repeating: " ", count: max(0, width - text.count))
        return right ? padding + text : text + padding
    }
}
